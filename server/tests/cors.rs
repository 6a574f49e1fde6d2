//! Browsers on other origins (`[http.cors]`): reads from any origin with the `Mink-*` headers
//! exposed, writes only from listed origins (or any when a token is required), writes from
//! other origins refused before anything changes, and CORS off answering no CORS at all.

use std::sync::Arc;

use mink_metadata::MemoryKv;
use mink_s3stream::storage::ObjectStoreBackend;
use mink_server::{Node, Settings};
use reqwest::{Method, StatusCode};
use serde_json::json;

const PAGE: &str = "https://page.example";
const TOKEN: &str = "cors-test-token-0123456789";

async fn start(change: impl FnOnce(&mut Settings)) -> Node {
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Settings::default()
    };
    settings.flight.listen = None;
    settings.kafka.listen = None;
    change(&mut settings);
    let node = Node::builder()
        .settings(settings)
        .object_store(Arc::new(ObjectStoreBackend::memory()))
        .metadata(Arc::new(MemoryKv::new()))
        .start()
        .await
        .unwrap();
    let created = reqwest::Client::new()
        .post(format!("{}/v1/tables", node.url()))
        .bearer_auth(TOKEN)
        .json(&json!({"name": "t", "schema": {"fields": [{"name": "id", "type": "int64"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    node
}

fn records(node: &Node) -> String {
    format!("{}/v1/tables/t/buckets/0/records", node.url())
}

async fn preflight(node: &Node, origin: &str, method: &str) -> reqwest::Response {
    reqwest::Client::new()
        .request(Method::OPTIONS, records(node))
        .header("origin", origin)
        .header("access-control-request-method", method)
        .header(
            "access-control-request-headers",
            "content-type,mink-writer-id",
        )
        .send()
        .await
        .unwrap()
}

async fn append(node: &Node, origin: Option<&str>, token: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(records(node))
        .header("content-type", "application/x-ndjson")
        .body("{\"id\":1}\n");
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

fn allowed(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get("access-control-allow-origin")
        .map(|v| v.to_str().unwrap().to_owned())
}

async fn high_watermark(node: &Node) -> u64 {
    let offsets: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/v1/tables/t/buckets/0/offsets", node.url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    offsets["high_watermark"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_page_reads_but_only_listed_origins_and_the_node_itself_write() {
    let node = start(|s| s.http.cors.write_origins = vec!["https://app.example".into()]).await;
    // A read: the preflight and the response name the page, and Mink-Next-Offset is readable.
    let asked = preflight(&node, PAGE, "GET").await;
    assert_eq!(asked.status(), StatusCode::OK);
    assert_eq!(allowed(&asked).as_deref(), Some(PAGE));
    let allow_headers = asked.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap();
    assert!(allow_headers.contains("mink-writer-id"), "{allow_headers}");
    let read = reqwest::Client::new()
        .get(format!("{}?offset=0", records(&node)))
        .header("origin", PAGE)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    assert_eq!(allowed(&read).as_deref(), Some(PAGE));
    let exposed = read.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap();
    assert!(exposed.contains("mink-next-offset"), "{exposed}");

    // A write from the page: the preflight does not allow it, and a request sent anyway is
    // refused with nothing appended.
    assert_eq!(allowed(&preflight(&node, PAGE, "POST").await), None);
    let refused = append(&node, Some(PAGE), None).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert!(
        refused
            .text()
            .await
            .unwrap()
            .contains("http.cors.write_origins")
    );
    assert_eq!(high_watermark(&node).await, 0);

    // A listed origin, the node's own origin, and a client that sends no Origin may write.
    let listed = preflight(&node, "https://app.example", "POST").await;
    assert_eq!(allowed(&listed).as_deref(), Some("https://app.example"));
    let from_listed = append(&node, Some("https://app.example"), None).await;
    assert_eq!(from_listed.status(), StatusCode::OK);
    assert_eq!(
        allowed(&from_listed).as_deref(),
        Some("https://app.example")
    );
    let own = format!("http://{}", node.addr());
    assert_eq!(
        append(&node, Some(&own), None).await.status(),
        StatusCode::OK
    );
    assert_eq!(append(&node, None, None).await.status(), StatusCode::OK);
    assert_eq!(
        append(&node, Some("null"), None).await.status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(high_watermark(&node).await, 3);
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_required_any_page_holding_it_may_write() {
    let node = start(|s| s.auth.token = Some(mink_server::settings::Secret::new(TOKEN))).await;
    // The preflight carries no token and is answered.
    let asked = preflight(&node, PAGE, "POST").await;
    assert_eq!(asked.status(), StatusCode::OK);
    assert_eq!(allowed(&asked).as_deref(), Some(PAGE));
    assert_eq!(
        append(&node, Some(PAGE), None).await.status(),
        StatusCode::UNAUTHORIZED
    );
    let written = append(&node, Some(PAGE), Some(TOKEN)).await;
    assert_eq!(written.status(), StatusCode::OK);
    assert_eq!(allowed(&written).as_deref(), Some(PAGE));
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_off_answers_no_cors_and_still_refuses_foreign_writes() {
    let node = start(|s| s.http.cors.enabled = false).await;
    let read = reqwest::Client::new()
        .get(format!("{}?offset=0", records(&node)))
        .header("origin", PAGE)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    assert_eq!(allowed(&read), None);
    assert_eq!(allowed(&preflight(&node, PAGE, "GET").await), None);
    assert_eq!(
        append(&node, Some(PAGE), None).await.status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(high_watermark(&node).await, 0);
    node.shutdown().await.unwrap();
}
