//! Three `mink` processes on one S3 bucket and one etcd (the servers `cargo xtask test` started),
//! each under a unique key prefix: failover after a kill -9 and after a pause past the lease.
//!
//! Writers are idempotent (a writer id per bucket, one sequence number per row) and retry every
//! row until it is acknowledged, through whichever node answers, following redirects; every
//! acknowledged row must then be read back exactly once, at its acknowledged offset, with the
//! offsets of each bucket contiguous. These tests run one at a time (the `cluster` test group).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mink_tests::node::{NodeProcess, s3_storage_config};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::Mutex as StdMutex;

const NDJSON: &str = "application/x-ndjson";
const LEASE_TTL_MS: u64 = 3000;

/// The `mink` binary of this build (the workspace build `cargo xtask test` runs builds it next
/// to the test binaries).
fn mink_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let binary = dir.join("mink");
    assert!(
        binary.exists(),
        "{} is missing: build the workspace first (cargo xtask test does)",
        binary.display()
    );
    binary
}

struct Cluster {
    nodes: Vec<NodeProcess>,
    ids: Vec<String>,
    configs: Vec<String>,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start(test: &str, count: usize) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let prefix = mink_tests::unique_prefix(test);
        let etcd = mink_tests::etcd_endpoints();
        let binary = mink_binary();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let mut cluster = Cluster {
            nodes: Vec::new(),
            ids: Vec::new(),
            configs: Vec::new(),
            http,
            _dir: dir,
        };
        for n in 0..count {
            let id = format!("n{n}");
            let node_dir = cluster._dir.path().join(&id);
            std::fs::create_dir_all(&node_dir).unwrap();
            let mut node = NodeProcess::new(&binary, &node_dir).unwrap();
            let config = format!(
                "{}{}[metadata]\nbackend = \"etcd\"\netcd_endpoints = {etcd:?}\netcd_prefix = \"{prefix}/\"\n\
                 [cluster]\nlease_ttl_ms = {LEASE_TTL_MS}\nlease_margin_ms = 400\n\
                 [node]\nexit_delay_on_wal_failure_ms = 0\n",
                node.base_config(&id),
                s3_storage_config(&prefix),
            );
            node.start(&config, Some(&format!("--- {id} ---"))).unwrap();
            cluster.nodes.push(node);
            cluster.ids.push(id);
            cluster.configs.push(config);
        }
        for node in &mut cluster.nodes {
            node.wait_ready(&cluster.http).await.unwrap();
        }
        // Every node sees every other before tables are created.
        let deadline = Instant::now() + Duration::from_secs(20);
        for n in 0..count {
            loop {
                let members = cluster.cluster_view(n).await.map(|v| {
                    v["nodes"].as_array().map_or(0, |nodes| {
                        nodes
                            .iter()
                            .filter(|n| !n["http_url"].as_str().unwrap_or("").is_empty())
                            .count()
                    })
                });
                if members.is_ok_and(|m| m == count) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node {n} never saw {count} nodes"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        cluster
    }

    fn url(&self, n: usize) -> String {
        self.nodes[n].url()
    }

    async fn cluster_view(&self, n: usize) -> Result<Value, reqwest::Error> {
        self.http
            .get(format!("{}/v1/cluster", self.url(n)))
            .send()
            .await?
            .json()
            .await
    }

    /// The node each bucket of `table` is assigned to, by node index, as node `via` sees it.
    async fn owners(&self, via: usize, table: &str) -> BTreeMap<u32, usize> {
        let view = self.cluster_view(via).await.unwrap();
        let mut owners = BTreeMap::new();
        for a in view["assignments"].as_array().unwrap() {
            // mink/assign/{table}/{partition}/{bucket}
            let key: Vec<&str> = a["key"].as_str().unwrap().split('/').collect();
            // `{name}` or `{name}@{incarnation}`
            if key[2].split('@').next() != Some(table) {
                continue;
            }
            let bucket: u32 = key[4].parse().unwrap();
            let node = a["node"].as_str().unwrap();
            owners.insert(bucket, self.ids.iter().position(|id| id == node).unwrap());
        }
        owners
    }

    async fn create_table(&self, name: &str, buckets: u32) {
        let r = self
            .http
            .post(format!("{}/v1/tables", self.url(0)))
            .json(&json!({"name": name, "buckets": buckets,
                          "schema": {"fields": [{"name": "id", "type": "int64"}]}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED, "{:?}", r.text().await);
    }

    async fn writer_id(&self) -> u64 {
        let r: Value = self
            .http
            .post(format!("{}/v1/writers", self.url(0)))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        r["writer_id"].as_u64().unwrap()
    }

    /// Reads every row of `bucket` through node `via` (following redirects), as `(offset, id)`.
    async fn read_all(&self, via: usize, table: &str, bucket: u32) -> Vec<(u64, i64)> {
        let mut rows = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            assert!(
                Instant::now() < deadline,
                "reading bucket {bucket} took too long"
            );
            let offset = rows.len() as u64;
            let r = self
                .http
                .get(format!(
                    "{}/v1/tables/{table}/buckets/{bucket}/records?offset={offset}",
                    self.url(via)
                ))
                .header("accept", NDJSON)
                .send()
                .await;
            let Ok(r) = r else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            if r.status() != StatusCode::OK {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            let high: u64 = r.headers()["mink-high-watermark"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            let text = r.text().await.unwrap();
            for (i, line) in text.lines().enumerate() {
                let row: Value = serde_json::from_str(line).unwrap();
                rows.push((offset + i as u64, row["id"].as_i64().unwrap()));
            }
            if rows.len() as u64 >= high {
                return rows;
            }
        }
    }
}

/// What the writers saw acknowledged: per bucket, `id -> offset`.
type Acked = Arc<StdMutex<BTreeMap<u32, BTreeMap<i64, u64>>>>;

/// Appends rows 0, 1, 2, ... to `bucket` as writer `writer` (sequence = id), each retried until
/// acknowledged, through the nodes in turn from `entry`, until `stop`. `first_ack_after`
/// records when the first acknowledgement after the given instant came.
#[allow(clippy::too_many_arguments)]
async fn write(
    urls: Vec<String>,
    mut entry: usize,
    table: &'static str,
    bucket: u32,
    writer: u64,
    acked: Acked,
    stop: Arc<AtomicBool>,
    pause: Duration,
) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut id: i64 = 0;
    while !stop.load(Ordering::Acquire) {
        let sent = http
            .post(format!(
                "{}/v1/tables/{table}/buckets/{bucket}/records",
                urls[entry]
            ))
            .header("content-type", NDJSON)
            .header("mink-writer-id", writer.to_string())
            .header("mink-sequence", id.to_string())
            .body(format!("{{\"id\":{id}}}\n"))
            .send()
            .await;
        match sent {
            Ok(r) if r.status() == StatusCode::OK => {
                let answer: Value = r.json().await.unwrap();
                let offset = answer["base_offset"].as_u64().unwrap();
                let before = acked
                    .lock()
                    .unwrap()
                    .entry(bucket)
                    .or_default()
                    .insert(id, offset);
                if let Some(before) = before {
                    assert_eq!(before, offset, "row {id} of bucket {bucket} moved");
                }
                id += 1;
                tokio::time::sleep(pause).await;
            }
            Ok(r) if r.status().is_server_error() => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(r) => panic!(
                "bucket {bucket}, row {id}: {} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            ),
            Err(_) => {
                // The node (or the one it redirected to) is gone or paused: try the next.
                entry = (entry + 1) % urls.len();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Checks every acknowledged row of every bucket is read back once, at its offset, and the
/// offsets are contiguous; returns the rows checked.
async fn check(cluster: &Cluster, via: usize, table: &str, acked: &Acked) -> usize {
    let acked = acked.lock().unwrap().clone();
    let mut total = 0;
    for (bucket, rows) in &acked {
        let read = cluster.read_all(via, table, *bucket).await;
        let mut at: BTreeMap<i64, u64> = BTreeMap::new();
        for (offset, id) in &read {
            assert!(
                at.insert(*id, *offset).is_none(),
                "bucket {bucket}: row {id} read twice"
            );
        }
        for (id, offset) in rows {
            assert_eq!(
                at.get(id),
                Some(offset),
                "bucket {bucket}: acknowledged row {id} not at offset {offset}"
            );
        }
        total += rows.len();
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owner_fails_over_with_every_acknowledged_row() {
    const TABLE: &str = "t";
    const BUCKETS: u32 = 6;
    let mut cluster = Cluster::start("cluster-kill", 3).await;
    cluster.create_table(TABLE, BUCKETS).await;
    let owners = cluster.owners(0, TABLE).await;
    assert_eq!(
        owners.len(),
        BUCKETS as usize,
        "{}",
        cluster.cluster_view(0).await.unwrap()
    );
    let urls: Vec<String> = (0..3).map(|n| cluster.url(n)).collect();
    let acked: Acked = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for bucket in 0..BUCKETS {
        let writer = cluster.writer_id().await;
        writers.push(tokio::spawn(write(
            urls.clone(),
            bucket as usize % 3,
            TABLE,
            bucket,
            writer,
            acked.clone(),
            stop.clone(),
            Duration::from_millis(20),
        )));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Kill the owner of bucket 0 (never node 0, which the checks read through).
    let victim = owners[&0].max(1);
    let lost: Vec<u32> = owners
        .iter()
        .filter(|(_, n)| **n == victim)
        .map(|(b, _)| *b)
        .collect();
    let before: BTreeMap<u32, usize> = lost
        .iter()
        .map(|b| (*b, acked.lock().unwrap().get(b).map_or(0, BTreeMap::len)))
        .collect();
    cluster.nodes[victim].kill().unwrap();
    let killed = Instant::now();
    // Every bucket it owned accepts appends on a survivor again.
    let mut recovered = BTreeMap::new();
    while recovered.len() < lost.len() {
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "buckets {lost:?} did not fail over: {recovered:?}"
        );
        for b in &lost {
            let now = acked.lock().unwrap().get(b).map_or(0, BTreeMap::len);
            if now > before[b] + 1 && !recovered.contains_key(b) {
                recovered.insert(*b, killed.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let slowest = recovered.values().max().copied().unwrap_or_default();
    eprintln!(
        "failover: node {victim} killed; its buckets {lost:?} took appends again after {recovered:?} (lease TTL {LEASE_TTL_MS} ms)"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Release);
    for w in writers {
        w.await.unwrap();
    }
    let owners_after = cluster.owners(0, TABLE).await;
    assert!(
        owners_after.values().all(|n| *n != victim),
        "{owners_after:?}"
    );
    let rows = check(&cluster, 0, TABLE, &acked).await;
    eprintln!(
        "failover: {rows} acknowledged rows, every one once at its offset; slowest bucket {slowest:?}"
    );
    assert!(rows > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_acknowledges_nothing_after_its_lease() {
    const TABLE: &str = "p";
    const BUCKETS: u32 = 3;
    let mut cluster = Cluster::start("cluster-pause", 3).await;
    cluster.create_table(TABLE, BUCKETS).await;
    let owners = cluster.owners(0, TABLE).await;
    // Pause the owner of some bucket (never node 0, which the checks read through).
    let (bucket, victim) = owners
        .iter()
        .find(|(_, n)| **n != 0)
        .map(|(b, n)| (*b, *n))
        .expect("a bucket on node 1 or 2");
    let urls: Vec<String> = (0..3).map(|n| cluster.url(n)).collect();
    let acked: Acked = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = cluster.writer_id().await;
    let writing = tokio::spawn(write(
        urls.clone(),
        0,
        TABLE,
        bucket,
        writer,
        acked.clone(),
        stop.clone(),
        Duration::from_millis(20),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pid = cluster.nodes[victim].pid().unwrap().to_string();
    let signal = |sig: &str| {
        let status = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill {sig} {pid}");
    };
    signal("-STOP");
    let paused = Instant::now();
    // An append sent straight to the paused owner waits in its socket.
    let stale_writer = cluster.writer_id().await;
    let stale = {
        // Not following redirects: what the paused node itself answers is what counts.
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let url = format!(
            "{}/v1/tables/{TABLE}/buckets/{bucket}/records",
            cluster.url(victim)
        );
        tokio::spawn(async move {
            http.post(url)
                .header("content-type", NDJSON)
                .header("mink-writer-id", stale_writer.to_string())
                .header("mink-sequence", "0")
                .body("{\"id\":-1}\n")
                .send()
                .await
        })
    };
    // The writer goes on through the others once the lease has ended and the bucket moved.
    let before = acked.lock().unwrap().get(&bucket).map_or(0, BTreeMap::len);
    loop {
        assert!(
            paused.elapsed() < Duration::from_secs(30),
            "bucket {bucket} did not fail over"
        );
        if acked.lock().unwrap().get(&bucket).map_or(0, BTreeMap::len) > before + 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "pause: bucket {bucket} took appends on a survivor {:?} after node {victim} was stopped",
        paused.elapsed()
    );
    signal("-CONT");
    // The resumed node acknowledges nothing more: the append it held is not a success.
    let answer = stale.await.unwrap();
    if let Ok(r) = answer {
        let status = r.status();
        let body = r.text().await.unwrap_or_default();
        assert_ne!(
            status,
            StatusCode::OK,
            "the resumed node acknowledged an append after its lease: {body}"
        );
        eprintln!("pause: the resumed node answered the append it held with {status}");
    }
    // It knows its lease is lost, and exits to be restarted as a new incarnation.
    let resumed = Instant::now();
    let status = loop {
        if let Some(status) = cluster.nodes[victim].exited() {
            break status;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(15),
            "the resumed node did not exit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(75), "{status}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Release);
    writing.await.unwrap();
    // No fork: the log is what the writer saw acknowledged, and the stale row is not in it.
    let rows = check(&cluster, 0, TABLE, &acked).await;
    let read = cluster.read_all(0, TABLE, bucket).await;
    assert!(
        read.iter().all(|(_, id)| *id >= 0),
        "the stale append landed"
    );
    // (The writer's last row may have landed without its answer reaching it before it stopped.)
    assert!(read.len() <= rows + 1, "nothing but the acknowledged rows");
    eprintln!("pause: {rows} acknowledged rows, every one once at its offset");
}

/// Follows `bucket` over SSE through node `url` (redirected to its owner), reconnecting from
/// the last event id whenever a connection ends, until `stop` and it has read `until` (set by
/// the test once the writers stop). Returns `(offset, id)` of every row in order.
async fn follow_sse(
    url: String,
    table: &'static str,
    bucket: u32,
    stop: Arc<AtomicBool>,
    until: Arc<std::sync::atomic::AtomicU64>,
) -> Vec<(u64, i64)> {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    let http = reqwest::Client::new();
    let mut rows = Vec::new();
    let mut next = 0u64;
    let mut connections = 0;
    loop {
        if stop.load(Ordering::Acquire) && next >= until.load(Ordering::Acquire) {
            return rows;
        }
        let r = http
            .get(format!(
                "{url}/v1/tables/{table}/buckets/{bucket}/records?offset={next}"
            ))
            .header("accept", "text/event-stream")
            .header("last-event-id", next.to_string())
            .send()
            .await;
        let Ok(r) = r else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        if r.status() != StatusCode::OK {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        connections += 1;
        let mut events = r.bytes_stream().eventsource();
        loop {
            let event = tokio::time::timeout(Duration::from_millis(500), events.next()).await;
            let event = match event {
                Ok(Some(Ok(event))) => event,
                // The connection ended (a recycle, a transfer) or broke: reconnect.
                Ok(Some(Err(_)) | None) => break,
                Err(_) => {
                    if stop.load(Ordering::Acquire) && next >= until.load(Ordering::Acquire) {
                        break;
                    }
                    continue;
                }
            };
            if event.event != "message" {
                continue;
            }
            let batch: Vec<Value> = serde_json::from_str(&event.data).unwrap();
            let end: u64 = event.id.parse().unwrap();
            assert_eq!(
                end - next,
                batch.len() as u64,
                "an SSE event starts where the last ended"
            );
            for (i, row) in batch.iter().enumerate() {
                rows.push((next + i as u64, row["id"].as_i64().unwrap()));
            }
            next = end;
        }
        assert!(connections < 10_000);
    }
}

/// Follows `bucket` with long-polls through node `url`, as [`follow_sse`] does.
async fn follow_long_poll(
    url: String,
    table: &'static str,
    bucket: u32,
    stop: Arc<AtomicBool>,
    until: Arc<std::sync::atomic::AtomicU64>,
) -> Vec<(u64, i64)> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut rows = Vec::new();
    let mut next = 0u64;
    while !(stop.load(Ordering::Acquire) && next >= until.load(Ordering::Acquire)) {
        let r = http
            .get(format!(
                "{url}/v1/tables/{table}/buckets/{bucket}/records?offset={next}&live=long-poll&timeout_ms=500"
            ))
            .header("accept", NDJSON)
            .send()
            .await;
        let Ok(r) = r else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        match r.status() {
            StatusCode::OK => {
                let text = r.text().await.unwrap();
                for line in text.lines() {
                    let row: Value = serde_json::from_str(line).unwrap();
                    rows.push((next, row["id"].as_i64().unwrap()));
                    next += 1;
                }
            }
            StatusCode::NO_CONTENT => {}
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_under_live_readers_and_writers_loses_and_repeats_nothing() {
    const TABLE: &str = "x";
    let cluster = Cluster::start("cluster-transfer", 3).await;
    cluster.create_table(TABLE, 1).await;
    let owner = cluster.owners(0, TABLE).await[&0];
    let others: Vec<usize> = (0..3).filter(|n| *n != owner).collect();
    let (reader_node, target) = (others[0], others[1]);
    let acked: Acked = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let until = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
    // Everything through nodes that do not own the bucket: every request is redirected.
    let writer = cluster.writer_id().await;
    let writing = tokio::spawn(write(
        vec![cluster.url(reader_node), cluster.url(target)],
        0,
        TABLE,
        0,
        writer,
        acked.clone(),
        stop.clone(),
        Duration::from_millis(10),
    ));
    let sse = tokio::spawn(follow_sse(
        cluster.url(reader_node),
        TABLE,
        0,
        stop.clone(),
        until.clone(),
    ));
    let long_poll = tokio::spawn(follow_long_poll(
        cluster.url(target),
        TABLE,
        0,
        stop.clone(),
        until.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = acked.lock().unwrap().get(&0).map_or(0, BTreeMap::len);
    let asked = Instant::now();
    let moved = cluster
        .http
        .post(format!(
            "{}/v1/tables/{TABLE}/buckets/0/transfer",
            cluster.url(reader_node)
        ))
        .json(&json!({"to": cluster.ids[target]}))
        .send()
        .await
        .unwrap();
    assert_eq!(moved.status(), StatusCode::ACCEPTED);
    // The first append the new owner acknowledged.
    loop {
        assert!(
            asked.elapsed() < Duration::from_secs(20),
            "no append after the transfer"
        );
        if acked.lock().unwrap().get(&0).map_or(0, BTreeMap::len) > before + 1
            && cluster.owners(target, TABLE).await[&0] == target
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!(
        "transfer: appends served again {:?} after the transfer was asked",
        asked.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Release);
    writing.await.unwrap();
    let log = cluster.read_all(0, TABLE, 0).await;
    until.store(log.len() as u64, Ordering::Release);
    let sse = tokio::time::timeout(Duration::from_secs(30), sse)
        .await
        .expect("the SSE reader caught up")
        .unwrap();
    let long_poll = tokio::time::timeout(Duration::from_secs(30), long_poll)
        .await
        .expect("the long-poll reader caught up")
        .unwrap();
    assert_eq!(sse, log, "the SSE reader saw the log: no gap, no duplicate");
    assert_eq!(long_poll, log, "the long-poll reader saw the log");
    let rows = check(&cluster, 0, TABLE, &acked).await;
    assert!(rows > 10, "{rows}");
    eprintln!("transfer: {rows} acknowledged rows; both readers saw every one once, in order");
}
