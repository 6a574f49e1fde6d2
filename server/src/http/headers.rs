//! The `Mink-*` headers: the position a read response carries, and the writer id, sequence and
//! schema id an Arrow or NDJSON append may carry.

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::bucket_log::LogOffsets;
use crate::error::{ApiError, ApiResult};

/// Header: where the next read continues.
pub const NEXT_OFFSET: HeaderName = HeaderName::from_static("mink-next-offset");
/// Header: the high watermark.
pub const HIGH_WATERMARK: HeaderName = HeaderName::from_static("mink-high-watermark");
/// Header: the log start.
pub const LOG_START: HeaderName = HeaderName::from_static("mink-log-start");
/// Header: the response reaches the high watermark.
pub const UP_TO_DATE: HeaderName = HeaderName::from_static("mink-up-to-date");
/// Header: idempotent writer id (Arrow and NDJSON appends).
pub const WRITER_ID: HeaderName = HeaderName::from_static("mink-writer-id");
/// Header: idempotent writer sequence (Arrow and NDJSON appends).
pub const SEQUENCE: HeaderName = HeaderName::from_static("mink-sequence");
/// Header: the schema id of Arrow and NDJSON rows (default: the table's newest).
pub const SCHEMA_ID: HeaderName = HeaderName::from_static("mink-schema-id");

/// A header holding a number, when present.
pub(crate) fn header_number<T: std::str::FromStr>(
    headers: &HeaderMap,
    name: &HeaderName,
) -> ApiResult<Option<T>> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| ApiError::bad_request(format!("header {name} is not a number")))
        })
        .transpose()
}

/// Sets the position headers.
pub(crate) fn position_headers(h: &mut HeaderMap, next_offset: u64, offsets: LogOffsets) {
    h.insert(NEXT_OFFSET, HeaderValue::from(next_offset));
    h.insert(HIGH_WATERMARK, HeaderValue::from(offsets.high_watermark));
    h.insert(LOG_START, HeaderValue::from(offsets.log_start));
    if next_offset >= offsets.high_watermark {
        h.insert(UP_TO_DATE, HeaderValue::from_static("true"));
    }
}
