//! What the writers and readers record while the node is killed under them (acknowledgements,
//! batches seen, violations, counters), and the context they share.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use crate::TABLE;

/// An acknowledged append.
#[derive(Debug, Clone)]
pub(crate) struct Ack {
    pub(crate) bucket: u32,
    pub(crate) writer_id: i64,
    pub(crate) sequence: i32,
    pub(crate) base_offset: u64,
    pub(crate) rows: Vec<i64>,
}

/// A batch as a reader or the final read saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SeenBatch {
    pub(crate) base_offset: u64,
    pub(crate) record_count: u64,
    pub(crate) writer_id: i64,
    pub(crate) sequence: i32,
}

#[derive(Default)]
pub(crate) struct Journal {
    pub(crate) acks: Mutex<Vec<Ack>>,
    pub(crate) violations: Mutex<Vec<String>>,
    /// Per bucket: the batches its reader read, in order.
    pub(crate) reader_batches: Mutex<HashMap<u32, Vec<SeenBatch>>>,
    pub(crate) append_retries: AtomicU64,
    pub(crate) duplicate_acks: AtomicU64,
    pub(crate) reader_reconnects: AtomicU64,
    pub(crate) high_watermarks_seen: AtomicU64,
    /// Times a reader found its offset trimmed (retention) and went on from the log start.
    pub(crate) reader_trim_jumps: AtomicU64,
}

impl Journal {
    pub(crate) fn violation(&self, what: String) {
        eprintln!("mink_chaos: VIOLATION: {what}");
        lock(&self.violations).push(what);
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) struct Ctx {
    /// The nodes' base URLs (one, except on a cluster); requests go to the current entry.
    pub(crate) urls: Vec<String>,
    /// Which of `urls` requests go to; moved on when a node cannot be reached.
    pub(crate) entry: AtomicUsize,
    pub(crate) http: reqwest::Client,
    pub(crate) journal: Journal,
    /// Writers finish their batch in flight and stop.
    pub(crate) stop_writing: AtomicBool,
    /// Per bucket: readers stop once they reach this offset (set in the final phase).
    pub(crate) reader_targets: Mutex<HashMap<u32, u64>>,
    /// Past this, workers give up (a liveness failure, reported as a violation).
    pub(crate) deadline: Instant,
    /// Retention runs: offsets below a log start may be gone.
    pub(crate) retention: bool,
    /// Padding bytes in each row's message.
    pub(crate) pad_bytes: usize,
    /// Set once the metadata was lost and rebuilt (`--lose-metadata`): trims made after the
    /// restored snapshot are undone where their objects are still on the store, so a log start
    /// may move back once, at that point.
    pub(crate) metadata_lost: AtomicBool,
}

impl Ctx {
    /// The base URL requests go to now.
    pub(crate) fn url(&self) -> String {
        let n = self.entry.load(Ordering::Relaxed) % self.urls.len().max(1);
        self.urls.get(n).cloned().unwrap_or_default()
    }

    /// The current node could not be reached (killed, paused): the next requests go to the next
    /// one (on a cluster it redirects them to the bucket's owner).
    pub(crate) fn unreachable(&self) {
        if self.urls.len() > 1 {
            self.entry.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub(crate) fn records_url(ctx: &Ctx, bucket: u32) -> String {
    format!("{}/v1/tables/{TABLE}/buckets/{bucket}/records", ctx.url())
}

pub(crate) fn header_u64(response: &reqwest::Response, name: &str) -> Option<u64> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}
