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
//! The [`IndexCache`] beside it holds parsed footers/indexes of objects so that locating a batch in a
//! warm object costs no GET.

mod index;
pub(crate) mod page;
mod readahead;

use std::{
    collections::HashMap,
    fmt,
    ops::Range,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use foyer::{
    BlockEngineConfig, DeviceBuilder, FsDeviceBuilder, HybridCache, HybridCacheBuilder,
    HybridCachePolicy, LruConfig, PsyncIoEngineConfig, Source,
};
use parking_lot::Mutex;
use tokio::sync::watch;

use self::page::{MAX_PAGE_BYTES, Page, PageKey};
pub use self::{
    index::{IndexCache, Weighted},
    readahead::ReadaheadState,
};
use crate::{
    clock::{Clock, SystemClock},
    error::{CacheError, LoadError},
    metrics::{CacheMetrics, Counters, add},
    settings::{BlockCacheSettings, ReadaheadSettings},
};

/// Bookkeeping per page counted against the memory budget besides the page bytes.
const PAGE_OVERHEAD: usize = 64;

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
}

type PageResult = Result<Bytes, CacheError>;
type InflightMap = HashMap<PageKey, watch::Receiver<Option<PageResult>>>;

/// Builds a [`BlockCache`].
#[derive(Debug)]
pub struct BlockCacheBuilder {
    settings: BlockCacheSettings,
    readahead: ReadaheadSettings,
    clock: Arc<dyn Clock>,
    counters: Arc<Counters>,
}

impl BlockCacheBuilder {
    /// Readahead settings (default: [`ReadaheadSettings::default`]).
    pub fn readahead(mut self, readahead: ReadaheadSettings) -> Self {
        self.readahead = readahead;
        self
    }

    /// The clock page ages are measured with (default: [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub(crate) fn counters(mut self, counters: Arc<Counters>) -> Self {
        self.counters = counters;
        self
    }

    fn validate(&self) -> Result<(), CacheError> {
        let s = &self.settings;
        let invalid = |name, reason| Err(CacheError::InvalidSetting { name, reason });
        if s.page_size == 0 || s.page_size > u64::from(MAX_PAGE_BYTES) {
            return invalid("block.page_size", "must be between 1 byte and 64 MiB");
        }
        if s.memory_bytes < s.page_size {
            return invalid("block.memory_bytes", "must hold at least one page");
        }
        if s.ttl_ms == 0 {
            return invalid("block.ttl_ms", "must be positive");
        }
        if s.max_load_bytes < s.page_size {
            return invalid("block.max_load_bytes", "must be at least one page");
        }
        if self.readahead.max_inflight_percent > 100 {
            return invalid("readahead.max_inflight_percent", "must be at most 100");
        }
        if self.readahead.start_bytes > self.readahead.max_bytes {
            return invalid(
                "readahead.start_bytes",
                "must not exceed readahead.max_bytes",
            );
        }
        Ok(())
    }

    /// Opens the cache (and its disk tier, if a directory is configured).
    pub async fn build(self) -> Result<BlockCache, CacheError> {
        self.validate()?;
        let settings = self.settings;
        let memory_bytes = usize::try_from(settings.memory_bytes).unwrap_or(usize::MAX);
        let storage = HybridCacheBuilder::new()
            .with_name("mink-block-cache")
            .with_policy(HybridCachePolicy::WriteOnEviction)
            .memory(memory_bytes)
            .with_eviction_config(LruConfig::default())
            .with_weighter(|_key: &PageKey, page: &Page| page.data.len() + PAGE_OVERHEAD)
            .storage();
        let disk = settings.disk_dir.is_some();
        let pages = match &settings.disk_dir {
            Some(dir) => {
                let open_error = |source: foyer::Error| CacheError::OpenDisk {
                    dir: dir.clone(),
                    source: Arc::new(source),
                };
                let device = FsDeviceBuilder::new(dir)
                    .with_capacity(usize::try_from(settings.disk_bytes).unwrap_or(usize::MAX))
                    .build()
                    .map_err(open_error)?;
                // A disk block must hold a whole encoded page.
                let block_size = (16 * 1024 * 1024)
                    .max((settings.page_size as usize + 4096).next_power_of_two());
                storage
                    .with_io_engine_config(PsyncIoEngineConfig::new())
                    .with_engine_config(BlockEngineConfig::new(device).with_block_size(block_size))
                    .build()
                    .await
                    .map_err(open_error)?
            }
            None => storage
                .build()
                .await
                .map_err(|source| CacheError::OpenDisk {
                    dir: Default::default(),
                    source: Arc::new(source),
                })?,
        };
        Ok(BlockCache {
            inner: Arc::new(Inner {
                pages,
                settings,
                readahead: self.readahead,
                clock: self.clock,
                counters: self.counters,
                inflight: Mutex::default(),
                readahead_inflight: AtomicU64::new(0),
                disk,
            }),
        })
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

/// A page a reader will get: at hand, or from a load in flight.
enum Pending {
    Ready(Bytes),
    Loading(watch::Receiver<Option<PageResult>>),
}

impl BlockCache {
    /// A builder for a cache with these settings.
    pub fn builder(settings: BlockCacheSettings) -> BlockCacheBuilder {
        BlockCacheBuilder {
            settings,
            readahead: ReadaheadSettings::default(),
            clock: Arc::new(SystemClock),
            counters: Arc::default(),
        }
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
        let (bytes, _waited) = self
            .inner
            .read(object_id, object_size, range, loader)
            .await?;
        Ok(bytes)
    }

    /// Like [`BlockCache::read`], and, when `state` shows the reader is sequential, starts loading the
    /// pages after `range` in the background.
    pub async fn read_sequential(
        &self,
        object_id: u64,
        object_size: u64,
        range: Range<u64>,
        loader: &Arc<dyn PageLoader>,
        state: &mut ReadaheadState,
    ) -> Result<Bytes, CacheError> {
        let (bytes, waited) = self
            .inner
            .read(object_id, object_size, range.clone(), loader)
            .await?;
        if let Some(ahead) = state.advance(
            &self.inner.readahead,
            object_id,
            object_size,
            &range,
            waited,
        ) {
            self.inner.read_ahead(object_id, object_size, ahead, loader);
        }
        Ok(bytes)
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
        self.clock.now_millis().saturating_sub(page.loaded_at_ms) >= self.settings.ttl_ms
    }

    /// Looks a page up in both tiers; `None` if absent or expired (an expired page is removed).
    async fn lookup(&self, key: PageKey) -> Option<Bytes> {
        let entry = match self.pages.get(&key).await {
            Ok(Some(entry)) => entry,
            Ok(None) => return None,
            Err(error) => {
                tracing::warn!(?key, %error, "block cache disk tier read failed; loading the page again");
                return None;
            }
        };
        if self.is_expired(&entry) {
            self.pages.remove(&key);
            add(&self.counters.block_expired, 1);
            return None;
        }
        match entry.source() {
            Source::Disk => add(&self.counters.block_disk_hits, 1),
            Source::Memory | Source::Outer => add(&self.counters.block_memory_hits, 1),
        }
        Some(entry.data.clone())
    }

    /// Reads a range; also says whether the reader had to wait for a load.
    async fn read(
        self: &Arc<Self>,
        object_id: u64,
        object_size: u64,
        range: Range<u64>,
        loader: &Arc<dyn PageLoader>,
    ) -> Result<(Bytes, bool), CacheError> {
        if range.start > range.end || range.end > object_size {
            return Err(CacheError::RangeOutOfBounds {
                object_id,
                range,
                object_size,
            });
        }
        if range.is_empty() {
            return Ok((Bytes::new(), false));
        }
        let page_size = self.settings.page_size;
        let first = range.start / page_size;
        let last = (range.end - 1) / page_size;
        let mut pages = Vec::with_capacity((last - first + 1) as usize);
        let mut missing = Vec::new();
        for page_index in first..=last {
            let page = self.lookup(Self::page_key(object_id, page_index)).await;
            if page.is_none() {
                missing.push(page_index);
            }
            pages.push(page);
        }
        let waited = !missing.is_empty();
        if waited {
            add(&self.counters.block_misses, missing.len() as u64);
            for (page_index, pending) in self.claim(object_id, object_size, &missing, loader, None)
            {
                let bytes = match pending {
                    Pending::Ready(bytes) => bytes,
                    Pending::Loading(rx) => Self::wait(object_id, page_index, rx).await?,
                };
                pages[(page_index - first) as usize] = Some(bytes);
            }
        }
        let bytes = self.assemble(object_id, object_size, first, &pages, &range)?;
        Ok((bytes, waited))
    }

    async fn wait(
        object_id: u64,
        page_index: u64,
        mut rx: watch::Receiver<Option<PageResult>>,
    ) -> PageResult {
        match rx.wait_for(Option::is_some).await {
            Ok(result) => match &*result {
                Some(result) => result.clone(),
                None => Err(CacheError::LoadAbandoned {
                    object_id,
                    page_index,
                }),
            },
            Err(_) => Err(CacheError::LoadAbandoned {
                object_id,
                page_index,
            }),
        }
    }

    /// Copies the requested range out of its pages (no copy when it lies in one page).
    fn assemble(
        &self,
        object_id: u64,
        object_size: u64,
        first: u64,
        pages: &[Option<Bytes>],
        range: &Range<u64>,
    ) -> Result<Bytes, CacheError> {
        let page_size = self.settings.page_size;
        let mut parts = Vec::with_capacity(pages.len());
        for (i, page) in pages.iter().enumerate() {
            let page_index = first + i as u64;
            let page_start = page_index * page_size;
            let expected = page_size.min(object_size - page_start);
            let page = match page {
                Some(page) if page.len() as u64 == expected => page,
                other => {
                    return Err(CacheError::PageSizeMismatch {
                        object_id,
                        page_index,
                        expected,
                        actual: other.as_ref().map_or(0, |p| p.len() as u64),
                    });
                }
            };
            let from = range.start.max(page_start) - page_start;
            let to = range.end.min(page_start + expected) - page_start;
            parts.push(page.slice(from as usize..to as usize));
        }
        if parts.len() == 1 {
            return Ok(parts.pop().unwrap_or_default());
        }
        let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
        for part in parts {
            out.extend_from_slice(&part);
        }
        Ok(out.freeze())
    }

    /// For each page: joins its load in flight, takes it from memory, or becomes its loader. The pages
    /// this call must load are loaded by spawned tasks, adjacent ones together.
    fn claim(
        self: &Arc<Self>,
        object_id: u64,
        object_size: u64,
        page_indexes: &[u64],
        loader: &Arc<dyn PageLoader>,
        readahead: Option<Arc<ReadaheadReservation>>,
    ) -> Vec<(u64, Pending)> {
        let mut out = Vec::with_capacity(page_indexes.len());
        let mut mine: Vec<(u64, watch::Sender<Option<PageResult>>)> = Vec::new();
        {
            let mut inflight = self.inflight.lock();
            for &page_index in page_indexes {
                let key = Self::page_key(object_id, page_index);
                if let Some(rx) = inflight.get(&key) {
                    out.push((page_index, Pending::Loading(rx.clone())));
                    continue;
                }
                // A load may have finished between the reader's lookup and now.
                if let Some(entry) = self.pages.memory().get(&key)
                    && !self.is_expired(&entry)
                {
                    out.push((page_index, Pending::Ready(entry.data.clone())));
                    continue;
                }
                let (tx, rx) = watch::channel(None);
                inflight.insert(key, rx.clone());
                out.push((page_index, Pending::Loading(rx)));
                mine.push((page_index, tx));
            }
        }
        let pages_per_load =
            (self.settings.max_load_bytes / self.settings.page_size).max(1) as usize;
        let mut run: Vec<(u64, watch::Sender<Option<PageResult>>)> = Vec::new();
        for (page_index, tx) in mine {
            let adjacent = run.last().is_some_and(|(last, _)| *last + 1 == page_index);
            if !run.is_empty() && (!adjacent || run.len() >= pages_per_load) {
                self.spawn_load(
                    object_id,
                    object_size,
                    std::mem::take(&mut run),
                    loader,
                    readahead.clone(),
                );
            }
            run.push((page_index, tx));
        }
        if !run.is_empty() {
            self.spawn_load(object_id, object_size, run, loader, readahead);
        }
        out
    }

    fn spawn_load(
        self: &Arc<Self>,
        object_id: u64,
        object_size: u64,
        run: Vec<(u64, watch::Sender<Option<PageResult>>)>,
        loader: &Arc<dyn PageLoader>,
        readahead: Option<Arc<ReadaheadReservation>>,
    ) {
        let first = run.first().map_or(0, |(i, _)| *i);
        let load = LoadRun {
            inner: Arc::clone(self),
            object_id,
            object_size,
            first,
            senders: run.into_iter().map(|(_, tx)| tx).collect(),
            loader: Arc::clone(loader),
            readahead,
        };
        tokio::spawn(load.run());
    }

    /// Starts loading the pages covering `ahead` that are in neither tier nor in flight.
    fn read_ahead(
        self: &Arc<Self>,
        object_id: u64,
        object_size: u64,
        ahead: Range<u64>,
        loader: &Arc<dyn PageLoader>,
    ) {
        let page_size = self.settings.page_size;
        if ahead.is_empty() || ahead.end > object_size {
            return;
        }
        let missing: Vec<u64> = (ahead.start / page_size..=(ahead.end - 1) / page_size)
            .filter(|&i| !self.pages.contains(&Self::page_key(object_id, i)))
            .collect();
        if missing.is_empty() {
            return;
        }
        let bytes = missing.len() as u64 * page_size;
        let budget =
            self.settings.memory_bytes / 100 * u64::from(self.readahead.max_inflight_percent);
        let before = self.readahead_inflight.fetch_add(bytes, Ordering::AcqRel);
        if before + bytes > budget {
            self.readahead_inflight.fetch_sub(bytes, Ordering::AcqRel);
            add(&self.counters.readahead_skipped, 1);
            tracing::debug!(
                object_id,
                ?ahead,
                "readahead skipped: readahead in flight is at its budget"
            );
            return;
        }
        let reservation = Arc::new(ReadaheadReservation {
            inner: Arc::downgrade(self),
            bytes,
        });
        // The waiters are dropped: nobody waits for readahead, readers join its loads.
        drop(self.claim(object_id, object_size, &missing, loader, Some(reservation)));
    }
}

/// Readahead bytes counted against the in-flight budget until every load of the window has finished.
struct ReadaheadReservation {
    inner: std::sync::Weak<Inner>,
    bytes: u64,
}

impl Drop for ReadaheadReservation {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            inner
                .readahead_inflight
                .fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

/// One ranged load of adjacent pages. Dropping it (after the load, or if its task dies) removes its
/// pages from the in-flight table; waiters of a load that never reported see `LoadAbandoned`.
struct LoadRun {
    inner: Arc<Inner>,
    object_id: u64,
    object_size: u64,
    first: u64,
    senders: Vec<watch::Sender<Option<PageResult>>>,
    loader: Arc<dyn PageLoader>,
    /// Held until the load ends; `Some` for readahead loads.
    readahead: Option<Arc<ReadaheadReservation>>,
}

impl LoadRun {
    async fn run(self) {
        let inner = &self.inner;
        let page_size = inner.settings.page_size;
        let count = self.senders.len() as u64;
        let start = self.first * page_size;
        let end = ((self.first + count) * page_size).min(self.object_size);
        let range = start..end;
        add(&inner.counters.loads, 1);
        if self.readahead.is_some() {
            add(&inner.counters.readahead_loads, 1);
        }
        let result = self.loader.load(self.object_id, range.clone()).await;
        let results: Vec<PageResult> = match result {
            Ok(bytes) if bytes.len() as u64 == end - start => {
                add(&inner.counters.bytes_loaded, bytes.len() as u64);
                let loaded_at_ms = inner.clock.now_millis();
                (0..count)
                    .map(|i| {
                        let from = (i * page_size) as usize;
                        let to = ((i + 1) * page_size).min(end - start) as usize;
                        // A page of a multi-page load is copied out so that evicting its neighbours
                        // frees their memory.
                        let data = if count == 1 {
                            bytes.clone()
                        } else {
                            Bytes::copy_from_slice(&bytes[from..to])
                        };
                        let key = Inner::page_key(self.object_id, self.first + i);
                        inner.pages.insert(
                            key,
                            Page {
                                data: data.clone(),
                                loaded_at_ms,
                            },
                        );
                        Ok(data)
                    })
                    .collect()
            }
            Ok(bytes) => {
                add(&inner.counters.load_errors, 1);
                let error = CacheError::ShortLoad {
                    object_id: self.object_id,
                    range: range.clone(),
                    expected: end - start,
                    actual: bytes.len() as u64,
                };
                vec![Err(error); count as usize]
            }
            Err(source) => {
                add(&inner.counters.load_errors, 1);
                tracing::debug!(object_id = self.object_id, ?range, error = %source, "page load failed");
                let error = CacheError::Load {
                    object_id: self.object_id,
                    range: range.clone(),
                    source: Arc::new(source),
                };
                vec![Err(error); count as usize]
            }
        };
        for (tx, result) in self.senders.iter().zip(results) {
            tx.send_replace(Some(result));
        }
    }
}

impl Drop for LoadRun {
    fn drop(&mut self) {
        let mut inflight = self.inner.inflight.lock();
        for i in 0..self.senders.len() as u64 {
            inflight.remove(&Inner::page_key(self.object_id, self.first + i));
        }
    }
}

#[cfg(test)]
mod tests;
