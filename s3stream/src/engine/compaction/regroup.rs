//! Regrouping: stream-set objects written again, many streams' small pieces grouped by stream.
//!
//! A stream-set object (an adopted WAL object, or one the compactor wrote) holds a few KiB of each
//! of many streams, so a catch-up read of one stream meets one small block per object. When at
//! least `merge_min_objects` stream-set objects smaller than half of `set_compaction_bytes` and
//! of `max_object_bytes` exist, this pass takes the oldest of them, up to `set_compaction_bytes`,
//! reads them whole (one GET each) and writes their live data again, grouped by stream: a stream
//! with at least `stream_object_bytes` among them gets stream objects, the others share a new
//! stream-set object (one per run of consecutive offsets of a stream, since an object holds one
//! range per stream). Batches wholly below their stream's start offset, and
//! ranges of deleted streams, are dropped, so partly trimmed objects give their space back too.
//!
//! The commit removes the old objects and adds the new ones in one transaction; it names no
//! stream epoch (no stream's offsets move), and the version compares on the removed objects make
//! it fail, changing nothing, if another writer replaced any of them first. The old objects are
//! deleted after `delete_grace`, like merged ones.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;

use mink_metadata::{CommitRequest, ObjectKind, ObjectRecord};

use super::gc::start_of;
use super::writer::{Part, commit, write_all};
use crate::batch::StreamBatch;
use crate::engine::reader::corrupt;
use crate::engine::shared::EngineShared;
use crate::error::Result;
use crate::format::object;

/// Regroups the oldest stream-set objects if enough are waiting. Returns the objects it
/// replaced (out of the metadata, to be deleted after the grace period).
pub(super) async fn regroup(engine: &EngineShared) -> Result<Vec<ObjectRecord>> {
    let settings = &engine.settings.compaction;
    if settings.set_compaction_bytes == 0 {
        return Ok(Vec::new());
    }
    // Objects of half the budget or of half the largest object written, or more (what earlier
    // runs wrote), are left as they are: they would otherwise be written again and again, and
    // the oldest would fill every window by themselves.
    let large = (settings.set_compaction_bytes / 2).min(settings.max_object_bytes as u64 / 2);
    let mut sets: Vec<ObjectRecord> = engine
        .metadata
        .list_objects()
        .await?
        .into_iter()
        .filter(|o| o.kind == ObjectKind::StreamSet && o.size < large)
        .collect();
    if sets.len() < settings.merge_min_objects.max(2) {
        return Ok(Vec::new());
    }
    sets.sort_by_key(|o| o.id);
    let mut window = Vec::new();
    let mut bytes = 0u64;
    for object in sets {
        if !window.is_empty() && bytes + object.size > settings.set_compaction_bytes {
            break;
        }
        bytes += object.size;
        window.push(object);
    }
    if window.len() < 2 {
        return Ok(Vec::new());
    }
    let mut starts: HashMap<u64, Option<u64>> = HashMap::new();
    let mut per_stream: BTreeMap<u64, Vec<StreamBatch>> = BTreeMap::new();
    for object in &window {
        let whole = engine.data_storage.get(&object.key).await?;
        let (_, index) = object::decode_object_index(&whole).map_err(|e| corrupt(object, e))?;
        for range in &object.ranges {
            let Some(start) = start_of(engine, &mut starts, range.stream_id).await? else {
                continue;
            };
            if range.end_offset <= start {
                continue;
            }
            let end = range.position + range.len;
            let mut batches = Vec::new();
            for entry in index.iter().filter(|e| {
                e.stream_id == range.stream_id
                    && e.position >= range.position
                    && e.range().end <= end
            }) {
                let block = whole.slice(entry.position as usize..entry.range().end as usize);
                batches
                    .extend(object::decode_block(&block, entry).map_err(|e| corrupt(object, e))?);
            }
            if batches.first().map(|b| b.base_offset) != Some(range.start_offset)
                || batches.last().map(StreamBatch::end_offset) != Some(range.end_offset)
            {
                return Err(corrupt(
                    object,
                    object::ObjectFormatError::Inconsistent(format!(
                        "the blocks of stream {} do not hold its range [{}, {})",
                        range.stream_id, range.start_offset, range.end_offset
                    )),
                ));
            }
            per_stream
                .entry(range.stream_id)
                .or_default()
                .extend(batches.into_iter().filter(|b| b.end_offset() > start));
        }
    }
    // Runs of consecutive offsets; the n-th run of every small stream goes to stream-set n.
    let mut own: Vec<Part> = Vec::new();
    let mut shared: Vec<Vec<Part>> = Vec::new();
    for (stream_id, mut batches) in per_stream {
        batches.sort_by_key(|b| b.base_offset);
        let total: u64 = batches.iter().map(|b| b.payload.len() as u64).sum();
        for (n, run) in runs(batches).into_iter().enumerate() {
            let part = Part::unknown(stream_id, 0, run);
            if total >= settings.stream_object_bytes {
                own.push(part);
            } else {
                if shared.len() <= n {
                    shared.resize_with(n + 1, Vec::new);
                }
                if let Some(set) = shared.get_mut(n) {
                    set.push(part);
                }
            }
        }
    }
    let context = engine.commit_context();
    let jobs = own
        .iter()
        .map(|part| (ObjectKind::Stream, vec![part]))
        .chain(
            shared
                .iter()
                .map(|set| (ObjectKind::StreamSet, set.iter().collect())),
        )
        .collect();
    let added = write_all(&context, jobs).await?;
    let request = CommitRequest {
        add_objects: added.clone(),
        remove_objects: window.iter().map(|o| o.id).collect(),
        ..CommitRequest::default()
    };
    commit(&context, request, &added).await?;
    tracing::info!(
        objects = window.len(),
        bytes,
        written = added.len(),
        "regrouped stream-set objects by stream"
    );
    engine
        .metrics
        .set_compactions
        .fetch_add(1, Ordering::Relaxed);
    Ok(window)
}

/// Splits batches sorted by offset where one does not continue the last.
fn runs(batches: Vec<StreamBatch>) -> Vec<Vec<StreamBatch>> {
    let mut runs: Vec<Vec<StreamBatch>> = Vec::new();
    for batch in batches {
        match runs.last_mut() {
            Some(run) if run.last().map(StreamBatch::end_offset) == Some(batch.base_offset) => {
                run.push(batch);
            }
            _ => runs.push(vec![batch]),
        }
    }
    runs
}
