//! Routing between in-process nodes on one memory store (which has leases, so the nodes form a
//! cluster): a table's buckets are spread over the live nodes when it is created, a request for a
//! bucket another node owns is answered 307 to the same path and query there, a request the
//! owner itself sent back is never redirected again, and a bucket whose owner is gone is 503.

use std::sync::Arc;
use std::time::Duration;

use mink_metadata::{MemoryKv, MetaKv};
use mink_s3stream::storage::{ObjectStorage, ObjectStoreBackend};
use mink_server::Node;
use mink_server::settings::Settings;
use reqwest::StatusCode;
use reqwest::header::{CACHE_CONTROL, LOCATION, RETRY_AFTER};
use serde_json::{Value, json};

const NDJSON: &str = "application/x-ndjson";
const BUCKETS: u32 = 4;

async fn start(node_id: &str, store: &Arc<dyn ObjectStorage>, kv: &Arc<dyn MetaKv>) -> Node {
    let mut settings = Settings {
        node_id: node_id.to_owned(),
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Settings::default()
    };
    settings.cluster.lease_ttl = Duration::from_secs(2);
    settings.cluster.lease_margin = Duration::from_millis(300);
    Node::builder()
        .settings(settings)
        .object_store(Arc::clone(store))
        .metadata(Arc::clone(kv))
        .start()
        .await
        .unwrap()
}

fn records(node: &Node, bucket: u32) -> String {
    format!("{}/v1/tables/t/buckets/{bucket}/records", node.url())
}

/// The node id a bucket's requests end up on, by following the redirect by hand.
async fn owner_of(plain: &reqwest::Client, via: &Node, bucket: u32) -> Option<String> {
    let r = plain
        .get(format!(
            "{}/v1/tables/t/buckets/{bucket}/offsets",
            via.url()
        ))
        .send()
        .await
        .unwrap();
    match r.status() {
        StatusCode::OK => None,
        StatusCode::TEMPORARY_REDIRECT => Some(
            r.headers()[LOCATION]
                .to_str()
                .unwrap()
                .rsplit("redirected_by=")
                .next()
                .unwrap()
                .to_owned(),
        ),
        other => panic!("offsets of bucket {bucket}: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_for_another_nodes_bucket_are_redirected_to_it() {
    let store: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    let a = start("a", &store, &kv).await;
    let b = start("b", &store, &kv).await;
    // Both registrations are in a's view before the create spreads the buckets.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let follow = reqwest::Client::new();
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let created = follow
        .post(format!("{}/v1/tables", a.url()))
        .json(&json!({"name": "t", "buckets": BUCKETS,
                      "schema": {"fields": [{"name": "id", "type": "int64"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        created.status(),
        StatusCode::CREATED,
        "{:?}",
        created.text().await
    );

    // From a, a's buckets answer here and b's redirect; from b, the reverse.
    let mut on_b = Vec::new();
    for bucket in 0..BUCKETS {
        let from_a = owner_of(&plain, &a, bucket).await;
        let from_b = owner_of(&plain, &b, bucket).await;
        match (from_a.as_deref(), from_b.as_deref()) {
            (None, Some("b")) => {}
            (Some("a"), None) => on_b.push(bucket),
            other => panic!("bucket {bucket}: {other:?}"),
        }
    }
    assert_eq!(on_b.len(), 2, "4 buckets over 2 nodes: {on_b:?}");
    // Both nodes show the same cluster.
    for node in [&a, &b] {
        let cluster: Value = follow
            .get(format!("{}/v1/cluster", node.url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let members: Vec<&str> = cluster["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["member"].as_str().unwrap())
            .collect();
        assert_eq!(members, ["a~1", "b~1"], "{cluster}");
        let on: Vec<&str> = cluster["assignments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["node"].as_str().unwrap())
            .collect();
        assert_eq!(on.iter().filter(|n| **n == "b").count(), 2, "{cluster}");
        assert_eq!(on.len(), BUCKETS as usize, "{cluster}");
    }
    let remote = on_b[0];

    // The redirect keeps the path and query, names the node that sent it, is not cached.
    let r = plain
        .get(format!("{}?offset=0&max_bytes=100", records(&a, remote)))
        .header("accept", NDJSON)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TEMPORARY_REDIRECT);
    assert_eq!(
        r.headers()[LOCATION],
        format!(
            "{}?offset=0&max_bytes=100&redirected_by=a",
            records(&b, remote)
        )
    );
    assert_eq!(r.headers()[CACHE_CONTROL], "no-store");

    // A client that follows redirects appends and reads through either node.
    for bucket in 0..BUCKETS {
        for (i, node) in [&a, &b].into_iter().enumerate() {
            let r = follow
                .post(records(node, bucket))
                .header("content-type", NDJSON)
                .body(format!("{{\"id\":{}}}\n", i))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK, "bucket {bucket}");
        }
        for node in [&a, &b] {
            let text = follow
                .get(format!("{}?offset=0", records(node, bucket)))
                .header("accept", NDJSON)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let rows: Vec<Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert_eq!(
                rows,
                vec![json!({"id": 0}), json!({"id": 1})],
                "bucket {bucket}"
            );
        }
    }

    // A request b sent to a for a bucket a believes is b's is not sent back: 503, retry.
    let r = plain
        .get(format!("{}?offset=0&redirected_by=b", records(&a, remote)))
        .header("accept", NDJSON)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "bucket_unavailable", "{body}");

    // b dies: once its lease is gone, its buckets answer 503 with Retry-After, not a redirect
    // to a node that is not there.
    b.abort();
    tokio::time::sleep(Duration::from_millis(2600)).await;
    // A renewal of a's lease, or any call, makes the memory store notice the expiry; the
    // view then hears of it.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let r = plain
        .get(format!("{}?offset=0", records(&a, remote)))
        .header("accept", NDJSON)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers().contains_key(RETRY_AFTER));
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "bucket_unavailable", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("node b"),
        "{body}"
    );
    a.shutdown().await.unwrap();
}
