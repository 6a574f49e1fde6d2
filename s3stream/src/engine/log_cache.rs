//! The log cache: every batch of a stream that is not yet in a committed object, in memory.
//!
//! The write path inserts each batch at append time (before it is durable, so that log-end
//! reads see it); readers of recent data are served from here; the compactor drains it into
//! stream-set and stream objects and then removes what it committed. Each entry holds a
//! back-pressure permit for its bytes, released when the entry is removed, so the bytes not yet
//! compacted on a node are bounded by the engine's `max_uncompacted_bytes`.

use std::collections::BTreeMap;

use bytes::Bytes;
use tokio::sync::OwnedSemaphorePermit;

use crate::batch::{KnownBatch, StreamBatch};

struct Entry {
    count: u32,
    payload: Bytes,
    /// The payload's CRC32C when the appender knew it (see [`KnownBatch`]).
    payload_crc: Option<u32>,
    _permit: Option<OwnedSemaphorePermit>,
}

/// One stream's uncommitted batches, keyed by base offset; contiguous by construction.
#[derive(Default)]
pub(crate) struct LogCache {
    entries: BTreeMap<u64, Entry>,
    /// Payload bytes of every entry.
    bytes: u64,
}

impl LogCache {
    /// Adds a batch at the end, with its payload's CRC32C when the appender knows it. The caller
    /// (the stream, under its sequencing lock) guarantees contiguity.
    pub(crate) fn push(
        &mut self,
        batch: StreamBatch,
        payload_crc: Option<u32>,
        permit: Option<OwnedSemaphorePermit>,
    ) {
        self.bytes += batch.payload.len() as u64;
        let replaced = self.entries.insert(
            batch.base_offset,
            Entry {
                count: batch.count,
                payload: batch.payload,
                payload_crc,
                _permit: permit,
            },
        );
        if let Some(old) = replaced {
            self.bytes -= old.payload.len() as u64;
        }
    }

    /// The offsets held, `[first, end)`, and their payload bytes; `None` when empty.
    pub(crate) fn extent(&self) -> Option<(u64, u64, u64)> {
        let (&first, _) = self.entries.first_key_value()?;
        let (&last, entry) = self.entries.last_key_value()?;
        Some((first, last + u64::from(entry.count), self.bytes))
    }

    /// Batches from the one holding `from` up to `to` (exclusive bound on base offsets), at
    /// most `max_bytes` of payload but always at least one batch. `None` when `from` is not in
    /// the cache (below its first batch, or already removed).
    pub(crate) fn read(&self, from: u64, to: u64, max_bytes: usize) -> Option<Vec<StreamBatch>> {
        let (&first, entry) = self.entries.range(..=from).next_back()?;
        if first + u64::from(entry.count) <= from {
            return None;
        }
        let mut out = Vec::new();
        let mut bytes = 0usize;
        for (&base, entry) in self.entries.range(first..to) {
            if !out.is_empty() && bytes + entry.payload.len() > max_bytes {
                break;
            }
            bytes += entry.payload.len();
            out.push(StreamBatch {
                base_offset: base,
                count: entry.count,
                payload: entry.payload.clone(),
            });
        }
        Some(out)
    }

    /// Every batch starting at or after `from` whose end is at most `to`, with the CRCs known of
    /// them, for the compactor.
    pub(crate) fn between(&self, from: u64, to: u64) -> Vec<KnownBatch> {
        self.entries
            .range(from..)
            .take_while(|(base, entry)| **base + u64::from(entry.count) <= to)
            .map(|(&base, entry)| KnownBatch {
                batch: StreamBatch {
                    base_offset: base,
                    count: entry.count,
                    payload: entry.payload.clone(),
                },
                payload_crc: entry.payload_crc,
            })
            .collect()
    }

    /// Drops every batch that ends at or below `offset` (committed into objects, or trimmed).
    pub(crate) fn remove_below(&mut self, offset: u64) {
        while let Some(entry) = self.entries.first_entry() {
            if *entry.key() + u64::from(entry.get().count) > offset {
                break;
            }
            self.bytes -= entry.remove().payload.len() as u64;
        }
    }

    /// Drops every batch at or above `offset` (appends that failed to become durable).
    pub(crate) fn remove_from(&mut self, offset: u64) {
        let removed = self.entries.split_off(&offset);
        self.bytes -= removed
            .values()
            .map(|e| e.payload.len() as u64)
            .sum::<u64>();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base: u64, count: u32, len: usize) -> StreamBatch {
        StreamBatch {
            base_offset: base,
            count,
            payload: Bytes::from(vec![base as u8; len]),
        }
    }

    fn filled() -> LogCache {
        let mut cache = LogCache::default();
        cache.push(batch(10, 5, 100), None, None);
        cache.push(batch(15, 1, 100), None, None);
        cache.push(batch(16, 4, 100), None, None);
        cache
    }

    #[test]
    fn reads_start_at_the_batch_holding_the_offset() {
        let cache = filled();
        let got = cache.read(12, 100, usize::MAX).unwrap();
        assert_eq!(
            got.iter().map(|b| b.base_offset).collect::<Vec<_>>(),
            [10, 15, 16]
        );
        let got = cache.read(15, 16, usize::MAX).unwrap();
        assert_eq!(got.len(), 1);
        assert!(cache.read(9, 100, usize::MAX).is_none());
        assert!(cache.read(20, 100, usize::MAX).is_none());
    }

    #[test]
    fn max_bytes_bounds_but_never_starves() {
        let cache = filled();
        assert_eq!(cache.read(10, 100, 1).unwrap().len(), 1);
        assert_eq!(cache.read(10, 100, 200).unwrap().len(), 2);
    }

    #[test]
    fn the_compactor_gets_each_batch_with_the_crc_it_was_pushed_with() {
        let mut cache = LogCache::default();
        cache.push(batch(0, 2, 100), Some(7), None);
        cache.push(batch(2, 2, 100), None, None);
        let got = cache.between(0, 4);
        assert_eq!(
            got.iter()
                .map(|b| (b.batch.clone(), b.payload_crc))
                .collect::<Vec<_>>(),
            [(batch(0, 2, 100), Some(7)), (batch(2, 2, 100), None)]
        );
    }

    #[test]
    fn removal_drops_exactly_what_it_names() {
        let mut cache = filled();
        let held = |cache: &LogCache| -> Vec<u64> {
            let all = cache.between(0, u64::MAX);
            all.iter().map(|b| b.batch.base_offset).collect()
        };
        assert_eq!(cache.between(0, 16).len(), 2);
        assert_eq!(cache.between(15, 16).len(), 1);
        assert_eq!(cache.extent(), Some((10, 20, 300)));
        cache.remove_below(16);
        assert_eq!(held(&cache), [16]);
        assert_eq!(cache.extent(), Some((16, 20, 100)));
        assert!(cache.read(15, 100, usize::MAX).is_none());
        cache.remove_from(16);
        assert!(held(&cache).is_empty());
        assert_eq!(cache.extent(), None);
        assert_eq!(cache.bytes, 0);
    }
}
