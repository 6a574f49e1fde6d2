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
//! timeout lapses (then 204 with the same headers).

use std::sync::Arc;

use arrow_schema::SchemaRef;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::extract::millis;
use super::headers::position_headers;
use crate::bucket_log::{BucketLog, LogOffsets, ReadChunk};
use crate::catalog::TableInfo;
use crate::core::NodeCore;
use crate::error::{ApiError, ApiResult};
use crate::format::{self, Format};
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

/// A range read, parking at the tail for `live=long-poll`.
pub(crate) async fn serve(
    core: &NodeCore,
    info: &TableInfo,
    log: &dyn BucketLog,
    q: &ReadQuery,
    format: Format,
) -> ApiResult<Response> {
    let http = &core.settings().http;
    let from = start_offset(q.offset.as_deref(), log.offsets())?;
    let max_bytes = q.max_bytes(http);
    let columns = q.columns();
    let mut chunk = core
        .read(log, from, q.until, columns.as_deref(), max_bytes)
        .await?;
    let mut status = StatusCode::OK;
    if chunk.batches.is_empty()
        && q.live.as_deref().map(str::trim) == Some("long-poll")
        && q.until.is_none_or(|u| from < u)
    {
        let timeout = millis(
            q.timeout_ms,
            http.long_poll_timeout,
            http.max_long_poll_timeout,
        );
        let parked = core.metrics().park();
        tokio::select! {
            _ = log.wait_past(from, timeout) => {}
            _ = core.shutdown_signal().cancelled() => {}
        }
        drop(parked);
        if log.offsets().high_watermark > from {
            chunk = core
                .read(log, from, q.until, columns.as_deref(), max_bytes)
                .await?;
        }
        if chunk.batches.is_empty() {
            status = StatusCode::NO_CONTENT;
        }
    }
    let (body, next_offset) = render(info, &chunk, format, columns.as_deref())?;
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
