//! The control routes: tables (create, list, get, update, drop), schema versions, and writer ids.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use mink_metadata::{RetentionPolicy, TableRecord};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::extract::json_body;
use crate::auth::{Action, Principal};
use crate::core::NodeCore;
use crate::error::ApiResult;
use crate::format::schema::JsonSchema;
use crate::retention::policy::Effective;

/// Body of a create-table request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateTable {
    name: String,
    schema: JsonSchema,
    #[serde(default = "one")]
    buckets: u32,
    #[serde(default)]
    partitions: Option<Vec<String>>,
    /// The table's own retention policy; absent: the node's default.
    #[serde(default)]
    retention: Option<RetentionPolicy>,
}

/// Body of a table update: today only its retention policy (`null`: back to the node's
/// default).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateTable {
    retention: Option<RetentionPolicy>,
}

fn one() -> u32 {
    1
}

/// Body of an add-schema request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddSchema {
    schema: JsonSchema,
}

/// A table as the API shows it.
#[derive(Debug, Serialize)]
pub(crate) struct TableView {
    name: String,
    buckets: u32,
    partitions: Vec<String>,
    latest_schema_id: Option<u16>,
    schemas: Vec<SchemaView>,
    retention: RetentionView,
}

/// A table's retention: its own policy, and what applies with the node's default.
#[derive(Debug, Serialize)]
struct RetentionView {
    policy: Option<RetentionPolicy>,
    effective: Effective,
}

#[derive(Debug, Serialize)]
struct SchemaView {
    schema_id: u16,
    schema: serde_json::Value,
}

impl TableView {
    fn new(record: &TableRecord, node_default: &RetentionPolicy) -> Self {
        TableView {
            name: record.name.clone(),
            buckets: record.bucket_count,
            partitions: record.partitions.clone(),
            latest_schema_id: record.latest_schema_id(),
            schemas: record
                .schemas
                .iter()
                .map(|(id, text)| SchemaView {
                    schema_id: *id,
                    schema: serde_json::from_str(text).unwrap_or(serde_json::Value::Null),
                })
                .collect(),
            retention: RetentionView {
                policy: record.retention,
                effective: Effective::of(record.retention.as_ref(), node_default),
            },
        }
    }
}

fn view(core: &NodeCore, record: &TableRecord) -> TableView {
    TableView::new(record, &core.settings().retention.default_policy())
}

pub(crate) async fn create(
    State(core): State<Arc<NodeCore>>,
    Extension(principal): Extension<Principal>,
    body: Result<Json<CreateTable>, JsonRejection>,
) -> ApiResult<Response> {
    let body = json_body(body)?;
    principal.check(Action::Write, Some(&body.name))?;
    let partitions = body
        .partitions
        .unwrap_or_else(|| vec!["default".to_owned()]);
    let info = core
        .catalog()
        .create(
            &body.name,
            &body.schema,
            body.buckets,
            partitions,
            body.retention,
        )
        .await?;
    tracing::info!(table = %body.name, buckets = body.buckets, "table created");
    Ok((StatusCode::CREATED, Json(view(&core, &info.record()))).into_response())
}

pub(crate) async fn list(
    State(core): State<Arc<NodeCore>>,
    Extension(principal): Extension<Principal>,
) -> ApiResult<Json<serde_json::Value>> {
    let mut tables = core.catalog().list().await?;
    tables.retain(|t| principal.may_read(&t.name));
    Ok(Json(json!({
        "tables": tables.iter().map(|t| view(&core, t)).collect::<Vec<_>>()
    })))
}

pub(crate) async fn get(
    State(core): State<Arc<NodeCore>>,
    Path(table): Path<String>,
) -> ApiResult<Json<TableView>> {
    let info = core.catalog().get(&table).await?;
    Ok(Json(view(&core, &info.record())))
}

pub(crate) async fn update(
    State(core): State<Arc<NodeCore>>,
    Path(table): Path<String>,
    body: Result<Json<UpdateTable>, JsonRejection>,
) -> ApiResult<Json<TableView>> {
    let body = json_body(body)?;
    let record = core.catalog().set_retention(&table, body.retention).await?;
    tracing::info!(table = %table, retention = ?body.retention, "table retention set");
    Ok(Json(view(&core, &record)))
}

pub(crate) async fn drop_table(
    State(core): State<Arc<NodeCore>>,
    Path(table): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    core.drop_table(&table).await?;
    tracing::info!(table = %table, "table dropped");
    Ok(Json(json!({ "dropped": table })))
}

pub(crate) async fn add_schema(
    State(core): State<Arc<NodeCore>>,
    Path(table): Path<String>,
    body: Result<Json<AddSchema>, JsonRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let body = json_body(body)?;
    let id = core.catalog().add_schema(&table, &body.schema).await?;
    Ok(Json(json!({ "schema_id": id })))
}

pub(crate) async fn init_writer(
    State(core): State<Arc<NodeCore>>,
) -> ApiResult<Json<serde_json::Value>> {
    let id = core.allocate_writer_id().await?;
    Ok(Json(json!({ "writer_id": id })))
}
