//! The state of a stream open on this node: its sequencer (next offset), confirm offset, start
//! offset, committed end and log cache.
//!
//! The stream's handles append and read through it, compaction drains its log cache and moves
//! its committed end, and the engine's registry of open streams keeps it while the stream is
//! open here. It knows nothing of the engine.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::watch;

use super::lock::lock;
use super::log_cache::LogCache;
use super::read_runs::ReadRuns;

/// The next offset and whether appends are refused, under the stream's sequencing lock.
pub(crate) struct Sequencer {
    pub(crate) next: u64,
    pub(crate) closed: bool,
}

/// A stream open on this node, shared by its handles, the engine's registry of open streams and
/// compaction.
pub(crate) struct OpenStream {
    pub(crate) id: u64,
    pub(crate) epoch: u64,
    pub(crate) sequencer: Mutex<Sequencer>,
    pub(crate) log: Mutex<LogCache>,
    pub(crate) confirm: watch::Sender<u64>,
    start: AtomicU64,
    /// Everything below is in committed objects.
    pub(crate) committed_end: AtomicU64,
    pub(crate) fenced: AtomicBool,
    /// Sequential-read states of the readers of committed objects, one per run of reads.
    pub(crate) read_runs: Mutex<ReadRuns>,
}

impl OpenStream {
    pub(crate) fn new(id: u64, epoch: u64, start: u64, end: u64) -> Self {
        OpenStream {
            id,
            epoch,
            sequencer: Mutex::new(Sequencer {
                next: end,
                closed: false,
            }),
            log: Mutex::new(LogCache::default()),
            confirm: watch::Sender::new(end),
            start: AtomicU64::new(start),
            committed_end: AtomicU64::new(end),
            fenced: AtomicBool::new(false),
            read_runs: Mutex::new(ReadRuns::default()),
        }
    }

    pub(crate) fn confirm(&self) -> u64 {
        *self.confirm.borrow()
    }

    pub(crate) fn next(&self) -> u64 {
        lock(&self.sequencer).next
    }

    /// Marks the stream closed to appends; returns the next offset at that moment.
    pub(crate) fn close_appends(&self) -> u64 {
        let mut sequencer = lock(&self.sequencer);
        sequencer.closed = true;
        sequencer.next
    }

    /// The start offset.
    pub(crate) fn offsets_start(&self) -> u64 {
        self.start.load(Ordering::Acquire)
    }

    pub(crate) fn set_start(&self, start: u64) {
        self.start.fetch_max(start, Ordering::AcqRel);
    }

    /// After a commit: data below `end` is in objects.
    pub(crate) fn committed(&self, end: u64) {
        self.committed_end.fetch_max(end, Ordering::AcqRel);
        lock(&self.log).remove_below(end);
    }
}
