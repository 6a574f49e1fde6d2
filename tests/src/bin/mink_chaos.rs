//! `mink_chaos`: the crash-safety harness behind `cargo xtask chaos` (issue 8).
//!
//! It runs the real `mink` binary as a child process, on the embedded default (local files +
//! redb) or on S3 + etcd, and while idempotent writers and tailing readers work against it over
//! HTTP, it kills the node with SIGKILL at random moments and restarts it on the same data and
//! port, part of the time with PUT failures and slow PUTs injected into its object store (the
//! node's `[chaos]` settings, honoured by a build with the `chaos` feature). After the last kill
//! it restarts the node once more without faults, lets every writer finish, reads every bucket
//! from offset 0 and checks:
//!
//! - every acknowledged row is in the log exactly once, in the batch and at the offsets its
//!   acknowledgement named (a row id seen twice is a duplicate; an acknowledged row missing is lost);
//! - batch offsets are contiguous from 0 and nothing is in the log that no writer sent;
//! - the high watermark a reader saw never went backwards, across restarts too;
//! - each reader's batches followed each other with no gap or overlap, and match the final log
//!   (so no reader ever saw data that a crash took back).
//!
//! Writers: `--writers` per bucket, each with its own writer id (`POST /v1/writers`) and
//! sequence numbers, send one NDJSON batch of 1-4 rows with unique row ids at a time and retry
//! the same (writer id, sequence, body) after connection errors, timeouts and 5xx until they get
//! a 200, across restarts. Any 4xx to an append is a violation (e.g. a lost writer window gives
//! 409 out_of_order_sequence).
//!
//! Usage (normally through `cargo xtask chaos`, which builds the binaries and starts the
//! services):
//!
//! ```text
//! mink_chaos --node PATH [--backend embedded|s3-etcd] [--kills N] [--seconds S] [--seed N]
//!            [--buckets N] [--writers N] [--faults SHARE] [--dir PATH]
//! ```
//!
//! `--seconds` is the length of the kill phase (the mean time between kills is seconds/kills);
//! `--faults` the share of node lives run with injected faults (default 0.5). For `s3-etcd` the
//! services come from `MINK_TEST_S3_ENDPOINT`, `MINK_TEST_S3_BUCKET` and
//! `MINK_TEST_ETCD_ENDPOINTS` (see `mink_tests`). Exit status 0 when every check passed, 1 on any
//! violation, 2 when the harness itself could not run.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::{Array, Int64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use mink_tests::Rng;
use reqwest::StatusCode;

const TABLE: &str = "chaos";
/// Row ids are `writer ordinal * ROW_SPACE + sequence * 16 + row`, unique over a run.
const ROW_SPACE: i64 = 1 << 40;
const MAX_ROWS: u64 = 4;
/// How long the final phase may take to let writers finish and readers catch up.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(180);
const MINK_BATCHES: &str = "application/vnd.mink.batches";

type Error = String;

// ---------------------------------------------------------------------------------------------
// Options

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Embedded,
    S3Etcd,
}

#[derive(Debug, Clone)]
struct Options {
    node: PathBuf,
    backend: Backend,
    kills: u32,
    seconds: f64,
    seed: u64,
    buckets: u32,
    writers: u32,
    faults: f64,
    dir: Option<PathBuf>,
}

const USAGE: &str = "usage: mink_chaos --node PATH [--backend embedded|s3-etcd] [--kills N] \
[--seconds S] [--seed N] [--buckets N] [--writers N] [--faults SHARE] [--dir PATH]";

impl Options {
    fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, Error> {
        let mut o = Options {
            node: PathBuf::new(),
            backend: Backend::Embedded,
            kills: 20,
            seconds: 0.0,
            seed: seed_from_clock(),
            buckets: 3,
            writers: 2,
            faults: 0.5,
            dir: None,
        };
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
            let number = |v: String| -> Result<f64, Error> {
                v.parse()
                    .map_err(|_| format!("{flag}: `{v}` is not a number"))
            };
            match flag.as_str() {
                "--node" => o.node = PathBuf::from(value()?),
                "--backend" => {
                    o.backend = match value()?.as_str() {
                        "embedded" => Backend::Embedded,
                        "s3-etcd" => Backend::S3Etcd,
                        other => return Err(format!("unknown backend `{other}`\n{USAGE}")),
                    }
                }
                "--kills" => o.kills = number(value()?)? as u32,
                "--seconds" => o.seconds = number(value()?)?,
                "--seed" => {
                    let v = value()?;
                    o.seed = v
                        .parse()
                        .map_err(|_| format!("--seed: `{v}` is not a number"))?;
                }
                "--buckets" => o.buckets = (number(value()?)? as u32).max(1),
                "--writers" => o.writers = (number(value()?)? as u32).max(1),
                "--faults" => o.faults = number(value()?)?.clamp(0.0, 1.0),
                "--dir" => o.dir = Some(PathBuf::from(value()?)),
                "-h" | "--help" => return Err(USAGE.to_owned()),
                other => return Err(format!("unknown option `{other}`\n{USAGE}")),
            }
        }
        if o.node.as_os_str().is_empty() {
            return Err(format!("--node is required\n{USAGE}"));
        }
        if o.seconds <= 0.0 {
            o.seconds = 2.0 * f64::from(o.kills.max(1));
        }
        Ok(o)
    }
}

fn seed_from_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

// ---------------------------------------------------------------------------------------------
// The node process

/// Faults for one life of the node (`[chaos]` settings).
#[derive(Debug, Clone, Copy)]
struct Faults {
    put_failure_rate: f64,
    put_delay_ms: u64,
    /// Failed PUTs land first (a PUT whose answer was lost).
    fail_after_write: bool,
    /// A short WAL retry deadline, so the WAL gives up and appends get 503 until the next life.
    wal_deadline_ms: Option<u64>,
    seed: u64,
}

struct NodeProcess {
    options: Options,
    process: mink_tests::node::NodeProcess,
    /// Key prefix in S3 and etcd, unique to this run.
    prefix: String,
    lives: u32,
}

impl NodeProcess {
    fn new(options: &Options, dir: &Path) -> Result<Self, Error> {
        Ok(NodeProcess {
            options: options.clone(),
            process: mink_tests::node::NodeProcess::new(&options.node, dir)?,
            prefix: mink_tests::unique_prefix("chaos"),
            lives: 0,
        })
    }

    fn url(&self) -> String {
        self.process.url()
    }

    fn config(&self, faults: Option<Faults>) -> String {
        let mut c = self.process.base_config("chaos-1");
        if self.options.backend == Backend::S3Etcd {
            let etcd = mink_tests::etcd_endpoints();
            c += &mink_tests::node::s3_storage_config(&self.prefix);
            let _ = writeln!(
                c,
                "[metadata]\nbackend = \"etcd\"\netcd_endpoints = {etcd:?}\netcd_prefix = \"{}/\"",
                self.prefix
            );
        }
        // Compact often, so kills also land between uploads, commits and WAL deletes; adopt WAL
        // objects of a few appends and rewrite smaller ones; merge and regroup every second.
        let _ = writeln!(
            c,
            "[engine.compaction]\ninterval = 300\nadopt_wal_object_bytes = 1024\n\
             maintenance_interval = 1000\nmerge_min_objects = 3\ndelete_grace = 500"
        );
        if let Some(f) = faults {
            if let Some(ms) = f.wal_deadline_ms {
                let _ = writeln!(c, "[engine.wal]\nretry_deadline = {ms}");
            }
            let _ = writeln!(
                c,
                "[chaos]\nput_failure_rate = {}\nput_delay_ms = {}\nput_fail_after_write = {}\n\
                 seed = {}",
                f.put_failure_rate, f.put_delay_ms, f.fail_after_write, f.seed
            );
        }
        c
    }

    /// Starts a new life of the node (not waiting for it to serve).
    fn start(&mut self, faults: Option<Faults>) -> Result<(), Error> {
        self.lives += 1;
        let banner = format!(
            "===== chaos: life {} of the node, faults {faults:?} =====",
            self.lives
        );
        let config = self.config(faults);
        self.process.start(&config, Some(&banner))
    }

    /// Waits until `/healthz` answers 200; fails if the process exits or takes too long.
    async fn wait_ready(&mut self, http: &reqwest::Client) -> Result<(), Error> {
        self.process.wait_ready(http).await
    }

    /// SIGKILL, and reap the process.
    fn kill(&mut self) -> Result<(), Error> {
        self.process.kill()
    }

    /// SIGTERM, then waits up to `timeout` for a clean exit; true if it exited with status 0.
    fn stop(&mut self, timeout: Duration) -> bool {
        self.process.stop(timeout).is_ok()
    }
}

// ---------------------------------------------------------------------------------------------
// What the workers record

/// An acknowledged append.
#[derive(Debug, Clone)]
struct Ack {
    bucket: u32,
    writer_id: i64,
    sequence: i32,
    base_offset: u64,
    rows: Vec<i64>,
}

/// A batch as a reader or the final read saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SeenBatch {
    base_offset: u64,
    record_count: u64,
    writer_id: i64,
    sequence: i32,
}

#[derive(Default)]
struct Journal {
    acks: Mutex<Vec<Ack>>,
    violations: Mutex<Vec<String>>,
    /// Per bucket: the batches its reader read, in order.
    reader_batches: Mutex<HashMap<u32, Vec<SeenBatch>>>,
    append_retries: AtomicU64,
    duplicate_acks: AtomicU64,
    reader_reconnects: AtomicU64,
    high_watermarks_seen: AtomicU64,
}

impl Journal {
    fn violation(&self, what: String) {
        eprintln!("mink_chaos: VIOLATION: {what}");
        lock(&self.violations).push(what);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Ctx {
    url: String,
    http: reqwest::Client,
    journal: Journal,
    /// Writers finish their batch in flight and stop.
    stop_writing: AtomicBool,
    /// Per bucket: readers stop once they reach this offset (set in the final phase).
    reader_targets: Mutex<HashMap<u32, u64>>,
    /// Past this, workers give up (a liveness failure, reported as a violation).
    deadline: Instant,
}

fn records_url(ctx: &Ctx, bucket: u32) -> String {
    format!("{}/v1/tables/{TABLE}/buckets/{bucket}/records", ctx.url)
}

fn header_u64(response: &reqwest::Response, name: &str) -> Option<u64> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

// ---------------------------------------------------------------------------------------------
// Writers

async fn init_writer(ctx: &Ctx) -> Option<i64> {
    loop {
        let answer = ctx
            .http
            .post(format!("{}/v1/writers", ctx.url))
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        if let Ok(r) = answer
            && r.status() == StatusCode::OK
            && let Ok(v) = r.json::<serde_json::Value>().await
            && let Some(id) = v["writer_id"].as_i64()
        {
            return Some(id);
        }
        if Instant::now() > ctx.deadline {
            ctx.journal
                .violation("init_writer never succeeded before the deadline".to_owned());
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn writer(ctx: Arc<Ctx>, bucket: u32, ordinal: i64, mut rng: Rng) {
    let Some(writer_id) = init_writer(&ctx).await else {
        return;
    };
    let mut sequence: i32 = 0;
    while !ctx.stop_writing.load(Ordering::SeqCst) {
        let count = rng.between(1, MAX_ROWS);
        let rows: Vec<i64> = (0..count as i64)
            .map(|i| ordinal * ROW_SPACE + i64::from(sequence) * 16 + i)
            .collect();
        let mut body = String::new();
        for id in &rows {
            let _ = writeln!(body, "{{\"id\":{id},\"msg\":\"w{writer_id} s{sequence}\"}}");
        }
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let answer = ctx
                .http
                .post(records_url(&ctx, bucket))
                .header("content-type", "application/x-ndjson")
                .header("mink-writer-id", writer_id)
                .header("mink-sequence", sequence)
                .body(body.clone())
                .timeout(Duration::from_secs(60))
                .send()
                .await;
            let retry = match answer {
                Ok(r) if r.status() == StatusCode::OK => {
                    match r.json::<serde_json::Value>().await {
                        Ok(v) => {
                            record_ack(&ctx, bucket, writer_id, sequence, &rows, &v);
                            break;
                        }
                        // The node died while sending the answer: ask again.
                        Err(_) => true,
                    }
                }
                Ok(r) if r.status().is_server_error() => true,
                Ok(r) => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    ctx.journal.violation(format!(
                        "bucket {bucket}: append of writer {writer_id} sequence {sequence} \
                         (attempt {attempt}) was rejected with {status}: {text}"
                    ));
                    return;
                }
                Err(_) => true,
            };
            if retry {
                ctx.journal.append_retries.fetch_add(1, Ordering::Relaxed);
                if Instant::now() > ctx.deadline {
                    ctx.journal.violation(format!(
                        "bucket {bucket}: writer {writer_id} sequence {sequence} was never \
                         acknowledged ({attempt} attempts before the deadline)"
                    ));
                    return;
                }
                tokio::time::sleep(Duration::from_millis(rng.between(10, 60))).await;
            }
        }
        sequence += 1;
        // A little air between batches, so two cores also serve readers and the compactor.
        tokio::time::sleep(Duration::from_millis(rng.between(0, 10))).await;
    }
}

fn record_ack(
    ctx: &Ctx,
    bucket: u32,
    writer_id: i64,
    sequence: i32,
    rows: &[i64],
    answer: &serde_json::Value,
) {
    let base = answer["base_offset"].as_u64();
    let last = answer["last_offset"].as_u64();
    let (Some(base), Some(last)) = (base, last) else {
        ctx.journal.violation(format!(
            "bucket {bucket}: the acknowledgement of writer {writer_id} sequence {sequence} has \
             no offsets: {answer}"
        ));
        return;
    };
    if last < base || last + 1 - base != rows.len() as u64 {
        ctx.journal.violation(format!(
            "bucket {bucket}: writer {writer_id} sequence {sequence} sent {} rows but was \
             acknowledged offsets {base}..={last}",
            rows.len()
        ));
    }
    if answer["duplicate"].as_bool() == Some(true) {
        ctx.journal.duplicate_acks.fetch_add(1, Ordering::Relaxed);
    }
    lock(&ctx.journal.acks).push(Ack {
        bucket,
        writer_id,
        sequence,
        base_offset: base,
        rows: rows.to_vec(),
    });
}

// ---------------------------------------------------------------------------------------------
// Readers

/// Tails one bucket with long-polls from offset 0, checking that batches follow each other and
/// that the high watermark never goes backwards, across restarts.
async fn reader(ctx: Arc<Ctx>, bucket: u32) {
    let mut next = 0u64;
    let mut max_hw = 0u64;
    let mut seen = Vec::new();
    let mut reported_regression = false;
    loop {
        if let Some(&target) = lock(&ctx.reader_targets).get(&bucket)
            && next >= target
        {
            break;
        }
        if Instant::now() > ctx.deadline {
            ctx.journal.violation(format!(
                "bucket {bucket}: the reader was at offset {next} at the deadline"
            ));
            break;
        }
        let answer = ctx
            .http
            .get(format!(
                "{}?offset={next}&live=long-poll&timeout_ms=1000",
                records_url(&ctx, bucket)
            ))
            .header("accept", MINK_BATCHES)
            .timeout(Duration::from_secs(30))
            .send()
            .await;
        let response = match answer {
            Ok(r) if r.status() == StatusCode::OK || r.status() == StatusCode::NO_CONTENT => r,
            Ok(r) if r.status().is_server_error() => {
                ctx.journal
                    .reader_reconnects
                    .fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Ok(r) => {
                // 416 here would mean the log end fell below what this reader already read.
                let status = r.status();
                let text = r.text().await.unwrap_or_default();
                if !reported_regression {
                    ctx.journal.violation(format!(
                        "bucket {bucket}: a read at offset {next} got {status}: {text}"
                    ));
                    reported_regression = true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(_) => {
                ctx.journal
                    .reader_reconnects
                    .fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let hw = header_u64(&response, "mink-high-watermark");
        let next_header = header_u64(&response, "mink-next-offset");
        let Ok(body) = response.bytes().await else {
            ctx.journal
                .reader_reconnects
                .fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let Some(hw) = hw else {
            ctx.journal.violation(format!(
                "bucket {bucket}: a read at {next} has no Mink-High-Watermark"
            ));
            continue;
        };
        ctx.journal
            .high_watermarks_seen
            .fetch_add(1, Ordering::Relaxed);
        if hw < max_hw {
            ctx.journal.violation(format!(
                "bucket {bucket}: the high watermark went backwards from {max_hw} to {hw} \
                 (reader at offset {next})"
            ));
        }
        max_hw = max_hw.max(hw);
        let batches = match parse_batches(&body) {
            Ok(b) => b,
            Err(e) => {
                if !reported_regression {
                    ctx.journal.violation(format!(
                        "bucket {bucket}: a read at {next} returned undecodable batches: {e}"
                    ));
                    reported_regression = true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        for b in batches {
            if b.base_offset != next {
                ctx.journal.violation(format!(
                    "bucket {bucket}: the reader expected a batch at offset {next} and got one \
                     at {} (writer {} sequence {})",
                    b.base_offset, b.writer_id, b.sequence
                ));
            }
            next = b.base_offset + b.record_count;
            seen.push(b);
        }
        if next > hw {
            ctx.journal.violation(format!(
                "bucket {bucket}: a reader read up to {next}, past the high watermark {hw}"
            ));
        }
        if let Some(n) = next_header
            && n != next
        {
            ctx.journal.violation(format!(
                "bucket {bucket}: Mink-Next-Offset is {n} but the batches end at {next}"
            ));
            next = n;
        }
    }
    lock(&ctx.journal.reader_batches).insert(bucket, seen);
}

fn parse_batches(body: &Bytes) -> Result<Vec<SeenBatch>, Error> {
    mink_codec::batches(body.clone())
        .map(|b| {
            let b = b.map_err(|e| e.to_string())?;
            Ok(SeenBatch {
                base_offset: u64::try_from(b.base_offset()).map_err(|e| e.to_string())?,
                record_count: u64::try_from(b.record_count()).map_err(|e| e.to_string())?,
                writer_id: b.writer_id(),
                sequence: b.batch_sequence(),
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The final read and the checks

/// A batch of the final log with its row ids.
struct LoggedBatch {
    batch: SeenBatch,
    rows: Vec<i64>,
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, true),
    ]))
}

/// Reads a whole bucket from offset 0 to its high watermark.
async fn read_all(ctx: &Ctx, bucket: u32) -> Result<(Vec<LoggedBatch>, u64), Error> {
    let schema = schema();
    let mut out = Vec::new();
    let mut next = 0u64;
    let mut failures = 0;
    loop {
        let answer = ctx
            .http
            .get(format!("{}?offset={next}", records_url(ctx, bucket)))
            .header("accept", MINK_BATCHES)
            .timeout(Duration::from_secs(60))
            .send()
            .await;
        let response = match answer {
            Ok(r) if r.status() == StatusCode::OK => r,
            other => {
                failures += 1;
                if failures > 20 {
                    return Err(format!(
                        "bucket {bucket}: the final read at offset {next} keeps failing: {:?}",
                        other.map(|r| r.status())
                    ));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let hw = header_u64(&response, "mink-high-watermark").unwrap_or(0);
        let log_start = header_u64(&response, "mink-log-start").unwrap_or(0);
        if log_start != 0 {
            return Err(format!(
                "bucket {bucket}: the log starts at {log_start}, not 0 (nothing was trimmed)"
            ));
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("bucket {bucket}: final read body: {e}"))?;
        let mut progressed = false;
        for view in mink_codec::batches(body) {
            let view = view.map_err(|e| format!("bucket {bucket}: final read: {e}"))?;
            let (rows, _) = view
                .decode(&schema)
                .map_err(|e| format!("bucket {bucket}: batch at {}: {e}", view.base_offset()))?;
            let ids = rows
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or(format!("bucket {bucket}: the id column is not int64"))?;
            let batch = SeenBatch {
                base_offset: u64::try_from(view.base_offset()).unwrap_or(u64::MAX),
                record_count: u64::try_from(view.record_count()).unwrap_or(0),
                writer_id: view.writer_id(),
                sequence: view.batch_sequence(),
            };
            next = batch.base_offset.saturating_add(batch.record_count);
            progressed = true;
            out.push(LoggedBatch {
                batch,
                rows: (0..ids.len()).map(|i| ids.value(i)).collect(),
            });
        }
        if next >= hw {
            return Ok((out, hw));
        }
        if !progressed {
            return Err(format!(
                "bucket {bucket}: the final read at {next} returned nothing below the high \
                 watermark {hw}"
            ));
        }
    }
}

#[derive(Default)]
struct Tally {
    acked_rows: u64,
    acked_batches: u64,
    lost: u64,
    duplicated: u64,
    logged_rows: u64,
}

/// Checks one bucket's final log against the acknowledgements and the reader's view.
fn check_bucket(
    bucket: u32,
    log: &[LoggedBatch],
    acks: &[&Ack],
    reader: Option<&Vec<SeenBatch>>,
    tally: &mut Tally,
) -> Vec<String> {
    let mut problems = Vec::new();
    // Offsets contiguous from 0.
    let mut expected = 0u64;
    for b in log {
        if b.batch.base_offset != expected {
            problems.push(format!(
                "bucket {bucket}: offsets not contiguous: expected a batch at {expected}, found \
                 one at {} (writer {} sequence {})",
                b.batch.base_offset, b.batch.writer_id, b.batch.sequence
            ));
        }
        if b.rows.len() as u64 != b.batch.record_count {
            problems.push(format!(
                "bucket {bucket}: the batch at {} says {} records and holds {} rows",
                b.batch.base_offset,
                b.batch.record_count,
                b.rows.len()
            ));
        }
        expected = b.batch.base_offset + b.batch.record_count;
    }
    // Row ids exactly once.
    let mut where_row: HashMap<i64, Vec<u64>> = HashMap::new();
    for b in log {
        for (i, id) in b.rows.iter().enumerate() {
            where_row
                .entry(*id)
                .or_default()
                .push(b.batch.base_offset + i as u64);
        }
        tally.logged_rows += b.rows.len() as u64;
    }
    let mut duplicated: BTreeMap<i64, &Vec<u64>> = BTreeMap::new();
    for (id, offsets) in &where_row {
        if offsets.len() > 1 {
            duplicated.insert(*id, offsets);
        }
    }
    tally.duplicated += duplicated.values().map(|o| o.len() as u64 - 1).sum::<u64>();
    for (id, offsets) in duplicated.iter().take(20) {
        problems.push(format!(
            "bucket {bucket}: row {id} is in the log {} times, at offsets {offsets:?}",
            offsets.len()
        ));
    }
    // Every acknowledged batch where its acknowledgement said; every logged batch acknowledged.
    let by_offset: HashMap<u64, &LoggedBatch> =
        log.iter().map(|b| (b.batch.base_offset, b)).collect();
    let mut acked_keys = HashMap::new();
    let mut lost_rows = Vec::new();
    for ack in acks {
        tally.acked_batches += 1;
        tally.acked_rows += ack.rows.len() as u64;
        if let Some(previous) = acked_keys.insert((ack.writer_id, ack.sequence), ack.base_offset)
            && previous != ack.base_offset
        {
            problems.push(format!(
                "bucket {bucket}: writer {} sequence {} was acknowledged at offset {previous} and \
                 again at {}",
                ack.writer_id, ack.sequence, ack.base_offset
            ));
        }
        for (i, id) in ack.rows.iter().enumerate() {
            let at = ack.base_offset + i as u64;
            match where_row.get(id) {
                None => lost_rows.push((*id, at)),
                Some(offsets) if !offsets.contains(&at) => problems.push(format!(
                    "bucket {bucket}: row {id} was acknowledged at offset {at} but is at \
                     {offsets:?}"
                )),
                Some(_) => {}
            }
        }
        match by_offset.get(&ack.base_offset) {
            Some(b) if b.batch.writer_id == ack.writer_id && b.batch.sequence == ack.sequence => {}
            Some(b) => problems.push(format!(
                "bucket {bucket}: offset {} was acknowledged to writer {} sequence {} but holds \
                 writer {} sequence {}",
                ack.base_offset, ack.writer_id, ack.sequence, b.batch.writer_id, b.batch.sequence
            )),
            None => problems.push(format!(
                "bucket {bucket}: no batch starts at offset {}, acknowledged to writer {} \
                 sequence {}",
                ack.base_offset, ack.writer_id, ack.sequence
            )),
        }
    }
    tally.lost += lost_rows.len() as u64;
    for (id, at) in lost_rows.iter().take(20) {
        problems.push(format!(
            "bucket {bucket}: acknowledged row {id} (offset {at}) is lost"
        ));
    }
    for b in log {
        if !acked_keys.contains_key(&(b.batch.writer_id, b.batch.sequence)) {
            problems.push(format!(
                "bucket {bucket}: the batch at {} (writer {} sequence {}) was never acknowledged \
                 to anyone",
                b.batch.base_offset, b.batch.writer_id, b.batch.sequence
            ));
        }
    }
    // The reader saw a prefix of the final log.
    if let Some(seen) = reader {
        for (i, s) in seen.iter().enumerate() {
            match log.get(i) {
                Some(b) if b.batch == *s => {}
                other => {
                    problems.push(format!(
                        "bucket {bucket}: the reader's batch #{i} {s:?} differs from the final \
                         log's {:?}",
                        other.map(|b| &b.batch)
                    ));
                    break;
                }
            }
        }
        if seen.len() != log.len() {
            problems.push(format!(
                "bucket {bucket}: the reader read {} batches, the log holds {}",
                seen.len(),
                log.len()
            ));
        }
    } else {
        problems.push(format!("bucket {bucket}: the reader did not finish"));
    }
    problems
}

// ---------------------------------------------------------------------------------------------
// The run

async fn create_table(ctx: &Ctx, buckets: u32) -> Result<(), Error> {
    let body = serde_json::json!({
        "name": TABLE,
        "buckets": buckets,
        "schema": {"fields": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "msg", "type": "utf8"}
        ]}
    });
    for _ in 0..50 {
        match ctx
            .http
            .post(format!("{}/v1/tables", ctx.url))
            .json(&body)
            .timeout(Duration::from_secs(30))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() || r.status() == StatusCode::CONFLICT => {
                return Ok(());
            }
            Ok(r) if r.status().is_client_error() => {
                return Err(format!(
                    "creating the table failed: {} {}",
                    r.status(),
                    r.text().await.unwrap_or_default()
                ));
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    Err("creating the table kept failing".to_owned())
}

fn acked_count(ctx: &Ctx) -> usize {
    lock(&ctx.journal.acks).len()
}

/// Outcome of a run, for the summary.
struct Report {
    kills: u32,
    faulty_lives: u32,
    tally: Tally,
    problems: Vec<String>,
}

async fn run(options: Options) -> Result<Report, Error> {
    let scratch;
    let dir = match &options.dir {
        Some(d) => d.clone(),
        None => {
            scratch = std::env::temp_dir().join(format!(
                "mink-chaos-{}-{}",
                std::process::id(),
                options.seed
            ));
            scratch.clone()
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    // Run a private copy: a build in the shared target folder must not swap the binary mid-run.
    let mut options = options;
    let copy = dir.join("mink");
    std::fs::copy(&options.node, &copy)
        .map_err(|e| format!("copy {} to {}: {e}", options.node.display(), copy.display()))?;
    options.node = copy;
    let mut node = NodeProcess::new(&options, &dir)?;
    eprintln!(
        "mink_chaos: backend {:?}, seed {}, {} kills over ~{}s, {} buckets x {} writers, faults \
         in {:.0}% of lives; node on {}, files in {}",
        options.backend,
        options.seed,
        options.kills,
        options.seconds,
        options.buckets,
        options.writers,
        options.faults * 100.0,
        node.url(),
        dir.display()
    );
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .pool_idle_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let ctx = Arc::new(Ctx {
        url: node.url(),
        http: http.clone(),
        journal: Journal::default(),
        stop_writing: AtomicBool::new(false),
        reader_targets: Mutex::new(HashMap::new()),
        deadline: Instant::now()
            + Duration::from_secs_f64(options.seconds * 3.0)
            + mink_tests::node::START_TIMEOUT * (options.kills + 2).min(4)
            + SETTLE_TIMEOUT,
    });
    let mut rng = Rng::new(options.seed);

    node.start(None)?;
    node.wait_ready(&http).await?;
    create_table(&ctx, options.buckets).await?;

    let mut tasks = Vec::new();
    let mut readers = Vec::new();
    for bucket in 0..options.buckets {
        for w in 0..options.writers {
            let ordinal = i64::from(bucket * options.writers + w);
            tasks.push(tokio::spawn(writer(
                ctx.clone(),
                bucket,
                ordinal,
                Rng::new(rng.next_u64()),
            )));
        }
        readers.push(tokio::spawn(reader(ctx.clone(), bucket)));
    }

    // The kill phase.
    let mean = options.seconds / f64::from(options.kills.max(1));
    let mut faulty_lives = 0;
    for kill in 1..=options.kills {
        let life_started = Instant::now();
        let acked_before = acked_count(&ctx);
        let early = rng.unit() < 0.15;
        let wait = Duration::from_secs_f64(mean * (0.3 + 1.4 * rng.unit()));
        if early {
            // Kill while the node is still starting or recovering.
            tokio::time::sleep(Duration::from_millis(rng.between(0, 300))).await;
        } else {
            node.wait_ready(&http).await?;
            // Wait for the moment, and for some progress in this life (unless faults stall it).
            while life_started.elapsed() < wait
                || (acked_count(&ctx) == acked_before
                    && life_started.elapsed() < wait + Duration::from_secs(5))
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        node.kill()?;
        eprintln!(
            "mink_chaos: kill {kill}/{} after {:.2}s of life{} ({} acknowledged so far)",
            options.kills,
            life_started.elapsed().as_secs_f64(),
            if early { ", during start" } else { "" },
            acked_count(&ctx)
        );
        let faults = (kill < options.kills && rng.unit() < options.faults).then(|| {
            // A third of the faulty lives give the WAL a short deadline, so it really fails.
            let wal_deadline_ms = (rng.unit() < 0.33).then_some(50);
            let rates: &[f64] = if wal_deadline_ms.is_some() {
                &[0.2, 0.4]
            } else {
                &[0.05, 0.2, 0.4]
            };
            Faults {
                put_failure_rate: rng.pick(rates),
                put_delay_ms: rng.pick(&[0, 0, 20, 100, 400]),
                fail_after_write: rng.unit() < 0.5,
                wal_deadline_ms,
                seed: rng.next_u64() >> 1,
            }
        });
        faulty_lives += u32::from(faults.is_some());
        node.start(faults)?;
    }

    // The final life: no faults, no kills.
    node.wait_ready(&http).await?;
    ctx.stop_writing.store(true, Ordering::SeqCst);
    for t in tasks {
        if tokio::time::timeout(SETTLE_TIMEOUT, t).await.is_err() {
            ctx.journal
                .violation("a writer did not finish in the final life".to_owned());
        }
    }
    let mut logs = Vec::new();
    for bucket in 0..options.buckets {
        let (log, hw) = read_all(&ctx, bucket).await?;
        lock(&ctx.reader_targets).insert(bucket, hw);
        logs.push(log);
    }
    for r in readers {
        if tokio::time::timeout(SETTLE_TIMEOUT, r).await.is_err() {
            ctx.journal
                .violation("a reader did not catch up in the final life".to_owned());
        }
    }
    let clean_stop = node.stop(Duration::from_secs(60));
    if !clean_stop {
        eprintln!(
            "mink_chaos: warning: the node did not stop cleanly on SIGTERM; see {}",
            node.process.log().display()
        );
    }

    let acks = lock(&ctx.journal.acks).clone();
    let readers = lock(&ctx.journal.reader_batches).clone();
    let mut problems = lock(&ctx.journal.violations).clone();
    let mut tally = Tally::default();
    for (bucket, log) in logs.iter().enumerate() {
        let bucket = bucket as u32;
        let mine: Vec<&Ack> = acks.iter().filter(|a| a.bucket == bucket).collect();
        problems.extend(check_bucket(
            bucket,
            log,
            &mine,
            readers.get(&bucket),
            &mut tally,
        ));
    }
    let j = &ctx.journal;
    eprintln!(
        "mink_chaos: {} acknowledged batches ({} answered as duplicates of an earlier try), {} \
         append retries, {} rows in the log, {} reader reconnects, {} high watermarks checked, \
         {} node lives ({} with faults)",
        tally.acked_batches,
        j.duplicate_acks.load(Ordering::Relaxed),
        j.append_retries.load(Ordering::Relaxed),
        tally.logged_rows,
        j.reader_reconnects.load(Ordering::Relaxed),
        j.high_watermarks_seen.load(Ordering::Relaxed),
        node.lives,
        faulty_lives
    );
    if problems.is_empty() && options.dir.is_none() {
        drop(node);
        let _ = std::fs::remove_dir_all(&dir);
    } else if !problems.is_empty() {
        eprintln!(
            "mink_chaos: the node's log and data are kept in {}",
            dir.display()
        );
    }
    Ok(Report {
        kills: options.kills,
        faulty_lives,
        tally,
        problems,
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(message) => {
            eprintln!("mink_chaos: {message}");
            return ExitCode::from(2);
        }
    };
    let seed = options.seed;
    let backend = options.backend;
    match run(options).await {
        Ok(report) => summarize(&report, seed, backend),
        Err(message) => {
            eprintln!("mink_chaos: the run could not complete (seed {seed}): {message}");
            ExitCode::from(2)
        }
    }
}

#[expect(clippy::print_stdout, reason = "the summary is the command's output")]
fn summarize(report: &Report, seed: u64, backend: Backend) -> ExitCode {
    for p in &report.problems {
        eprintln!("mink_chaos: VIOLATION: {p}");
    }
    let t = &report.tally;
    println!(
        "{} kills, {} acknowledged, {} lost, {} duplicated",
        report.kills, t.acked_rows, t.lost, t.duplicated
    );
    let _ = std::io::stdout().flush();
    if report.problems.is_empty() {
        eprintln!(
            "mink_chaos: OK ({backend:?}, seed {seed}, {} lives with faults)",
            report.faulty_lives
        );
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "mink_chaos: FAILED with {} violations ({backend:?}, seed {seed}; rerun with --seed \
             {seed})",
            report.problems.len()
        );
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base: u64, writer_id: i64, sequence: i32, rows: &[i64]) -> LoggedBatch {
        LoggedBatch {
            batch: SeenBatch {
                base_offset: base,
                record_count: rows.len() as u64,
                writer_id,
                sequence,
            },
            rows: rows.to_vec(),
        }
    }

    fn ack(base: u64, writer_id: i64, sequence: i32, rows: &[i64]) -> Ack {
        Ack {
            bucket: 0,
            writer_id,
            sequence,
            base_offset: base,
            rows: rows.to_vec(),
        }
    }

    fn check(log: &[LoggedBatch], acks: &[Ack], reader: &[SeenBatch]) -> (Vec<String>, Tally) {
        let mut tally = Tally::default();
        let acks: Vec<&Ack> = acks.iter().collect();
        let reader = reader.to_vec();
        let problems = check_bucket(0, log, &acks, Some(&reader), &mut tally);
        (problems, tally)
    }

    #[test]
    fn a_clean_log_passes() {
        let log = [batch(0, 1, 0, &[10, 11]), batch(2, 2, 0, &[20])];
        let acks = [ack(0, 1, 0, &[10, 11]), ack(2, 2, 0, &[20])];
        let seen: Vec<SeenBatch> = log.iter().map(|b| b.batch.clone()).collect();
        let (problems, tally) = check(&log, &acks, &seen);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!((tally.acked_rows, tally.lost, tally.duplicated), (3, 0, 0));
    }

    #[test]
    fn a_duplicated_row_a_lost_row_and_a_gap_are_reported() {
        // Writer 1's batch was appended twice (a retry not recognised as a duplicate), writer
        // 2's acknowledged batch is missing, and offset 4 is skipped.
        let log = [
            batch(0, 1, 0, &[10, 11]),
            batch(2, 1, 0, &[10, 11]),
            batch(5, 3, 0, &[30]),
        ];
        let acks = [
            ack(0, 1, 0, &[10, 11]),
            ack(4, 2, 0, &[20]),
            ack(5, 3, 0, &[30]),
        ];
        let seen: Vec<SeenBatch> = log.iter().map(|b| b.batch.clone()).collect();
        let (problems, tally) = check(&log, &acks, &seen);
        assert_eq!((tally.lost, tally.duplicated), (1, 2));
        let text = problems.join("\n");
        assert!(text.contains("row 10 is in the log 2 times"), "{text}");
        assert!(
            text.contains("acknowledged row 20 (offset 4) is lost"),
            "{text}"
        );
        assert!(text.contains("expected a batch at 4"), "{text}");
    }

    #[test]
    fn a_reader_that_saw_data_the_log_no_longer_holds_is_reported() {
        let log = [batch(0, 1, 0, &[10])];
        let acks = [ack(0, 1, 0, &[10])];
        let phantom = SeenBatch {
            base_offset: 0,
            record_count: 1,
            writer_id: 9,
            sequence: 0,
        };
        let (problems, _) = check(&log, &acks, &[phantom]);
        assert!(
            problems
                .iter()
                .any(|p| p.contains("differs from the final log")),
            "{problems:?}"
        );
    }

    #[test]
    fn options_parse_and_reject_unknown_flags() {
        let args = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let o = Options::parse(args(
            "--node /bin/mink --kills 7 --backend s3-etcd --seed 3",
        ))
        .unwrap();
        assert_eq!((o.kills, o.backend, o.seed), (7, Backend::S3Etcd, 3));
        assert_eq!(o.seconds, 14.0);
        assert!(Options::parse(args("--node x --kill 3")).is_err());
        assert!(Options::parse(args("--kills 3")).is_err());
    }
}
