//! The compactor: commits durable data into committed objects.
//!
//! A round takes the WAL's durable point `p` (every WAL object below `p` is acknowledged) and
//! the WAL objects below it that are not yet committed, oldest first. Each one is either
//!
//! - **adopted**: committed as a stream-set object as it is (a WAL object is laid out like
//!   one), so its bytes are written once. Only when the WAL and data stores are the same, the
//!   object has at least `adopt_wal_object_bytes`, and it holds every live stream's batches
//!   from where the round has got to (no stream starts in the middle of it); or
//! - **rewritten**: the batches of consecutive rewritten objects are read from the log cache and
//!   written anew: streams with at least `stream_object_bytes` get a stream object each, the
//!   rest share one stream-set object. Small WAL objects are rewritten so that reads do not
//!   meet many small objects.
//!
//! Batches of streams that are no longer open here, or of an older epoch, are left out. One
//! metadata commit, fenced by every stream's epoch, adds the objects, advances the committed
//! ends and retires the WAL ids below `p`; only then are the rewritten WAL objects deleted and
//! the log cache trimmed (releasing back-pressure). Adopted WAL objects stay: they are committed
//! objects now, collected like any other when trimmed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use mink_metadata::{CommitRequest, Metadata, ObjectKind, ObjectRecord, StreamRange, WalCompacted};
use serde::{Deserialize, Serialize};

use super::{EngineMetrics, EngineSettings, EngineShared};
use crate::batch::StreamBatch;
use crate::error::{Result, StreamError};
use crate::failpoints::{self, Failpoints};
use crate::format::object::ObjectBuilder;
use crate::storage::ObjectStorage;
use crate::stream::StreamShared;
use crate::wal::{WalWriter, WrittenObject};

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
    /// Objects that compaction, merges and regrouping write are cut at about this size (a
    /// stream's batches continue in the next object), which bounds a PUT and the memory that
    /// builds it. Default 64 MiB.
    pub max_object_bytes: usize,
    /// A WAL object of at least this many bytes is committed as a stream-set object as it is
    /// (its bytes are not written a second time) when the WAL and data stores are the same;
    /// smaller ones are rewritten. Under load, group commits reach `wal.max_object_bytes` and are
    /// adopted; a quiet node's small WAL objects are gathered into larger objects. Default 4 MiB.
    pub adopt_wal_object_bytes: u64,
    /// Wait after a failed round. Default 1 s.
    #[serde(with = "crate::duration_ms")]
    pub retry_backoff: Duration,
    /// How often the second pass runs (merging small stream objects, regrouping stream-set
    /// objects by stream, collecting garbage). Default 60 s.
    #[serde(with = "crate::duration_ms")]
    pub maintenance_interval: Duration,
    /// A run of at least this many consecutive small stream objects of one stream is merged into
    /// one; stream-set objects are regrouped by stream once at least this many exist. Default 4.
    pub merge_min_objects: usize,
    /// Bytes of stream-set objects (oldest first, each smaller than half of this and of
    /// `max_object_bytes`) the second pass
    /// reads and writes again, grouped by stream, per run; it holds them in memory meanwhile.
    /// 0 turns regrouping off. Default 256 MiB.
    pub set_compaction_bytes: u64,
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
            max_object_bytes: 64 << 20,
            adopt_wal_object_bytes: 4 << 20,
            retry_backoff: Duration::from_secs(1),
            maintenance_interval: Duration::from_secs(60),
            merge_min_objects: 4,
            set_compaction_bytes: 256 << 20,
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
}

/// One stream's batches to commit.
pub(crate) struct Part {
    pub(crate) stream_id: u64,
    pub(crate) epoch: u64,
    pub(crate) batches: Vec<StreamBatch>,
}

impl Part {
    pub(crate) fn bytes(&self) -> u64 {
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
        match compact(&shared).await {
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
    let written = engine.wal.written_below(point);
    let streams: HashMap<u64, Arc<StreamShared>> = engine
        .open_streams()
        .into_iter()
        .filter(|s| !s.fenced.load(Ordering::Acquire))
        .map(|s| (s.id, s))
        .collect();
    let adopt_from = if engine.same_store {
        engine.settings.compaction.adopt_wal_object_bytes
    } else {
        u64::MAX
    };
    let plan = plan_round(&written, &streams, adopt_from)?;
    if plan.ends.is_empty() && point <= state.retired_below {
        return Ok(());
    }
    let context = engine.commit_context();
    let mut objects = Vec::new();
    let mut owners = Vec::with_capacity(plan.ends.len());
    let mut epochs = Vec::with_capacity(plan.ends.len());
    for (id, end) in &plan.ends {
        if let Some(stream) = streams.get(id) {
            owners.push((stream.clone(), *end));
            epochs.push((*id, stream.epoch));
        }
    }
    let mut adopted_ids = HashSet::new();
    for (object, ranges) in &plan.adopt {
        let id = engine.metadata.allocate_object_id().await?;
        adopted_ids.insert(object.id);
        objects.push(ObjectRecord {
            id,
            kind: ObjectKind::StreamSet,
            key: object.key.clone(),
            size: object.size,
            ranges: ranges.clone(),
        });
    }
    let adopted = objects.len();
    for group in &plan.rewrite {
        let parts = group
            .iter()
            .map(|(id, range)| {
                let stream = streams.get(id).ok_or_else(|| StreamError::Inconsistent {
                    stream_id: *id,
                    message: "planned for compaction but not open".to_owned(),
                })?;
                let batches = super::lock(&stream.log).between(range.start, range.end);
                if batches.first().map(|b| b.base_offset) != Some(range.start)
                    || batches.last().map(StreamBatch::end_offset) != Some(range.end)
                {
                    return Err(StreamError::Inconsistent {
                        stream_id: *id,
                        message: format!(
                            "the log cache does not hold offsets {}..{} to compact",
                            range.start, range.end
                        ),
                    });
                }
                Ok(Part {
                    stream_id: *id,
                    epoch: stream.epoch,
                    batches,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        objects.extend(write_objects(&context, &parts).await?);
    }
    let retire = WalCompacted {
        node: engine.node.clone(),
        below: point,
    };
    let request = CommitRequest {
        stream_epochs: epochs,
        add_objects: objects.clone(),
        remove_objects: Vec::new(),
        advance: plan.ends.iter().map(|(id, end)| (*id, *end)).collect(),
        remove_wal: vec![retire],
    };
    match commit(
        &context,
        request,
        objects.get(adopted..).unwrap_or_default(),
    )
    .await
    {
        Ok(()) => {}
        Err(StreamError::Fenced { stream_id, epoch }) => {
            // Another node owns it now: this handle is dead; the next round goes on without it.
            tracing::warn!(stream_id, epoch, "stream fenced during compaction");
            if let Some(stream) = streams.get(&stream_id) {
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
    }
    if let Err(name) = engine
        .failpoints
        .check(failpoints::COMPACT_BEFORE_WAL_DELETE)
    {
        engine.halt();
        return Err(StreamError::Failpoint(name));
    }
    for (stream, end) in owners {
        stream.committed(end);
    }
    state.retired_below = point;
    let metrics = &engine.metrics;
    let mut rewritten = Vec::new();
    for object in engine.wal.take_written_below(point) {
        if adopted_ids.contains(&object.id) {
            metrics.wal_objects_adopted.fetch_add(1, Ordering::Relaxed);
            metrics
                .wal_bytes_adopted
                .fetch_add(object.size, Ordering::Relaxed);
        } else {
            rewritten.push(object.id);
        }
    }
    delete_wal_objects(
        &engine.wal_storage,
        engine.wal.prefix(),
        &rewritten,
        metrics,
    )
    .await;
    metrics.compactions.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// What one round commits.
#[derive(Debug, Default)]
struct RoundPlan {
    /// Each stream's new committed end.
    ends: BTreeMap<u64, u64>,
    /// WAL objects committed as they are, with the ranges they hold for open streams.
    adopt: Vec<(Arc<WrittenObject>, Vec<StreamRange>)>,
    /// Runs of consecutive WAL objects to rewrite: each stream's offsets in the run.
    rewrite: Vec<BTreeMap<u64, Range<u64>>>,
}

/// Decides, WAL object by WAL object (oldest first), what a round commits.
fn plan_round(
    written: &[Arc<WrittenObject>],
    streams: &HashMap<u64, Arc<StreamShared>>,
    adopt_from: u64,
) -> Result<RoundPlan> {
    let mut plan = RoundPlan::default();
    let mut reached: HashMap<u64, u64> = HashMap::new();
    let mut in_rewrite = false;
    for object in written {
        let mut live = Vec::new();
        let mut whole = true;
        for span in &object.spans {
            let range = &span.range;
            let Some(stream) = streams.get(&range.stream_id) else {
                continue;
            };
            if span.epoch != stream.epoch {
                continue;
            }
            let at = *reached
                .entry(range.stream_id)
                .or_insert_with(|| stream.committed_end.load(Ordering::Acquire));
            if range.end_offset <= at {
                continue;
            }
            if range.start_offset > at {
                return Err(StreamError::Inconsistent {
                    stream_id: range.stream_id,
                    message: format!(
                        "WAL object {} holds offsets from {} but the stream is committed up to {at}",
                        object.key, range.start_offset
                    ),
                });
            }
            whole &= range.start_offset == at;
            live.push((range, at));
            reached.insert(range.stream_id, range.end_offset);
            plan.ends.insert(range.stream_id, range.end_offset);
        }
        if live.is_empty() {
            continue;
        }
        if whole && object.size >= adopt_from {
            plan.adopt.push((
                object.clone(),
                live.into_iter().map(|(range, _)| *range).collect(),
            ));
            in_rewrite = false;
            continue;
        }
        if !in_rewrite {
            plan.rewrite.push(BTreeMap::new());
            in_rewrite = true;
        }
        if let Some(group) = plan.rewrite.last_mut() {
            for (range, from) in live {
                group
                    .entry(range.stream_id)
                    .and_modify(|r| r.end = range.end_offset)
                    .or_insert(from..range.end_offset);
            }
        }
    }
    Ok(plan)
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
    let parts: Vec<Part> = parts.into_iter().filter(|p| p.end().is_some()).collect();
    let objects = write_objects(context, &parts).await?;
    let request = CommitRequest {
        stream_epochs: parts.iter().map(|p| (p.stream_id, p.epoch)).collect(),
        add_objects: objects.clone(),
        remove_objects: Vec::new(),
        advance: parts
            .iter()
            .filter_map(|p| Some((p.stream_id, p.end()?)))
            .collect(),
        remove_wal: retire.into_iter().collect(),
    };
    commit(context, request, &objects).await?;
    Ok(parts.iter().filter_map(Part::end).collect())
}

/// Writes `parts` (in stream order) into new objects: a stream object for each part of at least
/// `stream_object_bytes`, one stream-set object for the rest.
pub(crate) async fn write_objects(
    context: &CommitContext<'_>,
    parts: &[Part],
) -> Result<Vec<ObjectRecord>> {
    let threshold = context.settings.compaction.stream_object_bytes;
    let (own, shared): (Vec<&Part>, Vec<&Part>) =
        parts.iter().partition(|p| p.bytes() >= threshold);
    let mut jobs: Vec<(ObjectKind, Vec<&Part>)> = own
        .into_iter()
        .map(|p| (ObjectKind::Stream, vec![p]))
        .collect();
    if !shared.is_empty() {
        jobs.push((ObjectKind::StreamSet, shared));
    }
    write_all(context, jobs).await
}

/// Writes the parts of each job (in stream order) into objects of that kind, cut at about
/// `max_object_bytes`. If one fails, the objects already written are deleted again.
pub(crate) async fn write_all(
    context: &CommitContext<'_>,
    jobs: Vec<(ObjectKind, Vec<&Part>)>,
) -> Result<Vec<ObjectRecord>> {
    let cap = context.settings.compaction.max_object_bytes;
    let mut objects = Vec::with_capacity(jobs.len());
    for (kind, parts) in jobs {
        for chunk in cut(&parts, cap) {
            match write_object(context, kind, &chunk).await {
                Ok(object) => objects.push(object),
                Err(error) => {
                    remove_uncommitted(context, &objects).await;
                    return Err(error);
                }
            }
        }
    }
    Ok(objects)
}

/// Cuts `parts` into objects of about `cap` bytes of batches (at least one batch each): a part
/// that does not fit in what is left continues in the next object.
fn cut(parts: &[&Part], cap: usize) -> Vec<Vec<Part>> {
    let mut objects = Vec::new();
    let mut current: Vec<Part> = Vec::new();
    let mut bytes = 0usize;
    for part in parts {
        let mut rest = part.batches.as_slice();
        while let Some(first) = rest.first() {
            if bytes > 0 && bytes + first.payload.len() > cap {
                objects.push(std::mem::take(&mut current));
                bytes = 0;
            }
            let mut take = 0;
            for batch in rest {
                if take > 0 && bytes + batch.payload.len() > cap {
                    break;
                }
                bytes += batch.payload.len();
                take += 1;
            }
            let (now, later) = rest.split_at(take);
            current.push(Part {
                stream_id: part.stream_id,
                epoch: part.epoch,
                batches: now.to_vec(),
            });
            rest = later;
        }
    }
    if !current.is_empty() {
        objects.push(current);
    }
    objects
}

async fn write_object(
    context: &CommitContext<'_>,
    kind: ObjectKind,
    parts: &[Part],
) -> Result<ObjectRecord> {
    let mut builder = ObjectBuilder::new(context.settings.compaction.block_bytes);
    for part in parts {
        builder.add_stream(part.stream_id, &part.batches);
    }
    let id = context.metadata.allocate_object_id().await?;
    let key = super::reader::object_key(&context.settings.data_prefix, id);
    let (bytes, spans) = builder.finish();
    let size = bytes.len() as u64;
    put_with_retry(context.data_storage, &key, bytes).await?;
    let metrics = context.metrics;
    metrics.objects_written.fetch_add(1, Ordering::Relaxed);
    metrics
        .object_bytes_written
        .fetch_add(size, Ordering::Relaxed);
    Ok(ObjectRecord {
        id,
        kind,
        key,
        size,
        ranges: spans,
    })
}

/// Commits `request`; if that fails, deletes `written` (objects written for it, referenced by
/// nothing then).
pub(crate) async fn commit(
    context: &CommitContext<'_>,
    request: CommitRequest,
    written: &[ObjectRecord],
) -> Result<()> {
    let outcome = match context.failpoints.check(failpoints::COMPACT_BEFORE_COMMIT) {
        Err(name) => Err(StreamError::Failpoint(name)),
        Ok(()) => context
            .metadata
            .commit(request)
            .await
            .map(|_| ())
            .map_err(Into::into),
    };
    if outcome.is_err() && !matches!(outcome, Err(StreamError::Failpoint(_))) {
        remove_uncommitted(context, written).await;
    }
    outcome
}

/// Deletes objects that no commit references.
async fn remove_uncommitted(context: &CommitContext<'_>, objects: &[ObjectRecord]) {
    if objects.is_empty() {
        return;
    }
    let keys: Vec<String> = objects.iter().map(|o| o.key.clone()).collect();
    if let Err(delete) = context.data_storage.delete_many(&keys).await {
        tracing::warn!(%delete, "removing objects of a failed commit failed; they are garbage");
    }
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
