//! The compactor's second pass: merging small stream objects and collecting garbage.
//!
//! - **Merge**: an open stream whose committed data lies in several consecutive small stream
//!   objects (each below `stream_object_bytes`) gets them rewritten as one stream object, in one
//!   epoch-fenced commit that adds the new object and removes the old ones.
//! - **Regrouping** (`stream_sets.rs`): the oldest stream-set objects are written again grouped
//!   by stream, so a stream's history is not spread in small pieces over many objects.
//! - **Garbage**: an object all of whose stream ranges lie below their stream's start offset
//!   (trimmed), or belong to deleted streams, is removed from the metadata and then deleted.
//!
//! Objects leaving the metadata are deleted from the store only after `delete_grace`, so a read
//! that looked an object up just before it was replaced still finds it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Instant;

use mink_metadata::{CommitRequest, ObjectKind, ObjectRecord, StreamState};

use super::EngineShared;
use super::compactor::{CompactorState, Part};
use crate::error::{Result, StreamError};

/// Objects removed from the metadata, waiting out the grace period before deletion.
#[derive(Debug, Default)]
pub(crate) struct PendingDeletes {
    queue: Vec<(Instant, ObjectRecord)>,
}

impl PendingDeletes {
    pub(crate) fn push(&mut self, objects: impl IntoIterator<Item = ObjectRecord>) {
        let now = Instant::now();
        self.queue.extend(objects.into_iter().map(|o| (now, o)));
    }
}

/// The second pass's loop: a run every `maintenance_interval`, beside the compactor (whose rounds
/// it never holds up for long: regrouping, the slow part, runs outside the compaction lock).
pub(crate) async fn run(engine: Weak<EngineShared>) {
    loop {
        let Some(interval) = engine
            .upgrade()
            .map(|e| e.settings.compaction.maintenance_interval)
        else {
            return;
        };
        tokio::time::sleep(interval).await;
        let Some(shared) = engine.upgrade() else {
            return;
        };
        match run_once(&shared).await {
            Ok(()) => {}
            Err(StreamError::ShutDown) => return,
            Err(StreamError::Failpoint(name)) => {
                tracing::warn!(failpoint = name, "maintenance stops at a failpoint");
                return;
            }
            Err(error) => tracing::warn!(%error, "maintenance failed; retrying next time"),
        }
    }
}

/// One maintenance run: merge small stream objects and collect garbage (under the compaction
/// lock), regroup stream-set objects (outside it: its commit is guarded by the version compares
/// on the objects it replaces), then delete what waited out its grace period.
pub(crate) async fn run_once(engine: &EngineShared) -> Result<()> {
    {
        let mut state = engine.compaction_lock.lock().await;
        if engine.halted() {
            return Err(StreamError::ShutDown);
        }
        for stream in engine.open_streams() {
            if !stream.fenced.load(Ordering::Acquire) {
                merge_stream_objects(engine, &stream, &mut state).await?;
            }
        }
        collect_garbage(engine, &mut state).await?;
    }
    let replaced = super::stream_sets::run_once(engine).await?;
    let mut state = engine.compaction_lock.lock().await;
    state.pending.push(replaced);
    delete_expired(engine, &mut state, false).await;
    Ok(())
}

/// Deletes the objects whose grace period is over (all of them when `all`).
pub(crate) async fn delete_expired(engine: &EngineShared, state: &mut CompactorState, all: bool) {
    let grace = engine.settings.compaction.delete_grace;
    let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut state.pending.queue)
        .into_iter()
        .partition(|(since, _)| all || since.elapsed() >= grace);
    state.pending.queue = keep;
    if due.is_empty() {
        return;
    }
    let keys: Vec<String> = due.iter().map(|(_, o)| o.key.clone()).collect();
    match engine.data_storage.delete_many(&keys).await {
        Ok(()) => {
            for (_, object) in &due {
                engine
                    .caches
                    .blocks
                    .invalidate_object(object.id, object.size);
                engine.caches.indexes.invalidate(object.id).await;
            }
            engine
                .metrics
                .objects_deleted
                .fetch_add(keys.len() as u64, Ordering::Relaxed);
        }
        Err(error) => {
            tracing::warn!(%error, count = keys.len(), "deleting replaced objects failed; retrying later");
            state.pending.queue.extend(due);
        }
    }
}

async fn merge_stream_objects(
    engine: &EngineShared,
    stream: &Arc<crate::stream::StreamShared>,
    state: &mut CompactorState,
) -> Result<()> {
    let settings = &engine.settings.compaction;
    let start = stream.offsets_start();
    let committed = stream.committed_end.load(Ordering::Acquire);
    let covering = engine
        .metadata
        .index()
        .covering(stream.id, start, usize::MAX);
    // The longest run of consecutive small stream objects.
    let mut best: &[mink_metadata::CoveringRange] = &[];
    let mut run_start = 0;
    for (i, c) in covering.iter().enumerate() {
        let small = c.object.kind == ObjectKind::Stream
            && c.object.size < settings.stream_object_bytes
            && c.range.end_offset <= committed;
        let continues = i > run_start
            && covering
                .get(i - 1)
                .is_some_and(|p| p.range.end_offset == c.range.start_offset);
        if !small {
            run_start = i + 1;
            continue;
        }
        if !continues {
            run_start = i;
        }
        let run = &covering[run_start..=i];
        if run.len() > best.len() {
            best = run;
        }
    }
    if best.len() < settings.merge_min_objects.max(2) {
        return Ok(());
    }
    let (Some(first), Some(last)) = (best.first(), best.last()) else {
        return Ok(());
    };
    let (from, to) = (first.range.start_offset, last.range.end_offset);
    let batches = engine.read_committed(stream, from, to, usize::MAX).await?;
    if batches.first().map(|b| b.base_offset) != Some(from)
        || batches.last().map(|b| b.end_offset()) != Some(to)
    {
        // Trimmed or replaced under us: try again next round.
        return Ok(());
    }
    let part = Part {
        stream_id: stream.id,
        epoch: stream.epoch,
        batches,
    };
    let context = engine.commit_context();
    let written =
        super::compactor::write_all(&context, vec![(ObjectKind::Stream, vec![&part])]).await?;
    let replaced: Vec<ObjectRecord> = best.iter().map(|c| (*c.object).clone()).collect();
    let request = CommitRequest {
        stream_epochs: vec![(stream.id, stream.epoch)],
        add_objects: written.clone(),
        remove_objects: replaced.iter().map(|o| o.id).collect(),
        ..CommitRequest::default()
    };
    super::compactor::commit(&context, request, &written).await?;
    tracing::debug!(
        stream_id = stream.id,
        objects = replaced.len(),
        from,
        to,
        "merged stream objects"
    );
    engine.metrics.merges.fetch_add(1, Ordering::Relaxed);
    state.pending.push(replaced);
    Ok(())
}

async fn collect_garbage(engine: &EngineShared, state: &mut CompactorState) -> Result<()> {
    let objects = engine.metadata.list_objects().await?;
    let mut starts: HashMap<u64, Option<u64>> = HashMap::new();
    let mut dead = Vec::new();
    for object in objects {
        let mut all_dead = !object.ranges.is_empty();
        for range in &object.ranges {
            let start = start_of(engine, &mut starts, range.stream_id).await?;
            if start.is_some_and(|start| range.end_offset > start) {
                all_dead = false;
                break;
            }
        }
        if all_dead {
            dead.push(object);
        }
    }
    if dead.is_empty() {
        return Ok(());
    }
    let request = CommitRequest {
        remove_objects: dead.iter().map(|o| o.id).collect(),
        ..CommitRequest::default()
    };
    engine.metadata.commit(request).await?;
    tracing::info!(objects = dead.len(), "collected garbage objects");
    state.pending.push(dead);
    Ok(())
}

/// The stream's start offset, or `None` if it is deleted (its data is dead), remembered in
/// `starts` for the rest of a pass.
pub(crate) async fn start_of(
    engine: &EngineShared,
    starts: &mut HashMap<u64, Option<u64>>,
    stream_id: u64,
) -> Result<Option<u64>> {
    if let Some(start) = starts.get(&stream_id) {
        return Ok(*start);
    }
    let start = engine
        .metadata
        .get_stream(stream_id)
        .await?
        .filter(|s| s.state != StreamState::Deleted)
        .map(|s| s.start_offset);
    starts.insert(stream_id, start);
    Ok(start)
}
