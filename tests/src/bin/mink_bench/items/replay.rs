//! Item 4: catch-up replay from committed objects after a restart, cold and warm, against raw
//! sequential GETs of the same objects.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use mink_s3stream::engine::EngineSettings;

use super::now_ms;
use crate::MINK_BATCHES;
use crate::client::{body_len, header_u64};
use crate::node::cpu_seconds;
use crate::report::{RUNS, median, spread, spread_ratio, verdict};
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
        let compact_seconds = self.drained().await?;
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
        // The same number of bytes through a loopback socket, three passes.
        let mut loopback = Vec::new();
        for _ in 0..3 {
            loopback.push(crate::raw::loopback_mbps(raw_bytes).await?);
        }
        // The same objects GET from the store and relayed through a loopback socket, three passes.
        let keys: Vec<String> = objects.iter().map(|o| o.key.clone()).collect();
        let mut relay = Vec::new();
        for _ in 0..3 {
            relay.push(crate::raw::relay_mbps(node_store.clone(), keys.clone()).await?);
        }
        self.replay_relay_mbps = median(relay.iter().copied()).0;
        // Each run is a new life of the node (empty caches), then a cold and a warm replay.
        let mut runs = Vec::new();
        for run in 0..RUNS {
            if run == 0 {
                self.node.start()?;
                self.node.wait_ready(&self.client.http).await?;
            } else {
                self.restart().await?;
            }
            runs.push(self.replay_run(end).await?);
        }
        let last_run_metrics = self.client.metrics().await?;
        // Two readers at once, in a node life of their own, after the runs.
        let (two, two_gets) = self.replay_two_readers(end).await?;
        // The chart shows the run with the median cold throughput.
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by(|a, b| runs[*a].phases[0].mbps.total_cmp(&runs[*b].phases[0].mbps));
        if let Some(run) = order.get(order.len() / 2) {
            self.report.replay_csv.push_str(&runs[*run].csv);
        }
        let metrics = last_run_metrics;
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
        let _ = writeln!(
            self.report.md,
            "| loopback TCP: as many bytes from the driver to itself in 1 MiB writes (no store, no \
             HTTP: what any answer through a socket on this machine can carry), median of 3 \
             passes | {} | {} | | | |",
            spread(loopback.iter().copied(), 1),
            spread_ratio(loopback.iter().map(|m| m / raw_mbps)),
        );
        let _ = writeln!(
            self.report.md,
            "| relay: the same sequential GETs, each object written into a loopback TCP socket as \
             it arrives and read at the other end (no format, cache or protocol: what any answer \
             carrying this store's bytes through a socket can reach here), median of 3 passes | \
             {} | {} | | | |",
            spread(relay.iter().copied(), 1),
            spread_ratio(relay.iter().map(|m| m / raw_mbps)),
        );
        for (i, phase) in ["cold", "warm"].into_iter().enumerate() {
            let of = |f: fn(&Phase) -> f64| runs.iter().map(move |r| f(&r.phases[i]));
            let (median_mbps, _, _) = median(of(|p| p.mbps));
            let ratio = median_mbps / raw_mbps;
            let goal = if phase == "cold" {
                format!(">= 0.8x: {}", verdict(ratio >= 0.8))
            } else {
                format!(">= 1x: {}", verdict(ratio >= 1.0))
            };
            let _ = writeln!(
                self.report.md,
                "| replay, {phase} caches ({:.0} MB), median of {RUNS} runs | {} | {} | {goal} | \
                 {} | {} |",
                runs[0].phases[i].bytes as f64 / 1e6,
                spread(of(|p| p.mbps), 1),
                spread_ratio(of(|p| p.mbps).map(|m| m / raw_mbps)),
                spread(of(|p| p.node_cores), 2),
                spread(of(|p| p.driver_cores), 2),
            );
        }
        let _ = writeln!(
            self.report.md,
            "| replay by two readers at once, cold caches (one from offset 0, one from the middle, \
             each reading its half), one run | {:.1} | {:.2}x | | {:.2} | {:.2} |",
            two.mbps,
            two.mbps / raw_mbps,
            two.node_cores,
            two.driver_cores,
        );
        let _ = write!(
            self.report.md,
            "\nWriting the {} MiB took {write_seconds:.1} s and compaction drained the WAL {compact_seconds:.1} s \
             later. Each run is a new life of the node; its two replays cost {:.0} object GETs ({:.0} MB) in the last run, and the two readers' replay {two_gets:.0}; block cache memory budget {} MiB, \
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

/// One phase of a replay run.
struct Phase {
    bytes: u64,
    mbps: f64,
    node_cores: f64,
    driver_cores: f64,
}

impl Phase {
    /// `bytes` read since `started`, with the node's (`pid`) and the driver's CPU seconds then
    /// (`cpu`) turned into cores used since.
    fn since(bytes: u64, started: Instant, cpu: (Option<f64>, Option<f64>), pid: u32) -> Phase {
        let t = started.elapsed().as_secs_f64();
        let used = |before: Option<f64>, id: u32| Some(cpu_seconds(id)? - before?);
        Phase {
            bytes,
            mbps: bytes as f64 / t / 1e6,
            node_cores: used(cpu.0, pid).unwrap_or(f64::NAN) / t,
            driver_cores: used(cpu.1, std::process::id()).unwrap_or(f64::NAN) / t,
        }
    }
}

/// One run of item 4: a cold replay, then a warm one, with the chart's rows.
struct Run {
    phases: [Phase; 2],
    csv: String,
}

impl Bench {
    /// Reads the replay table from offset 0 to `end` twice (cold, then warm) in reads of up to
    /// 16 MiB.
    async fn replay_run(&mut self, end: u64) -> Result<Run, Error> {
        let pid = self.node.pid().ok_or("the node has no pid")?;
        let mut csv = String::new();
        let mut phases = Vec::new();
        for phase in ["cold", "warm"] {
            let cpu = (cpu_seconds(pid), cpu_seconds(std::process::id()));
            let started = Instant::now();
            let (mut offset, mut bytes) = (0u64, 0u64);
            let mut next_tick = 0.0;
            let url = self.client.records("replay", 0);
            while offset < end {
                let (next, read) = read_once(&self.client.http, &url, offset).await?;
                bytes += read;
                offset = next;
                let t = started.elapsed().as_secs_f64();
                if t >= next_tick {
                    let _ = writeln!(csv, "{phase},{t:.4},{:.3}", bytes as f64 / 1e6);
                    next_tick = t + 0.05;
                }
            }
            let phase_run = Phase::since(bytes, started, cpu, pid);
            let t = started.elapsed().as_secs_f64();
            let _ = writeln!(csv, "{phase},{t:.4},{:.3}", bytes as f64 / 1e6);
            phases.push(phase_run);
        }
        let [cold, warm]: [Phase; 2] = phases
            .try_into()
            .map_err(|_| "a replay run has two phases".to_owned())?;
        Ok(Run {
            phases: [cold, warm],
            csv,
        })
    }

    /// A cold replay by two readers at once after a restart, one from offset 0 and one from the
    /// middle, each reading its half in reads of up to 16 MiB: two consumers of one bucket.
    /// Returns the phase and the object GETs the node made for it.
    async fn replay_two_readers(&mut self, end: u64) -> Result<(Phase, f64), Error> {
        self.restart().await?;
        let pid = self.node.pid().ok_or("the node has no pid")?;
        let cpu = (cpu_seconds(pid), cpu_seconds(std::process::id()));
        let started = Instant::now();
        let half = end / 2;
        let mut readers = Vec::new();
        for (from, to) in [(0, half), (half, end)] {
            let (http, url) = (self.client.http.clone(), self.client.records("replay", 0));
            readers.push(tokio::spawn(async move {
                let (mut offset, mut bytes) = (from, 0u64);
                while offset < to {
                    let (next, read) = read_once(&http, &url, offset).await?;
                    bytes += read;
                    offset = next;
                }
                Ok::<_, Error>(bytes)
            }));
        }
        let mut bytes = 0;
        for reader in readers {
            bytes += reader.await.map_err(|e| format!("replay reader: {e}"))??;
        }
        let phase = Phase::since(bytes, started, cpu, pid);
        let metrics = self.client.metrics().await?;
        let gets = metrics
            .get("mink_object_gets_total")
            .copied()
            .unwrap_or(0.0);
        Ok((phase, gets))
    }
}

/// One replay read of up to 16 MiB from `offset`: the next offset and the bytes read.
async fn read_once(http: &reqwest::Client, url: &str, offset: u64) -> Result<(u64, u64), Error> {
    let r = http
        .get(format!("{url}?offset={offset}&max_bytes={}", 16 << 20))
        .header("accept", MINK_BATCHES)
        .send()
        .await
        .map_err(|e| format!("replay read: {e}"))?;
    if !r.status().is_success() {
        return Err(format!("replay read at {offset}: {}", r.status()));
    }
    let next = header_u64(&r, "mink-next-offset").ok_or("no mink-next-offset")?;
    let bytes = body_len(r).await?;
    if next <= offset {
        return Err(format!("replay made no progress at offset {offset}"));
    }
    Ok((next, bytes))
}
