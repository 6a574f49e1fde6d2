//! The Mink node: configuration, the HTTP API, metrics and graceful shutdown.
//!
//! Data enters as HTTP appends (mink batches, an Arrow IPC stream, or NDJSON rows that the node
//! encodes into one batch), goes to the bucket's log tablet (`mink-tablet`) on the node's s3stream
//! engine, and leaves as range reads, long-polls and server-sent events bounded by the high
//! watermark (see `spec/reads.md`).
//!
//! - [`settings`]: every setting, a serde struct with defaults (TOML file, flags, environment).
//! - [`node`]: [`Node::builder`] assembles a node from components; [`NodeBuilder::from_settings`]
//!   builds them from settings (the binary's path).
//! - [`api`](crate::api): the routes (documented in the module and in the README).
//! - [`log`]: what the API needs of a bucket's log ([`BucketLog`]), the registry of open logs,
//!   and the ownership seam ([`log::Owner`]); [`tablets`] implements it over `mink-tablet`.
//! - [`format`], [`schema`]: wire formats and table schemas as JSON.
//! - [`metrics`]: `/metrics` in the Prometheus text format.
//! - [`error`]: the error kinds and their HTTP status codes.

mod api;
pub mod error;
pub mod format;
pub mod log;
pub mod metrics;
pub mod node;
pub mod schema;
pub mod settings;
pub mod tables;
pub mod tablets;

pub use api::records::{
    HIGH_WATERMARK, LOG_START, NEXT_OFFSET, SCHEMA_ID, SEQUENCE, UP_TO_DATE, WRITER_ID,
};
pub use error::{ApiError, ApiResult};
pub use log::{BucketLog, LogProvider};
pub use node::{Node, NodeBuilder, NodeError};
pub use settings::{DEFAULT_PORT, Settings};
