//! The tablet itself: the handle and its state, with the accessors every operation shares. The
//! operations are one file each: opening and replay (`open.rs`), the header checks of an append
//! (`parse.rs`), the part of an append under the stream's sequencing lock (`sequence.rs`), the
//! append itself (`append.rs`), reads and the timestamp lookup (`read.rs`), and trim, snapshots,
//! close and destroy (`lifecycle.rs`); the values they return are in `types.rs`.

mod append;
mod lifecycle;
mod open;
mod parse;
mod read;
mod sequence;
mod types;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mink_metadata::Metadata;
use mink_s3stream::error::StreamError;
use tokio::sync::watch;

use crate::error::TabletError;
use crate::registry::TabletId;
use crate::schemas::Schemas;
use crate::settings::TabletSettings;
use crate::stream::LogStream;
use crate::writers::{Windows, WriterState};
use mink_runtime::Clock;

pub use open::TabletBuilder;
pub use types::{
    AppendResult, AppendedBatch, Columns, Isolation, ReadBatch, ReadResult, TabletOffsets,
};

/// The state changed under the sequencing lock.
struct Sequencing {
    windows: Windows,
    /// The newest commit timestamp assigned; the next is never lower.
    last_timestamp: i64,
    appends_since_snapshot: u64,
    last_snapshot_ms: i64,
    closed: bool,
}

struct Inner {
    id: TabletId,
    name: String,
    stream: Arc<dyn LogStream>,
    metadata: Arc<Metadata>,
    schemas: Arc<dyn Schemas>,
    clock: Arc<dyn Clock>,
    settings: TabletSettings,
    ttl_ms: i64,
    epoch: i32,
    sequencing: Mutex<Sequencing>,
    /// Serialises snapshot writes; holds the offset of the newest snapshot written.
    snapshot: tokio::sync::Mutex<u64>,
    /// A new stream's manifest PUT, awaited before an append is acknowledged.
    manifest: ManifestGate,
    closed: AtomicBool,
}

/// Whether a new stream's manifest PUT (docs/metadata-recovery.md, "Manifests") has ended.
/// It runs beside the tablet's open and its first appends' WAL PUTs; an append is acknowledged
/// only once it has ended (written, or failed and counted by the engine), so no acknowledged
/// data is in a stream whose manifest was never tried.
struct ManifestGate {
    ended: tokio::sync::watch::Receiver<bool>,
}

impl ManifestGate {
    /// Nothing to wait for: the stream existed before, or its manifest is written.
    fn written() -> Self {
        ManifestGate {
            ended: tokio::sync::watch::channel(true).1,
        }
    }

    /// Runs `write` on its own task and opens once it has ended.
    fn spawn(write: mink_s3stream::engine::ManifestWrite) -> Self {
        let (ended, gate) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            write.await;
            let _ = ended.send(true);
        });
        ManifestGate { ended: gate }
    }

    /// Returns once the PUT has ended (at once after that).
    async fn wait(&self) {
        if *self.ended.borrow() {
            return;
        }
        // An error means the task is gone without a word (the runtime is shutting down): the
        // PUT is not coming, and holding the acknowledgement would not bring it.
        let _ = self.ended.clone().wait_for(|ended| *ended).await;
    }
}

/// One bucket's log. Cheap to clone; every clone is the same tablet.
#[derive(Clone)]
pub struct Tablet {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Tablet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tablet")
            .field("id", &self.inner.id)
            .field("stream", &self.inner.stream.id())
            .field("offsets", &self.offsets())
            .finish()
    }
}

impl Tablet {
    /// The tablet's identity.
    pub fn id(&self) -> &TabletId {
        &self.inner.id
    }

    /// The id of the stream holding the log.
    pub fn stream_id(&self) -> u64 {
        self.inner.stream.id()
    }

    /// The leader epoch written into appended batches (the stream epoch, saturated to `i32`).
    pub fn leader_epoch(&self) -> i32 {
        self.inner.epoch
    }

    /// The settings.
    pub fn settings(&self) -> &TabletSettings {
        &self.inner.settings
    }

    /// log_start, high_watermark and log_end now.
    pub fn offsets(&self) -> TabletOffsets {
        let o = self.inner.stream.offsets();
        TabletOffsets {
            log_start: o.start,
            high_watermark: o.confirm,
            log_end: o.next,
        }
    }

    /// What the tablet keeps on the store from its log start: object ranges and batches not yet
    /// compacted, with their sizes (retention trims by it).
    pub fn footprint(&self) -> mink_s3stream::Footprint {
        self.inner.stream.footprint()
    }

    /// The high watermark now.
    pub fn high_watermark(&self) -> u64 {
        self.inner.stream.confirm_offset()
    }

    /// A receiver of the high watermark, woken each time it advances (the moment an append becomes
    /// durable, even if the appending request was cancelled).
    pub fn watch_high_watermark(&self) -> watch::Receiver<u64> {
        self.inner.stream.watch_confirm()
    }

    /// Waits until the high watermark passes `offset` (returns it), or `timeout` lapses (returns
    /// the high watermark then, which may still be at or below `offset`).
    pub async fn wait_past(&self, offset: u64, timeout: Duration) -> u64 {
        let mut hw = self.watch_high_watermark();
        let wait = hw.wait_for(|c| *c > offset);
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(value)) => *value,
            _ => self.high_watermark(),
        }
    }

    /// The idempotent writers' windows now, by writer id.
    pub async fn writers(&self) -> Vec<WriterState> {
        let hw = self.high_watermark();
        lock(&self.inner.sequencing).windows.states(hw)
    }

    fn closed_error(&self) -> TabletError {
        TabletError::Closed {
            tablet: self.inner.name.clone(),
        }
    }

    fn stream_error(&self, operation: &'static str, error: StreamError) -> TabletError {
        TabletError::stream(&self.inner.name, operation, error)
    }
}

/// Locks `mutex`; a panic while it was held cannot leave the writer windows half-updated in a way
/// that matters more than losing the process, so a poisoned lock is entered anyway.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
