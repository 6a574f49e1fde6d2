//! Appends per second on one tablet with 1, 8 and 64 concurrent writers, against the bare stream's
//! append rate measured in the same run on the same store (memory, local files), as a ratio.
//!
//! Each writer appends one 10-row batch per request and waits for it to be durable before the next;
//! tablet writers are idempotent (their own writer id, sequences 0, 1, 2, ...). The stream baseline
//! appends the same bytes with `Stream::append` and waits for `durable()`. Both sides build each
//! request the same way (a fresh buffer from a template, its CRC rewritten), so the ratio is the
//! cost of the tablet's own work: checks, writer windows, stamping.
//!
//! Run: `cargo bench -p mink-tablet --bench append_rate` (optional arguments: seconds per
//! measurement, and `memory` or `local` to measure one store only).

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use mink_codec::{BatchMeta, encode_batch};
use mink_metadata::{MemoryKv, Metadata, MetadataOptions};
use mink_s3stream::engine::Engine;
use mink_s3stream::storage::{ObjectStorage, ObjectStoreBackend};
use mink_tablet::{StaticSchemas, Tablet, TabletId};

const ROWS: i64 = 10;
/// Alternating rounds per side and measurement.
const ROUNDS: usize = 4;

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]))
}

fn batch(writer: i64, sequence: i32) -> Bytes {
    let ids: Vec<i64> = (0..ROWS).collect();
    let names: Vec<String> = ids.iter().map(|i| format!("row-{i:08}")).collect();
    let rows = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(StringArray::from(names)),
        ],
    )
    .expect("valid rows");
    Bytes::from(
        encode_batch(&rows, None, BatchMeta::new(1).with_writer(writer, sequence))
            .expect("encodable"),
    )
}

/// A fresh request from `template` with the batch sequence set (unless negative) and the CRC
/// rewritten, as a client builds each request.
fn request(template: &[u8], sequence: i32) -> Vec<u8> {
    let mut bytes = template.to_vec();
    if sequence >= 0 {
        bytes[44..48].copy_from_slice(&sequence.to_le_bytes());
    }
    let crc = crc32c::crc32c(&bytes[29..]);
    bytes[25..29].copy_from_slice(&crc.to_le_bytes());
    bytes
}

async fn engine(storage: Arc<dyn ObjectStorage>, node: &str) -> Engine {
    let metadata = Metadata::open(Arc::new(MemoryKv::new()), MetadataOptions::default())
        .await
        .expect("metadata");
    Engine::builder()
        .node(node)
        .wal_storage(storage)
        .metadata(Arc::new(metadata))
        .open()
        .await
        .expect("engine")
}

async fn stream_rate(storage: Arc<dyn ObjectStorage>, writers: usize, secs: f64) -> f64 {
    let engine = engine(storage, "stream").await;
    let id = engine.create_stream().await.expect("create").id;
    let stream = engine.open_stream(id).await.expect("open");
    let template = batch(-1, -1).to_vec();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let stream = stream.clone();
        let template = template.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                // The same per-request work as a tablet writer's: a fresh buffer and its CRC.
                let bytes = request(&template, -1);
                let pending = stream
                    .append(ROWS as u32, Bytes::from(bytes))
                    .await
                    .expect("append");
                pending.durable().await.expect("durable");
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    engine.shutdown().await.expect("shutdown");
    rate
}

async fn tablet_rate(storage: Arc<dyn ObjectStorage>, writers: usize, secs: f64) -> f64 {
    let engine = engine(storage, "tablet").await;
    let tablet = Tablet::builder(TabletId::new("bench", "default", 0))
        .engine(engine.clone())
        .schemas(Arc::new(StaticSchemas::with_schemas([(1, schema())])))
        .create()
        .await
        .expect("tablet");
    // Pre-encode a few sequences per writer and rewrite only the sequence (and CRC) per append,
    // so encoding Arrow is not measured.
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let tablet = tablet.clone();
        let template = batch(writer as i64, 0).to_vec();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            let mut sequence = 0i32;
            while Instant::now() < deadline {
                let bytes = request(&template, sequence);
                let r = tablet.append(Bytes::from(bytes)).await.expect("append");
                assert!(!r.is_duplicate());
                sequence += 1;
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    tablet.close().await.expect("close");
    engine.shutdown().await.expect("shutdown");
    rate
}

/// Measures one store and writer count in this process and prints its table row.
fn measure(store: &str, writers: usize, secs: f64) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut runs = 0;
    let mut make = || -> Arc<dyn ObjectStorage> {
        runs += 1;
        match store {
            "memory" => Arc::new(ObjectStoreBackend::memory()),
            _ => {
                let path = dir.path().join(runs.to_string());
                std::fs::create_dir_all(&path).expect("run dir");
                Arc::new(ObjectStoreBackend::local(&path).expect("local store"))
            }
        }
    };
    // Alternate and repeat so drift on a noisy machine hits both sides alike.
    let (mut s, mut t) = (0.0, 0.0);
    for _ in 0..ROUNDS {
        s += runtime.block_on(stream_rate(make(), writers, secs / ROUNDS as f64));
        t += runtime.block_on(tablet_rate(make(), writers, secs / ROUNDS as f64));
    }
    let (s, t) = (s / ROUNDS as f64, t / ROUNDS as f64);
    let _ = writeln!(
        std::io::stdout(),
        "| {store} | {writers} | {s:.0} | {t:.0} | {:.3} |",
        t / s
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `--one STORE WRITERS SECS`: the child process measuring one row.
    if let [flag, store, writers, secs] = args.as_slice()
        && flag == "--one"
    {
        measure(
            store,
            writers.parse().expect("writers"),
            secs.parse().expect("seconds"),
        );
        return;
    }
    let secs: f64 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(1.5);
    let only = args.iter().find(|a| *a == "memory" || *a == "local");
    let _ = writeln!(
        std::io::stdout(),
        "| store | writers | stream appends/s | tablet appends/s | tablet / stream |\n|---|---|---|---|---|"
    );
    // Each row runs in a fresh process, so the heap and caches one row leaves behind do not
    // weigh on the next.
    let exe = std::env::current_exe().expect("this benchmark's path");
    for store in ["memory", "local"] {
        if only.is_some_and(|o| o != store) {
            continue;
        }
        for writers in [1usize, 8, 64] {
            let status = std::process::Command::new(&exe)
                .args(["--one", store, &writers.to_string(), &secs.to_string()])
                .status()
                .expect("run the measurement");
            assert!(
                status.success(),
                "measuring {store} with {writers} writers failed"
            );
        }
    }
}
