//! Produce: each partition's Kafka batches become Mink batches of the table's Kafka schema, one
//! append per partition, placed in request order and made durable together (docs/kafka.md,
//! "Mapping", "Idempotent producers", "Pipelining").

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use mink_codec::BatchMeta;

use super::errors::code_of;
use super::records::{Batch, decode_batches};
use super::requests::ProduceRequest;
use super::state::Kafka;
use super::table::KafkaColumns;
use tokio::sync::oneshot;

use crate::bucket_log::BucketLog;
use crate::catalog::TableInfo;
use crate::error::{ApiError, ApiResult};
use crate::format::encode_rows;

/// What one partition's append gave.
struct Appended {
    base_offset: i64,
    log_start: i64,
}

/// One partition's append under way.
type Running = Pin<Box<dyn Future<Output = ApiResult<Appended>> + Send>>;

/// Answers a Produce. Every partition's append is placed in its log in request order, then
/// `sequenced` is sent (the connection's next Produce may start placing its own), then their
/// durability is awaited together (docs/produce-pipelining.md).
pub(crate) async fn produce(
    kafka: &Kafka,
    request: ProduceRequest,
    sequenced: oneshot::Sender<()>,
) -> ProduceResponse {
    let mut budget = kafka.settings().max_decompressed_bytes;
    let mut appends: Vec<(String, Vec<(i32, Running)>)> = Vec::with_capacity(request.topics.len());
    for (topic, partitions) in request.topics {
        let mut running = Vec::with_capacity(partitions.len());
        for (index, records) in partitions {
            let append: Running = if request.transactional_id.is_some() {
                Box::pin(std::future::ready(Err(ApiError::bad_request(
                    "transactions are not served: produce without a transactional id",
                ))))
            } else {
                match prepare(
                    kafka,
                    &topic,
                    index,
                    records.unwrap_or_default(),
                    &mut budget,
                )
                .await
                {
                    Ok((log, batches)) => place(kafka, log, batches).await,
                    Err(e) => Box::pin(std::future::ready(Err(e))),
                }
            };
            running.push((index, append));
        }
        appends.push((topic, running));
    }
    let _ = sequenced.send(());
    let mut responses = Vec::with_capacity(appends.len());
    for (topic, running) in appends {
        let mut answers = Vec::with_capacity(running.len());
        for (index, append) in running {
            let answer = PartitionProduceResponse::default().with_index(index);
            answers.push(match append.await {
                Ok(done) => answer
                    .with_base_offset(done.base_offset)
                    .with_log_append_time_ms(-1)
                    .with_log_start_offset(done.log_start),
                Err(e) => {
                    tracing::debug!(topic, partition = index, error = %e, "kafka produce refused");
                    answer
                        .with_error_code(code_of(&e))
                        .with_error_message(Some(StrBytes::from_string(e.to_string())))
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1)
                }
            });
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(TopicName(StrBytes::from_string(topic)))
                .with_partition_responses(answers),
        );
    }
    ProduceResponse::default().with_responses(responses)
}

/// One partition's log and its records as Mink batches.
async fn prepare(
    kafka: &Kafka,
    topic: &str,
    index: i32,
    records: Bytes,
    budget: &mut usize,
) -> ApiResult<(Arc<dyn BucketLog>, Bytes)> {
    kafka
        .principal()
        .check(crate::auth::Action::Write, Some(topic))?;
    let info = super::topics::table_or_create(kafka, topic).await?;
    let log = kafka.partition(&info, index).await?;
    let batches = decode_batches(records, budget).map_err(|e| ApiError::InvalidBatch {
        message: e.to_string(),
    })?;
    if batches.is_empty() {
        return Err(ApiError::InvalidBatch {
            message: "the partition's records hold no batch".to_owned(),
        });
    }
    Ok((log, encode(&info, &batches)?))
}

/// Starts appending `batches` to `log` and returns once they have their place in it; the
/// returned future finishes the append (its durability).
async fn place(kafka: &Kafka, log: Arc<dyn BucketLog>, batches: Bytes) -> Running {
    let core = kafka.core().clone();
    let (placed, is_placed) = oneshot::channel();
    let mut append: Running = Box::pin(async move {
        let outcome = core
            .append_then(log.as_ref(), batches, Some(placed))
            .await?;
        Ok(Appended {
            base_offset: i64::try_from(outcome.base_offset).unwrap_or(i64::MAX),
            log_start: i64::try_from(log.offsets().log_start).unwrap_or(i64::MAX),
        })
    });
    tokio::select! {
        biased;
        done = &mut append => Box::pin(std::future::ready(done)),
        // Sent once placed, or dropped when the append fails first: either way it is done with
        // the log's order.
        _ = is_placed => append,
    }
}

/// The Mink batches of `batches`, back to back, in the table's newest schema.
fn encode(info: &Arc<TableInfo>, batches: &[Batch]) -> ApiResult<Bytes> {
    let (schema_id, schema) = info.schemas.latest().ok_or_else(|| ApiError::Internal {
        message: format!("table `{}` has no schema", info.name()),
    })?;
    let columns = KafkaColumns::of(&schema).ok_or_else(|| {
        ApiError::invalid(
            "invalid_rows",
            format!(
                "table `{}` is not a Kafka table (key, value, headers, timestamp; docs/kafka.md): produce to it over HTTP or Flight",
                info.name()
            ),
        )
    })?;
    let compression = info.compression();
    let mut out = BytesMut::new();
    for batch in batches {
        if batch.transactional || batch.control {
            return Err(ApiError::bad_request(
                "transactional and control batches are not served",
            ));
        }
        if batch.records.is_empty() {
            return Err(ApiError::InvalidBatch {
                message: "a batch with no records".to_owned(),
            });
        }
        let rows = columns
            .rows(&schema, &batch.records)
            .map_err(|e| ApiError::invalid("invalid_rows", e))?;
        let mut meta = BatchMeta::new(schema_id);
        if batch.producer_id >= 0 {
            let field = mink_codec::writer_field(batch.producer_id, batch.producer_epoch).ok_or(
                ApiError::UnknownWriter {
                    writer_id: batch.producer_id,
                    high_mark: 0,
                },
            )?;
            meta = meta
                .with_writer(field, batch.base_sequence)
                .counting_records();
        }
        out.extend_from_slice(&encode_rows(&rows, meta, compression)?);
    }
    Ok(out.freeze())
}
