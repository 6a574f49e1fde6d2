//! Durations in settings files, as whole milliseconds (`retry_deadline = 30000`): the one way every
//! crate's settings spell a duration. Use as `#[serde(with = "mink_runtime::duration_ms")]`.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Writes `value` as whole milliseconds (saturating).
pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(value.as_millis()).unwrap_or(u64::MAX))
}

/// Reads whole milliseconds.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    u64::deserialize(deserializer).map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Settings {
        #[serde(with = "super")]
        timeout: Duration,
    }

    #[test]
    fn whole_milliseconds_both_ways() {
        let settings = Settings {
            timeout: Duration::from_millis(1500),
        };
        let text = serde_json::to_string(&settings).unwrap();
        assert_eq!(text, r#"{"timeout":1500}"#);
        assert_eq!(serde_json::from_str::<Settings>(&text).unwrap(), settings);
        assert!(serde_json::from_str::<Settings>(r#"{"timeout":-1}"#).is_err());
    }
}
