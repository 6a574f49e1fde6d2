//! Garbage: objects no stream needs any more, and the deletion of objects out of the metadata.
//!
//! An object all of whose stream ranges lie below their stream's start offset (trimmed), or
//! belong to deleted streams, is removed from the metadata and then deleted. Objects leaving the
//! metadata (garbage, or replaced by merges and regrouping) are deleted from the store only
//! after `delete_grace`, so a read that looked an object up just before still finds it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use mink_metadata::{CommitRequest, StreamState};

use super::state::CompactorState;
use crate::engine::shared::EngineShared;
use crate::error::Result;

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

pub(super) async fn collect_garbage(
    engine: &EngineShared,
    state: &mut CompactorState,
) -> Result<()> {
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
