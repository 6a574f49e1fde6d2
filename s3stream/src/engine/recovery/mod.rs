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
//! Replayed objects whose kept records are whole are committed as they are (adopted, see
//! `adopt.rs`), when the WAL and data stores are the same, `compaction.adopt_at_recovery` is on
//! and the commit fits one metadata transaction; the rest of what is kept is written into new
//! objects, and one transaction commits both and retires every registered WAL id of the member.
//! Otherwise everything kept is written into new objects, a chunk of streams per transaction,
//! the last of which retires the WAL ids. The replayed WAL objects not adopted are deleted
//! afterwards.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use mink_metadata::{CommitRequest, Metadata, ObjectKind, ObjectRecord, WalCompacted};

use self::adopt::{Adoption, Kept, adopt, keep};
use super::compaction::writer::{
    CommitContext, Part, commit, commit_parts, delete_wal_objects, remove_uncommitted,
    write_objects,
};
use super::metrics::EngineMetrics;
use super::settings::EngineSettings;
use crate::error::Result;
use crate::failpoints::Failpoints;
use crate::storage::ObjectStorage;
use crate::wal::replay::{ReplayedObject, replay};

mod adopt;

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
    let kept = keep(&replayed.objects, &streams);
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
    let same_store = crate::storage::is_same(wal_storage, data_storage);
    let adoption = if settings.compaction.adopt_at_recovery && same_store {
        adopt(&replayed.objects, &kept)
            .filter(|a| fits_one_commit(metadata, settings, a, &kept, reservations.len()))
    } else {
        None
    };
    tracing::info!(
        node,
        wal_objects = replayed.objects.len(),
        streams = advanced(&kept).count(),
        adopted = adoption.as_ref().map_or(0, |a| a.objects.len()),
        "recovering the WAL"
    );
    let recovered: u64 = kept.values().map(|k| k.batches.len() as u64).sum();
    let adopted = match adoption {
        Some(adoption) => {
            commit_adopted(&context, &replayed.objects, &kept, adoption, retire).await?
        }
        None => {
            commit_rewritten(&context, kept, retire).await?;
            HashSet::new()
        }
    };
    metrics
        .recovered_batches
        .fetch_add(recovered, Ordering::Relaxed);
    let ids: Vec<u64> = replayed
        .objects
        .iter()
        .map(|o| o.id)
        .filter(|id| !adopted.contains(id))
        .collect();
    delete_wal_objects(wal_storage, wal_prefix, &ids, metrics).await;
    Ok(())
}

/// The streams whose committed end recovery moves: those with records kept.
fn advanced(kept: &BTreeMap<u64, Kept>) -> impl Iterator<Item = (u64, &Kept)> {
    kept.iter()
        .filter(|(_, k)| !k.batches.is_empty())
        .map(|(id, k)| (*id, k))
}

/// Writes everything kept into new objects and commits it, a chunk of streams per transaction
/// (within the store's limit on operations per transaction, etcd's 128), the WAL ids retired
/// with the last. A crash between two commits leaves the WAL registered; the next recovery
/// skips what is already committed.
async fn commit_rewritten(
    context: &CommitContext<'_>,
    kept: BTreeMap<u64, Kept>,
    retire: WalCompacted,
) -> Result<()> {
    let per_commit = context.metadata.streams_per_commit();
    let mut chunks: Vec<Vec<Part>> = Vec::new();
    let mut parts = kept
        .into_iter()
        .filter(|(_, k)| !k.batches.is_empty())
        .map(|(id, k)| Part::unknown(id, k.epoch, k.batches))
        .peekable();
    while parts.peek().is_some() {
        chunks.push(parts.by_ref().take(per_commit).collect());
    }
    let last = chunks.pop().unwrap_or_default();
    for chunk in chunks {
        commit_parts(context, chunk, None).await?;
    }
    commit_parts(context, last, Some(retire)).await?;
    Ok(())
}

/// Commits the adopted objects as they are and the rest of what is kept in new objects, in one
/// transaction that advances every stream and retires the WAL ids. Returns the ids of the WAL
/// objects adopted (committed objects now: not to be deleted).
async fn commit_adopted(
    context: &CommitContext<'_>,
    objects: &[ReplayedObject],
    kept: &BTreeMap<u64, Kept>,
    adoption: Adoption,
    retire: WalCompacted,
) -> Result<HashSet<u64>> {
    let mut add = Vec::with_capacity(adoption.objects.len());
    let mut adopted = HashSet::with_capacity(adoption.objects.len());
    let mut adopted_bytes = 0;
    for (at, ranges) in adoption.objects {
        let Some(object) = objects.get(at) else {
            continue;
        };
        adopted.insert(object.id);
        adopted_bytes += object.size;
        add.push(ObjectRecord {
            id: context.metadata.allocate_object_id().await?,
            kind: ObjectKind::StreamSet,
            key: object.key.clone(),
            size: object.size,
            ranges,
        });
    }
    let mut written = Vec::new();
    for round in &adoption.rounds {
        match write_objects(context, round).await {
            Ok(objects) => written.extend(objects),
            Err(error) => {
                remove_uncommitted(context, &written).await;
                return Err(error);
            }
        }
    }
    add.extend(written.iter().cloned());
    let moved: Vec<(u64, &Kept)> = advanced(kept).collect();
    let request = CommitRequest {
        stream_epochs: moved.iter().map(|(id, k)| (*id, k.epoch)).collect(),
        add_objects: add,
        remove_objects: Vec::new(),
        advance: moved.iter().map(|(id, k)| (*id, k.to())).collect(),
        remove_wal: vec![retire],
    };
    commit(context, request, &written).await?;
    let metrics = context.metrics;
    metrics
        .wal_objects_adopted
        .fetch_add(adopted.len() as u64, Ordering::Relaxed);
    metrics
        .wal_bytes_adopted
        .fetch_add(adopted_bytes, Ordering::Relaxed);
    Ok(adopted)
}

/// Whether the adoption's commit fits one transaction of the metadata store: a compare and a
/// write per stream and per object, at most one object per part and per round written plus one
/// per `max_object_bytes`, and the WAL registrations retired.
fn fits_one_commit(
    metadata: &Metadata,
    settings: &EngineSettings,
    adoption: &Adoption,
    kept: &BTreeMap<u64, Kept>,
    registrations: usize,
) -> bool {
    let Some(max) = metadata.kv().max_txn_ops() else {
        return true;
    };
    let streams = advanced(kept).count();
    let parts: usize = adoption.rounds.iter().map(Vec::len).sum();
    let bytes: u64 = adoption.rounds.iter().flatten().map(Part::bytes).sum();
    let cuts = bytes / (settings.compaction.max_object_bytes.max(1) as u64);
    let written = parts + adoption.rounds.len() + usize::try_from(cuts).unwrap_or(usize::MAX);
    let objects = adoption.objects.len().saturating_add(written);
    3 * streams + 2 * objects + 2 * registrations + 8 <= max
}
