//! `mink_bench`: the end-to-end benchmark of issue 8, run by `cargo xtask bench`.
//!
//! It starts the release `mink` binary as a child process on one store and measures it over HTTP,
//! each figure beside a baseline measured in the same run against the same store (these machines
//! are shared and noisy, so ratios mean more than absolute numbers):
//!
//! 1. Idle append: one 1 KiB-row NDJSON append at a time, acknowledged once durable, interleaved
//!    with raw PUTs of an object as large as the WAL object that append costs; p50/p99/p999 and
//!    the WAL PUTs per append (the node's `/metrics`).
//! 2. Group commit: tables of 1, 100 and 1000 buckets with concurrent writers (one request in
//!    flight each, 64 rows of 1 KiB per request as one mink batch): MB/s, rows/s, WAL PUTs/s, p99,
//!    against the raw sequential PUT throughput of 8 MiB objects.
//! 3. Tail delivery: from an append's acknowledgement to a parked long-poll reader, and to an SSE
//!    reader, holding the row.
//! 4. Catch-up replay of 1 GiB (128 MiB with `--quick`) from committed objects after a restart
//!    (cold caches) and again (warm), against raw sequential GETs of the same objects.
//! 5. Projection: reading 1 of 10 columns vs all 10, rows per second (Arrow IPC responses).
//! 6. `offset_for_timestamp`: stream fetches per lookup against log2(batches). The node does not
//!    count the fetches of one lookup, so this item runs an in-process tablet on the same store
//!    with a counting stream layer (and times the node's `offsets?timestamp=` endpoint beside it).
//! 7. Peak RSS (VmHWM of /proc/PID/status) of the node during item 2, beside its cache budgets.
//!
//! Stores: `local` (object_store on local files, the embedded default), `moto` (the S3 server
//! named by `MINK_TEST_S3_ENDPOINT` / `MINK_TEST_S3_BUCKET`), `s3-standard` (local files wearing
//! the S3 Standard latency model; the node needs the `chaos` feature for it). Metadata is the
//! embedded redb in every case.
//!
//! ```text
//! mink_bench --node PATH --store local|moto|s3-standard [--quick] --out DIR
//! ```
//!
//! Writes `DIR/node-STORE.md` (Markdown tables), `DIR/latency-STORE.csv` (percentiles per series)
//! and `DIR/replay-STORE.csv` (replay progress over time) for the charts `cargo xtask bench` draws.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use mink_codec::{BatchMeta, encode_batch};
use mink_metadata::{MemoryKv, Metadata, MetadataOptions};
use mink_s3stream::engine::{Engine, EngineSettings};
use mink_s3stream::storage::{
    LatencyProfile, LatencyStorage, ObjectStorage, ObjectStoreBackend, S3Config,
};
use mink_tablet::{CountingStream, ManualClock, StaticSchemas, Tablet, TabletId};

type Error = String;

const USAGE: &str =
    "usage: mink_bench --node PATH --store local|moto|s3-standard [--quick] --out DIR";
const MINK_BATCHES: &str = "application/vnd.mink.batches";
const ARROW: &str = "application/vnd.apache.arrow.stream";
/// The schema id of a new table's first schema.
const SCHEMA_ID: i16 = 1;
/// Rows of 1 KiB per group-commit request.
const GROUP_ROWS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    Local,
    Moto,
    S3Standard,
}

impl Store {
    fn name(self) -> &'static str {
        match self {
            Store::Local => "local",
            Store::Moto => "moto",
            Store::S3Standard => "s3-standard",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Store::Local => "local files (object_store, the embedded default)",
            Store::Moto => "moto, the S3 server the tests use (same machine)",
            Store::S3Standard => {
                "local files wearing the S3 Standard latency model \
                                  (PUT p50 30 / p99 150 ms, GET first byte p50 15 / p99 80 ms, 90 MB/s per request)"
            }
        }
    }
}

struct Options {
    node: PathBuf,
    store: Store,
    quick: bool,
    out: PathBuf,
}

fn options() -> Result<Options, Error> {
    let (mut node, mut store, mut quick, mut out) = (None, Store::Local, false, None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--node" => node = Some(PathBuf::from(value()?)),
            "--store" => {
                store = match value()?.as_str() {
                    "local" => Store::Local,
                    "moto" => Store::Moto,
                    "s3-standard" => Store::S3Standard,
                    other => return Err(format!("unknown store `{other}`\n{USAGE}")),
                }
            }
            "--quick" => quick = true,
            "--out" => out = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown option `{other}`\n{USAGE}")),
        }
    }
    Ok(Options {
        node: node.ok_or(format!("--node is required\n{USAGE}"))?,
        store,
        quick,
        out: out.ok_or(format!("--out is required\n{USAGE}"))?,
    })
}

// ---------------------------------------------------------------------------------------------
// Figures

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[derive(Debug, Clone, Copy, Default)]
struct Pct {
    p50: f64,
    p99: f64,
    p999: f64,
    n: usize,
}

/// Percentiles in milliseconds (nearest rank).
fn pct(samples: &mut [f64]) -> Pct {
    samples.sort_by(f64::total_cmp);
    let at = |p: f64| {
        let i = ((samples.len() as f64) * p).ceil() as usize;
        samples
            .get(i.saturating_sub(1).min(samples.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    Pct {
        p50: at(0.5),
        p99: at(0.99),
        p999: at(0.999),
        n: samples.len(),
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**missed**" }
}

/// What the run writes: the Markdown fragment and the CSV rows for the charts.
#[derive(Default)]
struct Report {
    md: String,
    /// Item 7, written during item 2 and shown last.
    rss_md: String,
    latency_csv: String,
    replay_csv: String,
}

impl Report {
    fn latency(&mut self, series: &str, p: &Pct) {
        let _ = writeln!(
            self.latency_csv,
            "{series},{:.4},{:.4},{:.4},{}",
            p.p50, p.p99, p.p999, p.n
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The node process (started and stopped as the chaos driver does)

struct NodeProcess {
    process: mink_tests::node::NodeProcess,
    store: Store,
    prefix: String,
}

impl NodeProcess {
    fn new(binary: &Path, store: Store, dir: &Path) -> Result<Self, Error> {
        Ok(NodeProcess {
            process: mink_tests::node::NodeProcess::new(binary, dir)?,
            store,
            prefix: mink_tests::unique_prefix("bench"),
        })
    }

    fn url(&self) -> String {
        self.process.url()
    }

    fn objects_dir(&self) -> PathBuf {
        self.process.dir().join("data").join("objects")
    }

    fn config(&self) -> String {
        let mut c = self.process.base_config("bench-1");
        if self.store == Store::Moto {
            c += &mink_tests::node::s3_storage_config(&self.prefix);
        }
        if self.store == Store::S3Standard {
            let _ = writeln!(c, "[chaos]\nlatency_profile = \"s3-standard\"");
        }
        c
    }

    fn start(&mut self) -> Result<(), Error> {
        let config = self.config();
        self.process.start(&config, None)
    }

    async fn wait_ready(&mut self, http: &reqwest::Client) -> Result<(), Error> {
        self.process.wait_ready(http).await
    }

    fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// SIGTERM, and waits for a clean exit (the engine flushes).
    fn stop(&mut self) -> Result<(), Error> {
        self.process.stop(Duration::from_secs(60))
    }
}

/// A `/proc/PID/status` field in KiB (VmRSS, VmHWM).
fn proc_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

// ---------------------------------------------------------------------------------------------
// HTTP helpers

struct Client {
    http: reqwest::Client,
    url: String,
}

impl Client {
    async fn create_table(
        &self,
        name: &str,
        fields: serde_json::Value,
        buckets: u32,
    ) -> Result<(), Error> {
        let r = self
            .http
            .post(format!("{}/v1/tables", self.url))
            .json(&serde_json::json!({"name": name, "buckets": buckets, "schema": {"fields": fields}}))
            .send()
            .await
            .map_err(|e| format!("create table {name}: {e}"))?;
        if !r.status().is_success() {
            return Err(format!(
                "create table {name}: {} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            ));
        }
        Ok(())
    }

    fn records(&self, table: &str, bucket: u32) -> String {
        format!("{}/v1/tables/{table}/buckets/{bucket}/records", self.url)
    }

    /// Appends and waits for the acknowledgement (durable).
    async fn append(
        &self,
        table: &str,
        bucket: u32,
        content_type: &str,
        body: Bytes,
    ) -> Result<(), Error> {
        let r = self
            .http
            .post(self.records(table, bucket))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .map_err(|e| format!("append to {table}/{bucket}: {e}"))?;
        let status = r.status();
        let text = r.bytes().await.map_err(|e| format!("append answer: {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "append to {table}/{bucket}: {status} {}",
                String::from_utf8_lossy(&text)
            ));
        }
        Ok(())
    }

    async fn metrics(&self) -> Result<HashMap<String, f64>, Error> {
        let text = self
            .http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .map_err(|e| format!("/metrics: {e}"))?
            .text()
            .await
            .map_err(|e| format!("/metrics: {e}"))?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (name, value) = l.rsplit_once(' ')?;
                Some((name.to_owned(), value.parse().ok()?))
            })
            .collect())
    }

    /// A counter or gauge by name, without the `mink_` prefix and counters' `_total` suffix.
    async fn metric(&self, name: &str) -> Result<f64, Error> {
        let m = self.metrics().await?;
        m.get(&format!("mink_{name}_total"))
            .or_else(|| m.get(&format!("mink_{name}")))
            .copied()
            .ok_or(format!("/metrics has no {name}"))
    }

    async fn high_watermark(&self, table: &str, bucket: u32) -> Result<u64, Error> {
        let v: serde_json::Value = self
            .http
            .get(format!(
                "{}/v1/tables/{table}/buckets/{bucket}/offsets",
                self.url
            ))
            .send()
            .await
            .map_err(|e| format!("offsets: {e}"))?
            .json()
            .await
            .map_err(|e| format!("offsets: {e}"))?;
        v["high_watermark"]
            .as_u64()
            .ok_or(format!("offsets answer without high_watermark: {v}"))
    }
}

fn header_u64(r: &reqwest::Response, name: &str) -> Option<u64> {
    r.headers().get(name)?.to_str().ok()?.parse().ok()
}

fn kv_fields() -> serde_json::Value {
    serde_json::json!([{"name": "id", "type": "int64"}, {"name": "msg", "type": "utf8"}])
}

/// One NDJSON row of about 1 KiB.
fn ndjson_row(i: u64) -> Bytes {
    Bytes::from(format!("{{\"id\":{i},\"msg\":\"{}\"}}\n", "x".repeat(1000)))
}

fn kv_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, true),
    ]))
}

/// A mink batch of `rows` rows of about 1 KiB each (no writer id).
fn mink_batch(rows: usize) -> Result<Bytes, Error> {
    let ids: Vec<i64> = (0..rows as i64).collect();
    let msgs: Vec<String> = ids
        .iter()
        .map(|i| format!("{i:08}{}", "m".repeat(1000)))
        .collect();
    let batch = RecordBatch::try_new(
        kv_schema(),
        vec![
            Arc::new(Int64Array::from(ids)) as ArrayRef,
            Arc::new(StringArray::from(msgs)),
        ],
    )
    .map_err(|e| format!("build rows: {e}"))?;
    encode_batch(&batch, None, BatchMeta::new(SCHEMA_ID))
        .map(Bytes::from)
        .map_err(|e| format!("encode rows: {e}"))
}

// ---------------------------------------------------------------------------------------------
// The raw store, for baselines: the same kind of store as the node's, on the same disk or server

fn raw_store(store: Store, dir: &Path, prefix: &str) -> Result<Arc<dyn ObjectStorage>, Error> {
    let local = |dir: &Path| -> Result<Arc<dyn ObjectStorage>, Error> {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        Ok(Arc::new(
            ObjectStoreBackend::local(dir).map_err(|e| format!("local store: {e}"))?,
        ))
    };
    Ok(match store {
        Store::Local => local(dir)?,
        Store::S3Standard => Arc::new(LatencyStorage::new(
            local(dir)?,
            LatencyProfile::s3_standard(),
            7,
        )),
        Store::Moto => {
            let s3 = mink_tests::s3_server();
            let config = S3Config::local_server(
                s3.endpoint,
                s3.bucket,
                mink_tests::S3_REGION,
                mink_tests::S3_ACCESS_KEY_ID,
                mink_tests::S3_SECRET_ACCESS_KEY,
            )
            .with_prefix(prefix.to_owned());
            Arc::new(ObjectStoreBackend::s3(&config).map_err(|e| format!("S3 store: {e}"))?)
        }
    })
}

/// Raw sequential PUT throughput of 8 MiB objects, MB/s, measured for `duration` (as long as the
/// measurement it is the baseline of: a short burst would see only the page cache of local files,
/// or an idle server). The objects are deleted afterwards, outside the timing.
async fn raw_put_throughput(raw: &dyn ObjectStorage, duration: Duration) -> Result<f64, Error> {
    let big = Bytes::from(vec![0x17u8; 8 << 20]);
    let started = Instant::now();
    let mut rounds = 0;
    while started.elapsed() < duration {
        raw.put(&format!("raw/big-{rounds}"), big.clone())
            .await
            .map_err(|e| format!("raw PUT: {e}"))?;
        rounds += 1;
    }
    let mbps = (rounds * big.len()) as f64 / started.elapsed().as_secs_f64() / 1e6;
    for i in 0..rounds {
        raw.delete(&format!("raw/big-{i}"))
            .await
            .map_err(|e| format!("raw DELETE: {e}"))?;
    }
    Ok(mbps)
}

// ---------------------------------------------------------------------------------------------
// The items

struct Bench {
    options: Options,
    node: NodeProcess,
    client: Client,
    raw: Arc<dyn ObjectStorage>,
    report: Report,
    /// Wall-clock milliseconds when item 4 started and finished writing.
    replay_window: (i64, i64),
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Bench {
    /// Item 1: idle append latency and PUTs, against raw PUTs of the WAL object's size.
    async fn idle_append(&mut self) -> Result<(), Error> {
        let samples = if self.options.quick { 200 } else { 2000 };
        let c = &self.client;
        c.create_table("idle", kv_fields(), 1).await?;
        // Warm up, and learn the size of the WAL object one append costs.
        let (puts0, bytes0) = (
            c.metric("wal_puts").await?,
            c.metric("wal_put_bytes").await?,
        );
        for i in 0..10 {
            c.append("idle", 0, "application/x-ndjson", ndjson_row(i))
                .await?;
        }
        let (puts1, bytes1) = (
            c.metric("wal_puts").await?,
            c.metric("wal_put_bytes").await?,
        );
        let object_size = ((bytes1 - bytes0) / (puts1 - puts0).max(1.0)).round() as usize;
        let object = Bytes::from(vec![0x42u8; object_size.max(1)]);
        let (mut raw, mut appends) = (Vec::new(), Vec::new());
        let objects0 = c.metric("object_puts").await?;
        for i in 0..samples {
            let started = Instant::now();
            self.raw
                .put(&format!("raw/idle-{i}"), object.clone())
                .await
                .map_err(|e| format!("raw PUT: {e}"))?;
            raw.push(ms(started.elapsed()));
            let started = Instant::now();
            c.append("idle", 0, "application/x-ndjson", ndjson_row(i))
                .await?;
            appends.push(ms(started.elapsed()));
        }
        let puts = c.metric("wal_puts").await? - puts1;
        let objects = c.metric("object_puts").await? - objects0;
        let (raw, app) = (pct(&mut raw), pct(&mut appends));
        self.report.latency("1. raw PUT", &raw);
        self.report.latency("1. HTTP append (durable)", &app);
        let per_append = puts / samples as f64;
        let ratio = app.p50 / raw.p50.max(1e-9);
        let _ = write!(
            self.report.md,
            "### 1. Idle append: one 1 KiB row per request, acknowledged durable ({samples} samples)\n\n\
             | | p50 ms | p99 ms | p99.9 ms |\n|---|---|---|---|\n\
             | raw PUT of the same WAL object ({object_size} B), same store | {:.3} | {:.3} | {:.3} |\n\
             | HTTP append until acknowledged | {:.3} | {:.3} | {:.3} |\n\
             | ratio to raw PUT | **{ratio:.2}x** | {:.2}x | {:.2}x |\n\n\
             | goal | figure | |\n|---|---|---|\n\
             | exactly 1 PUT per idle append | {per_append:.3} WAL PUTs per append | {} |\n\
             | p50 <= 1.2x raw PUT | {ratio:.2}x | {} |\n\n\
             Compaction PUT {objects} committed objects during these {samples} appends (they are \
             not on the append's path; the WAL PUT is).\n\n",
            raw.p50,
            raw.p99,
            raw.p999,
            app.p50,
            app.p99,
            app.p999,
            app.p99 / raw.p99.max(1e-9),
            app.p999 / raw.p999.max(1e-9),
            verdict((per_append - 1.0).abs() < 1e-9),
            verdict(ratio <= 1.2),
        );
        Ok(())
    }

    /// Items 2 and 7: group commit with 1, 100 and 1000 buckets; the node's peak RSS.
    async fn group_commit(&mut self) -> Result<(), Error> {
        let quick = self.options.quick;
        let seconds = if quick { 5.0 } else { 20.0 };
        let raw_mbps =
            raw_put_throughput(self.raw.as_ref(), Duration::from_secs_f64(seconds)).await?;
        let body = mink_batch(GROUP_ROWS)?;
        let pid = self.node.pid().ok_or("the node is not running")?;
        let peak_rss = Arc::new(AtomicU64::new(0));
        let sampling = Arc::new(AtomicBool::new(true));
        let sampler = {
            let (peak, sampling) = (peak_rss.clone(), sampling.clone());
            tokio::spawn(async move {
                while sampling.load(Ordering::Relaxed) {
                    if let Some(kib) = proc_kib(pid, "VmRSS:") {
                        peak.fetch_max(kib, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        let _ = write!(
            self.report.md,
            "### 2. Group commit: concurrent writers, each with one request of {GROUP_ROWS} rows of \
             1 KiB ({} KiB, one mink batch) in flight, {seconds:.0} s per case\n\n\
             Baseline: raw sequential PUTs of 8 MiB objects to the same store for {seconds:.0} s: **{raw_mbps:.1} MB/s**.\n\n\
             | buckets | writers | MB/s | rows/s | ratio to raw PUT MB/s | WAL PUTs/s | p50 ms | p99 ms | goal >= 0.8x |\n\
             |---|---|---|---|---|---|---|---|---|\n",
            body.len() >> 10
        );
        for buckets in [1u32, 100, 1000] {
            let table = format!("group{buckets}");
            self.client
                .create_table(&table, kv_fields(), buckets)
                .await?;
            let writers = buckets.max(256);
            let puts0 = self.client.metric("wal_puts").await?;
            let started = Instant::now();
            let deadline = started + Duration::from_secs_f64(seconds);
            let mut tasks = Vec::new();
            for w in 0..writers {
                let http = self.client.http.clone();
                let url = self.client.records(&table, w % buckets);
                let body = body.clone();
                tasks.push(tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    while Instant::now() < deadline {
                        let sent = Instant::now();
                        let r = http
                            .post(&url)
                            .header("content-type", MINK_BATCHES)
                            .body(body.clone())
                            .send()
                            .await
                            .map_err(|e| format!("append: {e}"))?;
                        let status = r.status();
                        let text = r.bytes().await.map_err(|e| format!("append answer: {e}"))?;
                        if !status.is_success() {
                            return Err(format!(
                                "append: {status} {}",
                                String::from_utf8_lossy(&text)
                            ));
                        }
                        latencies.push(ms(sent.elapsed()));
                    }
                    Ok::<_, Error>(latencies)
                }));
            }
            let mut latencies = Vec::new();
            for task in tasks {
                latencies.extend(task.await.map_err(|e| format!("writer task: {e}"))??);
            }
            let elapsed = started.elapsed().as_secs_f64();
            let puts = self.client.metric("wal_puts").await? - puts0;
            let requests = latencies.len() as f64;
            let mbps = requests * body.len() as f64 / elapsed / 1e6;
            let p = pct(&mut latencies);
            self.report
                .latency(&format!("2. group commit, {buckets} buckets"), &p);
            let ratio = mbps / raw_mbps;
            let _ = writeln!(
                self.report.md,
                "| {buckets} | {writers} | {mbps:.1} | {:.0} | **{ratio:.2}x** | {:.0} | {:.1} | {:.1} | {} |",
                requests * GROUP_ROWS as f64 / elapsed,
                puts / elapsed,
                p.p50,
                p.p99,
                verdict(ratio >= 0.8),
            );
        }
        self.report.md.push('\n');
        sampling.store(false, Ordering::Relaxed);
        let _ = sampler.await;
        let hwm = proc_kib(pid, "VmHWM:").unwrap_or(0);
        let settings = EngineSettings::default();
        let mib = |b: u64| b >> 20;
        let budget = settings.cache.tail.capacity_bytes
            + settings.cache.block.memory_bytes
            + settings.cache.block.index_capacity_bytes
            + settings.max_uncompacted_bytes;
        let _ = write!(
            self.report.rss_md,
            "### 7. Peak RSS of the node (a fresh life of the node running item 2)\n\n\
             | | MiB |\n|---|---|\n\
             | VmHWM (peak resident set, /proc/{pid}/status) | **{}** |\n\
             | highest VmRSS sampled every 100 ms during item 2 | {} |\n\
             | tail cache budget (`engine.cache.tail.capacity_bytes`) | {} |\n\
             | block cache memory budget (`engine.cache.block.memory_bytes`) | {} |\n\
             | object index cache budget (`engine.cache.block.index_capacity_bytes`) | {} |\n\
             | max uncompacted bytes (`engine.max_uncompacted_bytes`) | {} |\n\
             | sum of the budgets | {} |\n\n\
             Peak RSS is {:.0}% of the sum of the budgets (defaults; the node ran with no cache \
             settings). The WAL's log cache holds uncompacted data, so it is bounded by max \
             uncompacted bytes; request bodies in flight (writers x {} KiB) and the HTTP and \
             Arrow buffers come on top.\n\n",
            hwm >> 10,
            peak_rss.load(Ordering::Relaxed) >> 10,
            mib(settings.cache.tail.capacity_bytes),
            mib(settings.cache.block.memory_bytes),
            mib(settings.cache.block.index_capacity_bytes),
            mib(settings.max_uncompacted_bytes),
            mib(budget),
            100.0 * (hwm << 10) as f64 / budget as f64,
            body.len() >> 10,
        );
        Ok(())
    }

    /// Item 3: ack -> parked long-poll / SSE reader.
    async fn tail_delivery(&mut self) -> Result<(), Error> {
        let n = if self.options.quick { 100 } else { 1000 };
        let c = &self.client;
        c.create_table("tail", kv_fields(), 1).await?;
        let records = c.records("tail", 0);
        let mut next = 0u64;
        let mut long_poll = Vec::with_capacity(n);
        for i in 0..n {
            let reader = {
                let http = c.http.clone();
                let url = format!("{records}?offset={next}&live=long-poll&timeout_ms=20000");
                tokio::spawn(async move {
                    let r = http
                        .get(url)
                        .send()
                        .await
                        .map_err(|e| format!("long-poll: {e}"))?;
                    let status = r.status();
                    r.bytes()
                        .await
                        .map_err(|e| format!("long-poll body: {e}"))?;
                    if status != reqwest::StatusCode::OK {
                        return Err(format!("long-poll answered {status}"));
                    }
                    Ok::<_, Error>(Instant::now())
                })
            };
            // Let the reader park: the parked reader's wake-up is what is measured.
            tokio::time::sleep(Duration::from_millis(3)).await;
            c.append("tail", 0, "application/x-ndjson", ndjson_row(i as u64))
                .await?;
            let acked = Instant::now();
            let received = reader.await.map_err(|e| format!("reader task: {e}"))??;
            long_poll.push(signed_ms(acked, received));
            next += 1;
        }
        let mut response = c
            .http
            .get(format!("{records}?offset={next}&live=sse"))
            .send()
            .await
            .map_err(|e| format!("SSE: {e}"))?;
        let mut sse = Vec::with_capacity(n);
        let mut buffer = String::new();
        for i in 0..n {
            tokio::time::sleep(Duration::from_millis(3)).await;
            c.append("tail", 0, "application/x-ndjson", ndjson_row(i as u64))
                .await?;
            let acked = Instant::now();
            let want = format!("id: {}\n", next + 1);
            let want_compact = format!("id:{}\n", next + 1);
            while !(buffer.contains(&want) || buffer.contains(&want_compact)) {
                let chunk = tokio::time::timeout(Duration::from_secs(20), response.chunk())
                    .await
                    .map_err(|_| "no SSE event within 20 s of an append".to_owned())?
                    .map_err(|e| format!("SSE: {e}"))?
                    .ok_or("the SSE stream ended")?;
                buffer.push_str(&String::from_utf8_lossy(&chunk));
            }
            sse.push(signed_ms(acked, Instant::now()));
            buffer.clear();
            next += 1;
        }
        drop(response);
        let (lp, sse) = (pct(&mut long_poll), pct(&mut sse));
        self.report.latency("3. long-poll after ack", &lp);
        self.report.latency("3. SSE after ack", &sse);
        let _ = write!(
            self.report.md,
            "### 3. Tail delivery: the writer's acknowledgement -> a parked reader holding the row ({n} samples each)\n\n\
             | reader | p50 ms | p99 ms | p99.9 ms | goal p99 < 1 ms |\n|---|---|---|---|---|\n\
             | long-poll (`live=long-poll`, parked before the append) | {:.3} | {:.3} | {:.3} | {} |\n\
             | SSE (`live=sse`) | {:.3} | {:.3} | {:.3} | {} |\n\n\
             Measured on the client: the time from the append's response to the reader's response \
             (long-poll) or event (SSE); negative when the reader had the row before the writer \
             had its acknowledgement.\n\n",
            lp.p50,
            lp.p99,
            lp.p999,
            verdict(lp.p99 < 1.0),
            sse.p50,
            sse.p99,
            sse.p999,
            verdict(sse.p99 < 1.0),
        );
        Ok(())
    }

    /// Item 4: catch-up replay from committed objects, cold and warm, against raw GETs.
    async fn replay(&mut self) -> Result<(), Error> {
        let total: u64 = if self.options.quick {
            128 << 20
        } else {
            1 << 30
        };
        self.client.create_table("replay", kv_fields(), 1).await?;
        let body = mink_batch(256)?;
        let requests = total.div_ceil(body.len() as u64);
        let written = Instant::now();
        let window_start = now_ms();
        let next = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (http, url, body, next) = (
                self.client.http.clone(),
                self.client.records("replay", 0),
                body.clone(),
                next.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < requests {
                    let r = http
                        .post(&url)
                        .header("content-type", MINK_BATCHES)
                        .body(body.clone())
                        .send()
                        .await
                        .map_err(|e| format!("append: {e}"))?;
                    let status = r.status();
                    let _ = r.bytes().await;
                    if !status.is_success() {
                        return Err(format!("append: {status}"));
                    }
                }
                Ok::<_, Error>(())
            }));
        }
        for task in tasks {
            task.await.map_err(|e| format!("writer task: {e}"))??;
        }
        let write_seconds = written.elapsed().as_secs_f64();
        self.replay_window = (window_start, now_ms());
        // Wait until compaction has committed everything, so the replay reads committed objects.
        let waited = Instant::now();
        loop {
            if self.client.metric("wal_pending_bytes").await? == 0.0 {
                break;
            }
            if waited.elapsed() > Duration::from_secs(900) {
                return Err("compaction did not drain the WAL within 15 minutes".to_owned());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let compact_seconds = waited.elapsed().as_secs_f64();
        let end = self.client.high_watermark("replay", 0).await?;
        self.node.stop()?;
        // The raw baseline: sequential whole-object GETs of every committed object of the node.
        let node_store = match self.options.store {
            Store::Moto => raw_store(Store::Moto, Path::new(""), &self.node.prefix)?,
            other => raw_store(other, &self.node.objects_dir(), "")?,
        };
        let objects = node_store
            .list("data/")
            .await
            .map_err(|e| format!("list committed objects: {e}"))?;
        let started = Instant::now();
        let mut raw_bytes = 0u64;
        for object in &objects {
            raw_bytes += node_store
                .get(&object.key)
                .await
                .map_err(|e| format!("raw GET {}: {e}", object.key))?
                .len() as u64;
        }
        let raw_mbps = raw_bytes as f64 / started.elapsed().as_secs_f64() / 1e6;
        // A new life of the node: empty caches.
        self.node.start()?;
        self.node.wait_ready(&self.client.http).await?;
        let mut lines = Vec::new();
        for phase in ["cold", "warm"] {
            let started = Instant::now();
            let (mut offset, mut bytes) = (0u64, 0u64);
            let mut next_tick = 0.0;
            while offset < end {
                let r = self
                    .client
                    .http
                    .get(format!(
                        "{}?offset={offset}&max_bytes={}",
                        self.client.records("replay", 0),
                        16 << 20
                    ))
                    .header("accept", MINK_BATCHES)
                    .send()
                    .await
                    .map_err(|e| format!("replay read: {e}"))?;
                if !r.status().is_success() {
                    return Err(format!("replay read at {offset}: {}", r.status()));
                }
                let next = header_u64(&r, "mink-next-offset").ok_or("no mink-next-offset")?;
                bytes += r
                    .bytes()
                    .await
                    .map_err(|e| format!("replay body: {e}"))?
                    .len() as u64;
                if next <= offset {
                    return Err(format!("replay made no progress at offset {offset}"));
                }
                offset = next;
                let t = started.elapsed().as_secs_f64();
                if t >= next_tick {
                    let _ = writeln!(
                        self.report.replay_csv,
                        "{phase},{t:.4},{:.3}",
                        bytes as f64 / 1e6
                    );
                    next_tick = t + 0.05;
                }
            }
            let t = started.elapsed().as_secs_f64();
            let _ = writeln!(
                self.report.replay_csv,
                "{phase},{t:.4},{:.3}",
                bytes as f64 / 1e6
            );
            lines.push((phase, bytes, bytes as f64 / t / 1e6));
        }
        let metrics = self.client.metrics().await?;
        let get = |k: &str| {
            metrics
                .get(&format!("mink_{k}_total"))
                .copied()
                .unwrap_or(0.0)
        };
        let _ = write!(
            self.report.md,
            "### 4. Catch-up replay of {} MiB from committed objects (HTTP reads of up to 16 MiB, \
             mink batch format, after a restart of the node)\n\n\
             | | MB/s | ratio to raw GET | goal |\n|---|---|---|---|\n\
             | raw sequential GET of the node's {} committed objects ({:.0} MB: the replay's, and a few KB of items 1 and 3) | {raw_mbps:.1} | 1.00x | |\n",
            total >> 20,
            objects.len(),
            raw_bytes as f64 / 1e6,
        );
        for (phase, bytes, mbps) in &lines {
            let ratio = mbps / raw_mbps;
            let goal = if *phase == "cold" {
                format!(">= 0.8x: {}", verdict(ratio >= 0.8))
            } else {
                String::new()
            };
            let _ = writeln!(
                self.report.md,
                "| replay, {phase} caches ({:.0} MB) | {mbps:.1} | **{ratio:.2}x** | {goal} |",
                *bytes as f64 / 1e6
            );
        }
        let _ = write!(
            self.report.md,
            "\nWriting the {} MiB took {write_seconds:.1} s and compaction drained the WAL {compact_seconds:.1} s \
             later. The replays cost {:.0} object GETs ({:.0} MB); block cache memory budget {} MiB, \
             so a replay larger than that cannot be fully warm. On local files both the raw GETs and \
             the node read through the OS page cache.\n\n",
            total >> 20,
            get("object_gets"),
            get("object_get_bytes") / 1e6,
            EngineSettings::default().cache.block.memory_bytes >> 20,
        );
        Ok(())
    }

    /// Item 5: projection, 1 of 10 columns vs all columns.
    async fn projection(&mut self) -> Result<(), Error> {
        let rows_total: usize = if self.options.quick { 50_000 } else { 200_000 };
        let per_batch = 1000;
        let fields: Vec<serde_json::Value> =
            std::iter::once(serde_json::json!({"name": "c0", "type": "int64"}))
                .chain(
                    (1..10).map(|i| serde_json::json!({"name": format!("c{i}"), "type": "utf8"})),
                )
                .collect();
        self.client
            .create_table("wide", serde_json::Value::Array(fields), 1)
            .await?;
        let schema = Arc::new(Schema::new(
            std::iter::once(Field::new("c0", DataType::Int64, false))
                .chain((1..10).map(|i| Field::new(format!("c{i}"), DataType::Utf8, true)))
                .collect::<Vec<_>>(),
        ));
        let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(
            (0..per_batch as i64).collect::<Vec<_>>(),
        ))];
        for c in 1..10 {
            let values: Vec<String> = (0..per_batch)
                .map(|i| format!("{c}-{i:06}-{}", "v".repeat(100)))
                .collect();
            columns.push(Arc::new(StringArray::from(values)));
        }
        let batch = RecordBatch::try_new(schema, columns).map_err(|e| format!("rows: {e}"))?;
        let body = Bytes::from(
            encode_batch(&batch, None, BatchMeta::new(SCHEMA_ID))
                .map_err(|e| format!("encode: {e}"))?,
        );
        for _ in 0..rows_total / per_batch {
            self.client
                .append("wide", 0, MINK_BATCHES, body.clone())
                .await?;
        }
        let end = self.client.high_watermark("wide", 0).await?;
        let read_all = |columns: Option<&'static str>| {
            let http = self.client.http.clone();
            let url = self.client.records("wide", 0);
            async move {
                let started = Instant::now();
                let (mut offset, mut bytes) = (0u64, 0u64);
                while offset < end {
                    let mut q = format!("{url}?offset={offset}&max_bytes={}", 8 << 20);
                    if let Some(c) = columns {
                        q += &format!("&columns={c}");
                    }
                    let r = http
                        .get(q)
                        .header("accept", ARROW)
                        .send()
                        .await
                        .map_err(|e| format!("read: {e}"))?;
                    if !r.status().is_success() {
                        return Err(format!("read: {}", r.status()));
                    }
                    let next = header_u64(&r, "mink-next-offset").ok_or("no mink-next-offset")?;
                    bytes += r
                        .bytes()
                        .await
                        .map_err(|e| format!("read body: {e}"))?
                        .len() as u64;
                    if next <= offset {
                        return Err(format!("read made no progress at {offset}"));
                    }
                    offset = next;
                }
                Ok::<_, Error>((end as f64 / started.elapsed().as_secs_f64(), bytes))
            }
        };
        read_all(None).await?; // warm up: both measured reads find the same caches
        let (all, all_bytes) = read_all(None).await?;
        let (one, one_bytes) = read_all(Some("c0")).await?;
        let _ = write!(
            self.report.md,
            "### 5. Projection: reading {end} rows of 10 columns (an int64 and nine ~110-byte strings) as Arrow IPC\n\n\
             | columns | rows/s | response MB | ratio |\n|---|---|---|---|\n\
             | all 10 (baseline) | {all:.0} | {:.1} | 1.00x |\n\
             | 1 (`columns=c0`) | {one:.0} | {:.1} | **{:.2}x** |\n\n\
             Both reads are warm (a first full read filled the caches). The node decodes each stored \
             batch and re-encodes the projected columns; the codec micro-benchmark measures the \
             projection alone.\n\n",
            all_bytes as f64 / 1e6,
            one_bytes as f64 / 1e6,
            one / all,
        );
        Ok(())
    }

    /// Item 6: offset_for_timestamp costs, in-process tablet with a counting stream on the same
    /// kind of store; the node's endpoint timed beside it.
    async fn timestamp_lookup(&mut self) -> Result<(), Error> {
        let batches: u64 = if self.options.quick { 1024 } else { 8192 };
        let lookups = 200;
        let metadata = Metadata::open(Arc::new(MemoryKv::new()), MetadataOptions::default())
            .await
            .map_err(|e| format!("metadata: {e}"))?;
        let engine = Engine::builder()
            .node("bench-ts")
            .wal_storage(raw_store(
                self.options.store,
                &self.node.process.dir().join("tablet-objects"),
                &format!("{}-tablet", self.node.prefix),
            )?)
            .metadata(Arc::new(metadata))
            .open()
            .await
            .map_err(|e| format!("engine: {e}"))?;
        let clock = Arc::new(ManualClock::new(1_000_000));
        let fetches = Arc::new(AtomicU64::new(0));
        let counter = fetches.clone();
        let tablet = Tablet::builder(TabletId::new("ts", "default", 0))
            .engine(engine.clone())
            .schemas(Arc::new(StaticSchemas::with_schemas([(
                SCHEMA_ID,
                kv_schema(),
            )])))
            .clock(clock.clone())
            .stream_layer(CountingStream::layer(counter))
            .create()
            .await
            .map_err(|e| format!("tablet: {e}"))?;
        let body = mink_batch(4)?;
        let next = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..32 {
            let (tablet, body, next, clock) =
                (tablet.clone(), body.clone(), next.clone(), clock.clone());
            tasks.push(tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < batches {
                    clock.advance(1);
                    tablet
                        .append(body.clone())
                        .await
                        .map_err(|e| format!("tablet append: {e}"))?;
                }
                Ok::<_, Error>(())
            }));
        }
        for task in tasks {
            task.await.map_err(|e| format!("append task: {e}"))??;
        }
        let last = 1_000_000 + batches as i64;
        clock.set(last + 1);
        let mut costs = Vec::with_capacity(lookups);
        let mut latencies = Vec::with_capacity(lookups);
        for i in 0..lookups {
            // Timestamps spread over the whole log, deterministic.
            let ts = 1_000_000 + ((i as u64 * 7919) % (batches + 1)) as i64;
            let before = fetches.load(Ordering::SeqCst);
            let started = Instant::now();
            tablet
                .offset_for_timestamp(ts)
                .await
                .map_err(|e| format!("offset_for_timestamp: {e}"))?;
            latencies.push(ms(started.elapsed()));
            costs.push((fetches.load(Ordering::SeqCst) - before) as f64);
        }
        tablet.close().await.map_err(|e| format!("close: {e}"))?;
        engine
            .shutdown()
            .await
            .map_err(|e| format!("engine shutdown: {e}"))?;
        let mean = costs.iter().sum::<f64>() / costs.len() as f64;
        let max = costs.iter().copied().fold(0.0, f64::max);
        let log2 = (batches as f64).log2();
        let lat = pct(&mut latencies);
        // The node's endpoint, on the replay table (its log is long), over the time it was written.
        let (from, to) = self.replay_window;
        let mut node_lat = Vec::with_capacity(lookups);
        for i in 0..lookups {
            let ts = from + (i as i64 * (to - from)) / lookups as i64;
            let started = Instant::now();
            let r = self
                .client
                .http
                .get(format!(
                    "{}/v1/tables/replay/buckets/0/offsets?timestamp={ts}",
                    self.client.url
                ))
                .send()
                .await
                .map_err(|e| format!("offsets?timestamp: {e}"))?;
            if !r.status().is_success() {
                return Err(format!("offsets?timestamp: {}", r.status()));
            }
            let _ = r.bytes().await;
            node_lat.push(ms(started.elapsed()));
        }
        let node = pct(&mut node_lat);
        self.report
            .latency("6. offset_for_timestamp (tablet)", &lat);
        let _ = write!(
            self.report.md,
            "### 6. offset_for_timestamp: {lookups} lookups over {batches} batches\n\n\
             Measured on an in-process tablet over the same kind of store (a counting layer on its \
             stream counts fetches; the node exposes no per-lookup fetch count).\n\n\
             | | figure |\n|---|---|\n\
             | log2(batches) (baseline) | {log2:.1} |\n\
             | batch fetches per lookup, mean / max | **{mean:.2}** / {max:.0} (bound: ceil(log2) + 1 = {:.0}) |\n\
             | lookup latency p50 / p99 (in-process) | {:.3} / {:.3} ms |\n\
             | node `offsets?timestamp=` over HTTP, p50 / p99 (log of item 4) | {:.3} / {:.3} ms |\n\n",
            log2.ceil() + 1.0,
            lat.p50,
            lat.p99,
            node.p50,
            node.p99,
        );
        Ok(())
    }
}

fn signed_ms(acked: Instant, received: Instant) -> f64 {
    if received >= acked {
        ms(received - acked)
    } else {
        -ms(acked - received)
    }
}

async fn run(options: Options) -> Result<(), Error> {
    let scratch = std::env::temp_dir().join(format!(
        "mink-bench-{}-{}",
        options.store.name(),
        std::process::id()
    ));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("create {}: {e}", scratch.display()))?;
    let mut node = NodeProcess::new(&options.node, options.store, &scratch)?;
    let raw = raw_store(
        options.store,
        &scratch.join("raw"),
        &format!("{}-raw", node.prefix),
    )?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(2048)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    node.start()?;
    node.wait_ready(&http).await?;
    let client = Client {
        http,
        url: node.url(),
    };
    let store = options.store;
    let quick = options.quick;
    let mut bench = Bench {
        options,
        node,
        client,
        raw,
        report: Report::default(),
        replay_window: (0, 0),
    };
    let started = Instant::now();
    // Item 4 restarts the node; item 2 runs on a fresh life so that VmHWM is its own peak.
    let steps: [(&str, u8); 6] = [
        ("idle append", 1),
        ("tail delivery", 3),
        ("replay", 4),
        ("group commit", 2),
        ("projection", 5),
        ("timestamp lookup", 6),
    ];
    let mut sections = std::collections::BTreeMap::new();
    for (name, step) in steps {
        let t = Instant::now();
        eprintln!("mink_bench [{}]: {name}", store.name());
        match step {
            1 => bench.idle_append().await?,
            2 => {
                bench.node.stop()?;
                bench.node.start()?;
                bench.node.wait_ready(&bench.client.http).await?;
                bench.group_commit().await?
            }
            3 => bench.tail_delivery().await?,
            4 => bench.replay().await?,
            5 => bench.projection().await?,
            _ => bench.timestamp_lookup().await?,
        }
        sections.insert(step, std::mem::take(&mut bench.report.md));
        eprintln!(
            "mink_bench [{}]: {name} took {:.1} s",
            store.name(),
            t.elapsed().as_secs_f64()
        );
    }
    bench.report.md = format!(
        "## Store `{}`: {}{}\n\n",
        store.name(),
        store.describe(),
        if quick { " (quick)" } else { "" }
    );
    for section in sections.into_values() {
        bench.report.md += &section;
    }
    let rss = std::mem::take(&mut bench.report.rss_md);
    bench.report.md += &rss;
    let _ = write!(
        bench.report.md,
        "_Store `{}` took {:.0} s in all._\n\n",
        store.name(),
        started.elapsed().as_secs_f64()
    );
    bench.node.stop()?;
    let out = &bench.options.out;
    std::fs::create_dir_all(out).map_err(|e| format!("create {}: {e}", out.display()))?;
    let write = |name: String, text: &str| {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(|e| format!("write {}: {e}", path.display()))
    };
    write(format!("node-{}.md", store.name()), &bench.report.md)?;
    write(
        format!("latency-{}.csv", store.name()),
        &format!(
            "series,p50_ms,p99_ms,p999_ms,samples\n{}",
            bench.report.latency_csv
        ),
    )?;
    write(
        format!("replay-{}.csv", store.name()),
        &format!("phase,seconds,mb\n{}", bench.report.replay_csv),
    )?;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("mink_bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(options).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mink_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
