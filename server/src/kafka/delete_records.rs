//! DeleteRecords: a partition's log start moves forward, as a trim over HTTP or Flight does
//! (docs/kafka.md, "Operators' APIs").

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::errors::code_of;
use super::requests::DeleteRecordsRequest;
use super::state::Kafka;
use crate::auth::Action;
use crate::error::{ApiError, ApiResult};

/// Answers a DeleteRecords: each partition trimmed to its offset (-1: the high watermark).
pub(crate) async fn delete_records(
    kafka: &Kafka,
    request: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let mut topics = Vec::with_capacity(request.len());
    for (name, partitions) in request {
        let mut results = Vec::with_capacity(partitions.len());
        for (index, offset) in partitions {
            let result = DeleteRecordsPartitionResult::default().with_partition_index(index);
            results.push(match trim(kafka, &name, index, offset).await {
                Ok(log_start) => result.with_low_watermark(log_start),
                Err(e) => {
                    tracing::debug!(topic = name, partition = index, error = %e, "kafka: delete records refused");
                    result.with_low_watermark(-1).with_error_code(code_of(&e))
                }
            });
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(TopicName(StrBytes::from_string(name)))
                .with_partitions(results),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}

/// Trims one partition; its new log start.
async fn trim(kafka: &Kafka, topic: &str, index: i32, offset: i64) -> ApiResult<i64> {
    kafka.principal().check(Action::Write, Some(topic))?;
    let info = kafka.core().catalog().get(topic).await?;
    let log = kafka.partition(&info, index).await?;
    let high_watermark = log.offsets().high_watermark;
    let to = match offset {
        -1 => high_watermark,
        n => u64::try_from(n).map_err(|_| ApiError::OffsetOutOfRange {
            offset: 0,
            high_watermark,
        })?,
    };
    log.trim(to).await?;
    tracing::info!(
        topic,
        partition = index,
        offset = to,
        "kafka: records deleted"
    );
    Ok(i64::try_from(log.offsets().log_start).unwrap_or(i64::MAX))
}
