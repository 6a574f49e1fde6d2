//! The Mink node: configuration, the node core, the HTTP front end, metrics and graceful shutdown.
//!
//! Data enters as HTTP appends (mink batches, an Arrow IPC stream, or NDJSON rows that the node
//! encodes into one batch), goes to the bucket's log tablet (`mink-tablet`) on the node's s3stream
//! engine, and leaves as range reads, long-polls and server-sent events bounded by the high
//! watermark (see `spec/reads.md`).
//!
//! - [`settings`]: every setting, a serde struct with defaults (TOML file, flags, environment).
//! - [`node`]: [`Node::builder`] assembles a node from components; [`NodeBuilder::from_settings`]
//!   builds them from settings (the binary's path).
//! - [`auth`]: access control every front end shares: bearer tokens and their scopes.
//! - [`core`]: the node core every front end works through ([`NodeCore`]): settings, catalog,
//!   the registry of open bucket logs and the ownership seam, metrics, the writer-id allocator.
//! - `http`: the HTTP front end, the routes (documented in the module and in the README).
//! - `flight`: the Arrow Flight front end (docs/flight.md), served by the same listener code.
//! - [`bucket_log`]: what a front end needs of a bucket's log ([`BucketLog`]), the registry of
//!   open logs ([`bucket_log::Logs`]) with the ownership seam ([`bucket_log::Owner`]), and the
//!   implementation over `mink-tablet`.
//! - [`catalog`]: the tables and their decoded schema versions.
//! - [`cluster`]: the node's part in a cluster: membership, its lease, the acknowledgement fence.
//! - [`format`](mod@format): the wire formats of data, and table schemas as JSON.
//! - [`metrics`]: `/metrics` in the Prometheus text format.
//! - [`error`]: the error kinds; the HTTP front end gives them their status codes.

pub mod auth;
pub mod bucket_log;
mod budget;
pub mod catalog;
pub mod cluster;
pub mod core;
pub mod error;
mod flight;
pub mod format;
mod http;
mod kafka;
pub mod latency;
pub mod manifests;
pub mod metrics;
pub mod node;
pub mod readiness;
pub mod retention;
pub mod settings;
pub mod snapshots;

pub use bucket_log::{BucketLog, LogProvider};
pub use core::NodeCore;
pub use error::{ApiError, ApiResult};
pub use http::{
    HIGH_WATERMARK, LOG_START, NEXT_OFFSET, SCHEMA_ID, SEQUENCE, UP_TO_DATE, WRITER_ID,
};
pub use node::{Node, NodeBuilder, NodeError};
pub use settings::{DEFAULT_PORT, Settings};
