//! The node's life: a restart on the same storage reads everything back and keeps writer windows;
//! health, metrics, and a graceful shutdown that answers a parked long-poll.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

use super::data::{ids_of, ndjson};
use super::harness::{Backend, Harness, NDJSON, header};

pub async fn restart_reads_everything_back(backend: Backend) {
    let mut h = Harness::start(backend).await;
    h.create_table("r").await;
    let writer = h.writer_id().await;
    for i in 0..5 {
        h.append_ndjson("r", &ndjson(&[i * 10, i * 10 + 1])).await;
    }
    let send = |h: &Harness| {
        h.http
            .post(h.records("r"))
            .header("content-type", NDJSON)
            .header("mink-writer-id", writer.to_string())
            .header("mink-sequence", "0")
            .body(ndjson(&[99]))
            .send()
    };
    let first: Value = send(&h).await.unwrap().json().await.unwrap();
    assert_eq!(first["duplicate"], false);

    h.restart().await;
    let (all, headers) = h.read_ndjson("r", "offset=0").await;
    assert_eq!(ids_of(&all), vec![0, 1, 10, 11, 20, 21, 30, 31, 40, 41, 99]);
    assert_eq!(
        header(&headers, "mink-high-watermark").as_deref(),
        Some("11")
    );
    let retry: Value = send(&h).await.unwrap().json().await.unwrap();
    assert_eq!(
        retry["duplicate"], true,
        "the writer window survived the restart"
    );
    assert_eq!(retry["base_offset"], first["base_offset"]);
    let list = h.get_json(h.v1("tables")).await;
    assert_eq!(list["tables"][0]["name"], "r");
    h.stop().await;
}

pub async fn health_metrics_and_shutdown(backend: Backend) {
    let mut h = Harness::start(backend).await;
    let health = h.get_json(format!("{}/healthz", h.url)).await;
    assert_eq!(health["status"], "ok");
    h.create_table("m").await;
    h.append_ndjson("m", &ndjson(&[1])).await;
    h.read_ndjson("m", "offset=0").await;
    assert_eq!(h.metric("mink_appends_total").await, 1.0);
    assert!(h.metric("mink_append_bytes_total").await > 0.0);
    assert!(h.metric("mink_wal_puts_total").await >= 1.0);
    assert!(h.metric("mink_reads_total").await >= 1.0);
    h.metric("mink_object_gets_total").await;
    h.metric("mink_wal_pending_bytes").await;
    assert!(h.metric("mink_read_tier_total{tier=\"memory\"}").await >= 1.0);
    assert!(
        h.metric("mink_cache_hits_total{tier=\"tail\"}").await >= 1.0,
        "the tail read hit the tail cache"
    );
    h.metric("mink_cache_misses_total{tier=\"block\"}").await;

    // Latency histograms, in seconds: appends, reads, WAL PUTs, and a delivery to a reader parked
    // at the tail.
    let ready = h.get_json(format!("{}/readyz", h.url)).await;
    assert_eq!(ready["status"], "ready", "{ready}");
    // The API's own description.
    let doc = h.get_json(h.v1("openapi.json")).await;
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        doc["openapi"]
    );
    let append = &doc["paths"]["/v1/tables/{table}/buckets/{bucket}/records"]["post"];
    let params: Vec<&str> = append["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(
        params.contains(&"Mink-Writer-Id") && params.contains(&"partition"),
        "{params:?}"
    );
    assert_eq!(h.metric("mink_append_duration_seconds_count").await, 1.0);
    assert!(h.metric("mink_append_duration_seconds_sum").await > 0.0);
    // The bucket's first use opened its log once, and the read used the open log.
    assert_eq!(h.metric("mink_log_open_duration_seconds_count").await, 1.0);
    assert!(h.metric("mink_log_open_duration_seconds_sum").await > 0.0);
    assert_eq!(h.metric("mink_log_open_wait_seconds_count").await, 1.0);
    assert!(h.metric("mink_read_duration_seconds_count").await >= 1.0);
    assert!(
        h.metric("mink_object_request_duration_seconds_count{op=\"put\",kind=\"wal\"}")
            .await
            >= 1.0
    );
    assert_eq!(h.metric("mink_tail_delivery_seconds_count").await, 0.0);
    let poll = h
        .park_long_poll(format!("{}?offset=1&live=long-poll", h.records("m")))
        .await;
    h.append_ndjson("m", &ndjson(&[2])).await;
    let delivered = poll
        .await
        .unwrap()
        .expect("the parked request got an answer");
    assert_eq!(delivered.status(), StatusCode::OK);
    assert_eq!(h.metric("mink_tail_delivery_seconds_count").await, 1.0);
    let buckets = h
        .metric("mink_tail_delivery_seconds_bucket{le=\"+Inf\"}")
        .await;
    assert_eq!(buckets, 1.0);

    // A parked long-poll ends when the node shuts down; shutdown is clean.
    let poll = h
        .park_long_poll(format!("{}?offset=2&live=long-poll", h.records("m")))
        .await;
    let started = Instant::now();
    h.stop().await;
    let r = poll
        .await
        .unwrap()
        .expect("the parked request got an answer");
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(started.elapsed() < Duration::from_secs(10));
}
