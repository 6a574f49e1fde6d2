//! The compactor's second pass: merging small stream objects and collecting garbage.
//!
//! - **Merge**: an open stream whose committed data lies in several consecutive small stream
//!   objects (each below `stream_object_bytes`) gets them rewritten as one stream object, in one
//!   epoch-fenced commit that adds the new object and removes the old ones.
//! - **Garbage**: an object all of whose stream ranges lie below their stream's start offset
//!   (trimmed), or belong to deleted streams, is removed from the metadata and then deleted.
//!
//! Objects leaving the metadata are deleted from the store only after `delete_grace`, so a read
//! that looked an object up just before it was replaced still finds it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use mink_metadata::{CommitRequest, ObjectKind, ObjectRecord, StreamState};

use super::EngineShared;
use super::compactor::CompactorState;
use crate::error::Result;
use crate::object::ObjectBuilder;

/// Objects removed from the metadata, waiting out the grace period before deletion.
#[derive(Debug, Default)]
pub(crate) struct PendingDeletes {
    queue: Vec<(Instant, ObjectRecord)>,
}

impl PendingDeletes {
    fn push(&mut self, objects: impl IntoIterator<Item = ObjectRecord>) {
        let now = Instant::now();
        self.queue.extend(objects.into_iter().map(|o| (now, o)));
    }
}

/// One maintenance round: merge, collect garbage, delete what waited long enough.
pub(crate) async fn run_once(engine: &EngineShared, state: &mut CompactorState) -> Result<()> {
    for stream in engine.open_streams() {
        if !stream.fenced.load(Ordering::Acquire) {
            merge_stream_objects(engine, &stream, state).await?;
        }
    }
    collect_garbage(engine, state).await?;
    delete_expired(engine, state, false).await;
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
    let mut builder = ObjectBuilder::new(settings.block_bytes);
    builder.add_stream(stream.id, &batches);
    let id = engine.metadata.allocate_object_id().await?;
    let key = super::reader::object_key(&engine.settings.data_prefix, id);
    let (bytes, spans) = builder.finish();
    let size = bytes.len() as u64;
    super::compactor::put_with_retry(&engine.data_storage, &key, bytes).await?;
    let merged = ObjectRecord {
        id,
        kind: ObjectKind::Stream,
        key: key.clone(),
        size,
        ranges: spans,
    };
    let replaced: Vec<ObjectRecord> = best.iter().map(|c| (*c.object).clone()).collect();
    let request = CommitRequest {
        stream_epochs: vec![(stream.id, stream.epoch)],
        add_objects: vec![merged],
        remove_objects: replaced.iter().map(|o| o.id).collect(),
        ..CommitRequest::default()
    };
    if let Err(error) = engine.metadata.commit(request).await {
        if let Err(delete) = engine.data_storage.delete(&key).await {
            tracing::warn!(%delete, %key, "removing the object of a failed merge failed");
        }
        return Err(error.into());
    }
    tracing::debug!(
        stream_id = stream.id,
        objects = replaced.len(),
        from,
        to,
        "merged stream objects"
    );
    engine.metrics.merges.fetch_add(1, Ordering::Relaxed);
    engine
        .metrics
        .objects_written
        .fetch_add(1, Ordering::Relaxed);
    engine
        .metrics
        .object_bytes_written
        .fetch_add(size, Ordering::Relaxed);
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
            let start = match starts.get(&range.stream_id) {
                Some(start) => *start,
                None => {
                    let start = engine
                        .metadata
                        .get_stream(range.stream_id)
                        .await?
                        .filter(|s| s.state != StreamState::Deleted)
                        .map(|s| s.start_offset);
                    starts.insert(range.stream_id, start);
                    start
                }
            };
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
