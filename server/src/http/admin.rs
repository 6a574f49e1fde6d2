//! `POST /v1/admin/snapshot`: the node writes a metadata snapshot to the object store now
//! (docs/metadata-recovery.md); the periodic ones are `metadata.snapshot_interval_ms`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;

use crate::core::NodeCore;
use crate::error::ApiResult;
use crate::snapshots::Written;

/// Writes a metadata snapshot now.
#[utoipa::path(post, path = "/v1/admin/snapshot", tag = "operations", responses(
    (status = 200, description = "The snapshot written", body = Written),
    (status = 503, description = "`unavailable`: the metadata or the object store failed", body = super::answers::ErrorBody)))]
pub(crate) async fn snapshot(State(core): State<Arc<NodeCore>>) -> ApiResult<Json<Written>> {
    let written = core.snapshot_metadata().await?;
    tracing::info!(
        key = written.key,
        keys = written.keys,
        bytes = written.bytes,
        "metadata snapshot written on request"
    );
    Ok(Json(written))
}
