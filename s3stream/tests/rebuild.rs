//! Rebuild from objects (docs/metadata-recovery.md, "Rebuild"): after the metadata is lost and an
//! older snapshot restored, a rebuild from a listing of the store brings back every batch
//! appended after the snapshot, from committed objects and from WAL objects alike, recreates
//! streams created after it from their manifests, and reports what it cannot place.

use std::sync::Arc;

use bytes::Bytes;
use mink_metadata::snapshot::MetaSnapshot;
use mink_metadata::{MemoryKv, MetaKv, Metadata, MetadataOptions};
use mink_s3stream::rebuild::{RebuildSettings, rebuild};
use mink_s3stream::storage::ObjectStoreBackend;
use mink_s3stream::{Engine, ObjectStorage};

mod common;

use common::{append_n, expected, manual, read_all};

async fn metadata(kv: &Arc<dyn MetaKv>) -> Arc<Metadata> {
    Arc::new(
        Metadata::open(kv.clone(), MetadataOptions::default())
            .await
            .unwrap(),
    )
}

async fn engine(kv: &Arc<dyn MetaKv>, storage: &Arc<dyn ObjectStorage>) -> Engine {
    Engine::builder()
        .node("n1")
        .wal_storage(storage.clone())
        .metadata(metadata(kv).await)
        .settings(manual())
        .open()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_after_a_restore_places_everything_appended_after_the_snapshot() {
    let storage: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let lost: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    let first = engine(&lost, &storage).await;
    let a = first.create_stream().await.unwrap().id;
    let b = first.create_stream().await.unwrap().id;
    let sa = first.open_stream(a).await.unwrap();
    let sb = first.open_stream(b).await.unwrap();
    append_n(&sa, 10).await;
    first.compact_now().await.unwrap();
    let snapshot = MetaSnapshot::take(lost.as_ref(), 1).await.unwrap();
    // After the snapshot: compacted into committed objects, then left in the WAL; a stream
    // created after it.
    append_n(&sa, 10).await;
    first.compact_now().await.unwrap();
    append_n(&sa, 5).await;
    append_n(&sb, 7).await;
    let c = first.create_stream().await.unwrap().id;
    let sc = first.open_stream(c).await.unwrap();
    append_n(&sc, 3).await;
    let d = first
        .create_stream_labelled(Bytes::from_static(b"bucket d"))
        .await
        .unwrap()
        .id;
    let sd = first.open_stream(d).await.unwrap();
    append_n(&sd, 4).await;
    // Crash: no shutdown, no close; then the metadata is lost.
    first.abort();
    drop((sa, sb, sc, sd, first, lost));
    storage
        .put(
            "data/00000000deadbeef",
            Bytes::from_static(b"not an object"),
        )
        .await
        .unwrap();

    let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    snapshot.restore(kv.as_ref(), false).await.unwrap();
    let meta = metadata(&kv).await;
    let dry = rebuild(
        &meta,
        &storage,
        &storage,
        &RebuildSettings {
            dry_run: true,
            ..RebuildSettings::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(dry.offsets_recovered, 30 + 14 + 8, "{dry:?}");
    assert_eq!(
        meta.get_stream(a).await.unwrap().unwrap().end_offset,
        20,
        "a dry run writes nothing"
    );
    let report = rebuild(&meta, &storage, &storage, &RebuildSettings::default())
        .await
        .unwrap();
    assert_eq!(report.offsets_recovered, 30 + 14 + 8, "{report:?}");
    assert!(report.holes.is_empty(), "{report:?}");
    assert_eq!(
        report
            .corrupt
            .iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>(),
        ["data/00000000deadbeef"]
    );
    assert_eq!(
        report
            .unknown_streams
            .iter()
            .map(|s| s.stream_id)
            .collect::<Vec<_>>(),
        [c],
        "a stream created after the snapshot without a manifest cannot be placed"
    );
    assert_eq!(
        report
            .recreated_streams
            .iter()
            .map(|s| (s.stream_id, s.label.as_str()))
            .collect::<Vec<_>>(),
        [(d, "bucket d")],
        "one with a manifest is recreated"
    );
    assert!(!report.complete());
    assert!(report.wal_reservations_removed > 0);
    drop(meta);

    let second = engine(&kv, &storage).await;
    let sa = second.open_stream(a).await.unwrap();
    let sb = second.open_stream(b).await.unwrap();
    assert_eq!((sa.offsets().next, sb.offsets().next), (50, 14));
    assert_eq!(read_all(&sa, 0).await, expected(0, 50));
    assert_eq!(read_all(&sb, 0).await, expected(0, 14));
    let sd = second.open_stream(d).await.unwrap();
    assert_eq!(read_all(&sd, 0).await, expected(0, 8));
    append_n(&sa, 1).await;
    second.compact_now().await.unwrap();
    assert_eq!(read_all(&sa, 0).await, expected(0, 52));
    second.shutdown().await.unwrap();

    // A second rebuild finds nothing more to place.
    let meta = metadata(&kv).await;
    let again = rebuild(&meta, &storage, &storage, &RebuildSettings::default())
        .await
        .unwrap();
    assert_eq!(
        (
            again.objects_placed,
            again.offsets_recovered,
            again.streams_moved
        ),
        (0, 0, 0),
        "{again:?}"
    );
}

/// With WAL objects on a store of their own, the WAL objects a rebuild places are copied to the
/// data store, where committed objects are read from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placed_wal_objects_move_to_a_separate_data_store() {
    let wal: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let data: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let open = |kv: Arc<dyn MetaKv>| {
        let (wal, data) = (wal.clone(), data.clone());
        async move {
            Engine::builder()
                .node("n1")
                .wal_storage(wal)
                .data_storage(data)
                .metadata(metadata(&kv).await)
                .settings(manual())
                .open()
                .await
                .unwrap()
        }
    };
    let lost: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    let first = open(lost.clone()).await;
    let a = first.create_stream().await.unwrap().id;
    let snapshot = MetaSnapshot::take(lost.as_ref(), 1).await.unwrap();
    let sa = first.open_stream(a).await.unwrap();
    append_n(&sa, 6).await;
    first.abort();
    drop((sa, first, lost));

    let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    snapshot.restore(kv.as_ref(), false).await.unwrap();
    let meta = metadata(&kv).await;
    let report = rebuild(&meta, &wal, &data, &RebuildSettings::default())
        .await
        .unwrap();
    drop(meta);
    assert!(report.complete(), "{report:?}");
    assert_eq!(report.offsets_recovered, 12);
    assert!(report.wal_objects_copied > 0, "{report:?}");
    let second = open(kv).await;
    let sa = second.open_stream(a).await.unwrap();
    assert_eq!(read_all(&sa, 0).await, expected(0, 12));
}
