//! Fetch: whole batches from each partition's fetch offset, waiting up to `max_wait_ms` on
//! every requested partition at once while less than `min_bytes` is ready (docs/kafka.md,
//! "Fetch").

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::future::select_all;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use mink_codec::BatchView;

use super::errors::code_of;
use super::records::{Timestamps, encode_batch};
use super::requests::FetchRequest;
use super::state::Kafka;
use super::table::{KafkaColumns, json_records};
use crate::bucket_log::BucketLog;
use crate::catalog::TableInfo;
use crate::error::{ApiError, ApiResult};
use crate::format::decode_batch;

/// One requested partition, resolved.
struct Wanted {
    topic: usize,
    partition: i32,
    offset: u64,
    max_bytes: usize,
    /// The partition's table and log, or the Kafka error code it answers.
    source: Result<(Arc<TableInfo>, Arc<dyn BucketLog>), i16>,
}

/// Answers a Fetch.
pub(crate) async fn fetch(kafka: &Kafka, request: FetchRequest) -> FetchResponse {
    let deadline = Instant::now() + Duration::from_millis(request.max_wait_ms.max(0) as u64);
    let mut names = Vec::with_capacity(request.topics.len());
    let mut wanted = Vec::new();
    for (t, (topic, partitions)) in request.topics.into_iter().enumerate() {
        let info = match kafka
            .principal()
            .check(crate::auth::Action::Read, Some(&topic))
        {
            Ok(()) => kafka.core().catalog().get(&topic).await,
            Err(e) => Err(e),
        };
        for p in partitions {
            let source = match &info {
                Ok(info) => kafka
                    .partition(info, p.partition)
                    .await
                    .map(|log| (info.clone(), log))
                    .map_err(|e| code_of(&e)),
                Err(e) => Err(code_of(e)),
            };
            wanted.push(Wanted {
                topic: t,
                partition: p.partition,
                offset: u64::try_from(p.fetch_offset).unwrap_or(u64::MAX),
                max_bytes: usize::try_from(p.max_bytes).unwrap_or(0),
                source,
            });
        }
        names.push(topic);
    }
    let max_bytes = usize::try_from(request.max_bytes).unwrap_or(0);
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
    loop {
        let (answers, bytes) = read_all(kafka, &wanted, max_bytes).await;
        let now = Instant::now();
        if bytes >= min_bytes.max(1) || now >= deadline || kafka.core().is_shutting_down() {
            return respond(names, &wanted, answers);
        }
        // Wait for any partition to move past its fetch offset, then read again.
        let waits: Vec<_> = wanted
            .iter()
            .filter_map(|w| {
                w.source
                    .as_ref()
                    .ok()
                    .map(|(_, log)| (log.clone(), w.offset))
            })
            .map(|(log, offset)| {
                let timeout = deadline - now;
                Box::pin(async move { log.wait_past(offset, timeout).await })
            })
            .collect();
        if waits.is_empty() {
            return respond(names, &wanted, answers);
        }
        tokio::select! {
            _ = select_all(waits) => {}
            () = kafka.core().shutdown_signal().cancelled() => {}
        }
    }
}

/// One partition's answer.
struct Answer {
    /// The Kafka error code, 0 for none.
    error: i16,
    records: Bytes,
    high_watermark: i64,
    log_start: i64,
}

async fn read_all(kafka: &Kafka, wanted: &[Wanted], max_bytes: usize) -> (Vec<Answer>, usize) {
    let mut total = 0;
    let mut answers = Vec::with_capacity(wanted.len());
    for w in wanted {
        let answer = match &w.source {
            Err(code) => Answer {
                error: *code,
                records: Bytes::new(),
                high_watermark: -1,
                log_start: -1,
            },
            Ok((info, log)) => {
                let offsets = log.offsets();
                let mut answer = Answer {
                    error: 0,
                    records: Bytes::new(),
                    high_watermark: i64::try_from(offsets.high_watermark).unwrap_or(i64::MAX),
                    log_start: i64::try_from(offsets.log_start).unwrap_or(i64::MAX),
                };
                // Past the request's budget only the first partition with data still reads.
                let room = max_bytes.saturating_sub(total).min(w.max_bytes);
                if w.offset < offsets.log_start || w.offset > offsets.high_watermark {
                    answer.error = super::errors::code::OFFSET_OUT_OF_RANGE;
                } else if w.offset < offsets.high_watermark && (room > 0 || total == 0) {
                    match read(kafka, info, log.as_ref(), w.offset, room.max(1)).await {
                        Ok(records) => {
                            total += records.len();
                            answer.records = records;
                        }
                        Err(e) => {
                            tracing::warn!(partition = w.partition, error = %e, "kafka fetch: a read failed");
                            answer.error = code_of(&e);
                        }
                    }
                }
                answer
            }
        };
        answers.push(answer);
    }
    (answers, total)
}

/// Reads from `offset` and encodes what was read as Kafka batches.
async fn read(
    kafka: &Kafka,
    info: &TableInfo,
    log: &dyn BucketLog,
    offset: u64,
    max_bytes: usize,
) -> ApiResult<Bytes> {
    let chunk = kafka
        .core()
        .read(log, offset, None, None, max_bytes)
        .await?;
    let mut out = BytesMut::new();
    for batch in &chunk.batches {
        let view = BatchView::new(batch.clone()).map_err(|e| ApiError::Internal {
            message: format!("a stored batch has a bad header: {e}"),
        })?;
        let schema = info
            .schemas
            .get(view.schema_id())
            .ok_or_else(|| ApiError::Internal {
                message: format!(
                    "a stored batch names schema {} the table lacks",
                    view.schema_id()
                ),
            })?;
        let Some(rows) = decode_batch(batch, &schema)? else {
            continue;
        };
        let committed = view.header().commit_timestamp;
        let (records, timing) = match KafkaColumns::of(&schema) {
            Some(columns) => (columns.records(&rows), Timestamps::CreateTime),
            None => (
                json_records(&rows, committed, key_column(info, &schema))
                    .map_err(|message| ApiError::Internal { message })?,
                Timestamps::LogAppendTime(committed),
            ),
        };
        encode_batch(view.base_offset(), &records, timing, &mut out);
    }
    Ok(out.freeze())
}

fn respond(names: Vec<String>, wanted: &[Wanted], answers: Vec<Answer>) -> FetchResponse {
    let mut topics: Vec<FetchableTopicResponse> = names
        .into_iter()
        .map(|n| FetchableTopicResponse::default().with_topic(TopicName(StrBytes::from_string(n))))
        .collect();
    for (w, a) in wanted.iter().zip(answers) {
        let data = PartitionData::default()
            .with_partition_index(w.partition)
            .with_error_code(a.error)
            .with_high_watermark(a.high_watermark)
            .with_last_stable_offset(a.high_watermark)
            .with_log_start_offset(a.log_start)
            .with_aborted_transactions(Some(Vec::new()))
            .with_records(Some(a.records));
        topics[w.topic].partitions.push(data);
    }
    FetchResponse::default().with_responses(topics)
}

/// The index of the table's Kafka key column in `schema`, when it names one.
fn key_column(info: &TableInfo, schema: &arrow_schema::Schema) -> Option<usize> {
    let record = info.record();
    schema.index_of(record.kafka_key.as_deref()?).ok()
}
