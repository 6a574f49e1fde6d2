//! kcat (librdkafka) against the Kafka front end of a node in memory: metadata, an idempotent
//! produce with keys and repeated headers in every compression, a consume from the beginning
//! that sees them exactly, offsets by time, and the same rows read over HTTP. A table made over
//! HTTP with another schema is consumed as JSON values, keyed by its `kafka_key` column.

use std::time::Duration;

use serde_json::{Value, json};

/// Runs kcat with `args` and returns what it printed; panics when it fails.
pub(super) async fn kcat(args: Vec<String>) -> String {
    let run = tokio::task::spawn_blocking(move || {
        let all: Vec<&str> = args.iter().map(String::as_str).collect();
        mink_tests::run_client(&mink_tests::kcat(), &all, Duration::from_secs(60))
    })
    .await
    .unwrap()
    .expect("kcat starts");
    assert!(run.success, "kcat failed:\n{}\n{}", run.stdout, run.stderr);
    run.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_produces_and_consumes_through_the_kafka_port() {
    let node = super::memory_node(|s| s.kafka.listen = Some("127.0.0.1:0".parse().unwrap())).await;
    let broker = node.kafka_addr().expect("kafka listens").to_string();
    let http = reqwest::Client::new();
    let headers_type = r#"List(non-null Struct("key": non-null Utf8, "value": Binary))"#;
    let created = http
        .post(format!("{}/v1/tables", node.url()))
        .json(
            &json!({"name": "events", "buckets": 2, "schema": {"fields": [
                {"name": "key", "type": "binary"},
                {"name": "value", "type": "binary"},
                {"name": "headers", "type": headers_type, "nullable": false},
                {"name": "timestamp", "type": "timestamp_ms", "nullable": false},
            ]}}),
        )
        .send()
        .await
        .unwrap();
    assert!(
        created.status().is_success(),
        "{}",
        created.text().await.unwrap()
    );
    let plain = http
        .post(format!("{}/v1/tables", node.url()))
        .json(
            &json!({"name": "plain", "buckets": 1, "kafka_key": "n", "schema": {"fields": [
                {"name": "n", "type": "int64", "nullable": false},
            ]}}),
        )
        .send()
        .await
        .unwrap();
    assert!(plain.status().is_success());

    let listing = kcat(vec!["-b".into(), broker.clone(), "-L".into()]).await;
    assert!(
        listing.contains("topic \"events\" with 2 partitions"),
        "{listing}"
    );
    assert!(
        listing.contains("topic \"plain\" with 1 partitions"),
        "{listing}"
    );

    // One idempotent producer per compression, each message keyed, two headers of one name.
    let dir = tempfile::tempdir().unwrap();
    let mut expected = Vec::new();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let file = dir.path().join(codec);
        let lines: Vec<String> = (0..3).map(|i| format!("k{i}:{codec}-{i}")).collect();
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        kcat(vec![
            "-b".into(),
            broker.clone(),
            "-P".into(),
            "-t".into(),
            "events".into(),
            "-p".into(),
            "1".into(),
            "-K".into(),
            ":".into(),
            "-H".into(),
            "h=first".into(),
            "-H".into(),
            "h=second".into(),
            "-z".into(),
            codec.into(),
            "-X".into(),
            "enable.idempotence=true".into(),
            "-l".into(),
            file.to_str().unwrap().into(),
        ])
        .await;
        expected.extend((0..3).map(|i| format!("k{i}|{codec}-{i}|h=first,h=second")));
    }
    let consumed = kcat(vec![
        "-b".into(),
        broker.clone(),
        "-C".into(),
        "-t".into(),
        "events".into(),
        "-p".into(),
        "1".into(),
        "-o".into(),
        "beginning".into(),
        "-e".into(),
        "-f".into(),
        "%k|%s|%h|%o\\n".into(),
    ])
    .await;
    let lines: Vec<&str> = consumed.lines().collect();
    assert_eq!(lines.len(), expected.len(), "{consumed}");
    for (offset, (line, want)) in lines.iter().zip(&expected).enumerate() {
        assert_eq!(*line, format!("{want}|{offset}"));
    }

    // The same records are the table's rows over HTTP.
    let rows: Vec<Value> = http
        .get(format!(
            "{}/v1/tables/events/buckets/1/records?offset=0",
            node.url()
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 15);
    assert_eq!(rows[0]["key"], json!(hex(b"k0")));
    assert_eq!(rows[0]["value"], json!(hex(b"none-0")));
    assert_eq!(rows[0]["headers"][1]["value"], json!(hex(b"second")));

    // Offsets by time: the first batch was committed after `before`; the future has none.
    let query = kcat(vec![
        "-b".into(),
        broker.clone(),
        "-Q".into(),
        "-t".into(),
        "events:1:1000".into(),
        "-t".into(),
        "events:0:1000".into(),
    ])
    .await;
    assert!(query.contains("events [1] offset 0"), "{query}");
    assert!(query.contains("events [0] offset -1"), "{query}");

    // A table appended over HTTP is consumed as JSON values.
    let appended = http
        .post(format!("{}/v1/tables/plain/buckets/0/records", node.url()))
        .header("content-type", "application/x-ndjson")
        .body("{\"n\":1}\n{\"n\":2}\n")
        .send()
        .await
        .unwrap();
    assert!(
        appended.status().is_success(),
        "{}",
        appended.text().await.unwrap()
    );
    let values = kcat(vec![
        "-b".into(),
        broker,
        "-C".into(),
        "-t".into(),
        "plain".into(),
        "-p".into(),
        "0".into(),
        "-o".into(),
        "beginning".into(),
        "-e".into(),
        "-f".into(),
        "%k=%s\\n".into(),
    ])
    .await;
    // Keyed by the table's `kafka_key` column.
    assert_eq!(
        values.lines().collect::<Vec<_>>(),
        ["1={\"n\":1}", "2={\"n\":2}"]
    );
    node.shutdown().await.unwrap();
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
