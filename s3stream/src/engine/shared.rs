//! The engine's shared state: the WAL writer, the streams open on this node, the back-pressure
//! budget, the caches and the reader of committed objects, and the lock compaction runs under.
//!
//! Stream handles, the engine handle and the background tasks (compaction, the second pass) all
//! hold it; it calls none of them.
//!
//! Back-pressure: every byte appended and not yet compacted holds a permit of the budget
//! (`max_uncompacted_bytes`), kept by its log-cache entry until compaction removes it; an append
//! that finds the budget spent wakes the compactor and waits, bounded by `backpressure_timeout`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use mink_metadata::Metadata;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::compaction::state::CompactorState;
use super::compaction::writer::CommitContext;
use super::lock::lock;
use super::metrics::EngineMetrics;
use super::open_stream::OpenStream;
use super::reader::{EngineCaches, ObjectReader};
use super::settings::EngineSettings;
use crate::batch::StreamBatch;
use crate::error::{Result, StreamError};
use crate::failpoints::Failpoints;
use crate::stages::{AppendStage, StageObserver};
use crate::storage::ObjectStorage;
use crate::wal::WalWriter;

/// The engine's state, shared by its handle, every stream handle and the background tasks.
pub(crate) struct EngineShared {
    pub(crate) node: String,
    /// In a cluster, the node id whose lives may take a stream (`EngineBuilder::exclusive`).
    pub(crate) exclusive: Option<String>,
    pub(crate) settings: EngineSettings,
    pub(crate) wal_storage: Arc<dyn ObjectStorage>,
    pub(crate) data_storage: Arc<dyn ObjectStorage>,
    /// Whether WAL objects and committed objects go to the same store (so a WAL object can be
    /// committed as it is).
    pub(crate) same_store: bool,
    pub(crate) metadata: Arc<Metadata>,
    pub(crate) wal: WalWriter,
    pub(crate) failpoints: Arc<Failpoints>,
    pub(crate) streams: Mutex<HashMap<u64, Arc<OpenStream>>>,
    pub(crate) budget: Arc<Semaphore>,
    pub(crate) budget_units: u32,
    pub(crate) compaction_lock: tokio::sync::Mutex<CompactorState>,
    pub(crate) wake_compactor: Arc<Notify>,
    pub(crate) halted: AtomicBool,
    pub(crate) reader: ObjectReader,
    pub(crate) caches: EngineCaches,
    pub(crate) metrics: Arc<EngineMetrics>,
    /// Where the time appends spend in each stage goes, if anywhere.
    pub(crate) stages: Option<Arc<dyn StageObserver>>,
    /// Stream manifests waiting for their PUT.
    pub(crate) manifests: super::manifest_queue::ManifestQueue,
}

/// Back-pressure accounts in KiB so that a `u32` of permits covers any sensible budget.
const BUDGET_UNIT: u64 = 1024;

/// Budget permits that `bytes` take.
pub(crate) fn units(bytes: u64) -> u64 {
    bytes.div_ceil(BUDGET_UNIT).max(1)
}

impl EngineShared {
    /// Stops all work after a simulated crash: nothing more is appended or committed.
    pub(crate) fn halt(&self) {
        self.halted.store(true, Ordering::Release);
    }

    /// Whether [`EngineShared::halt`] was called.
    pub(crate) fn halted(&self) -> bool {
        self.halted.load(Ordering::Acquire)
    }

    /// Bytes appended here and not yet compacted (in whole budget units).
    pub(crate) fn uncompacted_bytes(&self) -> u64 {
        let free = self.budget.available_permits() as u64;
        (u64::from(self.budget_units).saturating_sub(free)) * BUDGET_UNIT
    }

    /// Room for `len` more uncompacted bytes if there is some now: `None` when the caller must
    /// wait ([`EngineShared::admit`]).
    pub(crate) fn try_admit(&self, len: usize) -> Option<Result<Option<OwnedSemaphorePermit>>> {
        if self.halted() {
            return Some(Err(StreamError::ShutDown));
        }
        let need = units(len as u64);
        if need > u64::from(self.budget_units) {
            return Some(Err(StreamError::BatchTooLarge {
                len,
                limit: self.settings.max_uncompacted_bytes,
            }));
        }
        let need = need as u32;
        self.budget
            .clone()
            .try_acquire_many_owned(need)
            .ok()
            .map(|permit| Ok(Some(permit)))
    }

    /// Waits for room for `len` more uncompacted bytes (back-pressure).
    pub(crate) async fn admit(
        &self,
        stream_id: u64,
        len: usize,
    ) -> Result<Option<OwnedSemaphorePermit>> {
        if let Some(now) = self.try_admit(len) {
            return now;
        }
        let need = units(len as u64) as u32;
        // Full: make room as fast as possible, then wait (bounded).
        self.wake_compactor.notify_one();
        let started = Instant::now();
        let acquire = self.budget.clone().acquire_many_owned(need);
        match tokio::time::timeout(self.settings.backpressure_timeout, acquire).await {
            Ok(Ok(permit)) => Ok(Some(permit)),
            Ok(Err(_)) => Err(StreamError::ShutDown),
            Err(_) => Err(StreamError::Backpressure {
                stream_id,
                pending: self.uncompacted_bytes(),
                limit: self.settings.max_uncompacted_bytes,
                waited: started.elapsed(),
            }),
        }
    }

    /// Reports that an append spent `elapsed` in `stage`.
    pub(crate) fn observe(&self, stage: AppendStage, elapsed: std::time::Duration) {
        if let Some(stages) = &self.stages {
            stages.observe(stage, elapsed, 1);
        }
    }

    /// Counts an accepted append of `len` bytes; wakes the compactor once enough piled up.
    pub(crate) fn note_append(&self, len: u64) {
        self.metrics.appends.fetch_add(1, Ordering::Relaxed);
        self.metrics.append_bytes.fetch_add(len, Ordering::Relaxed);
        if self.uncompacted_bytes() >= self.settings.compaction.trigger_bytes {
            self.wake_compactor.notify_one();
        }
    }

    /// What writing and committing objects needs, from this engine.
    pub(crate) fn commit_context(&self) -> CommitContext<'_> {
        CommitContext {
            data_storage: &self.data_storage,
            metadata: &self.metadata,
            settings: &self.settings,
            failpoints: &self.failpoints,
            metrics: &self.metrics,
        }
    }

    /// Batches of `stream` from committed objects, as [`ObjectReader::read`] gives them.
    pub(crate) async fn read_committed(
        &self,
        stream: &OpenStream,
        from: u64,
        to: u64,
        max_bytes: usize,
    ) -> Result<Vec<StreamBatch>> {
        self.reader
            .read(
                &self.metadata,
                stream.id,
                from,
                to,
                max_bytes,
                &stream.read_runs,
            )
            .await
    }

    /// The streams open here, by id.
    pub(crate) fn open_streams(&self) -> Vec<Arc<OpenStream>> {
        let mut streams: Vec<_> = lock(&self.streams).values().cloned().collect();
        streams.sort_by_key(|s| s.id);
        streams
    }

    /// Whether stream `id` is open here.
    pub(crate) fn is_open(&self, id: u64) -> bool {
        lock(&self.streams).contains_key(&id)
    }

    /// Registers `stream` as open here, unless another handle opened it first.
    pub(crate) fn register(&self, stream: Arc<OpenStream>) -> Result<()> {
        let mut streams = lock(&self.streams);
        if streams.contains_key(&stream.id) {
            return Err(StreamError::AlreadyOpen {
                stream_id: stream.id,
            });
        }
        streams.insert(stream.id, stream);
        Ok(())
    }

    /// Drops stream `id` from the streams open here.
    pub(crate) fn forget(&self, id: u64) {
        lock(&self.streams).remove(&id);
    }
}
