//! Reading a bucket over HTTP: the read query, where a read starts, the schema batches decode
//! with, and the range read with its long-poll (SSE, in `sse.rs`, shares the rest).
//!
//! Read responses carry the position in headers:
//!
//! | Header | Meaning |
//! |---|---|
//! | `Mink-Next-Offset` | where the next read continues |
//! | `Mink-High-Watermark` | everything below is durable and readable |
//! | `Mink-Log-Start` | the oldest retained offset |
//! | `Mink-Up-To-Date: true` | present when the response reaches the high watermark |
//!
//! A read at the high watermark answers at once, 200 with an empty body and the up-to-date
//! marker. With `live=long-poll` it parks until new data is durable, the log closes, or the
//! timeout lapses (then 204 with the same headers); a long-poll that would park past the
//! parked-read limits (`parked.rs`) is refused with 429.
//!
//! NDJSON and Arrow bodies hold the rows from `offset` (which may fall inside a stored batch) up
//! to `until`, stop once they have rendered `http.max_render_bytes` (plus one piece of rows), and
//! stream; `Mink-Next-Offset` is the first row not sent. Mink batches are sent as stored, whole.

use std::net::IpAddr;
use std::sync::Arc;

use arrow_schema::SchemaRef;
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;

use super::extract::millis;
use super::headers::position_headers;
use super::parked::{ParkedRead, ParkedReads};
use super::pieces::Pieces;
use super::shared_renders::{BodyKey, MAX_SHARED_STORED_BYTES, RenderedBody, SharedBodies};
use crate::bucket_log::{BucketLog, LogOffsets, ReadChunk};
use crate::catalog::TableInfo;
use crate::core::NodeCore;
use crate::error::{ApiError, ApiResult};
use crate::format::{self, Format, StoredRows};
use crate::settings::HttpSettings;

/// Query of a read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadQuery {
    pub(crate) partition: Option<String>,
    /// A number, or `now` for the high watermark; default the log start.
    pub(crate) offset: Option<String>,
    pub(crate) until: Option<u64>,
    pub(crate) max_bytes: Option<usize>,
    /// Comma-separated column names.
    pub(crate) columns: Option<String>,
    /// `long-poll` or `sse`.
    pub(crate) live: Option<String>,
    pub(crate) timeout_ms: Option<u64>,
}

impl ReadQuery {
    pub(crate) fn columns(&self) -> Option<Vec<String>> {
        self.columns.as_ref().map(|c| {
            c.split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        })
    }

    /// The `max_bytes` asked for, else the default, within the node's limits.
    pub(crate) fn max_bytes(&self, http: &HttpSettings) -> usize {
        self.max_bytes
            .unwrap_or(http.default_read_bytes)
            .clamp(1, http.max_read_bytes)
    }
}

/// Where a read starts.
pub(crate) fn start_offset(asked: Option<&str>, offsets: LogOffsets) -> ApiResult<u64> {
    match asked.map(str::trim) {
        None | Some("") => Ok(offsets.log_start),
        Some("now") => Ok(offsets.high_watermark),
        Some(n) => n
            .parse()
            .map_err(|_| ApiError::bad_request(format!("offset `{n}` is not a number (or `now`)"))),
    }
}

/// Where a read that parks takes its place: the node's parked-read limits, and the client.
pub(crate) struct Parking {
    pub(crate) reads: Arc<ParkedReads>,
    /// The peer's address, when the connection has one.
    pub(crate) client: Option<IpAddr>,
}

impl Parking {
    /// A place for one parked read, or 429 `too_many_requests`.
    pub(crate) fn admit(&self) -> ApiResult<ParkedRead> {
        self.reads.admit(self.client)
    }
}

/// A range read, parking at the tail for `live=long-poll`.
pub(crate) async fn serve(
    core: &NodeCore,
    info: &TableInfo,
    log: &Arc<dyn BucketLog>,
    q: &ReadQuery,
    format: Format,
    parking: &Parking,
) -> ApiResult<Response> {
    let http = &core.settings().http;
    let from = start_offset(q.offset.as_deref(), log.offsets())?;
    let max_bytes = q.max_bytes(http);
    let columns = q.columns();
    let mut chunk = core
        .read(log.as_ref(), from, q.until, columns.as_deref(), max_bytes)
        .await?;
    let mut status = StatusCode::OK;
    let mut delivered = false;
    if chunk.batches.is_empty()
        && q.live.as_deref().map(str::trim) == Some("long-poll")
        && q.until.is_none_or(|u| from < u)
    {
        let timeout = millis(
            q.timeout_ms,
            http.long_poll_timeout,
            http.max_long_poll_timeout,
        );
        let place = parking.admit()?;
        let parked = core.metrics().park();
        tokio::select! {
            _ = log.wait_past(from, timeout) => {}
            _ = core.shutdown_signal().cancelled() => {}
        }
        drop(parked);
        drop(place);
        if log.offsets().high_watermark > from {
            let range = (from, q.until);
            if let Some(kept) = rendered(
                &parking.reads.bodies,
                log,
                format,
                &columns,
                range,
                max_bytes,
            ) {
                // Another long-poll parked at this offset read and rendered what comes next.
                core.delivered_shared(kept.stored_bytes, kept.commit_timestamps.iter().copied());
                let body = Pieces::body(kept.pieces.iter().cloned());
                return Ok(respond(StatusCode::OK, body, kept.next_offset, log, format));
            }
            chunk = core
                .read(log.as_ref(), from, q.until, columns.as_deref(), max_bytes)
                .await?;
            core.delivered_to_parked(&chunk);
            delivered = true;
        }
        if chunk.batches.is_empty() {
            status = StatusCode::NO_CONTENT;
        }
    }
    let range = (from, q.until);
    let (body, next_offset) = if delivered && shares(&chunk, format) {
        // Every long-poll parked at this offset reads the same batches at once.
        render_shared(
            &parking.reads.bodies,
            log,
            info,
            chunk,
            format,
            columns,
            range,
            http,
        )?
    } else {
        render(
            info,
            chunk,
            format,
            columns.as_deref(),
            range,
            http.max_render_bytes,
        )?
    };
    Ok(respond(status, body, next_offset, log, format))
}

/// The response of a read: `body` in `format`, and the position headers.
fn respond(
    status: StatusCode,
    body: Body,
    next_offset: u64,
    log: &Arc<dyn BucketLog>,
    format: Format,
) -> Response {
    let offsets = log.offsets();
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.media_type()),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    position_headers(h, next_offset, offsets);
    response
}

/// The newest body another long-poll of `log` rendered from `from` for the same range, format
/// and columns out of no more than `max_bytes` of stored batches; `None` when there is none (or
/// the format is not rendered once for all).
fn rendered(
    shared: &SharedBodies,
    log: &Arc<dyn BucketLog>,
    format: Format,
    columns: &Option<Vec<String>>,
    (from, until): (u64, Option<u64>),
    max_bytes: usize,
) -> Option<Arc<RenderedBody>> {
    // Below the log start a read is refused, as it would be had this one read.
    if !rendered_format(format) || from < log.offsets().log_start {
        return None;
    }
    shared.get(log, |k| {
        k.from == from
            && k.until == until
            && k.format == format
            && k.columns == *columns
            && k.stored_bytes <= max_bytes
    })
}

/// Whether a chunk read for a parked long-poll is rendered once for all: rows (mink batches
/// are sent as stored anyway), from a few small batches.
fn shares(chunk: &ReadChunk, format: Format) -> bool {
    rendered_format(format)
        && chunk.batches.iter().map(Bytes::len).sum::<usize>() <= MAX_SHARED_STORED_BYTES
}

/// Whether `format`'s bodies are rendered (rows), not sent as stored.
fn rendered_format(format: Format) -> bool {
    matches!(format, Format::Ndjson | Format::Arrow)
}

/// [`render`] through `shared`: the body another long-poll rendered from the same batches for
/// the same range, format and columns, else rendered here and left there when it is whole.
#[allow(clippy::too_many_arguments)]
fn render_shared(
    shared: &SharedBodies,
    log: &Arc<dyn BucketLog>,
    info: &TableInfo,
    chunk: ReadChunk,
    format: Format,
    columns: Option<Vec<String>>,
    (from, until): (u64, Option<u64>),
    http: &HttpSettings,
) -> ApiResult<(Body, u64)> {
    let key = BodyKey {
        from,
        until,
        read_end: chunk.next_offset,
        stored_bytes: chunk.batches.iter().map(Bytes::len).sum(),
        format,
        columns,
    };
    if let Some(kept) = shared.get(log, |k| *k == key) {
        return Ok((Pieces::body(kept.pieces.iter().cloned()), kept.next_offset));
    }
    let stored_bytes = key.stored_bytes;
    let commit_timestamps = chunk
        .batches
        .iter()
        .filter_map(format::commit_timestamp_of)
        .collect();
    let (rendered, next_offset) = render_rows(
        info,
        chunk,
        format,
        key.columns.as_deref(),
        (from, until),
        http.max_render_bytes,
    )?;
    if rendered.tail.is_some() {
        return Ok((streamed(rendered), next_offset));
    }
    let kept = Arc::new(RenderedBody {
        pieces: rendered.head,
        next_offset,
        stored_bytes,
        commit_timestamps,
    });
    let bytes =
        kept.pieces.iter().map(Bytes::len).sum::<usize>() + std::mem::size_of::<RenderedBody>();
    shared.insert(log, key, &kept, bytes);
    Ok((Pieces::body(kept.pieces.iter().cloned()), next_offset))
}

/// The body of a chunk in `format` and the offset after what it holds. NDJSON and Arrow bodies
/// hold the rows within `[from, until)`, at most `bound` rendered bytes plus one piece of rows,
/// and stream (see [`format::render_bounded`]); mink batches are sent as stored.
fn render(
    info: &TableInfo,
    chunk: ReadChunk,
    format: Format,
    columns: Option<&[String]>,
    range: (u64, Option<u64>),
    bound: usize,
) -> ApiResult<(Body, u64)> {
    if let Format::Mink | Format::Sse = format {
        // Stored batches go out as they are stored: slices of the cached blocks.
        return Ok((Pieces::body(chunk.batches), chunk.next_offset));
    }
    let (rendered, next_offset) = render_rows(info, chunk, format, columns, range, bound)?;
    Ok((streamed(rendered), next_offset))
}

/// The rows of a chunk rendered as NDJSON or Arrow, and the offset after what they hold.
fn render_rows(
    info: &TableInfo,
    chunk: ReadChunk,
    format: Format,
    columns: Option<&[String]>,
    (from, until): (u64, Option<u64>),
    bound: usize,
) -> ApiResult<(format::Rendered, u64)> {
    // Rows at and after `until` are not sent, but a read never goes back before `from`.
    let clip = |next: u64| until.map_or(next, |u| next.min(u.max(from)));
    let (body_format, schema, batches, next_offset) = match format {
        Format::Mink | Format::Sse => {
            return Err(ApiError::Internal {
                message: format!("{format:?} bodies are sent as stored, not rendered"),
            });
        }
        Format::Ndjson => {
            let mut rows = Vec::with_capacity(chunk.batches.len());
            let mut first = None;
            for b in &chunk.batches {
                let schema = info.read_schema(format::schema_id_of(b)?, columns)?;
                first.get_or_insert_with(|| schema.clone());
                rows.extend(stored_rows(b, &schema)?);
            }
            let schema = match first {
                Some(schema) => schema,
                None => latest_schema(info, columns)?,
            };
            (format::BodyFormat::Ndjson, schema, rows, chunk.next_offset)
        }
        Format::Arrow => {
            // One schema per response: stop before the first batch of another schema version.
            let mut rows = Vec::with_capacity(chunk.batches.len());
            let mut next_offset = chunk.next_offset;
            let mut first: Option<(i16, SchemaRef)> = None;
            for b in &chunk.batches {
                let id = format::schema_id_of(b)?;
                let schema = match &first {
                    Some((first_id, schema)) if *first_id == id => schema.clone(),
                    Some(_) => {
                        next_offset = format::base_offset_of(b)?;
                        break;
                    }
                    None => {
                        let schema = info.read_schema(id, columns)?;
                        first = Some((id, schema.clone()));
                        schema
                    }
                };
                rows.extend(stored_rows(b, &schema)?);
            }
            let schema = match first {
                Some((_, schema)) => schema,
                None => latest_schema(info, columns)?,
            };
            (format::BodyFormat::Arrow, schema, rows, next_offset)
        }
    };
    drop(chunk);
    let rendered = format::render_bounded(body_format, &schema, batches, from, until, bound)?;
    let next_offset = rendered.stopped_at.unwrap_or_else(|| clip(next_offset));
    Ok((rendered, next_offset))
}

/// The rows of one stored batch, when it has any.
pub(crate) fn stored_rows(batch: &Bytes, schema: &SchemaRef) -> ApiResult<Option<StoredRows>> {
    let Some(rows) = format::decode_batch(batch, schema)? else {
        return Ok(None);
    };
    Ok(Some(StoredRows {
        rows,
        base_offset: format::base_offset_of(batch)?,
        stored_len: batch.len(),
    }))
}

/// The table's newest schema, projected: the schema of an empty Arrow response.
fn latest_schema(info: &TableInfo, columns: Option<&[String]>) -> ApiResult<SchemaRef> {
    let latest = info.schemas.latest().map_or(0, |(id, _)| id);
    info.read_schema(latest, columns)
}

/// The body of a rendered response: whole when the sizing pass kept all of it, else its head
/// then the rest rendered as it streams. A failure while streaming ends the body with an error
/// (the connection is cut, the chunked body never terminates), so a client cannot take a cut
/// body for a complete one.
fn streamed(rendered: format::Rendered) -> Body {
    let format::Rendered { head, tail, .. } = rendered;
    match tail {
        None => Pieces::body(head),
        Some(tail) => {
            let tail = tail.inspect(|piece| {
                if let Err(e) = piece {
                    tracing::warn!(error = %e, "a read response failed while streaming");
                }
            });
            Body::from_stream(futures::stream::iter(
                head.into_iter().map(Ok::<_, ApiError>).chain(tail),
            ))
        }
    }
}
