//! Node errors as Kafka error codes (docs/kafka.md, "Errors").

use crate::error::ApiError;

/// The Kafka error codes we answer.
pub(crate) mod code {
    pub(crate) const NONE: i16 = 0;
    pub(crate) const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub(crate) const OFFSET_OUT_OF_RANGE: i16 = 1;
    pub(crate) const CORRUPT_MESSAGE: i16 = 2;
    pub(crate) const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub(crate) const LEADER_NOT_AVAILABLE: i16 = 5;
    pub(crate) const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    pub(crate) const NOT_COORDINATOR: i16 = 16;
    pub(crate) const MESSAGE_TOO_LARGE: i16 = 10;
    pub(crate) const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    pub(crate) const UNSUPPORTED_VERSION: i16 = 35;
    pub(crate) const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
    pub(crate) const INVALID_PRODUCER_EPOCH: i16 = 47;
    pub(crate) const KAFKA_STORAGE_ERROR: i16 = 56;
    pub(crate) const UNKNOWN_PRODUCER_ID: i16 = 59;
    pub(crate) const INVALID_TIMESTAMP: i16 = 32;
    pub(crate) const INVALID_RECORD: i16 = 87;
    pub(crate) const OFFSET_METADATA_TOO_LARGE: i16 = 12;
    pub(crate) const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub(crate) const INVALID_TOPIC_EXCEPTION: i16 = 17;
    pub(crate) const ILLEGAL_GENERATION: i16 = 22;
    pub(crate) const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
    pub(crate) const INVALID_GROUP_ID: i16 = 24;
    pub(crate) const UNKNOWN_MEMBER_ID: i16 = 25;
    pub(crate) const INVALID_SESSION_TIMEOUT: i16 = 26;
    pub(crate) const REBALANCE_IN_PROGRESS: i16 = 27;
    pub(crate) const GROUP_AUTHORIZATION_FAILED: i16 = 30;
    pub(crate) const TOPIC_ALREADY_EXISTS: i16 = 36;
    pub(crate) const INVALID_PARTITIONS: i16 = 37;
    pub(crate) const INVALID_REPLICATION_FACTOR: i16 = 38;
    pub(crate) const INVALID_CONFIG: i16 = 40;
    pub(crate) const INVALID_REQUEST: i16 = 42;
    pub(crate) const POLICY_VIOLATION: i16 = 44;
    pub(crate) const MEMBER_ID_REQUIRED: i16 = 79;
    pub(crate) const GROUP_MAX_SIZE_REACHED: i16 = 81;
    pub(crate) const UNKNOWN_TOPIC_ID: i16 = 100;
    pub(crate) const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
    pub(crate) const SASL_AUTHENTICATION_FAILED: i16 = 58;
}

/// The code of a node error.
pub(crate) fn code_of(error: &ApiError) -> i16 {
    match error {
        ApiError::TableNotFound { .. } | ApiError::NoSuchBucket { .. } => {
            code::UNKNOWN_TOPIC_OR_PARTITION
        }
        ApiError::Moved { .. } | ApiError::BucketUnavailable { .. } => code::NOT_LEADER_OR_FOLLOWER,
        ApiError::OffsetTrimmed { .. } | ApiError::OffsetOutOfRange { .. } => {
            code::OFFSET_OUT_OF_RANGE
        }
        ApiError::OutOfOrderSequence { .. } => code::OUT_OF_ORDER_SEQUENCE_NUMBER,
        ApiError::StaleWriterEpoch { .. } => code::INVALID_PRODUCER_EPOCH,
        ApiError::UnknownWriter { .. } => code::UNKNOWN_PRODUCER_ID,
        ApiError::InvalidBatch { .. } => code::CORRUPT_MESSAGE,
        ApiError::BadRequest { .. } => code::INVALID_RECORD,
        ApiError::FutureTimestamp { .. } => code::INVALID_TIMESTAMP,
        ApiError::PayloadTooLarge { .. } | ApiError::LimitExceeded { .. } => {
            code::MESSAGE_TOO_LARGE
        }
        ApiError::Unauthorized { .. } | ApiError::Forbidden { .. } => {
            code::TOPIC_AUTHORIZATION_FAILED
        }
        ApiError::Unavailable { .. }
        | ApiError::ShuttingDown
        | ApiError::Overloaded { .. }
        | ApiError::TooManyRequests { .. }
        | ApiError::RateLimited => code::KAFKA_STORAGE_ERROR,
        _ => code::UNKNOWN_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_errors_get_the_codes_idempotent_producers_act_on() {
        let out_of_order = ApiError::OutOfOrderSequence {
            writer_id: 1,
            sequence: 5,
            expected: 3,
        };
        assert_eq!(code_of(&out_of_order), 45);
        let stale = ApiError::StaleWriterEpoch {
            writer_id: 1,
            epoch: 0,
            current: 1,
        };
        assert_eq!(code_of(&stale), 47);
        let moved = ApiError::Moved {
            owner: "http://elsewhere".into(),
        };
        assert_eq!(code_of(&moved), 6);
        let missing = ApiError::TableNotFound { table: "t".into() };
        assert_eq!(code_of(&missing), 3);
    }
}
