//! The compactor: drains durable data from the log cache into committed objects.
//!
//! A round takes the WAL's durable point `p` first (every WAL object below `p` is acknowledged),
//! then each open stream's confirm offset, which is at or past the end of every record in those
//! objects. It writes the streams' batches from their committed end up to their confirm offset:
//! streams with at least `stream_object_bytes` get a stream object each, the rest share one
//! stream-set object. One metadata commit, fenced by every stream's epoch, adds the objects,
//! advances the committed ends and retires the WAL ids below `p`; only then are the WAL objects
//! below `p` deleted and the log cache trimmed (releasing back-pressure).

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mink_metadata::{CommitRequest, Metadata, ObjectKind, ObjectRecord, WalCompacted};
use serde::{Deserialize, Serialize};

use super::{EngineMetrics, EngineSettings, EngineShared};
use crate::error::{Result, StreamError};
use crate::failpoints::{self, Failpoints};
use crate::log_cache::StreamBatch;
use crate::object::ObjectBuilder;
use crate::storage::ObjectStorage;
use crate::wal::WalWriter;

/// Settings of compaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionSettings {
    /// A round runs at least this often when there is data. Default 2 s.
    #[serde(with = "crate::duration_ms")]
    pub interval: Duration,
    /// A round starts early when this many bytes await compaction. Default 32 MiB.
    pub trigger_bytes: u64,
    /// A stream with at least this many bytes in a round gets its own stream object; smaller
    /// ones share a stream-set object. Default 8 MiB.
    pub stream_object_bytes: u64,
    /// Data blocks in committed objects are cut at about this size. Default 1 MiB.
    pub block_bytes: usize,
    /// Wait after a failed round. Default 1 s.
    #[serde(with = "crate::duration_ms")]
    pub retry_backoff: Duration,
    /// How often the second pass runs (merging small stream objects, collecting garbage).
    /// Default 60 s.
    #[serde(with = "crate::duration_ms")]
    pub maintenance_interval: Duration,
    /// A run of at least this many consecutive small stream objects of one stream is merged into
    /// one. Default 4.
    pub merge_min_objects: usize,
    /// Objects removed from the metadata (merged or garbage) are deleted from the store after
    /// this, so reads that looked them up just before still find them. Default 30 s.
    #[serde(with = "crate::duration_ms")]
    pub delete_grace: Duration,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        CompactionSettings {
            interval: Duration::from_secs(2),
            trigger_bytes: 32 << 20,
            stream_object_bytes: 8 << 20,
            block_bytes: 1 << 20,
            retry_backoff: Duration::from_secs(1),
            maintenance_interval: Duration::from_secs(60),
            merge_min_objects: 4,
            delete_grace: Duration::from_secs(30),
        }
    }
}

/// What the compactor remembers between rounds.
#[derive(Debug, Default)]
pub(crate) struct CompactorState {
    /// WAL ids below this are retired in the metadata.
    retired_below: u64,
    /// Objects out of the metadata, waiting to be deleted.
    pub(crate) pending: super::maintenance::PendingDeletes,
    /// When the second pass last ran.
    last_maintenance: Option<std::time::Instant>,
}

/// One stream's batches to commit.
pub(crate) struct Part {
    pub(crate) stream_id: u64,
    pub(crate) epoch: u64,
    pub(crate) batches: Vec<StreamBatch>,
}

impl Part {
    fn bytes(&self) -> u64 {
        self.batches.iter().map(|b| b.payload.len() as u64).sum()
    }

    fn end(&self) -> Option<u64> {
        self.batches.last().map(StreamBatch::end_offset)
    }
}

/// What committing needs, shared by the compactor and recovery.
pub(crate) struct CommitContext<'a> {
    pub(crate) data_storage: &'a std::sync::Arc<dyn ObjectStorage>,
    pub(crate) metadata: &'a Metadata,
    pub(crate) settings: &'a EngineSettings,
    pub(crate) failpoints: &'a Failpoints,
    pub(crate) metrics: &'a EngineMetrics,
}

/// The compactor's loop: a round every `interval`, or sooner when woken.
pub(crate) async fn run(engine: Weak<EngineShared>) {
    let Some(wake) = engine.upgrade().map(|e| e.wake_compactor.clone()) else {
        return;
    };
    loop {
        let Some(interval) = engine.upgrade().map(|e| e.settings.compaction.interval) else {
            return;
        };
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = wake.notified() => {}
        }
        let Some(shared) = engine.upgrade() else {
            return;
        };
        let outcome = match compact(&shared).await {
            Ok(()) => maintain_if_due(&shared).await,
            Err(error) => Err(error),
        };
        match outcome {
            Ok(()) => {}
            Err(StreamError::Failpoint(name)) => {
                tracing::warn!(failpoint = name, "compactor stops at a failpoint");
                return;
            }
            Err(error) => {
                tracing::warn!(%error, "compaction round failed; retrying");
                let backoff = shared.settings.compaction.retry_backoff;
                drop(shared);
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

/// Runs the second pass when its interval has passed.
async fn maintain_if_due(engine: &EngineShared) -> Result<()> {
    let mut state = engine.compaction_lock.lock().await;
    let interval = engine.settings.compaction.maintenance_interval;
    if state
        .last_maintenance
        .is_some_and(|t| t.elapsed() < interval)
    {
        return Ok(());
    }
    state.last_maintenance = Some(std::time::Instant::now());
    super::maintenance::run_once(engine, &mut state).await
}

/// The second pass now (merges, garbage), then deletes what waited out its grace period.
pub(crate) async fn maintain(engine: &EngineShared) -> Result<()> {
    let mut state = engine.compaction_lock.lock().await;
    if engine.halted() {
        return Err(StreamError::ShutDown);
    }
    state.last_maintenance = Some(std::time::Instant::now());
    super::maintenance::run_once(engine, &mut state).await
}

/// Deletes every object waiting for deletion, grace period or not (at shutdown).
pub(crate) async fn delete_pending(engine: &EngineShared) {
    let mut state = engine.compaction_lock.lock().await;
    super::maintenance::delete_expired(engine, &mut state, true).await;
}

/// One compaction round.
pub(crate) async fn compact(engine: &EngineShared) -> Result<()> {
    let mut state = engine.compaction_lock.lock().await;
    if engine.halted() {
        return Err(StreamError::ShutDown);
    }
    let point = engine.wal.with_durable_point(|point| point);
    let streams = engine.open_streams();
    let mut parts = Vec::new();
    let mut owners = Vec::new();
    for stream in streams {
        if stream.fenced.load(Ordering::Acquire) {
            continue;
        }
        let confirm = stream.confirm();
        let committed = stream.committed_end.load(Ordering::Acquire);
        if confirm <= committed {
            continue;
        }
        let batches = super::lock(&stream.log).up_to(confirm);
        if batches.first().map(|b| b.base_offset) != Some(committed) {
            return Err(StreamError::Inconsistent {
                stream_id: stream.id,
                message: format!(
                    "the log cache does not start at the committed end {committed} \
                     (confirm offset {confirm})"
                ),
            });
        }
        parts.push(Part {
            stream_id: stream.id,
            epoch: stream.epoch,
            batches,
        });
        owners.push(stream);
    }
    if parts.is_empty() && point <= state.retired_below {
        return Ok(());
    }
    let context = CommitContext {
        data_storage: &engine.data_storage,
        metadata: &engine.metadata,
        settings: &engine.settings,
        failpoints: &engine.failpoints,
        metrics: &engine.metrics,
    };
    let retire = WalCompacted {
        node: engine.node.clone(),
        below: point,
    };
    let ends = match commit_parts(&context, parts, Some(retire)).await {
        Ok(ends) => ends,
        Err(StreamError::Fenced { stream_id, epoch }) => {
            // Another node owns it now: this handle is dead; the next round goes on without it.
            tracing::warn!(stream_id, epoch, "stream fenced during compaction");
            if let Some(stream) = owners.iter().find(|s| s.id == stream_id) {
                stream.fenced.store(true, Ordering::Release);
                engine.forget(stream_id);
            }
            return Err(StreamError::Fenced { stream_id, epoch });
        }
        Err(error) => {
            if matches!(error, StreamError::Failpoint(_)) {
                engine.halt();
            }
            return Err(error);
        }
    };
    if let Err(name) = engine
        .failpoints
        .check(failpoints::COMPACT_BEFORE_WAL_DELETE)
    {
        engine.halt();
        return Err(StreamError::Failpoint(name));
    }
    for (stream, end) in owners.iter().zip(ends) {
        stream.committed(end);
    }
    state.retired_below = point;
    let ids = engine.wal.take_written_below(point);
    delete_wal_objects(
        &engine.wal_storage,
        engine.wal.prefix(),
        &ids,
        &engine.metrics,
    )
    .await;
    engine.metrics.compactions.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Deletes WAL objects whose data is committed. A failure leaves garbage, not a hole: the
/// registry no longer names them, so recovery never reads them.
pub(crate) async fn delete_wal_objects(
    storage: &std::sync::Arc<dyn ObjectStorage>,
    prefix: &str,
    ids: &[u64],
    metrics: &EngineMetrics,
) {
    if ids.is_empty() {
        return;
    }
    let keys: Vec<String> = ids
        .iter()
        .map(|id| WalWriter::object_key(prefix, *id))
        .collect();
    match storage.delete_many(&keys).await {
        Ok(()) => {
            metrics
                .wal_objects_deleted
                .fetch_add(keys.len() as u64, Ordering::Relaxed);
        }
        Err(error) => {
            tracing::warn!(%error, count = keys.len(), "deleting compacted WAL objects failed; they are left as garbage");
        }
    }
}

/// Writes `parts` into committed objects and commits them (with `retire`) in one metadata
/// transaction. Returns each part's new committed end, in order.
pub(crate) async fn commit_parts(
    context: &CommitContext<'_>,
    parts: Vec<Part>,
    retire: Option<WalCompacted>,
) -> Result<Vec<u64>> {
    let compaction = &context.settings.compaction;
    let mut ends = Vec::with_capacity(parts.len());
    let mut stream_epochs = Vec::with_capacity(parts.len());
    let mut advance = Vec::with_capacity(parts.len());
    let mut shared = ObjectBuilder::new(compaction.block_bytes);
    let mut own = Vec::new();
    for part in &parts {
        let Some(end) = part.end() else {
            continue;
        };
        ends.push(end);
        stream_epochs.push((part.stream_id, part.epoch));
        advance.push((part.stream_id, end));
        if part.bytes() >= compaction.stream_object_bytes {
            let mut builder = ObjectBuilder::new(compaction.block_bytes);
            builder.add_stream(part.stream_id, &part.batches);
            own.push(builder);
        } else {
            shared.add_stream(part.stream_id, &part.batches);
        }
    }
    let mut builders: Vec<(ObjectKind, ObjectBuilder)> =
        own.into_iter().map(|b| (ObjectKind::Stream, b)).collect();
    if !shared.is_empty() {
        builders.push((ObjectKind::StreamSet, shared));
    }
    let mut objects = Vec::with_capacity(builders.len());
    for (kind, builder) in builders {
        let id = context.metadata.allocate_object_id().await?;
        let key = super::reader::object_key(&context.settings.data_prefix, id);
        let (bytes, spans) = builder.finish();
        let size = bytes.len() as u64;
        put_with_retry(context.data_storage, &key, bytes).await?;
        context
            .metrics
            .objects_written
            .fetch_add(1, Ordering::Relaxed);
        context
            .metrics
            .object_bytes_written
            .fetch_add(size, Ordering::Relaxed);
        objects.push(ObjectRecord {
            id,
            kind,
            key,
            size,
            ranges: spans,
        });
    }
    context
        .failpoints
        .check(failpoints::COMPACT_BEFORE_COMMIT)
        .map_err(StreamError::Failpoint)?;
    let request = CommitRequest {
        stream_epochs,
        add_objects: objects.clone(),
        remove_objects: Vec::new(),
        advance,
        remove_wal: retire.into_iter().collect(),
    };
    if let Err(error) = context.metadata.commit(request).await {
        // The objects are referenced by nothing: remove them rather than leave garbage.
        let keys: Vec<String> = objects.iter().map(|o| o.key.clone()).collect();
        if let Err(delete) = context.data_storage.delete_many(&keys).await {
            tracing::warn!(%delete, "removing objects of a failed commit failed; they are garbage");
        }
        return Err(error.into());
    }
    Ok(ends)
}

pub(crate) async fn put_with_retry(
    storage: &std::sync::Arc<dyn ObjectStorage>,
    key: &str,
    bytes: bytes::Bytes,
) -> Result<()> {
    let mut backoff = Duration::from_millis(50);
    let mut attempt = 0;
    loop {
        attempt += 1;
        match storage.put(key, bytes.clone()).await {
            Ok(_) => return Ok(()),
            Err(error) if error.is_retryable() && attempt < 8 => {
                tracing::warn!(%key, %error, attempt, "object PUT failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            Err(error) => return Err(error.into()),
        }
    }
}
