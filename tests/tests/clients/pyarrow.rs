//! pyarrow.flight against the Flight front end of a node on local files: an idempotent DoPut
//! with a retry, a projected DoGet, a live DoGet that sees a row appended over HTTP after
//! heartbeats, FlightInfo. The rows it wrote are then read over HTTP.

use std::sync::Arc;
use std::time::Duration;

use mink_metadata::RedbKv;
use mink_s3stream::storage::ObjectStoreBackend;
use mink_server::{Node, Settings};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyarrow_flight_writes_reads_projects_and_tails() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Settings::default()
    };
    settings.flight.listen = Some("127.0.0.1:0".parse().unwrap());
    settings.flight.heartbeat_interval = Duration::from_millis(300);
    let store = ObjectStoreBackend::local(dir.path().join("objects")).unwrap();
    let kv = RedbKv::open(dir.path().join("meta.redb")).unwrap();
    let node = Node::builder()
        .settings(settings)
        .object_store(Arc::new(store))
        .metadata(Arc::new(kv))
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{}/v1/tables", node.url()))
        .json(&json!({"name": "t", "buckets": 2, "schema": {"fields": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "msg", "type": "utf8"}
        ]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);

    let flight_url = format!("grpc://{}", node.flight_addr().unwrap());
    let script = mink_tests::client_script("pyarrow_flight.py");
    let http_url = node.url();
    let run = tokio::task::spawn_blocking(move || {
        let script = script.to_str().unwrap().to_owned();
        mink_tests::run_client(
            &mink_tests::python(),
            &[&script, &flight_url, &http_url],
            Duration::from_secs(120),
        )
    });
    let run = run.await.unwrap().unwrap();
    assert!(
        run.success,
        "pyarrow client failed:\n{}\n{}",
        run.stdout, run.stderr
    );
    let seen: Value = serde_json::from_str(run.stdout.trim()).unwrap();
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
