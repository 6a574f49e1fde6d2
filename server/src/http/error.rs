//! How the HTTP front end answers with an [`ApiError`]: its status code and JSON body.
//!
//! Every error answers with `{"error": kind, "message": ...}` (plus fields a client can act on,
//! such as `expected_sequence`). Bad input is a 4xx and changed nothing; storage and metadata
//! failures are a 5xx, and the transient ones (503, and 429) carry `Retry-After`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::error::ApiError;

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. }
            | ApiError::InvalidBatch { .. }
            | ApiError::LimitExceeded { .. }
            | ApiError::UnknownWriter { .. }
            | ApiError::FutureTimestamp { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::MisdirectedRequest { .. } => StatusCode::MISDIRECTED_REQUEST,
            ApiError::Moved { .. } => StatusCode::TEMPORARY_REDIRECT,
            ApiError::TableNotFound { .. }
            | ApiError::NoSuchBucket { .. }
            | ApiError::RouteNotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::TableExists { .. }
            | ApiError::OutOfOrderSequence { .. }
            | ApiError::StaleWriterEpoch { .. }
            | ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::OffsetTrimmed { .. } => StatusCode::GONE,
            ApiError::OffsetOutOfRange { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::RateLimited
            | ApiError::TooManyWriters { .. }
            | ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable { .. }
            | ApiError::BucketUnavailable { .. }
            | ApiError::ShuttingDown
            | ApiError::Overloaded { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::NotImplemented { .. } => StatusCode::NOT_IMPLEMENTED,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        let mut body = json!({ "error": self.kind(), "message": self.to_string() });
        match self {
            ApiError::OutOfOrderSequence { expected, .. } => {
                body["expected_sequence"] = json!(expected);
            }
            ApiError::StaleWriterEpoch { current, .. } => body["current_epoch"] = json!(current),
            ApiError::OffsetTrimmed { log_start, .. } => body["log_start"] = json!(log_start),
            ApiError::OffsetOutOfRange { high_watermark, .. } => {
                body["high_watermark"] = json!(high_watermark);
            }
            ApiError::PayloadTooLarge { limit } => body["limit"] = json!(limit),
            ApiError::LimitExceeded { setting, limit, .. } => {
                body["setting"] = json!(setting);
                body["limit"] = json!(limit);
            }
            ApiError::TooManyWriters { limit } => body["limit"] = json!(limit),
            ApiError::UnknownWriter { high_mark, .. } => body["high_mark"] = json!(high_mark),
            _ => {}
        }
        body
    }
}

/// Seconds a client should wait after a transient error; set once from the settings.
static RETRY_AFTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

pub(crate) fn set_retry_after(secs: u32) {
    RETRY_AFTER.store(secs.max(1), std::sync::atomic::Ordering::Relaxed);
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(kind = self.kind(), error = %self, "request failed");
        } else {
            tracing::debug!(kind = self.kind(), error = %self, "request rejected");
        }
        let mut response = (status, axum::Json(self.body())).into_response();
        if matches!(self, ApiError::Unauthorized { .. }) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let ApiError::Moved { owner } = &self
            && let Ok(location) = HeaderValue::from_str(owner)
        {
            // The seam for ownership: the router fills in the full URL of the same path.
            response.headers_mut().insert(header::LOCATION, location);
        }
        if matches!(
            status,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
        ) {
            let secs = RETRY_AFTER.load(std::sync::atomic::Ordering::Relaxed);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
