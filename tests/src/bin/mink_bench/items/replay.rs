//! Item 4: catch-up replay from committed objects after a restart, cold and warm, against raw
//! sequential GETs of the same objects.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mink_s3stream::engine::EngineSettings;

use super::now_ms;
use crate::MINK_BATCHES;
use crate::client::{body_len, header_u64};
use crate::node::cpu_seconds;
use crate::report::verdict;
use crate::rows::{kv_fields, mink_batch};

use super::Bench;
use crate::Error;

impl Bench {
    /// Item 4: catch-up replay from committed objects, cold and warm, against raw GETs.
    pub(crate) async fn replay(&mut self) -> Result<(), Error> {
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
                        .map_err(|e| format!("append: {}", crate::client::chain(&e)))?;
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
        let node_store = self.node_store()?;
        let objects = node_store
            .list("data/")
            .await
            .map_err(|e| format!("list committed objects: {e}"))?;
        // Three passes (the store's speed on this shared machine swings from pass to pass):
        // the median is the baseline, the spread is reported beside it.
        let mut passes = Vec::new();
        let mut raw_bytes = 0u64;
        for _ in 0..3 {
            let started = Instant::now();
            raw_bytes = 0;
            for object in &objects {
                raw_bytes += node_store
                    .get(&object.key)
                    .await
                    .map_err(|e| format!("raw GET {}: {e}", object.key))?
                    .len() as u64;
            }
            passes.push(raw_bytes as f64 / started.elapsed().as_secs_f64() / 1e6);
        }
        passes.sort_by(f64::total_cmp);
        let raw_mbps = passes[1];
        self.replay_raw_mbps = raw_mbps;
        // The same objects in ranged GETs of the block cache's largest load, one after another:
        // what the store gives a reader that reads in ranges, as the node does.
        let load = EngineSettings::default().cache.block.max_load_bytes;
        let started = Instant::now();
        let mut ranged_bytes = 0u64;
        for object in &objects {
            let mut at = 0;
            while at < object.size {
                ranged_bytes += node_store
                    .get_range(&object.key, at..(at + load).min(object.size))
                    .await
                    .map_err(|e| format!("raw ranged GET {}: {e}", object.key))?
                    .len() as u64;
                at += load;
            }
        }
        let ranged_mbps = ranged_bytes as f64 / started.elapsed().as_secs_f64() / 1e6;
        // A new life of the node: empty caches.
        self.node.start()?;
        self.node.wait_ready(&self.client.http).await?;
        let mut lines = Vec::new();
        let pid = self.node.pid().ok_or("the node has no pid")?;
        for phase in ["cold", "warm"] {
            let cpu = (cpu_seconds(pid), cpu_seconds(std::process::id()));
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
                bytes += body_len(r).await?;
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
            let used = |before: Option<f64>, id: u32| Some(cpu_seconds(id)? - before?);
            let (node_cpu, driver_cpu) = (
                used(cpu.0, pid).unwrap_or(f64::NAN),
                used(cpu.1, std::process::id()).unwrap_or(f64::NAN),
            );
            lines.push((
                phase,
                bytes,
                bytes as f64 / t / 1e6,
                node_cpu / t,
                driver_cpu / t,
            ));
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
             | | MB/s | ratio to raw GET | goal | node CPU (cores) | driver CPU (cores) |\n|---|---|---|---|---|---|\n\
             | raw sequential GET of the node's {} committed objects ({:.0} MB: the replay's, and a few KB of items 1 and 3), median of 3 passes ({:.0}-{:.0}) | {raw_mbps:.1} | 1.00x | | | |\n",
            total >> 20,
            objects.len(),
            raw_bytes as f64 / 1e6,
            passes[0],
            passes[2],
        );
        let _ = writeln!(
            self.report.md,
            "| raw sequential ranged GETs of {} MiB of the same objects (the node's largest load) | \
             {ranged_mbps:.1} | {:.2}x | | | |",
            load >> 20,
            ranged_mbps / raw_mbps
        );
        for (phase, bytes, mbps, node_cores, driver_cores) in &lines {
            let ratio = mbps / raw_mbps;
            let goal = if *phase == "cold" {
                format!(">= 0.8x: {}", verdict(ratio >= 0.8))
            } else {
                String::new()
            };
            let _ = writeln!(
                self.report.md,
                "| replay, {phase} caches ({:.0} MB) | {mbps:.1} | **{ratio:.2}x** | {goal} | \
                 {node_cores:.2} | {driver_cores:.2} |",
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
}
