//! The node under test and the client that drives it: [`Backend`] (settings plus what must
//! outlive the node), [`Harness`] (a running node and the HTTP calls the tests repeat, each with
//! the assertion that goes with it), and [`expect_error`] for error answers.

use std::time::{Duration, Instant};

use std::sync::Arc;

use mink_s3stream::storage::{ObjectStorage, ObjectStoreBackend};
use mink_server::settings::StorageBackend;
use mink_server::{Node, NodeBuilder, Settings};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::data::ndjson;

/// Content type of NDJSON rows.
pub const NDJSON: &str = "application/x-ndjson";
/// Content type of mink batches.
pub const MINK_BATCHES: &str = "application/vnd.mink.batches";
/// Content type of an Arrow IPC stream.
pub const ARROW: &str = "application/vnd.apache.arrow.stream";

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
    settings.flight.listen = None;
    settings.kafka.listen = None;
    settings.http.sse_recycle = Duration::from_millis(1500);
    settings.http.sse_heartbeat = Duration::from_millis(200);
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

    /// A harness around a node the test started itself (on an injected clock, say) from
    /// `backend`'s settings.
    pub fn attach(backend: Backend, node: Node) -> Self {
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

    /// GET `url` and its JSON body, whatever the status.
    pub async fn get_json(&self, url: String) -> Value {
        self.http
            .get(url)
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json")
    }

    /// POST a JSON body to `url`.
    pub async fn post_json(&self, url: String, body: &Value) -> reqwest::Response {
        self.http
            .post(url)
            .json(body)
            .send()
            .await
            .expect("request")
    }

    pub async fn create_table(&self, name: &str) -> Value {
        let response = self
            .post_json(
                self.v1("tables"),
                &json!({
                    "name": name,
                    "schema": {"fields": [
                        {"name": "id", "type": "int64", "nullable": false},
                        {"name": "msg", "type": "utf8"}
                    ]},
                    "buckets": 2
                }),
            )
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
        response.json().await.expect("json")
    }

    /// DELETE a table; the node answers 200.
    pub async fn drop_table(&self, name: &str) {
        let dropped = self
            .http
            .delete(self.v1(&format!("tables/{name}")))
            .send()
            .await
            .expect("request");
        assert_eq!(dropped.status(), StatusCode::OK);
    }

    /// A new writer id from `POST /v1/writers`.
    pub async fn writer_id(&self) -> u64 {
        let w: Value = self
            .http
            .post(self.v1("writers"))
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json");
        w["writer_id"].as_u64().expect("writer id")
    }

    /// The offsets of bucket 0 (`log_start`, `high_watermark`), or of a timestamp with
    /// `?timestamp=`.
    pub async fn offsets(&self, table: &str, query: &str) -> Value {
        self.get_json(self.v1(&format!("tables/{table}/buckets/0/offsets{query}")))
            .await
    }

    /// POST a body of `content_type` to bucket 0 of `table`, whatever the answer.
    pub async fn append(
        &self,
        table: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        self.http
            .post(self.records(table))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("request")
    }

    /// Appends and asserts a 200; returns the acknowledgement.
    pub async fn append_ok(
        &self,
        table: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> Value {
        let response = self.append(table, content_type, body).await;
        let status = response.status();
        let body: Value = response.json().await.expect("json");
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    pub async fn append_ndjson(&self, table: &str, body: &str) -> Value {
        self.append_ok(table, NDJSON, body.to_owned()).await
    }

    /// Appends the rows `ids` as NDJSON with a writer id and sequence number, whatever the answer.
    pub async fn append_as(
        &self,
        table: &str,
        writer: u64,
        sequence: i32,
        ids: &[i64],
    ) -> reqwest::Response {
        self.http
            .post(self.records(table))
            .header("content-type", NDJSON)
            .header("mink-writer-id", writer.to_string())
            .header("mink-sequence", sequence.to_string())
            .body(ndjson(ids))
            .send()
            .await
            .expect("request")
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
        let response = self.read(table, query, NDJSON).await;
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
        metric_from(&self.http, &self.url, name).await
    }

    /// Waits (bounded) until a metric reaches `value`.
    pub async fn wait_metric(&self, name: &str, value: f64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.metric(name).await < value {
            assert!(Instant::now() < deadline, "{name} never reached {value}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Starts a GET of `url` in the background and waits until the node has parked it.
    pub async fn park_long_poll(
        &self,
        url: String,
    ) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
        let client = self.http.clone();
        let poll = tokio::spawn(async move { client.get(url).send().await });
        self.wait_metric("mink_waiters", 1.0).await;
        poll
    }
}

pub fn header(headers: &reqwest::header::HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .map(|v| v.to_str().expect("ascii").to_owned())
}

/// Status, JSON body and headers of an answer that must carry a JSON (error) body.
pub async fn error_of(
    response: reqwest::Response,
) -> (StatusCode, Value, reqwest::header::HeaderMap) {
    let status = response.status();
    let headers = response.headers().clone();
    let body: Value = response.json().await.expect("JSON error body");
    (status, body, headers)
}

/// Asserts an error answer's status and kind (`error` in the body); returns the body.
pub async fn expect_error(response: reqwest::Response, status: StatusCode, kind: &str) -> Value {
    let (got, body, _) = error_of(response).await;
    assert_eq!(
        (got, body["error"].as_str()),
        (status, Some(kind)),
        "{body}"
    );
    body
}

/// The value of metric `name` on the node at `url`, asked through `client`.
pub async fn metric_from(client: &reqwest::Client, url: &str, name: &str) -> f64 {
    let text = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .expect("request")
        .text()
        .await
        .expect("body");
    metric_in(&text, name).unwrap_or_else(|| panic!("metric {name} missing from:\n{text}"))
}

/// The value of metric `name` in the Prometheus text `text`.
pub fn metric_in(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (key, value) = l.rsplit_once(' ')?;
        (key == name).then(|| value.parse().ok())?
    })
}

/// The object store the node under `settings` writes to, opened again by the test.
pub fn store_of(settings: &Settings) -> Arc<dyn ObjectStorage> {
    match settings.storage.backend {
        StorageBackend::Local => {
            Arc::new(ObjectStoreBackend::local(settings.local_objects_dir()).expect("local store"))
        }
        StorageBackend::S3 => {
            Arc::new(ObjectStoreBackend::s3(&settings.storage.s3).expect("S3 store"))
        }
        StorageBackend::Memory => {
            panic!("the suite's backends keep objects where a test can see them")
        }
    }
}
