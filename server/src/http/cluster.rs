//! `GET /v1/cluster`: which nodes are alive and which node owns which bucket, as this node sees
//! it (its watched view; docs/cluster.md). On a node that is a cluster of one (a store without
//! leases) it lists the node itself and no assignments: every bucket is served here.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::extract::{BucketQuery, bucket_of, json_body, query};
use crate::core::NodeCore;
use crate::error::ApiResult;

/// The live nodes and the bucket assignments, as this node sees them.
#[utoipa::path(get, path = "/v1/cluster", tag = "cluster", responses(
    (status = 200, description = "Members and assignments", body = super::answers::ClusterView)))]
pub(crate) async fn cluster(State(core): State<Arc<NodeCore>>) -> Json<Value> {
    let settings = core.settings();
    let Some(view) = core.ownership() else {
        return Json(json!({
            "node_id": settings.node_id,
            "clustered": false,
            "nodes": [{ "node_id": settings.node_id }],
            "assignments": [],
        }));
    };
    let nodes: Vec<Value> = view
        .live_nodes()
        .into_iter()
        .map(|n| {
            json!({
                "node_id": n.node_id,
                "member": n.member(),
                "incarnation": n.incarnation,
                "broker_id": n.broker_id,
                "http_url": n.http_url,
                "kafka_address": n.kafka_address,
                "flight_url": n.flight_url,
                "draining": n.draining,
                "started_at_ms": n.started_at_ms,
            })
        })
        .collect();
    let assignments: Vec<Value> = view
        .assignments()
        .into_iter()
        .map(|(key, node)| json!({ "key": key, "node": node }))
        .collect();
    Json(json!({
        "node_id": settings.node_id,
        "clustered": true,
        "nodes": nodes,
        "assignments": assignments,
    }))
}

/// Body of a transfer.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TransferBody {
    to: String,
}

/// `POST /v1/tables/{t}/buckets/{b}/transfer {"to": node}`: moves the bucket to a live node. Any
/// node takes it; 202 once the assignment is rewritten. The owner then releases the bucket (its
/// in-flight appends finish, its writer windows are snapshotted, its stream closed) and the new
/// node opens it on the next request; until then requests for it answer 503.
#[utoipa::path(post, path = "/v1/tables/{table}/buckets/{bucket}/transfer", tag = "cluster",
    params(("table" = String, Path, description = "The table"),
        ("bucket" = u32, Path, description = "The bucket"),
        ("partition" = Option<String>, Query, description = "The partition (default `default`)")), request_body = TransferBody,
    responses(
        (status = 202, description = "The assignment was rewritten", body = super::answers::TransferView),
        (status = 400, description = "`bad_request`: not a cluster, or no such live node", body = super::answers::ErrorBody),
        (status = 404, description = "`table_not_found`, `bucket_not_found`", body = super::answers::ErrorBody)))]
pub(crate) async fn transfer(
    State(core): State<Arc<NodeCore>>,
    axum::extract::Path((table, bucket)): axum::extract::Path<(String, String)>,
    q: Result<axum::extract::Query<BucketQuery>, axum::extract::rejection::QueryRejection>,
    body: Result<Json<TransferBody>, axum::extract::rejection::JsonRejection>,
) -> ApiResult<(axum::http::StatusCode, Json<Value>)> {
    let q = query(q)?;
    let body = json_body(body)?;
    let (info, bucket) = bucket_of(&core, &table, &bucket).await?;
    let key = core.log_key(&info, bucket, q.partition.as_deref().unwrap_or("default"))?;
    let from = core.transfer(&key, &body.to).await?;
    Ok((
        axum::http::StatusCode::ACCEPTED,
        Json(json!({
            "table": key.table,
            "partition": key.partition,
            "bucket": key.bucket,
            "from": from,
            "to": body.to,
        })),
    ))
}
