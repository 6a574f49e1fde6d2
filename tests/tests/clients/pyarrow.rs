//! pyarrow.flight against the Flight front end of a node on local files: an idempotent DoPut
//! with a retry, a projected DoGet, a live DoGet that sees a row appended over HTTP after
//! heartbeats, FlightInfo. The rows it wrote are then read over HTTP. And the same client over
//! TLS with a token.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mink_metadata::RedbKv;
use mink_s3stream::storage::ObjectStoreBackend;
use mink_server::{Node, Settings};
use serde_json::{Value, json};

const TOKEN: &str = "pyarrow-test-token-0123456789";

/// A node on local files in `dir` serving Flight; `create`: with a new table `t` (two buckets).
async fn start(dir: &Path, create: bool, settings: impl FnOnce(&mut Settings)) -> Node {
    let mut s = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Settings::default()
    };
    s.flight.listen = Some("127.0.0.1:0".parse().unwrap());
    s.kafka.listen = None;
    s.flight.heartbeat_interval = Duration::from_millis(300);
    settings(&mut s);
    let store = ObjectStoreBackend::local(dir.join("objects")).unwrap();
    let kv = RedbKv::open(dir.join("meta.redb")).unwrap();
    let node = Node::builder()
        .settings(s)
        .object_store(Arc::new(store))
        .metadata(Arc::new(kv))
        .start()
        .await
        .unwrap();
    if !create {
        return node;
    }
    let created = reqwest::Client::new()
        .post(format!("{}/v1/tables", node.url()))
        .json(&json!({"name": "t", "buckets": 2, "schema": {"fields": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "msg", "type": "utf8"}
        ]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    node
}

/// Runs a client script of `tests/clients/` with `args`; what it printed, as JSON.
async fn python(script: &str, args: Vec<String>) -> Value {
    let script = mink_tests::client_script(script);
    let run = tokio::task::spawn_blocking(move || {
        let mut all = vec![script.to_str().unwrap().to_owned()];
        all.extend(args);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        mink_tests::run_client(&mink_tests::python(), &all, Duration::from_secs(120))
    });
    let run = run.await.unwrap().unwrap();
    assert!(
        run.success,
        "pyarrow client failed:\n{}\n{}",
        run.stdout, run.stderr
    );
    serde_json::from_str(run.stdout.trim()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyarrow_flight_writes_reads_projects_and_tails() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), true, |_| {}).await;
    let http = reqwest::Client::new();
    let flight_url = format!("grpc://{}", node.flight_addr().unwrap());
    let seen = python("pyarrow_flight.py", vec![flight_url, node.url()]).await;
    assert_eq!(seen["projected_rows"], 3, "{seen}");
    assert_eq!(seen["total_records"], 3, "{seen}");
    assert!(seen["heartbeats"].as_u64().unwrap() >= 1, "{seen}");

    // What pyarrow wrote, once (its retry was a duplicate), and what it tailed, over HTTP
    // (NDJSON leaves null columns out).
    let rows = |bucket: u32| {
        let http = http.clone();
        let url = format!(
            "{}/v1/tables/t/buckets/{bucket}/records?offset=0",
            node.url()
        );
        async move {
            let text = http
                .get(url)
                .header("accept", "application/x-ndjson")
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        rows(0).await,
        [
            json!({"id": 1, "msg": "a"}),
            json!({"id": 2}),
            json!({"id": 3, "msg": "c"})
        ]
    );
    assert_eq!(rows(1).await, [json!({"id": 7, "msg": "live"})]);
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyarrow_flight_over_tls_with_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert, key) = (dir.path().join("node.crt"), dir.path().join("node.key"));
    std::fs::write(&cert, generated.cert.pem()).unwrap();
    std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
    // The table is made over plain HTTP first (the test's HTTP client has no TLS), then the
    // node starts again on the same files with TLS and a token.
    start(dir.path(), true, |_| {})
        .await
        .shutdown()
        .await
        .unwrap();
    let node = start(dir.path(), false, |s| {
        s.http.tls.cert_file = Some(cert.clone());
        s.http.tls.key_file = Some(key.clone());
        s.auth.token = Some(mink_server::settings::Secret::new(TOKEN));
    })
    .await;
    let flight_url = format!("grpc+tls://{}", node.flight_addr().unwrap());
    let seen = python(
        "pyarrow_flight_tls.py",
        vec![flight_url, cert.display().to_string(), TOKEN.to_owned()],
    )
    .await;
    assert_eq!(seen["rows"], 2, "{seen}");
    node.shutdown().await.unwrap();
}
