//! Readers that follow a bucket live (SSE, long-poll) through any node, reconnecting as a client
//! does, and return every row they saw in order.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use super::harness::NDJSON;

/// Follows `bucket` over SSE through node `url` (redirected to its owner), reconnecting from
/// the last event id whenever a connection ends, until `stop` and it has read `until` (set by
/// the test once the writers stop). Returns `(offset, id)` of every row in order.
pub(crate) async fn follow_sse(
    url: String,
    table: &'static str,
    bucket: u32,
    stop: Arc<AtomicBool>,
    until: Arc<AtomicU64>,
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
pub(crate) async fn follow_long_poll(
    url: String,
    table: &'static str,
    bucket: u32,
    stop: Arc<AtomicBool>,
    until: Arc<AtomicU64>,
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
