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
    Invalid(String),
    /// A watch fell behind and missed events; the watcher must re-read the state and watch again.
    #[error("watch of {prefix} fell behind and lost {missed} events; re-read and watch again")]
    WatchLagged {
        /// The watched prefix.
        prefix: String,
        /// How many events were dropped.
        missed: u64,
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
            MetaError::WatchLagged { .. } => ErrorKind::Unavailable,
            MetaError::Storage { .. }
            | MetaError::Corrupt { .. }
            | MetaError::UnknownVersion { .. }
            | MetaError::WrongKind { .. } => ErrorKind::Corrupt,
            MetaError::Fenced { .. } => ErrorKind::Fenced,
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
