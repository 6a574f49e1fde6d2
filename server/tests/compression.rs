//! Response compression: JSON and NDJSON bodies come gzip- or zstd-compressed when the client
//! asks and read back the same; SSE and the binary formats never are.

use std::io::Read as _;
use std::sync::Arc;

use mink_metadata::MemoryKv;
use mink_s3stream::storage::ObjectStoreBackend;
use mink_server::{Node, Settings};
use serde_json::json;

async fn get(url: &str, accept: &str, encoding: &str) -> (Option<String>, Vec<u8>) {
    let r = reqwest::Client::new()
        .get(url)
        .header("accept", accept)
        .header("accept-encoding", encoding)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{url}: {}", r.status());
    let encoding = r
        .headers()
        .get("content-encoding")
        .map(|v| v.to_str().unwrap().to_owned());
    (encoding, r.bytes().await.unwrap().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_ndjson_are_compressed_when_asked_and_sse_and_arrow_never() {
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Settings::default()
    };
    settings.flight.listen = None;
    settings.kafka.listen = None;
    let node = Node::builder()
        .settings(settings)
        .object_store(Arc::new(ObjectStoreBackend::memory()))
        .metadata(Arc::new(MemoryKv::new()))
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{}/v1/tables", node.url()))
        .json(&json!({"name": "t", "schema": {"fields": [
            {"name": "id", "type": "int64"}, {"name": "msg", "type": "utf8"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let rows: String = (0..200)
        .map(|i| format!("{{\"id\":{i},\"msg\":\"a row that repeats itself {i}\"}}\n"))
        .collect();
    let appended = http
        .post(format!("{}/v1/tables/t/buckets/0/records", node.url()))
        .header("content-type", "application/x-ndjson")
        .body(rows)
        .send()
        .await
        .unwrap();
    assert_eq!(appended.status(), 200);
    let records = format!("{}/v1/tables/t/buckets/0/records?offset=0", node.url());

    let (plain_encoding, plain) = get(&records, "application/x-ndjson", "identity").await;
    assert_eq!(plain_encoding, None);
    assert_eq!(String::from_utf8_lossy(&plain).lines().count(), 200);
    let (encoding, gzipped) = get(&records, "application/x-ndjson", "gzip").await;
    assert_eq!(encoding.as_deref(), Some("gzip"));
    assert!(
        gzipped.len() < plain.len() / 2,
        "{} of {}",
        gzipped.len(),
        plain.len()
    );
    let mut unzipped = Vec::new();
    flate2::read::GzDecoder::new(&gzipped[..])
        .read_to_end(&mut unzipped)
        .unwrap();
    assert_eq!(unzipped, plain);
    let (encoding, zstded) = get(&records, "application/x-ndjson", "zstd").await;
    assert_eq!(encoding.as_deref(), Some("zstd"));
    assert_eq!(zstd::decode_all(&zstded[..]).unwrap(), plain);

    // JSON (a listing of tables past the 256-byte floor) is compressed too.
    for i in 0..8 {
        let created = http
            .post(format!("{}/v1/tables", node.url()))
            .json(&json!({"name": format!("table_with_a_longer_name_{i}"),
                          "schema": {"fields": [{"name": "id", "type": "int64"}]}}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201);
    }
    let (encoding, _) = get(
        &format!("{}/v1/tables", node.url()),
        "application/json",
        "gzip",
    )
    .await;
    assert_eq!(encoding.as_deref(), Some("gzip"));
    // Arrow IPC is not; nor are server-sent events.
    let (encoding, _) = get(&records, "application/vnd.apache.arrow.stream", "gzip").await;
    assert_eq!(encoding, None);
    let sse = http
        .get(&records)
        .header("accept", "text/event-stream")
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), 200);
    assert!(sse.headers().get("content-encoding").is_none());
    drop(sse);
    node.shutdown().await.unwrap();
}
