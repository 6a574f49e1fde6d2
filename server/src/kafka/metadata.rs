//! Metadata: every table is a topic, its buckets the partitions, each led by the node that owns
//! the bucket (docs/kafka.md, "Mapping", "Brokers").

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, DescribeClusterResponse, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::brokers::Brokers;
use super::errors::{code, code_of};
use super::requests::MetadataRequest;
use super::state::Kafka;
use crate::catalog::TableInfo;

/// The cluster id Metadata and DescribeCluster answer.
const CLUSTER_ID: &str = "mink";

/// Answers a Metadata request.
pub(crate) async fn metadata(kafka: &Kafka, request: MetadataRequest) -> MetadataResponse {
    let catalog = kafka.core().catalog();
    let brokers = Brokers::of(kafka);
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
            Ok(info) => topic.with_partitions(partitions(kafka, &brokers, &info)),
            Err(e) => topic.with_error_code(code_of(&e)),
        });
    }
    let listed = brokers
        .all()
        .iter()
        .map(|(id, host, port)| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(*id))
                .with_host(StrBytes::from_string(host.clone()))
                .with_port(*port)
        })
        .collect();
    MetadataResponse::default()
        .with_brokers(listed)
        .with_cluster_id(Some(StrBytes::from_static_str(CLUSTER_ID)))
        .with_controller_id(BrokerId(kafka.broker_id()))
        .with_topics(topics)
}

/// Each bucket of `info` as a partition led by its owner, replicated nowhere else (object
/// storage keeps the copies).
fn partitions(
    kafka: &Kafka,
    brokers: &Brokers,
    info: &TableInfo,
) -> Vec<MetadataResponsePartition> {
    (0..info.record().bucket_count)
        .map(|bucket| {
            let partition = MetadataResponsePartition::default()
                .with_partition_index(i32::try_from(bucket).unwrap_or(i32::MAX))
                .with_leader_epoch(-1);
            match brokers.leader(kafka, info, bucket) {
                Ok(leader) => partition
                    .with_leader_id(BrokerId(leader))
                    .with_replica_nodes(vec![BrokerId(leader)])
                    .with_isr_nodes(vec![BrokerId(leader)]),
                Err(error) => partition
                    .with_error_code(error)
                    .with_leader_id(BrokerId(-1)),
            }
        })
        .collect()
}

/// Answers a DescribeCluster: every broker; this one answers as the controller.
pub(crate) fn describe_cluster(kafka: &Kafka) -> DescribeClusterResponse {
    let brokers = Brokers::of(kafka)
        .all()
        .iter()
        .map(|(id, host, port)| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(*id))
                .with_host(StrBytes::from_string(host.clone()))
                .with_port(*port)
        })
        .collect();
    DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_static_str(CLUSTER_ID))
        .with_controller_id(BrokerId(kafka.broker_id()))
        .with_brokers(brokers)
}
