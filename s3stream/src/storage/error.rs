//! The meaning-level errors of [`ObjectStorage`](super::ObjectStorage).
//!
//! Backends translate their own errors (object_store's, the AWS SDK's, HTTP statuses) into these
//! kinds, so the WAL, compactor and recovery decide what to do from the kind alone: retry
//! ([`StorageError::is_retryable`]), treat as absent, treat as lost race, or give up.

use std::fmt;
use std::ops::Range;

/// A boxed error from a backend, kept as the `source` of a [`StorageError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with [`StorageError`].
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Which storage operation failed; part of every error that is not about one key's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StorageOp {
    /// [`ObjectStorage::put`](super::ObjectStorage::put).
    Put,
    /// [`ObjectStorage::put_if_absent`](super::ObjectStorage::put_if_absent).
    PutIfAbsent,
    /// [`ObjectStorage::get`](super::ObjectStorage::get) or `get_range`.
    Get,
    /// [`ObjectStorage::head`](super::ObjectStorage::head).
    Head,
    /// [`ObjectStorage::delete`](super::ObjectStorage::delete).
    Delete,
    /// [`ObjectStorage::delete_many`](super::ObjectStorage::delete_many).
    DeleteMany,
    /// [`ObjectStorage::list`](super::ObjectStorage::list).
    List,
}

impl StorageOp {
    /// All operations, in declaration order.
    pub const ALL: [StorageOp; 7] = [
        StorageOp::Put,
        StorageOp::PutIfAbsent,
        StorageOp::Get,
        StorageOp::Head,
        StorageOp::Delete,
        StorageOp::DeleteMany,
        StorageOp::List,
    ];

    /// Lower-case name, for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            StorageOp::Put => "put",
            StorageOp::PutIfAbsent => "put_if_absent",
            StorageOp::Get => "get",
            StorageOp::Head => "head",
            StorageOp::Delete => "delete",
            StorageOp::DeleteMany => "delete_many",
            StorageOp::List => "list",
        }
    }
}

impl fmt::Display for StorageOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What went wrong in an [`ObjectStorage`](super::ObjectStorage) call.
///
/// Keys in errors are the caller's keys (relative to the backend's root prefix). Retryable kinds
/// ([`Throttled`](Self::Throttled), [`Timeout`](Self::Timeout), [`Unavailable`](Self::Unavailable))
/// leave the object in an unknown state for writes: a PUT that timed out may or may not have landed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The object does not exist (HTTP 404, `NoSuchKey`).
    #[error("object {key:?} not found")]
    NotFound {
        /// The key asked for.
        key: String,
    },

    /// A conditional write lost: `put_if_absent` found the object already there (HTTP 412, or the
    /// local store's "already exists"). Nothing was written.
    #[error("object {key:?} already exists; the conditional {op} wrote nothing")]
    Precondition {
        /// The key written.
        key: String,
        /// The conditional operation.
        op: StorageOp,
    },

    /// The store asked us to slow down (S3 503 `SlowDown`, HTTP 429), after the backend's own
    /// retries ran out. Retry later with back-off.
    #[error("{op} of {key:?} was throttled by the object store (slow down and retry): {source}")]
    Throttled {
        /// The operation.
        op: StorageOp,
        /// The key (or prefix) involved.
        key: String,
        /// The backend's error.
        source: BoxError,
    },

    /// The byte range cannot be served: it is empty or reversed, or it starts at or past the end
    /// of the object. (A range that starts inside the object but ends past it is clipped, not an
    /// error; see [`ObjectStorage::get_range`](super::ObjectStorage::get_range).)
    #[error("range {}..{} of object {key:?} is not satisfiable{}", range.start, range.end,
        size.map(|s| format!(" (object is {s} bytes)")).unwrap_or_default())]
    InvalidRange {
        /// The key read.
        key: String,
        /// The range asked for.
        range: Range<u64>,
        /// The object's size when known.
        size: Option<u64>,
    },

    /// The request did not complete in time. For writes the outcome is unknown. Retryable.
    #[error("{op} of {key:?} timed out: {source}")]
    Timeout {
        /// The operation.
        op: StorageOp,
        /// The key (or prefix) involved.
        key: String,
        /// The backend's error.
        source: BoxError,
    },

    /// A transient failure: connection refused or reset, HTTP 500/502/504, a concurrent
    /// conditional request (409). For writes the outcome is unknown. Retryable.
    #[error("{op} of {key:?} failed transiently (retry): {source}")]
    Unavailable {
        /// The operation.
        op: StorageOp,
        /// The key (or prefix) involved.
        key: String,
        /// The backend's error.
        source: BoxError,
    },

    /// The key is not one this layer accepts (see the key rules on
    /// [`ObjectStorage`](super::ObjectStorage)). Nothing was sent to the store.
    #[error("invalid object key {key:?}: {reason}")]
    InvalidKey {
        /// The rejected key.
        key: String,
        /// Which rule it breaks.
        reason: &'static str,
    },

    /// A backend could not be built from its configuration.
    #[error("invalid object storage configuration: {message}")]
    Config {
        /// What is wrong and how to fix it.
        message: String,
        /// The underlying error, if any.
        source: Option<BoxError>,
    },

    /// Any other failure (permission denied, bad request, malformed response...). Not retryable.
    #[error("{op} of {key:?} failed: {source}")]
    Other {
        /// The operation.
        op: StorageOp,
        /// The key (or prefix) involved.
        key: String,
        /// The backend's error.
        source: BoxError,
    },
}

impl StorageError {
    /// Whether retrying the same call later may succeed: throttling, timeouts and transient
    /// failures. Not-found, precondition, invalid range/key and other errors are final.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StorageError::Throttled { .. }
                | StorageError::Timeout { .. }
                | StorageError::Unavailable { .. }
        )
    }

    /// Whether this is [`StorageError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, StorageError::NotFound { .. })
    }

    /// Whether this is [`StorageError::Precondition`].
    pub fn is_precondition(&self) -> bool {
        matches!(self, StorageError::Precondition { .. })
    }

    /// A short stable name of the kind, for metric labels and test assertions.
    pub fn kind(&self) -> &'static str {
        match self {
            StorageError::NotFound { .. } => "not_found",
            StorageError::Precondition { .. } => "precondition",
            StorageError::Throttled { .. } => "throttled",
            StorageError::InvalidRange { .. } => "invalid_range",
            StorageError::Timeout { .. } => "timeout",
            StorageError::Unavailable { .. } => "unavailable",
            StorageError::InvalidKey { .. } => "invalid_key",
            StorageError::Config { .. } => "config",
            StorageError::Other { .. } => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_kinds() {
        let src = || -> BoxError { "boom".into() };
        assert!(
            StorageError::Throttled {
                op: StorageOp::Put,
                key: "k".into(),
                source: src()
            }
            .is_retryable()
        );
        assert!(
            StorageError::Timeout {
                op: StorageOp::Get,
                key: "k".into(),
                source: src()
            }
            .is_retryable()
        );
        assert!(!StorageError::NotFound { key: "k".into() }.is_retryable());
        assert!(
            !StorageError::Other {
                op: StorageOp::Get,
                key: "k".into(),
                source: src()
            }
            .is_retryable()
        );
        let e = StorageError::InvalidRange {
            key: "k".into(),
            range: 5..9,
            size: Some(3),
        };
        assert_eq!(
            e.to_string(),
            "range 5..9 of object \"k\" is not satisfiable (object is 3 bytes)"
        );
    }
}
