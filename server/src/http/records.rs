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
        Format::Mink | Format::Sse => body,
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
    format::encode_rows(&rows, meta)
}

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
    read::serve(&core, &info, log.as_ref(), &q, format, &parked).await
}

/// Query of an offsets request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OffsetsQuery {
    partition: Option<String>,
    timestamp: Option<i64>,
}

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
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TrimBody {
    offset: u64,
}

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
