//! Items 2 and 7: group commit with 1, 100 and 1000 buckets against raw PUT throughput (sequential,
//! and with as many PUTs in flight as the WAL keeps, of the objects the case wrote), where each
//! append's time went (the node's stage histograms, docs/append-stages.md), and the node's peak
//! RSS during it beside its cache budgets.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mink_s3stream::engine::EngineSettings;
use mink_server::settings::HttpSettings;

use crate::histogram::{HistogramDelta, delta};
use crate::node::{cpu_seconds, proc_kib};
use crate::raw::{raw_put_concurrent, raw_put_throughput};
use crate::report::{Pct, RUNS, median, ms, pct, spread, spread_ratio, verdict};
use crate::rows::{kv_fields, mink_batch};
use crate::{GROUP_ROWS, MINK_BATCHES};

use super::Bench;
use crate::Error;
use crate::client::Client;

/// The cases: how many buckets the writers spread over.
const CASES: [u32; 3] = [1, 100, 1000];

impl Bench {
    /// Items 2 and 7: group commit with 1, 100 and 1000 buckets, each case [`RUNS`] times; the
    /// node's peak RSS.
    pub(crate) async fn group_commit(&mut self) -> Result<(), Error> {
        let quick = self.options.quick;
        let seconds = if quick { 5.0 } else { 10.0 };
        // The raw PUTs at the node's concurrency that follow each run.
        let raw_seconds = if quick { 3.0 } else { 5.0 };
        let raw_mbps =
            raw_put_throughput(self.raw.as_ref(), Duration::from_secs_f64(seconds)).await?;
        let body = mink_batch(GROUP_ROWS)?;
        let pid = self.node.pid().ok_or("the node is not running")?;
        let peak_rss = Arc::new(AtomicU64::new(0));
        let peak_inflight = Arc::new(AtomicU64::new(0));
        let sampling = Arc::new(AtomicBool::new(true));
        let sampler = {
            let (peak, inflight, sampling) =
                (peak_rss.clone(), peak_inflight.clone(), sampling.clone());
            let client = Client {
                http: self.client.http.clone(),
                url: self.client.url.clone(),
            };
            tokio::spawn(async move {
                while sampling.load(Ordering::Relaxed) {
                    if let Some(kib) = proc_kib(pid, "VmRSS:") {
                        peak.fetch_max(kib, Ordering::Relaxed);
                    }
                    if let Ok(bytes) = client.metric("http_inflight_request_bytes").await {
                        inflight.fetch_max(bytes as u64, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        let _ = write!(
            self.report.md,
            "### 2. Group commit: concurrent writers, each with one request of {GROUP_ROWS} rows of \
             1 KiB ({} KiB, one mink batch) in flight, {seconds:.0} s per case\n\n\
             Each case runs {RUNS} times, on a fresh table each time (so each run opens its \
             buckets' tablets); a figure is the median of the runs, with the lowest and the highest \
             in brackets, and a goal is met when the median meets it. The tables are dropped \
             after the item, so later items run while the node collects their objects.\n\n\
             Baseline: raw sequential PUTs of 8 MiB objects to the same store for {seconds:.0} s: **{raw_mbps:.1} MB/s**.\n\n\
             | buckets | writers | MB/s | rows/s | ratio to raw PUT MB/s | WAL PUTs/s | p50 ms | p99 ms | goal >= 0.8x |\n\
             |---|---|---|---|---|---|---|---|---|\n",
            body.len() >> 10
        );
        let inflight = EngineSettings::default().wal.max_inflight_puts;
        let mut cases = Vec::new();
        for buckets in CASES {
            let mut runs = Vec::new();
            let mut pooled = Vec::new();
            for run in 0..RUNS {
                let table = case_table(buckets, run);
                self.client
                    .create_table(&table, kv_fields(), buckets)
                    .await?;
                let (mut case, latencies) = self
                    .group_case(&table, buckets, &body, seconds, pid)
                    .await?;
                pooled.extend(latencies);
                // The store's limit at the node's concurrency, right after the run: raw PUTs with
                // as many in flight as the WAL keeps, of the run's mean WAL object. The driver's CPU
                // meanwhile is what the store's PUTs cost a client: on local files (and the S3
                // model over them) the file system's work, which the node pays in-process too.
                let (mbps, mut latencies, raw_cpu_per_gb) = raw_put_concurrent(
                    self.raw.clone(),
                    Duration::from_secs_f64(raw_seconds),
                    case.object_bytes as usize,
                    inflight,
                )
                .await?;
                case.raw_mbps = mbps;
                case.raw = pct(&mut latencies);
                case.raw_cpu_per_gb = raw_cpu_per_gb;
                runs.push(case);
            }
            let p = pct(&mut pooled);
            self.report
                .latency(&format!("2. group commit, {buckets} buckets"), &p);
            let writers = buckets.max(256);
            let (median_mbps, _, _) = median(runs.iter().map(|c| c.mbps));
            let _ = writeln!(
                self.report.md,
                "| {buckets} | {writers} | {} | {} | {} | {} | {} | {} | {} |",
                spread(runs.iter().map(|c| c.mbps), 1),
                spread(runs.iter().map(|c| c.rows_per_s), 0),
                spread_ratio(runs.iter().map(|c| c.mbps / raw_mbps)),
                spread(runs.iter().map(|c| c.wal_puts_per_s), 0),
                spread(runs.iter().map(|c| c.p.p50), 1),
                spread(runs.iter().map(|c| c.p.p99), 1),
                verdict(median_mbps / raw_mbps >= 0.8),
            );
            cases.push(runs);
        }
        self.report.md.push('\n');
        self.concurrency_and_stages(&cases, inflight, raw_seconds);
        sampling.store(false, Ordering::Relaxed);
        let _ = sampler.await;
        let hwm = proc_kib(pid, "VmHWM:").unwrap_or(0);
        let settings = EngineSettings::default();
        let mib = |b: u64| b >> 20;
        let request_budget = HttpSettings::default().max_inflight_request_bytes as u64;
        let budget = settings.cache.tail.capacity_bytes
            + settings.cache.block.memory_bytes
            + settings.cache.block.index_capacity_bytes
            + settings.cache.block.decoded_bytes
            + settings.max_uncompacted_bytes
            + request_budget;
        let _ = write!(
            self.report.rss_md,
            "### 7. Peak RSS of the node (a fresh life of the node running item 2)\n\n\
             | | MiB |\n|---|---|\n\
             | VmHWM (peak resident set, /proc/{pid}/status) | **{}** |\n\
             | highest VmRSS sampled every 100 ms during item 2 | {} |\n\
             | tail cache budget (`engine.cache.tail.capacity_bytes`) | {} |\n\
             | block cache memory budget (`engine.cache.block.memory_bytes`) | {} |\n\
             | object index cache budget (`engine.cache.block.index_capacity_bytes`) | {} |\n\
             | decoded blocks budget (`engine.cache.block.decoded_bytes`) | {} |\n\
             | max uncompacted bytes (`engine.max_uncompacted_bytes`) | {} |\n\
             | request bytes in flight budget (`http.max_inflight_request_bytes`) | {} |\n\
             | highest request bytes in flight sampled (`mink_http_inflight_request_bytes`) | {} |\n\
             | sum of the budgets | {} |\n\n\
             Peak RSS is {:.0}% of the sum of the budgets (defaults; the node ran with no cache \
             settings; goal <= 120%: {}). The WAL's log cache holds uncompacted data, so it is \
             bounded by max uncompacted bytes; request bodies in flight (writers x {} KiB) are \
             bounded by the request budget; the HTTP and Arrow buffers come on top, and so does \
             memory the allocator keeps after it is freed (for 10 s: \
             `server/src/bin/mink/allocator.rs`, docs/performance-notes.md).\n\n",
            hwm >> 10,
            peak_rss.load(Ordering::Relaxed) >> 10,
            mib(settings.cache.tail.capacity_bytes),
            mib(settings.cache.block.memory_bytes),
            mib(settings.cache.block.index_capacity_bytes),
            mib(settings.cache.block.decoded_bytes),
            mib(settings.max_uncompacted_bytes),
            mib(request_budget),
            mib(peak_inflight.load(Ordering::Relaxed)),
            mib(budget),
            100.0 * (hwm << 10) as f64 / budget as f64,
            verdict((hwm << 10) as f64 <= 1.2 * budget as f64),
            body.len() >> 10,
        );
        // A full run appends tens of GB here: the tables are dropped so that the run's disk use
        // stays bounded (the node collects their objects in the background while later items
        // run).
        for buckets in CASES {
            for run in 0..RUNS {
                self.client.drop_table(&case_table(buckets, run)).await?;
            }
        }
        Ok(())
    }
}

/// The table of one run of a case.
fn case_table(buckets: u32, run: usize) -> String {
    format!("group{buckets}r{run}")
}

impl Bench {
    /// One run of a group-commit case: `buckets` buckets of `table`, `max(buckets, 256)` writers
    /// for `seconds`. Returns what it measured and the client's latencies.
    async fn group_case(
        &mut self,
        table: &str,
        buckets: u32,
        body: &bytes::Bytes,
        seconds: f64,
        pid: u32,
    ) -> Result<(Case, Vec<f64>), Error> {
        let writers = buckets.max(256);
        let before = self.client.metrics().await?;
        let cpu0 = (cpu_seconds(pid), cpu_seconds(std::process::id()));
        let started = Instant::now();
        let deadline = started + Duration::from_secs_f64(seconds);
        let mut tasks = Vec::new();
        for w in 0..writers {
            let http = self.client.http.clone();
            let url = self.client.records(table, w % buckets);
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
                        .map_err(|e| format!("append: {}", crate::client::chain(&e)))?;
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
        let mut later = Vec::new();
        for task in tasks {
            let writer = task.await.map_err(|e| format!("writer task: {e}"))??;
            // A writer's first request may open its connection and its bucket's tablet; the
            // rest reuse both.
            later.extend(writer.iter().skip(1).copied());
            latencies.extend(writer);
        }
        let later = pct(&mut later);
        let elapsed = started.elapsed().as_secs_f64();
        let cpu1 = (cpu_seconds(pid), cpu_seconds(std::process::id()));
        let after = self.client.metrics().await?;
        let gained = |name: &str| {
            let key = format!("mink_{name}_total");
            after.get(&key).copied().unwrap_or(0.0) - before.get(&key).copied().unwrap_or(0.0)
        };
        let puts = gained("wal_puts");
        let put_bytes = gained("wal_put_bytes");
        let writes = StoreWrites {
            wal_puts: puts,
            wal_hedges: gained("wal_put_hedges"),
            wal_bytes: put_bytes,
            object_puts: gained("object_puts"),
            object_bytes: gained("object_put_bytes"),
            appended_bytes: gained("append_bytes"),
        };
        let requests = latencies.len() as f64;
        let mut sorted = latencies.clone();
        let p = pct(&mut sorted);
        let stage = |name: &str| {
            delta(
                &before,
                &after,
                "mink_append_stage_duration_seconds",
                &[("stage", name)],
            )
        };
        let cpu = |(a, b): (Option<f64>, Option<f64>)| b.zip(a).map(|(b, a)| b - a);
        let case = Case {
            buckets,
            mbps: requests * body.len() as f64 / elapsed / 1e6,
            rows_per_s: requests * GROUP_ROWS as f64 / elapsed,
            wal_puts_per_s: puts / elapsed,
            p,
            later,
            object_bytes: if puts > 0.0 { put_bytes / puts } else { 0.0 },
            node_total: delta(&before, &after, "mink_append_duration_seconds", &[]),
            node_put: delta(
                &before,
                &after,
                "mink_object_request_duration_seconds",
                &[("op", "put"), ("kind", "wal")],
            ),
            node_upload: delta(&before, &after, "mink_wal_upload_duration_seconds", &[]),
            opens: delta(&before, &after, "mink_log_open_duration_seconds", &[]),
            open_waits: delta(&before, &after, "mink_log_open_wait_seconds", &[]),
            stages: mink_s3stream::AppendStage::ALL
                .iter()
                .map(|s| (s.name(), stage(s.name())))
                .collect(),
            node_cpu: cpu((cpu0.0, cpu1.0)),
            driver_cpu: cpu((cpu0.1, cpu1.1)),
            appended_gb: requests * body.len() as f64 / 1e9,
            writes,
            seconds: elapsed,
            raw_mbps: 0.0,
            raw: Pct::default(),
            raw_cpu_per_gb: None,
        };
        Ok((case, latencies))
    }
}

/// What one run of a group-commit case measured, for the tables after the first.
struct Case {
    buckets: u32,
    mbps: f64,
    rows_per_s: f64,
    wal_puts_per_s: f64,
    /// The client's append latencies.
    p: Pct,
    /// The same without each writer's first request (which may open its connection).
    later: Pct,
    /// Mean size of the WAL objects the case wrote.
    object_bytes: f64,
    /// `mink_append_duration_seconds`: the core taking the request to its acknowledgement.
    node_total: HistogramDelta,
    /// The node's WAL PUTs (`mink_object_request_duration_seconds{op="put",kind="wal"}`).
    node_put: HistogramDelta,
    /// Each WAL group's upload, once per group (`mink_wal_upload_duration_seconds`).
    node_upload: HistogramDelta,
    /// The tablets the run opened (`mink_log_open_duration_seconds`), and their first uses'
    /// waits for an open slot (`mink_log_open_wait_seconds`).
    opens: HistogramDelta,
    open_waits: HistogramDelta,
    stages: Vec<(&'static str, HistogramDelta)>,
    node_cpu: Option<f64>,
    driver_cpu: Option<f64>,
    appended_gb: f64,
    writes: StoreWrites,
    seconds: f64,
    /// Raw PUTs at the WAL's concurrency right after the run: MB/s and latencies.
    raw_mbps: f64,
    raw: Pct,
    /// The driver's CPU seconds per GB written by those raw PUTs.
    raw_cpu_per_gb: Option<f64>,
}

/// What a case wrote to the store, from the node's counters.
struct StoreWrites {
    wal_puts: f64,
    /// Second requests of hedged WAL PUTs (docs/hedged-puts.md): requests, not objects.
    wal_hedges: f64,
    wal_bytes: f64,
    /// Committed objects written by compaction (and merges or regrouping, if they ran).
    object_puts: f64,
    object_bytes: f64,
    appended_bytes: f64,
}

/// S3 Standard's price of a PUT (us-east-1, $0.005 per 1,000 requests).
pub(crate) const PUT_PRICE: f64 = 0.005 / 1000.0;

impl Bench {
    /// Item 2's second and third tables: each case beside raw PUTs with as many in flight as the
    /// WAL keeps, of the objects that case wrote (medians of the runs); then where its appends'
    /// time went, in the run with the median throughput.
    fn concurrency_and_stages(&mut self, cases: &[Vec<Case>], inflight: usize, raw_seconds: f64) {
        let _ = write!(
            self.report.md,
            "Against the store's limit at the node's concurrency: raw PUTs with {inflight} in flight \
             (`engine.wal.max_inflight_puts`) of objects as large as the run's mean WAL object, for \
             {raw_seconds:.0} s right after each run. CPU is the node's (and the driver's) CPU seconds \
             during the run per GB appended; `raw PUT CPU-s/GB` is the driver's CPU seconds per GB \
             those raw PUTs wrote, what the store's PUTs cost the process that makes them (on local \
             files and the S3 Standard model, which runs over them, the file system's work, which \
             the node's figure includes too; on moto only the client's side). Medians of the {RUNS} runs, lowest and highest in \
             brackets; each ratio is taken within its run.\n\n\
             | buckets | WAL object KiB | raw PUT MB/s at {inflight} in flight | ratio | goal >= 0.8x | raw PUT p50 / p99 ms | append p99 / p50 | goal <= 3x | append p99 against 2x raw p99 + p50 | goal | node CPU-s/GB | driver CPU-s/GB | raw PUT CPU-s/GB |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
        );
        for runs in cases {
            let Some(first) = runs.first() else {
                continue;
            };
            let ratio = |c: &Case| c.mbps / c.raw_mbps.max(1e-9);
            let tail = |c: &Case| c.p.p99 / c.p.p50.max(1e-9);
            // The tail goal as a ratio: append p99 over its bound (<= 1 meets it).
            let bound = |c: &Case| c.p.p99 / (2.0 * c.raw.p99 + c.p.p50).max(1e-9);
            let figures = |v: Vec<f64>| {
                if v.is_empty() {
                    "-".to_owned()
                } else {
                    spread(v, 2)
                }
            };
            let per_gb = |cpu: fn(&Case) -> Option<f64>| {
                figures(
                    runs.iter()
                        .filter_map(|c| Some(cpu(c)? / c.appended_gb.max(1e-9)))
                        .collect(),
                )
            };
            let (median_ratio, _, _) = median(runs.iter().map(ratio));
            let (median_tail, _, _) = median(runs.iter().map(tail));
            let (median_bound, _, _) = median(runs.iter().map(bound));
            let _ = writeln!(
                self.report.md,
                "| {} | {} | {} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} | {} |",
                first.buckets,
                spread(runs.iter().map(|c| c.object_bytes / 1024.0), 0),
                spread(runs.iter().map(|c| c.raw_mbps), 1),
                spread_ratio(runs.iter().map(ratio)),
                verdict(median_ratio >= 0.8),
                spread(runs.iter().map(|c| c.raw.p50), 1),
                spread(runs.iter().map(|c| c.raw.p99), 1),
                spread_ratio(runs.iter().map(tail)),
                verdict(median_tail <= 3.0),
                spread_ratio(runs.iter().map(bound)),
                verdict(median_bound <= 1.0),
                per_gb(|c| c.node_cpu),
                per_gb(|c| c.driver_cpu),
                figures(runs.iter().filter_map(|c| c.raw_cpu_per_gb).collect()),
            );
        }
        let _ = write!(
            self.report.md,
            "\nWhere the appends' time went, from the node's histograms \
             (`mink_append_stage_duration_seconds{{stage}}`, docs/append-stages.md; quantiles \
             interpolated inside buckets that step by 1.41x), in each case's run with the median \
             throughput. The stages add up to the engine's part \
             of an append; `node total` is the core taking the request to its acknowledgement \
             (parsing and checking the batches included), `client` the writer's whole request; \
             `WAL PUT` is the node's PUT requests as the store answered them, and `WAL group upload` \
             each group's put stage counted once (the stage above counts it once per append). \
             `tablet open` is each bucket's first use in the run (`mink_log_open_duration_seconds`, \
             256 at a time), before the first append's stages start; its share compares one open \
             with one append.\n\n\
             | buckets | stage | mean ms | p50 ms | p99 ms | share of the node's mean |\n\
             |---|---|---|---|---|---|\n"
        );
        for runs in cases {
            let mut by_mbps: Vec<&Case> = runs.iter().collect();
            by_mbps.sort_by(|a, b| a.mbps.total_cmp(&b.mbps));
            let Some(case) = by_mbps.get(by_mbps.len() / 2) else {
                continue;
            };
            let total = case.node_total.mean_ms().max(1e-9);
            let mut row = |name: &str, h: &HistogramDelta| {
                let _ = writeln!(
                    self.report.md,
                    "| {} | {name} | {:.2} | {:.2} | {:.2} | {:.0}% |",
                    case.buckets,
                    h.mean_ms(),
                    h.quantile_ms(0.5),
                    h.quantile_ms(0.99),
                    100.0 * h.mean_ms() / total,
                );
            };
            for (name, h) in &case.stages {
                row(name, h);
            }
            row("node total", &case.node_total);
            row("WAL group upload (per group)", &case.node_upload);
            row("WAL PUT", &case.node_put);
            let opened = case.opens.count();
            row(&format!("tablet open ({opened:.0} opened)"), &case.opens);
            row("tablet open: waiting for a slot", &case.open_waits);
            let _ = writeln!(
                self.report.md,
                "| {} | client | - | {:.2} | {:.2} | |\n\
                 | {} | client, each writer's first request left out | - | {:.2} | {:.2} | |",
                case.buckets, case.p.p50, case.p.p99, case.buckets, case.later.p50, case.later.p99
            );
        }
        self.report.md.push('\n');
        self.store_writes(cases);
    }

    /// Item 2's last table: bytes and PUTs written to the store per byte and GB appended, and what
    /// the PUTs would cost per day on S3 Standard at the case's rate (all runs of a case together).
    fn store_writes(&mut self, cases: &[Vec<Case>]) {
        let _ = write!(
            self.report.md,
            "What each case wrote to the store, from the node's counters (`wal_put_bytes`, \
             `object_put_bytes`, `append_bytes`), its runs together: bytes written per byte appended, PUTs per GB \
             appended, and the PUT requests per day at the case's rate priced at S3 Standard's \
             $0.005 per 1,000 (compaction lags the appends within the uncompacted budget, so its \
             share of a case is approximate). Hedged WAL PUTs (a second request for a PUT \
             answering later than the recent ones, docs/hedged-puts.md) are counted as requests \
             in the cost, beside the WAL objects.\n\n\
             | buckets | WAL bytes / appended | compaction bytes / appended | WAL PUTs per GB | compaction PUTs per GB | WAL PUTs/s | hedged WAL PUT requests | PUT cost $/day |\n\
             |---|---|---|---|---|---|---|---|\n"
        );
        for runs in cases {
            let Some(first) = runs.first() else {
                continue;
            };
            let sum = |f: fn(&Case) -> f64| runs.iter().map(f).sum::<f64>();
            let appended = sum(|c| c.writes.appended_bytes).max(1.0);
            let (wal_puts, object_puts) =
                (sum(|c| c.writes.wal_puts), sum(|c| c.writes.object_puts));
            let seconds = sum(|c| c.seconds).max(1e-9);
            let gb = appended / 1e9;
            let hedges = sum(|c| c.writes.wal_hedges);
            let per_second = (wal_puts + hedges + object_puts) / seconds;
            let _ = writeln!(
                self.report.md,
                "| {} | {:.2} | {:.2} | {:.0} | {:.1} | {:.0} | {:.0} ({:.1}%) | {:.0} |",
                first.buckets,
                sum(|c| c.writes.wal_bytes) / appended,
                sum(|c| c.writes.object_bytes) / appended,
                wal_puts / gb,
                object_puts / gb,
                wal_puts / seconds,
                hedges,
                100.0 * hedges / wal_puts.max(1.0),
                per_second * 86_400.0 * PUT_PRICE,
            );
        }
        self.report.md.push('\n');
    }
}
