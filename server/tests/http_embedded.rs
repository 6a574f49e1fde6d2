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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_age() {
    // On an injected clock, which only this crate's embedded backend runs on.
    suite::retention_by_age(suite::embedded("retention_by_age")).await;
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

/// A node on loopback over `store` (in memory, with faults to inject) and in-memory metadata.
async fn faulty_node(store: &Arc<FaultyStorage>, tweak: impl FnOnce(&mut Settings)) -> Node {
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
    tweak(&mut settings);
    Node::builder()
        .settings(settings)
        .object_store(store.clone())
        .metadata(Arc::new(MemoryKv::new()))
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_failure_is_503_with_retry_after() {
    let store = Arc::new(FaultyStorage::new(
        Arc::new(ObjectStoreBackend::memory()),
        7,
    ));
    let node = faulty_node(&store, |settings| {
        settings.engine.wal.retry_deadline = Duration::from_millis(200);
        settings.http.retry_after_secs = 3;
    })
    .await;
    let http = reqwest::Client::new();
    create_id_table(&http, &node.url(), "f").await;
    store.set_failure_rate(StorageOp::Put, 1.0, FaultKind::Unavailable);
    let r = http
        .post(format!("{}/v1/tables/f/buckets/0/records", node.url()))
        .header("content-type", "application/x-ndjson")
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

/// `/readyz` says whether the stores answer; `/healthz` stays the liveness answer meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_object_store() {
    let store = Arc::new(FaultyStorage::new(
        Arc::new(ObjectStoreBackend::memory()),
        11,
    ));
    let node = faulty_node(&store, |_| {}).await;
    let http = reqwest::Client::new();
    let get = |path: &'static str| {
        let http = http.clone();
        let url = format!("{}{path}", node.url());
        async move {
            let r = http.get(url).send().await.unwrap();
            let status = r.status();
            (status, r.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = get("/readyz").await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("ready")),
        "{body}"
    );
    store.set_failure_rate(StorageOp::Head, 1.0, FaultKind::Unavailable);
    // An answer is kept for a second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (status, body) = get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["status"], "not_ready");
    assert!(
        body["reason"]
            .as_str()
            .is_some_and(|r| r.contains("the WAL object store")),
        "{body}"
    );
    let (status, _) = get("/healthz").await;
    assert_eq!(status, StatusCode::OK, "alive while not ready");
    store.clear();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (status, body) = get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    node.shutdown().await.unwrap();
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
            .env("MINK_FLIGHT_LISTEN", "none")
            .env("MINK_KAFKA_LISTEN", "none")
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
            .header("content-type", "application/x-ndjson")
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
        "--max-render-bytes",
        "--max-parked-reads",
        "--max-parked-reads-per-client",
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
                flight: mink_server::settings::FlightSettings {
                    listen: None,
                    ..Default::default()
                },
                kafka: mink_server::settings::KafkaSettings {
                    listen: None,
                    ..Default::default()
                },
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
        tokio::spawn(async move {
            http.post(url)
                .header("content-type", "application/x-ndjson")
                .body("{\"id\":42}\n")
                .send()
                .await
        })
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
            flight: mink_server::settings::FlightSettings {
                listen: None,
                ..Default::default()
            },
            kafka: mink_server::settings::KafkaSettings {
                listen: None,
                ..Default::default()
            },
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
            .header("content-type", "application/x-ndjson")
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

/// Starts `mink serve` in `dir` with `args` and `env`; returns the child, the address it logged
/// and the log lines up to that one.
fn spawn_mink(
    dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Child, std::net::SocketAddr, Vec<String>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mink"));
    command
        .args(["serve", "--log-format", "json"])
        .args(args)
        .current_dir(dir)
        .env_remove("MINK_CONFIG")
        .env("MINK_FLIGHT_LISTEN", "none")
        .env("MINK_KAFKA_LISTEN", "none")
        .env_remove("MINK_AUTH_TOKEN")
        .env_remove("MINK_AUTH_TOKEN_FILE")
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut log = Vec::new();
    let addr: std::net::SocketAddr = loop {
        let line = lines.next().expect("the node logs that it serves").unwrap();
        log.push(line.clone());
        if let Ok(v) = serde_json::from_str::<Value>(&line)
            && v["fields"]["message"] == "mink node serving"
        {
            break v["fields"]["addr"].as_str().unwrap().parse().unwrap();
        }
    };
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
    (child, addr, log)
}

/// The binary takes its one read-write token from `MINK_AUTH_TOKEN` (no flag shows it in a
/// process listing), and warns loudly when it listens beyond loopback without any token.
#[test]
fn binary_takes_the_token_from_the_environment_and_warns_when_open() {
    const TOKEN: &str = "environment-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let http = reqwest::Client::new();

    let (mut child, _, log) = spawn_mink(dir.path(), &["--listen", "0.0.0.0:0"], &[]);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        log.iter()
            .any(|l| l.contains("WARN") && l.contains("OPEN TO ANYONE")),
        "{log:#?}"
    );

    let (mut child, addr_with_token, log) = spawn_mink(
        dir.path(),
        &["--listen", "0.0.0.0:0"],
        &[("MINK_AUTH_TOKEN", TOKEN)],
    );
    assert!(
        !log.iter().any(|l| l.contains("OPEN TO ANYONE")),
        "{log:#?}"
    );
    assert!(
        !log.iter().any(|l| l.contains(TOKEN)),
        "the token is never logged"
    );
    let url = format!("http://127.0.0.1:{}/v1/tables", addr_with_token.port());
    rt.block_on(async {
        let r = http.get(&url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        let r = http.get(&url).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    });
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A writer id handed out by another node of the cluster is accepted: the cached high mark is
/// re-read from the metadata store before an id above it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_id_from_another_node_is_accepted() {
    let store = Arc::new(ObjectStoreBackend::memory());
    let kv = Arc::new(MemoryKv::new());
    let start = |node_id: &str| {
        Node::builder()
            .settings(Settings {
                listen: "127.0.0.1:0".parse().unwrap(),
                flight: mink_server::settings::FlightSettings {
                    listen: None,
                    ..Default::default()
                },
                kafka: mink_server::settings::KafkaSettings {
                    listen: None,
                    ..Default::default()
                },
                node_id: node_id.to_owned(),
                ..Settings::default()
            })
            .object_store(store.clone())
            .metadata(kv.clone())
            .start()
    };
    let (a, b) = (start("a").await.unwrap(), start("b").await.unwrap());
    let http = reqwest::Client::new();
    create_id_table(&http, &a.url(), "x").await;
    let writer_id = |url: String| {
        let http = http.clone();
        async move {
            let v: Value = http
                .post(format!("{url}/v1/writers"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["writer_id"].as_u64().unwrap()
        }
    };
    let mine = writer_id(a.url()).await;
    let theirs = writer_id(b.url()).await;
    assert!(theirs > mine, "b reserved its own block above a's");
    let append = |writer: u64| {
        http.post(format!("{}/v1/tables/x/buckets/0/records", a.url()))
            .header("content-type", "application/x-ndjson")
            .header("mink-writer-id", writer.to_string())
            .header("mink-sequence", "0")
            .body("{\"id\":1}\n")
            .send()
    };
    assert_eq!(append(mine).await.unwrap().status(), StatusCode::OK);
    assert_eq!(append(theirs).await.unwrap().status(), StatusCode::OK);
    let refused: Value = append(theirs + 1_000).await.unwrap().json().await.unwrap();
    assert_eq!(refused["error"], "unknown_writer", "{refused}");
    a.abort();
    b.abort();
}
