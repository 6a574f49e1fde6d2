//! `[node]`: the node's own lifecycle: the start-up probes, what it does once its WAL has failed,
//! the cadence of the background cleanup of dropped tables, and the readiness probe's timeout.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Lifecycle timings of a node. Durations are whole milliseconds in files (the `_ms` keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeSettings {
    /// How long each start-up probe (object store write, read back and delete; metadata read) may
    /// take before the node gives up starting (`probe_timeout_ms`). Default 10 s.
    #[serde(rename = "probe_timeout_ms", with = "mink_runtime::duration_ms")]
    pub probe_timeout: Duration,
    /// Once the WAL has failed for good, how long the node keeps answering (`/healthz` 503, appends
    /// 503) before it exits with status 75 so its supervisor restarts it
    /// (`exit_delay_on_wal_failure_ms`). Default 2 s.
    #[serde(
        rename = "exit_delay_on_wal_failure_ms",
        with = "mink_runtime::duration_ms"
    )]
    pub exit_delay_on_wal_failure: Duration,
    /// Interval of the pass that destroys the tablets of dropped tables and then their tombstones
    /// (`drop_cleanup_interval_ms`); one pass also runs at start. Default 10 s.
    #[serde(
        rename = "drop_cleanup_interval_ms",
        with = "mink_runtime::duration_ms"
    )]
    pub drop_cleanup_interval: Duration,
    /// How long `/readyz` waits for each store to answer before it says not ready
    /// (`ready_timeout_ms`). Default 2 s.
    #[serde(rename = "ready_timeout_ms", with = "mink_runtime::duration_ms")]
    pub ready_timeout: Duration,
    /// How many bucket logs may be opening at once (`max_concurrent_opens`): an open writes the
    /// tablet's metadata (and its manifest when it is new) and replays its writer windows, and a
    /// burst of first uses (a table's thousand buckets, a restart) queues for these slots.
    /// Default 256, at most 4,096.
    pub max_concurrent_opens: usize,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            probe_timeout: Duration::from_secs(10),
            exit_delay_on_wal_failure: Duration::from_secs(2),
            drop_cleanup_interval: Duration::from_secs(10),
            ready_timeout: Duration::from_secs(2),
            max_concurrent_opens: crate::bucket_log::OPEN_PARALLELISM,
        }
    }
}

/// Most bucket logs opening at once that the node accepts.
const MAX_CONCURRENT_OPENS: usize = 4096;

/// Longest delay accepted before exiting after a WAL failure: a node that has stopped taking
/// appends should not linger for more than a few minutes.
const MAX_EXIT_DELAY: Duration = Duration::from_secs(600);

impl NodeSettings {
    /// Refuses zero and absurd values, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("node.probe_timeout_ms", self.probe_timeout),
            ("node.drop_cleanup_interval_ms", self.drop_cleanup_interval),
            ("node.ready_timeout_ms", self.ready_timeout),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, d)| d.is_zero()) {
            return Err(format!("{name} must be at least 1"));
        }
        if !(1..=MAX_CONCURRENT_OPENS).contains(&self.max_concurrent_opens) {
            return Err(format!(
                "node.max_concurrent_opens must be between 1 and {MAX_CONCURRENT_OPENS}"
            ));
        }
        if self.exit_delay_on_wal_failure > MAX_EXIT_DELAY {
            return Err(format!(
                "node.exit_delay_on_wal_failure_ms must be at most {}",
                MAX_EXIT_DELAY.as_millis()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_absurd_values_are_refused_naming_the_setting() {
        assert_eq!(NodeSettings::default().validate(), Ok(()));
        let zero_probe = NodeSettings {
            probe_timeout: Duration::ZERO,
            ..NodeSettings::default()
        };
        assert!(
            zero_probe
                .validate()
                .unwrap_err()
                .contains("node.probe_timeout_ms")
        );
        let zero_cleanup = NodeSettings {
            drop_cleanup_interval: Duration::ZERO,
            ..NodeSettings::default()
        };
        assert!(
            zero_cleanup
                .validate()
                .unwrap_err()
                .contains("node.drop_cleanup_interval_ms")
        );
        let long_delay = NodeSettings {
            exit_delay_on_wal_failure: Duration::from_secs(3600),
            ..NodeSettings::default()
        };
        assert!(
            long_delay
                .validate()
                .unwrap_err()
                .contains("node.exit_delay_on_wal_failure_ms")
        );
        for opens in [0, MAX_CONCURRENT_OPENS + 1] {
            let wrong = NodeSettings {
                max_concurrent_opens: opens,
                ..NodeSettings::default()
            };
            assert!(
                wrong
                    .validate()
                    .unwrap_err()
                    .contains("node.max_concurrent_opens")
            );
        }
        // Exiting at once is a valid choice.
        let at_once = NodeSettings {
            exit_delay_on_wal_failure: Duration::ZERO,
            ..NodeSettings::default()
        };
        assert_eq!(at_once.validate(), Ok(()));
    }
}
