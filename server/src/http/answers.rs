//! The answers of the API that the handlers build as JSON values, and its error body, described
//! for the OpenAPI document (`openapi.rs`): each field as the handlers write it.

use serde::Serialize;
use utoipa::ToSchema;

use crate::error::ApiError;

/// An error answer: `{"error": kind, "message", ...}` with extra fields for some kinds.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// The stable kind (one of the enumeration).
    #[schema(inline, value_type = ErrorKind)]
    error: String,
    /// What went wrong, for a person.
    message: String,
    /// `limit_exceeded`: the setting whose limit was passed.
    #[schema(nullable = false)]
    setting: Option<String>,
    /// `limit_exceeded`, `payload_too_large`, `too_many_writers`: the limit.
    #[schema(nullable = false)]
    limit: Option<u64>,
    /// `offset_trimmed`: the log start.
    #[schema(nullable = false)]
    log_start: Option<u64>,
    /// `offset_out_of_range`: the high watermark.
    #[schema(nullable = false)]
    high_watermark: Option<u64>,
    /// `out_of_order_sequence`: the sequence the writer must send next.
    #[schema(nullable = false)]
    expected_sequence: Option<i64>,
}

/// Every error kind the API answers with.
#[derive(Debug, Serialize)]
pub(crate) struct ErrorKind;

impl utoipa::PartialSchema for ErrorKind {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(ApiError::KINDS.iter().copied()))
            .description(Some("The stable error kind"))
            .into()
    }
}

impl ToSchema for ErrorKind {}

/// A retention policy: keep batches committed within `age_ms`, at most about `bytes` per bucket.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RetentionPolicyDoc {
    /// At least 60000 (one minute).
    #[schema(nullable = false)]
    age_ms: Option<u64>,
    /// At least 1048576 (one block).
    #[schema(nullable = false)]
    bytes: Option<u64>,
}

/// The acknowledgement of an append.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AppendAck {
    /// Offset of the first row appended (the first time, for a duplicate).
    base_offset: u64,
    /// Offset of the last row.
    last_offset: u64,
    /// The offset after the last row.
    next_offset: u64,
    /// Commit timestamp of the last batch, ms since the Unix epoch.
    commit_timestamp: i64,
    /// A retry of batches already appended: nothing was appended now.
    duplicate: bool,
    /// The schema version the rows were encoded with (NDJSON and Arrow bodies).
    #[schema(nullable = false)]
    schema_id: Option<u16>,
    /// Each batch of a mink-batch body, in order.
    #[schema(nullable = false)]
    batches: Option<Vec<BatchAck>>,
}

/// One batch of an append.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct BatchAck {
    base_offset: u64,
    next_offset: u64,
    commit_timestamp: i64,
    duplicate: bool,
}

/// A bucket's offsets (or, with `?timestamp=`, `{"timestamp", "offset"}`).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct OffsetsView {
    /// The oldest offset kept.
    log_start: u64,
    /// Everything below is durable and readable.
    high_watermark: u64,
    /// Bytes the bucket keeps on the store and not yet compacted.
    retained_bytes: u64,
    /// With `?timestamp=`: the first offset committed at or after it.
    #[schema(nullable = false)]
    offset: Option<u64>,
}

/// A bucket's offsets after a trim.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TrimmedView {
    log_start: u64,
    high_watermark: u64,
}

/// A writer id from the allocator.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WriterIdView {
    writer_id: u64,
}

/// The id of a schema version.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SchemaIdView {
    schema_id: u16,
}

/// A dropped table.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DroppedView {
    dropped: String,
}

/// A transfer asked.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TransferView {
    table: String,
    partition: String,
    bucket: u32,
    /// The node it was assigned to.
    #[schema(nullable = false)]
    from: Option<String>,
    to: String,
}

/// The cluster as this node sees it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ClusterView {
    node_id: String,
    clustered: bool,
    /// Live nodes: `node_id`, `member`, `incarnation`, `broker_id`, `http_url`, ...
    nodes: Vec<serde_json::Value>,
    /// `{"key", "node"}` per bucket assignment.
    assignments: Vec<serde_json::Value>,
}

/// Health or readiness.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ProbeView {
    /// `ok` / `ready`, or `failing` / `not_ready` / `shutting_down`.
    status: String,
    node_id: String,
    /// Why not, when not.
    #[schema(nullable = false)]
    reason: Option<String>,
}
