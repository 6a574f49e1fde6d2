//! The control routes: tables (create, list, get, update, drop), schema versions, and writer ids.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use mink_metadata::{CompressionCodec, RetentionPolicy, TableCompression, TableRecord};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use super::extract::json_body;
use crate::auth::{Action, Principal};
use crate::catalog::TableOptions;
use crate::core::NodeCore;
use crate::error::{ApiError, ApiResult};
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
    /// How appends are compressed on the way in: `none` (the default), `lz4`, `zstd` or
    /// `zstd:LEVEL` (1 to 22; plain `zstd` is level 3). docs/compression.md.
    #[serde(default)]
    #[schema(value_type = Option<String>, example = "zstd")]
    compression: Option<CompressionSetting>,
}

/// Body of a table update: each field given changes only itself. `retention`: the table's
/// policy (`null`: back to the node's default); `compression`: as at create (`none` to stop
/// compressing; batches stored before stay as they are).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateTable {
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<super::answers::RetentionPolicyDoc>)]
    retention: Option<Option<RetentionPolicy>>,
    #[serde(default)]
    #[schema(value_type = Option<String>, example = "lz4")]
    compression: Option<CompressionSetting>,
}

/// A field that is present, `null` included: `Some(None)` for `null`, `None` when absent.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// A table's compression setting as the API spells it: `none`, `lz4`, `zstd`, `zstd:LEVEL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CompressionSetting(Option<TableCompression>);

impl CompressionSetting {
    const LEVELS: std::ops::RangeInclusive<i32> = 1..=22;

    fn parse(text: &str) -> Result<Self, String> {
        let (codec, level) = match text.split_once(':') {
            Some((codec, level)) => (codec, Some(level)),
            None => (text, None),
        };
        let setting = match (codec.to_ascii_lowercase().as_str(), level) {
            ("none", None) => None,
            ("lz4", None) => Some(TableCompression {
                codec: CompressionCodec::Lz4,
                level: None,
            }),
            ("zstd", level) => {
                let level = level
                    .map(|l| {
                        l.parse::<i32>()
                            .ok()
                            .filter(|l| Self::LEVELS.contains(l))
                            .ok_or_else(|| format!("zstd level `{l}` is not a number from 1 to 22"))
                    })
                    .transpose()?;
                Some(TableCompression {
                    codec: CompressionCodec::Zstd,
                    level,
                })
            }
            _ => {
                return Err(format!(
                    "compression `{text}` is not one of `none`, `lz4`, `zstd` or `zstd:LEVEL` (1 to 22)"
                ));
            }
        };
        Ok(CompressionSetting(setting))
    }

    /// The setting as the API spells it.
    fn text(setting: Option<&TableCompression>) -> String {
        match setting {
            None => "none".to_owned(),
            Some(TableCompression {
                codec: CompressionCodec::Lz4,
                ..
            }) => "lz4".to_owned(),
            Some(TableCompression {
                codec: CompressionCodec::Zstd,
                level: None,
            }) => "zstd".to_owned(),
            Some(TableCompression {
                codec: CompressionCodec::Zstd,
                level: Some(level),
            }) => format!("zstd:{level}"),
        }
    }
}

impl<'de> Deserialize<'de> for CompressionSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
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
    /// How appends are compressed: `none`, `lz4`, `zstd` or `zstd:LEVEL`.
    compression: String,
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
            compression: CompressionSetting::text(record.compression.as_ref()),
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
                compression: body.compression.and_then(|c| c.0),
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

/// Sets the table's retention policy (`null`: the node's default) and how its appends are
/// compressed; a field left out is left as it is.
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
    // Retention first: it is the one a value can be refused for.
    let mut record = None;
    if let Some(retention) = body.retention {
        record = Some(core.catalog().set_retention(&table, retention).await?);
        tracing::info!(table = %table, retention = ?retention, "table retention set");
    }
    if let Some(CompressionSetting(compression)) = body.compression {
        record = Some(core.catalog().set_compression(&table, compression).await?);
        tracing::info!(table = %table, compression = ?compression, "table compression set");
    }
    let record = record.ok_or_else(|| {
        ApiError::bad_request("nothing to change: give `retention` or `compression`")
    })?;
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
