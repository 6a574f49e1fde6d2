//! Items 2 and 7: group commit with 1, 100 and 1000 buckets against raw PUT throughput, and the
//! node's peak RSS during it beside its cache budgets.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mink_s3stream::engine::EngineSettings;
use mink_server::settings::HttpSettings;

use crate::node::proc_kib;
use crate::raw::raw_put_throughput;
use crate::report::{ms, pct, verdict};
use crate::rows::{kv_fields, mink_batch};
use crate::{GROUP_ROWS, MINK_BATCHES};

use super::Bench;
use crate::Error;
use crate::client::Client;

impl Bench {
    /// Items 2 and 7: group commit with 1, 100 and 1000 buckets; the node's peak RSS.
    pub(crate) async fn group_commit(&mut self) -> Result<(), Error> {
        let quick = self.options.quick;
        let seconds = if quick { 5.0 } else { 20.0 };
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
        let request_budget = HttpSettings::default().max_inflight_request_bytes as u64;
        let budget = settings.cache.tail.capacity_bytes
            + settings.cache.block.memory_bytes
            + settings.cache.block.index_capacity_bytes
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
             | max uncompacted bytes (`engine.max_uncompacted_bytes`) | {} |\n\
             | request bytes in flight budget (`http.max_inflight_request_bytes`) | {} |\n\
             | highest request bytes in flight sampled (`mink_http_inflight_request_bytes`) | {} |\n\
             | sum of the budgets | {} |\n\n\
             Peak RSS is {:.0}% of the sum of the budgets (defaults; the node ran with no cache \
             settings). The WAL's log cache holds uncompacted data, so it is bounded by max \
             uncompacted bytes; request bodies in flight (writers x {} KiB) are bounded by the \
             request budget; the HTTP and Arrow buffers come on top.\n\n",
            hwm >> 10,
            peak_rss.load(Ordering::Relaxed) >> 10,
            mib(settings.cache.tail.capacity_bytes),
            mib(settings.cache.block.memory_bytes),
            mib(settings.cache.block.index_capacity_bytes),
            mib(settings.max_uncompacted_bytes),
            mib(request_budget),
            mib(peak_inflight.load(Ordering::Relaxed)),
            mib(budget),
            100.0 * (hwm << 10) as f64 / budget as f64,
            body.len() >> 10,
        );
        Ok(())
    }
}
