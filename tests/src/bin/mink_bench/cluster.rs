//! Item 8 (`--cluster`): several nodes on the S3 server (moto) and etcd of the run.
//!
//! - Throughput: the same group-commit load (writers, each with one 64 x 1 KiB request in
//!   flight, one bucket each, sent to the bucket's owner) against one node and against three,
//!   beside raw PUTs with as many requests in flight to the same store: whether the nodes scale
//!   until the store is the limit.
//! - Transfer: from `POST .../transfer` to the first append the new owner acknowledges.
//! - Failover: from an owner's kill -9 to the first append a survivor acknowledges for its
//!   bucket, against the lease TTL (goal: TTL + 2 s).
//! - Graceful stop: SIGTERM to exit of a node holding hundreds of open buckets, which it hands
//!   to the others first.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::args::Options;
use crate::raw::raw_store;
use crate::report::{ms, verdict};
use crate::rows::{kv_fields, mink_batch};
use crate::{Error, GROUP_ROWS, MINK_BATCHES};

/// The nodes' lease TTL.
const LEASE_TTL: Duration = Duration::from_secs(3);
/// Writers (and buckets) of the throughput runs.
const WRITERS: u32 = 12;

struct Nodes {
    nodes: Vec<mink_tests::node::NodeProcess>,
    ids: Vec<String>,
    configs: Vec<String>,
    http: reqwest::Client,
}

impl Nodes {
    async fn start(binary: &Path, dir: &Path, count: usize) -> Result<Nodes, Error> {
        let prefix = mink_tests::unique_prefix("bench-cluster");
        let etcd = mink_tests::etcd_endpoints();
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        let mut nodes = Nodes {
            nodes: Vec::new(),
            ids: Vec::new(),
            configs: Vec::new(),
            http,
        };
        for n in 0..count {
            let id = format!("bench-{}", n + 1);
            let node_dir = dir.join(&id);
            std::fs::create_dir_all(&node_dir)
                .map_err(|e| format!("create {}: {e}", node_dir.display()))?;
            let mut node = mink_tests::node::NodeProcess::new(binary, &node_dir)?;
            let config = format!(
                "{}{}[metadata]\nbackend = \"etcd\"\netcd_endpoints = {etcd:?}\netcd_prefix = \"{prefix}/\"\n\
                 [cluster]\nlease_ttl_ms = {}\nlease_margin_ms = 400\n\
                 [http]\nmax_connections_per_client = 10000\n",
                node.base_config(&id),
                mink_tests::node::s3_storage_config(&prefix),
                LEASE_TTL.as_millis(),
            );
            node.start(&config, None)?;
            nodes.nodes.push(node);
            nodes.ids.push(id);
            nodes.configs.push(config);
        }
        for node in &mut nodes.nodes {
            node.wait_ready(&nodes.http).await?;
        }
        // Every node in every view before a table's buckets are spread over them.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut all = true;
            for n in 0..count {
                let v = nodes.view(n).await?;
                let serving = v["nodes"].as_array().map_or(0, |a| {
                    a.iter()
                        .filter(|n| !n["http_url"].as_str().unwrap_or("").is_empty())
                        .count()
                });
                all &= serving == count;
            }
            if all {
                return Ok(nodes);
            }
            if Instant::now() > deadline {
                return Err(format!("the {count} nodes never all saw each other"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn url(&self, n: usize) -> String {
        self.nodes[n].url()
    }

    async fn view(&self, n: usize) -> Result<serde_json::Value, Error> {
        self.http
            .get(format!("{}/v1/cluster", self.url(n)))
            .send()
            .await
            .map_err(|e| format!("/v1/cluster: {e}"))?
            .json()
            .await
            .map_err(|e| format!("/v1/cluster: {e}"))
    }

    /// The index of the node each bucket of `table` is assigned to, as node `via` sees it.
    async fn owners(&self, via: usize, table: &str) -> Result<Vec<(u32, usize)>, Error> {
        let v = self.view(via).await?;
        let mut owners = Vec::new();
        for a in v["assignments"].as_array().into_iter().flatten() {
            let key: Vec<&str> = a["key"].as_str().unwrap_or("").split('/').collect();
            if key.len() != 5 || key[2].split('@').next() != Some(table) {
                continue;
            }
            let (Ok(bucket), Some(node)) = (key[4].parse::<u32>(), a["node"].as_str()) else {
                continue;
            };
            if let Some(n) = self.ids.iter().position(|id| id == node) {
                owners.push((bucket, n));
            }
        }
        owners.sort_unstable();
        Ok(owners)
    }

    async fn create_table(&self, name: &str, buckets: u32) -> Result<(), Error> {
        let r = self
            .http
            .post(format!("{}/v1/tables", self.url(0)))
            .json(&serde_json::json!({"name": name, "buckets": buckets,
                                      "schema": {"fields": kv_fields()}}))
            .send()
            .await
            .map_err(|e| format!("create {name}: {e}"))?;
        if r.status().is_success() {
            Ok(())
        } else {
            Err(format!("create {name}: {}", r.status()))
        }
    }

    fn stop(&mut self) {
        for node in &mut self.nodes {
            let _ = node.stop(Duration::from_secs(60));
        }
    }
}

/// Appends `body` to `url` until `stop`, one request in flight; counts acknowledged bytes and
/// records when the last acknowledgement came.
async fn load(
    http: reqwest::Client,
    url: String,
    body: Bytes,
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::Relaxed) {
        let r = http
            .post(&url)
            .header("content-type", MINK_BATCHES)
            .body(body.clone())
            .send()
            .await;
        match r {
            Ok(r) if r.status().is_success() => {
                bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// MB/s of acknowledged appends from [`WRITERS`] writers, one per bucket of a new table, each
/// sending to its bucket's owner, for `seconds`.
async fn throughput(nodes: &Nodes, table: &str, seconds: f64) -> Result<f64, Error> {
    nodes.create_table(table, WRITERS).await?;
    let owners = nodes.owners(0, table).await?;
    if owners.len() != WRITERS as usize {
        return Err(format!("{table}: {} buckets assigned", owners.len()));
    }
    let body = mink_batch(GROUP_ROWS)?;
    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (bucket, owner) in owners {
        let url = format!(
            "{}/v1/tables/{table}/buckets/{bucket}/records",
            nodes.url(owner)
        );
        tasks.push(tokio::spawn(load(
            nodes.http.clone(),
            url,
            body.clone(),
            stop.clone(),
            bytes.clone(),
        )));
    }
    // A second of warm-up (tablets open), then the measured window.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let from = bytes.load(Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let mbps =
        (bytes.load(Ordering::Relaxed) - from) as f64 / started.elapsed().as_secs_f64() / 1e6;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    Ok(mbps)
}

/// Raw PUTs of `body`-sized objects with [`WRITERS`] in flight, MB/s, for `seconds`.
async fn raw_concurrent(options: &Options, dir: &Path, seconds: f64) -> Result<f64, Error> {
    let raw = raw_store(
        crate::args::Store::Moto,
        &dir.join("raw"),
        &mink_tests::unique_prefix("bench-cluster-raw"),
    )?;
    let object = Bytes::from(vec![0x5au8; mink_batch(GROUP_ROWS)?.len()]);
    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (raw, object, stop, bytes) = (raw.clone(), object.clone(), stop.clone(), bytes.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if raw
                    .put(&format!("raw/w{w}-{i}"), object.clone())
                    .await
                    .is_ok()
                {
                    bytes.fetch_add(object.len() as u64, Ordering::Relaxed);
                }
                i += 1;
            }
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let mbps = bytes.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64() / 1e6;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let _ = options;
    Ok(mbps)
}

/// Appends one row at a time to `url` until one is acknowledged after `after`; returns when.
async fn first_ack_after(http: &reqwest::Client, urls: &[String], after: Instant) -> Instant {
    let body = crate::rows::ndjson_row(1);
    let mut n = 0;
    loop {
        let url = &urls[n % urls.len()];
        let r = http
            .post(url)
            .header("content-type", "application/x-ndjson")
            .timeout(Duration::from_secs(5))
            .body(body.clone())
            .send()
            .await;
        let now = Instant::now();
        match r {
            Ok(r) if r.status().is_success() && now > after => return now,
            Ok(r) if r.status().is_success() => {}
            _ => n += 1,
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Item 8; returns its Markdown section.
pub(crate) async fn run(options: &Options, dir: &Path) -> Result<String, Error> {
    let quick = options.quick;
    let seconds = if quick { 4.0 } else { 10.0 };
    let mut md = String::new();
    let _ = write!(
        md,
        "## Several nodes on `moto` and etcd\n\n\
         Nodes with a lease TTL of {} s; appends are 64 x 1 KiB rows as one mink batch.\n\n",
        LEASE_TTL.as_secs()
    );

    // Throughput: one node, then three.
    let raw = raw_concurrent(options, dir, seconds).await?;
    let mut one = Nodes::start(&options.node, &dir.join("one"), 1).await?;
    let single = throughput(&one, "scale1", seconds).await?;
    one.stop();
    let mut three = Nodes::start(&options.node, &dir.join("three"), 3).await?;
    let triple = throughput(&three, "scale3", seconds).await?;
    let _ = write!(
        md,
        "### 8a. Append throughput, 1 node vs 3 nodes\n\n\
         {WRITERS} writers, one bucket each, each sending to its bucket's owner, {seconds:.0} s; \
         baseline: raw PUTs of objects as large as one request, {WRITERS} in flight, to the same \
         store in the same run.\n\n\
         | case | MB/s | ratio to raw PUTs with {WRITERS} in flight |\n|---|---|---|\n\
         | raw PUT, {WRITERS} in flight | {raw:.1} | 1.00x |\n\
         | 1 node | {single:.1} | {:.2}x |\n\
         | 3 nodes | {triple:.1} | {:.2}x |\n\n\
         3 nodes / 1 node: **{:.2}x**. All nodes and the store share this machine's two cores, so \
         a ratio near 1 means the machine (or moto) is the limit, not the node count.\n\n",
        single / raw.max(f64::EPSILON),
        triple / raw.max(f64::EPSILON),
        triple / single.max(f64::EPSILON),
    );

    // Transfer: move a bucket between nodes, the first append the new owner serves.
    three.create_table("moves", 1).await?;
    let mut transfers = Vec::new();
    let rounds = if quick { 3 } else { 7 };
    for _ in 0..rounds {
        let owner = three.owners(0, "moves").await?[0].1;
        let to = (owner + 1) % 3;
        let url = format!("{}/v1/tables/moves/buckets/0/records", three.url(to));
        // Warm: the owner has the tablet open.
        first_ack_after(&three.http, std::slice::from_ref(&url), Instant::now()).await;
        let asked = Instant::now();
        let r = three
            .http
            .post(format!(
                "{}/v1/tables/moves/buckets/0/transfer",
                three.url(owner)
            ))
            .json(&serde_json::json!({"to": three.ids[to]}))
            .send()
            .await
            .map_err(|e| format!("transfer: {e}"))?;
        if r.status() != reqwest::StatusCode::ACCEPTED {
            return Err(format!("transfer: {}", r.status()));
        }
        // Sent to the new owner itself: served once it has opened the bucket.
        let plain = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        let served = first_ack_after(&plain, std::slice::from_ref(&url), asked).await;
        transfers.push(served - asked);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let transfer = median(transfers.clone());
    let _ = write!(
        md,
        "### 8b. Transfer: from the command to the first append the new owner acknowledges\n\n\
         {rounds} transfers of a bucket under no other load: median **{:.0} ms** (all: {}). \
         Goal under 1 s: {}.\n\n",
        ms(transfer),
        transfers
            .iter()
            .map(|d| format!("{:.0}", ms(*d)))
            .collect::<Vec<_>>()
            .join(", "),
        verdict(transfer < Duration::from_secs(1))
    );

    // Failover: kill -9 the owner of a bucket; the first append a survivor acknowledges.
    let mut failovers = Vec::new();
    let kills = if quick { 1 } else { 3 };
    for k in 0..kills {
        let table = format!("failover{k}");
        three.create_table(&table, 3).await?;
        let owners = three.owners(0, &table).await?;
        let (bucket, victim) = owners
            .iter()
            .copied()
            .find(|(_, n)| *n != 0)
            .ok_or("no bucket on node 2 or 3")?;
        let urls: Vec<String> = (0..3)
            .filter(|n| *n != victim)
            .map(|n| {
                format!(
                    "{}/v1/tables/{table}/buckets/{bucket}/records",
                    three.url(n)
                )
            })
            .collect();
        first_ack_after(&three.http, &urls, Instant::now()).await;
        three.nodes[victim].kill()?;
        let killed = Instant::now();
        let served = first_ack_after(&three.http, &urls, killed).await;
        failovers.push(served - killed);
        // The node comes back for the next round (a new incarnation).
        let config = three.configs[victim].clone();
        three.nodes[victim].start(&config, None)?;
        three.nodes[victim].wait_ready(&three.http).await?;
        tokio::time::sleep(LEASE_TTL).await;
    }
    // Graceful stop: a node holding many open buckets hands them to the other two.
    let buckets: u32 = if quick { 150 } else { 600 };
    three.create_table("drain", buckets).await?;
    let owners = three.owners(0, "drain").await?;
    let victim = 2;
    let held: Vec<u32> = owners
        .iter()
        .filter(|(_, n)| *n == victim)
        .map(|(b, _)| *b)
        .collect();
    // Open each of them on its owner with an append.
    let row = crate::rows::ndjson_row(1);
    let mut opening = tokio::task::JoinSet::new();
    for b in &held {
        let url = format!("{}/v1/tables/drain/buckets/{b}/records", three.url(victim));
        let (http, row) = (three.http.clone(), row.clone());
        opening.spawn(async move {
            http.post(url)
                .header("content-type", "application/x-ndjson")
                .body(row)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        });
    }
    let mut open = 0;
    while let Some(ok) = opening.join_next().await {
        open += usize::from(ok.unwrap_or(false));
    }
    let stopping = Instant::now();
    let stopped = three.nodes[victim].stop(Duration::from_secs(120));
    let drain = stopping.elapsed();
    let after = three.owners(0, "drain").await?;
    let moved = after.iter().filter(|(_, n)| *n != victim).count();
    three.stop();
    let mut drain_md = String::new();
    let _ = write!(
        drain_md,
        "### 8d. Graceful stop of a node holding {open} open buckets\n\n\
         SIGTERM to exit: **{:.2} s** ({}); afterwards {moved} of the table's {buckets} buckets \
         are assigned to the other two nodes. Goal: within a supervisor's usual 30 s: {}.\n\n",
        drain.as_secs_f64(),
        if stopped.is_ok() {
            "exit status 0"
        } else {
            "not a clean exit"
        },
        verdict(stopped.is_ok() && drain < Duration::from_secs(30) && moved == buckets as usize)
    );
    let failover = median(failovers.clone());
    let goal = LEASE_TTL + Duration::from_secs(2);
    let _ = write!(
        md,
        "### 8c. Failover: from an owner's kill -9 to the first append a survivor acknowledges\n\n\
         {kills} kills: median **{:.2} s** (all: {}), lease TTL {} s. Goal TTL + 2 s = {} s: {}.\n\n",
        failover.as_secs_f64(),
        failovers
            .iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", "),
        LEASE_TTL.as_secs(),
        goal.as_secs(),
        verdict(failover <= goal)
    );
    md += &drain_md;
    Ok(md)
}
