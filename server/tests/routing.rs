//! Routing between in-process nodes on one memory store (which has leases, so the nodes form a
//! cluster): a table's buckets are spread over the live nodes when it is created, a request for a
//! bucket another node owns is answered 307 to the same path and query there, a request the
//! owner itself sent back is never redirected again, and a bucket whose owner is gone is 503
//! until a survivor has recovered it and serves it.

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
    start_with(node_id, store, kv, |_| {}).await
}

async fn start_with(
    node_id: &str,
    store: &Arc<dyn ObjectStorage>,
    kv: &Arc<dyn MetaKv>,
    tweak: impl FnOnce(&mut Settings),
) -> Node {
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
    tweak(&mut settings);
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

/// `None` when `via` serves the bucket itself; else the `redirected_by` of its 307 (`via`'s own
/// node id).
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

    // b dies. Until its lease is gone and it is recovered, its buckets answer 503 with
    // Retry-After (never a redirect to a node that is not there); then the leader (a) assigns
    // them to a, a recovers b's WAL, and a serves them with every row b acknowledged.
    b.abort();
    let died = std::time::Instant::now();
    let mut unavailable = 0;
    let rows = loop {
        assert!(
            died.elapsed() < Duration::from_secs(20),
            "b's bucket never opened on a"
        );
        let r = plain
            .get(format!("{}?offset=0", records(&a, remote)))
            .header("accept", NDJSON)
            .send()
            .await
            .unwrap();
        match r.status() {
            StatusCode::OK => break r.text().await.unwrap(),
            StatusCode::SERVICE_UNAVAILABLE => {
                assert!(r.headers().contains_key(RETRY_AFTER));
                let body: Value = r.json().await.unwrap();
                assert_eq!(body["error"], "bucket_unavailable", "{body}");
                unavailable += 1;
            }
            StatusCode::TEMPORARY_REDIRECT => {
                // a's view has not heard of b's death yet: b's lease has a TTL to run.
                assert!(died.elapsed() < Duration::from_secs(3), "still redirected");
            }
            other => panic!("{other}: {}", r.text().await.unwrap()),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let rows: Vec<Value> = rows
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows, vec![json!({"id": 0}), json!({"id": 1})]);
    tracing::debug!(unavailable, "503s seen while b's bucket moved");
    // a says so in its metrics: it leads, it recovered b, it moved b's buckets.
    let metrics = follow
        .get(format!("{}/metrics", a.url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {metrics}"))
    };
    assert_eq!(value("mink_cluster_leader"), 1.0);
    assert_eq!(value("mink_cluster_recoveries_total"), 1.0);
    assert!(value("mink_cluster_bucket_moves_total") >= 2.0);
    // Every bucket is a's now, and appends go on at the next offset.
    for bucket in 0..BUCKETS {
        assert_eq!(owner_of(&plain, &a, bucket).await, None, "bucket {bucket}");
        let r: Value = follow
            .post(records(&a, bucket))
            .header("content-type", NDJSON)
            .body("{\"id\":2}\n")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["base_offset"], 2, "bucket {bucket}: {r}");
    }
    a.shutdown().await.unwrap();
}

/// Appends `id` to `bucket` through `node`, following redirects and retrying 503s (a bucket on
/// the move), as a client does; returns the append's JSON answer.
async fn append_retrying(
    http: &reqwest::Client,
    node: &Node,
    bucket: u32,
    writer: (u64, i32),
    id: i64,
) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let r = http
            .post(records(node, bucket))
            .header("content-type", NDJSON)
            .header("mink-writer-id", writer.0.to_string())
            .header("mink-sequence", writer.1.to_string())
            .body(format!("{{\"id\":{id}}}\n"))
            .send()
            .await
            .unwrap();
        match r.status() {
            StatusCode::OK => return r.json().await.unwrap(),
            StatusCode::SERVICE_UNAVAILABLE if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("append {id}: {other}: {}", r.text().await.unwrap()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_moves_a_bucket_with_its_offsets_and_writer_windows() {
    let store: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    let a = start("a", &store, &kv).await;
    let b = start("b", &store, &kv).await;
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
    assert_eq!(created.status(), StatusCode::CREATED);
    let mut on_a = None;
    for bucket in 0..BUCKETS {
        if owner_of(&plain, &a, bucket).await.is_none() {
            on_a = Some(bucket);
            break;
        }
    }
    let bucket = on_a.expect("a owns a bucket");
    let writer: Value = follow
        .post(format!("{}/v1/writers", a.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let writer = writer["writer_id"].as_u64().unwrap();
    for seq in 0..3 {
        let r = append_retrying(&follow, &a, bucket, (writer, seq), i64::from(seq)).await;
        assert_eq!(r["base_offset"], i64::from(seq));
    }

    // Move it to b (any node takes the request; here its owner).
    let moved = follow
        .post(format!("{}/v1/tables/t/buckets/{bucket}/transfer", a.url()))
        .json(&json!({"to": "b"}))
        .send()
        .await
        .unwrap();
    assert_eq!(moved.status(), StatusCode::ACCEPTED);
    let moved: Value = moved.json().await.unwrap();
    assert_eq!(
        (moved["from"].as_str(), moved["to"].as_str()),
        (Some("a"), Some("b"))
    );

    // The writer goes on through a: redirected to b, which opened the log where a closed it.
    let r = append_retrying(&follow, &a, bucket, (writer, 3), 3).await;
    assert_eq!(r["base_offset"], 3, "offsets continue: {r}");
    // Its retry of the last batch is a duplicate on b: b has a's writer windows.
    let again = append_retrying(&follow, &b, bucket, (writer, 3), 3).await;
    assert_eq!(again["duplicate"], true, "{again}");
    // a redirects it now; b serves it.
    assert_eq!(owner_of(&plain, &a, bucket).await.as_deref(), Some("a"));
    assert_eq!(owner_of(&plain, &b, bucket).await, None);
    // Read it all from b, response after response (one may stop where a's committed data ends).
    let mut rows: Vec<Value> = Vec::new();
    loop {
        let r = follow
            .get(format!("{}?offset={}", records(&b, bucket), rows.len()))
            .header("accept", NDJSON)
            .send()
            .await
            .unwrap();
        let high: usize = r.headers()["mink-high-watermark"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let text = r.text().await.unwrap();
        rows.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
        if rows.len() >= high {
            break;
        }
    }
    assert_eq!(
        rows,
        (0..4).map(|id| json!({ "id": id })).collect::<Vec<_>>(),
        "every row once, at its offset"
    );
    // The CLI moves it back; a's next append serves it again.
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_mink"))
        .args([
            "transfer",
            "--url",
            &b.url(),
            "--table",
            "t",
            "--to",
            "a",
            "--bucket",
        ])
        .arg(bucket.to_string())
        .output()
        .unwrap();
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    let answer: Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(
        (answer["from"].as_str(), answer["to"].as_str()),
        (Some("b"), Some("a"))
    );
    let r = append_retrying(&follow, &b, bucket, (writer, 4), 4).await;
    assert_eq!(r["base_offset"], 4, "{r}");
    assert_eq!(owner_of(&plain, &a, bucket).await, None);
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_mink"))
        .args([
            "transfer",
            "--url",
            &b.url(),
            "--table",
            "t",
            "--to",
            "nobody",
            "--bucket",
        ])
        .arg(bucket.to_string())
        .output()
        .unwrap();
    assert!(!cli.status.success());
    assert!(
        String::from_utf8_lossy(&cli.stderr).contains("no live node"),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    // A transfer to a node that is not there is refused.
    let refused = follow
        .post(format!("{}/v1/tables/t/buckets/{bucket}/transfer", a.url()))
        .json(&json!({"to": "nobody"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_hands_every_bucket_to_the_other_nodes() {
    let store: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    let a = start("a", &store, &kv).await;
    let b = start("b", &store, &kv).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let follow = reqwest::Client::new();
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let created = follow
        .post(format!("{}/v1/tables", b.url()))
        .json(&json!({"name": "t", "buckets": BUCKETS,
                      "schema": {"fields": [{"name": "id", "type": "int64"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    // One idempotent writer per bucket, rows 0 and 1 each.
    let mut writers = Vec::new();
    for bucket in 0..BUCKETS {
        let w: Value = follow
            .post(format!("{}/v1/writers", b.url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = w["writer_id"].as_u64().unwrap();
        writers.push(id);
        for seq in 0..2 {
            let r = append_retrying(&follow, &b, bucket, (id, seq), i64::from(seq)).await;
            assert_eq!(r["base_offset"], i64::from(seq));
        }
    }
    let on_a: Vec<u32> = {
        let mut on_a = Vec::new();
        for bucket in 0..BUCKETS {
            if owner_of(&plain, &a, bucket).await.is_none() {
                on_a.push(bucket);
            }
        }
        on_a
    };
    assert_eq!(on_a.len(), 2, "{on_a:?}");

    // a stops gracefully: the leader (b, once a resigns) takes a's buckets, a releases them.
    // b's view during the stop: a shows up draining while it is still registered.
    let watching = {
        let url = format!("{}/v1/cluster", b.url());
        let http = plain.clone();
        tokio::spawn(async move {
            let mut saw_draining = false;
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while std::time::Instant::now() < deadline {
                let view: Value = http.get(&url).send().await.unwrap().json().await.unwrap();
                let a = view["nodes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|n| n["node_id"] == "a")
                    .cloned();
                match a {
                    Some(a) => saw_draining |= a["draining"] == true,
                    None => break,
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            saw_draining
        })
    };
    let stopping = std::time::Instant::now();
    a.shutdown().await.unwrap();
    let took = stopping.elapsed();
    assert!(took < Duration::from_secs(10), "the drain took {took:?}");
    assert!(watching.await.unwrap(), "a never showed up draining");
    for bucket in 0..BUCKETS {
        assert_eq!(owner_of(&plain, &b, bucket).await, None, "bucket {bucket}");
        let id = writers[bucket as usize];
        // A retry of the last row is a duplicate on b; the next row continues the offsets.
        let again = append_retrying(&follow, &b, bucket, (id, 1), 1).await;
        assert_eq!(again["duplicate"], true, "bucket {bucket}: {again}");
        assert_eq!(again["base_offset"], 1, "bucket {bucket}: {again}");
        let next = append_retrying(&follow, &b, bucket, (id, 2), 2).await;
        assert_eq!(next["base_offset"], 2, "bucket {bucket}: {next}");
    }
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_dropped_through_any_node_is_gone_from_every_node() {
    let store: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    let start_fast = |id: &'static str| {
        let (store, kv) = (Arc::clone(&store), Arc::clone(&kv));
        async move {
            let mut settings = Settings {
                node_id: id.to_owned(),
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
            settings.node.drop_cleanup_interval = Duration::from_millis(200);
            Node::builder()
                .settings(settings)
                .object_store(store)
                .metadata(kv)
                .start()
                .await
                .unwrap()
        }
    };
    let a = start_fast("a").await;
    let b = start_fast("b").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let follow = reqwest::Client::new();
    let create = || async {
        let r = follow
            .post(format!("{}/v1/tables", a.url()))
            .json(&json!({"name": "t", "buckets": BUCKETS,
                          "schema": {"fields": [{"name": "id", "type": "int64"}]}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    };
    create().await;
    // Every bucket open on its owner.
    for bucket in 0..BUCKETS {
        let r = follow
            .post(records(&a, bucket))
            .header("content-type", NDJSON)
            .body("{\"id\":1}\n")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "bucket {bucket}");
    }
    // Dropped through b, which owns only some of the buckets.
    let dropped = follow
        .delete(format!("{}/v1/tables/t", b.url()))
        .send()
        .await
        .unwrap();
    assert!(dropped.status().is_success(), "{}", dropped.status());
    // Created again under the same name: new, empty buckets, through either node.
    create().await;
    for bucket in 0..BUCKETS {
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
            assert_eq!(text, "", "bucket {bucket} is new");
        }
    }
    // The drop is finished on every node: no tombstone is left.
    let meta = mink_metadata::Metadata::open(Arc::clone(&kv), Default::default())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !meta.list_dropped_tables().await.unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the dropped table's logs were never all destroyed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// In a cluster only the leader writes the periodic metadata snapshots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_metadata_snapshots() {
    let store: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    let often = |s: &mut Settings| s.metadata.snapshot_interval = Duration::from_millis(100);
    let a = start_with("a", &store, &kv, often).await;
    let b = start_with("b", &store, &kv, often).await;
    let http = reqwest::Client::new();
    let metric = |node: &Node, name: &'static str| {
        let http = http.clone();
        let url = format!("{}/metrics", node.url());
        async move {
            let text = http.get(url).send().await.unwrap().text().await.unwrap();
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("{name} in {text}"))
        }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let leaders = (
            metric(&a, "mink_cluster_leader").await,
            metric(&b, "mink_cluster_leader").await,
        );
        let written = (
            metric(&a, "mink_metadata_snapshots_total").await,
            metric(&b, "mink_metadata_snapshots_total").await,
        );
        if leaders.0 + leaders.1 == 1.0 && written.0 + written.1 >= 3.0 {
            let (leader, other) = if leaders.0 == 1.0 {
                written
            } else {
                (written.1, written.0)
            };
            assert!(leader >= 3.0, "{written:?}");
            assert_eq!(
                other, 0.0,
                "the node that does not lead writes none: {written:?}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "leaders {leaders:?}, snapshots {written:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listed = store.list("meta-snapshots/").await.unwrap();
    assert!(!listed.is_empty() && listed.len() <= 24, "{}", listed.len());
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
