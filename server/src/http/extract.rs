//! Extracting what a request asks for: its query, its JSON body, and the bucket its path names.
//!
//! Handlers take axum's extractors as `Result`s and turn a rejection into the API's JSON error
//! here, so every malformed request answers the same way (400, `bad_request`).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::Query;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use serde::Deserialize;

use crate::bucket_log::BucketLog;
use crate::catalog::TableInfo;
use crate::core::NodeCore;
use crate::error::{ApiError, ApiResult};

/// The query, or a 400 saying what is wrong with it.
pub(crate) fn query<T>(q: Result<Query<T>, QueryRejection>) -> ApiResult<T> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(format!("bad query: {}", e.body_text())))
}

/// The JSON body, or a 400 saying what is wrong with it.
pub(crate) fn json_body<T>(body: Result<Json<T>, JsonRejection>) -> ApiResult<T> {
    body.map(|Json(b)| b)
        .map_err(|e| ApiError::bad_request(format!("bad JSON body: {}", e.body_text())))
}

/// The bucket a request addresses, from its path and `partition`.
#[derive(Debug, Deserialize)]
pub(crate) struct BucketQuery {
    pub(crate) partition: Option<String>,
}

/// Resolves a bucket route (`/tables/{table}/buckets/{bucket}`, `?partition=`, default
/// `default`) to its table and open log.
pub(crate) async fn bucket_log(
    core: &NodeCore,
    table: &str,
    bucket: &str,
    partition: Option<&str>,
    redirected_by: Option<&str>,
) -> ApiResult<(Arc<TableInfo>, Arc<dyn BucketLog>)> {
    let (info, bucket) = bucket_of(core, table, bucket).await?;
    let log = core
        .bucket_log(&info, bucket, partition.unwrap_or("default"), redirected_by)
        .await?;
    Ok((info, log))
}

/// The table of a bucket route and the bucket's number.
pub(crate) async fn bucket_of(
    core: &NodeCore,
    table: &str,
    bucket: &str,
) -> ApiResult<(Arc<TableInfo>, u32)> {
    let info = core.catalog().get(table).await?;
    let bucket: u32 = bucket
        .parse()
        .map_err(|_| ApiError::bad_request(format!("bucket `{bucket}` is not a number")))?;
    Ok((info, bucket))
}

/// A duration from optional milliseconds, with a default and a cap.
pub(crate) fn millis(asked: Option<u64>, default: Duration, cap: Duration) -> Duration {
    asked.map_or(default, |ms| Duration::from_millis(ms).min(cap))
}
