//! The operations routes: `/healthz` (liveness), `/readyz` (readiness) and `/metrics`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::core::NodeCore;
use crate::error::ApiError;

/// Liveness. 503 while shutting down, and 503 `{"status":"failing","reason"}` once the WAL has
/// failed for good or the node's lease was lost: the node can no longer take appends and is about to exit for its supervisor
/// to restart it (whether the stores are reachable right now is readiness, not liveness).
#[utoipa::path(get, path = "/healthz", tag = "operations", responses(
    (status = 200, description = "Alive", body = super::answers::ProbeView),
    (status = 503, description = "Shutting down, or failing: it will exit for its supervisor", body = super::answers::ProbeView)))]
pub(crate) async fn healthz(State(core): State<Arc<NodeCore>>) -> Response {
    if core.is_shutting_down() {
        return ApiError::ShuttingDown.into_response();
    }
    if let Some(reason) = core.failure() {
        return (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(serde_json::json!({
                "status": "failing",
                "node_id": core.settings().node_id,
                "reason": reason,
            })),
        )
            .into_response();
    }
    axum::Json(serde_json::json!({
        "status": "ok",
        "node_id": core.settings().node_id,
    }))
    .into_response()
}

/// Readiness: 200 while the node serves and its metadata and object stores answer, else 503
/// with the reason (a load balancer stops sending it requests; `/healthz` says whether to restart
/// it).
#[utoipa::path(get, path = "/readyz", tag = "operations", responses(
    (status = 200, description = "Ready: the metadata and object stores answer", body = super::answers::ProbeView),
    (status = 503, description = "Not ready, with the reason", body = super::answers::ProbeView,
        headers(("Retry-After" = u32, description = "Seconds")))))]
pub(crate) async fn readyz(State(core): State<Arc<NodeCore>>) -> Response {
    match core.ready().await {
        Ok(()) => axum::Json(serde_json::json!({
            "status": "ready",
            "node_id": core.settings().node_id,
        }))
        .into_response(),
        Err(reason) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            [(axum::http::header::RETRY_AFTER, "1")],
            axum::Json(serde_json::json!({
                "status": "not_ready",
                "node_id": core.settings().node_id,
                "reason": reason,
            })),
        )
            .into_response(),
    }
}

/// The node's counters, gauges and latency histograms.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses(
    (status = 200, description = "Prometheus / OpenMetrics text", content_type = "application/openmetrics-text", body = String)))]
pub(crate) async fn metrics(State(core): State<Arc<NodeCore>>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        core.metrics().render(),
    )
        .into_response()
}
