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
pub mod storage;
pub mod wal;

pub use batch::StreamBatch;
pub use engine::stream::{AppendPermit, Build, Offsets, PendingAppend, ReadBound, Stream};
pub use engine::{CompactionSettings, Engine, EngineBuilder, EngineMetrics, EngineSettings};
pub use error::{Result, StreamError};

// The paths these items had before the crate was laid out by subsystem, so dependents keep
// compiling while they move to the re-exports above.
#[doc(hidden)]
pub use engine::stream;
#[doc(hidden)]
pub mod log_cache {
    pub use crate::StreamBatch;
}
