//! The bounds of reads and of append decoding: a read renders at most `http.max_render_bytes`
//! (plus one piece of rows) in NDJSON, Arrow and each SSE event, stopping inside a batch when it
//! must, and the next read from `Mink-Next-Offset` (or `Last-Event-ID`) returns exactly the rest;
//! NDJSON of blank lines on a wide table and appends over the row limit are refused without
//! harm; parked long-polls and SSE streams are limited per node and per client address.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{Int8Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::data::{arrow_reader, ids_of, ndjson};
use super::harness::{ARROW, Backend, Harness, NDJSON, error_of, expect_error, header};

/// The render bound of these tests: small, so a batch of a few hundred KB spans many responses.
const BOUND: usize = 32 << 10;
/// A piece of rows renders about this much (at most the bound): a response holds the bound plus
/// one piece, and the first guess of a piece's size may be off by a little.
const SLACK: usize = BOUND + (8 << 10);
/// Rows of the big batch, and the bytes of each row's message.
const ROWS: i64 = 3000;
const MSG: usize = 200;

/// NDJSON rows `ids` with messages of `MSG` bytes.
fn wide_rows(ids: std::ops::Range<i64>) -> String {
    ids.map(|i| format!("{{\"id\":{i},\"msg\":\"{}\"}}\n", "x".repeat(MSG)))
        .collect()
}

/// The `Mink-Next-Offset` of an answer.
fn next_offset(r: &reqwest::Response) -> u64 {
    header(r.headers(), "mink-next-offset")
        .expect("next offset")
        .parse()
        .expect("a number")
}

pub async fn read_render_bound(backend: Backend) {
    let h = Harness::start_with(backend, |s| s.http.max_render_bytes = BOUND).await;
    h.create_table("big").await;
    // One batch renders to about 20 bounds; a small batch after it.
    h.append_ndjson("big", &wide_rows(0..ROWS)).await;
    h.append_ndjson("big", &ndjson(&[ROWS, ROWS + 1])).await;
    let end = ROWS as u64 + 2;
    let all: Vec<i64> = (0..ROWS + 2).collect();

    // NDJSON: every response within the bound, the first one cut inside the big batch, the
    // continuation exact.
    let (mut from, mut ids, mut responses) = (0u64, Vec::new(), 0);
    while from < end {
        let r = h
            .read("big", &format!("offset={from}&max_bytes=16777216"), NDJSON)
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        let next = next_offset(&r);
        let body = r.bytes().await.unwrap();
        assert!(body.len() <= BOUND + SLACK, "{} bytes", body.len());
        let rows: Vec<Value> = body
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("row"))
            .collect();
        assert_eq!(rows.len() as u64, next - from, "rows up to the next offset");
        if responses == 0 {
            assert!(next > 0 && next < ROWS as u64, "cut mid-batch at {next}");
        }
        ids.extend(ids_of(&rows));
        from = next;
        responses += 1;
    }
    assert_eq!(ids, all, "no gap, no duplicate");
    assert!(responses >= 10, "{responses} responses");

    // Arrow: the same, each response a complete IPC stream.
    let (mut from, mut ids) = (0u64, Vec::new());
    while from < end {
        let r = h
            .read("big", &format!("offset={from}&max_bytes=16777216"), ARROW)
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        let next = next_offset(&r);
        let body = r.bytes().await.unwrap();
        assert!(body.len() <= BOUND + SLACK, "{} bytes", body.len());
        let reader =
            arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None).unwrap();
        for batch in reader {
            let batch = batch.expect("a complete stream");
            let col = batch
                .column(0)
                .as_any()
                .downcast_ref::<arrow_array::Int64Array>()
                .unwrap();
            ids.extend(col.values().iter().copied());
        }
        assert_eq!(ids.len() as u64, next, "rows up to the next offset");
        from = next;
    }
    assert_eq!(ids, all, "no gap, no duplicate");

    // SSE: the big batch is split into events, each within the bound, each id the offset after
    // its rows; a reconnect from a split event's id continues exactly.
    let events = sse_events(&h, "big", "offset=0&max_bytes=16777216", None, end).await;
    assert!(events.len() >= 10, "{} events", events.len());
    let mut expected_from = 0u64;
    let mut ids = Vec::new();
    for (id, data_len, rows) in &events {
        assert!(*data_len <= BOUND + SLACK, "{data_len} bytes in one event");
        assert_eq!(*id - expected_from, rows.len() as u64, "id after the rows");
        expected_from = *id;
        ids.extend(ids_of(rows));
    }
    assert_eq!(ids, all, "no gap, no duplicate");
    let (resume, _, _) = events[2];
    assert!(
        resume < ROWS as u64,
        "a split event's id is inside the batch"
    );
    let rest = sse_events(&h, "big", "max_bytes=16777216", Some(resume), end).await;
    let ids: Vec<i64> = rest.iter().flat_map(|(_, _, rows)| ids_of(rows)).collect();
    assert_eq!(ids, (resume as i64..ROWS + 2).collect::<Vec<_>>());
}

/// The events of one SSE connection up to offset `end`: (id, bytes of data, rows).
async fn sse_events(
    h: &Harness,
    table: &str,
    query: &str,
    last_event_id: Option<u64>,
    end: u64,
) -> Vec<(u64, usize, Vec<Value>)> {
    let mut request = h
        .http
        .get(format!("{}?{query}", h.records(table)))
        .header("accept", "text/event-stream");
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id.to_string());
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = response.bytes_stream().eventsource();
    let mut out = Vec::new();
    while out.last().is_none_or(|(id, _, _)| *id < end) {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("events keep coming")
            .expect("the stream is open")
            .expect("well-formed event");
        assert_eq!(event.event, "message", "{}", event.data);
        let rows: Vec<Value> = serde_json::from_str(&event.data).expect("rows as JSON");
        out.push((event.id.parse().unwrap(), event.data.len(), rows));
    }
    out
}

pub async fn append_decoding_bounds(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("kept").await;
    h.append_ndjson("kept", &ndjson(&[1, 2])).await;

    // 8 MB of blank lines on a table of 1000 columns: a decoder sized by the newlines would
    // reserve terabytes; the body holds no row, so it is refused, and the node goes on.
    let fields: Vec<Value> = (0..1000)
        .map(|i| json!({"name": format!("c{i}"), "type": "int64"}))
        .collect();
    let created = h
        .post_json(
            h.v1("tables"),
            &json!({"name": "wide", "schema": {"fields": fields}}),
        )
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let started = Instant::now();
    expect_error(
        h.append("wide", NDJSON, vec![b'\n'; 8_000_000]).await,
        StatusCode::BAD_REQUEST,
        "invalid_rows",
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(20));
    // Blank lines between rows are skipped.
    let ack = h
        .append_ok("wide", NDJSON, "\n\n{\"c7\":7}\n\n\n{\"c9\":9}\n\n")
        .await;
    assert_eq!(ack["next_offset"], 2);

    // Rows past `limits.max_rows_per_request` are refused, counted while decoding.
    let created = h
        .post_json(
            h.v1("tables"),
            &json!({"name": "many", "schema": {"fields": [{"name": "n", "type": "int8"}]}}),
        )
        .await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let over = (1 << 20) + 1;
    let (status, body, _) = error_of(h.append("many", NDJSON, "{}\n".repeat(over)).await).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("limit_exceeded")),
        "{body}"
    );
    assert_eq!(body["setting"], "tablet.max_rows_per_request");
    assert_eq!(body["limit"], 1 << 20);
    // Arrow: two record batches that are under the bound each and over it together.
    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int8, true)]));
    let half = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int8Array::from(vec![1i8; over / 2 + 1]))],
    )
    .unwrap();
    let mut ipc = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &schema).unwrap();
    ipc.write(&half).unwrap();
    ipc.write(&half).unwrap();
    ipc.finish().unwrap();
    let body = expect_error(
        h.append("many", ARROW, ipc.into_inner().unwrap()).await,
        StatusCode::BAD_REQUEST,
        "limit_exceeded",
    )
    .await;
    assert_eq!(body["setting"], "tablet.max_rows_per_request");
    assert_eq!(h.offsets("many", "").await["high_watermark"], 0);

    // The node still answers, and what it held reads back exactly.
    let health = h
        .http
        .get(format!("{}/healthz", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let (rows, _) = h.read_ndjson("kept", "offset=0").await;
    assert_eq!(ids_of(&rows), vec![1, 2]);
}

/// A client whose connections come from `ip` (any 127.0.0.0/8 address is this host).
fn client_from(ip: Ipv4Addr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(ip))
        .build()
        .unwrap()
}

/// Waits (bounded) until `mink_parked_reads` is `value`.
async fn wait_parked(h: &Harness, value: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while h.metric("mink_parked_reads").await != value {
        assert!(
            Instant::now() < deadline,
            "parked reads never reached {value}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub async fn parked_read_limits(backend: Backend) {
    let h = Harness::start_with(backend, |s| {
        s.http.max_parked_reads = 3;
        s.http.max_parked_reads_per_client = 2;
    })
    .await;
    h.create_table("pk").await;
    h.append_ndjson("pk", &ndjson(&[1])).await;
    let a = client_from(Ipv4Addr::LOCALHOST);
    let b = client_from(Ipv4Addr::new(127, 0, 0, 2));
    let poll_url = format!(
        "{}?offset=1&live=long-poll&timeout_ms=30000",
        h.records("pk")
    );
    let sse_url = format!("{}?offset=1&live=sse", h.records("pk"));

    // Client a parks two long-polls, its limit; a third is refused.
    let polls: Vec<_> = (0..2)
        .map(|_| tokio::spawn(a.get(&poll_url).send()))
        .collect();
    wait_parked(&h, 2.0).await;
    let (status, body, headers) = error_of(a.get(&poll_url).send().await.unwrap()).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("too_many_requests")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("http.max_parked_reads_per_client"),
        "{body}"
    );
    assert!(header(&headers, "retry-after").is_some());
    // A read that does not park is not limited.
    let r = a
        .get(format!("{}?offset=0&live=long-poll", h.records("pk")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // Client b opens an SSE stream, the node's third place; its second is refused by the node
    // limit.
    let stream = b.get(&sse_url).send().await.unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    wait_parked(&h, 3.0).await;
    let (status, body, headers) = error_of(b.get(&sse_url).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("`http.max_parked_reads`"), "{body}");
    assert!(header(&headers, "retry-after").is_some());
    assert_eq!(h.metric("mink_parked_reads_refused_total").await, 2.0);

    // Places are given back when requests end: the stream's when its client goes, the
    // long-polls' when an append wakes them.
    drop(stream);
    wait_parked(&h, 2.0).await;
    h.append_ndjson("pk", &ndjson(&[2])).await;
    for poll in polls {
        let r = poll.await.unwrap().unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(next_offset(&r), 2);
    }
    wait_parked(&h, 0.0).await;
    let poll = tokio::spawn(
        a.get(format!("{}?offset=2&live=long-poll", h.records("pk")))
            .send(),
    );
    wait_parked(&h, 1.0).await;
    h.append_ndjson("pk", &ndjson(&[3])).await;
    assert_eq!(poll.await.unwrap().unwrap().status(), StatusCode::OK);
    wait_parked(&h, 0.0).await;
}
