//! The tail cache: the most recent batches of each stream, in memory, so that a reader keeping up with
//! a writer is answered without entering the engine.
//!
//! Data enters only through [`TailCache::append`], called by the write path when a batch is submitted
//! to its stream; a read never fills the cache (a miss is simply a miss and the reader goes down to the
//! log cache). Data leaves by eviction under the byte budget (least recently used first), by
//! [`TailCache::trim`] and by [`TailCache::remove_stream`].
//!
//! Batches live in a moka cache keyed by `(stream_id, base_offset)`, weighed by their byte length.
//! Beside it, each stream has a small ordered index `base_offset -> (end_offset, len, generation)`
//! (`offset_index.rs`), so that the batch containing an offset is found with one ordered lookup. Moka's
//! eviction listener removes index entries when moka drops a batch; the generation stamped on each
//! insertion keeps a late notification about an older value from removing the index entry of a
//! newer one. The index may briefly
//! name a batch moka has already dropped (the listener runs during moka's maintenance); a read then stops
//! at that batch, so the answer is always a correct, contiguous prefix.

mod offset_index;

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use bytes::Bytes;
use moka::{notification::RemovalCause, policy::EvictionPolicy, sync::Cache};

use self::offset_index::StreamIndexes;
use crate::{
    error::CacheError,
    metrics::{CacheMetrics, Counters, add},
    settings::TailCacheSettings,
};

/// Above this many batches, [`TailCache::remove_stream`] leaves a stream's batches to eviction.
const BULK_INVALIDATION: usize = 1024;

/// Per-entry bookkeeping counted against the budget besides the batch bytes.
const ENTRY_OVERHEAD: u64 = 64;

/// One batch as held by the tail cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedBatch {
    /// Offset of the batch's first record.
    pub base_offset: u64,
    /// One past the batch's last record.
    pub end_offset: u64,
    /// The batch, exactly as appended.
    pub bytes: Bytes,
}

/// The answer of a tail cache read: contiguous batches, the first one containing the asked offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailRead {
    /// Batches in offset order; `batches[i].end_offset == batches[i + 1].base_offset`. Never empty.
    pub batches: Vec<CachedBatch>,
}

impl TailRead {
    /// The offset after the last returned batch: where the reader continues.
    pub fn next_offset(&self) -> u64 {
        self.batches.last().map_or(0, |b| b.end_offset)
    }

    /// Total bytes of the returned batches.
    pub fn byte_len(&self) -> usize {
        self.batches.iter().map(|b| b.bytes.len()).sum()
    }
}

#[derive(Debug, Clone)]
struct Entry {
    bytes: Bytes,
    end_offset: u64,
    generation: u64,
}

/// The tail cache of one node. Cheap to clone; clones share the cache.
#[derive(Debug, Clone)]
pub struct TailCache {
    batches: Cache<(u64, u64), Entry, foldhash::fast::RandomState>,
    // Never held across an await or a call into moka: the eviction listener takes this lock.
    indexes: Arc<StreamIndexes>,
    generation: Arc<AtomicU64>,
    counters: Arc<Counters>,
}

impl TailCache {
    /// A tail cache with its own counters.
    pub fn new(settings: &TailCacheSettings) -> Self {
        Self::with_counters(settings, Arc::default())
    }

    pub(crate) fn with_counters(settings: &TailCacheSettings, counters: Arc<Counters>) -> Self {
        let indexes: Arc<StreamIndexes> = Arc::default();
        let listener_indexes = Arc::clone(&indexes);
        let batches = Cache::builder()
            .max_capacity(settings.capacity_bytes)
            .eviction_policy(EvictionPolicy::lru())
            .weigher(|_key: &(u64, u64), entry: &Entry| {
                u32::try_from(entry.bytes.len() as u64 + ENTRY_OVERHEAD).unwrap_or(u32::MAX)
            })
            .eviction_listener(move |key: Arc<(u64, u64)>, entry: Entry, cause| {
                if cause == RemovalCause::Replaced {
                    return;
                }
                let (stream_id, base_offset) = *key;
                listener_indexes.evicted(stream_id, base_offset, entry.generation);
            })
            // Keys are our own offsets, not attacker-chosen: a fast hash is enough.
            .build_with_hasher(foldhash::fast::RandomState::default());
        Self {
            batches,
            indexes,
            generation: Arc::new(AtomicU64::new(0)),
            counters,
        }
    }

    /// Adds a batch just submitted by the write path. Only the write path calls this.
    ///
    /// Batches of a stream may arrive out of offset order (concurrent appenders add them after
    /// taking their offsets): a batch overlapping no cached one is added, and reads stop at a gap
    /// until the batch filling it arrives. A batch overlapping cached ones means the log was
    /// rewritten from there (e.g. after a failed append was retried): it supersedes every cached
    /// batch from the first it overlaps.
    pub fn append(
        &self,
        stream_id: u64,
        base_offset: u64,
        end_offset: u64,
        bytes: Bytes,
    ) -> Result<(), CacheError> {
        if end_offset <= base_offset {
            return Err(CacheError::EmptyBatch {
                stream_id,
                base_offset,
                end_offset,
            });
        }
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let superseded =
            self.indexes
                .insert(stream_id, base_offset, end_offset, bytes.len(), generation);
        for base in superseded {
            self.batches.invalidate(&(stream_id, base));
        }
        self.batches.insert(
            (stream_id, base_offset),
            Entry {
                bytes,
                end_offset,
                generation,
            },
        );
        Ok(())
    }

    /// Reads contiguous batches of `stream_id`, the first one containing `from_offset`, adding
    /// batches while their total stays within `max_bytes` (the first batch is returned whatever its
    /// size, so a reader always progresses). `None` when the batch containing `from_offset` is not
    /// cached: below the cached range, at or above its end, or evicted.
    pub fn get(&self, stream_id: u64, from_offset: u64, max_bytes: usize) -> Option<TailRead> {
        let plan = self.indexes.plan(stream_id, from_offset, max_bytes);
        let mut batches = Vec::with_capacity(plan.len());
        for (base_offset, generation) in plan {
            match self.batches.get(&(stream_id, base_offset)) {
                Some(entry) if entry.generation == generation => batches.push(CachedBatch {
                    base_offset,
                    end_offset: entry.end_offset,
                    bytes: entry.bytes,
                }),
                _ => break,
            }
        }
        if batches.is_empty() {
            add(&self.counters.tail_misses, 1);
            None
        } else {
            add(&self.counters.tail_hits, 1);
            Some(TailRead { batches })
        }
    }

    /// Drops every cached batch of `stream_id` that lies entirely below `start_offset`.
    pub fn trim(&self, stream_id: u64, start_offset: u64) {
        let dropped = self.indexes.trim(stream_id, start_offset);
        for base in dropped {
            self.batches.invalidate(&(stream_id, base));
        }
    }

    /// Drops every cached batch of `stream_id`; for a stream that is closed or destroyed.
    ///
    /// The stream's index goes at once, so nothing of it is readable after this returns. A stream
    /// with few cached batches has them invalidated now; one with many (a busy stream may hold
    /// hundreds of thousands, and moka invalidates one key at a time) leaves them unreachable: no
    /// index names them and a later batch at the same offset carries a new generation, so they are
    /// never returned, and as the least recently used entries they are the first the byte budget
    /// evicts.
    pub fn remove_stream(&self, stream_id: u64) {
        let dropped = self.indexes.remove_stream(stream_id);
        let Some(dropped) = dropped else {
            return;
        };
        if dropped.len() > BULK_INVALIDATION {
            return;
        }
        for base in dropped {
            self.batches.invalidate(&(stream_id, base));
        }
    }

    /// The offsets `[first base, last end)` the index holds for `stream_id`, possibly with gaps.
    pub fn cached_range(&self, stream_id: u64) -> Option<std::ops::Range<u64>> {
        self.indexes.cached_range(stream_id)
    }

    /// Number of batches in the per-stream indexes (all streams).
    pub fn indexed_batches(&self) -> usize {
        self.indexes.indexed_batches()
    }

    /// Number of batches held (after pending maintenance has run).
    pub fn cached_batches(&self) -> u64 {
        self.batches.entry_count()
    }

    /// Bytes currently counted against the budget (after pending maintenance has run).
    pub fn weighted_size(&self) -> u64 {
        self.batches.weighted_size()
    }

    /// Runs moka's pending maintenance (evictions and their notifications) now.
    pub fn run_pending_tasks(&self) {
        self.batches.run_pending_tasks();
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> CacheMetrics {
        self.counters.snapshot()
    }
}

#[cfg(test)]
mod tests;
