//! `[chaos]`: fault injection for crash-safety runs.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Faults injected into every object store of the node (the `[chaos]` section): each PUT is
/// first delayed by `put_delay_ms`, then fails as "unavailable" (a retryable error) with
/// probability `put_failure_rate` (after reaching the store when `put_fail_after_write`). The
/// WAL and the compactor retry such failures, so the node keeps going unless a PUT fails for
/// longer than `engine.wal.retry_deadline`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChaosSettings {
    /// Probability (0.0 to 1.0) that a PUT fails. Default 0.
    pub put_failure_rate: f64,
    /// Delay added to every PUT (`put_delay_ms`). Default 0.
    #[serde(rename = "put_delay_ms", with = "mink_runtime::duration_ms")]
    pub put_delay: Duration,
    /// When true, a PUT chosen to fail first reaches the store and only then reports the
    /// failure, as a PUT whose answer was lost. Default false.
    pub put_fail_after_write: bool,
    /// Seed of the fault RNG, so a run can be replayed. Default 0.
    pub seed: u64,
    /// Latency model the object stores wear, for benchmarks (`cargo xtask bench`): `s3-standard`
    /// or `s3-express` (see `mink_s3stream::storage::LatencyProfile`). Default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_profile: Option<String>,
}

impl ChaosSettings {
    /// Refuses a failure rate outside 0..=1.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.put_failure_rate) {
            return Err(format!(
                "chaos.put_failure_rate ({}) must be between 0 and 1",
                self.put_failure_rate
            ));
        }
        Ok(())
    }
}
