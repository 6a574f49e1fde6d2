//! Flight in a cluster of two in-process nodes on one memory store (which has leases): FlightInfo
//! names each bucket's owner, a DoGet at the wrong node says where the bucket is, and a live
//! DoGet of a bucket that moves ends with where to resume, from which the new owner goes on with
//! nothing lost or repeated.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch};
use arrow_flight::{FlightClient, FlightData, FlightDescriptor, Ticket};
use arrow_schema::Schema;
use mink_metadata::{MemoryKv, MetaKv};
use mink_s3stream::storage::{ObjectStorage, ObjectStoreBackend};
use mink_server::Node;
use mink_server::settings::Settings;
use serde_json::{Value, json};
use tonic::Code;
use tonic::transport::Channel;

const BUCKETS: u32 = 4;

async fn start(node_id: &str, store: &Arc<dyn ObjectStorage>, kv: &Arc<dyn MetaKv>) -> Node {
    let mut settings = Settings {
        node_id: node_id.to_owned(),
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Settings::default()
    };
    settings.flight.listen = Some("127.0.0.1:0".parse().unwrap());
    settings.kafka.listen = None;
    settings.flight.heartbeat_interval = Duration::from_millis(200);
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

fn flight_url(node: &Node) -> String {
    format!("grpc://{}", node.flight_addr().unwrap())
}

async fn client(node: &Node) -> FlightClient {
    let url = format!("http://{}", node.flight_addr().unwrap());
    FlightClient::new(Channel::from_shared(url).unwrap().connect().await.unwrap())
}

/// Whether `node` serves `bucket` itself (its HTTP API answers rather than redirects).
async fn serves(node: &Node, bucket: u32) -> bool {
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = plain
        .get(format!(
            "{}/v1/tables/t/buckets/{bucket}/offsets",
            node.url()
        ))
        .send()
        .await
        .unwrap();
    r.status() == 200
}

/// Appends `id` over HTTP (following redirects), retrying while the bucket moves.
async fn append(via: &Node, bucket: u32, id: i64) -> Value {
    let http = reqwest::Client::new();
    for _ in 0..200 {
        let r = http
            .post(format!(
                "{}/v1/tables/t/buckets/{bucket}/records",
                via.url()
            ))
            .header("content-type", "application/x-ndjson")
            .body(format!("{{\"id\":{id}}}\n"))
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            return r.json().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("append of {id} to bucket {bucket} kept failing");
}

/// The ids of the batches of a DoGet's messages, until the stream ends; and how it ended.
async fn follow(
    stream: &mut tonic::Streaming<FlightData>,
    until_ids: usize,
) -> (Vec<i64>, Option<tonic::Status>) {
    let mut schema: Option<Arc<Schema>> = None;
    let mut ids = Vec::new();
    loop {
        let message = match tokio::time::timeout(Duration::from_secs(20), stream.message()).await {
            Ok(Ok(Some(message))) => message,
            Ok(Ok(None)) => return (ids, None),
            Ok(Err(status)) => return (ids, Some(status)),
            Err(_) => panic!("the stream stalled after {ids:?}"),
        };
        if message.data_header.is_empty() {
            continue;
        }
        let Some(s) = &schema else {
            schema = Some(Arc::new(Schema::try_from(&message).unwrap()));
            continue;
        };
        let batch: RecordBatch = arrow_flight::utils::flight_data_to_arrow_batch(
            &message,
            s.clone(),
            &Default::default(),
        )
        .unwrap();
        let column = batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        ids.extend(column.values().iter().copied());
        if ids.len() == until_ids {
            return (ids, None);
        }
    }
}

/// A live DoGet of `bucket` from `offset`. A bucket being transferred here answers UNAVAILABLE
/// (`bucket_unavailable`) until this node has opened it, which a client retries: so does this,
/// for at most 10 s.
async fn live(client: &mut FlightClient, bucket: u32, offset: u64) -> tonic::Streaming<FlightData> {
    let ticket = json!({"v": 1, "table": "t", "bucket": bucket, "offset": offset, "live": true});
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match client
            .inner_mut()
            .do_get(Ticket::new(ticket.to_string()))
            .await
        {
            Ok(stream) => return stream.into_inner(),
            Err(status)
                if status.code() == Code::Unavailable
                    && status
                        .metadata()
                        .get("mink-error-kind")
                        .is_some_and(|k| k == "bucket_unavailable")
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(status) => panic!("live DoGet of bucket {bucket}: {status:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_name_owners_and_a_moved_live_read_resumes_at_the_new_owner() {
    let store: Arc<dyn ObjectStorage> = Arc::new(ObjectStoreBackend::memory());
    let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    let a = start("a", &store, &kv).await;
    let b = start("b", &store, &kv).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let created = reqwest::Client::new()
        .post(format!("{}/v1/tables", a.url()))
        .json(&json!({"name": "t", "buckets": BUCKETS,
                      "schema": {"fields": [{"name": "id", "type": "int64"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let mut on_a = Vec::new();
    for bucket in 0..BUCKETS {
        on_a.push(serves(&a, bucket).await);
    }
    assert!(
        on_a.contains(&true) && on_a.contains(&false),
        "spread: {on_a:?}"
    );

    // FlightInfo from a names the owner of every bucket; a's own carry their offsets.
    let mut ca = client(&a).await;
    let info = ca
        .get_flight_info(FlightDescriptor::new_path(vec!["t".into()]))
        .await
        .unwrap();
    assert_eq!(info.endpoint.len(), BUCKETS as usize);
    for (bucket, endpoint) in info.endpoint.iter().enumerate() {
        let owner = if on_a[bucket] { &a } else { &b };
        assert_eq!(
            endpoint.location[0].uri,
            flight_url(owner),
            "bucket {bucket}"
        );
        let ticket: Value =
            serde_json::from_slice(&endpoint.ticket.as_ref().unwrap().ticket).unwrap();
        assert_eq!(ticket["until"].is_u64(), on_a[bucket], "{ticket}");
    }
    assert_eq!(info.total_records, -1, "b's buckets are not counted here");

    // A DoGet at a for b's bucket: UNAVAILABLE, with b's address.
    let on_b = on_a.iter().position(|local| !local).unwrap() as u32;
    let elsewhere = ca
        .inner_mut()
        .do_get(Ticket::new(
            json!({"v": 1, "table": "t", "bucket": on_b}).to_string(),
        ))
        .await
        .unwrap_err();
    assert_eq!(elsewhere.code(), Code::Unavailable);
    assert_eq!(
        elsewhere.metadata().get("mink-location").unwrap(),
        flight_url(&b).as_str()
    );

    // A live read of a's bucket; two rows; the bucket moves to b; the read ends saying where.
    let bucket = on_a.iter().position(|local| *local).unwrap() as u32;
    let mut reading = live(&mut ca, bucket, 0).await;
    append(&a, bucket, 1).await;
    append(&a, bucket, 2).await;
    let (ids, end) = follow(&mut reading, 2).await;
    assert_eq!((ids, end.is_none()), (vec![1, 2], true));
    let moved = reqwest::Client::new()
        .post(format!("{}/v1/tables/t/buckets/{bucket}/transfer", a.url()))
        .json(&json!({"to": "b"}))
        .send()
        .await
        .unwrap();
    assert_eq!(moved.status(), 202);
    let (more, end) = follow(&mut reading, usize::MAX).await;
    assert!(more.is_empty(), "{more:?}");
    let end = end.expect("the moved read ends with a status");
    assert_eq!(end.code(), Code::Unavailable, "{end:?}");
    assert_eq!(end.metadata().get("mink-next-offset").unwrap(), "2");
    let location = end
        .metadata()
        .get("mink-location")
        .unwrap()
        .to_str()
        .unwrap();
    assert_eq!(location, flight_url(&b));

    // Resumed at b from the offset it gave: the next row, nothing repeated.
    let mut cb = client(&b).await;
    let mut resumed = live(&mut cb, bucket, 2).await;
    append(&a, bucket, 3).await;
    let (ids, _) = follow(&mut resumed, 1).await;
    assert_eq!(ids, [3]);
    drop((ca, cb, reading, resumed));
    b.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
}
