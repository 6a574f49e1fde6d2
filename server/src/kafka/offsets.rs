//! ListOffsets: earliest, latest, and by commit timestamp, with Kafka's -1 for a time after
//! the newest batch (docs/kafka.md, "ListOffsets").

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::errors::code_of;
use super::requests::{ListOffsetsPartition, ListOffsetsRequest};
use super::state::Kafka;
use crate::error::{ApiError, ApiResult};

const EARLIEST: i64 = -2;
const LATEST: i64 = -1;

/// Answers a ListOffsets.
pub(crate) async fn list_offsets(
    kafka: &Kafka,
    request: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    for (topic, partitions) in request.topics {
        let mut answers = Vec::with_capacity(partitions.len());
        for p in partitions {
            let answer = ListOffsetsPartitionResponse::default()
                .with_partition_index(p.partition)
                .with_leader_epoch(-1);
            answers.push(match lookup(kafka, &topic, &p).await {
                Ok((timestamp, offset)) => answer.with_timestamp(timestamp).with_offset(offset),
                Err(e) => answer
                    .with_error_code(code_of(&e))
                    .with_timestamp(-1)
                    .with_offset(-1),
            });
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(TopicName(StrBytes::from_string(topic)))
                .with_partitions(answers),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}

/// The (timestamp, offset) a partition answers.
async fn lookup(kafka: &Kafka, topic: &str, p: &ListOffsetsPartition) -> ApiResult<(i64, i64)> {
    kafka
        .principal()
        .check(crate::auth::Action::Read, Some(topic))?;
    let core = kafka.core();
    let info = core.catalog().get(topic).await?;
    let log = kafka.partition(&info, p.partition).await?;
    let offsets = log.offsets();
    let as_i64 = |o: u64| i64::try_from(o).unwrap_or(i64::MAX);
    match p.timestamp {
        EARLIEST => Ok((-1, as_i64(offsets.log_start))),
        LATEST => Ok((-1, as_i64(offsets.high_watermark))),
        t if t < 0 => Err(ApiError::bad_request(format!(
            "timestamp {t} is not served (earliest -2, latest -1, or a time in ms)"
        ))),
        t => {
            let offset = match log.offset_for_timestamp(t).await {
                Ok(offset) => offset,
                Err(ApiError::FutureTimestamp { .. }) => return Ok((-1, -1)),
                Err(e) => return Err(e),
            };
            if offset >= log.offsets().high_watermark {
                return Ok((-1, -1));
            }
            let chunk = core.read(log.as_ref(), offset, None, None, 1).await?;
            let committed = chunk
                .batches
                .first()
                .and_then(|b| mink_codec::BatchView::new(b.clone()).ok())
                .map_or(-1, |v| v.header().commit_timestamp);
            Ok((committed, as_i64(offset)))
        }
    }
}
