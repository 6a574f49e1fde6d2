//! Hit, miss and load counters of the caches, and the [`CacheMetrics`] snapshot handed to tests and to
//! the node's `/metrics` endpoint.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// A snapshot of the cache counters. Every counter only grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[non_exhaustive]
pub struct CacheMetrics {
    /// Tail cache reads answered with at least one batch.
    pub tail_hits: u64,
    /// Tail cache reads that found nothing at the asked offset.
    pub tail_misses: u64,
    /// Pages served from the block cache's memory tier.
    pub block_memory_hits: u64,
    /// Pages served from the block cache's disk tier.
    pub block_disk_hits: u64,
    /// Pages a reader needed that were in neither tier (loaded, or waited on while another load ran).
    pub block_misses: u64,
    /// Pages found but older than the TTL, dropped and loaded again (also counted as misses).
    pub block_expired: u64,
    /// Calls to the page loader (each one ranged GET), foreground and readahead.
    pub loads: u64,
    /// Bytes returned by successful page loads.
    pub bytes_loaded: u64,
    /// Page loads that failed.
    pub load_errors: u64,
    /// Of `loads`, those issued in the background: readahead, `BlockCache::prefetch` and the
    /// range a new run asked for (`BlockCache::begin_run`).
    pub readahead_loads: u64,
    /// Readahead windows skipped because readahead in flight already held its share of the memory tier.
    pub readahead_skipped: u64,
    /// Object index lookups answered from the index cache.
    pub index_hits: u64,
    /// Object index loads (index cache misses).
    pub index_loads: u64,
}

/// The live counters; shared by the caches of one node.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) tail_hits: AtomicU64,
    pub(crate) tail_misses: AtomicU64,
    pub(crate) block_memory_hits: AtomicU64,
    pub(crate) block_disk_hits: AtomicU64,
    pub(crate) block_misses: AtomicU64,
    pub(crate) block_expired: AtomicU64,
    pub(crate) loads: AtomicU64,
    pub(crate) bytes_loaded: AtomicU64,
    pub(crate) load_errors: AtomicU64,
    pub(crate) readahead_loads: AtomicU64,
    pub(crate) readahead_skipped: AtomicU64,
    pub(crate) index_hits: AtomicU64,
    pub(crate) index_loads: AtomicU64,
}

/// Adds `n` to a counter.
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn snapshot(&self) -> CacheMetrics {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CacheMetrics {
            tail_hits: get(&self.tail_hits),
            tail_misses: get(&self.tail_misses),
            block_memory_hits: get(&self.block_memory_hits),
            block_disk_hits: get(&self.block_disk_hits),
            block_misses: get(&self.block_misses),
            block_expired: get(&self.block_expired),
            loads: get(&self.loads),
            bytes_loaded: get(&self.bytes_loaded),
            load_errors: get(&self.load_errors),
            readahead_loads: get(&self.readahead_loads),
            readahead_skipped: get(&self.readahead_skipped),
            index_hits: get(&self.index_hits),
            index_loads: get(&self.index_loads),
        }
    }
}
