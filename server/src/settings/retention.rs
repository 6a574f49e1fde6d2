//! `[retention]`: the node's default retention policy (for tables that set none of their own)
//! and the cadence of the background task that applies every table's policy (docs/retention.md).

use std::time::Duration;

use mink_metadata::RetentionPolicy;
use serde::{Deserialize, Serialize};

/// The shortest age a policy may keep: a typo cannot empty a log at the next run.
pub const MIN_RETENTION_AGE_MS: u64 = 60_000;

/// The fewest bytes a policy may keep per bucket: one block of the default size.
pub const MIN_RETENTION_BYTES: u64 = 1 << 20;

/// Retention defaults and the retention task's cadence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionSettings {
    /// Default age kept, for tables whose policy sets none (`age_ms`). Default: unset, keep
    /// everything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age_ms: Option<u64>,
    /// Default bytes kept per bucket, for tables whose policy sets none (`bytes`). Default:
    /// unset, keep everything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// How often the task walks the buckets this node owns (`interval_ms`). Default 60 s.
    #[serde(rename = "interval_ms", with = "mink_runtime::duration_ms")]
    pub interval: Duration,
    /// Buckets examined at once by one run (`max_concurrent`). Default 16.
    pub max_concurrent: usize,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        RetentionSettings {
            age_ms: None,
            bytes: None,
            interval: Duration::from_secs(60),
            max_concurrent: 16,
        }
    }
}

impl RetentionSettings {
    /// The node's default policy.
    pub fn default_policy(&self) -> RetentionPolicy {
        RetentionPolicy {
            age_ms: self.age_ms,
            bytes: self.bytes,
        }
    }

    /// Refuses zero and too-small values, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        check_policy(&self.default_policy())
            .map_err(|(field, why)| format!("retention.{field} {why}"))?;
        if self.interval.is_zero() {
            return Err("retention.interval_ms must be at least 1".to_owned());
        }
        if self.max_concurrent == 0 || self.max_concurrent > 1024 {
            return Err("retention.max_concurrent must be 1-1024".to_owned());
        }
        Ok(())
    }
}

/// Checks a policy's values against the minimums: `Err((field, why))`.
pub fn check_policy(policy: &RetentionPolicy) -> Result<(), (&'static str, String)> {
    if let Some(age) = policy.age_ms
        && age < MIN_RETENTION_AGE_MS
    {
        return Err((
            "age_ms",
            format!("must be at least {MIN_RETENTION_AGE_MS} (one minute), not {age}"),
        ));
    }
    if let Some(bytes) = policy.bytes
        && bytes < MIN_RETENTION_BYTES
    {
        return Err((
            "bytes",
            format!("must be at least {MIN_RETENTION_BYTES} (one block), not {bytes}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::Settings;

    #[test]
    fn the_section_sets_defaults_and_refuses_too_small_values() {
        let s = Settings::from_toml(
            "[retention]\nage_ms = 86400000\nbytes = 1073741824\ninterval_ms = 5000",
        )
        .unwrap();
        assert_eq!(s.retention.age_ms, Some(86_400_000));
        assert_eq!(s.retention.default_policy().bytes, Some(1 << 30));
        assert_eq!(s.retention.interval.as_millis(), 5000);
        assert_eq!(s.validate(), Ok(()));
        assert!(Settings::from_toml("[retention]\nage = 5").is_err());
        let cases = [
            (
                "[retention]\nage_ms = 59999",
                "retention.age_ms must be at least 60000",
            ),
            (
                "[retention]\nbytes = 1000",
                "retention.bytes must be at least 1048576",
            ),
            (
                "[retention]\ninterval_ms = 0",
                "retention.interval_ms must be at least 1",
            ),
            (
                "[retention]\nmax_concurrent = 0",
                "retention.max_concurrent must be 1-1024",
            ),
        ];
        for (toml, message) in cases {
            let error = Settings::from_toml(toml).unwrap().validate().unwrap_err();
            assert!(error.starts_with(message), "{toml}: {error}");
        }
    }
}
