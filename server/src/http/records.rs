//! The routes of one bucket: append and read (`/records`), offsets, and trim.
//!
//! A read is a range read with an optional long-poll (`read.rs`) or, with `live=sse` or
//! `Accept: text/event-stream`, a held-open stream of server-sent events (`sse.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use mink_codec::BatchMeta;
use serde::Deserialize;
use serde_json::json;

use super::body;
use super::extract::{BucketQuery, bucket_log, json_body, query};
use super::headers::{SCHEMA_ID, SEQUENCE, WRITER_ID, header_number};
use super::parked::ParkedReads;
use super::read::{self, ReadQuery};
use super::redirect::RedirectedBy;
use super::sse;
use crate::budget::Budget;
use crate::catalog::TableInfo;
use crate::core::NodeCore;
use crate::error::{ApiError, ApiResult};
use crate::format::{self, Format};

/// Appends rows: mink batches, an Arrow IPC stream or NDJSON, answered once durable.
#[utoipa::path(post, path = "/v1/tables/{table}/buckets/{bucket}/records", tag = "records",
    params(("table" = String, Path, description = "The table"),
        ("bucket" = u32, Path, description = "The bucket"),
        ("partition" = Option<String>, Query, description = "The partition (default `default`)"),
        ("Content-Type" = String, Header, description = "`application/vnd.mink.batches`, `application/vnd.apache.arrow.stream` or `application/x-ndjson`"),
        ("Mink-Writer-Id" = Option<u64>, Header, description = "An idempotent writer id (Arrow and NDJSON bodies; mink batches carry theirs)"),
        ("Mink-Sequence" = Option<i32>, Header, description = "The writer's sequence number for this append"),
        ("Mink-Schema-Id" = Option<u16>, Header, description = "The schema version the rows are in (default: the newest)")),
    request_body(content = Vec<u8>, description = "The rows", content_type = "application/x-ndjson"),
    responses(
        (status = 200, description = "Durable (or a duplicate of an append that was)", body = super::answers::AppendAck),
        (status = 307, description = "Another node owns the bucket", headers(("Location" = String, description = "The same request there"))),
        (status = 400, description = "`invalid_batch`, `invalid_rows`, `unknown_schema`, `unknown_writer`, `limit_exceeded`", body = super::answers::ErrorBody),
        (status = 404, description = "`table_not_found`, `bucket_not_found`", body = super::answers::ErrorBody),
        (status = 409, description = "`out_of_order_sequence`", body = super::answers::ErrorBody),
        (status = 413, description = "`payload_too_large`", body = super::answers::ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = super::answers::ErrorBody),
        (status = 429, description = "`rate_limited`, `too_many_writers`", body = super::answers::ErrorBody),
        (status = 503, description = "`unavailable`, `overloaded`, `bucket_unavailable`", body = super::answers::ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds")))))]
pub(crate) async fn append(
    State(core): State<Arc<NodeCore>>,
    redirected: Option<Extension<RedirectedBy>>,
    Extension(budget): Extension<Arc<Budget>>,
    Path((table, bucket)): Path<(String, String)>,
    q: Result<Query<BucketQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let q = query(q)?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let format = Format::of_content_type(content_type)?;
    let http = &core.settings().http;
    // The format decides the limit, before a byte of the body is read.
    let limit = match format {
        Format::Mink => http.body.max_append_bytes,
        Format::Arrow => http.body.max_arrow_bytes,
        Format::Ndjson => http.body.max_ndjson_bytes,
        Format::Sse => return Err(not_an_append_format()),
    };
    // The permit holds the body's bytes, then the batches', until the append is answered.
    let (body, mut permit) = body::read(body, limit, &budget, http.idle_timeout).await?;
    let (info, log) = bucket_log(
        &core,
        &table,
        &bucket,
        q.partition.as_deref(),
        by(&redirected),
    )
    .await?;
    let batches = match format {
        Format::Arrow | Format::Ndjson => {
            let batches = rows_to_batch(&core, &info, &headers, format, &body)?;
            drop(body);
            permit.resize(batches.len())?;
            batches
        }
        // Batches that are not compressed are compressed with the table's setting.
        Format::Mink | Format::Sse => match info.compression() {
            None => body,
            compression => {
                let batches =
                    format::compress_batches(body, compression, |id| info.schemas.get(id))?;
                permit.resize(batches.len())?;
                batches
            }
        },
    };
    let outcome = core.append(log.as_ref(), batches).await?;
    drop(permit);
    Ok(Json(json!({
        "base_offset": outcome.base_offset,
        "last_offset": outcome.last_offset,
        "next_offset": outcome.last_offset + 1,
        "commit_timestamp": outcome.commit_timestamp,
        "duplicate": outcome.duplicate,
    }))
    .into_response())
}

fn not_an_append_format() -> ApiError {
    ApiError::bad_request("text/event-stream is not an append format")
}

fn rows_to_batch(
    core: &NodeCore,
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
    let settings = core.settings();
    // Such an append becomes one batch, so both tablet row limits bound it.
    let tablet = &settings.tablet;
    let (max_rows, rows_setting) = if tablet.max_rows_per_batch < tablet.max_rows_per_request {
        (tablet.max_rows_per_batch, "tablet.max_rows_per_batch")
    } else {
        (tablet.max_rows_per_request, "tablet.max_rows_per_request")
    };
    let bounds = format::RowBounds {
        max_rows: usize::try_from(max_rows).unwrap_or(usize::MAX),
        rows_setting,
        max_decoded_bytes: settings.http.body.max_decoded_bytes,
    };
    let rows = match format {
        Format::Arrow => format::arrow_to_rows(&schema, body, bounds)?,
        _ => format::ndjson_to_rows(&schema, body, bounds)?,
    };
    format::encode_rows(&rows, meta, info.compression())
}

/// Reads rows from an offset: a range, a long-poll at the tail, or server-sent events.
#[utoipa::path(get, path = "/v1/tables/{table}/buckets/{bucket}/records", tag = "records",
    params(("table" = String, Path, description = "The table"),
        ("bucket" = u32, Path, description = "The bucket"),
        ("partition" = Option<String>, Query, description = "The partition (default `default`)"),
        ("offset" = Option<String>, Query, description = "A number, or `now` for the high watermark (default: the log start)"),
        ("until" = Option<u64>, Query, description = "Stop before this offset"),
        ("max_bytes" = Option<usize>, Query, description = "About how many stored bytes to read"),
        ("columns" = Option<String>, Query, description = "Comma-separated columns to keep"),
        ("live" = Option<String>, Query, description = "`long-poll` (park at the tail) or `sse`"),
        ("timeout_ms" = Option<u64>, Query, description = "How long a long-poll parks"),
        ("Accept" = Option<String>, Header, description = "`application/x-ndjson` (default), `application/vnd.apache.arrow.stream`, `application/vnd.mink.batches` or `text/event-stream`"),
        ("Last-Event-ID" = Option<String>, Header, description = "SSE: continue after this event")),
    responses(
        (status = 200, description = "Rows (NDJSON, Arrow IPC, mink batches or SSE events whose data is a JSON array of rows and whose id is the next offset)", content_type = "application/x-ndjson", body = String,
            headers(("Mink-Next-Offset" = u64, description = "Where the next read continues"),
            ("Mink-High-Watermark" = u64, description = "Everything below is durable"),
            ("Mink-Log-Start" = u64, description = "The oldest offset kept"),
            ("Mink-Up-To-Date" = bool, description = "`true` when the answer reaches the high watermark"))),
        (status = 204, description = "A long-poll that timed out with nothing new", headers(("Mink-Next-Offset" = u64, description = "Where the next read continues"),
            ("Mink-High-Watermark" = u64, description = "Everything below is durable"),
            ("Mink-Log-Start" = u64, description = "The oldest offset kept"),
            ("Mink-Up-To-Date" = bool, description = "`true` when the answer reaches the high watermark"))),
        (status = 307, description = "Another node owns the bucket", headers(("Location" = String, description = "The same request there"))),
        (status = 400, description = "`bad_request`, `unknown_column`", body = super::answers::ErrorBody),
        (status = 404, description = "`table_not_found`, `bucket_not_found`", body = super::answers::ErrorBody),
        (status = 410, description = "`offset_trimmed`: below the log start", body = super::answers::ErrorBody),
        (status = 416, description = "`offset_out_of_range`: past the high watermark", body = super::answers::ErrorBody),
        (status = 429, description = "`too_many_requests`: the parked-read limits", body = super::answers::ErrorBody),
        (status = 503, description = "`unavailable`, `bucket_unavailable`", body = super::answers::ErrorBody)))]
pub(crate) async fn read(
    State(core): State<Arc<NodeCore>>,
    redirected: Option<Extension<RedirectedBy>>,
    Path((table, bucket)): Path<(String, String)>,
    q: Result<Query<ReadQuery>, QueryRejection>,
    headers: HeaderMap,
    Extension(parked): Extension<Arc<ParkedReads>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
) -> ApiResult<Response> {
    let parked = read::Parking {
        reads: parked,
        client: peer.map(|Extension(ConnectInfo(addr))| addr.ip()),
    };
    let q = query(q)?;
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = match q.live.as_deref().map(str::trim) {
        Some("sse") => Format::Sse,
        Some("long-poll") | None => Format::of_accept(accept),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "live `{other}` is not `long-poll` or `sse`"
            )));
        }
    };
    let (info, log) = bucket_log(
        &core,
        &table,
        &bucket,
        q.partition.as_deref(),
        by(&redirected),
    )
    .await?;
    if format == Format::Sse {
        return sse::serve(core, info, log, q, &headers, &parked);
    }
    read::serve(&core, &info, &log, &q, format, &parked).await
}

/// Query of an offsets request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OffsetsQuery {
    partition: Option<String>,
    timestamp: Option<i64>,
}

/// A bucket's log start, high watermark and retained bytes, or the offset of a time.
#[utoipa::path(get, path = "/v1/tables/{table}/buckets/{bucket}/offsets", tag = "records",
    params(("table" = String, Path, description = "The table"),
        ("bucket" = u32, Path, description = "The bucket"),
        ("partition" = Option<String>, Query, description = "The partition (default `default`)"),
        ("timestamp" = Option<i64>, Query, description = "ms since the epoch: answer the first offset committed at or after it")),
    responses(
        (status = 200, description = "The offsets", body = super::answers::OffsetsView),
        (status = 400, description = "`future_timestamp`", body = super::answers::ErrorBody),
        (status = 404, description = "`table_not_found`, `bucket_not_found`", body = super::answers::ErrorBody)))]
pub(crate) async fn offsets(
    State(core): State<Arc<NodeCore>>,
    redirected: Option<Extension<RedirectedBy>>,
    Path((table, bucket)): Path<(String, String)>,
    q: Result<Query<OffsetsQuery>, QueryRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let q = query(q)?;
    let (_, log) = bucket_log(
        &core,
        &table,
        &bucket,
        q.partition.as_deref(),
        by(&redirected),
    )
    .await?;
    if let Some(ts) = q.timestamp {
        // The tablet refuses a timestamp in the future, against its own (injected) clock.
        let offset = log.offset_for_timestamp(ts).await?;
        return Ok(Json(json!({ "timestamp": ts, "offset": offset })));
    }
    let o = log.offsets();
    Ok(Json(json!({
        "log_start": o.log_start,
        "high_watermark": o.high_watermark,
        "retained_bytes": log.footprint().bytes(),
    })))
}

/// Body of a trim request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TrimBody {
    offset: u64,
}

/// Moves the log start forward; what is below becomes garbage.
#[utoipa::path(post, path = "/v1/tables/{table}/buckets/{bucket}/trim", tag = "records",
    params(("table" = String, Path, description = "The table"),
        ("bucket" = u32, Path, description = "The bucket"),
        ("partition" = Option<String>, Query, description = "The partition (default `default`)")), request_body = TrimBody,
    responses(
        (status = 200, description = "The offsets after the trim", body = super::answers::TrimmedView),
        (status = 404, description = "`table_not_found`, `bucket_not_found`", body = super::answers::ErrorBody),
        (status = 416, description = "`offset_out_of_range`: past the high watermark", body = super::answers::ErrorBody)))]
pub(crate) async fn trim(
    State(core): State<Arc<NodeCore>>,
    redirected: Option<Extension<RedirectedBy>>,
    Path((table, bucket)): Path<(String, String)>,
    q: Result<Query<BucketQuery>, QueryRejection>,
    body: Result<Json<TrimBody>, JsonRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let q = query(q)?;
    let body = json_body(body)?;
    let (_, log) = bucket_log(
        &core,
        &table,
        &bucket,
        q.partition.as_deref(),
        by(&redirected),
    )
    .await?;
    log.trim(body.offset).await?;
    let o = log.offsets();
    Ok(Json(json!({
        "log_start": o.log_start,
        "high_watermark": o.high_watermark,
    })))
}

/// The node that redirected a request here, if one did.
fn by(redirected: &Option<Extension<RedirectedBy>>) -> Option<&str> {
    redirected
        .as_ref()
        .map(|Extension(RedirectedBy(node))| node.as_str())
}
