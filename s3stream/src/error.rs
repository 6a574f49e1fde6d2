//! Errors of streams and the engine.

use std::sync::Arc;
use std::time::Duration;

use mink_metadata::MetaError;

use crate::format::object::ObjectFormatError;
use crate::storage::StorageError;
use crate::wal::WalError;
use crate::wal::replay::ReplayError;

/// `Result` with [`StreamError`].
pub type Result<T, E = StreamError> = std::result::Result<T, E>;

/// What went wrong in a stream or engine operation.
///
/// Bad requests ([`BelowStart`](Self::BelowStart), [`BeyondBound`](Self::BeyondBound),
/// [`OffsetMismatch`](Self::OffsetMismatch), [`EmptyBatch`](Self::EmptyBatch)) change nothing.
/// [`Backpressure`](Self::Backpressure) and [`Storage`](Self::Storage) are worth retrying later.
/// [`Wal`](Self::Wal) means the node's WAL failed: the engine must be reopened.
/// [`Fenced`](Self::Fenced) means another owner opened the stream: this handle is dead.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// A read started below the stream's start offset (trimmed away).
    #[error("offset {offset} of stream {stream_id} is below its start offset {start}")]
    BelowStart {
        /// The stream.
        stream_id: u64,
        /// The offset asked for.
        offset: u64,
        /// The stream's start offset.
        start: u64,
    },
    /// A read started above the read bound (the confirm offset, or the next offset).
    #[error("offset {offset} of stream {stream_id} is beyond its read bound {bound}")]
    BeyondBound {
        /// The stream.
        stream_id: u64,
        /// The offset asked for.
        offset: u64,
        /// The bound.
        bound: u64,
    },
    /// An append named a base offset other than the stream's next offset.
    #[error(
        "append to stream {stream_id} expected base offset {expected}, but the next offset is {next}"
    )]
    OffsetMismatch {
        /// The stream.
        stream_id: u64,
        /// The base offset the caller wrote into its batch.
        expected: u64,
        /// The stream's next offset.
        next: u64,
    },
    /// An append covering no offsets.
    #[error("an append to stream {stream_id} must cover at least one offset")]
    EmptyBatch {
        /// The stream.
        stream_id: u64,
    },
    /// A trim beyond what is durable.
    #[error("cannot trim stream {stream_id} to {offset}: only offsets below {confirm} are durable")]
    TrimBeyondConfirm {
        /// The stream.
        stream_id: u64,
        /// The offset asked for.
        offset: u64,
        /// The confirm offset.
        confirm: u64,
    },
    /// The stream was closed or destroyed through this handle.
    #[error("stream {stream_id} is closed")]
    Closed {
        /// The stream.
        stream_id: u64,
    },
    /// The stream is already open in this engine.
    #[error("stream {stream_id} is already open on this node")]
    AlreadyOpen {
        /// The stream.
        stream_id: u64,
    },
    /// Another owner opened the stream with a newer epoch.
    #[error("stream {stream_id} was opened elsewhere: epoch {epoch} is fenced")]
    Fenced {
        /// The stream.
        stream_id: u64,
        /// This handle's epoch.
        epoch: u64,
    },
    /// Too many bytes are waiting to be compacted; the append waited and gave up.
    #[error(
        "stream {stream_id}: {pending} bytes await compaction (limit {limit}); waited {waited:?}, retry later"
    )]
    Backpressure {
        /// The stream.
        stream_id: u64,
        /// Bytes awaiting compaction on the node.
        pending: u64,
        /// The limit.
        limit: u64,
        /// How long the append waited.
        waited: Duration,
    },
    /// The batch is larger than the back-pressure budget could ever admit.
    #[error("a {len}-byte batch exceeds the node's {limit}-byte budget of uncompacted data")]
    BatchTooLarge {
        /// The batch length.
        len: usize,
        /// The budget.
        limit: u64,
    },
    /// A batch submitted with an [`AppendPermit`](crate::AppendPermit) reserved for fewer
    /// bytes than the batch holds.
    #[error("a {len}-byte batch was submitted with room reserved for {reserved} bytes")]
    PermitTooSmall {
        /// The batch length.
        len: usize,
        /// The bytes the permit reserved.
        reserved: usize,
    },
    /// A stream label longer than a stream manifest holds.
    #[error("a {len}-byte stream label is over the manifest's limit of {max} bytes")]
    LabelTooLong {
        /// The label's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The node's WAL failed; appends are refused until the engine is reopened.
    #[error(transparent)]
    Wal(#[from] WalError),
    /// Reading the WAL back at recovery failed.
    #[error("recovery failed: {0}")]
    Replay(Arc<ReplayError>),
    /// A metadata operation failed.
    #[error("metadata: {0}")]
    Metadata(Arc<MetaError>),
    /// An object-store operation failed.
    #[error("object storage: {0}")]
    Storage(Arc<StorageError>),
    /// A committed object is corrupt.
    #[error("committed object {key} is corrupt: {source}")]
    CorruptObject {
        /// The object's key.
        key: String,
        /// What is wrong with it.
        source: ObjectFormatError,
    },
    /// The metadata and the objects disagree (a bug or a lost object).
    #[error("inconsistent stream {stream_id}: {message}")]
    Inconsistent {
        /// The stream.
        stream_id: u64,
        /// What disagrees.
        message: String,
    },
    /// Reading through the block or index cache failed (the cause is inside).
    #[error("reading a committed object: {0}")]
    Cache(Arc<mink_cache::CacheError>),
    /// A failpoint armed by a test fired here (a simulated crash).
    #[error("failpoint {0} fired")]
    Failpoint(&'static str),
    /// The engine is shut down.
    #[error("the stream engine is shut down")]
    ShutDown,
}

impl From<MetaError> for StreamError {
    fn from(error: MetaError) -> Self {
        match error {
            MetaError::Fenced {
                stream_id, epoch, ..
            } => StreamError::Fenced { stream_id, epoch },
            other => StreamError::Metadata(Arc::new(other)),
        }
    }
}

impl From<StorageError> for StreamError {
    fn from(error: StorageError) -> Self {
        StreamError::Storage(Arc::new(error))
    }
}

impl From<ReplayError> for StreamError {
    fn from(error: ReplayError) -> Self {
        StreamError::Replay(Arc::new(error))
    }
}
