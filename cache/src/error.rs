//! Errors of the read caches.

use std::{ops::Range, path::PathBuf, sync::Arc};

/// A failure reported by a caller-supplied loader ([`crate::PageLoader`] or an index loader).
///
/// The cache never interprets the source: it hands the same error to every reader that waited on the
/// load, and it never caches a failure, so the next read tries again.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The object does not exist (any more) in the object store.
    #[error("object {object_id} does not exist in the object store")]
    NotFound {
        /// The object asked for.
        object_id: u64,
    },
    /// The object store failed to return the bytes.
    #[error("loading bytes {range:?} of object {object_id} failed: {source}")]
    Storage {
        /// The object asked for.
        object_id: u64,
        /// The byte range asked for.
        range: Range<u64>,
        /// What the store reported.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Errors returned by the caches.
///
/// Cloneable because one failed load is reported to every reader that waited on it.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The loader failed; nothing was cached and the next read loads again.
    #[error("loading bytes {range:?} of object {object_id} failed: {source}")]
    Load {
        /// The object read.
        object_id: u64,
        /// The byte range of the failed load (whole pages).
        range: Range<u64>,
        /// The loader's error, shared by all waiters.
        #[source]
        source: Arc<LoadError>,
    },
    /// The loader returned a different number of bytes than asked for; nothing was cached.
    #[error(
        "loading bytes {range:?} of object {object_id} returned {actual} bytes instead of {expected}; \
         the object size given to the cache may be wrong"
    )]
    ShortLoad {
        /// The object read.
        object_id: u64,
        /// The byte range asked for.
        range: Range<u64>,
        /// Bytes asked for.
        expected: u64,
        /// Bytes returned.
        actual: u64,
    },
    /// The requested range does not lie inside the object.
    #[error("range {range:?} is outside object {object_id} of {object_size} bytes")]
    RangeOutOfBounds {
        /// The object read.
        object_id: u64,
        /// The requested range.
        range: Range<u64>,
        /// The object size given by the caller.
        object_size: u64,
    },
    /// The task loading a page ended without a result (it panicked or the runtime shut down).
    #[error("the load of page {page_index} of object {object_id} was abandoned; retry the read")]
    LoadAbandoned {
        /// The object read.
        object_id: u64,
        /// The page whose load was abandoned.
        page_index: u64,
    },
    /// A cached or loaded page does not have the length the object size implies.
    #[error(
        "page {page_index} of object {object_id} holds {actual} bytes, expected {expected}; \
         readers disagree about the object's size"
    )]
    PageSizeMismatch {
        /// The object read.
        object_id: u64,
        /// The page.
        page_index: u64,
        /// Length implied by the page size and the object size.
        expected: u64,
        /// Length found.
        actual: u64,
    },
    /// Loading an object's index failed; nothing was cached.
    #[error("loading the index of object {object_id} failed: {source}")]
    IndexLoad {
        /// The object whose index was loaded.
        object_id: u64,
        /// The loader's error, shared by all waiters.
        #[source]
        source: Arc<LoadError>,
    },
    /// A batch given to the tail cache has no records.
    #[error(
        "batch of stream {stream_id} at base offset {base_offset} has end offset {end_offset}; \
         the end offset must be greater than the base offset"
    )]
    EmptyBatch {
        /// The stream appended to.
        stream_id: u64,
        /// The batch's first offset.
        base_offset: u64,
        /// The batch's end offset (one past its last record).
        end_offset: u64,
    },
    /// A setting is out of range.
    #[error("invalid cache setting {name}: {reason}")]
    InvalidSetting {
        /// The setting's name.
        name: &'static str,
        /// Why the value is rejected.
        reason: &'static str,
    },
    /// The disk tier could not be opened.
    #[error("opening the block cache disk tier in {dir} failed: {source}")]
    OpenDisk {
        /// The configured directory.
        dir: PathBuf,
        /// What foyer reported.
        #[source]
        source: Arc<foyer::Error>,
    },
}
