//! The node's lifecycle: misconfiguration fails at start (the `mink` binary and in-process), a
//! WAL that failed for good turns `/healthz` to 503 and makes the binary exit with status 75, and
//! table drops with tombstones and incarnations.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mink_metadata::MemoryKv;
use mink_s3stream::storage::{FaultKind, FaultyStorage, ObjectStoreBackend, StorageOp};
use mink_server::{Node, Settings};
use reqwest::StatusCode;
use serde_json::Value;

/// A port nobody listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Starts `mink serve` with `args` in `dir`, its stderr piped.
fn spawn_serve(dir: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_mink"))
        .arg("serve")
        .args(args)
        .current_dir(dir)
        .env_remove("MINK_CONFIG")
        .env("MINK_FLIGHT_LISTEN", "none")
        .env("MINK_KAFKA_LISTEN", "none")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (bounded) for `child` to exit: its status and its stderr.
fn exit_and_log(mut child: Child, limit: Duration) -> (ExitStatus, String) {
    let stderr = child.stderr.take().unwrap();
    let drain = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
            .join("\n")
    });
    let status = wait_exit(&mut child, limit);
    (status, drain.join().unwrap())
}

/// The arguments of a node on memory storage with its metadata on etcd at `endpoint`.
fn on_etcd<'a>(config: &'a Path, endpoint: &'a str) -> [&'a str; 10] {
    [
        "--config",
        config.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--storage",
        "memory",
        "--metadata",
        "etcd",
        "--etcd-endpoints",
        endpoint,
    ]
}

/// Runs `mink serve` with `args` in `dir` and waits (bounded) for it to exit.
fn serve_until_exit(dir: &Path, args: &[&str], limit: Duration) -> (ExitStatus, String) {
    exit_and_log(spawn_serve(dir, args), limit)
}

fn wait_exit(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the node did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Before this, the node said it was serving and the first append failed the WAL for good.
#[test]
fn binary_refuses_to_start_on_an_http_s3_endpoint_without_allow_http() {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let (status, log) = serve_until_exit(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--storage",
            "s3",
            "--s3-endpoint",
            &endpoint,
            "--s3-bucket",
            "b",
            "--s3-access-key",
            "ak",
            "--s3-secret-key",
            "sk",
            "--metadata",
            "memory",
        ],
        Duration::from_secs(60),
    );
    assert!(!status.success(), "{status:?}\n{log}");
    assert_ne!(status.code(), Some(75), "{log}");
    assert!(log.contains("--s3-allow-http true"), "{log}");
    assert!(log.contains("storage.s3.allow_http"), "{log}");
    assert!(!log.contains("mink node serving"), "{log}");
}

#[test]
fn binary_refuses_to_start_on_an_etcd_nobody_answers_within_the_probe_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mink.toml");
    std::fs::write(&config, "[node]\nprobe_timeout_ms = 1500\n").unwrap();
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let started = Instant::now();
    let (status, log) = serve_until_exit(
        dir.path(),
        &on_etcd(&config, &endpoint),
        Duration::from_secs(60),
    );
    assert!(!status.success(), "{status:?}\n{log}");
    assert!(log.contains("--etcd-endpoints"), "{log}");
    assert!(log.contains(&endpoint), "{log}");
    // The probe timeout bounds it (plus the client's own connect timeout, at most 5 s).
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

/// A SIGTERM that comes while the node starts (here: on an etcd that takes connections and never
/// answers) stops it with status 0 at once, not by the signal's default action and not after the
/// start-up check gives up.
#[cfg(unix)]
#[test]
fn binary_stops_cleanly_on_sigterm_while_starting() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mink.toml");
    std::fs::write(&config, "[node]\nprobe_timeout_ms = 120000\n").unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let child = spawn_serve(dir.path(), &on_etcd(&config, &endpoint));
    // Once the node connects to the metadata store it is past listening for signals, and stuck
    // in its start-up check.
    let (_connection, _) = silent.accept().unwrap();
    let started = Instant::now();
    let signalled = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    let (status, log) = exit_and_log(child, Duration::from_secs(60));
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("asked to stop while starting"), "{log}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

/// A WAL that fails for good (the objects folder replaced by a file: every PUT fails) turns
/// `/healthz` to 503 with the reason and the process exits with 75 after the configured delay.
#[test]
fn binary_exits_75_after_the_wal_failed_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mink.toml");
    std::fs::write(
        &config,
        "[node]\nexit_delay_on_wal_failure_ms = 1500\n\
         [engine.wal]\nretry_deadline = 200\nretry_initial_backoff = 5\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mink"))
        .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
        .args(["--config", config.to_str().unwrap()])
        .current_dir(dir.path())
        .env_remove("MINK_CONFIG")
        .env("MINK_FLIGHT_LISTEN", "none")
        .env("MINK_KAFKA_LISTEN", "none")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("the node logs that it serves").unwrap();
        if let Ok(v) = serde_json::from_str::<Value>(&line)
            && v["fields"]["message"] == "mink node serving"
        {
            break v["fields"]["addr"].as_str().unwrap().to_owned();
        }
    };
    let drain = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let url = format!("http://{addr}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let http = reqwest::Client::new();
    rt.block_on(async {
        let r = http.get(format!("{url}/healthz")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        create_id_table(&http, &url, "t").await;
        let objects = dir.path().join("mink-data/objects");
        std::fs::remove_dir_all(&objects).unwrap();
        std::fs::write(&objects, b"not a folder").unwrap();
        let r = http
            .post(format!("{url}/v1/tables/t/buckets/0/records"))
            .header("content-type", "application/x-ndjson")
            .body("{\"id\":1}\n")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        let r = http.get(format!("{url}/healthz")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["status"], "failing", "{body}");
        assert!(body["reason"].as_str().unwrap().contains("WAL"), "{body}");
    });
    let failed_at = Instant::now();
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let log = drain.join().unwrap();
    assert_eq!(status.code(), Some(75), "{status:?}\n{log:#?}");
    // It kept answering (503) for the delay first, so a supervisor could see why.
    assert!(
        failed_at.elapsed() >= Duration::from_millis(500),
        "{:?}",
        failed_at.elapsed()
    );
    assert!(
        log.iter().any(|l| l.contains("the WAL failed for good")),
        "{log:#?}"
    );
}

/// Creates table `name` with one int64 column `id` on the node at `url`.
async fn create_id_table(http: &reqwest::Client, url: &str, name: &str) {
    let created = http
        .post(format!("{url}/v1/tables"))
        .json(&serde_json::json!({"name": name, "schema": {"fields": [{"name": "id", "type": "int64"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED, "creating {name}");
}

fn memory_settings() -> Settings {
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        flight: mink_server::settings::FlightSettings {
            listen: None,
            ..Default::default()
        },
        kafka: mink_server::settings::KafkaSettings {
            listen: None,
            ..Default::default()
        },
        ..Settings::default()
    };
    settings.engine.wal.retry_deadline = Duration::from_millis(200);
    settings.engine.wal.retry_initial_backoff = Duration::from_millis(5);
    settings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_503_failing_once_the_wal_failed_and_the_node_reports_it() {
    let store = Arc::new(FaultyStorage::new(
        Arc::new(ObjectStoreBackend::memory()),
        3,
    ));
    let node = Node::builder()
        .settings(memory_settings())
        .object_store(store.clone())
        .metadata(Arc::new(MemoryKv::new()))
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let url = node.url();
    let failed = tokio::spawn(node.failed());
    let healthz = || http.get(format!("{url}/healthz")).send();
    let r = healthz().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    create_id_table(&http, &url, "h").await;
    // A PUT error that retrying cannot fix: the WAL fails for good at once.
    store.set_failure_rate(StorageOp::Put, 1.0, FaultKind::Other);
    let r = http
        .post(format!("{url}/v1/tables/h/buckets/0/records"))
        .header("content-type", "application/x-ndjson")
        .body("{\"id\":1}\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let reason = tokio::time::timeout(Duration::from_secs(10), failed)
        .await
        .expect("the node reports the failure")
        .unwrap();
    assert!(reason.contains("could not be written"), "{reason}");
    assert_eq!(node.failure().as_deref(), Some(reason.as_str()));
    // Clearing the fault does not heal it: only a restart (recovery) does.
    store.clear();
    let r = healthz().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status"], "failing", "{body}");
    assert!(body["reason"].as_str().unwrap().contains(&reason), "{body}");
    node.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_store_fails_the_probe_does_not_start() {
    let store = Arc::new(FaultyStorage::new(
        Arc::new(ObjectStoreBackend::memory()),
        4,
    ));
    store.fail_next_op(StorageOp::Get, 1, FaultKind::Other);
    let error = Node::builder()
        .settings(memory_settings())
        .object_store(store.clone())
        .metadata(Arc::new(MemoryKv::new()))
        .start()
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("the WAL object store"), "{text}");
    assert!(text.contains("read the probe object back"), "{text}");
}

// ---- Table drop: tombstones and incarnations ----

/// A node on `store` and `kv` (shared across its lives), cleanup every hour unless a test runs
/// the pass itself, objects deleted as soon as they are garbage.
async fn node_on(store: Arc<ObjectStoreBackend>, kv: Arc<MemoryKv>) -> Node {
    let mut settings = memory_settings();
    settings.node.drop_cleanup_interval = Duration::from_secs(3600);
    settings.engine.compaction.delete_grace = Duration::ZERO;
    Node::builder()
        .settings(settings)
        .object_store(store)
        .metadata(kv)
        .start()
        .await
        .unwrap()
}

async fn create_table(http: &reqwest::Client, url: &str, name: &str, buckets: u32) {
    let created = http
        .post(format!("{url}/v1/tables"))
        .json(&serde_json::json!({
            "name": name,
            "buckets": buckets,
            "schema": {"fields": [{"name": "id", "type": "int64"}]},
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED, "creating {name}");
}

async fn append(
    http: &reqwest::Client,
    url: &str,
    table: &str,
    bucket: u32,
    id: i64,
) -> StatusCode {
    http.post(format!("{url}/v1/tables/{table}/buckets/{bucket}/records"))
        .header("content-type", "application/x-ndjson")
        .body(format!("{{\"id\":{id}}}\n"))
        .send()
        .await
        .unwrap()
        .status()
}

async fn read_all(http: &reqwest::Client, url: &str, table: &str, bucket: u32) -> String {
    let r = http
        .get(format!(
            "{url}/v1/tables/{table}/buckets/{bucket}/records?offset=0"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "reading {table}/{bucket}");
    r.text().await.unwrap()
}

async fn high_watermark(http: &reqwest::Client, url: &str, table: &str, bucket: u32) -> u64 {
    let r = http
        .get(format!("{url}/v1/tables/{table}/buckets/{bucket}/offsets"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.json::<Value>().await.unwrap()["high_watermark"]
        .as_u64()
        .unwrap()
}

async fn drop_table(http: &reqwest::Client, url: &str, table: &str) -> StatusCode {
    http.delete(format!("{url}/v1/tables/{table}"))
        .send()
        .await
        .unwrap()
        .status()
}

/// Every key under `prefix`.
async fn keys(kv: &MemoryKv, prefix: &str) -> Vec<String> {
    use mink_metadata::{MetaKv, MetaKvExt};
    let _ = kv.backend();
    kv.scan_all(prefix, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|kv| kv.key)
        .collect()
}

/// The metadata keys that belong to the tablets of table `name` (any incarnation).
async fn tablet_keys(kv: &MemoryKv, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for prefix in ["mink/tablets/", "mink/writers/"] {
        out.extend(keys(kv, prefix).await.into_iter().filter(|k| {
            let rest = &k[prefix.len()..];
            rest.starts_with(&format!("{name}/")) || rest.starts_with(&format!("{name}@"))
        }));
    }
    out
}

async fn incarnation(kv: &Arc<MemoryKv>, name: &str) -> u64 {
    let meta = mink_metadata::Metadata::open(kv.clone(), Default::default())
        .await
        .unwrap();
    meta.get_table(name).await.unwrap().unwrap().incarnation
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_dropped_and_created_again_starts_empty_even_after_a_restart() {
    let store = Arc::new(ObjectStoreBackend::memory());
    let kv = Arc::new(MemoryKv::new());
    let node = node_on(store.clone(), kv.clone()).await;
    let http = reqwest::Client::new();
    let url = node.url();
    create_table(&http, &url, "t", 2).await;
    let first = incarnation(&kv, "t").await;
    assert!(first > 0, "a new table gets an incarnation");
    for id in 0..5 {
        assert_eq!(
            append(&http, &url, "t", id as u32 % 2, id).await,
            StatusCode::OK
        );
    }
    node.engine().compact_now().await.unwrap();
    assert_eq!(drop_table(&http, &url, "t").await, StatusCode::OK);
    assert_eq!(
        drop_table(&http, &url, "t").await,
        StatusCode::NOT_FOUND,
        "dropped once"
    );
    // Gone at once: nothing of the old incarnation is left (the drop destroyed it inline).
    assert!(
        tablet_keys(&kv, "t").await.is_empty(),
        "{:?}",
        tablet_keys(&kv, "t").await
    );
    assert!(keys(&kv, "mink/dropped/").await.is_empty());

    create_table(&http, &url, "t", 2).await;
    assert!(incarnation(&kv, "t").await > first);
    for bucket in 0..2 {
        assert_eq!(high_watermark(&http, &url, "t", bucket).await, 0);
        assert_eq!(read_all(&http, &url, "t", bucket).await, "");
    }
    assert_eq!(append(&http, &url, "t", 0, 100).await, StatusCode::OK);
    assert_eq!(read_all(&http, &url, "t", 0).await, "{\"id\":100}\n");

    node.shutdown().await.unwrap();
    let node = node_on(store.clone(), kv.clone()).await;
    let url = node.url();
    assert_eq!(read_all(&http, &url, "t", 0).await, "{\"id\":100}\n");
    assert_eq!(read_all(&http, &url, "t", 1).await, "");
    node.shutdown().await.unwrap();
}

/// A drop racing appends (which open the buckets) never leaves a reachable log of the old
/// incarnation: once the drop answered and a cleanup pass ran, no registry entry or writer
/// snapshot of it exists, and the table created again is empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_racing_appends_and_opens_leaves_nothing_of_the_old_incarnation() {
    let store = Arc::new(ObjectStoreBackend::memory());
    let kv = Arc::new(MemoryKv::new());
    let node = node_on(store.clone(), kv.clone()).await;
    let http = reqwest::Client::new();
    let url = node.url();
    for round in 0..5 {
        create_table(&http, &url, "r", 8).await;
        let old = incarnation(&kv, "r").await;
        // Appends to every bucket (each first append opens the bucket), racing the drop.
        let appends: Vec<_> = (0..32)
            .map(|i| {
                let (http, url) = (http.clone(), url.clone());
                tokio::spawn(async move { append(&http, &url, "r", i % 8, i64::from(i)).await })
            })
            .collect();
        if round % 2 == 1 {
            tokio::task::yield_now().await;
        }
        assert_eq!(drop_table(&http, &url, "r").await, StatusCode::OK);
        for a in appends {
            let status = a.await.unwrap();
            assert!(
                status == StatusCode::OK
                    || status == StatusCode::NOT_FOUND
                    || status == StatusCode::SERVICE_UNAVAILABLE
                    || status == StatusCode::CONFLICT,
                "{status}"
            );
        }
        node.core().clean_dropped_tables().await.unwrap();
        let left: Vec<String> = tablet_keys(&kv, "r")
            .await
            .into_iter()
            .filter(|k| k.contains(&format!("r@{old}/")))
            .collect();
        assert!(left.is_empty(), "round {round}: {left:?}");
        assert!(keys(&kv, "mink/dropped/").await.is_empty());
        create_table(&http, &url, "r", 8).await;
        for bucket in 0..8 {
            assert_eq!(
                high_watermark(&http, &url, "r", bucket).await,
                0,
                "round {round}"
            );
        }
        assert_eq!(drop_table(&http, &url, "r").await, StatusCode::OK);
    }
    node.shutdown().await.unwrap();
}

/// A crash after the drop's transaction (tombstone written, nothing destroyed) is finished by
/// the pass at the next start; the name was free meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_stopped_after_the_tombstone_is_finished_at_the_next_start() {
    let store = Arc::new(ObjectStoreBackend::memory());
    let kv = Arc::new(MemoryKv::new());
    let node = node_on(store.clone(), kv.clone()).await;
    let http = reqwest::Client::new();
    let url = node.url();
    create_table(&http, &url, "c", 2).await;
    let old = incarnation(&kv, "c").await;
    for bucket in 0..2 {
        assert_eq!(append(&http, &url, "c", bucket, 1).await, StatusCode::OK);
    }
    node.abort();
    // The drop's transaction alone, as a node that crashed right after it leaves it.
    let meta = mink_metadata::Metadata::open(kv.clone(), Default::default())
        .await
        .unwrap();
    let dropped = meta.drop_table("c").await.unwrap().unwrap();
    assert_eq!(dropped.incarnation, old);
    assert_eq!(
        keys(&kv, "mink/dropped/").await,
        [format!("mink/dropped/c@{old}")]
    );
    assert!(!tablet_keys(&kv, "c").await.is_empty());

    let node = node_on(store.clone(), kv.clone()).await;
    let url = node.url();
    assert!(keys(&kv, "mink/dropped/").await.is_empty());
    assert!(
        tablet_keys(&kv, "c").await.is_empty(),
        "{:?}",
        tablet_keys(&kv, "c").await
    );
    let r = http
        .get(format!("{url}/v1/tables/c/buckets/0/offsets"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    create_table(&http, &url, "c", 2).await;
    assert_eq!(read_all(&http, &url, "c", 0).await, "");
    node.shutdown().await.unwrap();
}

/// The background task runs the pass on its own, at `node.drop_cleanup_interval_ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_pass_finishes_tombstones_left_by_another_node() {
    let store = Arc::new(ObjectStoreBackend::memory());
    let kv = Arc::new(MemoryKv::new());
    let mut settings = memory_settings();
    settings.node.drop_cleanup_interval = Duration::from_millis(50);
    let node = Node::builder()
        .settings(settings)
        .object_store(store.clone())
        .metadata(kv.clone())
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let url = node.url();
    create_table(&http, &url, "b", 1).await;
    assert_eq!(append(&http, &url, "b", 0, 1).await, StatusCode::OK);
    // Dropped behind this node's back (another node crashed right after its transaction).
    let meta = mink_metadata::Metadata::open(kv.clone(), Default::default())
        .await
        .unwrap();
    meta.drop_table("b").await.unwrap().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !keys(&kv, "mink/dropped/").await.is_empty() || !tablet_keys(&kv, "b").await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the background pass never finished the drop"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Its cached copy of the table is gone too.
    let r = http
        .get(format!("{url}/v1/tables/b/buckets/0/offsets"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    node.shutdown().await.unwrap();
}

/// The dropped table's objects are collected: after the drop, maintenance empties the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_tables_objects_are_deleted_by_garbage_collection() {
    let store = Arc::new(ObjectStoreBackend::memory());
    let kv = Arc::new(MemoryKv::new());
    let node = node_on(store.clone(), kv.clone()).await;
    let http = reqwest::Client::new();
    let url = node.url();
    create_table(&http, &url, "g", 2).await;
    for id in 0..20 {
        assert_eq!(
            append(&http, &url, "g", id as u32 % 2, id).await,
            StatusCode::OK
        );
    }
    node.engine().compact_now().await.unwrap();
    use mink_s3stream::storage::ObjectStorage as _;
    assert!(!store.list("").await.unwrap().is_empty());
    assert_eq!(drop_table(&http, &url, "g").await, StatusCode::OK);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        node.engine().compact_now().await.unwrap();
        node.engine().maintain_now().await.unwrap();
        let left = store.list("").await.unwrap();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "objects never collected: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.shutdown().await.unwrap();
}
