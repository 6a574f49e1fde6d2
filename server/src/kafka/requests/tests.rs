//! Our decoders against the `kafka-protocol` crate's encoders, at every version we advertise:
//! the layouts must agree field for field.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, FetchRequest as KFetch, InitProducerIdRequest as KInit,
    ListOffsetsRequest as KListOffsets, MetadataRequest as KMetadata, ProduceRequest as KProduce,
    TopicName, fetch_request, list_offsets_request, metadata_request, produce_request,
};
use kafka_protocol::protocol::{Encodable, StrBytes};

use super::*;
use crate::kafka::versions::served;

fn encode(message: &impl Encodable, version: i16) -> Bytes {
    let mut buf = BytesMut::new();
    message.encode(&mut buf, version).unwrap();
    buf.freeze()
}

fn versions(key: ApiKey) -> std::ops::RangeInclusive<i16> {
    let (min, max) = served(key as i16).unwrap();
    min..=max
}

fn reader(bytes: Bytes, key: ApiKey, version: i16) -> Reader {
    Reader::new(bytes, super::super::versions::flexible(key as i16, version))
}

fn name(s: &'static str) -> TopicName {
    TopicName(StrBytes::from_static_str(s))
}

#[test]
fn produce_decodes_as_the_crate_encodes_it() {
    let records = Bytes::from_static(b"not decoded here");
    let message = KProduce::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            produce_request::TopicProduceData::default()
                .with_name(name("t"))
                .with_partition_data(vec![
                    produce_request::PartitionProduceData::default()
                        .with_index(3)
                        .with_records(Some(records.clone())),
                ]),
        ]);
    for v in versions(ApiKey::Produce) {
        let mut r = reader(encode(&message, v), ApiKey::Produce, v);
        let decoded = produce(&mut r, v).unwrap();
        assert_eq!(decoded.acks, -1, "v{v}");
        assert_eq!(decoded.transactional_id, None);
        assert_eq!(
            decoded.topics,
            vec![("t".to_owned(), vec![(3, Some(records.clone()))])],
            "v{v}"
        );
        assert_eq!(r.remaining(), 0, "v{v}");
    }
}

#[test]
fn fetch_decodes_as_the_crate_encodes_it() {
    let message = KFetch::default()
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(52_428_800)
        .with_topics(vec![
            fetch_request::FetchTopic::default()
                .with_topic(name("t"))
                .with_partitions(vec![
                    fetch_request::FetchPartition::default()
                        .with_partition(1)
                        .with_fetch_offset(42)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ])
        .with_forgotten_topics_data(vec![]);
    for v in versions(ApiKey::Fetch) {
        let mut r = reader(encode(&message, v), ApiKey::Fetch, v);
        let decoded = fetch(&mut r, v).unwrap();
        assert_eq!(
            (decoded.max_wait_ms, decoded.min_bytes, decoded.max_bytes),
            (500, 1, 52_428_800),
            "v{v}"
        );
        assert_eq!(
            decoded.topics,
            vec![(
                "t".to_owned(),
                vec![FetchPartition {
                    partition: 1,
                    fetch_offset: 42,
                    max_bytes: 1 << 20
                }]
            )],
            "v{v}"
        );
        assert_eq!(r.remaining(), 0, "v{v}");
    }
}

#[test]
fn list_offsets_decodes_as_the_crate_encodes_it() {
    let message = KListOffsets::default().with_topics(vec![
        list_offsets_request::ListOffsetsTopic::default()
            .with_name(name("t"))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(2)
                    .with_timestamp(-2),
            ]),
    ]);
    for v in versions(ApiKey::ListOffsets) {
        let mut r = reader(encode(&message, v), ApiKey::ListOffsets, v);
        let decoded = list_offsets(&mut r, v).unwrap();
        assert_eq!(
            decoded.topics,
            vec![(
                "t".to_owned(),
                vec![ListOffsetsPartition {
                    partition: 2,
                    timestamp: -2
                }]
            )],
            "v{v}"
        );
        assert_eq!(r.remaining(), 0, "v{v}");
    }
}

#[test]
fn metadata_decodes_as_the_crate_encodes_it() {
    for v in versions(ApiKey::Metadata) {
        let some = KMetadata::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default().with_name(Some(name("t"))),
        ]));
        let mut r = reader(encode(&some, v), ApiKey::Metadata, v);
        let decoded = metadata(&mut r, v).unwrap();
        assert_eq!(decoded.topics, Some(vec![Some("t".to_owned())]), "v{v}");
        assert_eq!(r.remaining(), 0, "v{v}");
        if v >= 1 {
            let all = KMetadata::default().with_topics(None);
            let mut r = reader(encode(&all, v), ApiKey::Metadata, v);
            assert_eq!(metadata(&mut r, v).unwrap().topics, None, "v{v}");
        }
    }
}

#[test]
fn init_producer_id_decodes_as_the_crate_encodes_it() {
    for v in versions(ApiKey::InitProducerId) {
        let message = KInit::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(if v >= 3 { 9.into() } else { (-1).into() })
            .with_producer_epoch(if v >= 3 { 4 } else { -1 });
        let mut r = reader(encode(&message, v), ApiKey::InitProducerId, v);
        let decoded = init_producer_id(&mut r, v).unwrap();
        assert_eq!(decoded.transactional_id, None);
        let expected = if v >= 3 { (9, 4) } else { (-1, -1) };
        assert_eq!(
            (decoded.producer_id, decoded.producer_epoch),
            expected,
            "v{v}"
        );
        assert_eq!(r.remaining(), 0, "v{v}");
    }
}

#[test]
fn a_truncated_body_is_an_error_at_every_length() {
    let message = KProduce::default().with_topic_data(vec![
        produce_request::TopicProduceData::default()
            .with_name(name("topic"))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_records(Some(Bytes::from_static(b"abc"))),
            ]),
    ]);
    for v in [3, 9] {
        let full = encode(&message, v);
        for cut in 0..full.len() {
            let mut r = reader(full.slice(..cut), ApiKey::Produce, v);
            assert!(produce(&mut r, v).is_err(), "v{v} cut at {cut}");
        }
    }
}
