//! The crate's error type: what went wrong in the metadata layer, with the context a caller needs.
//!
//! Callers branch on [`MetaError::kind`]: `Unavailable` is worth retrying, `Fenced` means the caller
//! lost ownership of a stream, `Corrupt`/`UnknownVersion` mean stored bytes cannot be trusted, and the
//! rest are caller mistakes. A failed call never leaves a half-applied change behind.

use std::error::Error as StdError;

/// Boxed source error from a backend library (redb, etcd-client, I/O).
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Errors of the metadata KV, its backends and the typed layers built on it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetaError {
    /// The backend could not be reached or the connection was lost (etcd down, network error).
    /// Nothing is known about whether a write in flight was applied; re-read before retrying.
    #[error("metadata backend {backend} is unavailable during {operation}: {source}")]
    Unavailable {
        /// Backend name (`etcd`, `redb`, `memory`).
        backend: &'static str,
        /// The operation that failed.
        operation: &'static str,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// The backend's storage failed (I/O error, corrupt database file). The change was not applied.
    #[error("metadata backend {backend} storage failed during {operation}: {source}")]
    Storage {
        /// Backend name.
        backend: &'static str,
        /// The operation that failed.
        operation: &'static str,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// A stored value could not be decoded: bad magic, bad checksum, truncated, or an invalid body.
    #[error("metadata value at {key} is corrupt: {reason}")]
    Corrupt {
        /// The key whose value is corrupt.
        key: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A stored value has a format version this build does not know (written by a newer Mink).
    #[error(
        "metadata value at {key} has format version {version}, this build reads up to {supported}; upgrade Mink"
    )]
    UnknownVersion {
        /// The key whose value has the unknown version.
        key: String,
        /// The version found.
        version: u8,
        /// The highest version this build reads.
        supported: u8,
    },
    /// A stored value holds a different record kind than the key implies.
    #[error("metadata value at {key} holds record kind {found}, expected {expected}")]
    WrongKind {
        /// The key.
        key: String,
        /// The kind the caller expected.
        expected: u8,
        /// The kind found.
        found: u8,
    },
    /// The backend does not offer this operation (for example leases on redb).
    #[error("metadata backend {backend} does not support {operation}")]
    Unsupported {
        /// Backend name.
        backend: &'static str,
        /// The unsupported operation.
        operation: &'static str,
    },
    /// A stream operation carried a stale epoch: another owner opened the stream since. Nothing changed.
    #[error(
        "stream {stream_id} is fenced: caller holds epoch {epoch}, the stream is at epoch {current_epoch}"
    )]
    Fenced {
        /// The stream.
        stream_id: u64,
        /// The epoch the caller presented.
        epoch: u64,
        /// The stream's current epoch.
        current_epoch: u64,
    },
    /// The stream is not open (closed or deleted), so it cannot be committed to or trimmed.
    #[error("stream {stream_id} is {state}, not open")]
    StreamNotOpen {
        /// The stream.
        stream_id: u64,
        /// Its state.
        state: String,
    },
    /// The stream is open on another node's member, which must close it (a transfer) or be
    /// recovered (a failover) before it opens anywhere else.
    #[error(
        "stream {stream_id} is open on {owner}; it opens here once {owner} closes it or is recovered"
    )]
    StreamHeld {
        /// The stream.
        stream_id: u64,
        /// The member holding it.
        owner: String,
    },
    /// The member's lease ended and another member claimed its recovery: it may write nothing
    /// more (no WAL ids are reserved for it), and must start again as a new incarnation.
    #[error(
        "member {member} was taken over: its lease ended and another node recovers its WAL; it must rejoin as a new incarnation"
    )]
    Recovered {
        /// The member.
        member: String,
    },
    /// A record the operation needs does not exist.
    #[error("{what} {id} does not exist")]
    NotFound {
        /// What kind of record (`stream`, `object`, `table`).
        what: &'static str,
        /// Its id or name.
        id: String,
    },
    /// A record that must be new already exists.
    #[error("{what} {id} already exists")]
    AlreadyExists {
        /// What kind of record.
        what: &'static str,
        /// Its id or name.
        id: String,
    },
    /// A compare-and-swap kept losing to concurrent writers; retry later.
    #[error("gave up on {operation} at {key} after {attempts} conflicting attempts")]
    Contended {
        /// The operation.
        operation: &'static str,
        /// The contended key.
        key: String,
        /// How many attempts were made.
        attempts: u32,
    },
    /// The request itself is invalid (an offset moving backwards, a bad key, an empty range).
    #[error("invalid metadata request: {0}")]
    Invalid(InvalidRequest),
    /// A watch fell behind and missed events; the watcher must re-read the state and watch again.
    #[error("watch of {prefix} fell behind and lost {missed} events; re-read and watch again")]
    WatchLagged {
        /// The watched prefix.
        prefix: String,
        /// How many events were dropped.
        missed: u64,
    },
}

/// What was wrong with a request refused as [`MetaError::Invalid`]. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidRequest {
    /// A restore into a metadata store that already holds Mink's keys, without forcing it.
    #[error(
        "the metadata store already holds {keys} keys under mink/: restore into an empty one, or force it to replace them"
    )]
    StoreNotEmpty {
        /// How many keys it holds.
        keys: usize,
    },
    /// A transaction holds more compares or writes than the backend takes.
    #[error("a transaction of {ops} operations is over the backend's limit of {limit}")]
    TooManyOperations {
        /// The compares or writes it holds, whichever is more.
        ops: usize,
        /// The backend's limit.
        limit: usize,
    },
    /// A key, or a key a transaction compares, is empty.
    #[error("empty key")]
    EmptyKey,
    /// A transaction writes one key more than once.
    #[error("transaction writes key {key} twice")]
    KeyWrittenTwice {
        /// The key.
        key: String,
    },
    /// A scan asked for pages of zero keys.
    #[error("scan limit must be positive")]
    ZeroScanLimit,
    /// A number does not fit etcd's signed 64-bit integers.
    #[error("{what} {value} does not fit etcd's i64")]
    TooLargeForEtcd {
        /// What the number is (`version`, `lease`).
        what: &'static str,
        /// The number.
        value: u64,
    },
    /// A name used as one key segment is empty or contains `/`.
    #[error("{what} name {name:?} must be non-empty and must not contain '/'")]
    BadName {
        /// What is named (`table`, `partition`, `node`).
        what: &'static str,
        /// The refused name.
        name: String,
    },
    /// A lease session's margin is not shorter than the lease's TTL.
    #[error("a lease margin of {margin:?} leaves nothing of the {ttl:?} lease granted")]
    LeaseMargin {
        /// The margin asked for.
        margin: std::time::Duration,
        /// The TTL granted.
        ttl: std::time::Duration,
    },
    /// An id allocator was asked for zero ids.
    #[error("cannot reserve an empty block of ids")]
    EmptyIdBlock,
    /// An id counter would pass `u64::MAX`.
    #[error("id space {key} is exhausted at {next}")]
    IdSpaceExhausted {
        /// The counter's key.
        key: String,
        /// The next id it would hand out.
        next: u64,
    },
    /// An object's range of a stream holds no offsets, or ends before it starts.
    #[error(
        "object {object_id} range of stream {stream_id} is empty or reversed: [{start_offset}, {end_offset})"
    )]
    EmptyObjectRange {
        /// The object.
        object_id: u64,
        /// The stream of the range.
        stream_id: u64,
        /// First offset of the range.
        start_offset: u64,
        /// Offset after the range.
        end_offset: u64,
    },
    /// An object's range of a stream ends past the object's last byte.
    #[error("object {object_id} range of stream {stream_id} ends past the object's {size} bytes")]
    ObjectRangePastEnd {
        /// The object.
        object_id: u64,
        /// The stream of the range.
        stream_id: u64,
        /// The object's size in bytes.
        size: u64,
    },
    /// An object holds more than one range of one stream.
    #[error("object {object_id} holds two ranges of stream {stream_id}")]
    TwoRangesOfStream {
        /// The object.
        object_id: u64,
        /// The stream.
        stream_id: u64,
    },
    /// A trim would move a stream's start past its committed end.
    #[error("cannot trim stream {stream_id} to {offset}: its committed end is {end_offset}")]
    TrimPastEnd {
        /// The stream.
        stream_id: u64,
        /// The requested start offset.
        offset: u64,
        /// The stream's committed end.
        end_offset: u64,
    },
    /// A table already has a different schema under this schema id.
    #[error("table {table} already has a different schema with id {schema_id}")]
    SchemaIdTaken {
        /// The table.
        table: String,
        /// The schema id.
        schema_id: u16,
    },
    /// A commit names one stream twice in its `stream_epochs`.
    #[error("a stream appears twice in stream_epochs")]
    StreamFencedTwice {
        /// The stream.
        stream_id: u64,
    },
    /// A commit advances a stream it does not fence with an epoch.
    #[error("commit advances stream {stream_id} without its epoch")]
    AdvanceWithoutEpoch {
        /// The stream.
        stream_id: u64,
    },
    /// A commit advances one stream twice.
    #[error("commit advances stream {stream_id} twice")]
    AdvancedTwice {
        /// The stream.
        stream_id: u64,
    },
    /// A commit adds one object twice.
    #[error("commit adds object {object_id} twice")]
    ObjectAddedTwice {
        /// The object.
        object_id: u64,
    },
    /// A commit removes one object twice, or adds and removes it.
    #[error("commit adds or removes object {object_id} twice")]
    ObjectRemovedTwice {
        /// The object.
        object_id: u64,
    },
    /// A commit would move a stream's committed end backwards.
    #[error("commit would move stream {stream_id}'s end back from {end_offset} to {requested}")]
    EndMovesBack {
        /// The stream.
        stream_id: u64,
        /// Its committed end.
        end_offset: u64,
        /// The smaller end the commit asked for.
        requested: u64,
    },
}

/// The small taxonomy of [`MetaError`] that callers (and the HTTP layer) branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Transient: retry later (503).
    Unavailable,
    /// Stored data cannot be trusted (500).
    Corrupt,
    /// Lost ownership (409).
    Fenced,
    /// Missing record (404).
    NotFound,
    /// Conflicting state (409).
    Conflict,
    /// Caller mistake (400).
    Invalid,
    /// Operation not offered by the backend (501).
    Unsupported,
}

impl MetaError {
    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            MetaError::Unavailable { .. } | MetaError::Contended { .. } => ErrorKind::Unavailable,
            MetaError::WatchLagged { .. } | MetaError::StreamHeld { .. } => ErrorKind::Unavailable,
            MetaError::Storage { .. }
            | MetaError::Corrupt { .. }
            | MetaError::UnknownVersion { .. }
            | MetaError::WrongKind { .. } => ErrorKind::Corrupt,
            MetaError::Fenced { .. } | MetaError::Recovered { .. } => ErrorKind::Fenced,
            MetaError::StreamNotOpen { .. } | MetaError::AlreadyExists { .. } => {
                ErrorKind::Conflict
            }
            MetaError::NotFound { .. } => ErrorKind::NotFound,
            MetaError::Invalid(_) => ErrorKind::Invalid,
            MetaError::Unsupported { .. } => ErrorKind::Unsupported,
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = MetaError> = std::result::Result<T, E>;
