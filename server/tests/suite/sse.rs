//! Server-sent events, read with an SSE client library and with curl: one event per batch with
//! the next offset as its id, connections recycled after the setting, resumption from
//! `Last-Event-ID` or `offset` with nothing lost or repeated, heartbeats while idle.

use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::data::ndjson;
use super::harness::{Backend, Harness, NDJSON, header};

/// Reads one SSE connection to its end with the eventsource client; returns (id, rows) pairs.
async fn sse_session(
    h: &Harness,
    table: &str,
    last_event_id: Option<&str>,
    query: &str,
) -> Vec<(u64, Vec<Value>)> {
    let mut request = h
        .http
        .get(format!("{}?{query}", h.records(table)))
        .header("accept", "text/event-stream");
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        header(response.headers(), "content-type").as_deref(),
        Some("text/event-stream")
    );
    let mut events = response.bytes_stream().eventsource();
    let mut out = Vec::new();
    let deadline = Duration::from_secs(10);
    while let Some(event) = tokio::time::timeout(deadline, events.next())
        .await
        .expect("the server recycles the connection")
    {
        let event = event.expect("well-formed event");
        assert_eq!(event.event, "message");
        let rows: Vec<Value> = serde_json::from_str(&event.data).expect("rows as JSON");
        out.push((event.id.parse().expect("id is an offset"), rows));
    }
    out
}

pub async fn sse_with_client_library(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("s").await;
    h.append_ndjson("s", &ndjson(&[1, 2])).await;

    // While the first connection is open, more appends arrive as events.
    let writer = {
        let http = h.http.clone();
        let url = h.records("s");
        tokio::spawn(async move {
            for i in 3..=5 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let r = http
                    .post(&url)
                    .header("content-type", NDJSON)
                    .body(ndjson(&[i]))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), StatusCode::OK);
            }
        })
    };
    let started = Instant::now();
    let first = sse_session(&h, "s", None, "offset=0").await;
    let lasted = started.elapsed();
    writer.await.unwrap();
    assert!(
        lasted >= Duration::from_millis(1400),
        "recycled after the setting, not before: {lasted:?}"
    );
    let ids: Vec<u64> = first.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids,
        vec![2, 3, 4, 5],
        "one event per batch, id = next offset"
    );
    assert_eq!(
        first[0].1,
        vec![json!({"id":1,"msg":"m1"}), json!({"id":2,"msg":"m2"})]
    );

    // Appends between connections; the reconnect resumes from Last-Event-ID: nothing lost,
    // nothing repeated.
    h.append_ndjson("s", &ndjson(&[6])).await;
    let last = first.last().unwrap().0.to_string();
    let second = sse_session(&h, "s", Some(&last), "offset=0").await;
    let rows: Vec<i64> = second
        .iter()
        .flat_map(|(_, r)| r.iter().map(|v| v["id"].as_i64().unwrap()))
        .collect();
    assert_eq!(rows, vec![6]);

    // `offset` works as well as Last-Event-ID, with a projection.
    let third = sse_session(&h, "s", None, "offset=5&columns=msg").await;
    assert_eq!(third, vec![(6, vec![json!({"msg": "m6"})])]);
}

pub async fn sse_with_curl(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("c").await;
    h.append_ndjson("c", &ndjson(&[1])).await;
    let url = format!("{}?offset=0", h.records("c"));
    let curl = |extra: Vec<String>| {
        let url = url.clone();
        async move {
            let out = tokio::task::spawn_blocking(move || {
                std::process::Command::new("curl")
                    .args(["-sN", "--max-time", "10", "-H", "Accept: text/event-stream"])
                    .args(extra)
                    .arg(url)
                    .output()
                    .expect("curl runs")
            })
            .await
            .unwrap();
            assert!(out.status.success(), "curl: {out:?}");
            String::from_utf8(out.stdout).unwrap()
        }
    };
    let first = curl(vec![]).await;
    assert!(first.contains("id: 1\n"), "{first}");
    assert!(
        first.contains("data: [{\"id\":1,\"msg\":\"m1\"}]"),
        "{first}"
    );
    assert!(
        first.contains("\n: heartbeat\n"),
        "heartbeat comments while idle: {first}"
    );

    h.append_ndjson("c", &ndjson(&[2, 3])).await;
    let second = curl(vec!["-H".into(), "Last-Event-ID: 1".into()]).await;
    assert!(!second.contains("\"id\":1"), "nothing repeated: {second}");
    assert!(second.contains("id: 3\n"), "{second}");
    assert!(
        second.contains("{\"id\":2,\"msg\":\"m2\"},{\"id\":3,\"msg\":\"m3\"}"),
        "{second}"
    );
}

/// Streams of one bucket share the rendering of each small batch: many readers, projections,
/// a start inside a batch and an `until` that cuts it each get their own events, and two tables
/// whose batches sit at the same offsets never get each other's.
pub async fn sse_readers_share_rendered_events(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("a").await;
    h.create_table("b").await;
    h.append_ndjson("a", &ndjson(&[1, 2])).await;
    h.append_ndjson("b", &ndjson(&[10, 20])).await;
    let rows = |ids: &[i64], columns: &[&str]| -> Vec<Value> {
        ids.iter()
            .map(|i| {
                let full = json!({"id": i, "msg": format!("m{i}")});
                let mut row = serde_json::Map::new();
                for c in columns {
                    row.insert((*c).to_owned(), full[*c].clone());
                }
                Value::Object(row)
            })
            .collect()
    };
    // Each case twice, so that the second finds the first's events shared.
    for _ in 0..2 {
        let (a, b, a_msg, b_id) = tokio::join!(
            sse_session(&h, "a", None, "offset=0&until=2"),
            sse_session(&h, "b", None, "offset=0&until=2"),
            sse_session(&h, "a", None, "offset=0&until=2&columns=msg"),
            sse_session(&h, "b", None, "offset=0&until=2&columns=id"),
        );
        assert_eq!(a, vec![(2, rows(&[1, 2], &["id", "msg"]))]);
        assert_eq!(b, vec![(2, rows(&[10, 20], &["id", "msg"]))]);
        assert_eq!(a_msg, vec![(2, rows(&[1, 2], &["msg"]))]);
        assert_eq!(b_id, vec![(2, rows(&[10, 20], &["id"]))]);
        // A start inside the batch, and an `until` that cuts it.
        let (inside, cut) = tokio::join!(
            sse_session(&h, "b", Some("1"), "offset=0&until=2"),
            sse_session(&h, "a", None, "offset=0&until=1"),
        );
        assert_eq!(inside, vec![(2, rows(&[20], &["id", "msg"]))]);
        assert_eq!(cut, vec![(1, rows(&[1], &["id", "msg"]))]);
    }
    // Many readers parked at the tail of one bucket, then one append: every one of them gets
    // the same event.
    let readers: Vec<_> = (0..20)
        .map(|_| sse_session(&h, "a", None, "offset=2&until=4"))
        .collect();
    let appended = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        h.append_ndjson("a", &ndjson(&[3, 4])).await;
    };
    let (events, ()) = tokio::join!(futures::future::join_all(readers), appended);
    for got in events {
        assert_eq!(got, vec![(4, rows(&[3, 4], &["id", "msg"]))]);
    }
    // Woken, a stream whose batch another had already rendered sent those events without
    // reading the log: most of them (those woken at once on the two workers before the first
    // render was kept read for themselves).
    let shared = h.metric("mink_read_tier_total{tier=\"shared\"}").await;
    assert!(
        shared >= 14.0,
        "{shared} of 20 streams sent the batch from another's render"
    );
}
