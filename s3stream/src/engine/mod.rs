//! The stream engine of one node: its WAL writer, its open streams, the compactor that drains
//! the log cache into committed objects, and recovery.
//!
//! ```text
//! append -> Stream (offsets, log cache) -> WalWriter (group commit, one PUT per group)
//!                                            |  acks in submission order -> confirm offsets
//! compactor: large WAL objects -> committed as they are (when the WAL and data stores are one)
//!            small ones: log cache -> stream-set / stream objects (data bucket)
//!            -> one metadata commit -> rewritten WAL objects are deleted
//! second pass (own task): merge small stream objects, regroup stream-set objects by stream,
//!            collect garbage
//! fetch: log cache (not yet compacted) | object index -> committed objects
//! ```
//!
//! Opening the engine recovers first: it replays this node's WAL objects (found through the
//! metadata's WAL registry, never by listing), keeps for each stream the records of its current
//! epoch that continue its committed end without a gap, commits them into objects, and retires
//! the replayed WAL ids. Only then does it reserve new WAL ids and accept appends, so a stream's
//! data never depends on more than one generation of WAL objects.

mod compactor;
mod maintenance;
mod reader;
mod recovery;
mod stream_sets;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mink_cache::{CacheMetrics, CacheSettings, Caches};
use mink_metadata::{Metadata, StreamRecord};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

pub use compactor::CompactionSettings;

use crate::batch::StreamBatch;
use crate::error::{Result, StreamError};
use crate::failpoints::Failpoints;
use crate::storage::ObjectStorage;
use crate::stream::{Stream, StreamShared};
use crate::wal::{self, WalIdError, WalIdSource, WalSettings, WalWriter};

/// Settings of the stream engine (serialisable; every field has a default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineSettings {
    /// The WAL writer.
    pub wal: WalSettings,
    /// Compaction of the log cache into committed objects.
    pub compaction: CompactionSettings,
    /// The tail cache, the block cache and readahead.
    pub cache: CacheSettings,
    /// Key prefix of WAL objects in the WAL store. Default `wal/`.
    pub wal_prefix: String,
    /// Key prefix of committed objects in the data store. Default `data/`.
    pub data_prefix: String,
    /// WAL ids reserved per metadata round trip. Default 4096.
    pub wal_id_block: u64,
    /// Bytes appended on this node but not yet compacted, beyond which appends wait
    /// (back-pressure). Default 512 MiB.
    pub max_uncompacted_bytes: u64,
    /// How long an append waits under back-pressure before failing. Default 30 s.
    #[serde(with = "crate::duration_ms")]
    pub backpressure_timeout: Duration,
}

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            wal: WalSettings::default(),
            compaction: CompactionSettings::default(),
            cache: CacheSettings::default(),
            wal_prefix: "wal/".to_owned(),
            data_prefix: "data/".to_owned(),
            wal_id_block: 4096,
            max_uncompacted_bytes: 512 << 20,
            backpressure_timeout: Duration::from_secs(30),
        }
    }
}

/// Counters of the engine (the WAL writer has its own, see [`Engine::wal_metrics`]).
#[derive(Debug, Default)]
pub struct EngineMetrics {
    /// Appends accepted.
    pub appends: AtomicU64,
    /// Payload bytes appended.
    pub append_bytes: AtomicU64,
    /// Compactions that committed something.
    pub compactions: AtomicU64,
    /// Committed objects written.
    pub objects_written: AtomicU64,
    /// Bytes of committed objects written.
    pub object_bytes_written: AtomicU64,
    /// WAL objects deleted after compaction (their data rewritten).
    pub wal_objects_deleted: AtomicU64,
    /// WAL objects committed as stream-set objects as they are (their data written once).
    pub wal_objects_adopted: AtomicU64,
    /// Bytes of the WAL objects committed as they are.
    pub wal_bytes_adopted: AtomicU64,
    /// Committed objects deleted (merged away or garbage).
    pub objects_deleted: AtomicU64,
    /// Runs of small stream objects merged into one.
    pub merges: AtomicU64,
    /// Passes that regrouped stream-set objects by stream.
    pub set_compactions: AtomicU64,
    /// GETs of committed objects.
    pub object_gets: AtomicU64,
    /// Bytes read from committed objects.
    pub object_bytes_read: AtomicU64,
    /// Batches replayed from the WAL at recovery.
    pub recovered_batches: AtomicU64,
}

/// What the engine is made of, besides its settings.
pub struct EngineBuilder {
    node: Option<String>,
    wal_storage: Option<Arc<dyn ObjectStorage>>,
    data_storage: Option<Arc<dyn ObjectStorage>>,
    metadata: Option<Arc<Metadata>>,
    settings: EngineSettings,
    failpoints: Arc<Failpoints>,
}

impl EngineBuilder {
    /// This node's id (a metadata key segment: letters, digits, `-_.`).
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Where WAL objects go.
    pub fn wal_storage(mut self, storage: Arc<dyn ObjectStorage>) -> Self {
        self.wal_storage = Some(storage);
        self
    }

    /// Where committed objects go (default: the WAL storage).
    pub fn data_storage(mut self, storage: Arc<dyn ObjectStorage>) -> Self {
        self.data_storage = Some(storage);
        self
    }

    /// The metadata log.
    pub fn metadata(mut self, metadata: Arc<Metadata>) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Settings.
    pub fn settings(mut self, settings: EngineSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Failpoints for crash tests.
    pub fn failpoints(mut self, failpoints: Arc<Failpoints>) -> Self {
        self.failpoints = failpoints;
        self
    }

    /// Recovers this node's WAL, then starts the WAL writer and the compactor.
    pub async fn open(self) -> Result<Engine> {
        let missing = |what: &str| StreamError::Inconsistent {
            stream_id: 0,
            message: format!("the engine builder needs {what}"),
        };
        let node = self.node.ok_or_else(|| missing("a node id"))?;
        let wal_storage = self.wal_storage.ok_or_else(|| missing("WAL storage"))?;
        let data_storage = self.data_storage.unwrap_or_else(|| wal_storage.clone());
        let metadata = self.metadata.ok_or_else(|| missing("metadata"))?;
        Engine::open(
            node,
            wal_storage,
            data_storage,
            metadata,
            self.settings,
            self.failpoints,
        )
        .await
    }
}

/// Reserves WAL ids through the metadata's WAL registry.
struct RegistryIds {
    metadata: Arc<Metadata>,
    node: String,
    block: u64,
}

#[async_trait::async_trait]
impl WalIdSource for RegistryIds {
    async fn reserve(&self) -> Result<Range<u64>, WalIdError> {
        self.metadata
            .reserve_wal_ids(&self.node, self.block)
            .await
            .map_err(|e| WalIdError {
                source: Box::new(e),
            })
    }
}

pub(crate) struct EngineShared {
    node: String,
    settings: EngineSettings,
    wal_storage: Arc<dyn ObjectStorage>,
    data_storage: Arc<dyn ObjectStorage>,
    /// Whether WAL objects and committed objects go to the same store (so a WAL object can be
    /// committed as it is).
    same_store: bool,
    metadata: Arc<Metadata>,
    wal: WalWriter,
    failpoints: Arc<Failpoints>,
    streams: Mutex<HashMap<u64, Arc<StreamShared>>>,
    budget: Arc<Semaphore>,
    budget_units: u32,
    compaction_lock: tokio::sync::Mutex<compactor::CompactorState>,
    wake_compactor: Arc<Notify>,
    halted: AtomicBool,
    reader: reader::ObjectReader,
    caches: reader::EngineCaches,
    metrics: Arc<EngineMetrics>,
}

/// The stream engine of one node; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    shared: Arc<EngineShared>,
    /// The compactor's and the second pass's background tasks.
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("node", &self.shared.node)
            .field("wal", &self.shared.wal)
            .finish_non_exhaustive()
    }
}

/// Back-pressure accounts in KiB so that a `u32` of permits covers any sensible budget.
const BUDGET_UNIT: u64 = 1024;

pub(crate) fn units(bytes: u64) -> u64 {
    bytes.div_ceil(BUDGET_UNIT).max(1)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Engine {
    /// A builder; `node`, `wal_storage` and `metadata` are required.
    pub fn builder() -> EngineBuilder {
        EngineBuilder {
            node: None,
            wal_storage: None,
            data_storage: None,
            metadata: None,
            settings: EngineSettings::default(),
            failpoints: Arc::new(Failpoints::new()),
        }
    }

    async fn open(
        node: String,
        wal_storage: Arc<dyn ObjectStorage>,
        data_storage: Arc<dyn ObjectStorage>,
        metadata: Arc<Metadata>,
        settings: EngineSettings,
        failpoints: Arc<Failpoints>,
    ) -> Result<Engine> {
        let metrics = Arc::new(EngineMetrics::default());
        let wal_prefix = wal::node_prefix(&settings.wal_prefix, &node);
        recovery::recover(
            &node,
            &wal_storage,
            &data_storage,
            &metadata,
            &settings,
            &wal_prefix,
            &failpoints,
            &metrics,
        )
        .await?;
        let ids = RegistryIds {
            metadata: metadata.clone(),
            node: node.clone(),
            block: settings.wal_id_block.max(1),
        };
        let first_ids = ids.reserve().await.map_err(|e| {
            StreamError::Wal(wal::WalError::Ids {
                source: Arc::new(e),
            })
        })?;
        let wal = WalWriter::new(
            wal_storage.clone(),
            wal_prefix,
            first_ids,
            Arc::new(ids),
            settings.wal.clone(),
        )
        .with_failpoints(failpoints.clone());
        let caches = Caches::open(&settings.cache)
            .await
            .map_err(|e| StreamError::Cache(Arc::new(e)))?;
        let budget_units = u32::try_from(units(settings.max_uncompacted_bytes)).unwrap_or(u32::MAX);
        let shared = Arc::new(EngineShared {
            reader: reader::ObjectReader::new(
                caches.clone(),
                data_storage.clone(),
                metrics.clone(),
            ),
            caches,
            node,
            same_store: std::ptr::addr_eq(Arc::as_ptr(&wal_storage), Arc::as_ptr(&data_storage)),
            wal_storage,
            data_storage,
            metadata,
            wal,
            failpoints,
            streams: Mutex::new(HashMap::new()),
            budget: Arc::new(Semaphore::new(budget_units as usize)),
            budget_units,
            compaction_lock: tokio::sync::Mutex::new(compactor::CompactorState::default()),
            wake_compactor: Arc::new(Notify::new()),
            halted: AtomicBool::new(false),
            metrics,
            settings,
        });
        let tasks = vec![
            tokio::spawn(compactor::run(Arc::downgrade(&shared))),
            tokio::spawn(maintenance::run(Arc::downgrade(&shared))),
        ];
        Ok(Engine {
            shared,
            tasks: Arc::new(Mutex::new(tasks)),
        })
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.shared.node
    }

    /// The metadata log the engine commits through.
    pub fn metadata(&self) -> &Arc<Metadata> {
        &self.shared.metadata
    }

    /// Creates a new stream (not yet open).
    pub async fn create_stream(&self) -> Result<StreamRecord> {
        Ok(self.shared.metadata.create_stream().await?)
    }

    /// Opens stream `id` on this node with a new epoch, fencing every older owner.
    pub async fn open_stream(&self, id: u64) -> Result<Stream> {
        if lock(&self.shared.streams).contains_key(&id) {
            return Err(StreamError::AlreadyOpen { stream_id: id });
        }
        let record = self
            .shared
            .metadata
            .open_stream(id, &self.shared.node)
            .await?;
        let shared = Arc::new(StreamShared::new(
            id,
            record.epoch,
            record.start_offset,
            record.end_offset,
            self.shared.clone(),
        ));
        let mut streams = lock(&self.shared.streams);
        if streams.contains_key(&id) {
            return Err(StreamError::AlreadyOpen { stream_id: id });
        }
        streams.insert(id, shared.clone());
        Ok(Stream { shared })
    }

    /// Compacts everything durable now, instead of waiting for the compactor's next round.
    pub async fn compact_now(&self) -> Result<()> {
        self.shared.compact_now().await
    }

    /// Runs the compactor's second pass now: merges runs of small stream objects, collects
    /// objects that are wholly trimmed or belong to deleted streams, and deletes objects whose
    /// grace period is over.
    pub async fn maintain_now(&self) -> Result<()> {
        maintenance::run_once(&self.shared).await
    }

    /// Engine counters.
    pub fn metrics(&self) -> &EngineMetrics {
        &self.shared.metrics
    }

    /// Hit, miss and load counters of the tail, block and index caches.
    pub fn cache_metrics(&self) -> CacheMetrics {
        self.shared.caches.metrics()
    }

    /// WAL counters.
    pub fn wal_metrics(&self) -> &wal::WalMetrics {
        self.shared.wal.metrics()
    }

    /// Bytes appended on this node and not yet compacted.
    pub fn uncompacted_bytes(&self) -> u64 {
        self.shared.uncompacted_bytes()
    }

    /// The failpoints this engine checks.
    pub fn failpoints(&self) -> &Arc<Failpoints> {
        &self.shared.failpoints
    }

    /// Stops gracefully: waits for appends in flight, compacts, and stops the compactor. Open
    /// streams stay open in the metadata (close them first to hand them to another node).
    pub async fn shutdown(&self) -> Result<()> {
        self.shared.wal.shutdown().await;
        let outcome = if self.shared.wal.failure().is_none() {
            self.shared.compact_now().await
        } else {
            Ok(())
        };
        compactor::delete_pending(&self.shared).await;
        self.stop_tasks();
        outcome
    }

    /// Stops the background work without flushing anything, as a crash would (for tests).
    pub fn abort(&self) {
        self.stop_tasks();
    }

    fn stop_tasks(&self) {
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
    }
}

impl EngineShared {
    pub(crate) fn wal(&self) -> &WalWriter {
        &self.wal
    }

    pub(crate) fn metadata(&self) -> &Arc<Metadata> {
        &self.metadata
    }

    /// Stops all work after a simulated crash: nothing more is appended or committed.
    pub(crate) fn halt(&self) {
        self.halted.store(true, Ordering::Release);
    }

    pub(crate) fn halted(&self) -> bool {
        self.halted.load(Ordering::Acquire)
    }

    fn uncompacted_bytes(&self) -> u64 {
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

    pub(crate) fn note_append(&self, len: u64) {
        self.metrics.appends.fetch_add(1, Ordering::Relaxed);
        self.metrics.append_bytes.fetch_add(len, Ordering::Relaxed);
        if self.uncompacted_bytes() >= self.settings.compaction.trigger_bytes {
            self.wake_compactor.notify_one();
        }
    }

    pub(crate) async fn compact_now(&self) -> Result<()> {
        compactor::compact(self).await
    }

    pub(crate) fn commit_context(&self) -> compactor::CommitContext<'_> {
        compactor::CommitContext {
            data_storage: &self.data_storage,
            metadata: &self.metadata,
            settings: &self.settings,
            failpoints: &self.failpoints,
            metrics: &self.metrics,
        }
    }

    pub(crate) async fn read_committed(
        &self,
        stream: &StreamShared,
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
                &stream.readahead,
            )
            .await
    }

    pub(crate) fn caches(&self) -> &reader::EngineCaches {
        &self.caches
    }

    fn open_streams(&self) -> Vec<Arc<StreamShared>> {
        let mut streams: Vec<_> = lock(&self.streams).values().cloned().collect();
        streams.sort_by_key(|s| s.id);
        streams
    }

    fn forget(&self, id: u64) {
        lock(&self.streams).remove(&id);
    }

    /// Waits until every append accepted by `stream` is durable (or the WAL failed).
    async fn drain(&self, stream: &StreamShared, next: u64) -> Result<()> {
        loop {
            if stream.confirm() >= next {
                return Ok(());
            }
            if let Some(cause) = self.wal.failure() {
                return Err(StreamError::Wal(wal::WalError::Failed { cause }));
            }
            self.wal.flush().await;
        }
    }

    pub(crate) async fn close_stream(&self, stream: &Arc<StreamShared>) -> Result<()> {
        let next = stream.close_appends();
        self.drain(stream, next).await?;
        self.compact_now().await?;
        self.metadata.close_stream(stream.id, stream.epoch).await?;
        self.forget(stream.id);
        self.caches.tail.remove_stream(stream.id);
        Ok(())
    }

    pub(crate) async fn destroy_stream(&self, stream: &Arc<StreamShared>) -> Result<()> {
        stream.close_appends();
        self.metadata.delete_stream(stream.id, stream.epoch).await?;
        self.forget(stream.id);
        lock(&stream.log).remove_below(u64::MAX);
        self.caches.tail.remove_stream(stream.id);
        Ok(())
    }
}
