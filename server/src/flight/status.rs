//! The node's errors as gRPC statuses: each [`ApiError`] kind has one code, the message is the
//! error's, and the metadata carries `mink-error-kind` (the stable kind string) and, where the
//! client needs a number to go on, `mink-expected-sequence`, `mink-log-start`,
//! `mink-high-watermark` or `mink-location`.

use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use crate::error::ApiError;

/// The metadata key of an error's stable kind.
pub(crate) const ERROR_KIND: &str = "mink-error-kind";
/// The metadata key of the sequence an idempotent writer must send next.
pub(crate) const EXPECTED_SEQUENCE: &str = "mink-expected-sequence";
/// The metadata key of the Flight URL of the node that serves a bucket.
pub(crate) const LOCATION: &str = "mink-location";
/// The metadata key of the offset a read resumes from.
pub(crate) const NEXT_OFFSET: &str = "mink-next-offset";

/// The gRPC code of an error kind.
pub(crate) fn code_of(error: &ApiError) -> Code {
    match error {
        ApiError::BadRequest { .. }
        | ApiError::InvalidBatch { .. }
        | ApiError::FutureTimestamp { .. }
        | ApiError::PayloadTooLarge { .. }
        | ApiError::UnsupportedMediaType { .. }
        | ApiError::MisdirectedRequest { .. } => Code::InvalidArgument,
        ApiError::TableNotFound { .. }
        | ApiError::NoSuchBucket { .. }
        | ApiError::RouteNotFound { .. } => Code::NotFound,
        ApiError::TableExists { .. } => Code::AlreadyExists,
        ApiError::OffsetTrimmed { .. } | ApiError::OffsetOutOfRange { .. } => Code::OutOfRange,
        ApiError::OutOfOrderSequence { .. }
        | ApiError::StaleWriterEpoch { .. }
        | ApiError::UnknownWriter { .. }
        | ApiError::Conflict { .. } => Code::FailedPrecondition,
        ApiError::RateLimited
        | ApiError::LimitExceeded { .. }
        | ApiError::TooManyWriters { .. }
        | ApiError::TooManyRequests { .. }
        | ApiError::Overloaded { .. } => Code::ResourceExhausted,
        ApiError::Unauthorized { .. } => Code::Unauthenticated,
        ApiError::Forbidden { .. } => Code::PermissionDenied,
        ApiError::Unavailable { .. }
        | ApiError::BucketUnavailable { .. }
        | ApiError::ShuttingDown
        | ApiError::Moved { .. } => Code::Unavailable,
        ApiError::Internal { .. } => Code::Internal,
        ApiError::NotImplemented { .. } => Code::Unimplemented,
    }
}

/// The status of an error.
pub(crate) fn status(error: &ApiError) -> Status {
    let mut status = Status::new(code_of(error), error.to_string());
    set(&mut status, ERROR_KIND, error.kind());
    match error {
        ApiError::OutOfOrderSequence { expected, .. } => {
            set(&mut status, EXPECTED_SEQUENCE, &expected.to_string());
        }
        ApiError::OffsetTrimmed { log_start, .. } => {
            set(&mut status, "mink-log-start", &log_start.to_string());
        }
        ApiError::OffsetOutOfRange { high_watermark, .. } => {
            set(
                &mut status,
                "mink-high-watermark",
                &high_watermark.to_string(),
            );
        }
        _ => {}
    }
    status
}

impl From<ApiError> for Status {
    fn from(error: ApiError) -> Self {
        status(&error)
    }
}

/// An INVALID_ARGUMENT of kind `bad_request`.
pub(crate) fn invalid(message: impl Into<String>) -> Status {
    status(&ApiError::bad_request(message))
}

/// Adds an ASCII metadata entry (skipped if the value is not one).
pub(crate) fn set(status: &mut Status, key: &'static str, value: &str) {
    if let Ok(value) = MetadataValue::try_from(value) {
        status.metadata_mut().insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_get_their_code_kind_and_the_number_a_client_goes_on() {
        let s = status(&ApiError::OutOfOrderSequence {
            writer_id: 4,
            sequence: 9,
            expected: 3,
        });
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(
            s.metadata().get(ERROR_KIND).unwrap(),
            "out_of_order_sequence"
        );
        assert_eq!(s.metadata().get(EXPECTED_SEQUENCE).unwrap(), "3");
        assert!(s.message().contains("next expected sequence is 3"));
        let s = status(&ApiError::OffsetTrimmed {
            offset: 1,
            log_start: 10,
        });
        assert_eq!(s.code(), Code::OutOfRange);
        assert_eq!(s.metadata().get("mink-log-start").unwrap(), "10");
        assert_eq!(
            status(&ApiError::TableNotFound { table: "t".into() }).code(),
            Code::NotFound
        );
        assert_eq!(
            status(&ApiError::Unauthorized {
                message: "no".into()
            })
            .code(),
            Code::Unauthenticated
        );
        assert_eq!(
            status(&ApiError::Overloaded {
                message: "full".into()
            })
            .code(),
            Code::ResourceExhausted
        );
    }
}
