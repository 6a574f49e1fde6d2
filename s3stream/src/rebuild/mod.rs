//! Rebuild from objects: after a metadata snapshot was restored (or on any store whose metadata
//! lost track of objects), list the object store, read the index of every object the metadata
//! does not know, and put back the object records and stream ends that place them
//! (docs/metadata-recovery.md, "Rebuild"). Run while no node runs on the stores.
//!
//! - `scan.rs`: the listing, the reads of indexes and of stream manifests;
//! - `place.rs`: the rules that choose, per stream, which found blocks extend its chain.
//!
//! Records whose objects are gone are removed; every WAL reservation is removed, since what the
//! WALs hold is placed here (a WAL object placed becomes a stream-set object, as compaction
//! adopts one). A stream the metadata has no record of but whose manifest is on the store
//! (created after the snapshot) is recreated and placed; the caller maps its manifest's label
//! back to what the stream is for. What could not be placed is reported: streams with neither
//! record nor manifest, offsets no object holds, objects or manifests that did not decode,
//! objects that hold nothing placed (superseded, fenced, or of unknown streams).

mod place;
mod scan;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use mink_metadata::{Metadata, RebuildChanges, StreamRecord};
use serde::Serialize;

pub use place::Hole;
pub use scan::read_manifests;

use crate::error::Result;
use crate::storage::ObjectStorage;

/// Settings of a rebuild.
#[derive(Debug, Clone)]
pub struct RebuildSettings {
    /// Key prefix of WAL objects (the engine's `wal_prefix`).
    pub wal_prefix: String,
    /// Key prefix of committed objects (the engine's `data_prefix`).
    pub data_prefix: String,
    /// Key prefix of stream manifests on the data store (the engine's `manifest_prefix`).
    pub manifest_prefix: String,
    /// Objects read at once. Default 16.
    pub concurrency: usize,
    /// Work out and report the changes without writing them.
    pub dry_run: bool,
    /// After a complete rebuild (see [`RebuildReport::complete`]), delete the objects that hold
    /// nothing placed (superseded, fenced; nothing refers to them). Never after an incomplete
    /// one, whose unplaced objects may hold what an operator still wants.
    pub delete_unplaced: bool,
}

impl Default for RebuildSettings {
    fn default() -> Self {
        RebuildSettings {
            wal_prefix: "wal/".to_owned(),
            data_prefix: "data/".to_owned(),
            manifest_prefix: "manifests/streams/".to_owned(),
            concurrency: 16,
            dry_run: false,
            delete_unplaced: false,
        }
    }
}

/// A stream the metadata had no record of, recreated from its manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecreatedStream {
    /// The stream id.
    pub stream_id: u64,
    /// Its manifest's label (lossy UTF-8), which says what the stream is for.
    pub label: String,
}

/// A stream the metadata has no record of, found in objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UnknownStream {
    /// The stream id.
    pub stream_id: u64,
    /// Blocks found.
    pub blocks: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// What a rebuild found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RebuildReport {
    /// Objects listed under the data and WAL prefixes.
    pub objects_listed: usize,
    /// Other keys under those prefixes (not named as Mink names objects), left alone.
    pub other_keys: usize,
    /// Object records the metadata held whose objects are present.
    pub records_present: usize,
    /// Object records whose objects are gone: removed.
    pub records_gone: usize,
    /// Objects the metadata did not know, whose index was read.
    pub objects_read: usize,
    /// Of those, objects given a record.
    pub objects_placed: usize,
    /// Stream ranges in the new records.
    pub ranges_placed: usize,
    /// Streams whose end, start or epoch moved.
    pub streams_moved: usize,
    /// Offsets appended after the snapshot and placed: the sum of the streams' end moves.
    pub offsets_recovered: u64,
    /// WAL reservations removed.
    pub wal_reservations_removed: usize,
    /// Placed WAL objects copied from a WAL store of their own to the data store.
    pub wal_objects_copied: usize,
    /// Objects read that hold nothing placed (left on the store unless deleted).
    pub objects_unplaced: usize,
    /// Their bytes.
    pub bytes_unplaced: u64,
    /// Of those, objects deleted (`delete_unplaced` after a complete rebuild).
    pub objects_deleted: usize,
    /// Streams found in objects with no stream record but with a manifest: recreated (closed,
    /// at the highest epoch seen) and placed like the others.
    pub recreated_streams: Vec<RecreatedStream>,
    /// Streams found in objects with neither a stream record nor a manifest: their data cannot
    /// be placed.
    pub unknown_streams: Vec<UnknownStream>,
    /// Offsets no object holds.
    pub holes: Vec<Hole>,
    /// Streams whose log start moved up to the lowest offset found: `(stream, from, to)`.
    pub starts_moved: Vec<(u64, u64, u64)>,
    /// Objects that did not decode: key and why.
    pub corrupt: Vec<(String, String)>,
    /// Whether the changes were only worked out, not written.
    pub dry_run: bool,
    /// Every stream manifest read, for the caller to map labels back to what streams are for.
    #[serde(skip)]
    pub manifests: Vec<crate::format::manifest::StreamManifest>,
}

impl RebuildReport {
    /// Whether everything found was placed: no unknown streams, holes or corrupt objects.
    pub fn complete(&self) -> bool {
        self.unknown_streams.is_empty() && self.holes.is_empty() && self.corrupt.is_empty()
    }
}

/// Rebuilds `metadata`'s object records and stream ends from the objects on `wal_store` and
/// `data_store` (the same store twice when there is one).
pub async fn rebuild(
    metadata: &Metadata,
    wal_store: &Arc<dyn ObjectStorage>,
    data_store: &Arc<dyn ObjectStorage>,
    settings: &RebuildSettings,
) -> Result<RebuildReport> {
    let mut report = RebuildReport {
        dry_run: settings.dry_run,
        ..RebuildReport::default()
    };
    let records = metadata.list_objects().await?;
    let mut streams: BTreeMap<u64, StreamRecord> = metadata
        .list_streams()
        .await?
        .into_iter()
        .map(|s| (s.id, s))
        .collect();
    let (manifests, bad_manifests) =
        read_manifests(data_store, &settings.manifest_prefix, settings.concurrency).await?;
    report.corrupt.extend(bad_manifests);
    let listing = scan::list(
        wal_store,
        data_store,
        &settings.wal_prefix,
        &settings.data_prefix,
    )
    .await?;
    report.objects_listed = listing.objects.len();
    report.other_keys = listing.other_keys;
    let present = scan::keys(&listing);
    let (known, gone): (Vec<_>, Vec<_>) = records
        .into_iter()
        .partition(|r| present.contains(r.key.as_str()));
    report.records_present = known.len();
    report.records_gone = gone.len();
    let known_keys: HashSet<&str> = known.iter().map(|r| r.key.as_str()).collect();
    let unknown: Vec<_> = listing
        .objects
        .iter()
        .filter(|l| !known_keys.contains(l.meta.key.as_str()))
        .cloned()
        .collect();
    let mut found = Vec::new();
    for read in scan::read_all(wal_store, data_store, unknown, settings.concurrency).await? {
        match read {
            scan::Read::Found(object) => found.push(object),
            scan::Read::Corrupt(key, reason) => report.corrupt.push((key, reason)),
            scan::Read::Vanished => {}
        }
    }
    report.objects_read = found.len();
    tracing::info!(
        listed = report.objects_listed,
        known = report.records_present,
        gone = report.records_gone,
        read = found.len(),
        "rebuild: placing the objects the metadata does not know"
    );
    // Streams in objects the metadata has no record of, but a manifest names: recreated empty
    // and closed, then placed like every other.
    let in_objects: HashSet<u64> = found
        .iter()
        .flat_map(|f| f.blocks.iter().map(|(b, _)| b.stream_id))
        .collect();
    for manifest in &manifests {
        let id = manifest.stream_id;
        if in_objects.contains(&id) && !streams.contains_key(&id) {
            streams.insert(id, StreamRecord::new(id));
            report.recreated_streams.push(RecreatedStream {
                stream_id: id,
                label: String::from_utf8_lossy(&manifest.label).into_owned(),
            });
        }
    }
    report.manifests = manifests;
    let placement = place::place(&streams, &known, &found);
    let mut ids = Vec::with_capacity(placement.ranges.len());
    if !settings.dry_run {
        for _ in 0..placement.ranges.len() {
            ids.push(metadata.allocate_object_id().await?);
        }
    } else {
        ids.extend(0..placement.ranges.len() as u64);
    }
    let put_objects = place::records(&found, &placement, &mut ids.into_iter());
    report.objects_placed = put_objects.len();
    report.ranges_placed = put_objects.iter().map(|o| o.ranges.len()).sum();
    report.streams_moved = placement.streams.len();
    report.offsets_recovered = placement
        .streams
        .iter()
        .map(|s| {
            s.end_offset
                .saturating_sub(streams.get(&s.id).map_or(0, |old| old.end_offset))
        })
        .sum();
    let unplaced: Vec<&place::FoundObject> = place::unplaced(&found, &placement).collect();
    report.objects_unplaced = unplaced.len();
    report.bytes_unplaced = unplaced.iter().map(|f| f.size).sum();
    let (wal_garbage, data_garbage): (Vec<_>, Vec<_>) = unplaced.iter().partition(|f| f.wal);
    let keys = |objects: Vec<&place::FoundObject>| -> Vec<String> {
        objects.iter().map(|f| f.key.clone()).collect()
    };
    let (wal_garbage, data_garbage) = (keys(wal_garbage), keys(data_garbage));
    report.unknown_streams = placement
        .unknown_streams
        .iter()
        .map(|(stream_id, (blocks, bytes))| UnknownStream {
            stream_id: *stream_id,
            blocks: *blocks,
            bytes: *bytes,
        })
        .collect();
    report.holes = placement.holes.clone();
    report.starts_moved = placement.starts_moved.clone();
    if settings.dry_run {
        return Ok(report);
    }
    let mut put_objects = put_objects;
    if !std::ptr::addr_eq(Arc::as_ptr(wal_store), Arc::as_ptr(data_store)) {
        // Committed objects are read from the data store: a placed WAL object on a WAL store of
        // its own is copied there first (as compaction rewrites instead of adopting then).
        report.wal_objects_copied = copy_wal_objects(
            &found,
            &placement,
            &mut put_objects,
            wal_store,
            data_store,
            settings,
        )
        .await?;
    }
    let changes = RebuildChanges {
        put_objects,
        remove_objects: gone.iter().map(|r| r.id).collect(),
        streams: placement.streams,
        clear_wal_registry: true,
    };
    let written = metadata.apply_rebuild(&changes).await?;
    report.wal_reservations_removed = written.wal_reservations_removed;
    if settings.delete_unplaced && report.complete() {
        let storage = |e| crate::error::StreamError::Storage(Arc::new(e));
        wal_store.delete_many(&wal_garbage).await.map_err(storage)?;
        data_store
            .delete_many(&data_garbage)
            .await
            .map_err(storage)?;
        report.objects_deleted = wal_garbage.len() + data_garbage.len();
    }
    Ok(report)
}

/// Copies each placed WAL object to `{data_prefix}{record id}` on the data store and points its
/// record there; returns how many.
async fn copy_wal_objects(
    found: &[place::FoundObject],
    placement: &place::Placement,
    records: &mut [mink_metadata::ObjectRecord],
    wal_store: &Arc<dyn ObjectStorage>,
    data_store: &Arc<dyn ObjectStorage>,
    settings: &RebuildSettings,
) -> Result<usize> {
    let storage = |e| crate::error::StreamError::Storage(Arc::new(e));
    let mut copied = 0;
    // `records` are in the order of `placement.ranges` (see `place::records`).
    for (record, object) in records.iter_mut().zip(placement.ranges.keys()) {
        if !found[*object].wal {
            continue;
        }
        let bytes = wal_store.get(&record.key).await.map_err(storage)?;
        let key = format!("{}{:016x}", settings.data_prefix, record.id);
        data_store.put(&key, bytes).await.map_err(storage)?;
        record.key = key;
        copied += 1;
    }
    Ok(copied)
}
