//! What parked readers render for recent small batches, rendered once and shared by every reader
//! that sends the same: the SSE events of a batch (`sse.rs`), and the whole body of a long-poll
//! answered by a few small batches (`read.rs`). A bucket followed by many readers would otherwise
//! check, decode and render each new batch once per reader: with 1,000 SSE readers parked on one
//! bucket, that was about a quarter of the node's CPU per delivery. A reader woken at the tail
//! looks here before it reads: when another reader already read and rendered what comes next
//! from its offset, it sends that without reading the log at all.
//!
//! An entry is one open log and a key naming what was rendered from it (offsets, columns,
//! format): the rows at an offset of a log never change, and the node's `http.max_render_bytes`
//! is the same for every reader of one router. Entries hold the log weakly, so a closed log's
//! entries are never taken for another log's, and the memory is bounded by a count and a byte
//! total, oldest out first.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::Mutex;

use super::sse_frames;
use crate::bucket_log::BucketLog;
use crate::format::Format;

/// Stored batches (in all) larger than this are rendered by each reader itself: the sharing is
/// for the tail, where batches are small and readers many.
pub(crate) const MAX_SHARED_STORED_BYTES: usize = 64 << 10;
/// Renders kept at most.
const MAX_ENTRIES: usize = 64;
/// Bytes of renders kept at most.
const MAX_BYTES: usize = 4 << 20;

/// One rendered event: the offset after its last row, and the whole event as sent (`id` that
/// offset, `data` the JSON array of its rows).
#[derive(Debug)]
pub(crate) struct SharedEvent {
    /// The offset after the event's last row.
    pub(super) next: u64,
    /// The event's bytes, sent as they are by every stream that sends it.
    pub(super) frame: Bytes,
}

impl SharedEvent {
    pub(super) fn new(next: u64, data: &str) -> Self {
        SharedEvent {
            next,
            frame: sse_frames::rows_event(next, data.as_bytes()),
        }
    }
}

/// The events of one batch, with what a stream that sends them without reading the batch
/// counts of it.
#[derive(Debug)]
pub(crate) struct SharedBatch {
    pub(super) events: Vec<SharedEvent>,
    /// The stored batch's length.
    pub(super) stored_len: usize,
    /// When the batch was committed (ms), if its header says.
    pub(super) commit_timestamp: Option<i64>,
}

/// The events of one batch, shared.
pub(crate) type BatchEvents = Arc<SharedBatch>;

/// What the events of a batch are kept under: its offset and the columns asked for.
#[derive(Debug, PartialEq)]
pub(crate) struct EventsKey {
    pub(super) base_offset: u64,
    pub(super) columns: Option<Vec<String>>,
}

/// The events of small batches, rendered once for every SSE stream that sends them.
pub(crate) type SharedEvents = SharedRenders<EventsKey, SharedBatch>;

/// A long-poll body rendered once for every long-poll that sends the same: its pieces, the
/// offset after what it holds, and its batches' stored bytes and commit times (ms), which a
/// long-poll that sends it without reading them counts.
#[derive(Debug)]
pub(crate) struct RenderedBody {
    pub(super) pieces: Vec<Bytes>,
    pub(super) next_offset: u64,
    pub(super) stored_bytes: usize,
    pub(super) commit_timestamps: Vec<i64>,
}

/// What a long-poll body is kept under: the read's range, where the batches read end (the log's
/// batches between two offsets never change) and their stored bytes, the format and the
/// columns.
#[derive(Debug, PartialEq)]
pub(crate) struct BodyKey {
    pub(super) from: u64,
    pub(super) until: Option<u64>,
    pub(super) read_end: u64,
    pub(super) stored_bytes: usize,
    pub(super) format: Format,
    pub(super) columns: Option<Vec<String>>,
}

/// The bodies of long-polls answered by small batches, shared by the long-polls of one router.
pub(crate) type SharedBodies = SharedRenders<BodyKey, RenderedBody>;

struct Entry<K, V: ?Sized> {
    log: Weak<dyn BucketLog>,
    key: K,
    value: Arc<V>,
    bytes: usize,
}

impl<K, V: ?Sized> Entry<K, V> {
    fn of(&self, log: &Arc<dyn BucketLog>) -> bool {
        std::ptr::addr_eq(self.log.as_ptr(), Arc::as_ptr(log))
    }
}

struct Entries<K, V: ?Sized> {
    list: VecDeque<Entry<K, V>>,
    bytes: usize,
}

/// Recent renders of one kind (`V`, named by `K` within a log), shared by the readers of one
/// router.
pub(crate) struct SharedRenders<K, V: ?Sized> {
    entries: Mutex<Entries<K, V>>,
}

impl<K, V: ?Sized> Default for SharedRenders<K, V> {
    fn default() -> Self {
        SharedRenders {
            entries: Mutex::new(Entries {
                list: VecDeque::new(),
                bytes: 0,
            }),
        }
    }
}

impl<K, V: ?Sized> std::fmt::Debug for SharedRenders<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries = self.entries.lock();
        f.debug_struct("SharedRenders")
            .field("entries", &entries.list.len())
            .field("bytes", &entries.bytes)
            .finish()
    }
}

impl<K, V: ?Sized> SharedRenders<K, V> {
    /// The render of `log` whose key `matches`, if one is kept (the newest first).
    pub(crate) fn get(
        &self,
        log: &Arc<dyn BucketLog>,
        matches: impl Fn(&K) -> bool,
    ) -> Option<Arc<V>> {
        let entries = self.entries.lock();
        entries
            .list
            .iter()
            .rev()
            .find(|e| e.of(log) && matches(&e.key))
            .map(|e| e.value.clone())
    }

    /// Keeps `value` (`bytes` of memory) as the render `key` of `log`, unless a reader kept one
    /// under the same key first or it alone is past the byte bound; drops the oldest entries
    /// past the bounds.
    pub(crate) fn insert(&self, log: &Arc<dyn BucketLog>, key: K, value: &Arc<V>, bytes: usize)
    where
        K: PartialEq,
    {
        if bytes > MAX_BYTES {
            return;
        }
        let mut entries = self.entries.lock();
        if entries.list.iter().any(|e| e.of(log) && e.key == key) {
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
            key,
            value: value.clone(),
            bytes,
        });
    }
}
