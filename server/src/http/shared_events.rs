//! The SSE events of recent small batches, rendered once and shared by every stream that sends
//! them. A bucket followed by many SSE readers would otherwise check, decode and render each new
//! batch once per reader: with 1,000 readers parked on one bucket, that was about a quarter of
//! the node's CPU per delivery. A stream takes a batch's events from here when it sends the
//! whole batch (it does not start inside it, and `until` does not cut it) and the batch is
//! small; otherwise it renders its own, one event at a time as before.
//!
//! An entry is the batch's offset in one open log and the columns asked for: the rows at an
//! offset of a log never change, and the node's `http.max_render_bytes` is the same for every
//! stream of one router. Entries hold the log weakly, so a closed log's entries are never taken
//! for another log's, and the memory is bounded by a count and a byte total, oldest out first.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::bucket_log::BucketLog;

/// Stored batches larger than this are rendered by each stream itself: the sharing is for the
/// tail, where batches are small and readers many.
pub(crate) const MAX_SHARED_STORED_BYTES: usize = 64 << 10;
/// Batches whose events are kept at most.
const MAX_ENTRIES: usize = 64;
/// Bytes of rendered events kept at most.
const MAX_BYTES: usize = 4 << 20;

/// One rendered event: its id (the offset after its last row) and its `data`.
#[derive(Debug)]
pub(crate) struct SharedEvent {
    /// The offset after the event's last row.
    pub(crate) next: u64,
    /// `next` as the event's `id`.
    pub(crate) id: String,
    /// The JSON array of the event's rows.
    pub(crate) data: String,
}

impl SharedEvent {
    pub(crate) fn new(next: u64, data: String) -> Self {
        SharedEvent {
            next,
            id: next.to_string(),
            data,
        }
    }
}

/// The events of one batch.
pub(crate) type BatchEvents = Arc<[SharedEvent]>;

struct Entry {
    log: Weak<dyn BucketLog>,
    base_offset: u64,
    columns: Option<Vec<String>>,
    events: BatchEvents,
    bytes: usize,
}

impl Entry {
    fn is(&self, log: &Arc<dyn BucketLog>, base_offset: u64, columns: Option<&[String]>) -> bool {
        self.base_offset == base_offset
            && std::ptr::addr_eq(self.log.as_ptr(), Arc::as_ptr(log))
            && self.columns.as_deref() == columns
    }
}

#[derive(Default)]
struct Entries {
    list: VecDeque<Entry>,
    bytes: usize,
}

/// The rendered events of recent batches, shared by every SSE stream of one router.
#[derive(Default)]
pub(crate) struct SharedEvents {
    entries: Mutex<Entries>,
}

impl std::fmt::Debug for SharedEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries = self.entries.lock();
        f.debug_struct("SharedEvents")
            .field("batches", &entries.list.len())
            .field("bytes", &entries.bytes)
            .finish()
    }
}

impl SharedEvents {
    /// The events of the batch at `base_offset` of `log` for `columns`, if they are kept.
    pub(crate) fn get(
        &self,
        log: &Arc<dyn BucketLog>,
        base_offset: u64,
        columns: Option<&[String]>,
    ) -> Option<BatchEvents> {
        let entries = self.entries.lock();
        entries
            .list
            .iter()
            .rev()
            .find(|e| e.is(log, base_offset, columns))
            .map(|e| e.events.clone())
    }

    /// Keeps `events` as the batch at `base_offset` of `log` for `columns` (unless another
    /// stream kept them first, or they alone are past the byte bound), dropping the oldest
    /// entries past the bounds.
    pub(crate) fn insert(
        &self,
        log: &Arc<dyn BucketLog>,
        base_offset: u64,
        columns: Option<&[String]>,
        events: &BatchEvents,
    ) {
        let bytes: usize = events
            .iter()
            .map(|e| e.id.len() + e.data.len() + std::mem::size_of::<SharedEvent>())
            .sum();
        if bytes > MAX_BYTES {
            return;
        }
        let mut entries = self.entries.lock();
        if entries.list.iter().any(|e| e.is(log, base_offset, columns)) {
            return;
        }
        while entries.list.len() >= MAX_ENTRIES || entries.bytes + bytes > MAX_BYTES {
            let Some(oldest) = entries.list.pop_front() else {
                break;
            };
            entries.bytes -= oldest.bytes;
        }
        entries.bytes += bytes;
        entries.list.push_back(Entry {
            log: Arc::downgrade(log),
            base_offset,
            columns: columns.map(<[String]>::to_vec),
            events: events.clone(),
            bytes,
        });
    }
}
