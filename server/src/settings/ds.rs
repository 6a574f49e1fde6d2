//! `[ds]`: the Durable Streams front end (docs/durable-streams.md): whether `/ds` is served and
//! its limits.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The Durable Streams front end. Durations are whole milliseconds in files (the `_ms` keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DsSettings {
    /// Whether `/ds/v1/stream/...` is served (`enabled`). Default true.
    pub enabled: bool,
    /// The largest POST or PUT body (`max_append_bytes`); a larger one is a 413. Default 8 MiB.
    pub max_append_bytes: usize,
    /// Stored bytes a catch-up read or one SSE read takes from the log at a time, about
    /// (`max_read_bytes`); a response past it stops without `Stream-Up-To-Date`. Default 1 MiB.
    pub max_read_bytes: usize,
    /// How long a long-poll waits for a message (`long_poll_timeout_ms`). Default 30 s.
    #[serde(rename = "long_poll_timeout_ms", with = "mink_runtime::duration_ms")]
    pub long_poll_timeout: Duration,
    /// Streams whose TTL window and tail the node keeps in memory at once (`max_streams_cached`);
    /// past it those no request holds are forgotten, and read back from their logs on use.
    /// Default 100 000.
    pub max_streams_cached: usize,
    /// Producer names one stream may have (`max_producers_per_stream`); a new name past it is
    /// refused with 429 `too_many_writers`. Names last as long as their stream. Default 10 000.
    pub max_producers_per_stream: usize,
}

impl Default for DsSettings {
    fn default() -> Self {
        DsSettings {
            enabled: true,
            max_append_bytes: 8 << 20,
            max_read_bytes: 1 << 20,
            long_poll_timeout: Duration::from_secs(30),
            max_streams_cached: 100_000,
            max_producers_per_stream: 10_000,
        }
    }
}

impl DsSettings {
    /// Refuses zero limits and absurd ones, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        let counts = [
            ("ds.max_append_bytes", self.max_append_bytes),
            ("ds.max_read_bytes", self.max_read_bytes),
            ("ds.max_streams_cached", self.max_streams_cached),
            ("ds.max_producers_per_stream", self.max_producers_per_stream),
        ];
        if let Some((name, _)) = counts.iter().find(|(_, n)| *n == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        if self.max_append_bytes > 256 << 20 {
            return Err("ds.max_append_bytes must be at most 256 MiB".to_owned());
        }
        if self.max_read_bytes > 256 << 20 {
            return Err("ds.max_read_bytes must be at most 256 MiB".to_owned());
        }
        if self.long_poll_timeout.is_zero() || self.long_poll_timeout > Duration::from_secs(600) {
            return Err("ds.long_poll_timeout_ms must be 1 to 600000".to_owned());
        }
        Ok(())
    }
}
