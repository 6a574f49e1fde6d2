//! Streams of opaque record batches whose write-ahead log is a sequence of small objects on an object
//! store, compacted in the background into read-optimised objects.
//!
//! The crate is filled in by the s3stream issue; until then it holds nothing.

mod batch;
mod duration_ms;
pub mod engine;
pub mod error;
pub mod failpoints;
pub mod format;
pub mod log_cache;
pub mod storage;
pub mod stream;
pub mod wal;

pub use batch::StreamBatch;
