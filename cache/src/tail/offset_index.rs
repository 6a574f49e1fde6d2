//! The per-stream index of the tail cache: for each stream, its cached batches ordered by base
//! offset, `base_offset -> (end_offset, len, generation)`, so the batch containing an offset is one
//! ordered lookup. Every method takes the lock once and returns what the cache must then do in
//! moka (which batches to invalidate), so the lock is never held across a call into moka: moka's
//! eviction listener takes it too ([`StreamIndexes::evicted`]).

use std::collections::{BTreeMap, HashMap};

use parking_lot::Mutex;

/// What the index knows of one cached batch.
#[derive(Debug, Clone, Copy)]
struct IndexEntry {
    end_offset: u64,
    len: usize,
    generation: u64,
}

/// The indexes of every stream in the tail cache.
#[derive(Debug, Default)]
pub(super) struct StreamIndexes(
    Mutex<HashMap<u64, BTreeMap<u64, IndexEntry>, foldhash::fast::RandomState>>,
);

impl StreamIndexes {
    /// Indexes a new batch of `stream_id`. Returns the base offsets of the cached batches it
    /// supersedes (other than its own), which the cache must drop.
    pub(super) fn insert(
        &self,
        stream_id: u64,
        base_offset: u64,
        end_offset: u64,
        len: usize,
        generation: u64,
    ) -> Vec<u64> {
        let mut indexes = self.0.lock();
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
                len,
                generation,
            },
        );
        overlapping
            .into_iter()
            .filter(|b| *b != base_offset)
            .collect()
    }

    /// Forgets the batch at `base_offset` that moka dropped, unless the index already names a
    /// newer batch there (a later `generation`).
    pub(super) fn evicted(&self, stream_id: u64, base_offset: u64, generation: u64) {
        let mut indexes = self.0.lock();
        if let Some(index) = indexes.get_mut(&stream_id) {
            if index
                .get(&base_offset)
                .is_some_and(|e| e.generation == generation)
            {
                index.remove(&base_offset);
            }
            if index.is_empty() {
                indexes.remove(&stream_id);
            }
        }
    }

    /// The batches a read should return, according to the index.
    pub(super) fn plan(
        &self,
        stream_id: u64,
        from_offset: u64,
        max_bytes: usize,
    ) -> Vec<(u64, u64)> {
        let indexes = self.0.lock();
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

    /// Forgets every batch of `stream_id` ending at or below `start_offset`; returns their base
    /// offsets.
    pub(super) fn trim(&self, stream_id: u64, start_offset: u64) -> Vec<u64> {
        let mut indexes = self.0.lock();
        let Some(index) = indexes.get_mut(&stream_id) else {
            return Vec::new();
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
    }

    /// Forgets every batch of `stream_id`; returns their base offsets, if it had any.
    pub(super) fn remove_stream(
        &self,
        stream_id: u64,
    ) -> Option<impl ExactSizeIterator<Item = u64>> {
        self.0.lock().remove(&stream_id).map(BTreeMap::into_keys)
    }

    /// The offsets `[first base, last end)` the index holds for `stream_id`, possibly with gaps.
    pub(super) fn cached_range(&self, stream_id: u64) -> Option<std::ops::Range<u64>> {
        let indexes = self.0.lock();
        let index = indexes.get(&stream_id)?;
        let (first, _) = index.first_key_value()?;
        let (_, last) = index.last_key_value()?;
        Some(*first..last.end_offset)
    }

    /// Number of batches in the per-stream indexes (all streams).
    pub(super) fn indexed_batches(&self) -> usize {
        self.0.lock().values().map(BTreeMap::len).sum()
    }
}
