//! Commits per second and object-index lookups per second on each metadata backend.
//!
//! `cargo bench -p mink-metadata --bench metadata`. Memory and redb always run; etcd runs when
//! `MINK_TEST_ETCD_ENDPOINTS` is set (`cargo xtask bench` starts a server). Each commit adds one
//! object and advances one stream, fenced by its epoch, issued one after another (latency-bound);
//! a second figure runs 8 streams committing concurrently. Lookups ask the index of a node for the
//! objects covering a random offset of a stream with `OBJECTS` objects.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mink_metadata::{
    CommitRequest, EtcdKv, MemoryKv, MetaKv, Metadata, MetadataOptions, ObjectKind, ObjectRecord,
    RedbKv, StreamRange,
};

const OBJECTS: u64 = 20_000;
const LOOKUPS: u64 = 1_000_000;
const COMMIT_TIME: Duration = Duration::from_secs(3);

async fn commit_loop(meta: &Metadata, stream: u64, epoch: u64, deadline: Instant) -> u64 {
    let mut end = 0;
    let mut n = 0;
    while Instant::now() < deadline {
        let id = meta.allocate_object_id().await.expect("object id");
        let range = StreamRange {
            stream_id: stream,
            start_offset: end,
            end_offset: end + 100,
            position: 0,
            len: 4096,
        };
        meta.commit(CommitRequest {
            stream_epochs: vec![(stream, epoch)],
            add_objects: vec![ObjectRecord {
                id,
                kind: ObjectKind::StreamSet,
                key: format!("o/{id}"),
                size: 4096,
                ranges: vec![range],
            }],
            advance: vec![(stream, end + 100)],
            ..Default::default()
        })
        .await
        .expect("commit");
        end += 100;
        n += 1;
    }
    n
}

async fn bench(name: &str, kv: Arc<dyn MetaKv>) -> String {
    let meta = Arc::new(
        Metadata::open(kv, MetadataOptions::default())
            .await
            .expect("open"),
    );
    // Sequential commits.
    let s = meta.create_stream().await.unwrap().id;
    let e = meta.open_stream(s, "bench").await.unwrap().epoch;
    let start = Instant::now();
    let n = commit_loop(&meta, s, e, start + COMMIT_TIME).await;
    let sequential = n as f64 / start.elapsed().as_secs_f64();
    // 8 streams committing concurrently.
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let meta = Arc::clone(&meta);
        let s = meta.create_stream().await.unwrap().id;
        let e = meta.open_stream(s, "bench").await.unwrap().epoch;
        tasks.push(tokio::spawn(async move {
            commit_loop(&meta, s, e, start + COMMIT_TIME).await
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let concurrent = total as f64 / start.elapsed().as_secs_f64();
    // Index lookups over a stream with OBJECTS objects (inserted directly into the index).
    let index = meta.index();
    let big = u64::MAX / 2;
    for i in 0..OBJECTS {
        let range = StreamRange {
            stream_id: big,
            start_offset: i * 100,
            end_offset: i * 100 + 100,
            position: 0,
            len: 1,
        };
        index.insert(ObjectRecord {
            id: big + i,
            kind: ObjectKind::Stream,
            key: String::new(),
            size: 1,
            ranges: vec![range],
        });
    }
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let start = Instant::now();
    let mut found = 0usize;
    for _ in 0..LOOKUPS {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        found += index.covering(big, (x >> 11) % (OBJECTS * 100), 4).len();
    }
    let lookups = LOOKUPS as f64 / start.elapsed().as_secs_f64();
    assert!(found > 0);
    format!(
        "{name:>6}: {sequential:>9.0} commits/s sequential, {concurrent:>9.0} commits/s with 8 streams, {lookups:>11.0} index lookups/s ({OBJECTS} objects, 4 ranges per answer)"
    )
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut out = std::io::stdout();
    runtime.block_on(async {
        let line = bench("memory", Arc::new(MemoryKv::new())).await;
        writeln!(out, "{line}").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let redb = RedbKv::open(dir.path().join("bench.redb")).unwrap();
        let line = bench("redb", Arc::new(redb)).await;
        writeln!(out, "{line}").unwrap();
        match std::env::var("MINK_TEST_ETCD_ENDPOINTS") {
            Ok(endpoints) => {
                let endpoints: Vec<String> = endpoints.split(',').map(str::to_owned).collect();
                let prefix = format!("bench-{}/", std::process::id());
                let kv = EtcdKv::connect(&endpoints, &prefix)
                    .await
                    .expect("connect etcd");
                let line = bench("etcd", Arc::new(kv)).await;
                writeln!(out, "{line}").unwrap();
            }
            Err(_) => {
                writeln!(out, "  etcd: skipped, MINK_TEST_ETCD_ENDPOINTS is not set").unwrap()
            }
        }
    });
}
