//! OffsetCommit and OffsetFetch: a group's committed offsets, kept in the metadata KV under
//! the table's key segment, so a table dropped and created again starts with none
//! (docs/kafka.md, "Consumer groups").

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{GroupId, OffsetCommitResponse, OffsetFetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use mink_metadata::{CommittedOffset, GroupOffset};

use super::MAX_GROUP_ID_BYTES;
use crate::auth::Action;
use crate::catalog::TableInfo;
use crate::kafka::brokers::Brokers;
use crate::kafka::errors::code;
use crate::kafka::requests::{FetchGroup, OffsetCommitRequest, OffsetFetchRequest};
use crate::kafka::state::Kafka;

/// The longest metadata string a commit may carry (Kafka's `offset.metadata.max.bytes`).
const MAX_METADATA_BYTES: usize = 4096;

/// Why a group id is refused, if it is.
pub(crate) fn group_id_error(kafka: &Kafka, group: &str) -> Option<i16> {
    if group.is_empty() || group.len() > MAX_GROUP_ID_BYTES {
        return Some(code::INVALID_GROUP_ID);
    }
    // Groups are not tables: any token that may read may use them.
    kafka
        .principal()
        .check(Action::Read, None)
        .err()
        .map(|_| code::GROUP_AUTHORIZATION_FAILED)
}

/// Why a request to `group`'s coordinator is refused here, if it is: a bad group id, or
/// another broker coordinates it (NOT_COORDINATOR: the client finds the coordinator again).
pub(crate) fn group_error(kafka: &Kafka, group: &str) -> Option<i16> {
    group_id_error(kafka, group)
        .or_else(|| (!Brokers::of(kafka).coordinates(group)).then_some(code::NOT_COORDINATOR))
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

/// Answers an OffsetCommit: every partition's offset is stored, or none is.
pub(crate) async fn offset_commit(
    kafka: &Kafka,
    request: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let group = &request.group_id;
    let refused = group_error(kafka, group).unwrap_or_else(|| {
        kafka
            .groups()
            .may_commit(group, &request.member_id, request.generation_id)
    });
    let now = kafka.core().metadata().clock().now_ms();
    let mut answers: Vec<(String, Vec<(i32, i16)>)> = Vec::with_capacity(request.topics.len());
    let mut stored: Vec<CommittedOffset> = Vec::new();
    // (table, partition, offset) of what is stored, for the lag metric.
    let mut lagged: Vec<(Arc<TableInfo>, i32, i64)> = Vec::new();
    for (name, partitions) in request.topics {
        let info = table(kafka, &name).await;
        let mut codes = Vec::with_capacity(partitions.len());
        for p in partitions {
            let error = if refused != code::NONE {
                refused
            } else if let Err(e) = info.as_ref() {
                *e
            } else if p
                .metadata
                .as_ref()
                .is_some_and(|m| m.len() > MAX_METADATA_BYTES)
            {
                code::OFFSET_METADATA_TOO_LARGE
            } else {
                match info.as_ref().ok().and_then(|i| bucket(i, p.partition)) {
                    None => code::UNKNOWN_TOPIC_OR_PARTITION,
                    Some((segment, bucket)) => {
                        if let Ok(info) = &info {
                            lagged.push((info.clone(), p.partition, p.offset));
                        }
                        stored.push((
                            segment,
                            bucket,
                            GroupOffset {
                                offset: p.offset,
                                metadata: p.metadata.filter(|m| !m.is_empty()),
                                committed_at_ms: u64::try_from(now).unwrap_or(0),
                            },
                        ));
                        code::NONE
                    }
                }
            };
            codes.push((p.partition, error));
        }
        answers.push((name, codes));
    }
    let mut failed = false;
    if !stored.is_empty() {
        match kafka
            .core()
            .metadata()
            .put_group_offsets(group, &stored)
            .await
        {
            Ok(()) => show_lag(kafka, group, &lagged).await,
            Err(e) => {
                tracing::warn!(group, error = %e, "kafka: storing committed offsets failed");
                failed = true;
            }
        }
    }
    let topics = answers
        .into_iter()
        .map(|(name, codes)| {
            let partitions = codes
                .into_iter()
                .map(|(partition, error)| {
                    let error = if failed && error == code::NONE {
                        code::COORDINATOR_NOT_AVAILABLE
                    } else {
                        error
                    };
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(partition)
                        .with_error_code(error)
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(topic_name(&name))
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// Shows the committed offsets in `mink_kafka_consumer_lag`, against the high watermarks of
/// the partitions' logs while they are open here.
async fn show_lag(kafka: &Kafka, group: &str, committed: &[(Arc<TableInfo>, i32, i64)]) {
    let lag = &kafka.core().metrics().kafka.lag;
    for (info, index, offset) in committed {
        let Ok(log) = kafka.partition(info, *index).await else {
            continue;
        };
        let log = Arc::downgrade(&log);
        let Ok(partition) = u32::try_from(*index) else {
            continue;
        };
        lag.committed(
            group,
            &info.name(),
            partition,
            *offset,
            Box::new(move || log.upgrade().map(|l| l.offsets().high_watermark)),
        );
    }
}

/// The table of a topic the connection may read, or the code to answer.
async fn table(kafka: &Kafka, name: &str) -> Result<Arc<TableInfo>, i16> {
    if kafka.principal().check(Action::Read, Some(name)).is_err() {
        return Err(code::TOPIC_AUTHORIZATION_FAILED);
    }
    kafka
        .core()
        .catalog()
        .get(name)
        .await
        .map_err(|_| code::UNKNOWN_TOPIC_OR_PARTITION)
}

/// The key segment and bucket of partition `index` of `info`, if it has one.
fn bucket(info: &TableInfo, index: i32) -> Option<(String, u32)> {
    let record = info.record();
    let bucket = u32::try_from(index)
        .ok()
        .filter(|b| *b < record.bucket_count)?;
    Some((record.key_segment(), bucket))
}

/// One group's committed offsets by topic: (topic, [(partition, offset, metadata, code)]).
type GroupAnswer = (Vec<(String, Vec<(i32, i64, Option<String>, i16)>)>, i16);

/// Answers an OffsetFetch: partitions with no committed offset answer -1.
pub(crate) async fn offset_fetch(
    kafka: &Kafka,
    request: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    let mut groups = Vec::with_capacity(request.groups.len());
    for asked in request.groups {
        let id = asked.0.clone();
        groups.push((id, fetch_group(kafka, asked).await));
    }
    if version >= 8 {
        let groups = groups
            .into_iter()
            .map(|(id, (topics, error))| {
                let topics = topics
                    .into_iter()
                    .map(|(name, partitions)| {
                        let partitions = partitions
                            .into_iter()
                            .map(|(index, offset, metadata, error)| {
                                OffsetFetchResponsePartitions::default()
                                    .with_partition_index(index)
                                    .with_committed_offset(offset)
                                    .with_committed_leader_epoch(-1)
                                    .with_metadata(Some(StrBytes::from_string(
                                        metadata.unwrap_or_default(),
                                    )))
                                    .with_error_code(error)
                            })
                            .collect();
                        OffsetFetchResponseTopics::default()
                            .with_name(topic_name(&name))
                            .with_partitions(partitions)
                    })
                    .collect();
                OffsetFetchResponseGroup::default()
                    .with_group_id(GroupId(StrBytes::from_string(id)))
                    .with_topics(topics)
                    .with_error_code(error)
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let (topics, error) = groups.pop().map(|(_, answer)| answer).unwrap_or_default();
    let topics = topics
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(index, offset, metadata, error)| {
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(index)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(-1)
                        .with_metadata(Some(StrBytes::from_string(metadata.unwrap_or_default())))
                        .with_error_code(error)
                })
                .collect();
            OffsetFetchResponseTopic::default()
                .with_name(topic_name(&name))
                .with_partitions(partitions)
        })
        .collect();
    OffsetFetchResponse::default()
        .with_topics(topics)
        .with_error_code(error)
}

/// One group of an OffsetFetch.
async fn fetch_group(kafka: &Kafka, (group, asked): FetchGroup) -> GroupAnswer {
    if let Some(error) = group_id_error(kafka, &group) {
        return (Vec::new(), error);
    }
    let committed = match kafka.core().metadata().group_offsets(&group).await {
        Ok(committed) => committed,
        Err(e) => {
            tracing::warn!(group, error = %e, "kafka: reading committed offsets failed");
            return (Vec::new(), code::COORDINATOR_NOT_AVAILABLE);
        }
    };
    let mut by_key: HashMap<(String, u32), GroupOffset> = committed
        .into_iter()
        .map(|(segment, partition, offset)| ((segment, partition), offset))
        .collect();
    let asked = match asked {
        Some(asked) => asked,
        // Every topic the group has offsets of (and the connection may read).
        None => every_committed(kafka, &by_key).await,
    };
    let mut topics = Vec::with_capacity(asked.len());
    for (name, partitions) in asked {
        let info = table(kafka, &name).await;
        let answers = partitions
            .into_iter()
            .map(|index| match &info {
                Err(error) if *error == code::TOPIC_AUTHORIZATION_FAILED => {
                    (index, -1, None, *error)
                }
                Err(_) => (index, -1, None, code::NONE),
                Ok(info) => match bucket(info, index).and_then(|key| by_key.remove(&key)) {
                    Some(committed) => (index, committed.offset, committed.metadata, code::NONE),
                    None => (index, -1, None, code::NONE),
                },
            })
            .collect();
        topics.push((name, answers));
    }
    (topics, code::NONE)
}

/// The topics and partitions of `committed` whose tables exist (a dropped table's offsets are
/// under an older key segment and are not shown).
async fn every_committed(
    kafka: &Kafka,
    committed: &HashMap<(String, u32), GroupOffset>,
) -> Vec<(String, Vec<i32>)> {
    let tables = kafka.core().catalog().list().await.unwrap_or_default();
    let by_segment: HashMap<String, String> = tables
        .into_iter()
        .filter(|t| kafka.principal().check(Action::Read, Some(&t.name)).is_ok())
        .map(|t| (t.key_segment(), t.name))
        .collect();
    let mut topics: HashMap<String, Vec<i32>> = HashMap::new();
    for (segment, partition) in committed.keys() {
        if let (Some(name), Ok(index)) = (by_segment.get(segment), i32::try_from(*partition)) {
            topics.entry(name.clone()).or_default().push(index);
        }
    }
    let mut topics: Vec<(String, Vec<i32>)> = topics.into_iter().collect();
    for (_, partitions) in &mut topics {
        partitions.sort_unstable();
    }
    topics.sort();
    topics
}
