//! One compaction round: commits durable WAL data into committed objects.
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

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use mink_metadata::{CommitRequest, ObjectKind, ObjectRecord, WalCompacted};

use super::plan::plan_round;
use super::writer::{Part, commit, delete_wal_objects, write_objects};
use crate::batch::StreamBatch;
use crate::engine::lock::lock;
use crate::engine::open_stream::OpenStream;
use crate::engine::shared::EngineShared;
use crate::error::{Result, StreamError};
use crate::failpoints;

/// One compaction round.
pub(crate) async fn compact(engine: &EngineShared) -> Result<()> {
    let mut state = engine.compaction_lock.lock().await;
    if engine.halted() {
        return Err(StreamError::ShutDown);
    }
    let point = engine.wal.with_durable_point(|point| point);
    let written = engine.wal.written_below(point);
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
                let batches = lock(&stream.log).between(range.start, range.end);
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
