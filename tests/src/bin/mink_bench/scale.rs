//! `--scale`: item 12 as a curve. For 1k, 10k and 100k buckets (1k and 10k with `--quick`), a
//! fresh node on local files takes the first append to every bucket (each opens its tablet) from
//! 64 clients: the opens per second and the first append's latency, the node's memory per open
//! tablet, and the graceful stop (SIGTERM to exit) with all of them open (goal: < 5 s at 10k).
//!
//! The node runs with `MIMALLOC_PURGE_DELAY=0`, so that the allocator hands freed memory back at
//! once and RSS counts what the node holds rather than what it keeps for reuse (the node's
//! default is 10 s, README "Operations"). The RSS after is the lowest of a few samples taken once
//! the appends are done.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::Error;
use crate::args::{Options, Store};
use crate::items::open_tablets::{BUCKETS, CLIENTS, create_tables, first_appends};
use crate::node::{NodeProcess, proc_kib};
use crate::report::{pct, verdict};

/// One point of the curve.
struct Point {
    tablets: u32,
    opens_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    rss_before_kib: u64,
    rss_after_kib: u64,
    stop_s: f64,
}

impl Point {
    fn kib_per_tablet(&self) -> f64 {
        self.rss_after_kib.saturating_sub(self.rss_before_kib) as f64 / f64::from(self.tablets)
    }
}

/// The lowest VmRSS of `samples` readings 200 ms apart, KiB.
async fn settled_rss(pid: u32, samples: usize) -> u64 {
    let mut low = u64::MAX;
    for i in 0..samples {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        low = low.min(proc_kib(pid, "VmRSS:").unwrap_or(u64::MAX));
    }
    low
}

async fn point(options: &Options, scratch: &std::path::Path, tablets: u32) -> Result<Point, Error> {
    let dir = scratch.join(format!("{tablets}"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let mut node = NodeProcess::new(&options.node, Store::Local, &dir)?;
    node.process.with_env("MIMALLOC_PURGE_DELAY", "0");
    let client = node.serve().await?;
    let pid = node.pid().ok_or("the node is not running")?;
    let tables = tablets / BUCKETS;
    create_tables(&client, "scale", tables).await?;
    let rss_before_kib = settled_rss(pid, 5).await;
    let (mut latencies, seconds) = first_appends(&client, "scale", tables).await?;
    let rss_after_kib = settled_rss(pid, 10).await;
    let p = pct(&mut latencies);
    let stopping = Instant::now();
    node.stop()?;
    let stop_s = stopping.elapsed().as_secs_f64();
    Ok(Point {
        tablets,
        opens_per_s: f64::from(tablets) / seconds,
        p50_ms: p.p50,
        p99_ms: p.p99,
        rss_before_kib,
        rss_after_kib,
        stop_s,
    })
}

/// Runs the curve; writes `DIR/scale-buckets.md` and `DIR/scale-buckets.csv`.
pub(crate) async fn run(options: &Options) -> Result<(), Error> {
    let sizes: &[u32] = if options.quick {
        &[1_000, 10_000]
    } else {
        &[1_000, 10_000, 100_000]
    };
    let scratch = std::env::temp_dir().join(format!("mink-bench-scale-{}", std::process::id()));
    let mut points = Vec::new();
    for &tablets in sizes {
        eprintln!("mink_bench [scale]: {tablets} open tablets");
        let started = Instant::now();
        let outcome = point(options, &scratch, tablets).await;
        let _ = std::fs::remove_dir_all(scratch.join(format!("{tablets}")));
        points.push(outcome?);
        eprintln!(
            "mink_bench [scale]: {tablets} open tablets took {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let mut md = format!(
        "### Scale: open tablets (a fresh node on local files per point; the first append to each \
         bucket from {CLIENTS} clients, tables of {BUCKETS} buckets)\n\n\
         | open tablets | first appends per s | first append p50 / p99 ms | node RSS before / after MiB | KiB per open tablet | graceful stop s | goal: stop < 5 s at 10k |\n\
         |---|---|---|---|---|---|---|\n"
    );
    let mut csv = String::from("tablets,opens_per_s,p50_ms,p99_ms,kib_per_tablet,stop_s\n");
    for p in &points {
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.1} / {:.1} | {} / {} | {:.1} | {:.2} | {} |",
            p.tablets,
            p.opens_per_s,
            p.p50_ms,
            p.p99_ms,
            p.rss_before_kib >> 10,
            p.rss_after_kib >> 10,
            p.kib_per_tablet(),
            p.stop_s,
            if p.tablets == 10_000 {
                verdict(p.stop_s < 5.0)
            } else {
                ""
            },
        );
        let _ = writeln!(
            csv,
            "{},{:.1},{:.2},{:.2},{:.2},{:.3}",
            p.tablets,
            p.opens_per_s,
            p.p50_ms,
            p.p99_ms,
            p.kib_per_tablet(),
            p.stop_s
        );
    }
    md += "\nThe node runs with `MIMALLOC_PURGE_DELAY=0` here, so that RSS counts the memory it \
           holds, not what its allocator keeps for reuse; RSS after is the lowest of ten samples \
           200 ms apart once the appends are done. Each tablet holds its first 1 KiB row until \
           compaction takes it.\n\n";
    let out = &options.out;
    std::fs::create_dir_all(out).map_err(|e| format!("create {}: {e}", out.display()))?;
    for (name, text) in [("scale-buckets.md", &md), ("scale-buckets.csv", &csv)] {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(|e| format!("write {}: {e}", path.display()))?;
    }
    Ok(())
}
