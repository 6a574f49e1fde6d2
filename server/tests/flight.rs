//! The Arrow Flight front end with the `arrow-flight` client: init_writer, idempotent DoPut with
//! retries and duplicates, DoGet of ranges with and without projection, a live DoGet receiving
//! a batch appended over HTTP, FlightInfo, actions, tokens, and bad input answered with a status.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, Int64Array, RecordBatch, StringArray};
use arrow_flight::error::FlightError;
use arrow_flight::{Action, FlightClient, FlightData, FlightDescriptor, PutResult, Ticket};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::{StreamExt, TryStreamExt};
use mink_metadata::MemoryKv;
use mink_s3stream::storage::{
    ObjectMeta, ObjectStorage, ObjectStoreBackend, PutResult as PutResult_, Result as StorageResult,
};
use mink_server::{Node, Settings};
use serde_json::{Value, json};
use tonic::Code;
use tonic::transport::Channel;

const TOKEN: &str = "flight-test-token-0123456789";
const READER: &str = "flight-test-reader-0123456789";

async fn start(tokens: bool) -> Node {
    start_with(tokens, |_| {}).await
}

async fn start_with(tokens: bool, change: impl FnOnce(&mut Settings)) -> Node {
    start_on(Arc::new(ObjectStoreBackend::memory()), tokens, change).await
}

async fn start_on(
    store: Arc<dyn ObjectStorage>,
    tokens: bool,
    change: impl FnOnce(&mut Settings),
) -> Node {
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Settings::default()
    };
    settings.flight.listen = Some("127.0.0.1:0".parse().unwrap());
    settings.kafka.listen = None;
    settings.flight.heartbeat_interval = Duration::from_millis(200);
    change(&mut settings);
    if tokens {
        settings = Settings::from_toml(&format!(
            "{}\n[[auth.tokens]]\ntoken = \"{TOKEN}\"\nscope = \"write\"\n[[auth.tokens]]\ntoken = \"{READER}\"\nscope = \"read\"\n",
            strip_auth(&settings.to_toml())
        ))
        .unwrap();
    }
    Node::builder()
        .settings(settings)
        .object_store(store)
        .metadata(Arc::new(MemoryKv::new()))
        .start()
        .await
        .unwrap()
}

/// The settings' TOML without its `[auth]` section (replaced by the test's tokens).
fn strip_auth(toml: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in toml.lines() {
        if line.starts_with('[') {
            skipping = line.starts_with("[auth");
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

async fn client(node: &Node, token: Option<&str>) -> FlightClient {
    let url = format!("http://{}", node.flight_addr().unwrap());
    let channel = Channel::from_shared(url).unwrap().connect().await.unwrap();
    let mut client = FlightClient::new(channel);
    if let Some(token) = token {
        client
            .add_header("authorization", &format!("Bearer {token}"))
            .unwrap();
    }
    client
}

async fn create_table(node: &Node, token: Option<&str>) {
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/tables", node.url()))
        .json(&json!({"name": "t", "buckets": 2, "schema": {"fields": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "msg", "type": "utf8"}
        ]}}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    assert_eq!(request.send().await.unwrap().status(), 201);
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, true),
    ]))
}

fn rows(ids: std::ops::Range<i64>) -> RecordBatch {
    let msgs: Vec<String> = ids.clone().map(|i| format!("m{i}")).collect();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(ids)),
            Arc::new(StringArray::from(msgs)),
        ],
    )
    .unwrap()
}

/// The DoPut messages of `batches` into bucket 0, each with `{"writer_id", "sequence"}` when
/// a writer is given.
fn put_stream(batches: &[RecordBatch], writer: Option<(u64, i32)>) -> Vec<FlightData> {
    let mut data = arrow_flight::utils::batches_to_flight_data(&schema(), batches).unwrap();
    data[0].flight_descriptor = Some(FlightDescriptor::new_path(vec!["t".into(), "0".into()]));
    if let Some((writer_id, first)) = writer {
        for (i, message) in data.iter_mut().skip(1).enumerate() {
            let meta = json!({"writer_id": writer_id, "sequence": first + i as i32});
            message.app_metadata = meta.to_string().into();
        }
    }
    data
}

async fn put(client: &mut FlightClient, data: Vec<FlightData>) -> Result<Vec<Value>, FlightError> {
    let results: Vec<PutResult> = client
        .do_put(futures::stream::iter(data.into_iter().map(Ok)))
        .await?
        .try_collect()
        .await?;
    Ok(results
        .iter()
        .map(|r| serde_json::from_slice(&r.app_metadata).unwrap())
        .collect())
}

/// Each result's `(base_offset, next_offset)`.
fn offsets(results: &[Value]) -> Vec<(u64, u64)> {
    let offset = |r: &Value, name: &str| r[name].as_u64().unwrap();
    results
        .iter()
        .map(|r| (offset(r, "base_offset"), offset(r, "next_offset")))
        .collect()
}

fn code(error: &FlightError) -> Code {
    match error {
        FlightError::Tonic(status) => status.code(),
        other => panic!("not a status: {other:?}"),
    }
}

/// The raw messages of a DoGet.
async fn raw_get(client: &mut FlightClient, ticket: Value) -> tonic::Streaming<FlightData> {
    // The inner client does not send the headers the outer one holds.
    let mut request = tonic::Request::new(Ticket::new(ticket.to_string()));
    *request.metadata_mut() = client.metadata().clone();
    client
        .inner_mut()
        .do_get(request)
        .await
        .unwrap()
        .into_inner()
}

/// One message of a DoGet: the schema, a batch with its metadata, or metadata alone (an empty
/// `data_header`, as Arrow C++ writes such messages; arrow-rs's decoder expects a header, so
/// they are told apart here).
enum Message {
    Schema(SchemaRef),
    Batch(RecordBatch, Value),
    Metadata(Value),
}

fn decode(data: FlightData, schema: &mut Option<SchemaRef>) -> Message {
    let meta = || serde_json::from_slice::<Value>(&data.app_metadata).unwrap();
    if data.data_header.is_empty() {
        return Message::Metadata(meta());
    }
    match schema {
        None => {
            let decoded = Arc::new(Schema::try_from(&data).unwrap());
            *schema = Some(decoded.clone());
            Message::Schema(decoded)
        }
        Some(schema) => {
            let batch = arrow_flight::utils::flight_data_to_arrow_batch(
                &data,
                schema.clone(),
                &Default::default(),
            )
            .unwrap();
            Message::Batch(batch, meta())
        }
    }
}

/// Every batch (with its metadata) and every metadata-only message of a DoGet, in order.
async fn get(client: &mut FlightClient, ticket: Value) -> Vec<(Option<RecordBatch>, Value)> {
    let mut stream = raw_get(client, ticket).await;
    let mut schema = None;
    let mut out = Vec::new();
    while let Some(data) = stream.message().await.unwrap() {
        match decode(data, &mut schema) {
            Message::Schema(_) => {}
            Message::Batch(batch, meta) => out.push((Some(batch), meta)),
            Message::Metadata(meta) => out.push((None, meta)),
        }
    }
    out
}

fn ids(batches: &[(Option<RecordBatch>, Value)]) -> Vec<i64> {
    batches
        .iter()
        .filter_map(|(b, _)| b.as_ref())
        .flat_map(|b| {
            let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            ids.values().to_vec()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_puts_retries_and_duplicates_then_reads_of_ranges_and_projections() {
    let node = start(false).await;
    create_table(&node, None).await;
    let mut c = client(&node, None).await;

    let answer = c
        .do_action(Action::new("init_writer", ""))
        .await
        .unwrap()
        .next()
        .await
        .unwrap()
        .unwrap();
    let writer = serde_json::from_slice::<Value>(&answer).unwrap()["writer_id"]
        .as_u64()
        .unwrap();

    let batches = [rows(0..3), rows(3..5), rows(5..9)];
    let results = put(&mut c, put_stream(&batches, Some((writer, 0))))
        .await
        .unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(offsets(&results), [(0, 3), (3, 5), (5, 9)]);
    assert!(
        results
            .iter()
            .all(|r| r["duplicate"] == false && r["schema_id"] == 1)
    );
    assert_eq!(results[2]["sequence"], 2);

    // A retry of the last two and one new batch: the retries are duplicates at their offsets.
    let retry = [rows(3..5), rows(5..9), rows(9..10)];
    let results = put(&mut c, put_stream(&retry, Some((writer, 1))))
        .await
        .unwrap();
    let seen: Vec<(bool, u64)> = results
        .iter()
        .map(|r| {
            (
                r["duplicate"].as_bool().unwrap(),
                r["base_offset"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, [(true, 3), (true, 5), (false, 9)]);

    // A gap in the sequence: FAILED_PRECONDITION saying which sequence comes next.
    let gap = put(&mut c, put_stream(&[rows(10..11)], Some((writer, 7))))
        .await
        .unwrap_err();
    assert_eq!(code(&gap), Code::FailedPrecondition);
    let FlightError::Tonic(status) = &gap else {
        unreachable!()
    };
    assert_eq!(
        status.metadata().get("mink-expected-sequence").unwrap(),
        "4"
    );

    // Without a writer, batches append as they come.
    let plain = put(&mut c, put_stream(&[rows(10..12)], None))
        .await
        .unwrap();
    assert_eq!(plain[0]["sequence"], Value::Null);
    assert_eq!(plain[0]["next_offset"], 12);

    // The whole bucket, a range cut inside batches, and one column.
    let all = get(&mut c, json!({"v": 1, "table": "t", "bucket": 0})).await;
    assert_eq!(ids(&all), (0..12).collect::<Vec<_>>());
    assert_eq!(all[0].1, json!({"base_offset": 0, "next_offset": 3}));
    let cut = get(
        &mut c,
        json!({"v": 1, "table": "t", "bucket": 0, "offset": 4, "until": 7}),
    )
    .await;
    assert_eq!(ids(&cut), [4, 5, 6]);
    assert_eq!(
        cut.last().unwrap().1,
        json!({"base_offset": 5, "next_offset": 7})
    );
    let projected = get(
        &mut c,
        json!({"v": 1, "table": "t", "bucket": 0, "offset": 3, "columns": ["msg"]}),
    )
    .await;
    let first = projected[0].0.as_ref().unwrap();
    assert_eq!(first.num_columns(), 1);
    assert_eq!(first.schema().field(0).name(), "msg");
    let msgs = first
        .column(0)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    assert_eq!(msgs.value(0), "m3");

    // The same rows over HTTP.
    let ndjson = reqwest::Client::new()
        .get(format!(
            "{}/v1/tables/t/buckets/0/records?offset=0",
            node.url()
        ))
        .header("accept", "application/x-ndjson")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(ndjson.lines().count(), 12);
    assert!(ndjson.starts_with("{\"id\":0,\"msg\":\"m0\"}"), "{ndjson}");
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_get_receives_a_batch_appended_over_http_and_heartbeats_meanwhile() {
    let node = start(false).await;
    create_table(&node, None).await;
    let mut c = client(&node, None).await;
    let ticket = json!({"v": 1, "table": "t", "bucket": 1, "live": true});
    let mut stream = raw_get(&mut c, ticket).await;
    let mut decoded = None;
    let mut next = async || decode(stream.message().await.unwrap().unwrap(), &mut decoded);
    // The schema comes at once, then heartbeats at the empty tail.
    let Message::Schema(sent) = next().await else {
        panic!("the schema first")
    };
    assert_eq!(sent, schema());
    let Message::Metadata(beat) = next().await else {
        panic!("a heartbeat")
    };
    assert_eq!(beat, json!({"high_watermark": 0, "next_offset": 0}));

    let appended = reqwest::Client::new()
        .post(format!("{}/v1/tables/t/buckets/1/records", node.url()))
        .header("content-type", "application/x-ndjson")
        .body("{\"id\":41,\"msg\":\"over http\"}\n{\"id\":42}\n")
        .send()
        .await
        .unwrap();
    assert_eq!(appended.status(), 200);
    let batch = loop {
        match tokio::time::timeout(Duration::from_secs(10), next())
            .await
            .unwrap()
        {
            Message::Batch(batch, meta) => {
                assert_eq!(meta, json!({"base_offset": 0, "next_offset": 2}));
                break batch;
            }
            Message::Metadata(_) => {}
            Message::Schema(_) => panic!("one schema per stream"),
        }
    };
    let ids = batch
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(ids.values().to_vec(), [41, 42]);
    assert!(batch.column(1).is_null(1));
    // Shutting the node down ends the live stream cleanly.
    drop(c);
    node.shutdown().await.unwrap();
    while let Some(message) = stream.message().await.transpose() {
        assert!(message.is_ok(), "{message:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flight_info_names_every_bucket_and_actions_give_offsets_and_trim() {
    let node = start(false).await;
    create_table(&node, None).await;
    let mut c = client(&node, None).await;
    put(&mut c, put_stream(&[rows(0..5)], None)).await.unwrap();

    let info = c
        .get_flight_info(FlightDescriptor::new_path(vec!["t".into()]))
        .await
        .unwrap();
    assert_eq!(info.endpoint.len(), 2);
    assert_eq!(info.total_records, 5);
    let url = format!("grpc://{}", node.flight_addr().unwrap());
    for (bucket, endpoint) in info.endpoint.iter().enumerate() {
        assert_eq!(endpoint.location[0].uri, url);
        let ticket: Value =
            serde_json::from_slice(&endpoint.ticket.as_ref().unwrap().ticket).unwrap();
        assert_eq!(ticket["bucket"], bucket);
        assert_eq!(ticket["until"], if bucket == 0 { 5 } else { 0 });
    }
    assert_eq!(
        info.clone().try_decode_schema().unwrap(),
        *schema(),
        "the table's schema"
    );
    let schema_only = c
        .get_schema(FlightDescriptor::new_path(vec!["t".into()]))
        .await
        .unwrap();
    assert_eq!(schema_only, *schema());
    let flights: Vec<_> = c
        .list_flights("")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(flights.len(), 1);
    let actions: Vec<_> = c.list_actions().await.unwrap().try_collect().await.unwrap();
    let names: Vec<&str> = actions.iter().map(|a| a.r#type.as_str()).collect();
    assert_eq!(names, ["init_writer", "offsets", "trim"]);

    let act = |kind: &str, body: Value| Action::new(kind.to_owned(), body.to_string());
    let mut answer = c
        .do_action(act("trim", json!({"table": "t", "bucket": 0, "offset": 2})))
        .await
        .unwrap();
    let trimmed: Value = serde_json::from_slice(&answer.next().await.unwrap().unwrap()).unwrap();
    assert_eq!(trimmed, json!({"log_start": 2, "high_watermark": 5}));
    let below = c
        .inner_mut()
        .do_get(Ticket::new(
            json!({"v": 1, "table": "t", "bucket": 0, "offset": 1}).to_string(),
        ))
        .await
        .unwrap_err();
    assert_eq!(below.code(), Code::OutOfRange);
    assert_eq!(below.metadata().get("mink-log-start").unwrap(), "2");
    let unknown = c.do_action(act("reboot", json!({}))).await.err().unwrap();
    assert_eq!(code(&unknown), Code::Unimplemented);
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_no_version_matches_and_hostile_messages_get_a_status_and_change_nothing() {
    let node = start(false).await;
    create_table(&node, None).await;
    let mut c = client(&node, None).await;
    let other = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int32, false),
        Field::new("msg", DataType::Utf8, true),
    ]));
    let mut data = arrow_flight::utils::batches_to_flight_data(&other, []).unwrap();
    data[0].flight_descriptor = Some(FlightDescriptor::new_path(vec!["t".into(), "0".into()]));
    let refused = put(&mut c, data).await.unwrap_err();
    assert_eq!(code(&refused), Code::InvalidArgument);
    assert!(
        refused
            .to_string()
            .contains("`id` is Int32 in the stream and Int64"),
        "{refused}"
    );

    // Garbage where the flatbuffer and the body go, a forged body, no descriptor, a whole table.
    let mut forged = put_stream(&[rows(0..3)], None);
    let body = forged[1].data_body.to_vec();
    forged[1].data_body = body[..body.len() / 2].to_vec().into();
    let mut junk = put_stream(&[rows(0..3)], None);
    junk[1].data_header = vec![0xff; 40].into();
    let mut bare = put_stream(&[rows(0..3)], None);
    bare[0].flight_descriptor = None;
    let mut table = put_stream(&[rows(0..3)], None);
    table[0].flight_descriptor = Some(FlightDescriptor::new_path(vec!["t".into()]));
    let mut cmd = put_stream(&[rows(0..3)], None);
    cmd[0].flight_descriptor = Some(FlightDescriptor::new_cmd(vec![0xfe; 100]));
    for data in [forged, junk, bare, table, cmd] {
        let e = put(&mut c, data).await.unwrap_err();
        assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    }
    for ticket in [
        &b"{"[..],
        b"{\"v\":1}",
        b"{\"v\":9,\"table\":\"t\",\"bucket\":0}",
        &[0u8; 200][..],
    ] {
        let e = c.do_get(Ticket::new(ticket.to_vec())).await.err().unwrap();
        assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    }
    let missing = c
        .do_get(Ticket::new(
            json!({"v": 1, "table": "nope", "bucket": 0}).to_string(),
        ))
        .await
        .err()
        .unwrap();
    assert_eq!(code(&missing), Code::NotFound);
    let column = c
        .do_get(Ticket::new(
            json!({"v": 1, "table": "t", "bucket": 0, "columns": ["x"]}).to_string(),
        ))
        .await
        .err()
        .unwrap();
    assert_eq!(code(&column), Code::InvalidArgument);
    let offsets = reqwest::get(format!("{}/v1/tables/t/buckets/0/offsets", node.url()))
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(offsets["high_watermark"], 0, "nothing was appended");
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_guard_every_call_and_a_handshake_turns_basic_credentials_into_a_bearer() {
    let node = start(true).await;
    create_table(&node, Some(TOKEN)).await;
    let mut anonymous = client(&node, None).await;
    let e = anonymous.list_actions().await.err().unwrap();
    assert_eq!(code(&e), Code::Unauthenticated);
    assert!(e.to_string().contains("authorization: Bearer"), "{e}");
    let mut wrong = client(&node, Some("not-the-token-at-all-xx")).await;
    assert_eq!(
        code(&wrong.list_actions().await.err().unwrap()),
        Code::Unauthenticated
    );

    let mut reader = client(&node, Some(READER)).await;
    let e = put(&mut reader, put_stream(&[rows(0..1)], None))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied);
    let e = reader
        .do_action(Action::new("init_writer", ""))
        .await
        .err()
        .unwrap();
    assert_eq!(code(&e), Code::PermissionDenied);
    assert_eq!(
        get(&mut reader, json!({"v": 1, "table": "t", "bucket": 0}))
            .await
            .len(),
        0
    );

    // Basic credentials with the token as the password, as pyarrow's authenticate_basic_token.
    let mut basic = client(&node, None).await;
    use base64::Engine as _;
    let credentials = base64::engine::general_purpose::STANDARD.encode(format!("user:{TOKEN}"));
    basic
        .add_header("authorization", &format!("Basic {credentials}"))
        .unwrap();
    let mut request = tonic::Request::new(futures::stream::iter([
        arrow_flight::HandshakeRequest::default(),
    ]));
    *request.metadata_mut() = basic.metadata().clone();
    let response = basic.inner_mut().handshake(request).await.unwrap();
    assert_eq!(
        response.metadata().get("authorization").unwrap(),
        format!("Bearer {TOKEN}").as_str()
    );
    let written = put(&mut basic, put_stream(&[rows(0..2)], None))
        .await
        .unwrap();
    assert_eq!(written[0]["next_offset"], 2);
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_grouped_into_one_append_stay_within_the_byte_limit() {
    // Each batch is larger than the limit: every one is its own append, however fast they come.
    let node = start_with(false, |s| s.flight.max_append_bytes = 64).await;
    create_table(&node, None).await;
    let mut c = client(&node, None).await;
    let batches: Vec<RecordBatch> = (0..8).map(|i| rows(i * 10..i * 10 + 10)).collect();
    let results = put(&mut c, put_stream(&batches, None)).await.unwrap();
    assert_eq!(results.len(), 8);
    let metrics = reqwest::get(format!("{}/metrics", node.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("\nmink_appends_total 8\n"), "{metrics}");
    node.shutdown().await.unwrap();
}

/// The memory store, with the WAL's PUTs held until `gate` opens, counted in `held` meanwhile.
#[derive(Debug)]
struct HeldWal {
    inner: ObjectStoreBackend,
    gate: tokio::sync::watch::Sender<bool>,
    held: tokio::sync::watch::Sender<usize>,
}

#[async_trait::async_trait]
impl ObjectStorage for HeldWal {
    fn name(&self) -> &str {
        "held-wal"
    }
    async fn put(&self, key: &str, data: bytes::Bytes) -> StorageResult<PutResult_> {
        if key.starts_with("wal/") {
            self.held.send_modify(|n| *n += 1);
            let _ = self.gate.subscribe().wait_for(|open| *open).await;
        }
        self.inner.put(key, data).await
    }
    async fn put_if_absent(&self, key: &str, data: bytes::Bytes) -> StorageResult<PutResult_> {
        self.inner.put_if_absent(key, data).await
    }
    async fn get(&self, key: &str) -> StorageResult<bytes::Bytes> {
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StorageResult<bytes::Bytes> {
        self.inner.get_range(key, range).await
    }
    async fn head(&self, key: &str) -> StorageResult<ObjectMeta> {
        self.inner.head(key).await
    }
    async fn delete(&self, key: &str) -> StorageResult<()> {
        self.inner.delete(key).await
    }
    async fn delete_many(&self, keys: &[String]) -> StorageResult<()> {
        self.inner.delete_many(keys).await
    }
    async fn list(&self, prefix: &str) -> StorageResult<Vec<ObjectMeta>> {
        self.inner.list(prefix).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_stream_starts_its_next_append_before_the_previous_one_is_durable() {
    let store = Arc::new(HeldWal {
        inner: ObjectStoreBackend::memory(),
        gate: tokio::sync::watch::Sender::new(false),
        held: tokio::sync::watch::Sender::new(0),
    });
    // Each batch is an append of its own.
    let node = start_on(store.clone(), false, |s| s.flight.max_append_bytes = 64).await;
    create_table(&node, None).await;
    let mut c = client(&node, None).await;
    let batches: Vec<RecordBatch> = (0..8).map(|i| rows(i * 10..i * 10 + 10)).collect();
    let putting = tokio::spawn(async move { put(&mut c, put_stream(&batches, None)).await });
    // One append at a time would hold one WAL PUT and wait for it.
    let mut held = store.held.subscribe();
    let overlapped = tokio::time::timeout(Duration::from_secs(20), held.wait_for(|n| *n >= 2))
        .await
        .is_ok();
    assert!(
        overlapped,
        "the stream's next append waited for the previous one to be durable"
    );
    store.gate.send_replace(true);
    let results = putting.await.unwrap().unwrap();
    let expected: Vec<(u64, u64)> = (0..8).map(|i| (i * 10, i * 10 + 10)).collect();
    assert_eq!(offsets(&results), expected, "results in order");
    node.shutdown().await.unwrap();
}
