//! Merging: an open stream whose committed data lies in several consecutive small stream objects
//! (each below `stream_object_bytes`) gets them rewritten as one stream object, in one
//! epoch-fenced commit that adds the new object and removes the old ones (deleted after
//! `delete_grace`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use mink_metadata::{CommitRequest, ObjectKind, ObjectRecord};

use super::state::CompactorState;
use super::writer::{Part, commit, write_all};
use crate::engine::open_stream::OpenStream;
use crate::engine::shared::EngineShared;
use crate::error::Result;

/// Merges the longest run of small stream objects of `stream`, if it has at least
/// `merge_min_objects` of them.
pub(super) async fn merge_stream_objects(
    engine: &EngineShared,
    stream: &Arc<OpenStream>,
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
    let part = Part::unknown(stream.id, stream.epoch, batches);
    let context = engine.commit_context();
    let written = write_all(&context, vec![(ObjectKind::Stream, vec![&part])]).await?;
    let replaced: Vec<ObjectRecord> = best.iter().map(|c| (*c.object).clone()).collect();
    let request = CommitRequest {
        stream_epochs: vec![(stream.id, stream.epoch)],
        add_objects: written.clone(),
        remove_objects: replaced.iter().map(|o| o.id).collect(),
        ..CommitRequest::default()
    };
    commit(&context, request, &written).await?;
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
