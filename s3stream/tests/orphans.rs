//! The orphan sweep of the second pass: committed objects no record names, older than the
//! grace, are deleted; named objects, young orphans and keys not named as objects stay.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use mink_metadata::{MemoryKv, MetaKv, Metadata, MetadataOptions};
use mink_s3stream::storage::ObjectStoreBackend;
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
