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
use utoipa::ToSchema;

use super::extract::json_body;
use crate::auth::{Action, Principal};
use crate::catalog::TableOptions;
use crate::core::NodeCore;
use crate::error::ApiResult;
use crate::format::schema::JsonSchema;
use crate::retention::policy::Effective;

/// Body of a create-table request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateTable {
    /// 1-200 letters, digits, `-`, `_` or `.`.
    name: String,
    /// `{"fields": [{"name", "type", "nullable"}]}`: types by short name (`int64`, `utf8`, ...) or
    /// Arrow's own (`Decimal128(10, 2)`); `nullable` defaults to true.
    #[schema(value_type = Object)]
    schema: JsonSchema,
    /// Buckets per partition (default 1).
    #[serde(default = "one")]
    buckets: u32,
    /// Partition names (default `["default"]`).
    #[serde(default)]
    partitions: Option<Vec<String>>,
    /// The table's own retention policy; absent: the node's default.
    #[serde(default)]
    #[schema(value_type = Option<super::answers::RetentionPolicyDoc>)]
    retention: Option<RetentionPolicy>,
    /// The column whose value is each row's key when the table is read over Kafka (a table not
    /// of the Kafka schema); absent: no key.
    #[serde(default)]
    kafka_key: Option<String>,
}

/// Body of a table update: today only its retention policy (`null`: back to the node's
/// default).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateTable {
    #[schema(value_type = Option<super::answers::RetentionPolicyDoc>)]
    retention: Option<RetentionPolicy>,
}

fn one() -> u32 {
    1
}

/// Body of an add-schema request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddSchema {
    #[schema(value_type = Object)]
    schema: JsonSchema,
}

/// A table as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TableView {
    name: String,
    buckets: u32,
    partitions: Vec<String>,
    latest_schema_id: Option<u16>,
    schemas: Vec<SchemaView>,
    retention: RetentionView,
    /// The column of the rows' Kafka keys, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    kafka_key: Option<String>,
}

/// The tables.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TablesView {
    tables: Vec<TableView>,
}

/// A table's retention: its own policy, and what applies with the node's default.
#[derive(Debug, Serialize, ToSchema)]
struct RetentionView {
    #[schema(value_type = Option<super::answers::RetentionPolicyDoc>)]
    policy: Option<RetentionPolicy>,
    effective: Effective,
}

#[derive(Debug, Serialize, ToSchema)]
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
            kafka_key: record.kafka_key.clone(),
        }
    }
}

fn view(core: &NodeCore, record: &TableRecord) -> TableView {
    TableView::new(record, &core.settings().retention.default_policy())
}

/// Creates a table.
#[utoipa::path(post, path = "/v1/tables", tag = "tables", request_body = CreateTable, responses(
    (status = 201, description = "Created", body = TableView),
    (status = 400, description = "`bad_request`, `invalid_schema`, `invalid_retention`, `limit_exceeded`", body = super::answers::ErrorBody),
    (status = 409, description = "`table_exists`", body = super::answers::ErrorBody)))]
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
            TableOptions {
                retention: body.retention,
                kafka_key: body.kafka_key,
                stream: None,
            },
        )
        .await?;
    tracing::info!(table = %body.name, buckets = body.buckets, "table created");
    Ok((StatusCode::CREATED, Json(view(&core, &info.record()))).into_response())
}

/// The tables this token may read.
#[utoipa::path(get, path = "/v1/tables", tag = "tables", responses(
    (status = 200, description = "The tables", body = TablesView)))]
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

/// One table: its schema versions and retention.
#[utoipa::path(get, path = "/v1/tables/{table}", tag = "tables",
    params(("table" = String, Path, description = "The table")),
    responses(
        (status = 200, description = "The table", body = TableView),
        (status = 404, description = "`table_not_found`", body = super::answers::ErrorBody)))]
pub(crate) async fn get(
    State(core): State<Arc<NodeCore>>,
    Path(table): Path<String>,
) -> ApiResult<Json<TableView>> {
    let info = core.catalog().get(&table).await?;
    Ok(Json(view(&core, &info.record())))
}

/// Sets the table's retention policy (`null`: the node's default).
#[utoipa::path(patch, path = "/v1/tables/{table}", tag = "tables", request_body = UpdateTable,
    params(("table" = String, Path, description = "The table")),
    responses(
        (status = 200, description = "The table as updated", body = TableView),
        (status = 400, description = "`invalid_retention`, `bad_request`", body = super::answers::ErrorBody),
        (status = 404, description = "`table_not_found`", body = super::answers::ErrorBody)))]
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

/// Drops a table: its logs and writer snapshots are destroyed, the name is free at once.
#[utoipa::path(delete, path = "/v1/tables/{table}", tag = "tables",
    params(("table" = String, Path, description = "The table")),
    responses(
        (status = 200, description = "Dropped", body = super::answers::DroppedView),
        (status = 404, description = "`table_not_found`", body = super::answers::ErrorBody)))]
pub(crate) async fn drop_table(
    State(core): State<Arc<NodeCore>>,
    Path(table): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    core.drop_table(&table).await?;
    tracing::info!(table = %table, "table dropped");
    Ok(Json(json!({ "dropped": table })))
}

/// Adds a schema version (an identical newest version returns its id again).
#[utoipa::path(post, path = "/v1/tables/{table}/schemas", tag = "tables", request_body = AddSchema,
    params(("table" = String, Path, description = "The table")),
    responses(
        (status = 200, description = "The version's id", body = super::answers::SchemaIdView),
        (status = 400, description = "`invalid_schema`, `limit_exceeded`", body = super::answers::ErrorBody),
        (status = 404, description = "`table_not_found`", body = super::answers::ErrorBody)))]
pub(crate) async fn add_schema(
    State(core): State<Arc<NodeCore>>,
    Path(table): Path<String>,
    body: Result<Json<AddSchema>, JsonRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let body = json_body(body)?;
    let id = core.catalog().add_schema(&table, &body.schema).await?;
    Ok(Json(json!({ "schema_id": id })))
}

/// A new idempotent writer id, from the allocator every front end shares.
#[utoipa::path(post, path = "/v1/writers", tag = "tables", responses(
    (status = 200, description = "The writer id", body = super::answers::WriterIdView)))]
pub(crate) async fn init_writer(
    State(core): State<Arc<NodeCore>>,
) -> ApiResult<Json<serde_json::Value>> {
    let id = core.allocate_writer_id().await?;
    Ok(Json(json!({ "writer_id": id })))
}
