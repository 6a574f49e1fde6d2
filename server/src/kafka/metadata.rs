//! Metadata: every table is a topic, its buckets the partitions, this broker the leader of each
//! (docs/kafka.md, "Mapping"; in a cluster, each owner: later).

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, DescribeClusterResponse, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::errors::{code, code_of};
use super::requests::MetadataRequest;
use super::state::{BROKER_ID, Kafka};
use crate::catalog::TableInfo;

/// The cluster id Metadata and DescribeCluster answer.
const CLUSTER_ID: &str = "mink";

/// Answers a Metadata request.
pub(crate) async fn metadata(kafka: &Kafka, request: MetadataRequest) -> MetadataResponse {
    let catalog = kafka.core().catalog();
    let names: Vec<Option<String>> = match request.topics {
        Some(names) => names,
        None => match catalog.list().await {
            Ok(tables) => tables
                .into_iter()
                .filter(|t| {
                    kafka
                        .principal()
                        .check(crate::auth::Action::Read, Some(&t.name))
                        .is_ok()
                })
                .map(|t| Some(t.name))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "kafka metadata: listing tables failed");
                Vec::new()
            }
        },
    };
    let mut topics = Vec::with_capacity(names.len());
    for name in names {
        let Some(name) = name else {
            // Asked by topic id, which Mink does not give topics.
            topics.push(
                MetadataResponseTopic::default().with_error_code(code::UNKNOWN_TOPIC_OR_PARTITION),
            );
            continue;
        };
        let topic = MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(name.clone()))));
        let allowed = kafka
            .principal()
            .check(crate::auth::Action::Read, Some(&name));
        let info = match allowed {
            Ok(()) if request.allow_auto_topic_creation => {
                super::topics::table_or_create(kafka, &name).await
            }
            Ok(()) => catalog.get(&name).await,
            Err(e) => Err(e),
        };
        topics.push(match info {
            Ok(info) => topic.with_partitions(partitions(&info)),
            Err(e) => topic.with_error_code(code_of(&e)),
        });
    }
    MetadataResponse::default()
        .with_brokers(vec![
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(BROKER_ID))
                .with_host(StrBytes::from_string(kafka.host.clone()))
                .with_port(kafka.port),
        ])
        .with_cluster_id(Some(StrBytes::from_static_str(CLUSTER_ID)))
        .with_controller_id(BrokerId(BROKER_ID))
        .with_topics(topics)
}

fn partitions(info: &TableInfo) -> Vec<MetadataResponsePartition> {
    (0..info.record().bucket_count)
        .map(|bucket| {
            MetadataResponsePartition::default()
                .with_partition_index(i32::try_from(bucket).unwrap_or(i32::MAX))
                .with_leader_id(BrokerId(BROKER_ID))
                .with_leader_epoch(-1)
                .with_replica_nodes(vec![BrokerId(BROKER_ID)])
                .with_isr_nodes(vec![BrokerId(BROKER_ID)])
        })
        .collect()
}

/// Answers a DescribeCluster: this broker, the controller.
pub(crate) fn describe_cluster(kafka: &Kafka) -> DescribeClusterResponse {
    DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_static_str(CLUSTER_ID))
        .with_controller_id(BrokerId(BROKER_ID))
        .with_brokers(vec![
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(BROKER_ID))
                .with_host(StrBytes::from_string(kafka.host.clone()))
                .with_port(kafka.port),
        ])
}
