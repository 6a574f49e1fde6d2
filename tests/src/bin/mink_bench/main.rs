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
//!    against the raw sequential PUT throughput of 8 MiB objects, and against raw PUTs with as
//!    many in flight as the WAL keeps after each run; each case three times, median and spread.
//! 3. Tail delivery: from an append's acknowledgement to a parked long-poll reader, and to an SSE
//!    reader, holding the row.
//! 4. Catch-up replay of 1 GiB (128 MiB with `--quick`) from committed objects after a restart
//!    (cold caches) and again (warm), against raw sequential GETs of the same objects; three
//!    lives of the node, median and spread; then, in a fourth life, two readers at once, one
//!    from offset 0 and one from the middle.
//! 5. Projection: reading 1 of 10 columns vs all 10, rows per second (Arrow IPC responses).
//! 6. `offset_for_timestamp`: stream fetches per lookup against log2(batches). The node does not
//!    count the fetches of one lookup, so this item runs an in-process tablet on the same store
//!    with a counting stream layer (and times the node's `offsets?timestamp=` endpoint beside it).
//! 7. Peak RSS (VmHWM of /proc/PID/status) of the node during item 2, beside its cache budgets.
//! 9. Arrow Flight: a cold DoGet of item 4's data against the HTTP Arrow IPC read of it and
//!    item 4's raw GET; DoPut throughput against raw PUTs; DoGet of 1 of item 5's 10 columns.
//! 10. Kafka: one librdkafka producer (confluent-kafka, acks=all) against raw PUTs, its
//!     per-message latency against raw PUTs of 1 MiB, and a cold replay by one consumer
//!     (`tests/clients/kafka_bench.py`, run with `MINK_TEST_PYTHON`).
//! 11. Durable Streams: `/ds` beside `/v1` with the same 1 KiB body, samples interleaved:
//!     append latency, and append sent -> a parked long-poll reader and an SSE reader.
//! 12. Many open tablets: the first append to each of 10,000 buckets (1,000 with `--quick`) from
//!     64 clients, RSS per open tablet, and the graceful stop with all of them open (goal < 5 s).
//! 13. Fan-out: one 1 KiB row appended to a bucket followed by 1, 100 and 1,000 parked readers,
//!     by long-poll and by SSE: the acknowledgement to the median and to the last reader holding
//!     the row (goal: the last of 1,000 within 10 ms).
//! 14. Compression: tables of `compression` none, lz4 and zstd on item 5's rows and on a log-like
//!     text column: bytes stored per byte of rows, append MB/s and CPU, cold and Arrow replay
//!     rows/s, as ratios against none.
//! 15. Request cost: steady loads of 1, 10 and 100 MB/s (1 and 10 with `--quick`) over 1000
//!     buckets with `engine.wal.min_put_interval` 0, 50 and 250 ms: WAL and compaction PUTs per
//!     second and per GB, S3 Standard's PUT price per day, and append latency (writes
//!     `DIR/cost-STORE.csv` for the chart of latency against PUTs per second).
//! 16. Recovery after kill -9 with 64 MiB and 512 MiB (64 with `--quick`) of uncompacted WAL:
//!     the restart to the first accepted append against a raw sequential GET of the WAL objects.
//! 8. With `--cluster` (alone): several nodes on moto and etcd: append throughput of 3 nodes vs
//!    1 beside raw PUTs with as many in flight, the time from a transfer to the new owner's first
//!    append, and from an owner's kill -9 to a survivor's (`cluster.rs`; writes
//!    `DIR/cluster.md`).
//!
//! With `--scale` (alone): item 12 as a curve, at 1k, 10k and 100k buckets (`scale.rs`; writes
//! `DIR/scale-buckets.md` and `DIR/scale-buckets.csv`).
//!
//! Stores: `local` (object_store on local files, the embedded default), `moto` (the S3 server
//! named by `MINK_TEST_S3_ENDPOINT` / `MINK_TEST_S3_BUCKET`), `s3-standard` (local files wearing
//! the S3 Standard latency model; the node needs the `chaos` feature for it). Metadata is the
//! embedded redb in every case.
//!
//! ```text
//! mink_bench --node PATH --store local|moto|s3-standard [--quick] --out DIR
//! mink_bench --node PATH --cluster [--quick] --out DIR
//! mink_bench --node PATH --scale [--quick] --out DIR
//! ```
//!
//! Writes `DIR/node-STORE.md` (Markdown tables), `DIR/latency-STORE.csv` (percentiles per series)
//! and `DIR/replay-STORE.csv` (replay progress over time) for the charts `cargo xtask bench` draws.
//!
//! The files: `args` (the flags), `node` (the child process), `client` (its HTTP API), `rows`
//! (what the items write), `raw` (the raw store of the baselines), `items/` (one file per item),
//! `report` (figures and the text written).

mod args;
mod client;
mod cluster;
mod histogram;
mod items;
mod lean_http;
mod node;
mod raw;
mod raw_fanout;
mod report;
mod rows;
mod scale;

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use args::Options;
use clap::Parser as _;
use items::Bench;
use node::NodeProcess;
use raw::raw_store;
use report::Report;

/// The node's allocator: with the C library's, 12% of the driver's samples in item 13 were
/// `malloc` and `free`, on the two cores it shares with the node.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Error = String;

const MINK_BATCHES: &str = "application/vnd.mink.batches";
const ARROW: &str = "application/vnd.apache.arrow.stream";
/// The schema id of a new table's first schema.
const SCHEMA_ID: i16 = 1;
/// Rows of 1 KiB per group-commit request.
const GROUP_ROWS: usize = 64;

/// Item 8 alone: several nodes on moto and etcd; writes `DIR/cluster.md`.
async fn run_cluster(options: &Options) -> Result<(), Error> {
    let scratch = std::env::temp_dir().join(format!("mink-bench-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("create {}: {e}", scratch.display()))?;
    eprintln!("mink_bench [cluster]: several nodes on moto and etcd");
    let started = Instant::now();
    let md = cluster::run(options, &scratch).await;
    let _ = std::fs::remove_dir_all(&scratch);
    let md = md?;
    let out = options.out.join("cluster.md");
    std::fs::write(&out, md).map_err(|e| format!("write {}: {e}", out.display()))?;
    eprintln!(
        "mink_bench [cluster]: took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
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
    let client = node.serve().await?;
    let store = options.store;
    let quick = options.quick;
    let mut bench = Bench {
        options,
        node,
        client,
        raw,
        report: Report::default(),
        replay_window: (0, 0),
        replay_raw_mbps: 0.0,
        replay_relay_mbps: 0.0,
    };
    let started = Instant::now();
    // Item 4 restarts the node; item 2 runs on a fresh life so that VmHWM is its own peak.
    let steps: [(&str, u8); 14] = [
        ("idle append", 1),
        ("tail delivery", 3),
        ("replay", 4),
        ("group commit", 2),
        ("projection", 5),
        ("timestamp lookup", 6),
        ("flight", 9),
        ("kafka", 10),
        ("durable streams", 11),
        ("open tablets", 12),
        ("fan-out", 13),
        ("compression", 14),
        ("request cost", 15),
        ("recovery", 16),
    ];
    let mut sections = std::collections::BTreeMap::new();
    let only = bench.options.only.clone();
    for (name, step) in steps {
        if !only.is_empty() && !only.contains(&step) {
            continue;
        }
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
            9 => bench.flight().await?,
            10 => bench.kafka().await?,
            11 => bench.durable_streams().await?,
            12 => bench.open_tablets().await?,
            13 => bench.fan_out().await?,
            14 => bench.compression().await?,
            15 => bench.request_cost().await?,
            16 => bench.recovery().await?,
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
    if !bench.report.cost_csv.is_empty() {
        write(
            format!("cost-{}.csv", store.name()),
            &format!(
                "interval_ms,load_mbps,puts_per_s,p50_ms,p99_ms\n{}",
                bench.report.cost_csv
            ),
        )?;
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    if std::env::var_os(raw_fanout::SERVER_ENV).is_some() {
        return raw_fanout::serve().await;
    }
    // A bad flag prints the usage and exits with status 2; `--help` prints it and exits 0.
    let options = Options::parse();
    let outcome = if options.cluster {
        run_cluster(&options).await
    } else if options.scale {
        scale::run(&options).await
    } else {
        run(options).await
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mink_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
