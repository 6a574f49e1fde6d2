//! The object-storage layer: one small trait, [`ObjectStorage`], that the WAL, the compactor,
//! recovery and garbage collection use for every byte they keep, and its backends.
//!
//! Data enters as whole objects ([`ObjectStorage::put`], one request per object, no multipart)
//! and leaves as whole objects or byte ranges. Keys are relative to a root prefix that each
//! backend is configured with, so several stores (or tests) can share one bucket.
//!
//! Backends:
//! - [`ObjectStoreBackend`]: over the `object_store` crate: in memory, a local directory, or S3
//!   and S3-compatible servers.
//! - [`AwsS3Backend`]: over `aws-sdk-s3` directly.
//!
//! Wrappers for tests and benchmarks (cargo feature `test-util`): [`CountingStorage`] counts
//! requests and bytes, [`FaultyStorage`] injects errors, timeouts and slow PUTs from a seeded RNG,
//! and [`LatencyStorage`] delays calls by a seeded log-normal model of S3 Standard or S3 Express
//! One Zone so that a local store behaves like a remote one.
//!
//! This layer writes no format of its own: objects are opaque bytes.

mod aws;
mod config;
mod error;
mod key;
mod objectstore;
mod pieces;

#[cfg(feature = "test-util")]
mod counting;
#[cfg(feature = "test-util")]
mod faulty;
#[cfg(feature = "test-util")]
mod latency;

use std::fmt::Debug;
use std::ops::Range;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;

pub use aws::AwsS3Backend;
pub use config::{PutIntegrity, S3Config};
pub use error::{BoxError, Result, StorageError, StorageOp};
pub use key::{MAX_KEY_LEN, validate_key, validate_prefix};
pub use objectstore::ObjectStoreBackend;

#[cfg(feature = "test-util")]
pub use counting::{CountingStorage, StorageCounts};
#[cfg(feature = "test-util")]
pub use faulty::{FaultKind, FaultyStorage, InjectedFault};
#[cfg(feature = "test-util")]
pub use latency::{LatencyDistribution, LatencyProfile, LatencyStorage};

/// What a successful PUT reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PutResult {
    /// The object's entity tag, when the store reports one.
    pub e_tag: Option<String>,
}

impl PutResult {
    /// A result with the given entity tag.
    pub fn new(e_tag: Option<String>) -> Self {
        PutResult { e_tag }
    }
}

/// An object's metadata, from [`ObjectStorage::head`] or [`ObjectStorage::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObjectMeta {
    /// The key, relative to the backend's root prefix.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// When the object was last written, when the store reports it (GC uses it as a grace period
    /// for objects that no metadata references yet).
    pub last_modified: Option<SystemTime>,
}

impl ObjectMeta {
    /// Metadata with the given fields.
    pub fn new(key: impl Into<String>, size: u64, last_modified: Option<SystemTime>) -> Self {
        ObjectMeta {
            key: key.into(),
            size,
            last_modified,
        }
    }
}

/// An object store as Mink needs it: whole-object PUTs, ranged GETs, HEAD, DELETE, and LIST for
/// garbage collection and tools only.
///
/// # Keys
///
/// A key is a `/`-separated path of non-empty segments made of ASCII letters, digits and
/// `-_.=~+`, neither `.` nor `..`, at most [`MAX_KEY_LEN`] bytes (see [`validate_key`]). It is
/// relative to the backend's root prefix; the same key in two backends with different prefixes
/// names different objects. A key that breaks the rules gives [`StorageError::InvalidKey`]
/// before any request is sent. Note that on a local file system `a` and `a/b` cannot both exist
/// (one would be a file and a directory); Mink's key layout never does that.
///
/// # Consistency
///
/// Every backend is strongly consistent for single keys, as S3 is: once `put` returns `Ok`,
/// every later `get`/`head`/`list` (from any handle on the same store) sees the new object in
/// full; once `delete` returns `Ok`, the object is gone. Objects are never seen half-written.
///
/// # Errors
///
/// Errors are [`StorageError`] kinds, the same for every backend. After a retryable error
/// ([`StorageError::is_retryable`]) on a write, the write may or may not have happened: callers
/// that need to know must `head`/`get` the key, or write with [`put_if_absent`](Self::put_if_absent)
/// and treat a [`StorageError::Precondition`] on retry as "maybe my own earlier attempt".
/// Backends may retry internally (bounded by their configuration) before returning a retryable
/// error.
///
/// # Object safety
///
/// The trait is object-safe and held as `Arc<dyn ObjectStorage>`; wrappers forward every method.
#[async_trait]
pub trait ObjectStorage: Debug + Send + Sync + 'static {
    /// A short name for logs and metrics, e.g. `object_store:s3://bucket/prefix`.
    fn name(&self) -> &str;

    /// Writes `data` as the object `key`, replacing any object there, in one request.
    async fn put(&self, key: &str, data: Bytes) -> Result<PutResult>;

    /// [`put`](Self::put) of the concatenation of `parts`, in one request, with the same rules.
    /// The default joins the parts into one buffer and calls `put`; backends that can send the
    /// parts where they are do so without the copy, and wrappers pass the parts on (a WAL
    /// object is sent this way, its large batches as they were appended; docs/write-copies.md).
    async fn put_parts(&self, key: &str, parts: Vec<Bytes>) -> Result<PutResult> {
        self.put(key, join_parts(&parts)).await
    }

    /// Writes `data` as the object `key` only if no object exists there, atomically (S3
    /// `If-None-Match: *`). Returns [`StorageError::Precondition`] and writes nothing if one
    /// exists. Of several concurrent calls on one key at most one succeeds. Used for fencing.
    async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutResult>;

    /// Reads the whole object. [`StorageError::NotFound`] if it does not exist. Empty objects
    /// read as empty bytes.
    async fn get(&self, key: &str) -> Result<Bytes>;

    /// Reads the bytes `range` of the object.
    ///
    /// - A range that starts inside the object but ends past its end is **clipped**: the bytes
    ///   from `range.start` to the end of the object are returned (so a reader of fixed-size
    ///   pages can read the last, short page without knowing the size).
    /// - An empty or reversed range (`start >= end`), or one that starts at or past the end of
    ///   the object (including any range of an empty object), is
    ///   [`StorageError::InvalidRange`].
    /// - [`StorageError::NotFound`] if the object does not exist.
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes>;

    /// [`get_range`](Self::get_range) in one request, handed out in pieces of `piece_len` bytes
    /// from `range.start` (the last may be shorter), each in its own buffer, so that a caller
    /// keeping some pieces and dropping others frees the memory of the ones it drops (the block
    /// cache keeps pages). The same range rules and errors as `get_range`. A `piece_len` of 0 is
    /// one piece. The default cuts one `get_range` into copies; backends that can read into
    /// separate buffers do so without the copy.
    async fn get_range_pieces(
        &self,
        key: &str,
        range: Range<u64>,
        piece_len: u64,
    ) -> Result<Vec<Bytes>> {
        let bytes = self.get_range(key, range).await?;
        Ok(pieces::copied(&bytes, piece_len))
    }

    /// The object's metadata. [`StorageError::NotFound`] if it does not exist.
    async fn head(&self, key: &str) -> Result<ObjectMeta>;

    /// Deletes the object. Idempotent: deleting a missing key is `Ok`.
    async fn delete(&self, key: &str) -> Result<()>;

    /// Deletes all `keys`, in as few requests as the store allows (S3 `DeleteObjects`, up to
    /// 1000 keys a request). Idempotent like [`delete`](Self::delete). On error some keys may
    /// have been deleted and others not; calling again with the same keys is safe. All keys are
    /// validated before anything is deleted.
    async fn delete_many(&self, keys: &[String]) -> Result<()>;

    /// Every object whose key starts with `prefix` (a plain string prefix, not only whole
    /// segments: `wal/00` matches `wal/0001`), sorted by key. `""` lists everything under the
    /// root. This pages through the whole listing: it is for garbage collection and tools, never
    /// for the read or write path, which know their keys from the metadata.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>>;
}

/// Whether `a` and `b` are one store (the same handle), as when WAL and committed objects share
/// a bucket: then a WAL object can be committed as it is.
pub(crate) fn is_same(a: &Arc<dyn ObjectStorage>, b: &Arc<dyn ObjectStorage>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// The concatenation of `parts` in one buffer (the part itself when there is one).
pub fn join_parts(parts: &[Bytes]) -> Bytes {
    match parts {
        [] => Bytes::new(),
        [only] => only.clone(),
        _ => {
            let mut joined = Vec::with_capacity(parts.iter().map(Bytes::len).sum());
            parts.iter().for_each(|p| joined.extend_from_slice(p));
            Bytes::from(joined)
        }
    }
}

/// Compile-time check that [`ObjectStorage`] stays object-safe.
fn _assert_object_safe(_: &dyn ObjectStorage) {}

/// Checks a ranged read's range before any request: empty or reversed ranges are invalid.
pub(crate) fn check_range(key: &str, range: &Range<u64>) -> Result<()> {
    if range.start >= range.end {
        return Err(StorageError::InvalidRange {
            key: key.to_owned(),
            range: range.clone(),
            size: None,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
