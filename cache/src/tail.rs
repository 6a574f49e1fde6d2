//! The tail cache: the most recent batches of each stream, in memory, so that a reader keeping up with
//! a writer is answered without entering the engine.
//!
//! Data enters only through [`TailCache::append`], called by the write path when a batch is submitted
//! to its stream; a read never fills the cache (a miss is simply a miss and the reader goes down to the
//! log cache). Data leaves by eviction under the byte budget (least recently used first), by
//! [`TailCache::trim`] and by [`TailCache::remove_stream`].
//!
//! Batches live in a moka cache keyed by `(stream_id, base_offset)`, weighed by their byte length.
//! Beside it, each stream has a small ordered index `base_offset -> (end_offset, len, generation)`, so
//! that the batch containing an offset is found with one ordered lookup. Moka's eviction listener
//! removes index entries when moka drops a batch; the generation stamped on each insertion keeps a late
//! notification about an older value from removing the index entry of a newer one. The index may briefly
//! name a batch moka has already dropped (the listener runs during moka's maintenance); a read then stops
//! at that batch, so the answer is always a correct, contiguous prefix.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use bytes::Bytes;
use moka::{future::Cache, notification::RemovalCause, policy::EvictionPolicy};
use parking_lot::Mutex;

use crate::{
    error::CacheError,
    metrics::{CacheMetrics, Counters, add},
    settings::TailCacheSettings,
};

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

#[derive(Debug, Clone, Copy)]
struct IndexEntry {
    end_offset: u64,
    len: usize,
    generation: u64,
}

type Indexes = Mutex<HashMap<u64, BTreeMap<u64, IndexEntry>>>;

/// The tail cache of one node. Cheap to clone; clones share the cache.
#[derive(Debug, Clone)]
pub struct TailCache {
    batches: Cache<(u64, u64), Entry>,
    // Never held across an await or a call into moka: the eviction listener takes this lock.
    indexes: Arc<Indexes>,
    generation: Arc<AtomicU64>,
    counters: Arc<Counters>,
}

impl TailCache {
    /// A tail cache with its own counters.
    pub fn new(settings: &TailCacheSettings) -> Self {
        Self::with_counters(settings, Arc::default())
    }

    pub(crate) fn with_counters(settings: &TailCacheSettings, counters: Arc<Counters>) -> Self {
        let indexes: Arc<Indexes> = Arc::default();
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
                let mut indexes = listener_indexes.lock();
                if let Some(index) = indexes.get_mut(&stream_id) {
                    if index
                        .get(&base_offset)
                        .is_some_and(|e| e.generation == entry.generation)
                    {
                        index.remove(&base_offset);
                    }
                    if index.is_empty() {
                        indexes.remove(&stream_id);
                    }
                }
            })
            .build();
        Self {
            batches,
            indexes,
            generation: Arc::new(AtomicU64::new(0)),
            counters,
        }
    }

    /// Adds a batch just submitted by the write path. Only the write path calls this.
    ///
    /// Batches of a stream are expected in offset order. A batch that starts below the end of the
    /// cached ones supersedes every cached batch it overlaps (the log was rewritten from there, e.g.
    /// after a failed append was retried); a batch leaving a gap is kept, and reads stop at the gap.
    pub async fn append(
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
        let superseded: Vec<u64> = {
            let mut indexes = self.indexes.lock();
            let index = indexes.entry(stream_id).or_default();
            let overlapping: Vec<u64> = index
                .iter()
                .rev()
                .take_while(|(_, e)| e.end_offset > base_offset)
                .map(|(base, _)| *base)
                .collect();
            for base in &overlapping {
                index.remove(base);
            }
            index.insert(
                base_offset,
                IndexEntry {
                    end_offset,
                    len: bytes.len(),
                    generation,
                },
            );
            overlapping
                .into_iter()
                .filter(|b| *b != base_offset)
                .collect()
        };
        for base in superseded {
            self.batches.invalidate(&(stream_id, base)).await;
        }
        self.batches
            .insert(
                (stream_id, base_offset),
                Entry {
                    bytes,
                    end_offset,
                    generation,
                },
            )
            .await;
        Ok(())
    }

    /// Reads contiguous batches of `stream_id`, the first one containing `from_offset`, adding
    /// batches while their total stays within `max_bytes` (the first batch is returned whatever its
    /// size, so a reader always progresses). `None` when the batch containing `from_offset` is not
    /// cached: below the cached range, at or above its end, or evicted.
    pub async fn get(
        &self,
        stream_id: u64,
        from_offset: u64,
        max_bytes: usize,
    ) -> Option<TailRead> {
        let plan = self.plan(stream_id, from_offset, max_bytes);
        let mut batches = Vec::with_capacity(plan.len());
        for (base_offset, generation) in plan {
            match self.batches.get(&(stream_id, base_offset)).await {
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

    /// The batches a read should return, according to the index.
    fn plan(&self, stream_id: u64, from_offset: u64, max_bytes: usize) -> Vec<(u64, u64)> {
        let indexes = self.indexes.lock();
        let Some(index) = indexes.get(&stream_id) else {
            return Vec::new();
        };
        let Some((&first_base, first)) = index.range(..=from_offset).next_back() else {
            return Vec::new();
        };
        if first.end_offset <= from_offset {
            return Vec::new();
        }
        let mut plan = vec![(first_base, first.generation)];
        let mut total = first.len;
        let mut next = first.end_offset;
        for (&base, entry) in index.range(first.end_offset..) {
            if base != next || total.saturating_add(entry.len) > max_bytes {
                break;
            }
            plan.push((base, entry.generation));
            total += entry.len;
            next = entry.end_offset;
        }
        plan
    }

    /// Drops every cached batch of `stream_id` that lies entirely below `start_offset`.
    pub async fn trim(&self, stream_id: u64, start_offset: u64) {
        let dropped: Vec<u64> = {
            let mut indexes = self.indexes.lock();
            let Some(index) = indexes.get_mut(&stream_id) else {
                return;
            };
            let dropped: Vec<u64> = index
                .iter()
                .take_while(|(_, e)| e.end_offset <= start_offset)
                .map(|(base, _)| *base)
                .collect();
            for base in &dropped {
                index.remove(base);
            }
            if index.is_empty() {
                indexes.remove(&stream_id);
            }
            dropped
        };
        for base in dropped {
            self.batches.invalidate(&(stream_id, base)).await;
        }
    }

    /// Drops every cached batch of `stream_id`; for a stream that is closed or destroyed.
    pub async fn remove_stream(&self, stream_id: u64) {
        let dropped = self.indexes.lock().remove(&stream_id).unwrap_or_default();
        for base in dropped.into_keys() {
            self.batches.invalidate(&(stream_id, base)).await;
        }
    }

    /// The offsets `[first base, last end)` the index holds for `stream_id`, possibly with gaps.
    pub fn cached_range(&self, stream_id: u64) -> Option<std::ops::Range<u64>> {
        let indexes = self.indexes.lock();
        let index = indexes.get(&stream_id)?;
        let (first, _) = index.first_key_value()?;
        let (_, last) = index.last_key_value()?;
        Some(*first..last.end_offset)
    }

    /// Number of batches in the per-stream indexes (all streams).
    pub fn indexed_batches(&self) -> usize {
        self.indexes.lock().values().map(BTreeMap::len).sum()
    }

    /// Bytes currently counted against the budget (after pending maintenance has run).
    pub fn weighted_size(&self) -> u64 {
        self.batches.weighted_size()
    }

    /// Runs moka's pending maintenance (evictions and their notifications) now.
    pub async fn run_pending_tasks(&self) {
        self.batches.run_pending_tasks().await;
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> CacheMetrics {
        self.counters.snapshot()
    }
}
