//! Recovery: replays a member's WAL and commits what it must keep. At engine open, of this node
//! (and its earlier lives); while running, of a dead member whose recovery this node claimed
//! ([`Engine::recover_member`](super::Engine::recover_member)).
//!
//! For each stream found in the WAL, the records kept are those of the stream's current epoch
//! (older epochs were recovered when the stream was last opened, and a record of an older epoch
//! could only come from a fenced owner) that continue the committed end without a gap, in offset
//! order. A gap means an upload never landed; the stream's records after it were never
//! acknowledged (a stream's acknowledgements wait for its own earlier records), so they are
//! dropped, while other streams' records in later objects are kept (`wal/replay.rs` reads past
//! missing objects). Streams that are closed or deleted are skipped: close commits everything first.
//! Everything kept is committed into objects, a chunk of streams per transaction, the last of
//! which also retires every registered WAL id of the member; the replayed WAL objects are
//! deleted afterwards.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use mink_metadata::{Metadata, StreamState, WalCompacted};

use super::compaction::writer::{CommitContext, Part, commit_parts, delete_wal_objects};
use super::metrics::EngineMetrics;
use super::settings::EngineSettings;
use crate::batch::StreamBatch;
use crate::error::Result;
use crate::failpoints::Failpoints;
use crate::storage::ObjectStorage;
use crate::wal::WalRecord;
use crate::wal::replay::replay;

#[expect(
    clippy::too_many_arguments,
    reason = "the engine's parts, passed once at open"
)]
pub(crate) async fn recover(
    node: &str,
    wal_storage: &Arc<dyn ObjectStorage>,
    data_storage: &Arc<dyn ObjectStorage>,
    metadata: &Metadata,
    settings: &EngineSettings,
    wal_prefix: &str,
    failpoints: &Failpoints,
    metrics: &EngineMetrics,
) -> Result<()> {
    let reservations = metadata.wal_reservations(node).await?;
    let Some(below) = reservations.iter().map(|r| r.end_id).max() else {
        return Ok(());
    };
    let ranges: Vec<_> = reservations.iter().map(|r| r.first_id..r.end_id).collect();
    let replayed = replay(wal_storage, wal_prefix, &ranges).await?;
    // The stream records first, so no reference into the replayed objects is held across an
    // await (which keeps the future `Send` for a task that recovers another member).
    let mut ids: Vec<u64> = replayed
        .objects
        .iter()
        .flat_map(|o| o.records.iter().map(|r| r.stream_id))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let mut streams = BTreeMap::new();
    for id in ids {
        if let Some(stream) = metadata.get_stream(id).await? {
            streams.insert(id, stream);
        }
    }
    let parts = keep(&replayed.objects, &streams, metrics);
    tracing::info!(
        node,
        wal_objects = replayed.objects.len(),
        streams = parts.len(),
        "recovering the WAL"
    );
    let context = CommitContext {
        data_storage,
        metadata,
        settings,
        failpoints,
        metrics,
    };
    let retire = WalCompacted {
        node: node.to_owned(),
        below,
    };
    // Within the store's limit on operations per transaction (etcd: 128): a chunk of streams
    // per commit, each with its own objects, and the WAL ids retired with the last. A crash between two commits
    // leaves the WAL registered; the next recovery skips what is already committed.
    let per_commit = metadata.streams_per_commit();
    let mut chunks: Vec<Vec<Part>> = Vec::new();
    let mut parts = parts.into_iter().peekable();
    while parts.peek().is_some() {
        chunks.push(parts.by_ref().take(per_commit).collect());
    }
    let last = chunks.pop().unwrap_or_default();
    for chunk in chunks {
        commit_parts(&context, chunk, None).await?;
    }
    commit_parts(&context, last, Some(retire)).await?;
    let ids: Vec<u64> = replayed.objects.iter().map(|o| o.id).collect();
    delete_wal_objects(wal_storage, wal_prefix, &ids, metrics).await;
    Ok(())
}

/// For each open stream, the records of its epoch that continue its committed end without a gap.
fn keep(
    objects: &[crate::wal::replay::ReplayedObject],
    streams: &BTreeMap<u64, mink_metadata::StreamRecord>,
    metrics: &EngineMetrics,
) -> Vec<Part> {
    let mut per_stream: BTreeMap<u64, Vec<&WalRecord>> = BTreeMap::new();
    for object in objects {
        for record in &object.records {
            per_stream.entry(record.stream_id).or_default().push(record);
        }
    }
    let mut parts = Vec::new();
    for (stream_id, mut records) in per_stream {
        let Some(stream) = streams.get(&stream_id) else {
            continue;
        };
        if stream.state != StreamState::Open {
            continue;
        }
        records.retain(|r| r.epoch == stream.epoch);
        records.sort_by_key(|r| r.base_offset);
        let mut end = stream.end_offset;
        let mut batches = Vec::new();
        for record in records {
            if record.base_offset < end {
                continue;
            }
            if record.base_offset > end {
                tracing::warn!(
                    stream_id,
                    expected = end,
                    found = record.base_offset,
                    "gap in the stream's WAL records; its later records were never acknowledged and are dropped"
                );
                break;
            }
            batches.push(StreamBatch {
                base_offset: record.base_offset,
                count: record.count,
                payload: record.payload.clone(),
            });
            end = record.end_offset();
        }
        if !batches.is_empty() {
            metrics
                .recovered_batches
                .fetch_add(batches.len() as u64, Ordering::Relaxed);
            parts.push(Part::unknown(stream_id, stream.epoch, batches));
        }
    }
    parts
}
