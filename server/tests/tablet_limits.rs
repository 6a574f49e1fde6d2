//! The `[tablet]` settings reach every tablet of a node, and its refusals reach the client as
//! the API's errors: a batch that would not decode (400 `invalid_batch`), rows over a limit (400
//! `limit_exceeded` naming the setting), a new writer beyond the cap (429 `too_many_writers`).
//! Each refusal leaves the bucket readable with exactly what it held.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use mink_codec::{BatchMeta, encode_batch};
use mink_metadata::MemoryKv;
use mink_s3stream::storage::ObjectStoreBackend;
use mink_server::{Node, Settings};
use reqwest::StatusCode;
use serde_json::{Value, json};

const NDJSON: &str = "application/x-ndjson";
const MINK_BATCHES: &str = "application/vnd.mink.batches";

/// CRC-32C (Castagnoli), bit by bit: enough to forge a batch header in a test.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The 52-byte header of a valid one-row batch, with no Arrow body after it and its CRC
/// resealed: the request that used to make a bucket unreadable.
fn header_only() -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, true)]));
    let rows = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![7]))]).unwrap();
    let mut bytes = encode_batch(&rows, None, BatchMeta::new(1)).unwrap();
    bytes.truncate(mink_codec::HEADER_LEN);
    bytes[8..12].copy_from_slice(&(mink_codec::HEADER_LEN as i32 - 12).to_le_bytes());
    let crc = crc32c(&bytes[29..]);
    bytes[25..29].copy_from_slice(&crc.to_le_bytes());
    bytes
}

struct Client {
    http: reqwest::Client,
    url: String,
}

impl Client {
    async fn append(
        &self,
        content_type: &str,
        body: Vec<u8>,
        writer: Option<(u64, i32)>,
    ) -> reqwest::Response {
        let mut request = self
            .http
            .post(format!("{}/v1/tables/t/buckets/0/records", self.url))
            .header("content-type", content_type)
            .body(body);
        if let Some((id, sequence)) = writer {
            request = request
                .header("mink-writer-id", id.to_string())
                .header("mink-sequence", sequence.to_string());
        }
        request.send().await.unwrap()
    }

    async fn refused(&self, response: reqwest::Response, status: StatusCode, kind: &str) -> Value {
        assert_eq!(response.status(), status);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], kind, "{body}");
        body
    }

    async fn writer_id(&self) -> u64 {
        let w: Value = self
            .http
            .post(format!("{}/v1/writers", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        w["writer_id"].as_u64().unwrap()
    }

    /// Every row of bucket 0, as NDJSON lines.
    async fn rows(&self) -> Vec<Value> {
        let response = self
            .http
            .get(format!(
                "{}/v1/tables/t/buckets/0/records?offset=0",
                self.url
            ))
            .header("accept", NDJSON)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let text = response.text().await.unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tablet_settings_limit_every_bucket_and_refusals_change_nothing() {
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        flight: mink_server::settings::FlightSettings {
            listen: None,
            ..Default::default()
        },
        kafka: mink_server::settings::KafkaSettings {
            listen: None,
            ..Default::default()
        },
        ..Settings::default()
    };
    settings.tablet.max_rows_per_batch = 2;
    settings.tablet.max_rows_per_request = 3;
    settings.tablet.max_writers = 1;
    let node = Node::builder()
        .settings(settings)
        .object_store(Arc::new(ObjectStoreBackend::memory()))
        .metadata(Arc::new(MemoryKv::new()))
        .start()
        .await
        .unwrap();
    let c = Client {
        http: reqwest::Client::new(),
        url: node.url(),
    };
    let created = c
        .http
        .post(format!("{}/v1/tables", c.url))
        .json(&json!({"name": "t", "schema": {"fields": [{"name": "id", "type": "int64"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let writer = c.writer_id().await;
    let ok = c
        .append(NDJSON, b"{\"id\":1}\n".to_vec(), Some((writer, 0)))
        .await;
    assert_eq!(ok.status(), StatusCode::OK);
    let stored = c.rows().await;
    assert_eq!(stored, vec![json!({"id": 1})]);

    let body = c
        .refused(
            c.append(MINK_BATCHES, header_only(), None).await,
            StatusCode::BAD_REQUEST,
            "invalid_batch",
        )
        .await;
    assert!(
        body["message"].as_str().unwrap().contains("batch 0"),
        "{body}"
    );

    let body = c
        .refused(
            c.append(
                NDJSON,
                b"{\"id\":2}\n{\"id\":3}\n{\"id\":4}\n".to_vec(),
                None,
            )
            .await,
            StatusCode::BAD_REQUEST,
            "limit_exceeded",
        )
        .await;
    assert_eq!(body["setting"], "tablet.max_rows_per_batch", "{body}");
    assert_eq!(body["limit"], 2);

    let other = c.writer_id().await;
    let body = c
        .refused(
            c.append(NDJSON, b"{\"id\":5}\n".to_vec(), Some((other, 0)))
                .await,
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_writers",
        )
        .await;
    assert_eq!(body["limit"], 1);
    assert_eq!(c.rows().await, stored, "a refusal changed the bucket");

    // The known writer goes on.
    let ok = c
        .append(NDJSON, b"{\"id\":6}\n".to_vec(), Some((writer, 1)))
        .await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(c.rows().await, vec![json!({"id": 1}), json!({"id": 6})]);
    node.abort();
}

#[tokio::test]
async fn bad_tablet_settings_stop_the_node_at_start() {
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        flight: mink_server::settings::FlightSettings {
            listen: None,
            ..Default::default()
        },
        kafka: mink_server::settings::KafkaSettings {
            listen: None,
            ..Default::default()
        },
        ..Settings::default()
    };
    settings.tablet.max_writers = 0;
    let error = Node::builder()
        .settings(settings)
        .object_store(Arc::new(ObjectStoreBackend::memory()))
        .metadata(Arc::new(MemoryKv::new()))
        .start()
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("tablet.max_writers must be at least 1"),
        "{error}"
    );
}
