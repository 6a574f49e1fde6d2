//! DoGet: one bucket's rows from a ticket, in order, optionally following the tail.
//!
//! The stream opens with the schema of the first batch sent (projected to the ticket's
//! `columns`; the table's newest when no batch comes), then one message per batch with
//! `app_metadata` `{"base_offset", "next_offset"}`. A stored batch wholly inside the range goes
//! out as stored: its Arrow message's flatbuffer and body are sliced from the stored bytes, not
//! decoded (the tablet has projected it already when `columns` is given); only a batch cut by
//! the range's ends is decoded, sliced and encoded again.
//!
//! One stream has one schema: at a batch of another schema version the stream ends with a
//! message holding only `{"next_offset", "end": "schema_changed", "schema_id"}`; a new DoGet
//! from that offset continues in the new version.
//!
//! Without `live` the stream ends at `until`, or at the high watermark as it was when the
//! DoGet began. With `live` it parks at the tail (`TailPark`) and sends each batch once it is
//! durable; when nothing came for `flight.heartbeat_interval_ms` it sends a message with only
//! `{"high_watermark", "next_offset"}`. It ends cleanly (OK) at `until`, when the node shuts
//! down or the log is closed here; when the bucket moved to another node it ends UNAVAILABLE
//! with `mink-location` (the new owner's Flight URL) and `mink-next-offset`, where a new DoGet
//! resumes with nothing lost or repeated.

use std::sync::Arc;
use std::time::Instant;

use arrow_flight::{FlightData, SchemaAsIpc};
use arrow_ipc::writer::IpcWriteOptions;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use mink_codec::{BatchMeta, BatchView};
use serde_json::json;
use tokio::sync::mpsc;
use tonic::Status;

use super::address::Ticket;
use super::state::{Flight, LivePlace};
use super::status::{LOCATION, NEXT_OFFSET, set, status};
use crate::auth::{Action, Principal};
use crate::bucket_log::{BucketLog, LogKey, TailPark, Woken};
use crate::catalog::TableInfo;
use crate::error::{ApiError, ApiResult};
use crate::format;

/// Messages a DoGet may have ready ahead of the client.
const AHEAD: usize = 4;

/// Starts a DoGet and returns its stream.
pub(crate) async fn do_get(
    flight: Arc<Flight>,
    principal: Principal,
    ticket: Ticket,
) -> Result<super::state::Stream<FlightData>, Status> {
    principal.check(Action::Read, Some(&ticket.table))?;
    let core = &flight.core;
    let info = core.catalog().get(&ticket.table).await?;
    let address = ticket.address();
    let log = flight.open(&info, &address).await?;
    let key = core.log_key(&info, address.bucket, &address.partition)?;
    if let Some(columns) = &ticket.columns {
        let limit = core.settings().limits.max_columns;
        if columns.len() > limit as usize {
            return Err(status(&ApiError::invalid(
                "bad_request",
                format!(
                    "{} columns asked for; a table has at most {limit}",
                    columns.len()
                ),
            )));
        }
        let latest = info.schemas.latest().map_or(0, |(id, _)| id);
        info.read_schema(latest, Some(columns))?;
    }
    let live = match ticket.live {
        true => Some(flight.live_place()?),
        false => None,
    };
    let offsets = log.offsets();
    let from = ticket.offset.unwrap_or(offsets.log_start);
    if from < offsets.log_start {
        return Err(status(&ApiError::OffsetTrimmed {
            offset: from,
            log_start: offsets.log_start,
        }));
    }
    if from > offsets.high_watermark {
        return Err(status(&ApiError::OffsetOutOfRange {
            offset: from,
            high_watermark: offsets.high_watermark,
        }));
    }
    let until = match (ticket.until, ticket.live) {
        (Some(until), _) => Some(until),
        (None, true) => None,
        (None, false) => Some(offsets.high_watermark),
    };
    let (sender, receiver) = mpsc::channel(AHEAD);
    let reader = Reader {
        flight: flight.clone(),
        info,
        log,
        key,
        columns: ticket.columns,
        next: from,
        until,
        schema_id: None,
        live,
        tail: None,
        sender,
    };
    tokio::spawn(reader.run());
    Ok(super::state::receiver_stream(receiver))
}

/// The work of one DoGet.
struct Reader {
    flight: Arc<Flight>,
    info: Arc<TableInfo>,
    log: Arc<dyn BucketLog>,
    key: LogKey,
    columns: Option<Vec<String>>,
    /// The next offset sent.
    next: u64,
    until: Option<u64>,
    /// The schema version of the stream, once its schema was sent.
    schema_id: Option<i16>,
    /// This stream's place under `flight.max_live_streams`, when live.
    live: Option<LivePlace>,
    /// What the stream waits on at the tail, taken when it first parks: the log's tail, the
    /// node's shutdown and the heartbeat's timer.
    tail: Option<TailPark>,
    sender: mpsc::Sender<Result<FlightData, Status>>,
}

/// Why a DoGet stopped sending.
enum Stop {
    /// It is complete (or the client left).
    Done,
    /// It ends with this status.
    Failed(Status),
}

impl From<ApiError> for Stop {
    fn from(error: ApiError) -> Self {
        Stop::Failed(status(&error))
    }
}

impl Reader {
    async fn run(mut self) {
        if let Err(Stop::Failed(status)) = self.send_all().await {
            let _ = self.sender.send(Err(status)).await;
        }
    }

    async fn send_all(&mut self) -> Result<(), Stop> {
        let core = self.flight.core.clone();
        let read_bytes = core.settings().flight.read_bytes;
        let heartbeat = core.settings().flight.heartbeat_interval;
        let mut parked = false;
        loop {
            if self.until.is_some_and(|until| self.next >= until) {
                return self.ensure_schema(None).await.map(drop);
            }
            let chunk = match core
                .read(
                    self.log.as_ref(),
                    self.next,
                    self.until,
                    self.columns.as_deref(),
                    read_bytes,
                )
                .await
            {
                Ok(chunk) => chunk,
                Err(_) if self.log.is_closed() => return self.closed().await,
                Err(error) => return Err(error.into()),
            };
            if chunk.batches.is_empty() {
                self.ensure_schema(None).await?;
                if self.until.is_some() && !self.is_live() {
                    return Ok(());
                }
                let due = Instant::now() + heartbeat;
                let tail = self.tail.get_or_insert_with(|| {
                    TailPark::new(self.log.watch_tail(), core.shutdown_signal(), due)
                });
                let woken = tokio::select! {
                    woken = tail.park(self.next, due) => woken,
                    () = self.sender.closed() => return Err(Stop::Done),
                };
                let hw = match woken {
                    Woken::Past(hw) => hw,
                    Woken::Due => tail.high_watermark(),
                    Woken::Shutdown => return Ok(()),
                    Woken::Closed => return self.closed().await,
                };
                if self.log.is_closed() {
                    return self.closed().await;
                }
                parked = true;
                if hw <= self.next {
                    let beat = json!({"high_watermark": hw, "next_offset": self.next});
                    self.send(FlightData::new().with_app_metadata(beat.to_string()))
                        .await?;
                }
                continue;
            }
            if std::mem::take(&mut parked) {
                core.delivered_to_parked(&chunk);
            }
            for batch in chunk.batches {
                let schema_id = format::schema_id_of(&batch)?;
                if self.schema_id.is_some_and(|id| id != schema_id) {
                    let end = json!({"next_offset": self.next, "end": "schema_changed", "schema_id": schema_id});
                    self.send(FlightData::new().with_app_metadata(end.to_string()))
                        .await?;
                    return Ok(());
                }
                let schema = self.ensure_schema(Some(schema_id)).await?;
                if let Some(data) = self.batch_data(&batch, &schema)? {
                    self.send(data).await?;
                }
            }
            self.next = self.next.max(chunk.next_offset);
        }
    }

    fn is_live(&self) -> bool {
        self.live.is_some()
    }

    /// The log was closed here: the bucket moved (UNAVAILABLE with where to resume) or the
    /// node is stopping (the stream is complete).
    async fn closed(&mut self) -> Result<(), Stop> {
        if self.flight.is_local(&self.key) {
            return Ok(());
        }
        let mut s = Status::unavailable(format!(
            "bucket {} moved to another node; resume from offset {} there",
            self.key, self.next
        ));
        set(&mut s, super::status::ERROR_KIND, "moved");
        set(&mut s, NEXT_OFFSET, &self.next.to_string());
        if let Some(url) = self.flight.location(&self.key) {
            set(&mut s, LOCATION, &url);
        }
        Err(Stop::Failed(s))
    }

    /// Sends the stream's schema if it was not sent yet: that of `schema_id`, or the table's
    /// newest; returns the stream's schema.
    async fn ensure_schema(&mut self, schema_id: Option<i16>) -> Result<SchemaRef, Stop> {
        let id = match (self.schema_id, schema_id) {
            (Some(id), _) | (None, Some(id)) => id,
            (None, None) => self.info.schemas.latest().map_or(0, |(id, _)| id),
        };
        let schema = self.info.read_schema(id, self.columns.as_deref())?;
        if self.schema_id.is_none() {
            let options = IpcWriteOptions::default();
            self.send(FlightData::from(SchemaAsIpc::new(&schema, &options)))
                .await?;
            self.schema_id = Some(id);
        }
        Ok(schema)
    }

    /// The message of one stored batch within `[next, until)`, or `None` for one with no rows
    /// there.
    fn batch_data(
        &mut self,
        batch: &Bytes,
        schema: &SchemaRef,
    ) -> Result<Option<FlightData>, Stop> {
        let base = format::base_offset_of(batch)?;
        let after = format::next_offset_of(batch)?;
        let start = self.next.max(base);
        let end = self.until.map_or(after, |until| until.min(after));
        if end <= start {
            return Ok(None);
        }
        let data = if start == base && end == after {
            message_of(batch)?
        } else {
            // Cut by the range: only these rows, encoded again.
            let Some(rows) = format::decode_batch(batch, schema)? else {
                return Ok(None);
            };
            let offset = usize::try_from(start - base).unwrap_or(0);
            let len = usize::try_from(end - start).unwrap_or(0);
            let cut = format::encode_rows(&rows.slice(offset, len), BatchMeta::new(0), None)?;
            message_of(&cut)?
        };
        self.next = end;
        let meta = json!({"base_offset": start, "next_offset": end});
        Ok(Some(data.with_app_metadata(meta.to_string())))
    }

    async fn send(&self, data: FlightData) -> Result<(), Stop> {
        self.sender.send(Ok(data)).await.map_err(|_| Stop::Done)
    }
}

/// A stored batch's Arrow message as FlightData, sliced from the batch's bytes (not checked
/// again: it was validated when appended and its block when read, as HTTP sends stored batches).
fn message_of(batch: &Bytes) -> ApiResult<FlightData> {
    let corrupt = |e: mink_codec::Error| ApiError::Internal {
        message: format!("a stored batch does not hold together: {e}"),
    };
    let view = BatchView::new(batch.clone()).map_err(corrupt)?;
    let (header, body) =
        view.message_parts()
            .map_err(corrupt)?
            .ok_or_else(|| ApiError::Internal {
                message: "a stored batch with rows has no Arrow message".to_owned(),
            })?;
    Ok(FlightData::new()
        .with_data_header(batch.slice(header))
        .with_data_body(batch.slice(body)))
}
