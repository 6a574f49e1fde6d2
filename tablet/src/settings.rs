//! The tablet's settings: every limit and cadence, with its default.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Settings of a tablet (serialisable; every field has a default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TabletSettings {
    /// A writer idle for longer than this (no batch committed) is forgotten: its next batch may carry
    /// any sequence and restarts its window. Default 7 days.
    #[serde(with = "mink_runtime::duration_ms")]
    pub writer_ttl: Duration,
    /// A writer-window snapshot is written after this many appends since the last one, which bounds
    /// the replay after a crash. Default 1000.
    pub snapshot_every_appends: u64,
    /// A writer-window snapshot is written when an append comes this long after the last snapshot.
    /// Default 60 s.
    #[serde(with = "mink_runtime::duration_ms")]
    pub snapshot_interval: Duration,
    /// Largest append request in bytes. Default 64 MiB.
    pub max_request_bytes: u64,
    /// Largest number of batches in one append request. Default 10 000.
    pub max_request_batches: u64,
    /// Bytes asked of the stream per fetch when replaying the log at open. Default 4 MiB.
    pub replay_fetch_bytes: usize,
}

impl Default for TabletSettings {
    fn default() -> Self {
        TabletSettings {
            writer_ttl: Duration::from_secs(7 * 24 * 3600),
            snapshot_every_appends: 1000,
            snapshot_interval: Duration::from_secs(60),
            max_request_bytes: 64 << 20,
            max_request_batches: 10_000,
            replay_fetch_bytes: 4 << 20,
        }
    }
}
