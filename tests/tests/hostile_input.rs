//! The bad-input suite: hostile requests against a real `mink` process on the embedded default.
//!
//! Each test sends one class of bad input and asserts three things: the status and JSON error
//! kind of the answer, that the node is still alive (`/healthz`), and that a table written before
//! the attack still reads back exactly. The classes are those of `docs/hardening.md`; the
//! requests described in the hardening issue are among them (a header-only batch, a forged row
//! count, blank NDJSON on a wide table, a huge fixed-size type, a deeply nested type, a `Null`
//! column of 64 Mi rows).
//!
//! The node binary is the workspace's `mink` (built by `cargo xtask test` with the server's tests;
//! `MINK_TEST_NODE_BIN` overrides where it is found).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, NullArray, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use mink_codec::{BatchMeta, Encoder};
use mink_tests::node::NodeProcess;
use reqwest::StatusCode;
use serde_json::{Value, json};

const NDJSON: &str = "application/x-ndjson";
const MINK_BATCHES: &str = "application/vnd.mink.batches";
const ARROW: &str = "application/vnd.apache.arrow.stream";

/// Rows of the table every test writes before its attack, and must read back after it.
const KEPT_ROWS: &str = "{\"id\":1,\"msg\":\"one\"}\n{\"id\":2,\"msg\":\"two\"}\n{\"id\":3}\n";

/// A running node process with the kept table written.
struct Node {
    process: NodeProcess,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Node {
    /// Starts a node whose config is the base config plus `extra` (TOML), and writes the kept
    /// table.
    async fn start(extra: &str) -> Node {
        let dir = tempfile::tempdir().expect("temporary folder");
        let mut process =
            NodeProcess::new(&mink_tests::node::binary(), dir.path()).expect("a free port");
        let config = format!("{}{extra}\n", process.base_config("hostile"));
        process.start(&config, None).expect("the node starts");
        let http = reqwest::Client::new();
        process.wait_ready(&http).await.expect("the node serves");
        let node = Node {
            process,
            http,
            _dir: dir,
        };
        node.create_table(
            "kept",
            json!([{"name": "id", "type": "int64", "nullable": false},
                                          {"name": "msg", "type": "utf8"}]),
        )
        .await;
        let r = node
            .append("kept", NDJSON, KEPT_ROWS.as_bytes().to_vec())
            .await;
        assert_eq!(r.status(), StatusCode::OK, "{}", text(r).await);
        node
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.process.url())
    }

    async fn create_table(&self, name: &str, fields: Value) {
        let r = self.try_create_table(name, fields).await;
        assert_eq!(r.status(), StatusCode::CREATED, "{}", text(r).await);
    }

    async fn try_create_table(&self, name: &str, fields: Value) -> reqwest::Response {
        self.http
            .post(self.url("/v1/tables"))
            .json(&json!({"name": name, "schema": {"fields": fields}}))
            .send()
            .await
            .expect("create table")
    }

    async fn append(&self, table: &str, content_type: &str, body: Vec<u8>) -> reqwest::Response {
        self.http
            .post(self.url(&format!("/v1/tables/{table}/buckets/0/records")))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("append")
    }

    async fn high_watermark(&self, table: &str) -> u64 {
        let r = self
            .http
            .get(self.url(&format!("/v1/tables/{table}/buckets/0/offsets")))
            .send()
            .await
            .expect("offsets");
        let body: Value = r.json().await.expect("offsets JSON");
        body["high_watermark"].as_u64().expect("a high watermark")
    }

    /// The node answers `/healthz` and the kept table reads back exactly.
    async fn assert_survived(&self) {
        let r = self
            .http
            .get(self.url("/healthz"))
            .send()
            .await
            .expect("the node is alive");
        assert_eq!(r.status(), StatusCode::OK);
        let r = self
            .http
            .get(self.url("/v1/tables/kept/buckets/0/records"))
            .send()
            .await
            .expect("read the kept table");
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(text(r).await, KEPT_ROWS);
    }
}

async fn text(r: reqwest::Response) -> String {
    r.text().await.unwrap_or_default()
}

/// The answer has `status` and the JSON error `kind`; returns the body.
async fn expect_error(r: reqwest::Response, status: StatusCode, kind: &str) -> Value {
    let got = r.status();
    let body = text(r).await;
    assert_eq!(got, status, "{body}");
    let body: Value = serde_json::from_str(&body).expect("a JSON error body");
    assert_eq!(body["error"], kind, "{body}");
    body
}

/// A valid one-row batch of the kept table's schema (schema id 1).
fn one_row_batch() -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, true),
    ]));
    let rows = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(arrow_array::Int64Array::from(vec![7])) as ArrayRef,
            Arc::new(arrow_array::StringArray::from(vec![Some("seven")])) as ArrayRef,
        ],
    )
    .expect("rows");
    Encoder::new()
        .encode(&rows, None, BatchMeta::new(1))
        .expect("encode")
}

/// Sets `record_count` (and `last_offset_delta` to match) and re-seals the CRC.
fn forge_record_count(batch: &mut [u8], count: i32) {
    batch[48..52].copy_from_slice(&count.to_le_bytes());
    batch[32..36].copy_from_slice(&(count - 1).to_le_bytes());
    reseal(batch);
}

fn reseal(batch: &mut [u8]) {
    let length = i32::try_from(batch.len() - 12).expect("a small batch");
    batch[8..12].copy_from_slice(&length.to_le_bytes());
    let crc = crc32c::crc32c(&batch[29..]);
    batch[25..29].copy_from_slice(&crc.to_le_bytes());
}

#[tokio::test]
async fn a_header_without_its_arrow_body_is_refused_and_the_bucket_stays_readable() {
    let node = Node::start("").await;
    let before = node.high_watermark("kept").await;
    let mut header = one_row_batch()[..52].to_vec();
    reseal(&mut header);
    assert_eq!(header.len(), 52);
    let r = node.append("kept", MINK_BATCHES, header).await;
    expect_error(r, StatusCode::BAD_REQUEST, "invalid_batch").await;
    assert_eq!(node.high_watermark("kept").await, before);
    node.assert_survived().await;
}

#[tokio::test]
async fn a_forged_record_count_does_not_move_the_high_watermark() {
    let node = Node::start("").await;
    let before = node.high_watermark("kept").await;
    for count in [i32::MAX, 2] {
        let mut batch = one_row_batch();
        forge_record_count(&mut batch, count);
        let r = node.append("kept", MINK_BATCHES, batch).await;
        let status = r.status();
        let body: Value = r.json().await.expect("a JSON error");
        assert_eq!(status, StatusCode::BAD_REQUEST, "count {count}: {body}");
        let kind = body["error"].as_str().unwrap_or_default();
        assert!(
            ["invalid_batch", "limit_exceeded"].contains(&kind),
            "count {count}: {body}"
        );
    }
    assert_eq!(node.high_watermark("kept").await, before);
    node.assert_survived().await;
}

#[tokio::test]
async fn a_body_of_a_different_schema_is_refused() {
    let node = Node::start("").await;
    // The batch holds two columns; this table has three, so its body cannot decode here.
    node.create_table(
        "other",
        json!([{"name": "x", "type": "float64"}, {"name": "y", "type": "utf8"},
               {"name": "z", "type": "utf8"}]),
    )
    .await;
    let r = node.append("other", MINK_BATCHES, one_row_batch()).await;
    expect_error(r, StatusCode::BAD_REQUEST, "invalid_batch").await;
    assert_eq!(node.high_watermark("other").await, 0);
    node.assert_survived().await;
}

#[tokio::test]
async fn eight_megabytes_of_blank_lines_on_a_wide_table_are_refused() {
    let node = Node::start("").await;
    let fields: Vec<Value> = (0..1000)
        .map(|i| json!({"name": format!("c{i}"), "type": "utf8"}))
        .collect();
    node.create_table("wide", Value::Array(fields)).await;
    let r = node.append("wide", NDJSON, vec![b'\n'; 8_000_000]).await;
    expect_error(r, StatusCode::BAD_REQUEST, "invalid_rows").await;
    assert_eq!(node.high_watermark("wide").await, 0);
    node.assert_survived().await;
}

#[tokio::test]
async fn types_that_cannot_be_stored_or_sized_are_refused_at_create() {
    let node = Node::start("").await;
    let deep = format!("{}Int8{}", "List(".repeat(100_000), ")".repeat(100_000));
    for (what, data_type) in [
        (
            "a huge fixed-size binary",
            "FixedSizeBinary(2147483647)".to_owned(),
        ),
        ("a deeply nested type", deep),
        ("the Null type", "Null".to_owned()),
        ("a dictionary", "Dictionary(Int32, Utf8)".to_owned()),
    ] {
        let r = node
            .try_create_table("bad", json!([{"name": "c", "type": data_type}]))
            .await;
        let body = expect_error(r, StatusCode::BAD_REQUEST, "invalid_schema").await;
        assert!(
            body["message"].as_str().unwrap_or_default().contains('c'),
            "{what}: the message names the field: {body}"
        );
    }
    let r = node
        .http
        .get(node.url("/v1/tables/bad"))
        .send()
        .await
        .expect("get");
    expect_error(r, StatusCode::NOT_FOUND, "table_not_found").await;
    node.assert_survived().await;
}

#[tokio::test]
async fn an_arrow_stream_of_sixty_four_mebirows_of_nulls_is_refused() {
    let node = Node::start("").await;
    let schema = Arc::new(Schema::new(vec![Field::new("msg", DataType::Null, true)]));
    let rows = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(NullArray::new(64 << 20)) as ArrayRef],
    )
    .expect("rows");
    let mut body = Vec::new();
    {
        let mut writer =
            arrow_ipc::writer::StreamWriter::try_new(&mut body, &schema).expect("writer");
        writer.write(&rows).expect("write");
        writer.finish().expect("finish");
    }
    assert!(body.len() < 1024, "a tiny body: {} bytes", body.len());
    node.create_table("nulls", json!([{"name": "msg", "type": "utf8"}]))
        .await;
    let r = node.append("nulls", ARROW, body).await;
    let status = r.status();
    let body: Value = r.json().await.expect("a JSON error");
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(node.high_watermark("nulls").await, 0);
    node.assert_survived().await;
}

#[tokio::test]
async fn a_declared_body_over_the_limit_is_refused_before_it_is_sent() {
    let node = Node::start("").await;
    // Declare 1 GiB and send nothing: the answer must come without the body.
    let addr = node.process.url().trim_start_matches("http://").to_owned();
    let mut tcp = TcpStream::connect(&addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        tcp,
        "POST /v1/tables/kept/buckets/0/records HTTP/1.1\r\nhost: {addr}\r\n\
         content-type: {NDJSON}\r\ncontent-length: 1073741824\r\n\r\n"
    )
    .expect("send the head");
    let mut answer = [0u8; 12];
    tcp.read_exact(&mut answer)
        .expect("an answer without the body");
    assert_eq!(&answer, b"HTTP/1.1 413");
    drop(tcp);
    node.assert_survived().await;
}

#[tokio::test]
async fn appends_need_an_explicit_known_content_type() {
    let node = Node::start("").await;
    let before = node.high_watermark("kept").await;
    for content_type in [
        None,
        Some("application/x-www-form-urlencoded"),
        Some("text/plain"),
    ] {
        let mut request = node
            .http
            .post(node.url("/v1/tables/kept/buckets/0/records"))
            .body("{\"id\":9}\n");
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        let r = request.send().await.expect("append");
        expect_error(
            r,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        )
        .await;
    }
    assert_eq!(node.high_watermark("kept").await, before);
    node.assert_survived().await;
}

#[tokio::test]
async fn writer_ids_the_allocator_never_gave_are_refused() {
    let node = Node::start("").await;
    let before = node.high_watermark("kept").await;
    let r = node
        .http
        .post(node.url("/v1/tables/kept/buckets/0/records"))
        .header("content-type", NDJSON)
        .header("mink-writer-id", "123456789")
        .header("mink-sequence", "0")
        .body("{\"id\":9}\n")
        .send()
        .await
        .expect("append");
    expect_error(r, StatusCode::BAD_REQUEST, "unknown_writer").await;
    assert_eq!(node.high_watermark("kept").await, before);
    node.assert_survived().await;
}

#[tokio::test]
async fn table_shape_limits_are_enforced() {
    let node = Node::start("[limits]\nmax_tables = 3\nmax_buckets_per_table = 4\n").await;
    let r = node
        .http
        .post(node.url("/v1/tables"))
        .json(
            &json!({"name": "many", "schema": {"fields": [{"name": "a", "type": "int8"}]},
                      "buckets": 5}),
        )
        .send()
        .await
        .expect("create");
    let body = expect_error(r, StatusCode::BAD_REQUEST, "limit_exceeded").await;
    assert_eq!(body["setting"], "limits.max_buckets_per_table", "{body}");
    node.create_table("second", json!([{"name": "a", "type": "int8"}]))
        .await;
    node.create_table("third", json!([{"name": "a", "type": "int8"}]))
        .await;
    let r = node
        .try_create_table("fourth", json!([{"name": "a", "type": "int8"}]))
        .await;
    let body = expect_error(r, StatusCode::BAD_REQUEST, "limit_exceeded").await;
    assert_eq!(body["setting"], "limits.max_tables", "{body}");
    node.assert_survived().await;
}

#[tokio::test]
async fn rows_over_the_request_limit_are_refused() {
    let node = Node::start("[tablet]\nmax_rows_per_batch = 10\nmax_rows_per_request = 10\n").await;
    let before = node.high_watermark("kept").await;
    let rows: String = (0..11).map(|i| format!("{{\"id\":{i}}}\n")).collect();
    let r = node.append("kept", NDJSON, rows.into_bytes()).await;
    expect_error(r, StatusCode::BAD_REQUEST, "limit_exceeded").await;
    assert_eq!(node.high_watermark("kept").await, before);
    node.assert_survived().await;
}

#[tokio::test]
async fn a_new_writer_past_the_cap_is_refused_and_known_writers_go_on() {
    let node = Node::start("[tablet]\nmax_writers = 2\n").await;
    let mut writers = Vec::new();
    for _ in 0..3 {
        let r = node
            .http
            .post(node.url("/v1/writers"))
            .send()
            .await
            .expect("init writer");
        let body: Value = r.json().await.expect("a writer id");
        writers.push(body["writer_id"].as_u64().expect("an id"));
    }
    let append = |writer: u64, sequence: u32| {
        node.http
            .post(node.url("/v1/tables/kept/buckets/0/records"))
            .header("content-type", NDJSON)
            .header("mink-writer-id", writer.to_string())
            .header("mink-sequence", sequence.to_string())
            .body("{\"id\":5}\n")
            .send()
    };
    for w in &writers[..2] {
        assert_eq!(
            append(*w, 0).await.expect("append").status(),
            StatusCode::OK
        );
    }
    let before = node.high_watermark("kept").await;
    let r = append(writers[2], 0).await.expect("append");
    expect_error(r, StatusCode::TOO_MANY_REQUESTS, "too_many_writers").await;
    assert_eq!(node.high_watermark("kept").await, before);
    // A known writer's retry is still a duplicate, and its next batch still appends.
    let r = append(writers[0], 0).await.expect("append");
    let body: Value = r.json().await.expect("JSON");
    assert_eq!(body["duplicate"], true, "{body}");
    assert_eq!(
        append(writers[0], 1).await.expect("append").status(),
        StatusCode::OK
    );
    let r = node
        .http
        .get(node.url("/healthz"))
        .send()
        .await
        .expect("alive");
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn tokens_gate_every_route_but_healthz() {
    let node_config = "[auth]\n[[auth.tokens]]\ntoken = \"writer-secret-0123456789\"\nscope = \"write\"\n\
                       [[auth.tokens]]\ntoken = \"reader-secret-0123456789\"\nscope = \"read\"\n";
    // The kept table is written with the write token, so start by hand.
    let dir = tempfile::tempdir().expect("temporary folder");
    let mut process =
        NodeProcess::new(&mink_tests::node::binary(), dir.path()).expect("a free port");
    let config = format!("{}{node_config}", process.base_config("hostile"));
    process.start(&config, None).expect("the node starts");
    let http = reqwest::Client::new();
    process.wait_ready(&http).await.expect("the node serves");
    let url = process.url();
    let create = json!({"name": "kept", "schema": {"fields": [{"name": "id", "type": "int64"}]}});
    let r = http
        .post(format!("{url}/v1/tables"))
        .json(&create)
        .send()
        .await
        .expect("create");
    let r_status = r.status();
    let headers = r.headers().clone();
    expect_error(r, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(r_status, StatusCode::UNAUTHORIZED);
    assert!(headers.get("www-authenticate").is_some());
    let r = http
        .post(format!("{url}/v1/tables"))
        .bearer_auth("nope")
        .json(&create)
        .send()
        .await
        .expect("create");
    expect_error(r, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let r = http
        .post(format!("{url}/v1/tables"))
        .bearer_auth("reader-secret-0123456789")
        .json(&create)
        .send()
        .await
        .expect("create");
    expect_error(r, StatusCode::FORBIDDEN, "forbidden").await;
    let r = http
        .post(format!("{url}/v1/tables"))
        .bearer_auth("writer-secret-0123456789")
        .json(&create)
        .send()
        .await
        .expect("create");
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = http
        .post(format!("{url}/v1/tables/kept/buckets/0/records"))
        .bearer_auth("writer-secret-0123456789")
        .header("content-type", NDJSON)
        .body("{\"id\":1}\n")
        .send()
        .await
        .expect("append");
    assert_eq!(r.status(), StatusCode::OK);
    let r = http
        .get(format!(
            "{url}/v1/tables/kept/buckets/0/records?access_token=reader-secret-0123456789"
        ))
        .send()
        .await
        .expect("read");
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(text(r).await, "{\"id\":1}\n");
    let r = http
        .get(format!("{url}/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(r.status(), StatusCode::OK);
    let log = std::fs::read_to_string(process.log()).unwrap_or_default();
    assert!(
        !log.contains("reader-secret-0123456789"),
        "a token reached the log"
    );
}

#[tokio::test]
async fn a_client_that_stalls_mid_request_is_disconnected() {
    let node = Node::start("[http]\nheader_timeout_ms = 500\n").await;
    let addr = node.process.url().trim_start_matches("http://").to_owned();
    let mut tcp = TcpStream::connect(&addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    tcp.write_all(b"GET /v1/tables HTTP/1.1\r\nhost: x\r\n")
        .expect("half a request");
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = tcp.read_to_end(&mut rest);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "closed after {:?}",
        started.elapsed()
    );
    node.assert_survived().await;
}

#[tokio::test]
async fn parked_reads_past_the_per_client_limit_are_refused() {
    let node = Node::start("[http]\nmax_parked_reads_per_client = 2\n").await;
    let hw = node.high_watermark("kept").await;
    let poll = || {
        node.http
            .get(node.url(&format!(
                "/v1/tables/kept/buckets/0/records?offset={hw}&live=long-poll&timeout_ms=3000"
            )))
            .send()
    };
    let first = tokio::spawn(poll());
    let second = tokio::spawn(poll());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = poll().await.expect("third long-poll");
    expect_error(r, StatusCode::TOO_MANY_REQUESTS, "too_many_requests").await;
    for parked in [first, second] {
        let r = parked.await.expect("task").expect("long-poll");
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
    }
    node.assert_survived().await;
}

#[tokio::test]
async fn requests_for_other_hosts_are_misdirected() {
    let node = Node::start("[http]\nallowed_hosts = [\"127.0.0.1\", \"localhost\"]\n").await;
    let r = node
        .http
        .get(node.url("/v1/tables"))
        .header("host", "evil.example")
        .send()
        .await
        .expect("request");
    expect_error(r, StatusCode::MISDIRECTED_REQUEST, "misdirected_request").await;
    node.assert_survived().await;
}

#[tokio::test]
async fn an_http_s3_endpoint_without_allow_http_fails_at_start_naming_the_flag() {
    let s3 = mink_tests::s3_server();
    let dir = tempfile::tempdir().expect("temporary folder");
    let stderr_path = dir.path().join("stderr");
    let mut child = std::process::Command::new(mink_tests::node::binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--storage", "s3"])
        .env("MINK_FLIGHT_LISTEN", "none")
        .env("MINK_KAFKA_LISTEN", "none")
        .args(["--s3-endpoint", &s3.endpoint, "--s3-bucket", &s3.bucket])
        .args(["--s3-access-key", mink_tests::S3_ACCESS_KEY_ID])
        .args(["--s3-secret-key", mink_tests::S3_SECRET_ACCESS_KEY])
        .arg("--data-dir")
        .arg(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .expect("run the node");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the node kept running with an http:// endpoint and allow_http unset");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "the node must not start");
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(stderr.contains("--s3-allow-http"), "{stderr}");
}
