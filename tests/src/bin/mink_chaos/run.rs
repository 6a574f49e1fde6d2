//! One run: start the node, start the writers and readers, kill and restart the node, then let
//! everything settle in a last life without faults and check every bucket.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mink_runtime::SeededRng;
use reqwest::StatusCode;

use crate::args::{Backend, Options};
use crate::check::{Tally, check_bucket};
use crate::final_read::read_all;
use crate::journal::{Ack, Ctx, Journal, lock};
use crate::node::{Faults, NodeProcess};
use crate::reader::reader;
use crate::writer::writer;
use crate::{Error, TABLE};

/// Nodes of a cluster run.
const CLUSTER_NODES: usize = 3;
/// The cluster nodes' lease TTL (their config), which a pause outlasts.
const CLUSTER_LEASE_TTL: Duration = Duration::from_secs(3);

/// How long the final life's writers may go on for retention to move a log start.
const RETENTION_WAIT: Duration = Duration::from_secs(60);

/// Whether some bucket's log start moved (retention trimmed it).
async fn log_start_moved(ctx: &Ctx, buckets: u32) -> bool {
    for bucket in 0..buckets {
        let url = format!("{}/v1/tables/{TABLE}/buckets/{bucket}/offsets", ctx.url());
        let Ok(r) = ctx
            .http
            .get(url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
        else {
            continue;
        };
        if let Ok(v) = r.json::<serde_json::Value>().await
            && v["log_start"].as_u64().is_some_and(|s| s > 0)
        {
            return true;
        }
    }
    false
}

/// How long the final phase may take to let writers finish and readers catch up.
pub(crate) const SETTLE_TIMEOUT: Duration = Duration::from_secs(180);

pub(crate) async fn create_table(ctx: &Ctx, buckets: u32) -> Result<(), Error> {
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
            .post(format!("{}/v1/tables", ctx.url()))
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

pub(crate) fn acked_count(ctx: &Ctx) -> usize {
    lock(&ctx.journal.acks).len()
}

/// Outcome of a run, for the summary.
pub(crate) struct Report {
    pub(crate) kills: u32,
    /// Pauses past the lease (a cluster only).
    pub(crate) pauses: u32,
    pub(crate) faulty_lives: u32,
    pub(crate) tally: Tally,
    pub(crate) problems: Vec<String>,
}

pub(crate) async fn run(options: Options) -> Result<Report, Error> {
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
    let cluster = options.backend == Backend::Cluster;
    let prefix = mink_tests::unique_prefix("chaos");
    let mut nodes = Vec::new();
    for index in 0..if cluster { CLUSTER_NODES } else { 1 } {
        let node_dir = if cluster {
            dir.join(format!("node-{}", index + 1))
        } else {
            dir.clone()
        };
        std::fs::create_dir_all(&node_dir)
            .map_err(|e| format!("create {}: {e}", node_dir.display()))?;
        nodes.push(NodeProcess::new(&options, &node_dir, index, &prefix)?);
    }
    let urls: Vec<String> = nodes.iter().map(NodeProcess::url).collect();
    eprintln!(
        "mink_chaos: backend {:?}, seed {}, {} {} over ~{}s, {} buckets x {} writers, faults \
         in {:.0}% of lives; nodes on {}, files in {}",
        options.backend,
        options.seed,
        options.kills,
        if cluster { "kills and pauses" } else { "kills" },
        options.seconds,
        options.buckets,
        options.writers,
        if cluster { 0.0 } else { options.faults * 100.0 },
        urls.join(", "),
        dir.display()
    );
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .pool_idle_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let ctx = Arc::new(Ctx {
        urls,
        entry: AtomicUsize::new(0),
        http: http.clone(),
        journal: Journal::default(),
        stop_writing: AtomicBool::new(false),
        reader_targets: Mutex::new(HashMap::new()),
        deadline: Instant::now()
            + Duration::from_secs_f64(options.seconds * 3.0)
            + mink_tests::node::START_TIMEOUT * (options.kills + 2).min(4)
            + SETTLE_TIMEOUT,
        retention: options.retention_bytes.is_some(),
        pad_bytes: options.pad_bytes,
        metadata_lost: AtomicBool::new(false),
    });
    let mut rng = SeededRng::new(options.seed);

    for node in &mut nodes {
        node.start(None)?;
    }
    for node in &mut nodes {
        node.wait_ready(&http).await?;
    }
    if cluster {
        // Every node in every view before the table's buckets are spread.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
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
                SeededRng::new(rng.next_u64()),
            )));
        }
        readers.push(tokio::spawn(reader(ctx.clone(), bucket)));
    }

    // The kill phase.
    let mean = options.seconds / f64::from(options.kills.max(1));
    let mut faulty_lives = 0;
    let mut life_faulty = false;
    let mut pauses = 0;
    for kill in 1..=options.kills {
        if cluster {
            pauses +=
                u32::from(cluster_event(&mut nodes, &ctx, &mut rng, kill, &options, mean).await?);
            continue;
        }
        let node = &mut nodes[0];
        let life_started = Instant::now();
        let acked_before = acked_count(&ctx);
        let early = rng.next_f64() < 0.15;
        let wait = Duration::from_secs_f64(mean * (0.3 + 1.4 * rng.next_f64()));
        let losing = kill == options.kills && options.lose_metadata;
        // The metadata is lost after this kill: a snapshot must exist to restore (short lives
        // with faulty PUTs may never have written a periodic one); what follows it is rebuilt.
        let early = early && !losing;
        if losing {
            if life_faulty {
                // A faulty life may fail for good by design (its WAL deadline passes, it exits
                // with 75) before the snapshot is written: take the snapshot in a clean life.
                node.kill()?;
                eprintln!("mink_chaos: the faulty life is ended for a clean one to snapshot in");
                node.start(None)?;
            }
            node.wait_ready(&http).await?;
            request_snapshot(&ctx).await?;
        }
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
        let faults = (kill < options.kills && rng.next_f64() < options.faults).then(|| {
            // A third of the faulty lives give the WAL a short deadline, so it really fails.
            let wal_deadline_ms = (rng.next_f64() < 0.33).then_some(50);
            let rates: &[f64] = if wal_deadline_ms.is_some() {
                &[0.2, 0.4]
            } else {
                &[0.05, 0.2, 0.4]
            };
            Faults {
                put_failure_rate: rng.pick(rates).unwrap_or(0.0),
                put_delay_ms: rng.pick(&[0, 0, 20, 100, 400]).unwrap_or(0),
                fail_after_write: rng.next_f64() < 0.5,
                wal_deadline_ms,
                seed: rng.next_u64() >> 1,
            }
        });
        faulty_lives += u32::from(faults.is_some());
        life_faulty = faults.is_some();
        if kill == options.kills && options.lose_metadata {
            lose_and_rebuild(node, &ctx)?;
        }
        node.start(faults)?;
    }

    // The final life: no faults, no kills.
    for node in &mut nodes {
        node.wait_ready(&http).await?;
    }
    if ctx.retention {
        // On a slow or busy machine the kill phase may not have written past the limit: the
        // writers go on until retention moved a log start (or the wait runs out, which the
        // checks below report), so that the run tests it.
        let started = Instant::now();
        while started.elapsed() < RETENTION_WAIT && !log_start_moved(&ctx, options.buckets).await {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    ctx.stop_writing.store(true, Ordering::SeqCst);
    for t in tasks {
        if tokio::time::timeout(SETTLE_TIMEOUT, t).await.is_err() {
            ctx.journal
                .violation("a writer did not finish in the final life".to_owned());
        }
    }
    let mut logs = Vec::new();
    for bucket in 0..options.buckets {
        let (log, hw, log_start) = read_all(&ctx, bucket).await?;
        lock(&ctx.reader_targets).insert(bucket, hw);
        logs.push((log, log_start));
    }
    for r in readers {
        if tokio::time::timeout(SETTLE_TIMEOUT, r).await.is_err() {
            ctx.journal
                .violation("a reader did not catch up in the final life".to_owned());
        }
    }
    for node in &mut nodes {
        if !node.stop(Duration::from_secs(60)) {
            eprintln!(
                "mink_chaos: warning: node {} did not stop cleanly on SIGTERM; see {}",
                node.node_id,
                node.process.log().display()
            );
        }
    }

    let acks = lock(&ctx.journal.acks).clone();
    let readers = lock(&ctx.journal.reader_batches).clone();
    let mut problems = lock(&ctx.journal.violations).clone();
    let mut tally = Tally::default();
    for (bucket, (log, log_start)) in logs.iter().enumerate() {
        let bucket = bucket as u32;
        let mine: Vec<&Ack> = acks.iter().filter(|a| a.bucket == bucket).collect();
        problems.extend(check_bucket(
            bucket,
            log,
            *log_start,
            &mine,
            readers.get(&bucket),
            &mut tally,
        ));
    }
    if ctx.retention && logs.iter().all(|(_, start)| *start == 0) {
        problems.push(
            "retention was on and never moved a log start: the run did not test it (more data, \
             or a smaller --retention-bytes)"
                .to_owned(),
        );
    }
    let j = &ctx.journal;
    eprintln!(
        "mink_chaos: {} acknowledged batches ({} answered as duplicates of an earlier try), {} \
         append retries, {} rows in the log, {} reader reconnects, {} high watermarks checked, \
         {} node lives ({} with faults), {} acknowledged batches below the final log starts \
         (retention), {} reader jumps to a moved log start",
        tally.acked_batches,
        j.duplicate_acks.load(Ordering::Relaxed),
        j.append_retries.load(Ordering::Relaxed),
        tally.logged_rows,
        j.reader_reconnects.load(Ordering::Relaxed),
        j.high_watermarks_seen.load(Ordering::Relaxed),
        nodes.iter().map(|n| n.lives).sum::<u32>(),
        faulty_lives,
        tally.trimmed_batches,
        j.reader_trim_jumps.load(Ordering::Relaxed),
    );
    if problems.is_empty() && options.dir.is_none() {
        drop(nodes);
        let _ = std::fs::remove_dir_all(&dir);
    } else if !problems.is_empty() {
        eprintln!(
            "mink_chaos: the node's log and data are kept in {}",
            dir.display()
        );
    }
    Ok(Report {
        kills: options.kills - pauses,
        pauses,
        faulty_lives,
        tally,
        problems,
    })
}

/// Asks the node for a metadata snapshot until one is written.
async fn request_snapshot(ctx: &Ctx) -> Result<(), Error> {
    let mut last = String::new();
    for _ in 0..100 {
        match ctx
            .http
            .post(format!("{}/v1/admin/snapshot", ctx.url()))
            .timeout(Duration::from_secs(10))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) => last = format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("no metadata snapshot could be written: {last}"))
}

/// Loses the stopped node's metadata, restores the newest snapshot and rebuilds from the
/// objects (deleting what holds nothing placed, when the rebuild is complete); a stream the
/// rebuild could not recognise, a corrupt object, a log start moved past where it was at the
/// loss or a hole with acknowledged offsets at or past it is a violation.
fn lose_and_rebuild(node: &mut NodeProcess, ctx: &Ctx) -> Result<(), Error> {
    // The log starts at the loss, to check that the rebuild moves none past them, and which
    // bucket each stream is.
    let (starts, buckets) = at_loss(node)?;
    node.lose_metadata()?;
    ctx.metadata_lost.store(true, Ordering::SeqCst);
    let restored = node.admin(&["restore"])?;
    // Objects holding nothing placed are deleted: the checks then also show none was needed.
    let rebuilt = node.admin(&["rebuild", "--delete-unplaced"])?;
    eprintln!(
        "mink_chaos: metadata lost; restored {} keys from {}; rebuild read {} objects, placed {} \
         ({} ranges), recovered {} offsets in {} streams, moved {} log starts up to the lowest \
         offset found, removed {} records of gone objects, deleted {} of {} objects holding \
         nothing placed, in {:.2}s",
        restored["keys"],
        restored["from"],
        rebuilt["objects_read"],
        rebuilt["objects_placed"],
        rebuilt["ranges_placed"],
        rebuilt["offsets_recovered"],
        rebuilt["streams_moved"],
        rebuilt["starts_moved"].as_array().map_or(0, Vec::len),
        rebuilt["records_gone"],
        rebuilt["objects_deleted"],
        rebuilt["objects_unplaced"],
        rebuilt["seconds"].as_f64().unwrap_or(0.0),
    );
    // A log start moved up to the lowest offset found is fine only where retention had trimmed
    // that far before the loss: else acknowledged rows were dropped.
    for moved in rebuilt["starts_moved"].as_array().into_iter().flatten() {
        let (stream, to) = (moved[0].as_u64(), moved[2].as_u64());
        if let (Some(stream), Some(to)) = (stream, to)
            && let Some(start) = starts.get(&stream)
            && to > *start
        {
            ctx.journal.violation(format!(
                "the rebuild moved stream {stream}'s log start to {to}, past {start}, where it \
                 was at the loss"
            ));
        }
    }
    // A hole is what a kill leaves past a WAL PUT that never landed: later WAL objects that
    // landed hold nothing acknowledged, and the rebuild stops there (docs/metadata-recovery.md).
    // Fine only where nothing acknowledged lies at or past the hole.
    if let Some(holes) = rebuilt["holes"].as_array().filter(|h| !h.is_empty()) {
        eprintln!("mink_chaos: the rebuild stopped at holes (not placed): {holes:?}");
        let acks = lock(&ctx.journal.acks);
        for hole in holes {
            let (Some(stream), Some(from)) = (hole["stream_id"].as_u64(), hole["from"].as_u64())
            else {
                continue;
            };
            let Some(bucket) = buckets.get(&stream) else {
                ctx.journal.violation(format!(
                    "the rebuild left a hole in stream {stream}, of no bucket"
                ));
                continue;
            };
            let acked_end = acks
                .iter()
                .filter(|a| a.bucket == *bucket)
                .map(|a| a.base_offset + a.rows.len() as u64)
                .max()
                .unwrap_or(0);
            if acked_end > from {
                ctx.journal.violation(format!(
                    "the rebuild left bucket {bucket} (stream {stream}) unplaced from {from}, \
                     but offsets up to {acked_end} were acknowledged"
                ));
            }
        }
    }
    let found = |v: &serde_json::Value| v.as_array().is_some_and(|a| !a.is_empty());
    if found(&rebuilt["unknown_streams"])
        || found(&rebuilt["corrupt"])
        || found(&rebuilt["tables"]["corrupt"])
    {
        ctx.journal.violation(format!(
            "the rebuild could not place everything: unknown streams {}, corrupt objects {}, \
             corrupt manifests {}",
            rebuilt["unknown_streams"], rebuilt["corrupt"], rebuilt["tables"]["corrupt"]
        ));
    }
    Ok(())
}

/// Each stream's log start in the stopped node's metadata, and each stream's bucket (of the
/// run's table), from a backup to a file.
type AtLoss = (HashMap<u64, u64>, HashMap<u64, u32>);

fn at_loss(node: &NodeProcess) -> Result<AtLoss, Error> {
    let path = node.dir().join("before-loss.snap");
    let file = path.display().to_string();
    node.admin(&["backup", "--file", &file])?;
    let raw = std::fs::read(&path).map_err(|e| format!("read {file}: {e}"))?;
    let snapshot = mink_metadata::snapshot::MetaSnapshot::decode(&file, &raw)
        .map_err(|e| format!("decode {file}: {e}"))?;
    let (mut starts, mut buckets) = (HashMap::new(), HashMap::new());
    for (key, value) in &snapshot.entries {
        if key.starts_with(mink_metadata::keys::STREAMS) {
            let stream: mink_metadata::StreamRecord = mink_metadata::value::decode(key, value)
                .map_err(|e| format!("decode {key}: {e}"))?;
            starts.insert(stream.id, stream.start_offset);
        } else if let Some(rest) = key.strip_prefix(mink_tablet::registry::TABLETS)
            && rest.split(['/', '@']).next() == Some(TABLE)
        {
            // `{table}[@n]/{partition}/{bucket}` -> the bucket's stream id.
            let bucket = rest.rsplit('/').next().and_then(|b| b.parse::<u32>().ok());
            let stream = mink_tablet::registry::decode(key, value).ok();
            if let (Some(bucket), Some(stream)) = (bucket, stream) {
                buckets.insert(stream, bucket);
            }
        }
    }
    Ok((starts, buckets))
}

/// One event of a cluster run, on a random node once every node serves and the writers made
/// progress: a kill -9 and an immediate restart (the new life waits for the old lease, then
/// joins), or a pause past the lease (SIGSTOP, then SIGCONT: the node finds its lease lost and
/// rejoins by itself). Returns whether it was a pause.
async fn cluster_event(
    nodes: &mut [NodeProcess],
    ctx: &Ctx,
    rng: &mut SeededRng,
    event: u32,
    options: &Options,
    mean: f64,
) -> Result<bool, Error> {
    for node in nodes.iter_mut() {
        node.wait_ready(&ctx.http).await?;
    }
    let started = Instant::now();
    let acked_before = acked_count(ctx);
    let wait = Duration::from_secs_f64(mean * (0.3 + 1.4 * rng.next_f64()));
    while started.elapsed() < wait
        || (acked_count(ctx) == acked_before && started.elapsed() < wait + Duration::from_secs(5))
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let victim = rng.between(0, nodes.len() as u64 - 1) as usize;
    let node = &mut nodes[victim];
    let pause = rng.next_f64() < 0.35;
    if pause {
        let length = CLUSTER_LEASE_TTL + Duration::from_millis(rng.between(500, 1500));
        node.signal("-STOP")?;
        tokio::time::sleep(length).await;
        node.signal("-CONT")?;
        eprintln!(
            "mink_chaos: event {event}/{}: paused node {} for {:.1}s ({} acknowledged so far)",
            options.kills,
            node.node_id,
            length.as_secs_f64(),
            acked_count(ctx)
        );
    } else {
        node.kill()?;
        eprintln!(
            "mink_chaos: event {event}/{}: killed node {} ({} acknowledged so far)",
            options.kills,
            node.node_id,
            acked_count(ctx)
        );
        node.start(None)?;
    }
    Ok(pause)
}
