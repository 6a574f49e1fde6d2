//! Item 12: many open tablets. The first append to each of thousands of buckets (each opens its
//! tablet) from 64 clients, the node's memory per open tablet, and a graceful stop (SIGTERM to
//! exit) with all of them open, against the goal of under 5 s at 10,000.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::histogram::delta;
use crate::node::proc_kib;
use crate::report::{ms, pct, verdict};
use crate::rows::{kv_fields, ndjson_row};

use super::Bench;
use crate::Error;
use crate::client::Client;

/// Clients appending at once.
pub(crate) const CLIENTS: usize = 64;
/// Buckets per table (the node's default `limits.max_buckets_per_table` is 1024).
pub(crate) const BUCKETS: u32 = 1000;

/// Creates `tables` tables of [`BUCKETS`] buckets, named `{prefix}0`, `{prefix}1`, ...
pub(crate) async fn create_tables(client: &Client, prefix: &str, tables: u32) -> Result<(), Error> {
    for t in 0..tables {
        client
            .create_table(&format!("{prefix}{t}"), kv_fields(), BUCKETS)
            .await?;
    }
    Ok(())
}

/// The first append to every bucket of the tables of [`create_tables`], from [`CLIENTS`]
/// clients: each append's latency (ms) and the seconds they all took.
pub(crate) async fn first_appends(
    client: &Client,
    prefix: &str,
    tables: u32,
) -> Result<(Vec<f64>, f64), Error> {
    let keys: Arc<Vec<String>> = Arc::new(
        (0..tables)
            .flat_map(|t| (0..BUCKETS).map(move |b| (t, b)))
            .map(|(t, b)| client.records(&format!("{prefix}{t}"), b))
            .collect(),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (http, keys, next) = (client.http.clone(), keys.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(url) = keys.get(i) else {
                    return Ok::<_, Error>(latencies);
                };
                let sent = Instant::now();
                let r = http
                    .post(url)
                    .header("content-type", "application/x-ndjson")
                    .body(ndjson_row(i as u64))
                    .send()
                    .await
                    .map_err(|e| format!("append: {}", crate::client::chain(&e)))?;
                if !r.status().is_success() {
                    return Err(format!("append to {url}: {}", r.status()));
                }
                latencies.push(ms(sent.elapsed()));
            }
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.map_err(|e| format!("client task: {e}"))??);
    }
    Ok((latencies, started.elapsed().as_secs_f64()))
}

impl Bench {
    /// Item 12: first appends to many buckets, memory per open tablet, graceful stop.
    pub(crate) async fn open_tablets(&mut self) -> Result<(), Error> {
        let tables = if self.options.quick { 1 } else { 10 };
        // A fresh life, so that the tablets open here are all it holds.
        self.restart().await?;
        let pid = self.node.pid().ok_or("the node is not running")?;
        create_tables(&self.client, "open", tables).await?;
        let rss_before = proc_kib(pid, "VmRSS:").unwrap_or(0);
        let before = self.client.metrics().await?;
        let (mut latencies, opened) = first_appends(&self.client, "open", tables).await?;
        let after = self.client.metrics().await?;
        let rss_after = proc_kib(pid, "VmRSS:").unwrap_or(0);
        let opens = delta(&before, &after, "mink_log_open_duration_seconds", &[]);
        let waits = delta(&before, &after, "mink_log_open_wait_seconds", &[]);
        let p = pct(&mut latencies);
        let stopping = Instant::now();
        self.node.stop()?;
        let stop = stopping.elapsed().as_secs_f64();
        self.node.start()?;
        self.node.wait_ready(&self.client.http).await?;
        let n = (tables * BUCKETS) as usize;
        let per_tablet = (rss_after.saturating_sub(rss_before) as f64) / n as f64;
        let _ = write!(
            self.report.md,
            "### 12. Many open tablets: the first append to each of {n} buckets ({tables} tables of \
             {BUCKETS}), {CLIENTS} clients\n\n\
             | | figure | goal |\n|---|---|---|\n\
             | first appends (each opens its bucket's tablet) | {n} in {opened:.1} s: {:.0} per s | |\n\
             | first append latency p50 / p99 | {:.1} / {:.1} ms | |\n\
             | the tablet opens in them (`mink_log_open_duration_seconds`): mean / p50 / p99 | {:.1} / {:.1} / {:.1} ms | |\n\
             | waiting for an open slot (`mink_log_open_wait_seconds`, 256 at a time): mean / p99 | {:.1} / {:.1} ms | |\n\
             | node RSS before / after | {} / {} MiB: {per_tablet:.1} KiB per open tablet | |\n\
             | graceful stop, SIGTERM to exit | **{stop:.2} s** | < 5 s at 10,000: {} |\n\n",
            n as f64 / opened,
            p.p50,
            p.p99,
            opens.mean_ms(),
            opens.quantile_ms(0.5),
            opens.quantile_ms(0.99),
            waits.mean_ms(),
            waits.quantile_ms(0.99),
            rss_before >> 10,
            rss_after >> 10,
            if n >= 10_000 {
                verdict(stop < 5.0)
            } else {
                "(quick: fewer tablets)"
            },
        );
        Ok(())
    }
}
