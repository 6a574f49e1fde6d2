//! Building a [`BlockCache`]: checking its settings and opening foyer's hybrid cache (memory tier,
//! and the disk tier when a directory is configured).

use std::sync::{Arc, atomic::AtomicU64};

use foyer::{
    BlockEngineConfig, DeviceBuilder, FsDeviceBuilder, HybridCacheBuilder, HybridCachePolicy,
    LruConfig, PsyncIoEngineConfig,
};
use parking_lot::Mutex;

use super::page::{MAX_PAGE_BYTES, Page, PageKey};
use super::{BlockCache, Inner};
use mink_runtime::{Clock, SystemClock};

use crate::{
    error::CacheError,
    metrics::Counters,
    settings::{BlockCacheSettings, ReadaheadSettings},
};

/// Bookkeeping per page counted against the memory budget besides the page bytes.
const PAGE_OVERHEAD: usize = 64;

/// Builds a [`BlockCache`].
#[derive(Debug)]
pub struct BlockCacheBuilder {
    settings: BlockCacheSettings,
    readahead: ReadaheadSettings,
    clock: Arc<dyn Clock>,
    counters: Arc<Counters>,
}

impl BlockCacheBuilder {
    /// A builder with default readahead, the system clock and counters of its own.
    pub(super) fn new(settings: BlockCacheSettings) -> Self {
        BlockCacheBuilder {
            settings,
            readahead: ReadaheadSettings::default(),
            clock: Arc::new(SystemClock),
            counters: Arc::default(),
        }
    }

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
