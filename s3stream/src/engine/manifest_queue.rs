//! The queue of stream manifests waiting for their PUT (docs/manifest-batches.md): at most
//! [`MAX_PUTS_IN_FLIGHT`] putting tasks, each taking everything that waits (at most
//! [`MAX_BATCH`]) for its next PUT until nothing does.

use std::sync::Mutex;

use tokio::sync::oneshot;

use crate::format::manifest::StreamManifest;

/// Manifest PUTs out at once.
const MAX_PUTS_IN_FLIGHT: usize = 4;
/// Manifests in one batch at most (labels are at most 4 KiB: 4 MiB at worst, about 100 KiB for
/// tablets' labels).
const MAX_BATCH: usize = 1000;

/// A manifest and who waits for the end of its PUT.
pub(crate) type Waiting = (StreamManifest, oneshot::Sender<()>);

/// Manifests waiting for a PUT, and the tasks putting them.
#[derive(Default)]
pub(crate) struct ManifestQueue {
    state: Mutex<QueueState>,
}

#[derive(Default)]
struct QueueState {
    waiting: Vec<Waiting>,
    putting: usize,
}

impl ManifestQueue {
    fn state(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `manifest`: the receiver ends when its PUT has ended; `true` when the caller must
    /// start a putting task (fewer than [`MAX_PUTS_IN_FLIGHT`] run).
    pub(crate) fn push(&self, manifest: StreamManifest) -> (oneshot::Receiver<()>, bool) {
        let (done, wait) = oneshot::channel();
        let mut q = self.state();
        q.waiting.push((manifest, done));
        let start = q.putting < MAX_PUTS_IN_FLIGHT;
        if start {
            q.putting += 1;
        }
        (wait, start)
    }

    /// What a putting task PUTs next, oldest first; `None` when nothing waits, and the task
    /// stops.
    pub(crate) fn next_batch(&self) -> Option<Vec<Waiting>> {
        let mut q = self.state();
        if q.waiting.is_empty() {
            q.putting -= 1;
            return None;
        }
        let n = q.waiting.len().min(MAX_BATCH);
        Some(q.waiting.drain(..n).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn manifest(id: u64) -> StreamManifest {
        StreamManifest {
            stream_id: id,
            label: Bytes::new(),
        }
    }

    #[test]
    fn a_few_tasks_put_and_the_rest_wait_for_them_in_batches() {
        let q = ManifestQueue::default();
        let starts: Vec<bool> = (0..10).map(|i| q.push(manifest(i)).1).collect();
        assert_eq!(starts.iter().filter(|s| **s).count(), MAX_PUTS_IN_FLIGHT);
        let first = q.next_batch().unwrap();
        assert_eq!(first.len(), 10, "a task takes everything waiting");
        assert_eq!(first[0].0.stream_id, 0, "oldest first");
        for _ in 0..MAX_PUTS_IN_FLIGHT {
            assert!(q.next_batch().is_none());
        }
        // Every task has stopped: the next manifest starts one again.
        assert!(q.push(manifest(10)).1);
    }

    #[test]
    fn a_batch_holds_at_most_max_batch() {
        let q = ManifestQueue::default();
        for i in 0..(MAX_BATCH as u64 + 5) {
            let _ = q.push(manifest(i));
        }
        assert_eq!(q.next_batch().unwrap().len(), MAX_BATCH);
        assert_eq!(q.next_batch().unwrap().len(), 5);
    }
}
