//! The orphan sweep of the second pass: committed objects no record names, older than the
//! grace, are deleted; named objects, young orphans and keys not named as objects stay.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use mink_metadata::{MemoryKv, MetaKv, Metadata, MetadataOptions};
use mink_s3stream::rebuild::read_manifests;
use mink_s3stream::storage::{CountingStorage, FaultyStorage, ObjectStoreBackend};
use mink_s3stream::{Engine, EngineSettings, ObjectStorage};

mod common;

use common::{append_n, expected, manual, read_all};

async fn engine(storage: &Arc<dyn ObjectStorage>, settings: EngineSettings) -> Engine {
    let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    let metadata = Metadata::open(kv, MetadataOptions::default())
        .await
        .unwrap();
    Engine::builder()
        .node("n1")
        .wal_storage(storage.clone())
        .metadata(Arc::new(metadata))
        .settings(settings)
        .open()
        .await
        .unwrap()
}

async fn keys(storage: &Arc<dyn ObjectStorage>, prefix: &str) -> Vec<String> {
    let mut keys: Vec<String> = storage
        .list(prefix)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_no_record_names_are_swept_after_the_grace() {
    let storage: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let mut settings = manual();
    settings.compaction.orphan_grace = Duration::ZERO;
    settings.compaction.orphan_sweep_interval = Duration::from_millis(1);
    let engine = engine(&storage, settings).await;
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    append_n(&stream, 5).await;
    engine.compact_now().await.unwrap();
    let committed = keys(&storage, "data/").await;
    assert!(!committed.is_empty());
    for key in ["data/00000000deadbeef", "data/notes.txt"] {
        storage.put(key, Bytes::from_static(b"x")).await.unwrap();
    }
    engine.maintain_now().await.unwrap();
    let mut left = committed.clone();
    left.push("data/notes.txt".to_owned());
    left.sort();
    assert_eq!(keys(&storage, "data/").await, left);
    assert_eq!(engine.metrics().orphans_deleted.load(Ordering::Relaxed), 1);
    assert_eq!(read_all(&stream, 0).await, expected(0, 10));
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_young_orphan_is_kept() {
    let storage: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let mut settings = manual();
    settings.compaction.orphan_sweep_interval = Duration::from_millis(1);
    let engine = engine(&storage, settings).await;
    storage
        .put("data/00000000deadbeef", Bytes::from_static(b"x"))
        .await
        .unwrap();
    engine.maintain_now().await.unwrap();
    assert_eq!(
        keys(&storage, "data/").await,
        ["data/00000000deadbeef"],
        "younger than the default hour of grace"
    );
    assert_eq!(engine.metrics().orphans_deleted.load(Ordering::Relaxed), 0);
    engine.shutdown().await.unwrap();
}

/// Destroys the streams `ids`, then runs the second pass (and so the sweep).
async fn destroy_and_sweep(engine: &Engine, ids: &[u64]) {
    for id in ids {
        let stream = engine.open_stream(*id).await.unwrap();
        stream.destroy().await.unwrap();
    }
    engine.maintain_now().await.unwrap();
}

/// Streams created together have their manifests written together: while the first PUTs are
/// out, the rest wait and go in a batch. A rebuild reads every one of them; once every stream
/// a batch's range spans is destroyed, the sweep deletes the batch, and only then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_of_streams_created_together_share_puts_and_go_with_their_streams() {
    let faulty = Arc::new(FaultyStorage::new(
        Arc::new(ObjectStoreBackend::memory()),
        1,
    ));
    let counting = Arc::new(CountingStorage::new(faulty.clone()));
    let storage: Arc<dyn ObjectStorage> = counting.clone();
    let mut settings = manual();
    settings.compaction.orphan_grace = Duration::ZERO;
    settings.compaction.orphan_sweep_interval = Duration::from_millis(1);
    let engine = engine(&storage, settings).await;
    // Two bursts of 200 creations, each while PUTs take 50 ms.
    let mut bursts: Vec<Vec<u64>> = Vec::new();
    for burst in 0..2 {
        faulty.set_put_delay(Duration::from_millis(50));
        let before = counting.counts();
        let created =
            futures::future::join_all((0..200).map(|i| {
                engine.create_stream_labelled(Bytes::from(format!("stream {burst}.{i}")))
            }))
            .await;
        let puts = (counting.counts() - before).puts;
        assert!(puts <= 8, "{puts} PUTs for 200 manifests");
        faulty.set_put_delay(Duration::ZERO);
        bursts.push(created.into_iter().map(|r| r.unwrap().id).collect());
    }
    let (mut read, corrupt) = read_manifests(&storage, "manifests/streams/", 4)
        .await
        .unwrap();
    assert!(corrupt.is_empty(), "{corrupt:?}");
    read.sort_by_key(|m| m.stream_id);
    let mut want: Vec<(u64, Bytes)> = bursts
        .iter()
        .enumerate()
        .flat_map(|(burst, ids)| {
            ids.iter()
                .enumerate()
                .map(move |(i, id)| (*id, Bytes::from(format!("stream {burst}.{i}"))))
        })
        .collect();
    want.sort();
    let got: Vec<(u64, Bytes)> = read.into_iter().map(|m| (m.stream_id, m.label)).collect();
    assert_eq!(got, want);
    let batches = keys(&storage, "manifests/streams/batch-").await;
    assert!(
        batches.len() >= 2,
        "each burst went in a batch: {batches:?}"
    );
    // The first burst destroyed: its batches go, the second's stay whole.
    destroy_and_sweep(&engine, &bursts[0]).await;
    let second = bursts[1].iter().min().unwrap();
    let left = keys(&storage, "manifests/streams/batch-").await;
    assert!(left.len() < batches.len(), "{left:?} of {batches:?}");
    for key in &left {
        let lowest = &key["manifests/streams/batch-".len()..][..16];
        assert!(
            u64::from_str_radix(lowest, 16).unwrap() >= *second,
            "{key} outlived its streams"
        );
    }
    let (read, _) = read_manifests(&storage, "manifests/streams/", 4)
        .await
        .unwrap();
    assert_eq!(
        read.len(),
        200,
        "the second burst's manifests are all still there"
    );
    destroy_and_sweep(&engine, &bursts[1]).await;
    assert_eq!(
        keys(&storage, "manifests/streams/").await,
        Vec::<String>::new()
    );
    engine.shutdown().await.unwrap();
}
