//! The layer that every writer of committed objects shares (compaction rounds, recovery, merges
//! and regrouping): write parts of streams into objects, commit them through the metadata, and
//! clean up after either step.
//!
//! A part is one stream's batches. Parts are written in stream order, a stream object for each
//! part of at least `stream_object_bytes` and one stream-set object for the rest (or the kinds
//! the caller chooses), every object cut at about `max_object_bytes` with a stream continuing in
//! the next. A PUT that fails with a retryable error is retried a few times. If writing or the
//! commit fails, the objects already written are deleted again: no commit references them. After a
//! commit, WAL objects whose data was rewritten are deleted; a failure there leaves garbage, not
//! a hole.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt as _;
use mink_metadata::{CommitRequest, Metadata, ObjectKind, ObjectRecord, WalCompacted};
use mink_runtime::{Backoff, Retryable};

use crate::batch::{KnownBatch, StreamBatch};
use crate::engine::metrics::EngineMetrics;
use crate::engine::settings::EngineSettings;
use crate::error::{Result, StreamError};
use crate::failpoints::{self, Failpoints};
use crate::format::object::{self, ObjectBuilder};
use crate::format::wal::SHARED_PAYLOAD_BYTES;
use crate::storage::{ObjectStorage, StorageError};
use crate::wal::WalWriter;

/// One stream's batches to commit.
pub(crate) struct Part {
    pub(crate) stream_id: u64,
    pub(crate) epoch: u64,
    pub(crate) batches: Vec<KnownBatch>,
}

impl Part {
    /// A part of batches whose payloads' CRCs are not known (recovered, or read back from
    /// objects).
    pub(crate) fn unknown(stream_id: u64, epoch: u64, batches: Vec<StreamBatch>) -> Self {
        Self {
            stream_id,
            epoch,
            batches: batches.into_iter().map(KnownBatch::unknown).collect(),
        }
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.batches
            .iter()
            .map(|b| b.batch.payload.len() as u64)
            .sum()
    }

    fn end(&self) -> Option<u64> {
        self.batches.last().map(|b| b.batch.end_offset())
    }
}

/// The key of committed object `id` under `data_prefix`.
fn object_key(data_prefix: &str, id: u64) -> String {
    format!("{data_prefix}{id:016x}")
}

/// What committing needs, shared by the compactor and recovery.
pub(crate) struct CommitContext<'a> {
    pub(crate) data_storage: &'a Arc<dyn ObjectStorage>,
    pub(crate) metadata: &'a Metadata,
    pub(crate) settings: &'a EngineSettings,
    pub(crate) failpoints: &'a Failpoints,
    pub(crate) metrics: &'a EngineMetrics,
}

/// Deletes WAL objects whose data is committed. A failure leaves garbage, not a hole: the
/// registry no longer names them, so recovery never reads them.
pub(crate) async fn delete_wal_objects(
    storage: &Arc<dyn ObjectStorage>,
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

/// Objects written at once by [`write_all`]: on a store with a bandwidth per request (S3), one
/// object after another left recovery and regrouping waiting on each PUT in turn.
const WRITES_IN_FLIGHT: usize = 4;

/// Writes the parts of each job (in stream order) into objects of that kind, cut at about
/// `max_object_bytes`, up to [`WRITES_IN_FLIGHT`] at once; returns them in that order. If one
/// fails, the others are let finish and every object written is deleted again.
pub(crate) async fn write_all(
    context: &CommitContext<'_>,
    jobs: Vec<(ObjectKind, Vec<&Part>)>,
) -> Result<Vec<ObjectRecord>> {
    let cap = context.settings.compaction.max_object_bytes;
    let chunks: Vec<(ObjectKind, Vec<Part>)> = jobs
        .into_iter()
        .flat_map(|(kind, parts)| cut(&parts, cap).into_iter().map(move |c| (kind, c)))
        .collect();
    // Each write owns its chunk: a closure over borrowed chunks is one the compiler cannot
    // prove `Send` for the spawned compactor.
    let writes: Vec<_> = chunks
        .into_iter()
        .map(|(kind, chunk)| async move { write_object(context, kind, &chunk).await })
        .collect();
    let outcomes: Vec<Result<ObjectRecord>> = futures::stream::iter(writes)
        .buffered(WRITES_IN_FLIGHT)
        .collect()
        .await;
    let mut objects = Vec::with_capacity(outcomes.len());
    let mut failed = None;
    for outcome in outcomes {
        match outcome {
            Ok(object) => objects.push(object),
            Err(error) => {
                failed.get_or_insert(error);
            }
        }
    }
    match failed {
        None => Ok(objects),
        Some(error) => {
            remove_uncommitted(context, &objects).await;
            Err(error)
        }
    }
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
            if bytes > 0 && bytes + first.batch.payload.len() > cap {
                objects.push(std::mem::take(&mut current));
                bytes = 0;
            }
            let mut take = 0;
            for batch in rest {
                if take > 0 && bytes + batch.batch.payload.len() > cap {
                    break;
                }
                bytes += batch.batch.payload.len();
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
    // In parts: batches of `SHARED_PAYLOAD_BYTES` or more are sent where they are (the log
    // cache's, or slices of the objects a merge read), the rest copied (docs/write-copies.md).
    let copied = object::copied_bytes(parts.iter().flat_map(|p| &p.batches), SHARED_PAYLOAD_BYTES);
    let mut builder = ObjectBuilder::sharing(
        context.settings.compaction.block_bytes,
        SHARED_PAYLOAD_BYTES,
        copied + 4096,
    );
    for part in parts {
        builder.add_stream(part.stream_id, &part.batches);
    }
    let id = context.metadata.allocate_object_id().await?;
    let key = object_key(&context.settings.data_prefix, id);
    let (pieces, index) = builder.finish_parts(&[]);
    let spans = object::spans(&index);
    let size = pieces.iter().map(|p| p.len() as u64).sum();
    put_with_retry(context.data_storage, &key, pieces).await?;
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
pub(crate) async fn remove_uncommitted(context: &CommitContext<'_>, objects: &[ObjectRecord]) {
    if objects.is_empty() {
        return;
    }
    let keys: Vec<String> = objects.iter().map(|o| o.key.clone()).collect();
    if let Err(delete) = context.data_storage.delete_many(&keys).await {
        tracing::warn!(%delete, "removing objects of a failed commit failed; they are garbage");
    }
}

/// Delays between attempts of an object PUT that fails with a retryable error (eight attempts).
const UPLOAD_BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(50), Duration::from_secs(2)).with_max_retries(7);

async fn put_with_retry(
    storage: &Arc<dyn ObjectStorage>,
    key: &str,
    parts: Vec<bytes::Bytes>,
) -> Result<()> {
    let put = || storage.put_parts(key, parts.clone());
    put.retry(UPLOAD_BACKOFF.builder())
        .when(StorageError::is_retryable)
        .notify(|error, delay| tracing::warn!(%key, %error, ?delay, "object PUT failed; retrying"))
        .await?;
    Ok(())
}
