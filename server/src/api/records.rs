//! Append, read (with long-poll), offsets and trim of one bucket.
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
//! timeout lapses (then 204 with the same headers).

use std::sync::Arc;

use arrow_schema::SchemaRef;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody, JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mink_codec::BatchMeta;
use serde::Deserialize;
use serde_json::json;

use super::{AppState, BucketQuery, Shared, bucket_log, millis};
use crate::error::{ApiError, ApiResult};
use crate::format::{self, Format};
use crate::log::{BucketLog, LogOffsets, ReadChunk};
use crate::metrics::Metrics;
use crate::tables::TableInfo;

/// Header: where the next read continues.
pub const NEXT_OFFSET: HeaderName = HeaderName::from_static("mink-next-offset");
/// Header: the high watermark.
pub const HIGH_WATERMARK: HeaderName = HeaderName::from_static("mink-high-watermark");
/// Header: the log start.
pub const LOG_START: HeaderName = HeaderName::from_static("mink-log-start");
/// Header: the response reaches the high watermark.
pub const UP_TO_DATE: HeaderName = HeaderName::from_static("mink-up-to-date");
/// Header: idempotent writer id (Arrow and NDJSON appends).
pub const WRITER_ID: HeaderName = HeaderName::from_static("mink-writer-id");
/// Header: idempotent writer sequence (Arrow and NDJSON appends).
pub const SEQUENCE: HeaderName = HeaderName::from_static("mink-sequence");
/// Header: the schema id of Arrow and NDJSON rows (default: the table's newest).
pub const SCHEMA_ID: HeaderName = HeaderName::from_static("mink-schema-id");

pub(crate) fn query<T>(q: Result<Query<T>, QueryRejection>) -> ApiResult<T> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(format!("bad query: {}", e.body_text())))
}

fn header_number<T: std::str::FromStr>(
    headers: &HeaderMap,
    name: &HeaderName,
) -> ApiResult<Option<T>> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| ApiError::bad_request(format!("header {name} is not a number")))
        })
        .transpose()
}

pub(crate) async fn append(
    State(state): State<Shared>,
    Path((table, bucket)): Path<(String, String)>,
    q: Result<Query<BucketQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let q = query(q)?;
    let body = body.map_err(|e| match e {
        BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
            ApiError::PayloadTooLarge {
                limit: state.settings.http.max_body_bytes,
            }
        }
        other => ApiError::bad_request(format!("could not read the body: {}", other.body_text())),
    })?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let format = Format::of_content_type(content_type)?;
    let (info, log) = bucket_log(&state, &table, &bucket, q.partition.as_deref()).await?;
    let batches = match format {
        Format::Mink => body,
        Format::Arrow | Format::Ndjson => rows_to_batch(&info, &headers, format, &body)?,
        Format::Sse => unreachable_format()?,
    };
    let len = batches.len() as u64;
    let outcome = log.append(batches).await?;
    state.metrics.appends.inc();
    if outcome.duplicate {
        state.metrics.duplicates.inc();
    } else {
        state.metrics.append_bytes.inc_by(len);
    }
    Ok(Json(json!({
        "base_offset": outcome.base_offset,
        "last_offset": outcome.last_offset,
        "next_offset": outcome.last_offset + 1,
        "commit_timestamp": outcome.commit_timestamp,
        "duplicate": outcome.duplicate,
    }))
    .into_response())
}

fn unreachable_format() -> ApiResult<Bytes> {
    Err(ApiError::bad_request(
        "text/event-stream is not an append format",
    ))
}

fn rows_to_batch(
    info: &TableInfo,
    headers: &HeaderMap,
    format: Format,
    body: &[u8],
) -> ApiResult<Bytes> {
    let (schema_id, schema) = match header_number::<i16>(headers, &SCHEMA_ID)? {
        Some(id) => (
            id,
            info.schemas.get(id).ok_or_else(|| {
                ApiError::invalid("unknown_schema", format!("table has no schema id {id}"))
            })?,
        ),
        None => info.schemas.latest().ok_or_else(|| ApiError::Internal {
            message: "table has no schema".to_owned(),
        })?,
    };
    let writer_id = header_number::<i64>(headers, &WRITER_ID)?;
    let sequence = header_number::<i32>(headers, &SEQUENCE)?;
    let meta = match (writer_id, sequence) {
        (Some(w), Some(s)) if w >= 0 && s >= 0 => BatchMeta::new(schema_id).with_writer(w, s),
        (None, None) => BatchMeta::new(schema_id),
        _ => {
            return Err(ApiError::bad_request(
                "Mink-Writer-Id and Mink-Sequence go together, both non-negative",
            ));
        }
    };
    let rows = match format {
        Format::Arrow => format::arrow_to_rows(&schema, body)?,
        _ => format::ndjson_to_rows(&schema, body)?,
    };
    format::encode_rows(&rows, meta)
}

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

/// A read that counts itself in the metrics and attributes itself to a tier.
pub(crate) async fn read_counted(
    state: &AppState,
    log: &dyn BucketLog,
    from: u64,
    until: Option<u64>,
    columns: Option<&[String]>,
    max_bytes: usize,
) -> ApiResult<ReadChunk> {
    let gets = Metrics::object_gets(state.engine.as_ref());
    let chunk = log.read(from, until, columns, max_bytes).await?;
    if !chunk.batches.is_empty() {
        state.metrics.reads.inc();
        state
            .metrics
            .read_bytes
            .inc_by(chunk.batches.iter().map(|b| b.len() as u64).sum());
        let tier = if Metrics::object_gets(state.engine.as_ref()) > gets {
            "object_store"
        } else {
            "memory"
        };
        state.metrics.read_from(tier);
    }
    Ok(chunk)
}

pub(crate) async fn read(
    State(state): State<Shared>,
    Path((table, bucket)): Path<(String, String)>,
    q: Result<Query<ReadQuery>, QueryRejection>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let q = query(q)?;
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let live = q.live.as_deref().map(str::trim);
    let format = match live {
        Some("sse") => Format::Sse,
        Some("long-poll") | None => Format::of_accept(accept),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "live `{other}` is not `long-poll` or `sse`"
            )));
        }
    };
    let (info, log) = bucket_log(&state, &table, &bucket, q.partition.as_deref()).await?;
    if format == Format::Sse {
        return super::sse::serve(state, info, log, q, &headers);
    }
    let http = &state.settings.http;
    let from = start_offset(q.offset.as_deref(), log.offsets())?;
    let max_bytes = q
        .max_bytes
        .unwrap_or(http.default_read_bytes)
        .clamp(1, http.max_read_bytes);
    let columns = q.columns();
    let mut chunk = read_counted(
        &state,
        log.as_ref(),
        from,
        q.until,
        columns.as_deref(),
        max_bytes,
    )
    .await?;
    let mut status = StatusCode::OK;
    if chunk.batches.is_empty() && live == Some("long-poll") && q.until.is_none_or(|u| from < u) {
        let timeout = millis(
            q.timeout_ms,
            http.long_poll_timeout(),
            http.max_long_poll_timeout_ms,
        );
        let parked = state.metrics.park();
        tokio::select! {
            _ = log.wait_past(from, timeout) => {}
            _ = state.shutdown.cancelled() => {}
        }
        drop(parked);
        if log.offsets().high_watermark > from {
            chunk = read_counted(
                &state,
                log.as_ref(),
                from,
                q.until,
                columns.as_deref(),
                max_bytes,
            )
            .await?;
        }
        if chunk.batches.is_empty() {
            status = StatusCode::NO_CONTENT;
        }
    }
    let (body, next_offset) = render(&info, &chunk, format, columns.as_deref())?;
    let offsets = log.offsets();
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.media_type()),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    position_headers(h, next_offset, offsets);
    Ok(response)
}

/// Sets the position headers.
pub(crate) fn position_headers(h: &mut HeaderMap, next_offset: u64, offsets: LogOffsets) {
    h.insert(NEXT_OFFSET, HeaderValue::from(next_offset));
    h.insert(HIGH_WATERMARK, HeaderValue::from(offsets.high_watermark));
    h.insert(LOG_START, HeaderValue::from(offsets.log_start));
    if next_offset >= offsets.high_watermark {
        h.insert(UP_TO_DATE, HeaderValue::from_static("true"));
    }
}

/// The schema batches of `schema_id` decode with, projected to `columns`.
pub(crate) fn read_schema(
    info: &TableInfo,
    schema_id: i16,
    columns: Option<&[String]>,
) -> ApiResult<SchemaRef> {
    let schema = info
        .schemas
        .get(schema_id)
        .ok_or_else(|| ApiError::Internal {
            message: format!("a stored batch has schema id {schema_id}, which the table lacks"),
        })?;
    let Some(columns) = columns else {
        return Ok(schema);
    };
    let indices = columns
        .iter()
        .map(|c| {
            schema.index_of(c).map_err(|_| {
                ApiError::invalid(
                    "unknown_column",
                    format!("column `{c}` is not in schema {schema_id}"),
                )
            })
        })
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(Arc::new(schema.project(&indices).map_err(|e| {
        ApiError::Internal {
            message: e.to_string(),
        }
    })?))
}

/// The body of a chunk in `format`, and the offset after what it holds.
fn render(
    info: &TableInfo,
    chunk: &ReadChunk,
    format: Format,
    columns: Option<&[String]>,
) -> ApiResult<(Vec<u8>, u64)> {
    let mut next_offset = chunk.next_offset;
    let body = match format {
        Format::Mink | Format::Sse => {
            let mut out = Vec::with_capacity(chunk.batches.iter().map(|b| b.len()).sum());
            for b in &chunk.batches {
                out.extend_from_slice(b);
            }
            out
        }
        Format::Ndjson => {
            let mut out = Vec::new();
            for b in &chunk.batches {
                let schema = read_schema(info, format::schema_id_of(b)?, columns)?;
                if let Some(rows) = format::decode_batch(b, &schema)? {
                    format::rows_to_ndjson(&rows, &mut out)?;
                }
            }
            out
        }
        Format::Arrow => {
            // One schema per response: stop before the first batch of another schema version.
            let mut rows = Vec::new();
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
                        let schema = read_schema(info, id, columns)?;
                        first = Some((id, schema.clone()));
                        schema
                    }
                };
                if let Some(r) = format::decode_batch(b, &schema)? {
                    rows.push(r);
                }
            }
            let schema = match first {
                Some((_, schema)) => schema,
                None => {
                    let latest = info.schemas.latest().map_or(0, |(id, _)| id);
                    read_schema(info, latest, columns)?
                }
            };
            format::rows_to_arrow(&schema, &rows)?
        }
    };
    Ok((body, next_offset))
}

/// Query of an offsets request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OffsetsQuery {
    partition: Option<String>,
    timestamp: Option<i64>,
}

pub(crate) async fn offsets(
    State(state): State<Shared>,
    Path((table, bucket)): Path<(String, String)>,
    q: Result<Query<OffsetsQuery>, QueryRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let q = query(q)?;
    let (_, log) = bucket_log(&state, &table, &bucket, q.partition.as_deref()).await?;
    if let Some(ts) = q.timestamp {
        // The tablet refuses a timestamp in the future, against its own (injected) clock.
        let offset = log.offset_for_timestamp(ts).await?;
        return Ok(Json(json!({ "timestamp": ts, "offset": offset })));
    }
    let o = log.offsets();
    Ok(Json(json!({
        "log_start": o.log_start,
        "high_watermark": o.high_watermark,
    })))
}

/// Body of a trim request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TrimBody {
    offset: u64,
}

pub(crate) async fn trim(
    State(state): State<Shared>,
    Path((table, bucket)): Path<(String, String)>,
    q: Result<Query<BucketQuery>, QueryRejection>,
    body: Result<Json<TrimBody>, JsonRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let q = query(q)?;
    let body = super::tables::json_body(body)?;
    let (_, log) = bucket_log(&state, &table, &bucket, q.partition.as_deref()).await?;
    log.trim(body.offset).await?;
    let o = log.offsets();
    Ok(Json(json!({
        "log_start": o.log_start,
        "high_watermark": o.high_watermark,
    })))
}
