//! The tablet's error type and the small taxonomy ([`ErrorKind`]) callers branch on (the server
//! maps it to HTTP status codes).
//!
//! Every rejected request changes nothing: a bad batch (one that would not decode against its
//! schema included), rows over a limit, an unknown schema, an out-of-order sequence, a new writer at
//! the cap, a read outside the log or a future timestamp are all detected before anything is
//! submitted to the stream. Storage, metadata and back-pressure errors are worth retrying later.

use std::sync::Arc;

use mink_metadata::MetaError;
use mink_s3stream::error::StreamError;

use crate::Isolation;

/// `Result` with [`TabletError`].
pub type Result<T, E = TabletError> = std::result::Result<T, E>;

/// What went wrong in a tablet operation.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TabletError {
    /// A batch of an append request failed the header checks (framing, magic, CRC, counts).
    #[error("batch {index} of the request is invalid: {source}")]
    InvalidBatch {
        /// Position of the batch in the request (0-based).
        index: usize,
        /// What the codec found.
        #[source]
        source: Arc<mink_codec::Error>,
    },
    /// An append request that the tablet refuses as a whole, before looking at sequences.
    #[error("invalid append request: {reason}")]
    InvalidRequest {
        /// Why.
        reason: String,
    },
    /// A batch names a schema id the table does not have.
    #[error(
        "batch {index} of the request has unknown schema id {schema_id}; register the schema first"
    )]
    UnknownSchema {
        /// Position of the batch in the request.
        index: usize,
        /// The schema id in the batch header.
        schema_id: i16,
    },
    /// An idempotent writer's batch is neither the next sequence nor a retained duplicate.
    #[error(
        "out-of-order sequence for writer {writer_id} in batch {index}: expected {expected}, got {received}"
    )]
    OutOfOrderSequence {
        /// Position of the batch in the request.
        index: usize,
        /// The writer.
        writer_id: i64,
        /// The sequence the tablet expects next from this writer.
        expected: i32,
        /// The sequence the batch carries.
        received: i32,
    },
    /// A batch's writer epoch is older than the writer's current one: that incarnation of the
    /// writer is fenced.
    #[error(
        "stale epoch for writer {writer_id} in batch {index}: epoch {epoch}, the writer is at epoch {current}"
    )]
    StaleWriterEpoch {
        /// Position of the batch in the request.
        index: usize,
        /// The writer (its allocated id).
        writer_id: i64,
        /// The epoch the batch carries.
        epoch: i16,
        /// The writer's current epoch.
        current: i16,
    },
    /// The request is larger than the tablet accepts.
    #[error("append request too large: {what} is {value}, the limit is {limit}")]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The limit.
        limit: u64,
    },
    /// A batch, or the whole request, holds more rows than the tablet's settings allow; judged on
    /// the header's counts before anything is decoded.
    #[error(
        "batch {index} of the request takes the rows to {rows}, over the limit of {limit} \
         (setting `{setting}`); send fewer rows per batch or per request"
    )]
    TooManyRows {
        /// Position of the batch in the request.
        index: usize,
        /// The [`TabletSettings`](crate::TabletSettings) field holding the limit:
        /// `max_rows_per_batch` or `max_rows_per_request`.
        setting: &'static str,
        /// The rows of the batch, or of the request up to and including it.
        rows: u64,
        /// The limit.
        limit: u64,
    },
    /// A batch from a writer the tablet does not know, while it tracks as many writers as it may.
    /// Writers it knows keep working; room comes back as writers stay idle past the writer TTL.
    #[error(
        "batch {index} of the request is from writer {writer_id}, new to a tablet that already \
         tracks {limit} writers (setting `max_writers`); reuse a writer id or wait for idle ones to expire"
    )]
    TooManyWriters {
        /// Position of the batch in the request.
        index: usize,
        /// The new writer.
        writer_id: i64,
        /// The limit.
        limit: u64,
    },
    /// A read or lookup below the oldest retained offset.
    #[error("offset {offset} is below the log start {log_start}: it was trimmed away")]
    BelowLogStart {
        /// The offset asked for.
        offset: u64,
        /// The oldest retained offset.
        log_start: u64,
    },
    /// A read starting beyond the isolation bound.
    #[error("offset {offset} is beyond the read bound {bound} ({isolation:?})")]
    OffsetOutOfRange {
        /// The offset asked for.
        offset: u64,
        /// The bound: the high watermark or the log end.
        bound: u64,
        /// The isolation that set the bound.
        isolation: Isolation,
    },
    /// A read range whose end is before its start.
    #[error("invalid read range [{from}, {to}): the end is before the start")]
    InvalidRange {
        /// Start.
        from: u64,
        /// End.
        to: u64,
    },
    /// A timestamp lookup for a time that has not come yet.
    #[error("timestamp {timestamp} ms is in the future (now is {now} ms)")]
    FutureTimestamp {
        /// The timestamp asked for.
        timestamp: i64,
        /// The tablet clock's now.
        now: i64,
    },
    /// The read projection does not fit a batch's schema.
    #[error("invalid projection for schema id {schema_id}: {source}")]
    InvalidProjection {
        /// The schema id.
        schema_id: i16,
        /// What the codec found.
        #[source]
        source: Arc<mink_codec::Error>,
    },
    /// A stored batch could not be read back (corrupt data or a bug).
    #[error("stored batch at offset {offset} is corrupt: {reason}")]
    Corrupt {
        /// Offset of the stream batch holding it.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The tablet was closed or destroyed.
    #[error("tablet {tablet} is closed")]
    Closed {
        /// The tablet.
        tablet: String,
    },
    /// Another node opened the tablet's stream: this handle is dead.
    #[error("tablet {tablet} is fenced: another owner opened its stream")]
    Fenced {
        /// The tablet.
        tablet: String,
    },
    /// Too many bytes await compaction on this node; retry later.
    #[error("tablet {tablet} is under back-pressure, retry later: {source}")]
    Backpressure {
        /// The tablet.
        tablet: String,
        /// The stream's error.
        #[source]
        source: StreamError,
    },
    /// The stream failed (object storage, WAL).
    #[error("tablet {tablet}: stream operation {operation} failed: {source}")]
    Storage {
        /// The tablet.
        tablet: String,
        /// The operation.
        operation: &'static str,
        /// The stream's error.
        #[source]
        source: StreamError,
    },
    /// The metadata KV failed.
    #[error("tablet {tablet}: metadata operation {operation} failed: {source}")]
    Metadata {
        /// The tablet.
        tablet: String,
        /// The operation.
        operation: &'static str,
        /// The metadata error.
        #[source]
        source: Arc<MetaError>,
    },
    /// The tablet has no registry entry (`open` of a tablet never created).
    #[error("tablet {tablet} does not exist")]
    NotFound {
        /// The tablet.
        tablet: String,
    },
    /// `create` of a tablet that already exists.
    #[error("tablet {tablet} already exists")]
    AlreadyExists {
        /// The tablet.
        tablet: String,
    },
    /// A tablet-owned metadata value (registry entry, writer snapshot) cannot be decoded.
    #[error("tablet metadata at {key} is corrupt: {reason}")]
    CorruptMetadata {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// The stream and the tablet disagree (a bug).
    #[error("tablet {tablet} is inconsistent: {message}")]
    Inconsistent {
        /// The tablet.
        tablet: String,
        /// What disagrees.
        message: String,
    },
}

/// The taxonomy callers branch on (the server maps it to HTTP status codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A malformed batch or request.
    InvalidBatch,
    /// Unknown schema id.
    UnknownSchema,
    /// Out-of-order writer sequence.
    OutOfOrderSequence,
    /// A writer epoch older than the writer's current one (a fenced incarnation).
    StaleWriterEpoch,
    /// Request too large.
    TooLarge,
    /// More rows than a limit allows.
    LimitExceeded,
    /// A new writer while the tablet tracks as many as it may.
    TooManyWriters,
    /// Read below the log start.
    BelowLogStart,
    /// Read beyond the bound, or a bad range.
    OffsetOutOfRange,
    /// Timestamp in the future.
    FutureTimestamp,
    /// Projection does not fit the schema.
    InvalidProjection,
    /// The tablet is closed here (retry on the new owner).
    Closed,
    /// Another node owns the tablet.
    Fenced,
    /// No such tablet.
    NotFound,
    /// The tablet already exists.
    AlreadyExists,
    /// Back-pressure (retry later).
    Backpressure,
    /// Storage or metadata failure (retry later).
    Unavailable,
    /// Stored data cannot be read, or a bug.
    Corrupt,
}

impl ErrorKind {
    /// A stable snake_case name, for the `error` field of JSON error bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidBatch => "invalid_batch",
            ErrorKind::UnknownSchema => "unknown_schema",
            ErrorKind::OutOfOrderSequence => "out_of_order_sequence",
            ErrorKind::StaleWriterEpoch => "stale_writer_epoch",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::LimitExceeded => "limit_exceeded",
            ErrorKind::TooManyWriters => "too_many_writers",
            ErrorKind::BelowLogStart => "below_log_start",
            ErrorKind::OffsetOutOfRange => "offset_out_of_range",
            ErrorKind::FutureTimestamp => "future_timestamp",
            ErrorKind::InvalidProjection => "invalid_projection",
            ErrorKind::Closed => "closed",
            ErrorKind::Fenced => "fenced",
            ErrorKind::NotFound => "not_found",
            ErrorKind::AlreadyExists => "already_exists",
            ErrorKind::Backpressure => "backpressure",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Corrupt => "corrupt",
        }
    }

    /// Whether the same request may succeed if retried later.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::Closed | ErrorKind::Backpressure | ErrorKind::Unavailable
        )
    }
}

impl TabletError {
    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            TabletError::InvalidBatch { .. } | TabletError::InvalidRequest { .. } => {
                ErrorKind::InvalidBatch
            }
            TabletError::UnknownSchema { .. } => ErrorKind::UnknownSchema,
            TabletError::OutOfOrderSequence { .. } => ErrorKind::OutOfOrderSequence,
            TabletError::StaleWriterEpoch { .. } => ErrorKind::StaleWriterEpoch,
            TabletError::TooLarge { .. } => ErrorKind::TooLarge,
            TabletError::TooManyRows { .. } => ErrorKind::LimitExceeded,
            TabletError::TooManyWriters { .. } => ErrorKind::TooManyWriters,
            TabletError::BelowLogStart { .. } => ErrorKind::BelowLogStart,
            TabletError::OffsetOutOfRange { .. } | TabletError::InvalidRange { .. } => {
                ErrorKind::OffsetOutOfRange
            }
            TabletError::FutureTimestamp { .. } => ErrorKind::FutureTimestamp,
            TabletError::InvalidProjection { .. } => ErrorKind::InvalidProjection,
            TabletError::Closed { .. } => ErrorKind::Closed,
            TabletError::Fenced { .. } => ErrorKind::Fenced,
            TabletError::NotFound { .. } => ErrorKind::NotFound,
            TabletError::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            TabletError::Backpressure { .. } => ErrorKind::Backpressure,
            TabletError::Storage { .. } => ErrorKind::Unavailable,
            TabletError::Metadata { source, .. } => match source.kind() {
                mink_metadata::ErrorKind::Corrupt => ErrorKind::Corrupt,
                mink_metadata::ErrorKind::Fenced => ErrorKind::Fenced,
                mink_metadata::ErrorKind::Invalid => ErrorKind::InvalidBatch,
                _ => ErrorKind::Unavailable,
            },
            TabletError::Corrupt { .. }
            | TabletError::CorruptMetadata { .. }
            | TabletError::Inconsistent { .. } => ErrorKind::Corrupt,
        }
    }

    /// Maps a stream error raised during `operation` on `tablet`.
    pub(crate) fn stream(tablet: &str, operation: &'static str, error: StreamError) -> Self {
        let tablet = tablet.to_owned();
        match error {
            StreamError::Fenced { .. } => TabletError::Fenced { tablet },
            StreamError::Closed { .. } => TabletError::Closed { tablet },
            StreamError::Backpressure { .. } => TabletError::Backpressure {
                tablet,
                source: error,
            },
            StreamError::BatchTooLarge { len, limit } => TabletError::TooLarge {
                what: "request bytes (node budget of uncompacted data)",
                value: len as u64,
                limit,
            },
            StreamError::BelowStart { offset, start, .. } => TabletError::BelowLogStart {
                offset,
                log_start: start,
            },
            StreamError::Metadata(ref meta) if meta.kind() == mink_metadata::ErrorKind::Fenced => {
                TabletError::Fenced { tablet }
            }
            StreamError::CorruptObject { .. } | StreamError::Inconsistent { .. } => {
                TabletError::Corrupt {
                    offset: 0,
                    reason: error.to_string(),
                }
            }
            other => TabletError::Storage {
                tablet,
                operation,
                source: other,
            },
        }
    }

    /// Maps a metadata error raised during `operation` on `tablet`.
    pub(crate) fn metadata(tablet: &str, operation: &'static str, error: MetaError) -> Self {
        TabletError::Metadata {
            tablet: tablet.to_owned(),
            operation,
            source: Arc::new(error),
        }
    }
}
