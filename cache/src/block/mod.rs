//! The block cache: fixed-size pages of committed objects, loaded through a caller-supplied
//! [`PageLoader`] (s3stream implements it with a ranged GET).
//!
//! A read of `range` in an object is split into pages of `page_size` bytes (the object's last page may
//! be shorter). Pages are looked up in foyer's hybrid cache: the memory tier (LRU, byte-weighted) and,
//! when a directory is configured, the disk tier, which receives pages as the memory tier evicts them
//! (format in [`page`]). A page older than the TTL counts as absent and is removed.
//!
//! Missing pages are loaded single-flight: the first reader to miss a page registers it as in flight
//! and every other reader of that page waits for the same load, so a page costs one GET however many
//! readers want it. Adjacent missing pages of one reader are fetched with one ranged load of at most
//! `max_load_bytes`. Loads run in spawned tasks, so a reader that gives up does not strand the readers
//! waiting on its load; a failed load is reported to every waiter and nothing is cached.
//!
//! Sequential readers use [`BlockCache::read_sequential`] with a [`ReadaheadState`]; readahead loads go
//! through the same single-flight table. Readahead in flight is bounded to a share of the memory tier
//! so that it never pushes out pages readers are about to use.
//!
//! Files: `builder.rs` opens the cache, `read.rs` serves a read from the pages, `load.rs` loads
//! missing pages and readahead, `page.rs` is the disk format, `readahead.rs` the window per reader.
//!
//! The [`IndexCache`] beside it holds parsed footers/indexes of objects so that locating a batch in a
//! warm object costs no GET.

mod builder;
mod index;
mod load;
pub(crate) mod page;
mod read;
mod readahead;

use std::{
    collections::HashMap,
    fmt,
    ops::Range,
    sync::{Arc, atomic::AtomicU64},
};

use async_trait::async_trait;
use bytes::Bytes;
use foyer::HybridCache;
use parking_lot::Mutex;
use tokio::sync::watch;

use self::page::{Page, PageKey};
pub use self::{
    builder::BlockCacheBuilder,
    index::{IndexCache, Weighted},
    readahead::ReadaheadState,
};
use mink_runtime::Clock;

use crate::{
    error::{CacheError, LoadError},
    metrics::{CacheMetrics, Counters},
    settings::{BlockCacheSettings, ReadaheadSettings},
};

/// Loads byte ranges of committed objects for the block cache; s3stream implements it with a ranged
/// GET on the object store.
///
/// Contract: `load(object_id, range)` returns exactly the bytes `range` of the object (`range.end` never
/// exceeds the object size the reader gave the cache), or an error. The cache calls it at most once at a
/// time per page, from a spawned task; it never retries by itself: after an error the next read calls
/// the loader again. Objects are immutable, so bytes once returned are valid for as long as the object id
/// exists.
#[async_trait]
pub trait PageLoader: Send + Sync + 'static {
    /// Returns bytes `range` of object `object_id`.
    async fn load(&self, object_id: u64, range: Range<u64>) -> Result<Bytes, LoadError>;

    /// Returns bytes `range` of object `object_id` (which starts at a page) in pages of
    /// `page_size` bytes, each in its own buffer, so that evicting a page frees its memory. The
    /// same contract as [`PageLoader::load`]. The default cuts one `load` into copies; a loader
    /// that can read into separate buffers (s3stream's, through the store) saves the copy.
    async fn load_pages(
        &self,
        object_id: u64,
        range: Range<u64>,
        page_size: u64,
    ) -> Result<Vec<Bytes>, LoadError> {
        let bytes = self.load(object_id, range).await?;
        let page_size = usize::try_from(page_size).unwrap_or(usize::MAX).max(1);
        if bytes.len() <= page_size {
            return Ok(vec![bytes]);
        }
        Ok(bytes
            .chunks(page_size)
            .map(Bytes::copy_from_slice)
            .collect())
    }
}

/// The block cache of one node. Cheap to clone; clones share the cache.
#[derive(Clone)]
pub struct BlockCache {
    inner: Arc<Inner>,
}

impl fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockCache")
            .field("settings", &self.inner.settings)
            .field("memory_usage", &self.inner.pages.memory().usage())
            .finish_non_exhaustive()
    }
}

/// The outcome of one page load, shared by every reader waiting on it.
type PageResult = Result<Bytes, CacheError>;

/// The loads in flight, by page: a reader of a page being loaded waits on its receiver.
type InflightMap = HashMap<PageKey, watch::Receiver<Option<PageResult>>>;

struct Inner {
    pages: HybridCache<PageKey, Page>,
    settings: BlockCacheSettings,
    readahead: ReadaheadSettings,
    clock: Arc<dyn Clock>,
    counters: Arc<Counters>,
    /// Pages being loaded; never held across an await.
    inflight: Mutex<InflightMap>,
    /// Bytes of readahead loads in flight.
    readahead_inflight: AtomicU64,
    disk: bool,
}

impl BlockCache {
    /// A builder for a cache with these settings.
    pub fn builder(settings: BlockCacheSettings) -> BlockCacheBuilder {
        BlockCacheBuilder::new(settings)
    }

    /// Reads bytes `range` of object `object_id` (of `object_size` bytes), loading missing pages with
    /// `loader`. No readahead: for random reads and one-off lookups.
    pub async fn read(
        &self,
        object_id: u64,
        object_size: u64,
        range: Range<u64>,
        loader: &Arc<dyn PageLoader>,
    ) -> Result<Bytes, CacheError> {
        self.inner
            .read_joined(object_id, object_size, range, loader)
            .await
    }

    /// Like [`BlockCache::read`], but the range comes as slices of its pages, in order, never
    /// copied (a range within one page is one slice); and, when `state` shows the reader is
    /// sequential, starts loading the pages after `range` in the background.
    pub async fn read_sequential(
        &self,
        object_id: u64,
        object_size: u64,
        range: Range<u64>,
        loader: &Arc<dyn PageLoader>,
        state: &mut ReadaheadState,
    ) -> Result<Vec<Bytes>, CacheError> {
        let (parts, waited) = self
            .inner
            .read(object_id, object_size, range.clone(), loader)
            .await?;
        self.advance(object_id, object_size, &range, loader, state, waited);
        Ok(parts)
    }

    /// Records that a sequential reader had bytes `range` of object `object_id` from elsewhere
    /// (its caller's decoded blocks) without reading them here: its run goes on, and readahead
    /// past `range` is issued as [`BlockCache::read_sequential`] would. A reader that skipped
    /// the range instead would look random at its next read, and its window would close.
    pub fn passed_over(
        &self,
        object_id: u64,
        object_size: u64,
        range: Range<u64>,
        loader: &Arc<dyn PageLoader>,
        state: &mut ReadaheadState,
    ) {
        let range = range.start.min(object_size)..range.end.min(object_size);
        self.advance(object_id, object_size, &range, loader, state, false);
    }

    /// Moves `state` past `range` and starts the readahead it asks for.
    fn advance(
        &self,
        object_id: u64,
        object_size: u64,
        range: &Range<u64>,
        loader: &Arc<dyn PageLoader>,
        state: &mut ReadaheadState,
        waited: bool,
    ) {
        if let Some(ahead) =
            state.advance(&self.inner.readahead, object_id, object_size, range, waited)
        {
            self.inner.read_ahead(object_id, object_size, ahead, loader);
        }
    }

    /// Starts loading bytes `range` of object `object_id` in the background, as readahead (the
    /// same in-flight bound; pages cached or loading already are skipped): for a sequential
    /// reader about to move on to its next object, which [`BlockCache::read_sequential`] cannot
    /// see coming.
    pub fn prefetch(
        &self,
        object_id: u64,
        object_size: u64,
        range: Range<u64>,
        loader: &Arc<dyn PageLoader>,
    ) {
        let range = range.start.min(object_size)..range.end.min(object_size);
        self.inner.read_ahead(object_id, object_size, range, loader);
    }

    /// Starts loading bytes `range` of object `object_id`, which a reader with no run yet (a
    /// new reader, or one whose last read looked random) asked for as a whole, as readahead (the
    /// same in-flight bound), and starts the reader's run there with a window as large as the
    /// range: its reads of the range find it loading, and readahead goes on past it without
    /// opening at `start_bytes` and growing one load at a time. A range shorter than
    /// `start_bytes` is loaded but starts no run.
    pub fn begin_run(
        &self,
        object_id: u64,
        object_size: u64,
        range: Range<u64>,
        loader: &Arc<dyn PageLoader>,
        state: &mut ReadaheadState,
    ) {
        let range = range.start.min(object_size)..range.end.min(object_size);
        self.prefetch(object_id, object_size, range.clone(), loader);
        state.expect(&self.inner.readahead, object_id, object_size, &range);
    }

    /// Drops every cached page of an object (e.g. once it has been deleted).
    pub fn invalidate_object(&self, object_id: u64, object_size: u64) {
        for page_index in 0..object_size.div_ceil(self.inner.settings.page_size) {
            self.inner.pages.remove(&PageKey {
                object_id,
                page_index,
            });
        }
    }

    /// The page size: loads and cached pages are aligned to it.
    pub fn page_size(&self) -> u64 {
        self.inner.settings.page_size
    }

    /// Bytes held by the memory tier.
    pub fn memory_usage(&self) -> usize {
        self.inner.pages.memory().usage()
    }

    /// Whether a disk tier is configured.
    pub fn has_disk_tier(&self) -> bool {
        self.inner.disk
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> CacheMetrics {
        self.inner.counters.snapshot()
    }

    /// Closes the cache, writing the memory tier to the disk tier when there is one.
    pub async fn close(&self) -> Result<(), CacheError> {
        self.inner
            .pages
            .close()
            .await
            .map_err(|source| CacheError::OpenDisk {
                dir: self.inner.settings.disk_dir.clone().unwrap_or_default(),
                source: Arc::new(source),
            })
    }
}

impl Inner {
    fn page_key(object_id: u64, page_index: u64) -> PageKey {
        PageKey {
            object_id,
            page_index,
        }
    }

    fn is_expired(&self, page: &Page) -> bool {
        self.clock
            .now_ms_unsigned()
            .saturating_sub(page.loaded_at_ms)
            >= self.settings.ttl_ms
    }
}

#[cfg(test)]
mod tests;
