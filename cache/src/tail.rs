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
use moka::{notification::RemovalCause, policy::EvictionPolicy, sync::Cache};
use parking_lot::Mutex;

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

#[derive(Debug, Clone, Copy)]
struct IndexEntry {
    end_offset: u64,
    len: usize,
    generation: u64,
}

type Indexes = Mutex<HashMap<u64, BTreeMap<u64, IndexEntry>, foldhash::fast::RandomState>>;

/// The tail cache of one node. Cheap to clone; clones share the cache.
#[derive(Debug, Clone)]
pub struct TailCache {
    batches: Cache<(u64, u64), Entry, foldhash::fast::RandomState>,
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
        let superseded: Vec<u64> = {
            let mut indexes = self.indexes.lock();
            let index = indexes.entry(stream_id).or_default();
            // Cached batches never overlap one another, so those overlapping the new one are a
            // run ending at the last that starts below its end. A batch overlapping any means the
            // log was rewritten from there: everything cached from the first of them is stale. A
            // batch overlapping none fills a gap (or extends the end) and supersedes nothing.
            let first_overlap = index
                .range(..end_offset)
                .rev()
                .take_while(|(_, e)| e.end_offset > base_offset)
                .last()
                .map(|(base, _)| *base);
            let overlapping: Vec<u64> = match first_overlap {
                Some(first) => index.range(first..).map(|(base, _)| *base).collect(),
                None => Vec::new(),
            };
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
        let plan = self.plan(stream_id, from_offset, max_bytes);
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
    pub fn trim(&self, stream_id: u64, start_offset: u64) {
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
        let dropped = self.indexes.lock().remove(&stream_id);
        let Some(dropped) = dropped else {
            return;
        };
        if dropped.len() > BULK_INVALIDATION {
            return;
        }
        for base in dropped.into_keys() {
            self.batches.invalidate(&(stream_id, base));
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
mod tests {
    use super::*;

    fn cache(capacity_bytes: u64) -> TailCache {
        TailCache::new(&TailCacheSettings { capacity_bytes })
    }

    fn batch_bytes(stream_id: u64, base_offset: u64, len: usize) -> Bytes {
        let tag = (stream_id * 31 + base_offset) as u8;
        Bytes::from(vec![tag; len])
    }

    /// Appends `count` batches of `records` records and `len` bytes each, starting at offset `from`.
    fn fill(cache: &TailCache, stream_id: u64, from: u64, count: u64, records: u64, len: usize) {
        for i in 0..count {
            let base = from + i * records;
            cache
                .append(
                    stream_id,
                    base,
                    base + records,
                    batch_bytes(stream_id, base, len),
                )
                .expect("append");
        }
    }

    fn bases(read: &TailRead) -> Vec<u64> {
        read.batches.iter().map(|b| b.base_offset).collect()
    }

    #[test]
    fn reads_contiguous_batches_from_the_one_containing_the_offset() {
        let tail = cache(1 << 20);
        fill(&tail, 1, 0, 10, 10, 100);

        let all = tail.get(1, 0, usize::MAX).expect("hit");
        assert_eq!(bases(&all), (0..10).map(|i| i * 10).collect::<Vec<_>>());
        assert_eq!(all.next_offset(), 100);
        for batch in &all.batches {
            assert_eq!(batch.end_offset, batch.base_offset + 10);
            assert_eq!(batch.bytes, batch_bytes(1, batch.base_offset, 100));
        }

        let mid = tail.get(1, 35, usize::MAX).expect("hit inside a batch");
        assert_eq!(
            bases(&mid)[0],
            30,
            "the batch containing offset 35 comes first"
        );
        assert_eq!(mid.next_offset(), 100);

        let limited = tail.get(1, 20, 250).expect("hit");
        assert_eq!(
            bases(&limited),
            vec![20, 30],
            "two 100-byte batches fit in 250 bytes"
        );
        assert_eq!(limited.byte_len(), 200);

        let tiny = tail.get(1, 20, 1).expect("hit");
        assert_eq!(
            bases(&tiny),
            vec![20],
            "the first batch is returned even when larger than max_bytes"
        );
        assert_eq!(tail.metrics().tail_hits, 4);
    }

    #[test]
    fn misses_below_and_at_or_above_the_cached_range() {
        let tail = cache(1 << 20);
        fill(&tail, 1, 100, 5, 10, 50);
        assert_eq!(tail.cached_range(1), Some(100..150));
        assert!(
            tail.get(1, 99, usize::MAX).is_none(),
            "below the first batch"
        );
        assert!(tail.get(1, 150, usize::MAX).is_none(), "at the end");
        assert!(tail.get(1, 1_000, usize::MAX).is_none(), "above the end");
        assert!(tail.get(2, 100, usize::MAX).is_none(), "unknown stream");
        assert!(tail.get(1, 149, usize::MAX).is_some(), "last record");
        let metrics = tail.metrics();
        assert_eq!((metrics.tail_hits, metrics.tail_misses), (1, 4));
    }

    #[test]
    fn a_gap_ends_the_read_and_an_overlapping_append_supersedes_the_old_suffix() {
        let tail = cache(1 << 20);
        fill(&tail, 1, 0, 3, 10, 10); // 0..30
        fill(&tail, 1, 40, 2, 10, 10); // 40..60, gap at 30..40
        assert_eq!(tail.get(1, 0, usize::MAX).expect("hit").next_offset(), 30);
        assert!(tail.get(1, 35, usize::MAX).is_none());

        // The log is rewritten from offset 10: batches 10..20 and later are superseded.
        let rewritten = Bytes::from_static(b"rewritten");
        tail.append(1, 10, 25, rewritten.clone()).expect("append");
        let read = tail.get(1, 0, usize::MAX).expect("hit");
        assert_eq!(bases(&read), vec![0, 10]);
        assert_eq!(read.batches[1].bytes, rewritten);
        assert_eq!(tail.cached_range(1), Some(0..25));
        assert!(
            tail.get(1, 45, usize::MAX).is_none(),
            "superseded batch is gone"
        );
        tail.run_pending_tasks();
        assert_eq!(tail.indexed_batches(), 2);
        assert_eq!(tail.cached_batches(), 2);
    }

    #[test]
    fn eviction_under_the_byte_budget_keeps_the_index_consistent() {
        // Room for about ten 1000-byte batches.
        let tail = cache(10 * (1000 + ENTRY_OVERHEAD));
        fill(&tail, 1, 0, 60, 1, 1000);
        fill(&tail, 2, 0, 60, 1, 1000);
        tail.run_pending_tasks();

        assert!(tail.weighted_size() <= 10 * (1000 + ENTRY_OVERHEAD));
        let cached = tail.cached_batches();
        assert!(cached > 0 && cached <= 10, "{cached} batches cached");
        assert_eq!(
            tail.indexed_batches() as u64,
            cached,
            "the index names exactly the cached batches"
        );
        // Every batch the index names is readable, and the most recent ones survived.
        for stream_id in [1, 2] {
            if let Some(range) = tail.cached_range(stream_id) {
                for offset in range {
                    if let Some(read) = tail.get(stream_id, offset, 1) {
                        assert_eq!(read.batches[0].bytes, batch_bytes(stream_id, offset, 1000));
                    }
                }
            }
        }
        assert!(tail.get(2, 59, 1).is_some(), "the newest batch is kept");
        assert!(tail.get(1, 0, 1).is_none(), "the oldest batch is evicted");
    }

    #[test]
    fn trim_drops_batches_entirely_below_the_new_start() {
        let tail = cache(1 << 20);
        fill(&tail, 1, 0, 10, 10, 10);
        tail.trim(1, 45);
        assert!(tail.get(1, 39, usize::MAX).is_none());
        let read = tail
            .get(1, 45, usize::MAX)
            .expect("the batch straddling the new start is kept");
        assert_eq!(bases(&read)[0], 40);
        assert_eq!(tail.cached_range(1), Some(40..100));
        tail.trim(1, 1_000);
        assert_eq!(tail.cached_range(1), None);
        tail.run_pending_tasks();
        assert_eq!(tail.cached_batches(), 0);
    }

    #[test]
    fn streams_are_isolated_and_removing_one_leaves_the_others() {
        let tail = cache(1 << 20);
        fill(&tail, 1, 0, 5, 10, 10);
        fill(&tail, 2, 0, 5, 10, 10);
        let one = tail.get(1, 0, usize::MAX).expect("hit");
        let two = tail.get(2, 0, usize::MAX).expect("hit");
        assert_ne!(one.batches[0].bytes, two.batches[0].bytes);
        assert_eq!(one.batches[0].bytes, batch_bytes(1, 0, 10));

        tail.trim(1, 30);
        assert_eq!(
            tail.cached_range(2),
            Some(0..50),
            "trimming stream 1 leaves stream 2 alone"
        );

        tail.remove_stream(1);
        assert!(tail.get(1, 30, usize::MAX).is_none());
        assert_eq!(tail.cached_range(1), None);
        assert_eq!(tail.get(2, 0, usize::MAX).expect("hit").next_offset(), 50);
        tail.run_pending_tasks();
        assert_eq!(tail.cached_batches(), 5);
    }

    #[test]
    fn a_removed_stream_with_many_batches_is_unreadable_and_evicted_first() {
        let many = BULK_INVALIDATION as u64 * 3;
        // Room for about `many + 100` batches of 8 bytes.
        let budget = (many + 100) * (8 + ENTRY_OVERHEAD);
        let tail = cache(budget);
        fill(&tail, 2, 0, 10, 1, 8);
        fill(&tail, 1, 0, many, 1, 8);
        tail.run_pending_tasks();
        assert_eq!(tail.cached_batches(), many + 10);

        tail.remove_stream(1);
        assert_eq!(tail.cached_range(1), None);
        assert!(tail.get(1, 0, usize::MAX).is_none());
        assert!(tail.get(1, many - 1, usize::MAX).is_none());
        // The stream is reopened and appends again at offsets it had before: the new batches are
        // read, never the old ones.
        fill(&tail, 1, many - 1, 2, 1, 16);
        let again = tail
            .get(1, many - 1, usize::MAX)
            .expect("hit after removal");
        assert_eq!(bases(&again), vec![many - 1, many]);
        assert_eq!(again.batches[0].bytes, batch_bytes(1, many - 1, 16));
        assert!(
            tail.get(1, 0, usize::MAX).is_none(),
            "old batches stay unreadable"
        );

        // New data pushes the unreachable batches out, before stream 2's older ones.
        tail.get(2, 0, usize::MAX).expect("stream 2 is read");
        fill(&tail, 3, 0, many, 1, 8);
        tail.run_pending_tasks();
        assert!(tail.weighted_size() <= budget);
        assert_eq!(
            tail.get(2, 0, usize::MAX)
                .expect("stream 2 survives")
                .next_offset(),
            10
        );
        assert_eq!(
            tail.get(3, 0, 8).expect("stream 3 is cached").next_offset(),
            1
        );
    }

    #[test]
    fn batches_arriving_out_of_order_are_all_kept() {
        let tail = cache(1 << 20);
        fill(&tail, 1, 20, 1, 10, 10); // 20..30 first
        fill(&tail, 1, 0, 1, 10, 10); // then 0..10
        assert_eq!(tail.get(1, 0, usize::MAX).expect("hit").next_offset(), 10);
        fill(&tail, 1, 10, 1, 10, 10); // the gap 10..20 last
        let all = tail.get(1, 0, usize::MAX).expect("hit");
        assert_eq!(bases(&all), vec![0, 10, 20]);
        assert_eq!(tail.cached_range(1), Some(0..30));
        // A rewrite (a batch overlapping cached ones) supersedes everything from the first batch
        // it overlaps.
        fill(&tail, 1, 5, 1, 10, 20); // 5..15 overlaps 0..10 and 10..20
        assert_eq!(tail.cached_range(1), Some(5..15));
        assert!(tail.get(1, 0, usize::MAX).is_none());
        assert_eq!(bases(&tail.get(1, 5, usize::MAX).expect("hit")), vec![5]);
        assert!(tail.get(1, 20, usize::MAX).is_none());
    }

    #[test]
    fn an_empty_batch_is_rejected_and_changes_nothing() {
        let tail = cache(1 << 20);
        let error = tail
            .append(1, 10, 10, Bytes::new())
            .expect_err("empty batch");
        assert!(matches!(
            error,
            CacheError::EmptyBatch {
                stream_id: 1,
                base_offset: 10,
                end_offset: 10
            }
        ));
        assert_eq!(tail.cached_range(1), None);
    }
}
