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
//!
//! The files, lowest layer first: [`settings`](EngineSettings) and [`metrics`](EngineMetrics);
//! `log_cache` (a stream's batches not yet committed) and `open_stream` (a stream's offsets and
//! sequencer); `reader` (committed objects through the block cache); `shared` (what the engine,
//! its streams and its background tasks share, back-pressure included); `compaction` (rounds,
//! the second pass, and the shared layer that writes and commits objects); `recovery`;
//! [`stream`] (the handle appends and reads go through); and this file, the engine handle.

mod compaction;
mod decoded;
mod footprint;
mod lock;
mod log_cache;
mod manifest_queue;
mod manifests;
mod metrics;
mod open_stream;
mod read_runs;
mod reader;
mod recovery;
mod settings;
mod shared;
pub mod stream;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use mink_cache::{CacheMetrics, Caches};
use mink_metadata::{Metadata, StreamRecord, Txn};
use mink_runtime::{Clock, SystemClock};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;

pub use compaction::CompactionSettings;
pub use footprint::{Footprint, StoredPiece};
pub use metrics::EngineMetrics;
pub use settings::EngineSettings;

use self::decoded::DecodedBlocks;
use self::lock::lock;
use self::open_stream::OpenStream;
use self::reader::ObjectReader;
use self::shared::{EngineShared, units};
use self::stream::Stream;
use crate::error::{Result, StreamError};
use crate::failpoints::Failpoints;
use crate::format::manifest::{MAX_LABEL_LEN, StreamManifest};
use crate::stages::StageObserver;
use crate::storage::ObjectStorage;
use crate::wal::{self, AckFence, WalIdError, WalIdSource, WalWriter};

/// What the engine is made of, besides its settings.
pub struct EngineBuilder {
    node: Option<String>,
    wal_storage: Option<Arc<dyn ObjectStorage>>,
    data_storage: Option<Arc<dyn ObjectStorage>>,
    metadata: Option<Arc<Metadata>>,
    settings: EngineSettings,
    failpoints: Arc<Failpoints>,
    clock: Arc<dyn Clock>,
    fence: Option<Arc<dyn AckFence>>,
    stages: Option<Arc<dyn StageObserver>>,
    earlier: Vec<String>,
    exclusive: Option<String>,
}

/// What [`Engine::open`] is made of, the builder's parts resolved.
struct Parts {
    node: String,
    wal_storage: Arc<dyn ObjectStorage>,
    data_storage: Arc<dyn ObjectStorage>,
    metadata: Arc<Metadata>,
    settings: EngineSettings,
    failpoints: Arc<Failpoints>,
    clock: Arc<dyn Clock>,
    fence: Option<Arc<dyn AckFence>>,
    stages: Option<Arc<dyn StageObserver>>,
    earlier: Vec<String>,
    exclusive: Option<String>,
}

impl EngineBuilder {
    /// This node's id (a metadata key segment: letters, digits, `-_.`): in a cluster, the member
    /// id of this life of the node, so its WAL objects and registry are its own.
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

    /// The clock the block cache measures page ages with (default: [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Acknowledges WAL PUTs only as `fence` admits (the acknowledgement rule of
    /// docs/cluster.md); without one, every PUT that succeeds is acknowledged.
    pub fn ack_fence(mut self, fence: Arc<dyn AckFence>) -> Self {
        self.fence = Some(fence);
        self
    }

    /// Reports the time every append spends in each stage of the engine to `stages`
    /// (admission, WAL queue, PUT, ordering, wake: [`AppendStage`](crate::stages::AppendStage)).
    pub fn stage_observer(mut self, stages: Arc<dyn StageObserver>) -> Self {
        self.stages = Some(stages);
        self
    }

    /// Opens a stream only when no other node's member holds it open (a cluster: the holder must
    /// close it or be recovered first); streams held by earlier lives of `node_id` are taken.
    /// Without it, an open fences whoever held the stream.
    pub fn exclusive(mut self, node_id: impl Into<String>) -> Self {
        self.exclusive = Some(node_id.into());
        self
    }

    /// Owners of WAL objects to recover at open before this node's own (earlier lives of the node,
    /// known to be dead): their records are committed and their WAL ids retired like the node's.
    pub fn recover_earlier(mut self, owners: Vec<String>) -> Self {
        self.earlier = owners;
        self
    }

    /// Recovers the earlier owners' WALs and this node's, then starts the WAL writer and the
    /// compactor.
    pub async fn open(self) -> Result<Engine> {
        let missing = |what: &str| StreamError::Inconsistent {
            stream_id: 0,
            message: format!("the engine builder needs {what}"),
        };
        let node = self.node.ok_or_else(|| missing("a node id"))?;
        let wal_storage = self.wal_storage.ok_or_else(|| missing("WAL storage"))?;
        let data_storage = self.data_storage.unwrap_or_else(|| wal_storage.clone());
        let metadata = self.metadata.ok_or_else(|| missing("metadata"))?;
        Engine::open(Parts {
            node,
            wal_storage,
            data_storage,
            metadata,
            settings: self.settings,
            failpoints: self.failpoints,
            clock: self.clock,
            fence: self.fence,
            stages: self.stages,
            earlier: self.earlier,
            exclusive: self.exclusive,
        })
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

/// A new stream's manifest PUT, handed back by [`Engine::create_stream_with_manifest`]: a
/// failure is logged and counted, never returned.
pub type ManifestWrite = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

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
            clock: Arc::new(SystemClock),
            fence: None,
            stages: None,
            earlier: Vec::new(),
            exclusive: None,
        }
    }

    async fn open(parts: Parts) -> Result<Engine> {
        let Parts {
            node,
            wal_storage,
            data_storage,
            metadata,
            settings,
            failpoints,
            clock,
            fence,
            stages,
            earlier,
            exclusive,
        } = parts;
        let metrics = Arc::new(EngineMetrics::default());
        for owner in earlier.iter().filter(|owner| **owner != node) {
            recovery::recover(
                owner,
                &wal_storage,
                &data_storage,
                &metadata,
                &settings,
                &wal::node_prefix(&settings.wal_prefix, owner),
                &failpoints,
                &metrics,
            )
            .await?;
        }
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
        let mut wal = WalWriter::new(
            wal_storage.clone(),
            wal_prefix,
            first_ids,
            Arc::new(ids),
            settings.wal.clone(),
        )
        .with_failpoints(failpoints.clone());
        if let Some(fence) = fence {
            wal = wal.with_fence(fence);
        }
        if let Some(stages) = &stages {
            wal = wal.with_stages(stages.clone());
        }
        let caches = Caches::open_with_clock(&settings.cache, clock)
            .await
            .map_err(|e| StreamError::Cache(Arc::new(e)))?;
        let budget_units = u32::try_from(units(settings.max_uncompacted_bytes)).unwrap_or(u32::MAX);
        let shared = Arc::new(EngineShared {
            reader: ObjectReader::new(
                caches.clone(),
                DecodedBlocks::new(settings.cache.block.decoded_bytes),
                data_storage.clone(),
                metrics.clone(),
            ),
            caches,
            node,
            exclusive,
            same_store: crate::storage::is_same(&wal_storage, &data_storage),
            wal_storage,
            data_storage,
            metadata,
            wal,
            failpoints,
            streams: Mutex::new(HashMap::new()),
            budget: Arc::new(Semaphore::new(budget_units as usize)),
            budget_units,
            compaction_lock: tokio::sync::Mutex::new(Default::default()),
            wake_compactor: Arc::new(Notify::new()),
            halted: AtomicBool::new(false),
            metrics,
            stages,
            manifests: manifest_queue::ManifestQueue::default(),
            settings,
        });
        let tasks = vec![
            tokio::spawn(compaction::run_compactor(Arc::downgrade(&shared))),
            tokio::spawn(compaction::run_second_pass(Arc::downgrade(&shared))),
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

    /// The store committed objects (and stream manifests) go to.
    pub fn data_storage(&self) -> &Arc<dyn ObjectStorage> {
        &self.shared.data_storage
    }

    /// Creates a new stream (not yet open).
    pub async fn create_stream(&self) -> Result<StreamRecord> {
        Ok(self.shared.metadata.create_stream().await?)
    }

    /// Creates a new stream (not yet open) and writes its manifest to the data store: `label`
    /// (at most [`MAX_LABEL_LEN`](crate::format::manifest::MAX_LABEL_LEN) bytes, opaque here)
    /// says what the stream is for, so that a rebuild from objects can recreate the stream if
    /// the metadata loses it. A manifest PUT that fails (after the store's own retries) does
    /// not fail the creation: reads and appends need no manifest. It is logged and counted
    /// ([`EngineMetrics::manifest_failures`]), and such a stream is placed by a rebuild only from
    /// a metadata snapshot taken after its creation.
    pub async fn create_stream_labelled(&self, label: Bytes) -> Result<StreamRecord> {
        let (record, manifest) = self.create_stream_with_manifest(label).await?;
        manifest.await;
        Ok(record)
    }

    /// [`create_stream_labelled`](Self::create_stream_labelled) with the manifest's PUT started
    /// and handed back instead of awaited, so that it runs beside the rest of the stream's setup
    /// (registering it, opening it). The caller must await it before the stream takes its
    /// first append, so that no data lands in a stream whose manifest was never tried.
    pub async fn create_stream_with_manifest(
        &self,
        label: Bytes,
    ) -> Result<(StreamRecord, ManifestWrite)> {
        check_label(&label)?;
        let record = self.create_stream().await?;
        let write = self.start_manifest(record.id, label);
        Ok((record, write))
    }

    /// Creates a new stream and opens it on this node, in one metadata transaction with the
    /// caller's compares and writes (`with`, given the stream's id; docs/tablet-open.md): what
    /// [`create_stream_with_manifest`](Self::create_stream_with_manifest) and then
    /// [`open_stream`](Self::open_stream) do, in one metadata commit instead of two, with the
    /// caller's own writes (a registry entry) in it rather than in a third. The manifest's PUT
    /// is started once the transaction has succeeded and handed back as there. Returns `None`,
    /// with nothing written, when one of `with`'s compares does not hold.
    pub async fn create_open_stream(
        &self,
        label: Bytes,
        with: impl FnOnce(u64) -> Txn + Send,
    ) -> Result<Option<(Stream, ManifestWrite)>> {
        check_label(&label)?;
        let Some(record) = self
            .shared
            .metadata
            .create_open_stream(&self.shared.node, with)
            .await?
        else {
            return Ok(None);
        };
        let write = self.start_manifest(record.id, label);
        Ok(Some((self.register_open(&record)?, write)))
    }

    /// Starts the PUT of stream `id`'s manifest, so that it runs while the caller goes on; a
    /// caller that drops the handle leaves the PUT to finish on its own.
    fn start_manifest(&self, id: u64, label: Bytes) -> ManifestWrite {
        let shared = self.shared.clone();
        let manifest = StreamManifest {
            stream_id: id,
            label,
        };
        let task = tokio::spawn(async move { manifests::write(&shared, manifest).await });
        Box::pin(async move {
            if let Err(e) = task.await {
                tracing::warn!(error = %e, "the task writing a stream's manifest failed");
            }
        })
    }

    /// Deletes the manifest of stream `id` (a destroyed stream's), if there is one. A failure
    /// leaves a manifest of a deleted stream, which a rebuild skips.
    pub async fn delete_manifest(&self, id: u64) -> Result<()> {
        manifests::delete(&self.shared, id).await
    }

    /// Opens stream `id` on this node with a new epoch, fencing every older owner (with
    /// [`EngineBuilder::exclusive`]: unless another node's member holds it open).
    pub async fn open_stream(&self, id: u64) -> Result<Stream> {
        if self.shared.is_open(id) {
            return Err(StreamError::AlreadyOpen { stream_id: id });
        }
        let metadata = &self.shared.metadata;
        let record = match &self.shared.exclusive {
            Some(node_id) => {
                metadata
                    .open_stream_exclusive(id, &self.shared.node, node_id)
                    .await?
            }
            None => metadata.open_stream(id, &self.shared.node).await?,
        };
        self.register_open(&record)
    }

    /// Registers the stream of `record`, just opened in the metadata, as open on this node.
    fn register_open(&self, record: &StreamRecord) -> Result<Stream> {
        let state = Arc::new(OpenStream::new(
            record.id,
            record.epoch,
            record.start_offset,
            record.end_offset,
        ));
        self.shared.register(state.clone())?;
        Ok(Stream {
            state,
            engine: self.shared.clone(),
        })
    }

    /// Recovers the WAL of `member`, another member of the cluster whose lease is gone and whose
    /// recovery this node has claimed (docs/cluster.md, "Failover"): for each stream it held
    /// open, the records of its epoch that continue its committed end are committed, the
    /// member's WAL ids retired and its replayed WAL objects deleted. Streams open here are not
    /// touched (the member cannot have held them). Running it again after a failure half-way
    /// commits what is left.
    pub async fn recover_member(&self, member: &str) -> Result<()> {
        let shared = &self.shared;
        // Serialised with compaction, whose commits touch the same object index.
        let _round = shared.compaction_lock.lock().await;
        recovery::recover(
            member,
            &shared.wal_storage,
            &shared.data_storage,
            &shared.metadata,
            &shared.settings,
            &wal::node_prefix(&shared.settings.wal_prefix, member),
            &shared.failpoints,
            &shared.metrics,
        )
        .await
    }

    /// Compacts everything acknowledged now, instead of waiting for the compactor's next round.
    pub async fn compact_now(&self) -> Result<()> {
        self.shared.wal.settle().await;
        compaction::compact(&self.shared).await
    }

    /// Runs the compactor's second pass now: merges runs of small stream objects, collects
    /// objects that are wholly trimmed or belong to deleted streams, and deletes objects whose
    /// grace period is over.
    pub async fn maintain_now(&self) -> Result<()> {
        compaction::second_pass(&self.shared).await
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

    /// Why the WAL failed for good, if it has: appends are then refused until the engine is
    /// reopened (recovery replays what landed).
    pub fn wal_failure(&self) -> Option<Arc<wal::WalError>> {
        self.shared.wal.failure()
    }

    /// Resolves with the cause once the WAL has failed for good (at once if it already has).
    pub async fn wal_failed(&self) -> Arc<wal::WalError> {
        self.shared.wal.failed().await
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
            compaction::compact(&self.shared).await
        } else {
            Ok(())
        };
        compaction::delete_pending(&self.shared).await;
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

/// Refuses a manifest label longer than the format holds.
fn check_label(label: &Bytes) -> Result<()> {
    if label.len() > MAX_LABEL_LEN {
        return Err(StreamError::LabelTooLong {
            len: label.len(),
            max: MAX_LABEL_LEN,
        });
    }
    Ok(())
}
