//! The end-to-end HTTP suite: a real node on a random loopback port, driven through real HTTP
//! (reqwest, an SSE client library, curl). Every test takes a [`Backend`] so the same suite runs
//! against the embedded default (local files + redb) and against S3 + etcd.
//!
//! Included by `server/tests/http_embedded.rs` and `tests/tests/http_s3_etcd.rs`.

#![allow(
    dead_code,
    unreachable_pub,
    reason = "shared by two test crates, each using a different part"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use mink_codec::{BatchMeta, Encoder, batches};
use mink_server::{Node, NodeBuilder, Settings};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Settings for one test plus whatever must outlive the node (a temporary folder).
pub struct Backend {
    pub settings: Settings,
    pub dir: Option<tempfile::TempDir>,
}

/// The embedded default in a temporary folder: local-file objects and redb metadata.
pub fn embedded(_test: &str) -> Backend {
    let dir = tempfile::tempdir().expect("temporary folder");
    let settings = Settings {
        data_dir: dir.path().to_path_buf(),
        ..Settings::default()
    };
    Backend {
        settings,
        dir: Some(dir),
    }
}

fn test_settings(mut settings: Settings) -> Settings {
    settings.listen = "127.0.0.1:0".parse().expect("address");
    settings.http.sse_recycle_ms = 1500;
    settings.http.sse_heartbeat_ms = 200;
    settings
}

/// A running node and an HTTP client.
pub struct Harness {
    pub backend: Backend,
    pub node: Option<Node>,
    pub url: String,
    pub http: reqwest::Client,
}

impl Harness {
    pub async fn start(backend: Backend) -> Self {
        Self::start_with(backend, |_| {}).await
    }

    pub async fn start_with(mut backend: Backend, tweak: impl FnOnce(&mut Settings)) -> Self {
        backend.settings = test_settings(backend.settings);
        tweak(&mut backend.settings);
        let node = Self::boot(&backend.settings).await;
        Harness {
            url: node.url(),
            node: Some(node),
            backend,
            http: reqwest::Client::new(),
        }
    }

    async fn boot(settings: &Settings) -> Node {
        NodeBuilder::from_settings(settings.clone())
            .await
            .expect("components")
            .start()
            .await
            .expect("node starts")
    }

    /// Graceful shutdown, then a new node on the same storage and metadata.
    pub async fn restart(&mut self) {
        if let Some(node) = self.node.take() {
            node.shutdown().await.expect("graceful shutdown");
        }
        let node = Self::boot(&self.backend.settings).await;
        self.url = node.url();
        self.node = Some(node);
    }

    pub async fn stop(&mut self) {
        if let Some(node) = self.node.take() {
            node.shutdown().await.expect("graceful shutdown");
        }
    }

    pub fn v1(&self, path: &str) -> String {
        format!("{}/v1/{path}", self.url)
    }

    pub fn records(&self, table: &str) -> String {
        self.v1(&format!("tables/{table}/buckets/0/records"))
    }

    pub async fn create_table(&self, name: &str) -> Value {
        let response = self
            .http
            .post(self.v1("tables"))
            .json(&json!({
                "name": name,
                "schema": {"fields": [
                    {"name": "id", "type": "int64", "nullable": false},
                    {"name": "msg", "type": "utf8"}
                ]},
                "buckets": 2
            }))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), StatusCode::CREATED);
        response.json().await.expect("json")
    }

    pub async fn append_ndjson(&self, table: &str, body: &str) -> Value {
        let response = self
            .http
            .post(self.records(table))
            .header("content-type", "application/x-ndjson")
            .body(body.to_owned())
            .send()
            .await
            .expect("request");
        let status = response.status();
        let body: Value = response.json().await.expect("json");
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    pub async fn read(&self, table: &str, query: &str, accept: &str) -> reqwest::Response {
        self.http
            .get(format!("{}?{query}", self.records(table)))
            .header("accept", accept)
            .send()
            .await
            .expect("request")
    }

    pub async fn read_ndjson(
        &self,
        table: &str,
        query: &str,
    ) -> (Vec<Value>, reqwest::header::HeaderMap) {
        let response = self.read(table, query, "application/x-ndjson").await;
        assert_eq!(response.status(), StatusCode::OK);
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        let rows = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("row"))
            .collect();
        (rows, headers)
    }

    pub async fn metric(&self, name: &str) -> f64 {
        let text = self
            .http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .expect("request")
            .text()
            .await
            .expect("body");
        text.lines()
            .find_map(|l| {
                let (key, value) = l.rsplit_once(' ')?;
                (key == name).then(|| value.parse().ok())?
            })
            .unwrap_or_else(|| panic!("metric {name} missing from:\n{text}"))
    }

    /// Waits (bounded) until a metric reaches `value`.
    pub async fn wait_metric(&self, name: &str, value: f64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.metric(name).await < value {
            assert!(Instant::now() < deadline, "{name} never reached {value}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

pub fn header(headers: &reqwest::header::HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .map(|v| v.to_str().expect("ascii").to_owned())
}

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, true),
    ]))
}

pub fn rows(ids: &[i64]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from(
                ids.iter().map(|i| format!("m{i}")).collect::<Vec<_>>(),
            )),
        ],
    )
    .expect("rows")
}

pub fn mink_batch(ids: &[i64], meta: BatchMeta) -> Vec<u8> {
    Encoder::new()
        .encode(&rows(ids), None, meta)
        .expect("encode")
}

pub fn ndjson(ids: &[i64]) -> String {
    ids.iter()
        .map(|i| format!("{{\"id\":{i},\"msg\":\"m{i}\"}}\n"))
        .collect()
}

fn ids_of(rows: &[Value]) -> Vec<i64> {
    rows.iter().map(|r| r["id"].as_i64().expect("id")).collect()
}

async fn error_of(response: reqwest::Response) -> (StatusCode, Value, reqwest::header::HeaderMap) {
    let status = response.status();
    let headers = response.headers().clone();
    let body: Value = response.json().await.expect("JSON error body");
    (status, body, headers)
}

// ------------------------------------------------------------------------------------------------

pub async fn tables_lifecycle(backend: Backend) {
    let h = Harness::start(backend).await;
    let created = h.create_table("orders").await;
    assert_eq!(created["latest_schema_id"], 1);
    assert_eq!(created["buckets"], 2);
    assert_eq!(created["partitions"], json!(["default"]));

    let got: Value = h
        .http
        .get(h.v1("tables/orders"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["schemas"][0]["schema"]["fields"][0]["name"], "id");
    let list: Value = h
        .http
        .get(h.v1("tables"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["tables"].as_array().unwrap().len(), 1);

    let again = h
        .http
        .post(h.v1("tables"))
        .json(&json!({"name": "orders", "schema": {"fields": [{"name": "a", "type": "int8"}]}}))
        .send()
        .await
        .unwrap();
    let (status, body, _) = error_of(again).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::CONFLICT, Some("table_exists"))
    );

    h.append_ndjson("orders", &ndjson(&[1])).await;
    let evolved: Value = h
        .http
        .post(h.v1("tables/orders/schemas"))
        .json(&json!({"schema": {"fields": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "msg", "type": "utf8"},
            {"name": "extra", "type": "float64"}
        ]}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        evolved["schema_id"], 2,
        "a new schema version gets a new id"
    );

    // Rows in the new schema (the newest is the default), then a read across both versions.
    h.append_ndjson("orders", "{\"id\":2,\"msg\":\"m2\",\"extra\":0.5}\n")
        .await;
    let (both, _) = h.read_ndjson("orders", "offset=0").await;
    assert_eq!(
        both,
        vec![
            json!({"id":1,"msg":"m1"}),
            json!({"id":2,"msg":"m2","extra":0.5})
        ]
    );
    // Arrow answers hold one schema: the read stops before the batch of the next version.
    let r = h
        .read("orders", "offset=0", "application/vnd.apache.arrow.stream")
        .await;
    assert_eq!(
        header(r.headers(), "mink-next-offset").as_deref(),
        Some("1")
    );
    let reader = arrow_ipc::reader::StreamReader::try_new(
        std::io::Cursor::new(r.bytes().await.unwrap()),
        None,
    )
    .unwrap();
    assert_eq!(reader.schema().fields().len(), 2);
    let r = h
        .read("orders", "offset=1", "application/vnd.apache.arrow.stream")
        .await;
    let reader = arrow_ipc::reader::StreamReader::try_new(
        std::io::Cursor::new(r.bytes().await.unwrap()),
        None,
    )
    .unwrap();
    assert_eq!(reader.schema().fields().len(), 3);
    let dropped = h.http.delete(h.v1("tables/orders")).send().await.unwrap();
    assert_eq!(dropped.status(), StatusCode::OK);
    let (status, body, _) = error_of(h.http.get(h.v1("tables/orders")).send().await.unwrap()).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("table_not_found"))
    );

    // Dropping destroyed the streams: a new table of the same name starts empty.
    h.create_table("orders").await;
    let (rows, headers) = h.read_ndjson("orders", "offset=0").await;
    assert!(rows.is_empty());
    assert_eq!(
        header(&headers, "mink-high-watermark").as_deref(),
        Some("0")
    );
}

pub async fn append_and_read_each_format(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("t").await;

    // NDJSON in.
    let a = h.append_ndjson("t", &ndjson(&[1, 2])).await;
    assert_eq!(
        (a["base_offset"].as_u64(), a["last_offset"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(a["duplicate"], false);
    assert!(a["commit_timestamp"].as_i64().unwrap() > 1_600_000_000_000);

    // Mink batches in (two batches in one request).
    let mut body = mink_batch(&[3], BatchMeta::new(1));
    body.extend(mink_batch(&[4, 5], BatchMeta::new(1)));
    let r = h
        .http
        .post(h.records("t"))
        .header("content-type", "application/vnd.mink.batches")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let b: Value = r.json().await.unwrap();
    assert_eq!(
        (b["base_offset"].as_u64(), b["last_offset"].as_u64()),
        (Some(2), Some(4))
    );

    // Arrow IPC in.
    let ipc = {
        let mut w = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &schema()).unwrap();
        w.write(&rows(&[6])).unwrap();
        w.write(&rows(&[7])).unwrap();
        w.finish().unwrap();
        w.into_inner().unwrap()
    };
    let r = h
        .http
        .post(h.records("t"))
        .header("content-type", "application/vnd.apache.arrow.stream")
        .body(ipc)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let c: Value = r.json().await.unwrap();
    assert_eq!(
        (c["base_offset"].as_u64(), c["last_offset"].as_u64()),
        (Some(5), Some(6))
    );

    // NDJSON out.
    let (all, headers) = h.read_ndjson("t", "offset=0").await;
    assert_eq!(ids_of(&all), vec![1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(all[0]["msg"], "m1");
    assert_eq!(header(&headers, "mink-next-offset").as_deref(), Some("7"));
    assert_eq!(
        header(&headers, "mink-high-watermark").as_deref(),
        Some("7")
    );
    assert_eq!(header(&headers, "mink-up-to-date").as_deref(), Some("true"));

    // Mink batches out: offsets stamped, rows intact.
    let r = h
        .read("t", "offset=2", "application/vnd.mink.batches")
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let bytes = r.bytes().await.unwrap();
    let mut offsets = Vec::new();
    let mut ids = Vec::new();
    for batch in batches(bytes) {
        let batch = batch.expect("valid batch");
        batch.validate().expect("CRC and body check");
        offsets.push(batch.base_offset());
        let (rb, _) = batch.decode(&schema()).unwrap();
        let col = rb.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        ids.extend(col.values().iter().copied());
    }
    assert_eq!(offsets, vec![2, 3, 5]);
    assert_eq!(ids, vec![3, 4, 5, 6, 7]);

    // Arrow out, bounded by `until` and `max_bytes`.
    let r = h
        .read(
            "t",
            "offset=0&until=2",
            "application/vnd.apache.arrow.stream",
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(r.headers(), "mink-next-offset").as_deref(),
        Some("2")
    );
    assert!(header(r.headers(), "mink-up-to-date").is_none());
    let bytes = r.bytes().await.unwrap();
    let reader =
        arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    let got: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
    assert_eq!(got, vec![rows(&[1, 2])]);

    let (small, headers) = h.read_ndjson("t", "offset=0&max_bytes=1").await;
    assert_eq!(ids_of(&small), vec![1, 2], "at least one whole batch");
    assert_eq!(header(&headers, "mink-next-offset").as_deref(), Some("2"));

    // Another bucket is another log.
    let r = h
        .http
        .get(h.v1("tables/t/buckets/1/records?offset=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        header(r.headers(), "mink-high-watermark").as_deref(),
        Some("0")
    );
}

pub async fn projection(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("p").await;
    h.append_ndjson("p", &ndjson(&[1, 2])).await;
    let (rows_, _) = h.read_ndjson("p", "offset=0&columns=msg").await;
    assert_eq!(rows_, vec![json!({"msg": "m1"}), json!({"msg": "m2"})]);

    let r = h
        .read(
            "p",
            "offset=0&columns=msg,id",
            "application/vnd.apache.arrow.stream",
        )
        .await;
    let reader = arrow_ipc::reader::StreamReader::try_new(
        std::io::Cursor::new(r.bytes().await.unwrap()),
        None,
    )
    .unwrap();
    let names: Vec<String> = reader
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, vec!["msg", "id"]);

    let r = h
        .read("p", "offset=0&columns=msg", "application/vnd.mink.batches")
        .await;
    let bytes = r.bytes().await.unwrap();
    let batch = batches(bytes).next().unwrap().unwrap();
    let projected = Arc::new(schema().project(&[1]).unwrap());
    let (rb, _) = batch.decode(&projected).unwrap();
    assert_eq!(rb.num_columns(), 1);
    assert_eq!(batch.base_offset(), 0);

    let (status, body, _) = error_of(
        h.read("p", "offset=0&columns=nope", "application/x-ndjson")
            .await,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "unknown_column");
}

pub async fn tail_reads_and_long_poll(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("lp").await;
    h.append_ndjson("lp", &ndjson(&[1])).await;

    // A read at the high watermark returns at once, empty, with the marker.
    let started = Instant::now();
    let r = h.read("lp", "offset=1", "application/x-ndjson").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(r.headers(), "mink-up-to-date").as_deref(),
        Some("true")
    );
    assert_eq!(
        header(r.headers(), "mink-next-offset").as_deref(),
        Some("1")
    );
    assert!(r.bytes().await.unwrap().is_empty());
    assert!(started.elapsed() < Duration::from_secs(2));

    // A long-poll parks until an append is durable, then returns it.
    let url = format!("{}?offset=1&live=long-poll", h.records("lp"));
    let client = h.http.clone();
    let poll = tokio::spawn(async move { client.get(url).send().await.unwrap() });
    h.wait_metric("mink_waiters", 1.0).await;
    h.append_ndjson("lp", &ndjson(&[2])).await;
    let r = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("the long-poll was woken by the append")
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(r.headers(), "mink-next-offset").as_deref(),
        Some("2")
    );
    assert_eq!(r.text().await.unwrap(), "{\"id\":2,\"msg\":\"m2\"}\n");

    // Nothing arrives: 204 after the timeout, with the marker.
    let started = Instant::now();
    let r = h
        .read(
            "lp",
            "offset=2&live=long-poll&timeout_ms=300",
            "application/x-ndjson",
        )
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(
        header(r.headers(), "mink-up-to-date").as_deref(),
        Some("true")
    );
    assert_eq!(
        header(r.headers(), "mink-next-offset").as_deref(),
        Some("2")
    );
    assert_eq!(h.metric("mink_waiters").await, 0.0);

    // The log closing (its table dropped) releases a parked long-poll at once.
    let url = format!(
        "{}?offset=2&live=long-poll&timeout_ms=20000",
        h.records("lp")
    );
    let client = h.http.clone();
    let poll = tokio::spawn(async move { client.get(url).send().await.unwrap() });
    h.wait_metric("mink_waiters", 1.0).await;
    let started = Instant::now();
    let dropped = h.http.delete(h.v1("tables/lp")).send().await.unwrap();
    assert_eq!(dropped.status(), StatusCode::OK);
    let r = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("the drop released the long-poll")
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(started.elapsed() < Duration::from_secs(5));
}

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
                let r = http.post(&url).body(ndjson(&[i])).send().await.unwrap();
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

pub async fn idempotent_retries(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("w").await;
    let w: Value = h
        .http
        .post(h.v1("writers"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let writer = w["writer_id"].as_u64().expect("writer id");
    let w2: Value = h
        .http
        .post(h.v1("writers"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_ne!(w2["writer_id"].as_u64(), Some(writer), "ids are unique");

    let send = |seq: i32, ids: Vec<i64>| {
        let http = h.http.clone();
        let url = h.records("w");
        async move {
            http.post(url)
                .header("content-type", "application/x-ndjson")
                .header("mink-writer-id", writer.to_string())
                .header("mink-sequence", seq.to_string())
                .body(ndjson(&ids))
                .send()
                .await
                .unwrap()
        }
    };
    let first: Value = send(0, vec![1, 2]).await.json().await.unwrap();
    assert_eq!(first["duplicate"], false);
    let retry: Value = send(0, vec![1, 2]).await.json().await.unwrap();
    assert_eq!(retry["duplicate"], true);
    assert_eq!(retry["base_offset"], first["base_offset"]);
    assert_eq!(retry["last_offset"], first["last_offset"]);

    let (status, body, _) = error_of(send(2, vec![9]).await).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"], "out_of_order_sequence");
    assert_eq!(body["expected_sequence"], 1);

    let next: Value = send(1, vec![3]).await.json().await.unwrap();
    assert_eq!(next["base_offset"], 2);

    // The same through mink batches, sequence in the batch header.
    let batch = mink_batch(&[4], BatchMeta::new(1).with_writer(writer as i64, 2));
    for expect_dup in [false, true] {
        let r: Value = h
            .http
            .post(h.records("w"))
            .header("content-type", "application/vnd.mink.batches")
            .body(batch.clone())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["duplicate"], expect_dup);
        assert_eq!(r["base_offset"], 3);
    }
    let (all, _) = h.read_ndjson("w", "offset=0").await;
    assert_eq!(ids_of(&all), vec![1, 2, 3, 4], "retries appended nothing");
    assert_eq!(h.metric("mink_append_duplicates_total").await, 2.0);
}

pub async fn error_cases(backend: Backend) {
    let h = Harness::start_with(backend, |s| s.http.max_body_bytes = 64 << 10).await;
    h.create_table("e").await;
    h.append_ndjson("e", &ndjson(&[1, 2, 3])).await;

    // Bad CRC.
    let mut bad = mink_batch(&[9], BatchMeta::new(1));
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let r = h
        .http
        .post(h.records("e"))
        .header("content-type", "application/vnd.mink.batches")
        .body(bad)
        .send()
        .await
        .unwrap();
    let (status, body, _) = error_of(r).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_batch")),
        "{body}"
    );
    assert!(
        body["message"].as_str().unwrap().contains("CRC")
            || body["message"].as_str().unwrap().contains("crc"),
        "{body}"
    );

    // Unknown table, bucket, partition.
    let r = h
        .http
        .get(h.v1("tables/nope/buckets/0/records"))
        .send()
        .await
        .unwrap();
    let (status, body, _) = error_of(r).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("table_not_found"))
    );
    let r = h
        .http
        .get(h.v1("tables/e/buckets/7/records"))
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(r).await.0, StatusCode::NOT_FOUND);
    let r = h
        .http
        .get(h.v1("tables/e/buckets/0/records?partition=p9"))
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(r).await.0, StatusCode::NOT_FOUND);

    // Offset past the high watermark; below the log start after a trim.
    let (status, body, _) = error_of(h.read("e", "offset=99", "application/x-ndjson").await).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (
            StatusCode::RANGE_NOT_SATISFIABLE,
            Some("offset_out_of_range")
        )
    );
    let r = h
        .http
        .post(h.v1("tables/e/buckets/0/trim"))
        .json(&json!({"offset": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let trimmed: Value = r.json().await.unwrap();
    assert_eq!(trimmed["log_start"], 2);
    let (status, body, _) = error_of(h.read("e", "offset=0", "application/x-ndjson").await).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::GONE, Some("offset_trimmed"))
    );
    assert_eq!(body["log_start"], 2);
    let (rows_, _) = h.read_ndjson("e", "").await;
    assert!(!rows_.is_empty(), "no offset: from the log start");

    // Timestamp in the future.
    let future = chrono_ms() + 3_600_000;
    let r = h
        .http
        .get(h.v1(&format!("tables/e/buckets/0/offsets?timestamp={future}")))
        .send()
        .await
        .unwrap();
    let (status, body, _) = error_of(r).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("future_timestamp"))
    );

    // Oversized body.
    let big = ndjson(&(0..10_000).collect::<Vec<_>>());
    assert!(big.len() > 64 << 10);
    let r = h
        .http
        .post(h.records("e"))
        .header("content-type", "application/x-ndjson")
        .body(big)
        .send()
        .await
        .unwrap();
    let (status, body, _) = error_of(r).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large"))
    );

    // Bad rows, bad media type, bad JSON, bad query.
    let r = h
        .http
        .post(h.records("e"))
        .header("content-type", "application/x-ndjson")
        .body("{\"id\":\"x\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(r).await.1["error"], "invalid_rows");
    let r = h
        .http
        .post(h.records("e"))
        .header("content-type", "text/html")
        .body("<p>")
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(r).await.0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let r = h
        .http
        .post(h.v1("tables"))
        .header("content-type", "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(r).await.1["error"], "bad_request");
    let r = h
        .http
        .get(format!("{}?offset=abc", h.records("e")))
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(r).await.0, StatusCode::BAD_REQUEST);
    let r = h
        .http
        .post(h.records("e"))
        .header("content-type", "application/x-ndjson")
        .header("mink-writer-id", "5")
        .body(ndjson(&[1]))
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_of(r).await.0,
        StatusCode::BAD_REQUEST,
        "writer id without sequence"
    );

    // Nothing above changed the log.
    let offsets: Value = h
        .http
        .get(h.v1("tables/e/buckets/0/offsets"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(offsets, json!({"log_start": 2, "high_watermark": 3}));
}

pub async fn offsets_and_timestamps(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("o").await;
    let before = chrono_ms() - 1;
    let a = h.append_ndjson("o", &ndjson(&[1, 2])).await;
    let b = h.append_ndjson("o", &ndjson(&[3])).await;
    let at = |ts: i64| {
        let url = h.v1(&format!("tables/o/buckets/0/offsets?timestamp={ts}"));
        let http = h.http.clone();
        async move {
            let v: Value = http.get(url).send().await.unwrap().json().await.unwrap();
            v["offset"].as_u64().unwrap()
        }
    };
    assert_eq!(at(before).await, 0);
    assert_eq!(at(a["commit_timestamp"].as_i64().unwrap()).await, 0);
    let tb = b["commit_timestamp"].as_i64().unwrap();
    let expected_b = if tb == a["commit_timestamp"].as_i64().unwrap() {
        0
    } else {
        2
    };
    assert_eq!(at(tb).await, expected_b);
    let now = chrono_ms();
    let latest = at(now).await;
    if now > tb {
        assert_eq!(latest, 3, "after the newest batch: the high watermark");
    } else {
        assert_eq!(latest, expected_b);
    }
    let offsets: Value = h
        .http
        .get(h.v1("tables/o/buckets/0/offsets"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(offsets, json!({"log_start": 0, "high_watermark": 3}));
}

pub async fn restart_reads_everything_back(backend: Backend) {
    let mut h = Harness::start(backend).await;
    h.create_table("r").await;
    let w: Value = h
        .http
        .post(h.v1("writers"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let writer = w["writer_id"].as_u64().unwrap();
    for i in 0..5 {
        h.append_ndjson("r", &ndjson(&[i * 10, i * 10 + 1])).await;
    }
    let send = |h: &Harness| {
        h.http
            .post(h.records("r"))
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
    let list: Value = h
        .http
        .get(h.v1("tables"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["tables"][0]["name"], "r");
    h.stop().await;
}

pub async fn health_metrics_and_shutdown(backend: Backend) {
    let mut h = Harness::start(backend).await;
    let health: Value = h
        .http
        .get(format!("{}/healthz", h.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
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

    // A parked long-poll ends when the node shuts down; shutdown is clean.
    let url = format!("{}?offset=1&live=long-poll", h.records("m"));
    let http = h.http.clone();
    let poll = tokio::spawn(async move { http.get(url).send().await });
    h.wait_metric("mink_waiters", 1.0).await;
    let started = Instant::now();
    h.stop().await;
    let r = poll
        .await
        .unwrap()
        .expect("the parked request got an answer");
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(started.elapsed() < Duration::from_secs(10));
}

pub async fn rate_limit(backend: Backend) {
    let h = Harness::start_with(backend, |s| {
        s.http.rate_limit_per_sec = 1;
        s.http.rate_limit_burst = 2;
    })
    .await;
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..4 {
        let r = h.http.get(h.v1("tables")).send().await.unwrap();
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            retry_after = header(r.headers(), "retry-after");
        }
        statuses.push(r.status());
    }
    assert_eq!(&statuses[..2], &[StatusCode::OK, StatusCode::OK]);
    assert!(
        statuses[2..].contains(&StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
    assert_eq!(retry_after.as_deref(), Some("1"));
}

pub fn chrono_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// One `#[tokio::test]` per suite function, for a backend maker `fn(&str) -> Backend`.
macro_rules! http_suite {
    ($make:path) => {
        http_suite!(@tests $make;
            tables_lifecycle, append_and_read_each_format, projection, tail_reads_and_long_poll,
            sse_with_client_library, sse_with_curl, idempotent_retries, error_cases,
            offsets_and_timestamps, restart_reads_everything_back, health_metrics_and_shutdown,
            rate_limit);
    };
    (@tests $make:path; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                suite::$name($make(stringify!($name))).await;
            }
        )*
    };
}
