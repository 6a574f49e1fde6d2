//! The end-to-end HTTP suite against the embedded default (local-file objects, redb metadata),
//! plus what only this crate can test: storage failures as 503, and the `mink` binary itself.

#[macro_use]
mod suite;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mink_metadata::MemoryKv;
use mink_s3stream::storage::{FaultKind, FaultyStorage, ObjectStoreBackend, StorageOp};
use mink_server::{Node, Settings};
use reqwest::StatusCode;
use serde_json::Value;

http_suite!(suite::embedded);

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_failure_is_503_with_retry_after() {
    let store = Arc::new(FaultyStorage::new(
        Arc::new(ObjectStoreBackend::memory()),
        7,
    ));
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Settings::default()
    };
    settings.engine.wal.retry_deadline = Duration::from_millis(200);
    settings.http.retry_after_secs = 3;
    let node = Node::builder()
        .settings(settings)
        .object_store(store.clone())
        .metadata(Arc::new(MemoryKv::new()))
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    create_id_table(&http, &node.url(), "f").await;
    store.set_failure_rate(StorageOp::Put, 1.0, FaultKind::Unavailable);
    let r = http
        .post(format!("{}/v1/tables/f/buckets/0/records", node.url()))
        .body("{\"id\":1}\n")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers().get("retry-after").unwrap(), "3");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "unavailable", "{body}");
    // Nothing became readable.
    let r = http
        .get(format!("{}/v1/tables/f/buckets/0/offsets", node.url()))
        .send()
        .await
        .unwrap();
    let offsets: Value = r.json().await.unwrap();
    assert_eq!(offsets["high_watermark"], 0);
    node.abort();
}

/// The binary with no storage flags runs the embedded default in its data folder, serves, and
/// exits 0 on SIGTERM after closing its tablets; a second run reads the data back.
#[test]
fn binary_serves_embedded_default_and_exits_0_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let run = |dir: &std::path::Path| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mink"))
            .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
            .current_dir(dir)
            .env_remove("MINK_CONFIG")
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
        // Keep draining the log so the child never blocks on a full pipe.
        let drain = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
        (child, format!("http://{addr}"), drain)
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let http = reqwest::Client::new();

    let (mut child, url, drain) = run(dir.path());
    rt.block_on(async {
        let r = http
            .post(format!("{url}/v1/tables"))
            .json(&serde_json::json!({"name": "b", "schema": {"fields": [{"name": "id", "type": "int64"}]}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
        let r = http
            .post(format!("{url}/v1/tables/b/buckets/0/records"))
            .body("{\"id\":7}\n")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    });
    assert!(dir.path().join("mink-data/meta.redb").exists());
    assert!(dir.path().join("mink-data/objects").is_dir());
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "the node did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = drain.join().unwrap();
    assert!(exit.success(), "exit status {exit:?}; log: {log:#?}");
    assert!(log.iter().any(|l| l.contains("tablets closed")), "{log:#?}");

    let (mut child, url, _drain) = run(dir.path());
    let text = rt.block_on(async {
        http.get(format!("{url}/v1/tables/b/buckets/0/records?offset=0"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    });
    assert_eq!(text, "{\"id\":7}\n");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn help_documents_every_setting() {
    let out = Command::new(env!("CARGO_BIN_EXE_mink"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--listen",
        "--data-dir",
        "--storage",
        "--s3-endpoint",
        "--s3-bucket",
        "--s3-data-bucket",
        "--s3-access-key",
        "--s3-secret-key",
        "--metadata",
        "--etcd-endpoints",
        "--max-append-bytes",
        "--max-ndjson-bytes",
        "--max-connections",
        "--write-timeout-ms",
        "--tls-cert-file",
        "--long-poll-timeout-ms",
        "--sse-recycle-ms",
        "--rate-limit",
        "--config",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
    assert!(
        help.contains("127.0.0.1:6465"),
        "the default port is documented"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_mink"))
        .arg("default-config")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(Settings::from_toml(&text).unwrap(), Settings::default());
}

/// Shutdown waits for an append whose WAL PUT is still in flight: the writer gets its 200, and a
/// node started afterwards on the same storage reads the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_appends_in_flight() {
    let store = Arc::new(FaultyStorage::new(
        Arc::new(ObjectStoreBackend::memory()),
        11,
    ));
    let kv = Arc::new(MemoryKv::new());
    let start = || {
        Node::builder()
            .settings(Settings {
                listen: "127.0.0.1:0".parse().unwrap(),
                ..Settings::default()
            })
            .object_store(store.clone())
            .metadata(kv.clone())
            .start()
    };
    let node = start().await.unwrap();
    let http = reqwest::Client::new();
    let url = node.url();
    create_id_table(&http, &url, "d").await;
    store.set_put_delay(Duration::from_millis(500));
    let append = {
        let http = http.clone();
        let url = format!("{url}/v1/tables/d/buckets/0/records");
        tokio::spawn(async move { http.post(url).body("{\"id\":42}\n").send().await })
    };
    // The append is in the engine (not yet durable) once bytes are pending.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = http
            .get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if metrics
            .lines()
            .any(|l| l.starts_with("mink_wal_pending_bytes ") && !l.ends_with(" 0"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the append never reached the engine"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    node.shutdown().await.expect("clean shutdown");
    let response = append
        .await
        .unwrap()
        .expect("the in-flight append was answered");
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["base_offset"], 0);

    store.clear();
    let node = start().await.unwrap();
    let text = http
        .get(format!(
            "{}/v1/tables/d/buckets/0/records?offset=0",
            node.url()
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text, "{\"id\":42}\n");
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_runs_on_its_injected_clock() {
    // Far from the system clock, so that a stamp from any other clock would show.
    const NOW: i64 = 1_000_000_000_000;
    let clock = Arc::new(mink_runtime::ManualClock::new(NOW));
    let node = Node::builder()
        .settings(Settings {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Settings::default()
        })
        .object_store(Arc::new(ObjectStoreBackend::memory()))
        .metadata(Arc::new(MemoryKv::new()))
        .clock(clock.clone())
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    create_id_table(&http, &node.url(), "c").await;
    let append = |id: i64| {
        http.post(format!("{}/v1/tables/c/buckets/0/records", node.url()))
            .body(format!("{{\"id\":{id}}}\n"))
            .send()
    };
    let first: Value = append(1).await.unwrap().json().await.unwrap();
    assert_eq!(first["commit_timestamp"], NOW, "{first}");
    clock.advance(5_000);
    let second: Value = append(2).await.unwrap().json().await.unwrap();
    assert_eq!(second["commit_timestamp"], NOW + 5_000, "{second}");

    // "In the future" is judged by the same clock: a time just past it is refused, one at it is
    // answered with the second append's offset.
    let offsets = |ts: i64| {
        http.get(format!(
            "{}/v1/tables/c/buckets/0/offsets?timestamp={ts}",
            node.url()
        ))
        .send()
    };
    let past = offsets(NOW + 5_001).await.unwrap();
    assert_eq!(past.status(), StatusCode::BAD_REQUEST);
    let body: Value = past.json().await.unwrap();
    assert_eq!(body["error"], "future_timestamp", "{body}");
    let at: Value = offsets(NOW + 5_000).await.unwrap().json().await.unwrap();
    assert_eq!(at["offset"], 1, "{at}");
    node.shutdown().await.unwrap();
}
