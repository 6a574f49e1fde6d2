//! The stream engine against real backends: local files with redb metadata, and the S3 server
//! (both object-storage backends) with etcd metadata. Appends, compaction, reads from committed
//! objects, and recovery after a crash (the engine dropped without shutdown) lose nothing
//! acknowledged and continue offsets without a gap.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mink_metadata::{EtcdKv, MetaKv, Metadata, MetadataOptions, RedbKv};
use mink_s3stream::engine::{CompactionSettings, Engine, EngineSettings};
use mink_s3stream::storage::{AwsS3Backend, ObjectStorage, ObjectStoreBackend, S3Config};
use mink_s3stream::{ReadBound, Stream};
use mink_tests::{
    S3_ACCESS_KEY_ID, S3_REGION, S3_SECRET_ACCESS_KEY, etcd_endpoints, s3_server, unique_prefix,
};
use tempfile::TempDir;

/// Storage and metadata that outlive engines.
struct Backends {
    storage: Arc<dyn ObjectStorage>,
    kv: Arc<dyn MetaKv>,
    _dir: Option<TempDir>,
}

fn s3_config(prefix: &str) -> S3Config {
    let server = s3_server();
    S3Config::local_server(
        server.endpoint,
        server.bucket,
        S3_REGION,
        S3_ACCESS_KEY_ID,
        S3_SECRET_ACCESS_KEY,
    )
    .with_prefix(format!("stream-engine/{prefix}"))
}

async fn etcd(prefix: &str) -> Arc<dyn MetaKv> {
    Arc::new(
        EtcdKv::connect(&etcd_endpoints(), &format!("stream-engine/{prefix}/"))
            .await
            .expect("connect to etcd"),
    )
}

async fn local_redb(test: &str) -> Backends {
    let _ = test;
    let dir = tempfile::tempdir().expect("temporary directory");
    let storage = ObjectStoreBackend::local(dir.path().join("objects")).expect("local store");
    let kv = RedbKv::open(dir.path().join("meta.redb")).expect("open redb");
    Backends {
        storage: Arc::new(storage),
        kv: Arc::new(kv),
        _dir: Some(dir),
    }
}

async fn object_store_s3_etcd(test: &str) -> Backends {
    let prefix = unique_prefix(test);
    Backends {
        storage: Arc::new(ObjectStoreBackend::s3(&s3_config(&prefix)).expect("S3 backend")),
        kv: etcd(&prefix).await,
        _dir: None,
    }
}

async fn aws_s3_etcd(test: &str) -> Backends {
    let prefix = unique_prefix(test);
    Backends {
        storage: Arc::new(
            AwsS3Backend::new(s3_config(&prefix))
                .await
                .expect("aws-sdk-s3 backend"),
        ),
        kv: etcd(&prefix).await,
        _dir: None,
    }
}

impl Backends {
    async fn engine(&self) -> Engine {
        let metadata = Metadata::open(self.kv.clone(), MetadataOptions::default())
            .await
            .expect("open metadata");
        let mut settings = EngineSettings {
            compaction: CompactionSettings {
                interval: Duration::from_secs(3600),
                trigger_bytes: u64::MAX,
                ..CompactionSettings::default()
            },
            ..EngineSettings::default()
        };
        // Reads of compacted data must come from the objects, not the tail cache.
        settings.cache.tail.capacity_bytes = 0;
        Engine::builder()
            .node("node-a")
            .wal_storage(self.storage.clone())
            .metadata(Arc::new(metadata))
            .settings(settings)
            .open()
            .await
            .expect("open the engine")
    }
}

fn payload(offset: u64) -> Bytes {
    Bytes::from(format!("batch {offset} ").repeat(50).into_bytes())
}

async fn append_n(stream: &Stream, n: u64) {
    for _ in 0..n {
        let next = stream.offsets().next;
        let pending = stream
            .append_at(next, 3, payload(next))
            .await
            .expect("append");
        tokio::time::timeout(Duration::from_secs(30), pending.durable())
            .await
            .expect("durable in time")
            .expect("durable");
    }
}

async fn read_all(stream: &Stream) -> Vec<(u64, Bytes)> {
    let confirm = stream.offsets().confirm;
    let mut cursor = stream.offsets().start;
    let mut out = Vec::new();
    while cursor < confirm {
        let batches = stream
            .fetch(cursor, u64::MAX, 4096, ReadBound::Confirmed)
            .await
            .expect("fetch");
        assert!(!batches.is_empty());
        for batch in batches {
            out.push((batch.base_offset, batch.payload.clone()));
            cursor = batch.end_offset();
        }
    }
    out
}

fn expected(to: u64) -> Vec<(u64, Bytes)> {
    (0..to).step_by(3).map(|o| (o, payload(o))).collect()
}

async fn compacted_data_is_read_from_objects(backends: Backends) {
    let engine = backends.engine().await;
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    append_n(&stream, 10).await;
    engine.compact_now().await.unwrap();
    append_n(&stream, 5).await;
    engine.compact_now().await.unwrap();
    append_n(&stream, 5).await;
    assert_eq!(read_all(&stream).await, expected(60));
    let listed = backends.storage.list("wal/").await.unwrap();
    assert_eq!(listed.len(), 5, "only the uncompacted WAL objects remain");
    engine.shutdown().await.unwrap();
}

async fn a_crash_loses_nothing_acknowledged(backends: Backends) {
    let engine = backends.engine().await;
    let id = engine.create_stream().await.unwrap().id;
    let stream = engine.open_stream(id).await.unwrap();
    append_n(&stream, 6).await;
    engine.compact_now().await.unwrap();
    append_n(&stream, 6).await;
    engine.abort();
    drop((stream, engine));

    let engine = backends.engine().await;
    let stream = engine.open_stream(id).await.unwrap();
    assert_eq!(stream.offsets().next, 36);
    assert_eq!(read_all(&stream).await, expected(36));
    append_n(&stream, 2).await;
    assert_eq!(read_all(&stream).await, expected(42));
    engine.shutdown().await.unwrap();
}

/// Streams appended to between two compaction rounds: more than etcd's 128 operations in one
/// transaction would allow if a round committed them all at once.
const MANY_STREAMS: u64 = 200;

async fn one_round_compacts_more_streams_than_one_transaction_holds(backends: Backends) {
    let engine = backends.engine().await;
    let mut streams = Vec::new();
    for _ in 0..MANY_STREAMS {
        let id = engine.create_stream().await.unwrap().id;
        streams.push(engine.open_stream(id).await.unwrap());
    }
    let mut pending = Vec::new();
    for stream in &streams {
        pending.push(stream.append_at(0, 3, payload(0)).await.expect("append"));
    }
    for p in pending {
        tokio::time::timeout(Duration::from_secs(60), p.durable())
            .await
            .expect("durable in time")
            .expect("durable");
    }
    engine
        .compact_now()
        .await
        .expect("one round commits every stream");
    for stream in &streams {
        assert_eq!(read_all(stream).await, expected(3));
    }
    assert!(
        backends.storage.list("wal/").await.unwrap().is_empty(),
        "every WAL object was compacted"
    );
    engine.shutdown().await.unwrap();
}

macro_rules! suite {
    ($($backend:ident),*) => {$(
        mod $backend {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn compacted_data_is_read_from_objects() {
                super::compacted_data_is_read_from_objects(
                    super::$backend("compacted").await,
                )
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn one_round_compacts_more_streams_than_one_transaction_holds() {
                super::one_round_compacts_more_streams_than_one_transaction_holds(
                    super::$backend("many").await,
                )
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_crash_loses_nothing_acknowledged() {
                super::a_crash_loses_nothing_acknowledged(super::$backend("crash").await).await;
            }
        }
    )*};
}

suite!(local_redb, object_store_s3_etcd, aws_s3_etcd);
