//! Raw object-store baseline: PUT latency of small objects and sequential GET throughput of
//! large ones, for each backend this machine can reach. The benchmark harness reports Mink's
//! figures as ratios against these.
//!
//! ```text
//! cargo run -p mink-s3stream --features test-util --release --example storage_baseline
//! ```
//!
//! Backends: object_store in memory, object_store on a local directory (fsync on every PUT),
//! and, when `MINK_TEST_S3_ENDPOINT` and `MINK_TEST_S3_BUCKET` are set, object_store and
//! aws-sdk-s3 against that S3 server (credentials from `MINK_S3_ACCESS_KEY` /
//! `MINK_S3_SECRET_KEY`, default the test server's `mink-test` / `mink-test-secret`). Also the
//! in-memory store behind the S3 Standard and S3 Express One Zone latency profiles, as a check of
//! the model. Settings: `BASELINE_PUTS` (default 200), `BASELINE_GETS` (default 8).

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mink_s3stream::storage::{
    AwsS3Backend, LatencyProfile, LatencyStorage, ObjectStorage, ObjectStoreBackend, S3Config,
};

const SMALL: usize = 4 << 10;
const LARGE: usize = 8 << 20;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Figures {
    put_p50: Duration,
    put_p99: Duration,
    get_mb_per_sec: f64,
}

async fn measure(
    store: &dyn ObjectStorage,
    puts: usize,
    gets: usize,
) -> Result<Figures, Box<dyn std::error::Error>> {
    let small = Bytes::from(vec![0x5a; SMALL]);
    // One untimed request to open connections.
    store.put("baseline/warmup", small.clone()).await?;
    let mut lat = Vec::with_capacity(puts);
    for i in 0..puts {
        let started = Instant::now();
        store
            .put(&format!("baseline/small/{i:06}"), small.clone())
            .await?;
        lat.push(started.elapsed());
    }
    lat.sort();

    let large: Bytes = (0..LARGE)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<_>>()
        .into();
    for i in 0..gets {
        store
            .put(&format!("baseline/large/{i:03}"), large.clone())
            .await?;
    }
    let started = Instant::now();
    let mut total = 0usize;
    for i in 0..gets {
        total += store.get(&format!("baseline/large/{i:03}")).await?.len();
    }
    let secs = started.elapsed().as_secs_f64();

    let mut keys: Vec<String> = (0..puts)
        .map(|i| format!("baseline/small/{i:06}"))
        .collect();
    keys.extend((0..gets).map(|i| format!("baseline/large/{i:03}")));
    keys.push("baseline/warmup".to_owned());
    store.delete_many(&keys).await?;

    Ok(Figures {
        put_p50: percentile(&lat, 0.50),
        put_p99: percentile(&lat, 0.99),
        get_mb_per_sec: total as f64 / 1e6 / secs,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let puts = env_usize("BASELINE_PUTS", 200);
    let gets = env_usize("BASELINE_GETS", 8);
    let dir = tempfile::tempdir()?;

    let mut backends: Vec<(String, Arc<dyn ObjectStorage>)> = vec![
        (
            "object_store memory".into(),
            Arc::new(ObjectStoreBackend::memory()),
        ),
        (
            "object_store local (fsync)".into(),
            Arc::new(ObjectStoreBackend::local(dir.path())?),
        ),
    ];
    let endpoint = std::env::var("MINK_TEST_S3_ENDPOINT").ok();
    let bucket = std::env::var("MINK_TEST_S3_BUCKET").ok();
    if let (Some(endpoint), Some(bucket)) = (endpoint, bucket) {
        let ak = std::env::var("MINK_S3_ACCESS_KEY").unwrap_or_else(|_| "mink-test".into());
        let sk = std::env::var("MINK_S3_SECRET_KEY").unwrap_or_else(|_| "mink-test-secret".into());
        let prefix = format!("baseline-{}", std::process::id());
        let config = S3Config::local_server(endpoint.clone(), bucket, "us-east-1", ak, sk)
            .with_prefix(prefix);
        backends.push((
            format!("object_store S3 {endpoint}"),
            Arc::new(ObjectStoreBackend::s3(&config)?),
        ));
        backends.push((
            format!("aws-sdk-s3 {endpoint}"),
            Arc::new(AwsS3Backend::new(config).await?),
        ));
    }
    for (name, profile) in [
        (
            "memory + S3 Standard profile",
            LatencyProfile::s3_standard(),
        ),
        (
            "memory + S3 Express profile",
            LatencyProfile::s3_express_one_zone(),
        ),
    ] {
        backends.push((
            name.into(),
            Arc::new(LatencyStorage::new(
                Arc::new(ObjectStoreBackend::memory()),
                profile,
                1,
            )),
        ));
    }

    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{puts} sequential PUTs of {} KiB; sequential GETs of {gets} objects of {} MiB",
        SMALL >> 10,
        LARGE >> 20
    )?;
    writeln!(
        out,
        "{:<44} {:>12} {:>12} {:>16}",
        "backend", "PUT p50 ms", "PUT p99 ms", "GET MB/s"
    )?;
    for (name, store) in &backends {
        let f = measure(store.as_ref(), puts, gets).await?;
        writeln!(
            out,
            "{:<44} {:>12.2} {:>12.2} {:>16.0}",
            name,
            ms(f.put_p50),
            ms(f.put_p99),
            f.get_mb_per_sec
        )?;
    }
    Ok(())
}
