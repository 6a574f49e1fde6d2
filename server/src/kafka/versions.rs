//! The APIs and versions we serve, and ApiVersions (docs/kafka.md, "Versions").
//!
//! The maxima are those of Apache Kafka 3.0, so clients that infer a broker's release from the
//! advertised ranges (kafka-python) see one that exists; the minima are Kafka 4.0's.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};

/// The API keys we serve with their version ranges.
const SERVED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 0, 11),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 2, 7),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 4),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 2, 8),
    (ApiKey::ListGroups, 0, 4),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeCluster, 0, 0),
];

/// The range served for `key`, if it is served.
pub(crate) fn served(key: i16) -> Option<(i16, i16)> {
    SERVED
        .iter()
        .find(|(k, _, _)| *k as i16 == key)
        .map(|(_, min, max)| (*min, *max))
}

/// Whether `version` of `key` is served.
pub(crate) fn is_served(key: i16, version: i16) -> bool {
    served(key).is_some_and(|(min, max)| (min..=max).contains(&version))
}

/// Whether `version` of `key` uses the flexible encodings (KIP-482): its request header is
/// version 2.
pub(crate) fn flexible(key: i16, version: i16) -> bool {
    ApiKey::try_from(key).is_ok_and(|k| k.request_header_version(version) >= 2)
}

/// The ApiVersions answer; `error_code` is UNSUPPORTED_VERSION (35) when the client asked for a
/// version we do not serve (then it is encoded as version 0).
pub(crate) fn api_versions(error_code: i16) -> ApiVersionsResponse {
    let api_keys = SERVED
        .iter()
        .map(|(key, min, max)| {
            ApiVersion::default()
                .with_api_key(*key as i16)
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_range_is_one_the_crate_can_encode_and_decode() {
        for (key, min, max) in SERVED {
            let valid = key.valid_versions();
            assert!(valid.min <= *min && *max <= valid.max, "{key:?}");
        }
    }

    #[test]
    fn flexible_versions_start_where_kafka_says() {
        assert!(!flexible(ApiKey::Produce as i16, 8));
        assert!(flexible(ApiKey::Produce as i16, 9));
        assert!(flexible(ApiKey::Fetch as i16, 12));
        assert!(!flexible(ApiKey::Fetch as i16, 11));
        assert!(flexible(ApiKey::ApiVersions as i16, 3));
        assert!(!flexible(ApiKey::ApiVersions as i16, 2));
        assert!(!is_served(ApiKey::Produce as i16, 2));
        assert!(!is_served(1000, 0));
    }
}
