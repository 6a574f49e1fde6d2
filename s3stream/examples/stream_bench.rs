//! End-to-end figures of the stream engine, each beside its raw object-store baseline measured
//! in the same run (these machines are shared and noisy, so only ratios mean much).
//!
//! ```text
//! cargo run --release -p mink-s3stream --features test-util --example stream_bench -- \
//!     [--store local|moto|s3-standard|s3-express] [--quick] [--out FILE]
//! ```
//!
//! - `local`: object_store on a local directory; `moto`: the S3 server named by
//!   `MINK_TEST_S3_ENDPOINT` / `MINK_TEST_S3_BUCKET` (`cargo xtask bench` starts one);
//!   `s3-standard` / `s3-express`: an in-memory store behind the latency model of that S3 class.
//! - Idle append: sequential 1 KiB appends to one stream, each awaited, interleaved with raw PUTs
//!   of a same-sized object: latency p50/p99 of both and WAL PUTs per append.
//! - Group commit: 1000 streams, one appender each keeping 4 appends of 16 KiB in flight, for a
//!   fixed time: throughput, WAL PUTs/s and p99 latency, against the raw sequential PUT
//!   throughput of 8 MiB objects.
//!
//! Prints a Markdown report (and writes it to `--out` when given).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mink_metadata::{MemoryKv, Metadata, MetadataOptions};
use mink_s3stream::engine::{Engine, EngineSettings};
use mink_s3stream::storage::{
    CountingStorage, LatencyProfile, LatencyStorage, ObjectStorage, ObjectStoreBackend, S3Config,
};

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Options {
    store: String,
    quick: bool,
    out: Option<String>,
}

fn options() -> Result<Options, Error> {
    let mut options = Options {
        store: "local".into(),
        quick: false,
        out: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--store" => options.store = args.next().ok_or("--store needs a value")?,
            "--quick" => options.quick = true,
            "--out" => options.out = Some(args.next().ok_or("--out needs a file")?),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(options)
}

fn store(name: &str, dir: &std::path::Path) -> Result<Arc<dyn ObjectStorage>, Error> {
    Ok(match name {
        "local" => Arc::new(ObjectStoreBackend::local(dir)?),
        "moto" => {
            let endpoint = std::env::var("MINK_TEST_S3_ENDPOINT")
                .map_err(|_| "MINK_TEST_S3_ENDPOINT is not set (run through cargo xtask bench)")?;
            let bucket =
                std::env::var("MINK_TEST_S3_BUCKET").unwrap_or_else(|_| "mink-test".into());
            let config = S3Config::local_server(
                endpoint,
                bucket,
                "us-east-1",
                "mink-test",
                "mink-test-secret",
            )
            .with_prefix(format!("bench-{}", std::process::id()));
            Arc::new(ObjectStoreBackend::s3(&config)?)
        }
        "s3-standard" => Arc::new(LatencyStorage::new(
            Arc::new(ObjectStoreBackend::memory()),
            LatencyProfile::s3_standard(),
            42,
        )),
        "s3-express" => Arc::new(LatencyStorage::new(
            Arc::new(ObjectStoreBackend::memory()),
            LatencyProfile::s3_express_one_zone(),
            42,
        )),
        other => return Err(format!("unknown store {other}").into()),
    })
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort_unstable();
    let at = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples.get(at).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn engine(storage: Arc<dyn ObjectStorage>) -> Result<Engine, Error> {
    let metadata =
        Arc::new(Metadata::open(Arc::new(MemoryKv::new()), MetadataOptions::default()).await?);
    Ok(Engine::builder()
        .node("bench")
        .wal_storage(storage)
        .metadata(metadata)
        .settings(EngineSettings::default())
        .open()
        .await?)
}

#[tokio::main]
#[expect(clippy::print_stdout, reason = "the report is the program's output")]
async fn main() -> Result<(), Error> {
    let options = options()?;
    let dir = tempfile::tempdir()?;
    let raw = store(&options.store, dir.path())?;
    let counting = Arc::new(CountingStorage::new(raw.clone()));
    let engine = engine(counting.clone()).await?;
    let mut report = format!(
        "## Stream engine on `{}`{}\n\n",
        options.store,
        if options.quick { " (quick)" } else { "" }
    );

    // 1. Idle appends against raw PUTs of the same size, interleaved.
    let samples = if options.quick { 100 } else { 500 };
    let id = engine.create_stream().await?.id;
    let stream = engine.open_stream(id).await?;
    let payload = Bytes::from(vec![0x42u8; 1024]);
    // A WAL object holding one 1 KiB append: 16-byte header, 36-byte record header, payload.
    let raw_object = Bytes::from(vec![0x42u8; 16 + 36 + 1024]);
    raw.put("bench/warmup", raw_object.clone()).await?;
    stream.append(1, payload.clone()).await?.durable().await?;
    let (mut raw_lat, mut append_lat) = (Vec::new(), Vec::new());
    let puts_before = engine.wal_metrics().puts.load(Ordering::Relaxed);
    for i in 0..samples {
        let started = Instant::now();
        raw.put(&format!("bench/raw-{i}"), raw_object.clone())
            .await?;
        raw_lat.push(started.elapsed());
        let started = Instant::now();
        stream.append(1, payload.clone()).await?.durable().await?;
        append_lat.push(started.elapsed());
    }
    let wal_puts = engine.wal_metrics().puts.load(Ordering::Relaxed) - puts_before;
    let (raw50, raw99) = (
        percentile(&mut raw_lat, 0.5),
        percentile(&mut raw_lat, 0.99),
    );
    let (app50, app99) = (
        percentile(&mut append_lat, 0.5),
        percentile(&mut append_lat, 0.99),
    );
    report += &format!(
        "### Idle append (1 KiB, {samples} samples)\n\n\
         | | p50 ms | p99 ms |\n|---|---|---|\n\
         | raw PUT ({} B) | {:.3} | {:.3} |\n| append until durable | {:.3} | {:.3} |\n\
         | ratio | **{:.2}x** | {:.2}x |\n\n\
         WAL PUTs per idle append: **{:.3}** (goal: 1)\n\n",
        raw_object.len(),
        ms(raw50),
        ms(raw99),
        ms(app50),
        ms(app99),
        ms(app50) / ms(raw50),
        ms(app99) / ms(raw99),
        wal_puts as f64 / samples as f64,
    );

    // 2. Raw sequential PUT throughput of WAL-sized objects.
    let big = Bytes::from(vec![0x17u8; 8 << 20]);
    let rounds = if options.quick { 4 } else { 12 };
    let started = Instant::now();
    for i in 0..rounds {
        raw.put(&format!("bench/big-{i}"), big.clone()).await?;
    }
    let raw_mbps = (rounds * big.len()) as f64 / started.elapsed().as_secs_f64() / 1e6;

    // 3. Group commit: 1000 streams, each with a pipelining appender that keeps `DEPTH` appends
    //    in flight, as a producer with several requests in flight does.
    const DEPTH: usize = 4;
    const BATCH: usize = 16 << 10;
    let streams = 1000;
    let duration = Duration::from_secs(if options.quick { 4 } else { 15 });
    let batch = Bytes::from(vec![0x33u8; BATCH]);
    let mut handles = Vec::with_capacity(streams);
    for _ in 0..streams {
        let id = engine.create_stream().await?.id;
        handles.push(engine.open_stream(id).await?);
    }
    let acked = Arc::new(AtomicU64::new(0));
    let puts_before = engine.wal_metrics().puts.load(Ordering::Relaxed);
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::with_capacity(streams);
    for stream in handles {
        let batch = batch.clone();
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut in_flight = std::collections::VecDeque::with_capacity(DEPTH);
            loop {
                let more = Instant::now() < deadline;
                if more && in_flight.len() < DEPTH {
                    let sent = Instant::now();
                    in_flight.push_back((sent, stream.append(1, batch.clone()).await?));
                    continue;
                }
                let Some((sent, pending)) = in_flight.pop_front() else {
                    break;
                };
                pending.durable().await?;
                latencies.push(sent.elapsed());
                acked.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, mink_s3stream::error::StreamError>(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed();
    let wal_puts = engine.wal_metrics().puts.load(Ordering::Relaxed) - puts_before;
    let bytes = acked.load(Ordering::Relaxed) as f64 * batch.len() as f64;
    let mbps = bytes / elapsed.as_secs_f64() / 1e6;
    let p99 = percentile(&mut latencies, 0.99);
    let p50 = percentile(&mut latencies, 0.5);
    report += &format!(
        "### Group commit ({streams} streams, one appender each with {DEPTH} appends in flight, \
         {} KiB batches, {:.1} s)\n\n\
         | | figure |\n|---|---|\n\
         | raw sequential PUT throughput (8 MiB objects) | {raw_mbps:.1} MB/s |\n\
         | appended and durable | {mbps:.1} MB/s, {:.0} batches/s |\n\
         | ratio to raw | **{:.2}x** (goal: >= 0.8x) |\n\
         | WAL PUTs/s | {:.0} |\n| append latency p50 / p99 | {:.1} / {:.1} ms |\n\n",
        BATCH >> 10,
        elapsed.as_secs_f64(),
        acked.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64(),
        mbps / raw_mbps,
        wal_puts as f64 / elapsed.as_secs_f64(),
        ms(p50),
        ms(p99),
    );
    engine.shutdown().await?;
    print!("{report}");
    if let Some(out) = options.out {
        std::fs::write(out, &report)?;
    }
    Ok(())
}
