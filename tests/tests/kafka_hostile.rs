//! The Kafka port's bad-input suite, against a real `mink` process: sizes out of bounds,
//! truncated frames, unknown APIs and versions, bodies that declare huge counts, record batches
//! with a wrong CRC or a forged record count. Each gets a clean error or a closed connection;
//! afterwards the node still answers over Kafka and HTTP, and its peak memory stayed small (a
//! declared count is never allocated).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ProduceRequest, ProduceResponse, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use mink_tests::node::NodeProcess;
use serde_json::json;

/// Peak memory the node may reach through the whole suite.
const MAX_PEAK_RSS_KIB: u64 = 1 << 20;

fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("the Kafka port accepts");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// A request frame: size, header, body.
fn frame(api: ApiKey, version: i16, body: &[u8]) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("hostile")));
    let mut out = BytesMut::new();
    header
        .encode(&mut out, api.request_header_version(version))
        .unwrap();
    out.extend_from_slice(body);
    let mut framed = (out.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&out);
    framed
}

fn encoded(message: &impl Encodable, version: i16) -> Vec<u8> {
    let mut out = BytesMut::new();
    message.encode(&mut out, version).unwrap();
    out.to_vec()
}

/// The next response's bytes after its size, or `None` when the node closed the connection.
fn response(stream: &mut TcpStream) -> Option<Bytes> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body).ok()?;
    Some(Bytes::from(body))
}

/// The node closes the connection (end of stream or reset, not a timeout).
fn assert_closed(stream: &mut TcpStream, what: &str) {
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => {}
        Ok(_) => panic!("{what}: the node answered instead of closing"),
        Err(e) => assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{what}: the connection stayed open ({e})"
        ),
    }
}

/// The node answers ApiVersions on a new connection and `/healthz`, and its peak memory is
/// small.
async fn assert_alive(process: &NodeProcess, port: u16) {
    let mut stream = connect(port);
    stream
        .write_all(&frame(
            ApiKey::ApiVersions,
            3,
            &encoded(&ApiVersionsRequest::default(), 3),
        ))
        .unwrap();
    let mut answer = response(&mut stream).expect("ApiVersions is answered");
    assert_eq!(answer.get_i32(), 7, "the correlation id");
    let health = reqwest::get(format!("{}/healthz", process.url()))
        .await
        .expect("the node is alive");
    assert_eq!(health.status(), 200);
    let status = std::fs::read_to_string(format!("/proc/{}/status", process.pid().unwrap()))
        .expect("the node's /proc status");
    let peak: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    assert!(
        peak < MAX_PEAK_RSS_KIB,
        "the node's peak memory reached {peak} KiB"
    );
}

/// One record batch of `count` records, as a producer sends it.
fn batch(count: usize) -> BytesMut {
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: -1,
            timestamp: 1_700_000_000_000,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from_static(b"v")),
            headers: Default::default(),
        })
        .collect();
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut out, &records, &options).unwrap();
    out
}

/// A Produce v7 of `records` to partition 0 of `topic`; the partition's error code.
fn produce(port: u16, topic: &'static str, records: Bytes) -> i16 {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str(topic)))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records)),
                ]),
        ]);
    let mut stream = connect(port);
    stream
        .write_all(&frame(ApiKey::Produce, 7, &encoded(&request, 7)))
        .unwrap();
    let mut answer = response(&mut stream).expect("Produce is answered");
    answer.advance(4);
    let decoded = ProduceResponse::decode(&mut answer, 7).unwrap();
    decoded.responses[0].partition_responses[0].error_code
}

#[tokio::test]
async fn the_kafka_port_survives_hostile_input() {
    let dir = tempfile::tempdir().unwrap();
    let mut process = NodeProcess::new(&mink_tests::node::binary(), dir.path()).unwrap();
    let port = process.with_kafka().unwrap();
    let config = process.base_config("kafka-hostile");
    process.start(&config, None).unwrap();
    let http = reqwest::Client::new();
    process.wait_ready(&http).await.unwrap();
    let headers_type = r#"List(non-null Struct("key": non-null Utf8, "value": Binary))"#;
    let created = http
        .post(format!("{}/v1/tables", process.url()))
        .json(&json!({"name": "k", "schema": {"fields": [
            {"name": "key", "type": "binary"},
            {"name": "value", "type": "binary"},
            {"name": "headers", "type": headers_type, "nullable": false},
            {"name": "timestamp", "type": "timestamp_ms", "nullable": false},
        ]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);

    // Sizes out of bounds close the connection before anything is read.
    for size in [i32::MAX, -1, i32::MIN, 3] {
        let mut stream = connect(port);
        stream.write_all(&size.to_be_bytes()).unwrap();
        assert_closed(&mut stream, &format!("size {size}"));
    }
    // A frame that stops half-way.
    let mut stream = connect(port);
    stream.write_all(&100i32.to_be_bytes()).unwrap();
    stream.write_all(&[0u8; 20]).unwrap();
    drop(stream);
    // Unknown API keys and APIs not served close it; garbage where the header should be too.
    for (key, version) in [(9999i16, 0i16), (29, 0), (0, 2), (3, 99)] {
        let mut body = BytesMut::new();
        body.put_i16(key);
        body.put_i16(version);
        body.put_i32(1);
        body.put_i16(-1);
        let mut framed = (body.len() as i32).to_be_bytes().to_vec();
        framed.extend_from_slice(&body);
        let mut stream = connect(port);
        stream.write_all(&framed).unwrap();
        assert_closed(&mut stream, &format!("api {key} v{version}"));
    }
    // ApiVersions of a version not served is answered in version 0 with UNSUPPORTED_VERSION.
    let mut stream = connect(port);
    stream
        .write_all(&frame(ApiKey::ApiVersions, 99, &[]))
        .unwrap_or_else(|_| panic!("write"));
    let mut answer = response(&mut stream).expect("answered");
    assert_eq!(answer.get_i32(), 7);
    assert_eq!(answer.get_i16(), 35);

    // Bodies that declare counts far beyond their bytes: Metadata's topics, Produce's topics
    // and a compact (flexible) array, each about two billion elements.
    let mut huge = BytesMut::new();
    huge.put_i32(i32::MAX);
    let flexible_huge = [0xff, 0xff, 0xff, 0xff, 0x07];
    for (api, version, body) in [
        (ApiKey::Metadata, 1, huge.to_vec()),
        (ApiKey::Metadata, 9, flexible_huge.to_vec()),
        (ApiKey::Produce, 7, {
            let mut b = BytesMut::new();
            b.put_i16(-1);
            b.put_i16(-1);
            b.put_i32(1000);
            b.put_i32(i32::MAX);
            b.to_vec()
        }),
        (ApiKey::JoinGroup, 5, {
            let mut b = BytesMut::new();
            b.put_i16(1);
            b.put_slice(b"g");
            b.put_i32(10_000);
            b.put_i32(10_000);
            b.put_i16(0);
            b.put_i16(-1);
            b.put_i16(8);
            b.put_slice(b"consumer");
            b.put_i32(i32::MAX);
            b.to_vec()
        }),
    ] {
        let mut stream = connect(port);
        stream.write_all(&frame(api, version, &body)).unwrap();
        assert_closed(
            &mut stream,
            &format!("{api:?} v{version} with a huge count"),
        );
    }
    assert_alive(&process, port).await;

    // Record batches: a good one is taken; a wrong CRC, a forged record count and a batch
    // length past the bytes are CORRUPT_MESSAGE (2), and nothing is appended.
    assert_eq!(produce(port, "k", batch(3).freeze()), 0);
    let mut bad_crc = batch(3);
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 0xff;
    assert_eq!(produce(port, "k", bad_crc.freeze()), 2);
    let mut forged = batch(3);
    // The record count is the int32 at byte 57 of a magic-2 batch.
    forged[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
    assert_eq!(produce(port, "k", forged.freeze()), 2);
    let mut long = batch(1);
    long[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
    assert_eq!(produce(port, "k", long.freeze()), 2);
    assert_eq!(produce(port, "k", Bytes::from_static(b"not a batch")), 2);
    let offsets: serde_json::Value = http
        .get(format!("{}/v1/tables/k/buckets/0/offsets", process.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        offsets["high_watermark"], 3,
        "only the good batch: {offsets}"
    );
    assert_alive(&process, port).await;
    process.stop(Duration::from_secs(30)).unwrap();
}
