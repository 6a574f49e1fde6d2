//! What compaction remembers between rounds, held under the engine's compaction lock: how far
//! WAL ids are retired, the objects out of the metadata that wait to be deleted, and when
//! orphaned objects were last swept.

use std::time::Instant;

use mink_metadata::ObjectRecord;

/// What the compactor remembers between rounds.
#[derive(Debug, Default)]
pub(crate) struct CompactorState {
    /// WAL ids below this are retired in the metadata.
    pub(crate) retired_below: u64,
    /// Objects out of the metadata, waiting to be deleted.
    pub(crate) pending: PendingDeletes,
    /// When this life of the engine last swept orphaned objects.
    pub(crate) last_orphan_sweep: Option<Instant>,
    /// The deletion of the last round's rewritten WAL objects, while it runs beside the next
    /// round.
    pub(crate) wal_deletes: Option<tokio::task::JoinHandle<()>>,
}

/// Objects removed from the metadata, waiting out the grace period before deletion.
#[derive(Debug, Default)]
pub(crate) struct PendingDeletes {
    pub(crate) queue: Vec<(Instant, ObjectRecord)>,
}

impl PendingDeletes {
    pub(crate) fn push(&mut self, objects: impl IntoIterator<Item = ObjectRecord>) {
        let now = Instant::now();
        self.queue.extend(objects.into_iter().map(|o| (now, o)));
    }
}
