//! PUT (create), POST (append, close) and DELETE of a stream, and the dispatch of every method
//! of a stream's URL (docs/durable-streams.md, "Appends and producers").

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use mink_codec::BatchMeta;
use mink_metadata::StreamConfig;

use super::answer::{
    self, CLOSED, PRODUCER_EPOCH, PRODUCER_EXPECTED, PRODUCER_RECEIVED, PRODUCER_SEQ, Refusal,
};
use super::config::{self, Mode};
use super::messages;
use super::names;
use super::opened::{self, Opened, now_ms};
use super::request::Request;
use super::streams::Tail;
use crate::budget::Budget;
use crate::catalog::TableOptions;
use crate::error::ApiError;
use crate::format::{self, schema::JsonSchema};
use crate::http::body;

/// A producer's headers.
#[derive(Debug, Clone)]
struct Producer {
    name: String,
    epoch: i16,
    seq: i32,
}

impl Request<'_> {
    async fn body(
        &self,
        budget: &Arc<Budget>,
        body: Body,
    ) -> Result<(Bytes, crate::budget::Permit), Refusal> {
        let limit = self.core.settings().ds.max_append_bytes;
        let stall = self.core.settings().http.idle_timeout;
        Ok(body::read(body, limit, budget, stall).await?)
    }

    /// PUT: creates the stream (201), or finds it as asked (200), or another one there (409).
    pub(crate) async fn create(
        &self,
        budget: &Arc<Budget>,
        body: Body,
        uri: &axum::http::Uri,
    ) -> Result<Response, Refusal> {
        let now = now_ms(self.core);
        let (asked, close) = config::requested(self.headers, now)?;
        let (body, _permit) = self.body(budget, body).await?;
        let table = names::table_of(self.name)?;
        let mode = Mode::of(&asked.content_type);
        let messages = messages::split(mode, &body)?;
        if let Some(response) = self.existing(&asked).await? {
            return Ok(response);
        }
        // In a cluster the stream's bucket is placed when it is created: the request goes to
        // that node first, so the initial messages are appended where the stream lives.
        if let Some(node) = self.core.catalog().first_bucket_node(&table)
            && node.node_id != self.core.settings().node_id
            && self.redirected_by != Some(node.node_id.as_str())
            && !node.http_url.is_empty()
        {
            return Err(ApiError::Moved {
                owner: node.http_url,
            }
            .into());
        }
        let schema = JsonSchema::from_arrow(&config::schema(mode));
        let options = TableOptions {
            stream: Some(asked.clone()),
            ..TableOptions::default()
        };
        let created = self
            .core
            .catalog()
            .create(&table, &schema, 1, vec!["default".to_owned()], options)
            .await;
        match created {
            Ok(_) => {}
            Err(ApiError::TableExists { .. }) => {
                // Created meanwhile by another request: as if it had come first.
                if let Some(response) = self.existing(&asked).await? {
                    return Ok(response);
                }
                return Err(ApiError::Conflict {
                    message: format!("stream `{}` was created and deleted meanwhile", self.name),
                }
                .into());
            }
            Err(e) => return Err(e.into()),
        }
        let opened = match self.open().await {
            Ok(opened) => opened,
            Err(refusal) if !messages.is_empty() || close => {
                // Placed elsewhere after all (the nodes' views of the cluster differed): the
                // initial messages cannot be appended in this request, so it changes nothing.
                tracing::info!(
                    stream = self.name,
                    "a new stream was placed on another node; undoing its create"
                );
                match self.core.drop_table(&table).await {
                    Ok(()) | Err(ApiError::TableNotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
                return Err(ApiError::Unavailable {
                    message: format!(
                        "stream `{}` was placed on another node while it was created \
                             (status {}); retry",
                        self.name,
                        refusal.status_code()
                    ),
                }
                .into());
            }
            Err(refusal) => return Err(refusal),
        };
        let mut tail_offset = opened.log.offsets().high_watermark;
        if !messages.is_empty() || close {
            let rows = messages::rows(mode, &messages, None, close)?;
            let outcome = self
                .core
                .append(opened.log.as_ref(), encode(&opened, &rows, None)?)
                .await?;
            tail_offset = outcome.last_offset + 1;
            let mut tail = opened.stream.tail.lock().await;
            let tail = opened
                .stream
                .tail_of(self.core, &opened.log, mode, &mut tail)
                .await?;
            tail.closed = close;
        }
        let mut response = StatusCode::CREATED.into_response();
        let h = response.headers_mut();
        answer::set(h, header::CONTENT_TYPE, &asked.content_type);
        answer::set_offset(h, tail_offset);
        if close {
            answer::set(h, CLOSED, "true");
        }
        let scheme = if self.core.settings().http.tls.enabled() {
            "https"
        } else {
            "http"
        };
        if let Some(host) = self.headers.get(header::HOST).and_then(|v| v.to_str().ok()) {
            answer::set(
                h,
                header::LOCATION,
                &format!("{scheme}://{host}{}", uri.path()),
            );
        }
        Ok(response)
    }

    /// The answer to a PUT when the stream exists: 200 when it is as asked, else 409.
    async fn existing(&self, asked: &StreamConfig) -> Result<Option<Response>, Refusal> {
        let opened = match self.open().await {
            Ok(opened) => opened,
            Err(refusal) if refusal_is_not_found(&refusal) => return Ok(None),
            Err(refusal) => return Err(refusal),
        };
        if !config::matches(&opened.config, asked) {
            return Err(ApiError::Conflict {
                message: format!(
                    "stream `{}` exists with another configuration (content type `{}`)",
                    self.name, opened.config.content_type
                ),
            }
            .into());
        }
        let closed = opened.closed(self.core).await?;
        let mut response = StatusCode::OK.into_response();
        let h = response.headers_mut();
        answer::set(h, header::CONTENT_TYPE, &opened.config.content_type);
        answer::set_offset(h, opened.log.offsets().high_watermark);
        if closed {
            answer::set(h, CLOSED, "true");
        }
        Ok(Some(response))
    }

    /// DELETE: the stream and its messages go (204).
    pub(crate) async fn delete(&self) -> Result<Response, Refusal> {
        let opened = self.open().await?;
        let record = opened.info.record();
        self.core.drop_table(&record.name).await?;
        self.streams.forget(&record.name);
        opened::delete_producers(self.core, &record).await;
        Ok(StatusCode::NO_CONTENT.into_response())
    }

    /// POST: appends the body's messages, closing the stream after them with `Stream-Closed`.
    pub(crate) async fn append(
        &self,
        budget: &Arc<Budget>,
        body: Body,
    ) -> Result<Response, Refusal> {
        let close = config::closed(self.headers)?;
        let producer = producer(self.headers)?;
        let stream_seq = config::header_text(self.headers, "stream-seq")?.map(str::to_owned);
        let (body, _permit) = self.body(budget, body).await?;
        let opened = self.open().await?;
        if body.is_empty() && !close {
            return Err(
                ApiError::bad_request("an append needs a body (or Stream-Closed: true)").into(),
            );
        }
        let mut messages = Vec::new();
        if !body.is_empty() {
            let Some(content_type) = config::content_type(self.headers)? else {
                return Err(ApiError::bad_request("an append needs a Content-Type").into());
            };
            if !config::same_type(&content_type, &opened.config.content_type) {
                return Err(ApiError::Conflict {
                    message: format!(
                        "the stream's content type is `{}`, not `{content_type}`",
                        opened.config.content_type
                    ),
                }
                .into());
            }
            messages = messages::split(opened.mode, &body)?;
            if messages.is_empty() {
                return Err(ApiError::bad_request("an empty JSON array appends nothing").into());
            }
        }
        let writer = match &producer {
            Some(p) => {
                let id = self
                    .streams
                    .producer(
                        self.core,
                        &opened.stream,
                        &opened.info.record().key_segment(),
                        &p.name,
                    )
                    .await?;
                Some((id, p))
            }
            None => None,
        };
        let stream = opened.stream.clone();
        let mut guard = stream.tail.lock().await;
        let tail = stream
            .tail_of(self.core, &opened.log, opened.mode, &mut guard)
            .await?
            .clone();
        if let Some((id, p)) = writer
            && let Some(answer) = known_producer(&opened, id, p, &tail)
        {
            return answer;
        }
        if tail.closed {
            return closed_answer(&opened, writer, &tail, close && body.is_empty());
        }
        let seq = match (&stream_seq, &tail.last_seq) {
            (Some(new), Some(last)) if new.as_bytes() <= last.as_bytes() => {
                return Err(ApiError::Conflict {
                    message: format!("Stream-Seq `{new}` is not after the last one, `{last}`"),
                }
                .into());
            }
            (Some(new), _) => Some(new.clone()),
            (None, last) => last.clone(),
        };
        let rows = messages::rows(opened.mode, &messages, seq.as_deref(), close)?;
        let batch = encode(&opened, &rows, writer.map(|(id, p)| (id, p.epoch, p.seq)))?;
        let changes_tail = close || stream_seq.is_some();
        let outcome = if changes_tail {
            // Held until durable: the next append's checks see this one's effect.
            let outcome = self.core.append(opened.log.as_ref(), batch).await;
            if outcome.as_ref().is_ok_and(|o| !o.duplicate)
                && let Some(t) = guard.as_mut()
            {
                t.closed = close;
                t.last_seq = seq.clone();
                t.closed_by = writer.filter(|_| close).and_then(|(id, p)| {
                    mink_codec::writer_field(i64::try_from(id).ok()?, p.epoch).map(|f| (f, p.seq))
                });
            }
            drop(guard);
            outcome
        } else {
            // Held until placed: order kept, durability awaited outside.
            let (placed, on_placed) = tokio::sync::oneshot::channel();
            let append = self
                .core
                .append_then(opened.log.as_ref(), batch, Some(placed));
            tokio::pin!(append);
            tokio::select! {
                biased;
                outcome = &mut append => outcome,
                _ = on_placed => {
                    drop(guard);
                    append.await
                }
            }
        };
        opened.stream.touch(now_ms(self.core));
        self.answer_append(&opened, outcome, writer, close, messages.is_empty())
    }

    fn answer_append(
        &self,
        opened: &Opened,
        outcome: Result<crate::bucket_log::AppendOutcome, ApiError>,
        writer: Option<(u64, &Producer)>,
        close: bool,
        close_only: bool,
    ) -> Result<Response, Refusal> {
        let p = writer.map(|(id, p)| (id, p.clone()));
        let outcome = match (outcome, &p) {
            (Ok(o), _) => o,
            (Err(ApiError::StaleWriterEpoch { current, .. }), Some(_)) => {
                return Err(stale_epoch(current));
            }
            (
                Err(ApiError::OutOfOrderSequence {
                    expected, sequence, ..
                }),
                Some((id, p)),
            ) => {
                if expected == 0 && sequence != 0 {
                    return Err(ApiError::bad_request(format!(
                        "a new Producer-Epoch starts at Producer-Seq 0, not {sequence}"
                    ))
                    .into());
                }
                if sequence < expected {
                    // Accepted earlier in this epoch.
                    remember(opened, *id, p.epoch, expected - 1);
                    return Ok(producer_answer(
                        StatusCode::NO_CONTENT,
                        opened.log.offsets().high_watermark,
                        p.epoch,
                        expected - 1,
                        close,
                    ));
                }
                return Err(Refusal::with(
                    ApiError::OutOfOrderSequence {
                        writer_id: i64::try_from(*id).unwrap_or(-1),
                        sequence,
                        expected,
                    },
                    &[
                        (PRODUCER_EXPECTED, expected.to_string()),
                        (PRODUCER_RECEIVED, sequence.to_string()),
                    ],
                ));
            }
            (Err(e), _) => return Err(e.into()),
        };
        let next = if outcome.duplicate {
            opened.log.offsets().high_watermark
        } else {
            outcome.last_offset + 1
        };
        Ok(match p {
            Some((id, p)) => {
                let highest = remember(opened, id, p.epoch, p.seq);
                // 200 when messages were appended; a close alone, like a retry, has no content.
                let status = if outcome.duplicate || close_only {
                    StatusCode::NO_CONTENT
                } else {
                    StatusCode::OK
                };
                producer_answer(status, next, p.epoch, highest, close)
            }
            None => {
                let mut response = StatusCode::NO_CONTENT.into_response();
                answer::set_offset(response.headers_mut(), next);
                if close {
                    answer::set(response.headers_mut(), CLOSED, "true");
                }
                response
            }
        })
    }
}

fn refusal_is_not_found(refusal: &Refusal) -> bool {
    refusal.status_code() == StatusCode::NOT_FOUND
}

/// The stored batch of `rows` in the stream's newest schema, with the producer's writer.
fn encode(
    opened: &Opened,
    rows: &arrow_array::RecordBatch,
    writer: Option<(u64, i16, i32)>,
) -> Result<Bytes, Refusal> {
    let schema_id = opened.info.schemas.latest().map_or(1, |(id, _)| id);
    let mut meta = BatchMeta::new(schema_id);
    if let Some((id, epoch, seq)) = writer {
        let field = i64::try_from(id)
            .ok()
            .and_then(|id| mink_codec::writer_field(id, epoch))
            .ok_or_else(|| ApiError::Internal {
                message: format!("writer id {id} at epoch {epoch} does not fit a batch"),
            })?;
        meta = meta.with_writer(field, seq);
    }
    Ok(format::encode_rows(rows, meta, opened.info.compression())?)
}

/// The answer for a producer this node saw, when the protocol answers before any other check:
/// a stale epoch (403) or a retry of an accepted sequence (204).
fn known_producer(
    opened: &Opened,
    id: u64,
    p: &Producer,
    tail: &Tail,
) -> Option<Result<Response, Refusal>> {
    let (epoch, highest) = *opened.stream.producers.lock().get(&id)?;
    if p.epoch < epoch {
        return Some(Err(stale_epoch(epoch)));
    }
    (p.epoch == epoch && p.seq <= highest).then(|| {
        Ok(producer_answer(
            StatusCode::NO_CONTENT,
            opened.log.offsets().high_watermark,
            p.epoch,
            highest,
            tail.closed,
        ))
    })
}

/// The answer to an append to a closed stream: 204 for a retry of the close (the same producer
/// tuple, or a close-only request without one), else 409 with `Stream-Closed`.
fn closed_answer(
    opened: &Opened,
    writer: Option<(u64, &Producer)>,
    tail: &Tail,
    close_only: bool,
) -> Result<Response, Refusal> {
    let end = opened.log.offsets().high_watermark;
    let retry = match writer {
        Some((id, p)) => {
            let field = i64::try_from(id)
                .ok()
                .and_then(|id| mink_codec::writer_field(id, p.epoch));
            tail.closed_by.is_some() && field.map(|f| (f, p.seq)) == tail.closed_by
        }
        None => close_only,
    };
    if retry {
        let mut response = StatusCode::NO_CONTENT.into_response();
        let h = response.headers_mut();
        answer::set_offset(h, end);
        answer::set(h, CLOSED, "true");
        if let Some((_, p)) = writer {
            answer::set(h, PRODUCER_EPOCH, &p.epoch.to_string());
            answer::set(h, PRODUCER_SEQ, &p.seq.to_string());
        }
        return Ok(response);
    }
    Err(Refusal::with(
        ApiError::Conflict {
            message: "the stream is closed".to_owned(),
        },
        &[
            (CLOSED, "true".to_owned()),
            (answer::NEXT_OFFSET, super::offsets::render(end)),
        ],
    ))
}

fn stale_epoch(current: i16) -> Refusal {
    Refusal::with(
        ApiError::Forbidden {
            message: format!("Producer-Epoch is stale: the producer is at epoch {current}"),
        },
        &[(PRODUCER_EPOCH, current.to_string())],
    )
    .status(StatusCode::FORBIDDEN)
}

/// Records what the producer had accepted; returns its highest accepted sequence.
fn remember(opened: &Opened, id: u64, epoch: i16, seq: i32) -> i32 {
    let mut producers = opened.stream.producers.lock();
    let entry = producers.entry(id).or_insert((epoch, seq));
    if entry.0 != epoch {
        *entry = (epoch, seq);
    } else {
        entry.1 = entry.1.max(seq);
    }
    entry.1
}

fn producer_answer(
    status: StatusCode,
    next: u64,
    epoch: i16,
    highest: i32,
    closed: bool,
) -> Response {
    let mut response = status.into_response();
    let h = response.headers_mut();
    answer::set_offset(h, next);
    answer::set(h, PRODUCER_EPOCH, &epoch.to_string());
    answer::set(h, PRODUCER_SEQ, &highest.to_string());
    if closed {
        answer::set(h, CLOSED, "true");
    }
    response
}

/// The producer headers: all three or none (400), the epoch within the writer epoch's range and
/// the sequence within a batch sequence's.
fn producer(headers: &HeaderMap) -> Result<Option<Producer>, Refusal> {
    let id = config::header_text(headers, "producer-id")?;
    let epoch = config::header_text(headers, "producer-epoch")?;
    let seq = config::header_text(headers, "producer-seq")?;
    let (id, epoch, seq) = match (id, epoch, seq) {
        (None, None, None) => return Ok(None),
        (Some(id), Some(epoch), Some(seq)) => (id, epoch, seq),
        _ => {
            return Err(ApiError::bad_request(
                "Producer-Id, Producer-Epoch and Producer-Seq go together",
            )
            .into());
        }
    };
    if id.is_empty() {
        return Err(ApiError::bad_request("Producer-Id is empty").into());
    }
    let epoch = integer("Producer-Epoch", epoch)?;
    let seq = integer("Producer-Seq", seq)?;
    let epoch = i16::try_from(epoch).map_err(|_| {
        ApiError::bad_request(format!(
            "Producer-Epoch {epoch} is past this server's 32767"
        ))
    })?;
    let seq = i32::try_from(seq).map_err(|_| {
        ApiError::bad_request(format!(
            "Producer-Seq {seq} is past this server's 2147483647"
        ))
    })?;
    Ok(Some(Producer {
        name: id.to_owned(),
        epoch,
        seq,
    }))
}

/// A non-negative decimal integer of at most 2^53 - 1, as the protocol allows.
fn integer(name: &str, text: &str) -> Result<u64, Refusal> {
    let value = (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse::<u64>().ok())
        .flatten()
        .filter(|v| *v < 1 << 53);
    value.ok_or_else(|| {
        ApiError::bad_request(format!("{name} `{text}` is not a non-negative integer")).into()
    })
}
