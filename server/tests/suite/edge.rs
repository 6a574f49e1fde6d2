//! The serving loop against raw TCP clients, with small limits: connections past the caps are
//! closed at accept, a stalled request head and an idle connection are closed, a client that
//! stops reading is cut off (a range read and an SSE stream), bodies over their format's limit
//! are refused by `Content-Length` and when chunked, the request-bytes budget answers 503 with
//! `Retry-After`, and the `Host` allowlist answers 421.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::harness::{
    ARROW, Backend, Harness, MINK_BATCHES, NDJSON, expect_error, header, metric_from, metric_in,
};

/// Longest wait for something the node must do by itself.
const PATIENCE: Duration = Duration::from_secs(10);

fn addr(h: &Harness) -> SocketAddr {
    h.node.as_ref().expect("running").addr()
}

/// A TCP connection to the node from the loopback address `from`.
async fn connect_from(h: &Harness, from: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(format!("{from}:0").parse().expect("address"))
        .expect("bind");
    socket.connect(addr(h)).await.expect("connect")
}

/// Reads one response (head and a `Content-Length` body); returns its status, head and body.
async fn response(stream: &mut TcpStream) -> (u16, String, Vec<u8>) {
    let mut data = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
            .await
            .expect("a response in time")
            .expect("read");
        assert!(n > 0, "closed before a response: {data:?}");
        data.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let status = head[9..12].parse().expect("status code");
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = data[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.expect("read");
        assert!(n > 0, "closed inside a body");
        body.extend_from_slice(&chunk[..n]);
    }
    (status, head, body)
}

/// Sends a GET of `path` on `stream` and returns the status.
async fn get(stream: &mut TcpStream, path: &str) -> u16 {
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    response(stream).await.0
}

/// Waits until the node closes `stream` (end of stream or reset); returns how long that took.
async fn closed(stream: &mut TcpStream) -> Duration {
    let started = Instant::now();
    let mut chunk = vec![0u8; 65536];
    loop {
        match tokio::time::timeout(PATIENCE, stream.read(&mut chunk)).await {
            Ok(Ok(0) | Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
            Err(_) => panic!("the node kept the connection open"),
        }
    }
}

/// A client that keeps no connection open, so that it does not count in the connection gauge
/// after its request.
fn passing_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client")
}

async fn metric(h: &Harness, name: &str) -> f64 {
    metric_from(&passing_client(), &h.url, name).await
}

/// Waits until `check` holds for a metric.
async fn wait_with(client: &reqwest::Client, h: &Harness, name: &str, check: impl Fn(f64) -> bool) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let value = metric_from(client, &h.url, name).await;
        if check(value) {
            return;
        }
        assert!(Instant::now() < deadline, "{name} stayed at {value}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A metric read with a GET of `/metrics` on `stream`.
async fn metric_on(stream: &mut TcpStream, name: &str) -> f64 {
    let request = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
    stream.write_all(request.as_bytes()).await.expect("write");
    let (status, _, body) = response(stream).await;
    assert_eq!(status, 200);
    let text = String::from_utf8(body).expect("UTF-8 metrics");
    metric_in(&text, name).unwrap_or_else(|| panic!("metric {name} missing from:\n{text}"))
}

/// Waits until `check` holds for a metric read on `stream`.
async fn wait_on(stream: &mut TcpStream, name: &str, check: impl Fn(f64) -> bool) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let value = metric_on(stream, name).await;
        if check(value) {
            return;
        }
        assert!(Instant::now() < deadline, "{name} stayed at {value}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn wait_for_metric(h: &Harness, name: &str, check: impl Fn(f64) -> bool) {
    wait_with(&passing_client(), h, name, check).await;
}

pub async fn connection_limits(backend: Backend) {
    let h = Harness::start_with(backend, |s| {
        s.http.max_connections = 4;
        s.http.max_connections_per_client = 2;
    })
    .await;
    // The metrics are read over one kept connection from an address of its own: it is the
    // first of the four and stays open. (A pooling HTTP client may race a new connection
    // against its idle one, which the node would refuse and count.)
    let mut watcher = connect_from(&h, "127.0.0.9").await;
    let open = "mink_http_connections";
    wait_on(&mut watcher, open, |n| n == 1.0).await;

    let mut first = connect_from(&h, "127.0.0.1").await;
    assert_eq!(get(&mut first, "/healthz").await, 200);
    let mut second = connect_from(&h, "127.0.0.1").await;
    assert_eq!(get(&mut second, "/healthz").await, 200);
    let mut third_of_client = connect_from(&h, "127.0.0.1").await;
    closed(&mut third_of_client).await;

    let mut other_client = connect_from(&h, "127.0.0.2").await;
    assert_eq!(get(&mut other_client, "/healthz").await, 200);
    let mut fifth_in_all = connect_from(&h, "127.0.0.3").await;
    closed(&mut fifth_in_all).await;

    // A closed connection frees its place; the refusals were counted.
    drop(first);
    wait_on(&mut watcher, open, |n| n == 3.0).await;
    let mut again = connect_from(&h, "127.0.0.1").await;
    assert_eq!(get(&mut again, "/healthz").await, 200);
    drop((again, second, other_client));
    wait_on(&mut watcher, open, |n| n == 1.0).await;
    let refused = metric_on(&mut watcher, "mink_http_connections_refused_total").await;
    assert_eq!(refused, 2.0);
}

pub async fn header_and_idle_timeouts(backend: Backend) {
    let header = Duration::from_millis(300);
    let idle = Duration::from_millis(1500);
    let h = Harness::start_with(backend, |s| {
        s.http.header_timeout = header;
        s.http.idle_timeout = idle;
    })
    .await;
    // Half a request line, then nothing.
    let mut stalled = connect_from(&h, "127.0.0.1").await;
    stalled.write_all(b"GET /healthz HT").await.expect("write");
    let took = closed(&mut stalled).await;
    assert!(took < idle, "closed by the header timeout, after {took:?}");

    // A connection that sends nothing at all gets the header timeout too.
    let mut silent = connect_from(&h, "127.0.0.1").await;
    let took = closed(&mut silent).await;
    assert!(took < idle, "closed by the header timeout, after {took:?}");

    // Between requests a kept-alive connection waits longer than a head may take, then is
    // closed once idle for the idle timeout.
    let mut kept = connect_from(&h, "127.0.0.1").await;
    assert_eq!(get(&mut kept, "/healthz").await, 200);
    tokio::time::sleep(header * 2).await;
    assert_eq!(get(&mut kept, "/healthz").await, 200);
    let took = closed(&mut kept).await;
    assert!(
        took >= idle - Duration::from_millis(100),
        "idle for {took:?} only"
    );
}

/// NDJSON rows of `id`s with a `msg` of `width` characters.
fn wide_rows(ids: std::ops::Range<i64>, width: usize) -> String {
    let msg = "x".repeat(width);
    ids.map(|i| format!("{{\"id\":{i},\"msg\":\"{msg}\"}}\n"))
        .collect()
}

/// A connection whose receive buffer is small, so that the node's writes soon block.
async fn slow_reader(h: &Harness) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("buffer size");
    socket.connect(addr(h)).await.expect("connect")
}

pub async fn write_timeout_cuts_off_a_client_that_stops_reading(backend: Backend) {
    let write_timeout = Duration::from_millis(500);
    let h = Harness::start_with(backend, |s| {
        s.http.write_timeout = write_timeout;
        s.http.max_read_bytes = 32 << 20;
    })
    .await;
    h.create_table("w").await;
    // About 8 MB rendered: more than the loopback socket buffers hold.
    for part in 0..4 {
        h.append_ndjson("w", &wide_rows(part * 2000..(part + 1) * 2000, 1000))
            .await;
    }
    let baseline = metric(&h, "mink_http_connections").await;

    let mut reader = slow_reader(&h).await;
    let request = format!(
        "GET /v1/tables/w/buckets/0/records?offset=0&max_bytes={} HTTP/1.1\r\nHost: localhost\r\n\
         Accept: {NDJSON}\r\n\r\n",
        32 << 20
    );
    reader.write_all(request.as_bytes()).await.expect("write");
    wait_for_metric(&h, "mink_http_connections", |n| n > baseline).await;
    // The node gives up on its own, while the client still reads nothing.
    wait_for_metric(&h, "mink_http_connections", |n| n <= baseline).await;
    let mut received = Vec::new();
    let _ = reader.read_to_end(&mut received).await;
    assert!(
        received.len() < 8_000_000,
        "the response was cut: {} bytes arrived",
        received.len()
    );

    // An SSE stream from the start holds the same bytes; its recycle time (1.5 s in the
    // harness) cannot end it while the client reads nothing, the write timeout does.
    let mut sse = slow_reader(&h).await;
    let started = Instant::now();
    let request = "GET /v1/tables/w/buckets/0/records?offset=0&live=sse HTTP/1.1\r\n\
                   Host: localhost\r\nAccept: text/event-stream\r\n\r\n";
    sse.write_all(request.as_bytes()).await.expect("write");
    wait_for_metric(&h, "mink_http_connections", |n| n > baseline).await;
    wait_for_metric(&h, "mink_http_connections", |n| n <= baseline).await;
    assert!(started.elapsed() < PATIENCE);
    let mut received = Vec::new();
    let _ = sse.read_to_end(&mut received).await;
    assert!(
        received.len() < 8_000_000,
        "the stream was cut: {} bytes arrived",
        received.len()
    );
    // The node still serves.
    assert_eq!(h.offsets("w", "").await["high_watermark"], 8000);
}

pub async fn body_limits_per_format(backend: Backend) {
    let h = Harness::start_with(backend, |s| {
        s.http.body.max_append_bytes = 1000;
        s.http.body.max_arrow_bytes = 2000;
        s.http.body.max_ndjson_bytes = 3000;
        s.http.body.max_json_bytes = 4000;
    })
    .await;
    h.create_table("b").await;
    let big = vec![b'x'; 5000];
    for (content_type, limit) in [(MINK_BATCHES, 1000), (ARROW, 2000), (NDJSON, 3000)] {
        let body = expect_error(
            h.append("b", content_type, big.clone()).await,
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        )
        .await;
        assert_eq!(body["limit"], limit, "{content_type}: {body}");
    }
    // The control routes take JSON up to their own limit.
    let fields: Vec<Value> = (0..200)
        .map(|i| json!({"name": format!("column_{i}"), "type": "int64"}))
        .collect();
    let table = json!({"name": "wide", "schema": {"fields": fields}});
    assert!(table.to_string().len() > 4000);
    let body = expect_error(
        h.post_json(h.v1("tables"), &table).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    )
    .await;
    assert_eq!(body["limit"], 4000, "{body}");

    // A Content-Length over the limit is answered before the body is sent.
    let mut stream = connect_from(&h, "127.0.0.1").await;
    let head = format!(
        "POST /v1/tables/b/buckets/0/records HTTP/1.1\r\nHost: localhost\r\n\
         Content-Type: {NDJSON}\r\nContent-Length: 100000000\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let (status, _, body) = response(&mut stream).await;
    assert_eq!(status, 413, "{}", String::from_utf8_lossy(&body));

    // A chunked body is cut at the limit.
    let chunks = (0..8).map(|i| Ok::<_, std::io::Error>(super::data::ndjson(&[i; 50])));
    let chunked = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    expect_error(
        h.append("b", NDJSON, chunked).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    )
    .await;
    // Within the limits everything is appended, chunked or not.
    let chunks = (0..3).map(|i| Ok::<_, std::io::Error>(super::data::ndjson(&[i])));
    let chunked = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    h.append_ok("b", NDJSON, chunked).await;
    h.append_ndjson("b", &super::data::ndjson(&[7, 8])).await;
    assert_eq!(h.offsets("b", "").await["high_watermark"], 5);
}

pub async fn request_budget_answers_503(backend: Backend) {
    let h = Harness::start_with(backend, |s| {
        s.http.max_inflight_request_bytes = 4096;
        s.http.body.max_append_bytes = 4096;
        s.http.body.max_arrow_bytes = 4096;
        s.http.body.max_ndjson_bytes = 4096;
        s.http.body.max_json_bytes = 4096;
        s.http.retry_after_secs = 2;
    })
    .await;
    h.create_table("q").await;
    let held = wide_rows(0..30, 80);
    assert!((2500..4096).contains(&held.len()), "{}", held.len());
    // A slow append: its head and half its body, then a pause.
    let mut slow = connect_from(&h, "127.0.0.1").await;
    let head = format!(
        "POST /v1/tables/q/buckets/0/records HTTP/1.1\r\nHost: localhost\r\n\
         Content-Type: {NDJSON}\r\nContent-Length: {}\r\n\r\n",
        held.len()
    );
    slow.write_all(head.as_bytes()).await.expect("write");
    let (first_half, second_half) = held.split_at(held.len() / 2);
    slow.write_all(first_half.as_bytes()).await.expect("write");
    wait_for_metric(&h, "mink_http_inflight_request_bytes", |n| {
        n == held.len() as f64
    })
    .await;

    let other = wide_rows(100..115, 80);
    let refused = h.append("q", NDJSON, other.clone()).await;
    assert_eq!(
        header(refused.headers(), "retry-after").as_deref(),
        Some("2")
    );
    expect_error(refused, StatusCode::SERVICE_UNAVAILABLE, "overloaded").await;
    assert_eq!(metric(&h, "mink_http_overloaded_total").await, 1.0);

    // The slow append finishes; its bytes are given back and the other goes through.
    slow.write_all(second_half.as_bytes()).await.expect("write");
    let (status, _, body) = response(&mut slow).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    wait_for_metric(&h, "mink_http_inflight_request_bytes", |n| n == 0.0).await;
    h.append_ndjson("q", &other).await;
    assert_eq!(h.offsets("q", "").await["high_watermark"], 45);
}

pub async fn host_allowlist(backend: Backend) {
    let h = Harness::start_with(backend, |s| {
        s.http.allowed_hosts = vec!["mink.test".to_owned(), "127.0.0.1".to_owned()];
    })
    .await;
    // reqwest names the address it connects to: 127.0.0.1 is listed.
    h.create_table("h").await;
    let mut stream = connect_from(&h, "127.0.0.1").await;
    for (host, status) in [
        ("mink.test", 200),
        ("MINK.test:6465", 200),
        ("evil.test", 421),
        ("localhost", 421),
    ] {
        let request = format!("GET /v1/tables/h HTTP/1.1\r\nHost: {host}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        let (got, _, body) = response(&mut stream).await;
        assert_eq!(got, status, "{host}: {}", String::from_utf8_lossy(&body));
        if status == 421 {
            let body: Value = serde_json::from_slice(&body).expect("JSON error");
            assert_eq!(body["error"], "misdirected_request", "{body}");
        }
    }
    // Liveness answers whatever the host.
    let request = "GET /healthz HTTP/1.1\r\nHost: evil.test\r\n\r\n";
    stream.write_all(request.as_bytes()).await.expect("write");
    assert_eq!(response(&mut stream).await.0, 200);
}
