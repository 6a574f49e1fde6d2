//! The HTTP API, versioned under `/v1`; JSON for control, batch formats for data (see
//! [`crate::format`]). The routes:
//!
//! | Method | Path | What |
//! |---|---|---|
//! | GET | `/healthz` | liveness: 200 while serving, 503 while shutting down |
//! | GET | `/metrics` | Prometheus text |
//! | POST | `/v1/tables` | create a table: `{"name", "schema": {"fields": [...]}, "buckets", "partitions"}` |
//! | GET | `/v1/tables` | list tables |
//! | GET, DELETE | `/v1/tables/{table}` | get / drop a table (drop destroys its logs and writer snapshots) |
//! | POST | `/v1/tables/{table}/schemas` | add a schema version: `{"schema": {...}}` -> `{"schema_id"}` |
//! | POST | `/v1/writers` | init_writer: `{"writer_id"}` from the shared allocator |
//! | POST | `/v1/tables/{table}/buckets/{bucket}/records` | append |
//! | GET | `/v1/tables/{table}/buckets/{bucket}/records` | read, long-poll, SSE |
//! | GET | `/v1/tables/{table}/buckets/{bucket}/offsets` | log start and high watermark; `?timestamp=ms` for an offset |
//! | POST | `/v1/tables/{table}/buckets/{bucket}/trim` | `{"offset"}`: move the log start forward |
//!
//! Bucket routes take `?partition=NAME` (default `default`).

pub(crate) mod records;
mod sse;
mod tables;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mink_metadata::Metadata;
use mink_s3stream::engine::Engine;
use parking_lot::Mutex;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::error::{ApiError, ApiResult};
use crate::log::{BucketLog, LogKey, Logs, Owner};
use crate::metrics::Metrics;
use crate::settings::Settings;
use crate::tables::{TableInfo, Tables};

/// Everything a handler needs.
pub(crate) struct AppState {
    pub(crate) settings: Arc<Settings>,
    pub(crate) metadata: Arc<Metadata>,
    pub(crate) tables: Tables,
    pub(crate) logs: Arc<Logs>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) engine: Option<Engine>,
    /// Cancelled when the node starts shutting down: parked readers return at once.
    pub(crate) shutdown: CancellationToken,
    pub(crate) limiter: Option<RateLimiter>,
}

pub(crate) type Shared = Arc<AppState>;

/// The router of the whole API.
pub(crate) fn router(state: Shared) -> Router {
    let v1 = Router::new()
        .route("/tables", post(tables::create).get(tables::list))
        .route(
            "/tables/{table}",
            get(tables::get).delete(tables::drop_table),
        )
        .route("/tables/{table}/schemas", post(tables::add_schema))
        .route("/writers", post(tables::init_writer))
        .route(
            "/tables/{table}/buckets/{bucket}/records",
            post(records::append).get(records::read),
        )
        .route(
            "/tables/{table}/buckets/{bucket}/offsets",
            get(records::offsets),
        )
        .route("/tables/{table}/buckets/{bucket}/trim", post(records::trim))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            rate_limit,
        ))
        .layer(DefaultBodyLimit::max(state.settings.http.max_body_bytes));
    Router::new()
        .nest("/v1", v1)
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(state)
}

async fn healthz(State(state): State<Shared>) -> Response {
    if state.shutdown.is_cancelled() {
        return ApiError::ShuttingDown.into_response();
    }
    axum::Json(serde_json::json!({
        "status": "ok",
        "node_id": state.settings.node_id,
    }))
    .into_response()
}

async fn metrics(State(state): State<Shared>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

async fn not_found(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::RouteNotFound {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

/// The bucket a request addresses, from its path and `partition`.
#[derive(Debug, Deserialize)]
pub(crate) struct BucketQuery {
    pub(crate) partition: Option<String>,
}

/// Resolves a bucket route to its table and open log.
pub(crate) async fn bucket_log(
    state: &AppState,
    table: &str,
    bucket: &str,
    partition: Option<&str>,
) -> ApiResult<(Arc<TableInfo>, Arc<dyn BucketLog>)> {
    let info = state.tables.get(table).await?;
    let record = info.record();
    let bucket: u32 = bucket
        .parse()
        .map_err(|_| ApiError::bad_request(format!("bucket `{bucket}` is not a number")))?;
    if bucket >= record.bucket_count {
        return Err(ApiError::NoSuchBucket {
            message: format!(
                "table `{table}` has buckets 0..{}, not {bucket}",
                record.bucket_count
            ),
        });
    }
    let partition = partition.unwrap_or("default");
    if !record.partitions.iter().any(|p| p == partition) {
        return Err(ApiError::NoSuchBucket {
            message: format!(
                "table `{table}` has no partition `{partition}` (it has {:?})",
                record.partitions
            ),
        });
    }
    let key = LogKey {
        table: table.to_owned(),
        partition: partition.to_owned(),
        bucket,
    };
    match state.logs.owner(&key) {
        Owner::Local => {}
        Owner::Remote(base) => return Err(ApiError::Moved { owner: base }),
    }
    let log = state.logs.get(&key, &info).await?;
    Ok((info, log))
}

/// A token bucket admitting `rate` requests per second with bursts of `burst`.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    rate: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub(crate) fn new(rate: u32, burst: u32) -> Option<Self> {
        (rate > 0).then(|| RateLimiter {
            rate: f64::from(rate),
            burst: f64::from(burst.max(1)),
            state: Mutex::new((f64::from(burst.max(1)), Instant::now())),
        })
    }

    fn admit(&self) -> bool {
        let mut state = self.state.lock();
        let now = Instant::now();
        let elapsed = now.duration_since(state.1).as_secs_f64();
        state.0 = (state.0 + elapsed * self.rate).min(self.burst);
        state.1 = now;
        if state.0 >= 1.0 {
            state.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Admits the request through the rate limit and logs it when done.
async fn rate_limit(State(state): State<Shared>, request: Request, next: Next) -> Response {
    if let Some(limiter) = &state.limiter
        && !limiter.admit()
    {
        state.metrics.rate_limited.inc();
        return ApiError::RateLimited.into_response();
    }
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    tracing::debug!(
        %method,
        %path,
        status = response.status().as_u16(),
        micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        "request"
    );
    response
}

/// A duration from optional milliseconds, with a default and a cap.
pub(crate) fn millis(asked: Option<u64>, default: Duration, cap_ms: u64) -> Duration {
    asked.map_or(default, |ms| Duration::from_millis(ms.min(cap_ms)))
}
