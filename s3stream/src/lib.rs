//! Streams of opaque batches on object storage: each stream is an ordered log with a start, a
//! confirm and a next offset; every stream of a node writes into one write-ahead log of small
//! objects, and a background compactor turns that log into large, read-optimised objects.
//!
//! Data enters through a [`Stream`] opened on an [`Engine`]: an append takes the next offsets,
//! lands in the stream's log cache and the node's WAL (one PUT per group commit), and its
//! [`PendingAppend`] resolves once the WAL object is durable, in submission order. Data leaves
//! through [`Stream::fetch`] as [`StreamBatch`]es: from the tail cache, the log cache, or
//! committed objects found through the metadata's object index and read through the block cache.
//! The crate never parses a batch: it keeps offsets and bytes.
//!
//! - [`engine`]: the engine of one node: its streams, back-pressure, compaction (rounds, merges,
//!   regrouping, garbage) and recovery at open.
//! - [`wal`]: the group-commit WAL writer and its replay at recovery.
//! - [`format`]: every byte layout written to storage (committed objects, WAL objects).
//! - [`storage`]: the object-storage trait and its backends.
//! - [`stages`]: the stages of an append, timed for the latency breakdown under load.
//! - [`rebuild`]: putting back the object records and stream ends a listing of the store finds
//!   (after a metadata snapshot was restored).
//! - [`error`], [`failpoints`]: the errors of streams and the engine; named crash points for tests.
//!
//! Metadata (streams, objects, the WAL registry) lives in `mink-metadata`, the caches in
//! `mink-cache`.

mod batch;
pub mod engine;
pub mod error;
pub mod failpoints;
pub mod format;
pub mod rebuild;
pub mod stages;
pub mod storage;
pub mod wal;

pub use batch::StreamBatch;
pub use engine::stream::{AppendPermit, Build, Offsets, PendingAppend, ReadBound, Stream};
pub use engine::{
    CompactionSettings, Engine, EngineBuilder, EngineMetrics, EngineSettings, Footprint,
    StoredPiece,
};
pub use error::{Result, StreamError};
pub use failpoints::Failpoints;
pub use stages::{AppendStage, StageObserver};
pub use storage::ObjectStorage;
pub use wal::{WalMetrics, WalSettings};
