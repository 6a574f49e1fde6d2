//! Cluster membership of in-process nodes on one memory store (which has leases): every start is a
//! new incarnation with its own WAL, registered under its lease; a restart under the same node id
//! waits for the earlier life's lease and recovers its WAL; a lost lease stops acknowledgements.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mink_metadata::{MemoryKv, MetaKv, Metadata, MetadataOptions};
use mink_s3stream::storage::{ObjectStorage, ObjectStoreBackend};
use mink_server::settings::Settings;
use mink_server::{Node, NodeError};
use reqwest::StatusCode;
use serde_json::{Value, json};

const NDJSON: &str = "application/x-ndjson";

fn settings(node_id: &str) -> Settings {
    let mut settings = Settings {
        node_id: node_id.to_owned(),
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
    settings.cluster.lease_ttl = Duration::from_secs(2);
    settings.cluster.lease_margin = Duration::from_millis(300);
    settings
}

async fn start(
    node_id: &str,
    store: &Arc<dyn ObjectStorage>,
    kv: &Arc<dyn MetaKv>,
) -> Result<Node, NodeError> {
    Node::builder()
        .settings(settings(node_id))
        .object_store(Arc::clone(store))
        .metadata(Arc::clone(kv))
        .start()
        .await
}

async fn append(http: &reqwest::Client, node: &Node, row: Value) -> reqwest::Response {
    http.post(format!("{}/v1/tables/t/buckets/0/records", node.url()))
        .header("content-type", NDJSON)
        .body(format!("{row}\n"))
        .send()
        .await
        .unwrap()
}

async fn rows(http: &reqwest::Client, node: &Node) -> Vec<Value> {
    let text = http
        .get(format!(
            "{}/v1/tables/t/buckets/0/records?offset=0",
            node.url()
        ))
        .header("accept", NDJSON)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_start_is_a_new_life_registered_under_its_lease() {
    let store: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    let meta = Metadata::open(Arc::clone(&kv), MetadataOptions::default())
        .await
        .unwrap();
    let http = reqwest::Client::new();

    let a = start("a", &store, &kv).await.unwrap();
    let b = start("b", &store, &kv).await.unwrap();
    let members: Vec<(String, String)> = meta
        .live_nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| (n.member(), n.http_url))
        .collect();
    assert_eq!(
        members,
        vec![("a~1".to_owned(), a.url()), ("b~1".to_owned(), b.url())]
    );
    let a_record = a.membership().unwrap().record().clone();
    assert!(a_record.lease.is_some());
    assert_ne!(a_record.broker_id, b.membership().unwrap().broker_id());

    let created = http
        .post(format!("{}/v1/tables", a.url()))
        .json(&json!({"name": "t", "schema": {"fields": [{"name": "id", "type": "int64"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    for id in 0..3 {
        assert_eq!(
            append(&http, &a, json!({ "id": id })).await.status(),
            StatusCode::OK
        );
    }

    // a crashes: its registration stays until its lease expires, and the next life of a waits
    // for that before it writes under its own new prefix.
    a.abort();
    let restarted = Instant::now();
    let a2 = start("a", &store, &kv).await.unwrap();
    let waited = restarted.elapsed();
    assert!(
        waited >= Duration::from_millis(1500),
        "the new life started {waited:?} after the crash, before the old lease could expire"
    );
    assert_eq!(a2.membership().unwrap().member(), "a~2");
    // a~1 is recovered once: by b (which saw it die; its leader moved a's bucket to b) or by a's
    // next life at its start, whichever claimed it first.
    assert!(meta.recovered("a~1").await.unwrap());
    assert!(a2.membership().unwrap().earlier().len() <= 1);
    assert_eq!(
        a2.membership().unwrap().broker_id(),
        a_record.broker_id,
        "the broker id is the node id's"
    );
    assert_eq!(
        rows(&http, &a2).await,
        vec![json!({"id": 0}), json!({"id": 1}), json!({"id": 2})]
    );
    assert_eq!(
        append(&http, &a2, json!({"id": 3})).await.status(),
        StatusCode::OK
    );
    let wal: Vec<String> = store
        .list("wal/")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert!(
        wal.iter()
            .all(|k| k.starts_with("wal/a~2/") || k.starts_with("wal/b~1/")),
        "the first life's WAL objects were recovered and deleted: {wal:?}"
    );

    // A clean stop removes the registration at once.
    a2.shutdown().await.unwrap();
    let left: Vec<String> = meta
        .live_nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.member())
        .collect();
    assert_eq!(left, vec!["b~1"]);
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_lease_is_lost_acknowledges_nothing_more() {
    let store: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    let http = reqwest::Client::new();
    let node = start("a", &store, &kv).await.unwrap();
    let created = http
        .post(format!("{}/v1/tables", node.url()))
        .json(&json!({"name": "t", "schema": {"fields": [{"name": "id", "type": "int64"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    assert_eq!(
        append(&http, &node, json!({"id": 1})).await.status(),
        StatusCode::OK
    );
    // Someone revokes the lease (as etcd expires it when the node is cut off).
    let lease = node.membership().unwrap().record().lease.unwrap();
    kv.revoke_lease(lease).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), node.failed())
        .await
        .expect("the node notices the lost lease");
    let health = http
        .get(format!("{}/healthz", node.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = health.json().await.unwrap();
    assert!(body["reason"].as_str().unwrap().contains("lease"), "{body}");
    let refused = append(&http, &node, json!({"id": 2})).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    node.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_on_a_wildcard_address_needs_an_advertised_one() {
    let store: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    let mut wildcard = settings("w");
    wildcard.listen = "0.0.0.0:0".parse().unwrap();
    let refused = Node::builder()
        .settings(wildcard.clone())
        .object_store(Arc::clone(&store))
        .metadata(Arc::clone(&kv))
        .start()
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("cluster.advertise_http"),
        "{refused}"
    );
    // It left: the next start under the same node id does not wait for a lease.
    wildcard.cluster.advertise_http = Some("http://127.0.0.1:9".to_owned());
    let started = Instant::now();
    let node = Node::builder()
        .settings(wildcard)
        .object_store(store)
        .metadata(kv)
        .start()
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(
        node.membership().unwrap().record().http_url,
        "http://127.0.0.1:9"
    );
    node.shutdown().await.unwrap();
}
