//! The control routes: tables (create, list, get, drop), schema versions, and writer ids.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use mink_metadata::TableRecord;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::extract::json_body;
use crate::auth::{Action, Principal};
use crate::core::NodeCore;
use crate::error::ApiResult;
use crate::format::schema::JsonSchema;

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
}

#[derive(Debug, Serialize)]
struct SchemaView {
    schema_id: u16,
    schema: serde_json::Value,
}

impl From<&TableRecord> for TableView {
    fn from(record: &TableRecord) -> Self {
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
        }
    }
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
        .create(&body.name, &body.schema, body.buckets, partitions)
        .await?;
    tracing::info!(table = %body.name, buckets = body.buckets, "table created");
    Ok((StatusCode::CREATED, Json(TableView::from(&info.record()))).into_response())
}

pub(crate) async fn list(
    State(core): State<Arc<NodeCore>>,
    Extension(principal): Extension<Principal>,
) -> ApiResult<Json<serde_json::Value>> {
    let mut tables = core.catalog().list().await?;
    tables.retain(|t| principal.may_read(&t.name));
    Ok(Json(json!({
        "tables": tables.iter().map(TableView::from).collect::<Vec<_>>()
    })))
}

pub(crate) async fn get(
    State(core): State<Arc<NodeCore>>,
    Path(table): Path<String>,
) -> ApiResult<Json<TableView>> {
    let info = core.catalog().get(&table).await?;
    Ok(Json(TableView::from(&info.record())))
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
