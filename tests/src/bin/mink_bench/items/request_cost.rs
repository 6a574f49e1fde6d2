//! Item 15: request cost. Steady loads over 1000 buckets, with the WAL's `min_put_interval` off
//! and at two values: WAL and compaction PUTs per second and per GB appended, what S3 Standard
//! charges for them per day, and what the interval costs in append latency.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::report::{ms, pct};
use crate::rows::{kv_fields, mink_batch, ndjson_row};
use crate::{GROUP_ROWS, MINK_BATCHES};

use super::Bench;
use super::group_commit::PUT_PRICE;
use crate::Error;

/// The values of `engine.wal.min_put_interval` tried, in ms (0: off, the default).
const INTERVALS: [u64; 3] = [0, 50, 250];
/// Buckets of the table the load spreads over.
const BUCKETS: u32 = 1000;
/// Writers, each sending one mink batch at a time on a fixed schedule.
const WRITERS: u32 = 64;

impl Bench {
    /// Item 15: PUTs and latency at steady loads for a few values of `min_put_interval`.
    pub(crate) async fn request_cost(&mut self) -> Result<(), Error> {
        let quick = self.options.quick;
        let seconds = if quick { 5.0 } else { 15.0 };
        let loads: &[f64] = if quick {
            &[1.0, 10.0]
        } else {
            &[1.0, 10.0, 100.0]
        };
        let body = mink_batch(GROUP_ROWS)?;
        let mut rows = String::new();
        for interval in INTERVALS {
            self.node.extra_config = format!("[engine.wal]\nmin_put_interval = {interval}\n");
            self.restart().await?;
            let table = format!("cost{interval}");
            self.client
                .create_table(&table, kv_fields(), BUCKETS)
                .await?;
            let urls: Arc<Vec<String>> = Arc::new(
                (0..BUCKETS)
                    .map(|b| self.client.records(&table, b))
                    .collect(),
            );
            self.open_all(&urls).await?;
            for &load in loads {
                let before = self.client.metrics().await?;
                let started = Instant::now();
                let deadline = started + Duration::from_secs_f64(seconds);
                // Each writer sends on its own schedule, offset so the sends spread evenly.
                let period =
                    Duration::from_secs_f64(WRITERS as f64 * body.len() as f64 / (load * 1e6));
                let mut tasks = Vec::new();
                for w in 0..WRITERS {
                    let client = self.client.clone();
                    let urls = urls.clone();
                    let body = body.clone();
                    let first = started + period.mul_f64(w as f64 / WRITERS as f64);
                    tasks.push(tokio::spawn(async move {
                        let mut latencies = Vec::new();
                        let mut next = first;
                        let mut i = w;
                        while next < deadline {
                            tokio::time::sleep_until(next.into()).await;
                            // Round robin over the buckets.
                            let url = &urls[(i % BUCKETS) as usize];
                            let sent = Instant::now();
                            client.post(url.clone(), MINK_BATCHES, body.clone()).await?;
                            latencies.push(ms(sent.elapsed()));
                            i += WRITERS;
                            // A writer that fell behind sends again at once, not in a burst.
                            next = (next + period).max(Instant::now());
                        }
                        Ok::<_, Error>(latencies)
                    }));
                }
                let mut latencies = Vec::new();
                for task in tasks {
                    latencies.extend(task.await.map_err(|e| format!("writer task: {e}"))??);
                }
                let elapsed = started.elapsed().as_secs_f64();
                let after = self.client.metrics().await?;
                let gained = |name: &str| {
                    let key = format!("mink_{name}_total");
                    after.get(&key).copied().unwrap_or(0.0)
                        - before.get(&key).copied().unwrap_or(0.0)
                };
                let (wal_puts, object_puts) = (gained("wal_puts"), gained("object_puts"));
                let appended = gained("append_bytes");
                let mbps = appended / elapsed / 1e6;
                let per_gb = |puts: f64| {
                    if appended > 0.0 {
                        puts / (appended / 1e9)
                    } else {
                        0.0
                    }
                };
                let wal_rate = wal_puts / elapsed;
                let per_day = (wal_puts + object_puts) / elapsed * 86_400.0 * PUT_PRICE;
                let p = pct(&mut latencies);
                self.report.latency(
                    &format!("15. {load} MB/s, min_put_interval {interval} ms"),
                    &p,
                );
                let _ = writeln!(
                    self.report.cost_csv,
                    "{interval},{load},{:.2},{:.3},{:.3}",
                    wal_rate, p.p50, p.p99
                );
                let _ = writeln!(
                    rows,
                    "| {interval} | {load} | {mbps:.1} | {wal_rate:.1} | {:.1} | {:.0} | {:.0} | ${per_day:.2} | {:.1} | {:.1} |",
                    object_puts / elapsed,
                    per_gb(wal_puts),
                    per_gb(object_puts),
                    p.p50,
                    p.p99,
                );
            }
        }
        self.node.extra_config.clear();
        self.restart().await?;
        let _ = write!(
            self.report.md,
            "### 15. Request cost: steady loads over {BUCKETS} buckets ({WRITERS} writers on fixed schedules, one mink batch of {GROUP_ROWS} rows of 1 KiB per append, {seconds:.0} s per case)\n\n\
             | `min_put_interval` ms | load MB/s | appended MB/s | WAL PUTs/s | compaction PUTs/s | WAL PUTs per GB | compaction PUTs per GB | PUTs per day at S3 Standard | p50 ms | p99 ms |\n\
             |---|---|---|---|---|---|---|---|---|---|\n{rows}\n\
             PUTs are the node's counters (`mink_wal_puts_total`, `mink_object_puts_total`); the \
             price is S3 Standard's $0.005 per 1,000 PUTs at the case's rate for a day. \
             `engine.wal.min_put_interval` holds the open group until that long after the last \
             PUT started; an append after a quiet spell and a full group still go at once.\n\n",
        );
        Ok(())
    }

    /// One append to each of `urls` from the writers, so that every tablet is open before the
    /// measured cases (a first append opens its tablet).
    async fn open_all(&self, urls: &Arc<Vec<String>>) -> Result<(), Error> {
        let next = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..WRITERS {
            let (client, urls, next) = (self.client.clone(), urls.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                while let Some(url) = urls.get(next.fetch_add(1, Ordering::Relaxed)) {
                    client
                        .post(url.clone(), "application/x-ndjson", ndjson_row(0))
                        .await?;
                }
                Ok::<_, Error>(())
            }));
        }
        for task in tasks {
            task.await.map_err(|e| format!("writer task: {e}"))??;
        }
        Ok(())
    }
}
