//! The operator requests' decoders against the `kafka-protocol` crate's encoders.

use kafka_protocol::messages::{
    ApiKey, DeleteRecordsRequest as KDelete, DescribeClusterRequest as KCluster,
    DescribeConfigsRequest as KDescribe, IncrementalAlterConfigsRequest as KIncremental, TopicName,
    alter_configs_request, delete_records_request, describe_configs_request,
    incremental_alter_configs_request,
};
use kafka_protocol::protocol::{Encodable, StrBytes};

use super::*;
use crate::kafka::requests::groups::tests::each_version;

fn s(text: &'static str) -> StrBytes {
    StrBytes::from_static_str(text)
}

/// Every served version of `message` decoded, checked as `each_version` does.
fn decode_all<M: Encodable + Clone, T>(
    key: ApiKey,
    message: &M,
    decode: fn(&mut Reader, i16) -> WireResult<T>,
) -> Vec<T> {
    let mut decoded = Vec::new();
    each_version(key, |_| message.clone(), decode, |_, d| decoded.push(d));
    decoded
}

#[test]
fn config_requests_decode_as_the_crate_encodes_them() {
    let describe = KDescribe::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(TOPIC_RESOURCE)
            .with_resource_name(s("t"))
            .with_configuration_keys(Some(vec![s("retention.ms")])),
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(BROKER_RESOURCE)
            .with_resource_name(s("0"))
            .with_configuration_keys(None),
    ]);
    for decoded in decode_all(ApiKey::DescribeConfigs, &describe, describe_configs) {
        assert_eq!(
            decoded,
            vec![
                ConfigResource {
                    resource_type: TOPIC_RESOURCE,
                    name: "t".into(),
                    keys: Some(vec!["retention.ms".into()])
                },
                ConfigResource {
                    resource_type: BROKER_RESOURCE,
                    name: "0".into(),
                    keys: None
                },
            ]
        );
    }
    let alter_message = kafka_protocol::messages::AlterConfigsRequest::default()
        .with_resources(vec![
            alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(TOPIC_RESOURCE)
                .with_resource_name(s("t"))
                .with_configs(vec![
                    alter_configs_request::AlterableConfig::default()
                        .with_name(s("retention.bytes"))
                        .with_value(Some(s("1000"))),
                ]),
        ])
        .with_validate_only(true);
    for decoded in decode_all(ApiKey::AlterConfigs, &alter_message, alter_configs) {
        assert!(decoded.validate_only);
        assert_eq!(
            decoded.resources[0].configs,
            vec![("retention.bytes".into(), ConfigOp::Set, Some("1000".into()))]
        );
    }
    let incremental = KIncremental::default().with_resources(vec![
        incremental_alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(TOPIC_RESOURCE)
            .with_resource_name(s("t"))
            .with_configs(vec![
                incremental_alter_configs_request::AlterableConfig::default()
                    .with_name(s("retention.ms"))
                    .with_config_operation(1)
                    .with_value(None),
            ]),
    ]);
    for decoded in decode_all(
        ApiKey::IncrementalAlterConfigs,
        &incremental,
        incremental_alter_configs,
    ) {
        assert!(!decoded.validate_only);
        assert_eq!(
            decoded.resources[0].configs,
            vec![("retention.ms".into(), ConfigOp::Delete, None)]
        );
    }
}

#[test]
fn delete_records_and_describe_cluster_decode_as_the_crate_encodes_them() {
    let delete = KDelete::default()
        .with_topics(vec![
            delete_records_request::DeleteRecordsTopic::default()
                .with_name(TopicName(s("t")))
                .with_partitions(vec![
                    delete_records_request::DeleteRecordsPartition::default()
                        .with_partition_index(1)
                        .with_offset(-1),
                ]),
        ])
        .with_timeout_ms(1000);
    for decoded in decode_all(ApiKey::DeleteRecords, &delete, delete_records) {
        assert_eq!(decoded, vec![("t".to_owned(), vec![(1, -1)])]);
    }
    let cluster = KCluster::default().with_include_cluster_authorized_operations(true);
    assert_eq!(
        decode_all(ApiKey::DescribeCluster, &cluster, describe_cluster).len(),
        1
    );
}
