//! DoPut: record batches into one bucket, in order, one PutResult per batch.
//!
//! The first message carries the descriptor of the bucket and the stream's schema, which must be
//! one of the table's schema versions (the newest that matches is used; none matching is
//! INVALID_ARGUMENT naming the difference from the newest). A schema message later in the stream
//! switches to the version it matches. Each record batch may carry `{"writer_id", "sequence"}`
//! in its `app_metadata` and becomes one mink batch without decoding or re-encoding its rows
//! (`mink_codec::batch_from_message`; the tablet checks the rows against the schema before it
//! takes the append).
//!
//! Batches are taken as they arrive, each held against the node's request-bytes budget. The
//! next append starts as soon as the one before it has its place in the log (its offsets
//! assigned, its batches submitted to the WAL: docs/produce-pipelining.md), not once it is
//! durable, so up to `flight.max_appends_in_flight` of one stream share group commits and their
//! PUTs overlap; the batches arriving meanwhile wait and go together as the next append (at most
//! `flight.max_batches_per_append` and `flight.max_append_bytes`, and within the tablet's
//! request limits). Appends stay in order, and one writer's sequences reach the tablet in the
//! order sent. Results come back in order:
//! `{"sequence", "base_offset", "next_offset", "commit_timestamp", "duplicate", "schema_id"}`.
//! The first error ends the stream with its status (an out-of-order sequence is
//! FAILED_PRECONDITION with `mink-expected-sequence`). An append refused before it had its
//! place (a bad batch, a sequence out of order) had no append after it started, so nothing
//! after the last result was appended; one that failed after (its WAL write) may have appends
//! placed behind it, which end as any cut request's do: a writer with an id retries them safely.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow_flight::{FlightData, PutResult};
use arrow_schema::Schema;
use bytes::{Bytes, BytesMut};
use mink_codec::BatchMeta;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tonic::{Status, Streaming};

use super::address::bucket_of;
use super::state::Flight;
use super::status::{invalid, status};
use crate::auth::{Action, Principal};
use crate::bucket_log::{AppendOutcome, BucketLog};
use crate::budget::Permit;
use crate::catalog::TableInfo;
use crate::error::ApiResult;

/// What a batch's `app_metadata` may say.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Writer {
    writer_id: Option<i64>,
    sequence: Option<i32>,
}

/// One PutResult's `app_metadata`.
#[derive(Debug, Serialize)]
struct Put {
    sequence: Option<i32>,
    base_offset: u64,
    next_offset: u64,
    commit_timestamp: i64,
    duplicate: bool,
    schema_id: i16,
}

/// A batch taken from the stream, waiting for its append.
struct Taken {
    batch: Bytes,
    rows: u64,
    sequence: Option<i32>,
    schema_id: i16,
    _held: Permit,
}

/// Starts a DoPut: checks the first message and returns the stream of results.
pub(crate) async fn do_put(
    flight: Arc<Flight>,
    principal: Principal,
    mut input: Streaming<FlightData>,
) -> Result<super::state::Stream<PutResult>, Status> {
    let first = input
        .message()
        .await?
        .ok_or_else(|| invalid("the DoPut stream is empty"))?;
    let address = bucket_of(first.flight_descriptor.as_ref())?;
    principal.check(Action::Write, Some(&address.table))?;
    let info = flight.core.catalog().get(&address.table).await?;
    let log = flight.open(&info, &address).await?;
    let mut pump = Pump {
        flight: flight.clone(),
        info,
        log,
        schema_id: None,
    };
    let mut queue = VecDeque::new();
    if let Some(taken) = pump.take(first)? {
        queue.push_back(taken);
    }
    if pump.schema_id.is_none() {
        return Err(invalid(
            "the first message must carry the stream's schema (with the descriptor)",
        ));
    }
    let (results, receiver) = mpsc::channel(flight.core.settings().flight.max_batches_per_append);
    tokio::spawn(pump.run(input, queue, results));
    Ok(super::state::receiver_stream(receiver))
}

/// The work of one DoPut stream.
struct Pump {
    flight: Arc<Flight>,
    info: Arc<TableInfo>,
    log: Arc<dyn BucketLog>,
    /// The schema version batches are encoded with: the last schema message's.
    schema_id: Option<i16>,
}

/// An append started: its batches and its outcome when it ends.
type Appending = tokio::task::JoinHandle<(Vec<Taken>, ApiResult<AppendOutcome>)>;

impl Pump {
    /// Takes batches and answers them until the stream ends, the client goes away or an error
    /// ends it.
    async fn run(
        mut self,
        mut input: Streaming<FlightData>,
        mut queue: VecDeque<Taken>,
        results: mpsc::Sender<Result<PutResult, Status>>,
    ) {
        let max_queued = self.flight.core.settings().flight.max_batches_per_append;
        let max_appending = self.flight.core.settings().flight.max_appends_in_flight;
        let mut appending: VecDeque<Appending> = VecDeque::new();
        // The last append started, until it has its place; the next one waits for it.
        let mut placing: Option<oneshot::Receiver<()>> = None;
        // The last append ended before it had a place (refused, or all duplicates): the next
        // one waits until its outcome is answered.
        let mut unplaced = false;
        let mut input_done = false;
        loop {
            if placing.is_none()
                && !unplaced
                && appending.len() < max_appending
                && !queue.is_empty()
            {
                let (append, placed) = self.append(&mut queue);
                appending.push_back(append);
                placing = Some(placed);
            }
            if appending.is_empty() && queue.is_empty() && input_done {
                return;
            }
            tokio::select! {
                message = input.message(), if !input_done && queue.len() < max_queued => {
                    match message {
                        Ok(Some(data)) => match self.take(data) {
                            Ok(Some(taken)) => queue.push_back(taken),
                            Ok(None) => {}
                            Err(error) => {
                                // Batches taken before it are still answered, in order.
                                self.finish(appending, queue, &results).await;
                                let _ = results.send(Err(error)).await;
                                return;
                            }
                        },
                        Ok(None) => input_done = true,
                        // The client went away or broke the stream: what is in flight still
                        // completes (it may be acknowledged to nobody, as any cut request).
                        Err(_) => input_done = true,
                    }
                }
                placed = async { placing.as_mut().expect("guarded").await }, if placing.is_some() => {
                    placing = None;
                    // Its outcome, if it already came, was answered: nothing to wait for then.
                    unplaced = placed.is_err() && !appending.is_empty();
                }
                ended = async { appending.front_mut().expect("guarded").await }, if !appending.is_empty() => {
                    appending.pop_front();
                    if !answer_joined(ended, &results).await {
                        return;
                    }
                    if appending.is_empty() {
                        unplaced = false;
                    }
                }
                () = results.closed() => return,
            }
        }
    }

    /// Answers what is in flight and what is queued, then stops.
    async fn finish(
        &self,
        appending: VecDeque<Appending>,
        mut queue: VecDeque<Taken>,
        results: &mpsc::Sender<Result<PutResult, Status>>,
    ) {
        for append in appending {
            if !answer_joined(append.await, results).await {
                return;
            }
        }
        while !queue.is_empty() {
            let (append, _placed) = self.append(&mut queue);
            if !answer_joined(append.await, results).await {
                return;
            }
        }
    }

    /// Starts the append of the queue's first batches, as many as one request may hold; the
    /// receiver hears once it has its place in the log (dropped if it ends without one).
    fn append(&self, queue: &mut VecDeque<Taken>) -> (Appending, oneshot::Receiver<()>) {
        let limits = &self.flight.core.settings().tablet;
        let flight = &self.flight.core.settings().flight;
        let (max, max_bytes) = (
            flight.max_batches_per_append,
            flight.max_append_bytes as u64,
        );
        let (mut bytes, mut rows) = (0u64, 0u64);
        let mut group = Vec::new();
        while let Some(next) = queue.front() {
            let fits = group.len() < max
                && (group.len() as u64) < limits.max_request_batches
                && bytes + next.batch.len() as u64 <= limits.max_request_bytes.min(max_bytes)
                && rows + next.rows <= limits.max_rows_per_request;
            if !fits && !group.is_empty() {
                break;
            }
            bytes += next.batch.len() as u64;
            rows += next.rows;
            group.extend(queue.pop_front());
        }
        let request = match group.as_slice() {
            [one] => one.batch.clone(),
            many => {
                let mut joined = BytesMut::with_capacity(bytes as usize);
                for taken in many {
                    joined.extend_from_slice(&taken.batch);
                }
                joined.freeze()
            }
        };
        let core = self.flight.core.clone();
        let log = self.log.clone();
        let (placed, is_placed) = oneshot::channel();
        let append = tokio::spawn(async move {
            let outcome = core.append_then(log.as_ref(), request, Some(placed)).await;
            (group, outcome)
        });
        (append, is_placed)
    }

    /// A message of the stream: a record batch to append (`Some`), a schema switch or a
    /// message with only metadata (`None`), or an error that ends the stream.
    fn take(&mut self, data: FlightData) -> Result<Option<Taken>, Status> {
        if data.data_header.is_empty() {
            return Ok(None);
        }
        let message = arrow_ipc::root_as_message(&data.data_header)
            .map_err(|e| invalid(format!("a message's flatbuffer does not verify: {e}")))?;
        match message.header_type() {
            arrow_ipc::MessageHeader::Schema => {
                let schema = mink_codec::schema_from_message(&data.data_header)
                    .map_err(|e| invalid(format!("the stream's schema: {e}")))?;
                self.schema_id = Some(choose_schema(&self.info, &schema)?);
                Ok(None)
            }
            arrow_ipc::MessageHeader::RecordBatch => {
                let schema_id = self
                    .schema_id
                    .ok_or_else(|| invalid("a record batch before the stream's schema"))?;
                let writer = writer_of(&data.app_metadata)?;
                let mut meta = BatchMeta::new(schema_id);
                if let Some((writer_id, sequence)) = writer {
                    meta = meta.with_writer(writer_id, sequence);
                }
                let batch =
                    mink_codec::batch_from_message(meta, &data.data_header, &data.data_body)
                        .map_err(|e| {
                            status(&crate::error::ApiError::InvalidBatch {
                                message: e.to_string(),
                            })
                        })?;
                // Compressed with the table's setting unless the client compressed it.
                let info = &self.info;
                let batch =
                    crate::format::compress_batches(Bytes::from(batch), info.compression(), |id| {
                        info.schemas.get(id)
                    })
                    .map_err(|e| status(&e))?;
                let held = self.flight.core.budget().reserve(batch.len())?;
                let rows = mink_codec::BatchView::new(&batch[..])
                    .map(|v| u64::try_from(v.record_count()).unwrap_or(0))
                    .unwrap_or(0);
                Ok(Some(Taken {
                    batch,
                    rows,
                    sequence: writer.map(|(_, s)| s),
                    schema_id,
                    _held: held,
                }))
            }
            arrow_ipc::MessageHeader::DictionaryBatch => Err(invalid(
                "dictionary-encoded columns are not supported: send plain arrays",
            )),
            other => Err(invalid(format!("a {other:?} message cannot be appended"))),
        }
    }
}

/// [`answer`] for an append's task, which ends the stream if the task itself failed.
async fn answer_joined(
    ended: Result<(Vec<Taken>, ApiResult<AppendOutcome>), tokio::task::JoinError>,
    results: &mpsc::Sender<Result<PutResult, Status>>,
) -> bool {
    match ended {
        Ok((taken, outcome)) => answer(taken, outcome, results).await,
        Err(error) => {
            let _ = results
                .send(Err(Status::internal(format!(
                    "an append's task failed: {error}"
                ))))
                .await;
            false
        }
    }
}

/// Sends one result per batch of an append, or its error; false once the stream is over.
async fn answer(
    taken: Vec<Taken>,
    outcome: ApiResult<AppendOutcome>,
    results: &mpsc::Sender<Result<PutResult, Status>>,
) -> bool {
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            let _ = results.send(Err(status(&error))).await;
            return false;
        }
    };
    for (taken, batch) in taken.iter().zip(&outcome.batches) {
        let put = Put {
            sequence: taken.sequence,
            base_offset: batch.base_offset,
            next_offset: batch.next_offset,
            commit_timestamp: batch.commit_timestamp,
            duplicate: batch.duplicate,
            schema_id: taken.schema_id,
        };
        let result = PutResult {
            app_metadata: serde_json::to_vec(&put).unwrap_or_default().into(),
        };
        if results.send(Ok(result)).await.is_err() {
            return false;
        }
    }
    true
}

/// The writer id and sequence a batch's `app_metadata` names, if any.
fn writer_of(app_metadata: &[u8]) -> Result<Option<(i64, i32)>, Status> {
    if app_metadata.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    if app_metadata.len() > 4096 {
        return Err(invalid("a batch's app_metadata is longer than 4096 bytes"));
    }
    let writer: Writer = serde_json::from_slice(app_metadata).map_err(|e| {
        invalid(format!(
            "a batch's app_metadata must be {{\"writer_id\", \"sequence\"}}: {e}"
        ))
    })?;
    match (writer.writer_id, writer.sequence) {
        (None, None) => Ok(None),
        (Some(id), Some(sequence)) if id >= 0 && sequence >= 0 => Ok(Some((id, sequence))),
        (Some(_), Some(_)) => Err(invalid("writer_id and sequence must not be negative")),
        _ => Err(invalid(
            "a batch's app_metadata names writer_id and sequence together, or neither",
        )),
    }
}

/// The newest of the table's schema versions `schema` matches (field names, types and
/// nullability; metadata aside), or INVALID_ARGUMENT naming the difference from the newest.
pub(crate) fn choose_schema(info: &TableInfo, schema: &Schema) -> Result<i16, Status> {
    let versions = info.schemas.all();
    for (id, version) in versions.iter().rev() {
        if difference(version, schema).is_none() {
            return Ok(*id);
        }
    }
    let Some((id, newest)) = versions.last() else {
        return Err(invalid("the table has no schema"));
    };
    let why = difference(newest, schema).unwrap_or_default();
    Err(invalid(format!(
        "the stream's schema matches none of table `{}`'s {} schema versions; against the newest ({id}): {why}",
        info.name(),
        versions.len()
    )))
}

/// How `got` differs from `want`, or `None` when they match.
fn difference(want: &Schema, got: &Schema) -> Option<String> {
    for (i, field) in want.fields().iter().enumerate() {
        let Some(other) = got.fields().get(i) else {
            return Some(format!(
                "column {i} `{}` is missing (the stream has {} columns)",
                field.name(),
                got.fields().len()
            ));
        };
        if other.name() != field.name() {
            return Some(format!(
                "column {i} is `{}` in the stream and `{}` in the table",
                other.name(),
                field.name()
            ));
        }
        if other.data_type() != field.data_type() {
            return Some(format!(
                "column `{}` is {} in the stream and {} in the table",
                field.name(),
                other.data_type(),
                field.data_type()
            ));
        }
        if other.is_nullable() != field.is_nullable() {
            return Some(format!(
                "column `{}` is {} in the stream and {} in the table",
                field.name(),
                nullability(other.is_nullable()),
                nullability(field.is_nullable())
            ));
        }
    }
    got.fields()
        .get(want.fields().len())
        .map(|extra| format!("the stream has a column `{}` the table lacks", extra.name()))
}

fn nullability(nullable: bool) -> &'static str {
    if nullable { "nullable" } else { "not nullable" }
}

#[cfg(test)]
mod tests {
    use arrow_schema::{DataType, Field};

    use super::*;

    #[test]
    fn schemas_differ_by_name_type_nullability_or_width() {
        let want = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("msg", DataType::Utf8, true),
        ]);
        assert_eq!(difference(&want, &want), None);
        let case = |fields: Vec<Field>| difference(&want, &Schema::new(fields)).unwrap();
        assert!(case(vec![Field::new("id", DataType::Int64, false)]).contains("missing"));
        assert!(
            case(vec![
                Field::new("id", DataType::Int32, false),
                Field::new("msg", DataType::Utf8, true)
            ])
            .contains("Int32 in the stream and Int64")
        );
        assert!(
            case(vec![
                Field::new("id", DataType::Int64, true),
                Field::new("msg", DataType::Utf8, true)
            ])
            .contains("nullable in the stream and not nullable")
        );
        assert!(
            case(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("msg", DataType::Utf8, true),
                Field::new("x", DataType::Utf8, true)
            ])
            .contains("`x` the table lacks")
        );
    }

    #[test]
    fn app_metadata_names_a_writer_and_sequence_together_or_nothing() {
        assert_eq!(writer_of(b"").unwrap(), None);
        assert_eq!(writer_of(b"{}").unwrap(), None);
        assert_eq!(
            writer_of(br#"{"writer_id":3,"sequence":0}"#).unwrap(),
            Some((3, 0))
        );
        assert!(writer_of(br#"{"writer_id":3}"#).is_err());
        assert!(writer_of(br#"{"writer_id":-1,"sequence":0}"#).is_err());
        assert!(writer_of(br#"{"writer_id":3,"sequence":0,"x":1}"#).is_err());
        assert!(writer_of(b"garbage").is_err());
        assert!(writer_of(&[b' '; 5000]).unwrap().is_none());
    }
}
