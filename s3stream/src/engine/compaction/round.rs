//! One compaction round: commits durable WAL data into committed objects.
//!
//! A round takes the WAL's durable point `p` (every WAL object below `p` is acknowledged) and
//! the WAL objects below it that are not yet committed, oldest first; the compactor's rounds
//! stop at about `max_round_bytes` of them (at least one), moving `p` down to the first object
//! left for the next round. Each one is either
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
//! ends and retires the WAL ids below `p`; only then is the log cache trimmed (releasing
//! back-pressure) and are the rewritten WAL objects deleted, in a task that runs beside the next
//! round (at most one such task at a time; [compact] waits for it). Adopted WAL objects stay:
//! they are committed objects now, collected like any other when trimmed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use mink_metadata::{CommitRequest, ObjectKind, ObjectRecord, WalCompacted};

use super::plan::plan_round;
use super::writer::{Part, commit, delete_wal_objects, write_objects};
use crate::engine::lock::lock;
use crate::engine::open_stream::OpenStream;
use crate::engine::shared::EngineShared;
use crate::error::{Result, StreamError};
use crate::failpoints;

/// Compacts everything durable now, in one round.
pub(crate) async fn compact(engine: &EngineShared) -> Result<()> {
    let outcome = compact_round(engine, u64::MAX).await.map(drop);
    finish_wal_deletes(engine).await;
    outcome
}

/// Waits for the deletion of the last round's rewritten WAL objects, if it is still running.
pub(crate) async fn finish_wal_deletes(engine: &EngineShared) {
    let previous = engine.compaction_lock.lock().await.wal_deletes.take();
    if let Some(previous) = previous {
        let _ = previous.await;
    }
}

/// One compaction round over the oldest durable WAL objects, up to about `max_bytes` of them (at
/// least one). Returns whether durable WAL objects were left for the next round.
pub(crate) async fn compact_round(engine: &EngineShared, max_bytes: u64) -> Result<bool> {
    let started = std::time::Instant::now();
    let mut state = engine.compaction_lock.lock().await;
    if engine.halted() {
        return Err(StreamError::ShutDown);
    }
    let point = engine.wal.with_durable_point(|point| point);
    let mut written = engine.wal.written_below(point);
    let (point, more) = match round_end(&written, max_bytes) {
        Some(end) => {
            let next = written.get(end).map_or(point, |o| o.id);
            written.truncate(end);
            (next, true)
        }
        None => (point, false),
    };
    let streams: HashMap<u64, Arc<OpenStream>> = engine
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
    let per_commit = engine.metadata.streams_per_commit();
    let mut plan = plan_round(&written, &streams, adopt_from)?;
    if plan.ends.len() > per_commit {
        // More streams than one metadata transaction holds (etcd: 128 operations): the
        // round is committed a chunk of streams at a time, each chunk with objects of its own,
        // so nothing is adopted (an adopted WAL object holds every stream it has).
        plan = plan_round(&written, &streams, u64::MAX)?;
    }
    if plan.ends.is_empty() && point <= state.retired_below {
        // Nothing to commit: no reason to come back at once.
        return Ok(false);
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
    let retire = WalCompacted {
        node: engine.node.clone(),
        below: point,
    };
    let wal_objects = written.len();
    let wal_bytes: u64 = written.iter().map(|o| o.size).sum();
    if plan.ends.len() <= per_commit {
        // One transaction: the adopted objects, one set of written objects, every stream.
        for group in &plan.rewrite {
            let parts = group
                .iter()
                .map(|(id, range)| part_of(&streams, *id, range))
                .collect::<Result<Vec<_>>>()?;
            objects.extend(write_objects(&context, &parts).await?);
        }
        let request = CommitRequest {
            stream_epochs: epochs,
            add_objects: objects.clone(),
            remove_objects: Vec::new(),
            advance: plan.ends.iter().map(|(id, end)| (*id, *end)).collect(),
            remove_wal: vec![retire],
        };
        commit_fenced(
            engine,
            &context,
            &streams,
            request,
            objects.get(adopted..).unwrap_or_default(),
        )
        .await?;
        for (stream, end) in &owners {
            stream.committed(*end);
        }
    } else {
        // A chunk of streams per transaction, the WAL ids retired with the last; each stream
        // whole in one chunk (nothing adopted: all it has from its committed end is in its log
        // cache), counted committed as soon as its chunk commits.
        let parts = plan
            .ends
            .iter()
            .map(|(id, end)| {
                let from = streams
                    .get(id)
                    .map_or(*end, |s| s.committed_end.load(Ordering::Acquire));
                part_of(&streams, *id, &(from..*end))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut chunks = parts.chunks(per_commit).peekable();
        while let Some(chunk) = chunks.next() {
            let written = write_objects(&context, chunk).await?;
            let request = CommitRequest {
                stream_epochs: chunk.iter().map(|p| (p.stream_id, p.epoch)).collect(),
                add_objects: written.clone(),
                remove_objects: Vec::new(),
                advance: chunk
                    .iter()
                    .filter_map(|p| Some((p.stream_id, *plan.ends.get(&p.stream_id)?)))
                    .collect(),
                remove_wal: if chunks.peek().is_none() {
                    vec![retire.clone()]
                } else {
                    Vec::new()
                },
            };
            commit_fenced(engine, &context, &streams, request, &written).await?;
            for p in chunk {
                if let (Some(stream), Some(end)) =
                    (streams.get(&p.stream_id), plan.ends.get(&p.stream_id))
                {
                    stream.committed(*end);
                }
            }
        }
    }
    if let Err(name) = engine
        .failpoints
        .check(failpoints::COMPACT_BEFORE_WAL_DELETE)
    {
        engine.halt();
        return Err(StreamError::Failpoint(name));
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
    // The rewritten WAL objects are garbage now (the commit retired their ids). Deleting them
    // took two thirds as long as writing the round's objects on local files, so it runs beside the
    // next round rather than before it; at most one round's deletion is in flight.
    if let Some(previous) = state.wal_deletes.take() {
        let _ = previous.await;
    }
    if !rewritten.is_empty() {
        let (storage, prefix, metrics) = (
            engine.wal_storage.clone(),
            engine.wal.prefix().to_owned(),
            engine.metrics.clone(),
        );
        state.wal_deletes = Some(tokio::spawn(async move {
            delete_wal_objects(&storage, &prefix, &rewritten, &metrics).await;
        }));
    }
    metrics.compactions.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(
        wal_objects,
        wal_bytes,
        adopted,
        micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        "compaction round"
    );
    Ok(more)
}

/// The batches of stream `id` for `range`, from its log cache.
fn part_of(
    streams: &HashMap<u64, Arc<OpenStream>>,
    id: u64,
    range: &std::ops::Range<u64>,
) -> Result<Part> {
    let stream = streams.get(&id).ok_or_else(|| StreamError::Inconsistent {
        stream_id: id,
        message: "planned for compaction but not open".to_owned(),
    })?;
    let batches = lock(&stream.log).between(range.start, range.end);
    if batches.first().map(|b| b.batch.base_offset) != Some(range.start)
        || batches.last().map(|b| b.batch.end_offset()) != Some(range.end)
    {
        return Err(StreamError::Inconsistent {
            stream_id: id,
            message: format!(
                "the log cache does not hold offsets {}..{} to compact",
                range.start, range.end
            ),
        });
    }
    Ok(Part {
        stream_id: id,
        epoch: stream.epoch,
        batches,
    })
}

/// How many of the oldest `written` objects a round of at most `max_bytes` takes (at least one),
/// or `None` when it takes them all.
fn round_end(written: &[Arc<crate::wal::WrittenObject>], max_bytes: u64) -> Option<usize> {
    let mut bytes = 0u64;
    for (i, object) in written.iter().enumerate() {
        bytes = bytes.saturating_add(object.size);
        if bytes > max_bytes && i > 0 {
            return Some(i);
        }
    }
    None
}

/// Commits `request` (`written`: the objects written for it); a stream fenced meanwhile is
/// dropped from this node, a failpoint halts the engine.
async fn commit_fenced(
    engine: &EngineShared,
    context: &super::writer::CommitContext<'_>,
    streams: &HashMap<u64, Arc<OpenStream>>,
    request: CommitRequest,
    written: &[ObjectRecord],
) -> Result<()> {
    match commit(context, request, written).await {
        Ok(()) => Ok(()),
        Err(StreamError::Fenced { stream_id, epoch }) => {
            // Another node owns it now: this handle is dead; the next round goes on without it.
            tracing::warn!(stream_id, epoch, "stream fenced during compaction");
            if let Some(stream) = streams.get(&stream_id) {
                stream.fenced.store(true, Ordering::Release);
                engine.forget(stream_id);
            }
            Err(StreamError::Fenced { stream_id, epoch })
        }
        Err(error) => {
            if matches!(error, StreamError::Failpoint(_)) {
                engine.halt();
            }
            Err(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::WrittenObject;

    fn objects(sizes: &[u64]) -> Vec<Arc<WrittenObject>> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, size)| {
                Arc::new(WrittenObject {
                    id: i as u64 + 10,
                    key: format!("wal/{i}"),
                    size: *size,
                    spans: Vec::new(),
                })
            })
            .collect()
    }

    #[test]
    fn a_round_takes_the_oldest_objects_up_to_its_bytes() {
        // Everything fits: no cut.
        assert_eq!(round_end(&objects(&[10, 20, 30]), 60), None);
        assert_eq!(round_end(&objects(&[]), 0), None);
        // Cut before the object that would pass the bound.
        assert_eq!(round_end(&objects(&[10, 20, 30]), 59), Some(2));
        assert_eq!(round_end(&objects(&[10, 20, 30]), 10), Some(1));
        // An object larger than the bound still makes a round of its own.
        assert_eq!(round_end(&objects(&[100, 20]), 10), Some(1));
        assert_eq!(round_end(&objects(&[100]), 10), None);
    }
}
