//! `GET /v1/cluster`: which nodes are alive and which node owns which bucket, as this node sees
//! it (its watched view; docs/cluster.md). On a node that is a cluster of one (a store without
//! leases) it lists the node itself and no assignments: every bucket is served here.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::core::NodeCore;

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
