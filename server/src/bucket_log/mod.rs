//! The bucket log: what the front ends need of one bucket's log, behind a small object-safe
//! trait, with the registry of open logs and the implementation over `mink-tablet`.
//!
//! - [`BucketLog`]: one bucket's log (append, read, offsets, waiting, trim, close); a test can put
//!   a failing or slow log behind the same API.
//! - [`LogProvider`]: opens logs by (table, partition, bucket).
//! - `registry`: [`Logs`], which keeps each open log once and is the seam where ownership goes:
//!   today every bucket is [`Owner::Local`], and a multi-node router answers [`Owner::Remote`]
//!   so a front end can send the client to the owner (HTTP: 307).
//! - `tablet`: [`TabletProvider`], one `mink_tablet::Tablet` per bucket on the node's engine.

mod registry;
mod tablet;
mod tail;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use mink_s3stream::Footprint;

pub use registry::Logs;
pub(crate) use registry::OPEN_PARALLELISM;
pub use tablet::TabletProvider;
pub use tail::{Tail, TailPark, TailWatch, Woken};

use crate::catalog::TableInfo;
use crate::error::ApiResult;

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Offset of the first row appended (or appended the first time, for a duplicate).
    pub base_offset: u64,
    /// Offset of the last row.
    pub last_offset: u64,
    /// Commit timestamp of the last batch, milliseconds since the Unix epoch.
    pub commit_timestamp: i64,
    /// The request was a retry of batches already appended: nothing was appended now.
    pub duplicate: bool,
    /// Each batch of the request, in request order.
    pub batches: Vec<BatchOutcome>,
}

/// What an append did with one of its batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Offset of its first row (the first time, for a duplicate).
    pub base_offset: u64,
    /// The offset after its last row.
    pub next_offset: u64,
    /// Its commit timestamp, milliseconds since the Unix epoch.
    pub commit_timestamp: i64,
    /// A retry of a batch already appended: nothing was appended for it now.
    pub duplicate: bool,
}

/// The offsets a client sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOffsets {
    /// Oldest retained offset.
    pub log_start: u64,
    /// Everything below is durable and readable.
    pub high_watermark: u64,
}

/// Batches read from a log.
#[derive(Debug, Clone, Default)]
pub struct ReadChunk {
    /// Whole batches, each one mink batch (projected when a projection was asked for).
    pub batches: Vec<Bytes>,
    /// Where the next read continues.
    pub next_offset: u64,
}

/// One bucket's log as the front ends use it.
///
/// # Contract
///
/// - `append` takes one or more mink batches back to back; it returns once they are durable (or
///   were duplicates), and only then are they readable.
/// - `read` returns whole batches from the one holding `from`, never past the high watermark nor
///   `until`, about `max_bytes` but at least one batch when any is readable; an empty chunk means
///   `from` is at the bound. Below the log start it fails with
///   [`ApiError::OffsetTrimmed`](crate::error::ApiError::OffsetTrimmed); past
///   the high watermark with
///   [`ApiError::OffsetOutOfRange`](crate::error::ApiError::OffsetOutOfRange).
/// - `wait_past(offset, timeout)` returns the high watermark as soon as it passes `offset`, when
///   the log closes, or when the timeout lapses (then it may still be at or below `offset`).
/// - `watch_tail` waits as `wait_past` does, without a timeout, on what it took once.
/// - `is_closed` turns true once the log was closed or destroyed; parked readers then stop.
#[async_trait]
pub trait BucketLog: Send + Sync + 'static {
    /// Appends batches.
    async fn append(&self, batches: Bytes) -> ApiResult<AppendOutcome>;
    /// [`BucketLog::append`], sending on `sequenced` once the batches have their place in the
    /// log, before their durability is awaited (or once the append failed): an append started
    /// after that is placed after this one (docs/produce-pipelining.md). A log that cannot tell
    /// sends when the append is done.
    async fn append_then(
        &self,
        batches: Bytes,
        sequenced: tokio::sync::oneshot::Sender<()>,
    ) -> ApiResult<AppendOutcome> {
        let outcome = self.append(batches).await;
        let _ = sequenced.send(());
        outcome
    }
    /// Reads batches, projected to `columns` (indices in each batch's schema) when given.
    async fn read(
        &self,
        from: u64,
        until: Option<u64>,
        columns: Option<&[String]>,
        max_bytes: usize,
    ) -> ApiResult<ReadChunk>;
    /// The offsets now.
    fn offsets(&self) -> LogOffsets;
    /// What the log keeps on the store from its log start, piece by piece with sizes.
    fn footprint(&self) -> Footprint;
    /// Waits for the high watermark to pass `offset`.
    async fn wait_past(&self, offset: u64, timeout: Duration) -> u64;
    /// A lasting wait at the log's tail, for a reader that parks there again and again.
    fn watch_tail(&self) -> TailWatch;
    /// Whether the log was closed or destroyed.
    fn is_closed(&self) -> bool;
    /// The first offset whose batch has a commit timestamp at or after `timestamp` (ms).
    async fn offset_for_timestamp(&self, timestamp: i64) -> ApiResult<u64>;
    /// Moves the log start forward to `offset`.
    async fn trim(&self, offset: u64) -> ApiResult<()>;
    /// Closes the log (writer snapshot, stream closed) so another node can open it.
    async fn close(&self) -> ApiResult<()>;
    /// Destroys the log: stream and writer snapshot deleted.
    async fn destroy(&self) -> ApiResult<()>;
}

/// Compile-time check that [`BucketLog`] stays object-safe.
fn _assert_bucket_log_object_safe(_: &dyn BucketLog) {}

/// Identity of one bucket's log.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogKey {
    /// Table name.
    pub table: String,
    /// Partition name.
    pub partition: String,
    /// Bucket number.
    pub bucket: u32,
    /// The table's incarnation: a table dropped and created again under the same name has
    /// other logs.
    pub incarnation: u64,
}

impl std::fmt::Display for LogKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let table = mink_metadata::keys::table_segment(&self.table, self.incarnation);
        write!(f, "{table}/{}/{}", self.partition, self.bucket)
    }
}

/// Opens and destroys bucket logs.
///
/// # Contract
///
/// `open` creates the log's storage the first time and reopens it afterwards, only while the
/// table record still names the key's incarnation (else
/// [`ApiError::TableNotFound`](crate::error::ApiError::TableNotFound)), so an open racing a drop
/// never resurrects a log; the caller opens each key at most once at a time (the [`Logs`]
/// registry sees to it). `destroy_closed` removes the storage of a log that is not open on this
/// node (a dropped table's), is safe to repeat, and needs no table record.
#[async_trait]
pub trait LogProvider: Send + Sync + 'static {
    /// Opens (creating if needed) the log of `key`; `table` holds the table's schemas.
    async fn open(&self, key: &LogKey, table: &Arc<TableInfo>) -> ApiResult<Arc<dyn BucketLog>>;
    /// Destroys the log of `key` when it is not open.
    async fn destroy_closed(&self, key: &LogKey) -> ApiResult<()>;
}

/// Compile-time check that [`LogProvider`] stays object-safe.
fn _assert_log_provider_object_safe(_: &dyn LogProvider) {}

/// Who serves a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// This node.
    Local,
    /// Another node, at this advertised base URL (the API answers 307 there).
    Remote(String),
}
