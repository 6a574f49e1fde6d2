//! The three-node harness: `mink` processes on the test S3 server and etcd, idempotent writers
//! that retry every row until it is acknowledged, and the check that every acknowledged row is
//! read back once at its offset.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use mink_tests::node::{NodeProcess, s3_storage_config, s3_storage_config_at};
use reqwest::StatusCode;
use serde_json::{Value, json};

pub(crate) const NDJSON: &str = "application/x-ndjson";
pub(crate) const LEASE_TTL_MS: u64 = 3000;

/// Where one node of a [`Cluster`] runs apart from the others.
pub(crate) struct Apart<'a> {
    /// Its index.
    pub(crate) node: usize,
    pub(crate) netns: &'a super::netns::Netns,
    /// The etcd endpoint it uses (`http://host:port`).
    pub(crate) etcd: String,
    /// The S3 endpoint it uses.
    pub(crate) s3: String,
}

pub(crate) struct Cluster {
    pub(crate) nodes: Vec<NodeProcess>,
    pub(crate) ids: Vec<String>,
    pub(crate) configs: Vec<String>,
    pub(crate) http: reqwest::Client,
    pub(crate) dir: tempfile::TempDir,
    /// Each node's Kafka port, when the cluster serves Kafka.
    pub(crate) kafka: Vec<u16>,
}

impl Cluster {
    pub(crate) async fn start(test: &str, count: usize) -> Cluster {
        Self::start_with(test, count, None).await
    }

    /// [`Cluster::start`], with node `apart.node` inside the network namespace `apart.netns`,
    /// reaching etcd and S3 through the given endpoints (proxies on the host end of its link).
    pub(crate) async fn start_with(test: &str, count: usize, apart: Option<Apart<'_>>) -> Cluster {
        Self::launch(test, count, apart, false).await
    }

    /// [`Cluster::start`], each node serving Kafka too.
    pub(crate) async fn start_serving_kafka(test: &str, count: usize) -> Cluster {
        Self::launch(test, count, None, true).await
    }

    async fn launch(test: &str, count: usize, apart: Option<Apart<'_>>, kafka: bool) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let prefix = mink_tests::unique_prefix(test);
        let etcd = mink_tests::etcd_endpoints();
        let binary = mink_tests::node::binary();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let mut cluster = Cluster {
            nodes: Vec::new(),
            ids: Vec::new(),
            configs: Vec::new(),
            http,
            dir,
            kafka: Vec::new(),
        };
        for n in 0..count {
            let id = format!("n{n}");
            let node_dir = cluster.dir.path().join(&id);
            std::fs::create_dir_all(&node_dir).unwrap();
            let mut node = NodeProcess::new(&binary, &node_dir).unwrap();
            if kafka {
                cluster.kafka.push(node.with_kafka().unwrap());
            }
            let (etcd, storage) = match &apart {
                Some(apart) if apart.node == n => {
                    node = node.in_netns(&apart.netns.name, &apart.netns.ns_ip.to_string());
                    (
                        vec![apart.etcd.clone()],
                        s3_storage_config_at(&prefix, &apart.s3),
                    )
                }
                _ => (etcd.clone(), s3_storage_config(&prefix)),
            };
            let config = format!(
                "{}{}[metadata]\nbackend = \"etcd\"\netcd_endpoints = {etcd:?}\netcd_prefix = \"{prefix}/\"\n\
                 [cluster]\nlease_ttl_ms = {LEASE_TTL_MS}\nlease_margin_ms = 400\n\
                 [node]\nexit_delay_on_wal_failure_ms = 0\n",
                node.base_config(&id),
                storage,
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

    /// Waits until node `via` sees `member` registered and serving.
    pub(crate) async fn wait_for_member(&self, via: usize, member: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let seen = self.cluster_view(via).await.is_ok_and(|v| {
                v["nodes"].as_array().is_some_and(|nodes| {
                    nodes.iter().any(|n| {
                        n["member"] == member && !n["http_url"].as_str().unwrap_or("").is_empty()
                    })
                })
            });
            if seen {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{member} never joined\n{}",
                self.log_tails()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last lines of every node's log, for a failure's message.
    pub(crate) fn log_tails(&self) -> String {
        let mut out = String::new();
        for (id, node) in self.ids.iter().zip(&self.nodes) {
            let log = std::fs::read_to_string(node.log()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(25)..].join("\n");
            out.push_str(&format!("--- log of {id} ---\n{tail}\n"));
        }
        out
    }

    pub(crate) fn url(&self, n: usize) -> String {
        self.nodes[n].url()
    }

    pub(crate) async fn cluster_view(&self, n: usize) -> Result<Value, reqwest::Error> {
        self.http
            .get(format!("{}/v1/cluster", self.url(n)))
            .send()
            .await?
            .json()
            .await
    }

    /// The node each bucket of `table` is assigned to, by node index, as node `via` sees it.
    pub(crate) async fn owners(&self, via: usize, table: &str) -> BTreeMap<u32, usize> {
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

    pub(crate) async fn create_table(&self, name: &str, buckets: u32) {
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

    pub(crate) async fn writer_id(&self) -> u64 {
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
    pub(crate) async fn read_all(&self, via: usize, table: &str, bucket: u32) -> Vec<(u64, i64)> {
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
pub(crate) type Acked = Arc<StdMutex<BTreeMap<u32, BTreeMap<i64, u64>>>>;

/// Appends rows 0, 1, 2, ... to `bucket` as writer `writer` (sequence = id), each retried until
/// acknowledged, through the nodes in turn from `entry`, until `stop`. `first_ack_after`
/// records when the first acknowledgement after the given instant came.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn write(
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
pub(crate) async fn check(cluster: &Cluster, via: usize, table: &str, acked: &Acked) -> usize {
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
