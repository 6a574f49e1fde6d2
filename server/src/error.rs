//! The node's error taxonomy ([`ApiError`], with stable `kind` strings) and how the errors of
//! metadata and of tablets map into it.
//!
//! Bad input changed nothing; storage and metadata failures are worth retrying when transient.
//! Each front end renders these errors its own way: the HTTP status codes, JSON bodies and
//! `Retry-After` are in `http/error.rs`.

/// What went wrong, as the API reports it. The `kind` strings are stable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// A malformed request: bad parameter, bad JSON, bad rows.
    #[error("{message}")]
    BadRequest {
        /// Stable kind string (`bad_request`, `invalid_schema`, `unknown_column`, ...).
        kind: &'static str,
        /// What was wrong.
        message: String,
    },
    /// A batch failed its checks (CRC, record count, framing).
    #[error("invalid batch: {message}")]
    InvalidBatch {
        /// What the check found.
        message: String,
    },
    /// The named table does not exist.
    #[error("table `{table}` does not exist")]
    TableNotFound {
        /// The table asked for.
        table: String,
    },
    /// A table of that name exists already.
    #[error("table `{table}` already exists")]
    TableExists {
        /// The table asked for.
        table: String,
    },
    /// The bucket or partition is not part of the table.
    #[error("{message}")]
    NoSuchBucket {
        /// Which bucket and why.
        message: String,
    },
    /// The offset was trimmed away.
    #[error("offset {offset} is below the log start {log_start}: it was trimmed")]
    OffsetTrimmed {
        /// The offset asked for.
        offset: u64,
        /// The oldest retained offset.
        log_start: u64,
    },
    /// The offset is past the high watermark.
    #[error("offset {offset} is beyond the high watermark {high_watermark}")]
    OffsetOutOfRange {
        /// The offset asked for.
        offset: u64,
        /// The high watermark.
        high_watermark: u64,
    },
    /// An idempotent writer's sequence was out of order.
    #[error(
        "writer {writer_id} sent sequence {sequence} but the next expected sequence is {expected}"
    )]
    OutOfOrderSequence {
        /// The writer.
        writer_id: i64,
        /// The sequence received.
        sequence: i32,
        /// The sequence expected next.
        expected: i32,
    },
    /// An idempotent writer's epoch is older than its current one: a fenced incarnation.
    #[error(
        "writer {writer_id} sent epoch {epoch} but it is at epoch {current}: this incarnation of the writer is fenced"
    )]
    StaleWriterEpoch {
        /// The writer.
        writer_id: i64,
        /// The epoch received.
        epoch: i16,
        /// The writer's current epoch.
        current: i16,
    },
    /// A timestamp lies in the future.
    #[error("timestamp {timestamp} ms is in the future (now {now} ms)")]
    FutureTimestamp {
        /// The timestamp asked for.
        timestamp: i64,
        /// The node's clock.
        now: i64,
    },
    /// The body is larger than allowed.
    #[error("request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The request's Content-Type is not one the endpoint takes.
    #[error("unsupported content type `{content_type}`; use one of {accepted}")]
    UnsupportedMediaType {
        /// What the client sent.
        content_type: String,
        /// What is accepted.
        accepted: &'static str,
    },
    /// Too many requests (rate limit).
    #[error("rate limit exceeded; retry later")]
    RateLimited,
    /// A request would take the node past a configured limit (`[limits]`): more tables, buckets,
    /// partitions, schema versions or rows than allowed.
    #[error("{message} (limit {limit}, setting `{setting}`)")]
    LimitExceeded {
        /// The setting that holds the limit, as named in the config file.
        setting: &'static str,
        /// The limit.
        limit: u64,
        /// What exceeded it.
        message: String,
    },
    /// A new idempotent writer would take the tablet past the writers it tracks; writers it
    /// already knows keep working.
    #[error(
        "the bucket already tracks {limit} writers; a new writer is refused (setting `tablet.max_writers`)"
    )]
    TooManyWriters {
        /// The limit.
        limit: u64,
    },
    /// Too many concurrent requests of one kind (parked long-polls, SSE streams) for the node or
    /// for this client.
    #[error("{message}")]
    TooManyRequests {
        /// Which limit and whose.
        message: String,
    },
    /// The node holds as many request bytes as its budget allows; retry.
    #[error("the node is overloaded: {message}")]
    Overloaded {
        /// Which budget.
        message: String,
    },
    /// No token, or an unknown one, where tokens are required.
    #[error("{message}")]
    Unauthorized {
        /// Why.
        message: String,
    },
    /// The token's scope does not allow the request.
    #[error("{message}")]
    Forbidden {
        /// What the token may not do.
        message: String,
    },
    /// A batch names a writer id the allocator never handed out.
    #[error(
        "writer id {writer_id} was never allocated (ids below {high_mark} were); get one from POST /v1/writers"
    )]
    UnknownWriter {
        /// The writer id.
        writer_id: i64,
        /// The allocator's high mark.
        high_mark: u64,
    },
    /// The `Host` header is not one this node serves (`http.allowed_hosts`).
    #[error("host `{host}` is not served here")]
    MisdirectedRequest {
        /// The host asked for.
        host: String,
    },
    /// A part of a protocol this node does not serve (e.g. Durable Streams forks).
    #[error("not implemented: {message}")]
    NotImplemented {
        /// What is not served, and where it is explained.
        message: String,
    },
    /// A state conflict other than sequencing (e.g. closing a closed log).
    #[error("{message}")]
    Conflict {
        /// What conflicted.
        message: String,
    },
    /// Storage or metadata is unavailable for now; retry.
    #[error("temporarily unavailable: {message}")]
    Unavailable {
        /// What failed.
        message: String,
    },
    /// Nobody serves the bucket right now (its owner is not alive, or it is moving): 503, retry.
    #[error("{message}")]
    BucketUnavailable {
        /// Which bucket and why.
        message: String,
    },
    /// Another node owns the bucket: the client is redirected there (307).
    #[error("the bucket is served by {owner}")]
    Moved {
        /// The owner's base URL.
        owner: String,
    },
    /// No route matches the request.
    #[error("no route for {method} {path}")]
    RouteNotFound {
        /// The method.
        method: String,
        /// The path.
        path: String,
    },
    /// The node is shutting down.
    #[error("the node is shutting down")]
    ShuttingDown,
    /// Anything that should not happen (corrupt stored data, a bug).
    #[error("internal error: {message}")]
    Internal {
        /// What failed.
        message: String,
    },
}

impl ApiError {
    /// A 400 with kind `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            kind: "bad_request",
            message: message.into(),
        }
    }

    /// A 400 with the given kind.
    pub fn invalid(kind: &'static str, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            kind,
            message: message.into(),
        }
    }

    /// Every kind an error answer can carry (the OpenAPI document enumerates them).
    pub const KINDS: &'static [&'static str] = &[
        "bad_request",
        "invalid_schema",
        "invalid_rows",
        "unknown_column",
        "unknown_schema",
        "schema_mismatch",
        "invalid_range",
        "invalid_retention",
        "invalid_batch",
        "table_not_found",
        "table_exists",
        "bucket_not_found",
        "offset_trimmed",
        "offset_out_of_range",
        "out_of_order_sequence",
        "stale_writer_epoch",
        "future_timestamp",
        "payload_too_large",
        "unsupported_media_type",
        "rate_limited",
        "limit_exceeded",
        "too_many_writers",
        "too_many_requests",
        "overloaded",
        "unauthorized",
        "forbidden",
        "unknown_writer",
        "misdirected_request",
        "conflict",
        "not_implemented",
        "unavailable",
        "shutting_down",
        "moved",
        "bucket_unavailable",
        "not_found",
        "internal",
    ];

    /// The stable kind string.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::BadRequest { kind, .. } => kind,
            ApiError::InvalidBatch { .. } => "invalid_batch",
            ApiError::TableNotFound { .. } => "table_not_found",
            ApiError::TableExists { .. } => "table_exists",
            ApiError::NoSuchBucket { .. } => "bucket_not_found",
            ApiError::OffsetTrimmed { .. } => "offset_trimmed",
            ApiError::OffsetOutOfRange { .. } => "offset_out_of_range",
            ApiError::OutOfOrderSequence { .. } => "out_of_order_sequence",
            ApiError::StaleWriterEpoch { .. } => "stale_writer_epoch",
            ApiError::FutureTimestamp { .. } => "future_timestamp",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::UnsupportedMediaType { .. } => "unsupported_media_type",
            ApiError::RateLimited => "rate_limited",
            ApiError::LimitExceeded { .. } => "limit_exceeded",
            ApiError::TooManyWriters { .. } => "too_many_writers",
            ApiError::TooManyRequests { .. } => "too_many_requests",
            ApiError::Overloaded { .. } => "overloaded",
            ApiError::Unauthorized { .. } => "unauthorized",
            ApiError::Forbidden { .. } => "forbidden",
            ApiError::UnknownWriter { .. } => "unknown_writer",
            ApiError::MisdirectedRequest { .. } => "misdirected_request",
            ApiError::Conflict { .. } => "conflict",
            ApiError::NotImplemented { .. } => "not_implemented",
            ApiError::Unavailable { .. } => "unavailable",
            ApiError::ShuttingDown => "shutting_down",
            ApiError::Moved { .. } => "moved",
            ApiError::BucketUnavailable { .. } => "bucket_unavailable",
            ApiError::RouteNotFound { .. } => "not_found",
            ApiError::Internal { .. } => "internal",
        }
    }
}

impl From<mink_metadata::MetaError> for ApiError {
    fn from(error: mink_metadata::MetaError) -> Self {
        use mink_metadata::ErrorKind;
        match error.kind() {
            ErrorKind::Unavailable => ApiError::Unavailable {
                message: error.to_string(),
            },
            ErrorKind::Invalid => ApiError::bad_request(error.to_string()),
            ErrorKind::Conflict | ErrorKind::Fenced => ApiError::Conflict {
                message: error.to_string(),
            },
            _ => ApiError::Internal {
                message: error.to_string(),
            },
        }
    }
}

/// The tablet's errors in the API's taxonomy: this is where a tablet error gets its HTTP status
/// (the tablet itself knows nothing of HTTP).
impl From<mink_tablet::TabletError> for ApiError {
    fn from(error: mink_tablet::TabletError) -> Self {
        use mink_tablet::{ErrorKind, TabletError};
        let message = error.to_string();
        match error {
            TabletError::OutOfOrderSequence {
                writer_id,
                expected,
                received,
                ..
            } => ApiError::OutOfOrderSequence {
                writer_id,
                sequence: received,
                expected,
            },
            TabletError::StaleWriterEpoch {
                writer_id,
                epoch,
                current,
                ..
            } => ApiError::StaleWriterEpoch {
                writer_id,
                epoch,
                current,
            },
            TabletError::BelowLogStart { offset, log_start } => {
                ApiError::OffsetTrimmed { offset, log_start }
            }
            TabletError::OffsetOutOfRange { offset, bound, .. } => ApiError::OffsetOutOfRange {
                offset,
                high_watermark: bound,
            },
            TabletError::FutureTimestamp { timestamp, now } => {
                ApiError::FutureTimestamp { timestamp, now }
            }
            TabletError::TooLarge { limit, .. } => ApiError::PayloadTooLarge {
                limit: usize::try_from(limit).unwrap_or(usize::MAX),
            },
            TabletError::TooManyRows { setting, limit, .. } => ApiError::LimitExceeded {
                setting: tablet_setting(setting),
                limit,
                message,
            },
            TabletError::TooManyWriters { limit, .. } => ApiError::TooManyWriters { limit },
            other => match other.kind() {
                ErrorKind::InvalidBatch => ApiError::InvalidBatch { message },
                ErrorKind::UnknownSchema => ApiError::invalid("unknown_schema", message),
                ErrorKind::InvalidProjection => ApiError::invalid("unknown_column", message),
                ErrorKind::OffsetOutOfRange => ApiError::invalid("invalid_range", message),
                ErrorKind::NotFound => ApiError::NoSuchBucket { message },
                ErrorKind::AlreadyExists | ErrorKind::Fenced => ApiError::Conflict { message },
                ErrorKind::Closed | ErrorKind::Backpressure | ErrorKind::Unavailable => {
                    ApiError::Unavailable { message }
                }
                _ => ApiError::Internal { message },
            },
        }
    }
}

/// The node's name (`[tablet]` section) of a tablet setting a tablet error names.
fn tablet_setting(field: &str) -> &'static str {
    match field {
        "max_rows_per_batch" => "tablet.max_rows_per_batch",
        "max_rows_per_request" => "tablet.max_rows_per_request",
        "max_writers" => "tablet.max_writers",
        _ => "tablet",
    }
}

/// Result alias of the API.
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use mink_tablet::{Isolation, TabletError};

    use super::*;

    #[test]
    fn tablet_errors_get_their_status_and_kind() {
        let cases = [
            (
                TabletError::TooLarge {
                    what: "batches",
                    value: 9,
                    limit: 8,
                },
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
            ),
            (
                TabletError::OutOfOrderSequence {
                    index: 0,
                    writer_id: 42,
                    expected: 6,
                    received: 8,
                },
                StatusCode::CONFLICT,
                "out_of_order_sequence",
            ),
            (
                TabletError::StaleWriterEpoch {
                    index: 0,
                    writer_id: 42,
                    epoch: 1,
                    current: 2,
                },
                StatusCode::CONFLICT,
                "stale_writer_epoch",
            ),
            (
                TabletError::BelowLogStart {
                    offset: 1,
                    log_start: 2,
                },
                StatusCode::GONE,
                "offset_trimmed",
            ),
            (
                TabletError::OffsetOutOfRange {
                    offset: 30,
                    bound: 20,
                    isolation: Isolation::HighWatermark,
                },
                StatusCode::RANGE_NOT_SATISFIABLE,
                "offset_out_of_range",
            ),
            (
                TabletError::FutureTimestamp {
                    timestamp: 1_000_001,
                    now: 1_000_000,
                },
                StatusCode::BAD_REQUEST,
                "future_timestamp",
            ),
            (
                TabletError::TooManyWriters {
                    index: 0,
                    writer_id: 7,
                    limit: 10_000,
                },
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_writers",
            ),
            (
                TabletError::InvalidBatch {
                    index: 2,
                    source: std::sync::Arc::new(mink_codec::Error::Truncated {
                        field: "arrow.prefix",
                        position: 52,
                        needed: 8,
                        available: 0,
                    }),
                },
                StatusCode::BAD_REQUEST,
                "invalid_batch",
            ),
        ];
        for (tablet_error, status, kind) in cases {
            let error = ApiError::from(tablet_error);
            assert_eq!((error.status(), error.kind()), (status, kind), "{error}");
        }
    }

    #[test]
    fn row_limits_name_the_node_setting() {
        for (field, setting) in [
            ("max_rows_per_batch", "tablet.max_rows_per_batch"),
            ("max_rows_per_request", "tablet.max_rows_per_request"),
        ] {
            let error = ApiError::from(TabletError::TooManyRows {
                index: 1,
                setting: field,
                rows: 2_000_000,
                limit: 1 << 20,
            });
            assert_eq!(error.status(), StatusCode::BAD_REQUEST);
            assert_eq!(error.kind(), "limit_exceeded");
            assert!(
                matches!(error, ApiError::LimitExceeded { setting: s, limit: 1_048_576, .. } if s == setting),
                "{error:?}"
            );
        }
    }
}
