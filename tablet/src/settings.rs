//! The tablet's settings: every limit and cadence, with its default. A node reads them from the
//! `[tablet]` section of its settings file (the keys are the field names below; durations are
//! whole milliseconds under `_ms` keys).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Settings of a tablet (serialisable; every field has a default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TabletSettings {
    /// A writer idle for longer than this (no batch committed) is forgotten: its next batch may carry
    /// any sequence and restarts its window (`writer_ttl_ms`). Default 7 days.
    #[serde(rename = "writer_ttl_ms", with = "mink_runtime::duration_ms")]
    pub writer_ttl: Duration,
    /// A writer-window snapshot is written after this many appends since the last one, which bounds
    /// the replay after a crash. Default 1000.
    pub snapshot_every_appends: u64,
    /// A writer-window snapshot is written when an append comes this long after the last snapshot
    /// (`snapshot_interval_ms`). Default 60 s.
    #[serde(rename = "snapshot_interval_ms", with = "mink_runtime::duration_ms")]
    pub snapshot_interval: Duration,
    /// Largest append request in bytes. Default 64 MiB.
    pub max_request_bytes: u64,
    /// Largest number of batches in one append request. Default 10 000.
    pub max_request_batches: u64,
    /// Most rows one batch may hold, judged on its header before its body is decoded. Default
    /// 1 Mi (1 048 576).
    pub max_rows_per_batch: u64,
    /// Most rows one append request may hold, all its batches together. Default 1 Mi.
    pub max_rows_per_request: u64,
    /// Most idempotent writers the tablet tracks. At the cap a batch from a writer it does not know
    /// is refused (writers it knows keep exact deduplication); writers idle past `writer_ttl` free
    /// their place. Default 10 000, which keeps the writer snapshot under etcd's default request
    /// limit (see [`crate::writers::snapshot::MAX_BYTES_PER_WRITER`]).
    pub max_writers: u64,
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
            max_rows_per_batch: 1 << 20,
            max_rows_per_request: 1 << 20,
            max_writers: 10_000,
            replay_fetch_bytes: 4 << 20,
        }
    }
}

impl TabletSettings {
    /// Refuses zero and inconsistent values; the message names the setting as `{section}.{key}`
    /// (the node's section is `tablet`).
    pub fn validate(&self, section: &str) -> Result<(), String> {
        let positive = [
            ("snapshot_every_appends", self.snapshot_every_appends),
            ("max_request_bytes", self.max_request_bytes),
            ("max_request_batches", self.max_request_batches),
            ("max_rows_per_batch", self.max_rows_per_batch),
            ("max_rows_per_request", self.max_rows_per_request),
            ("max_writers", self.max_writers),
            ("replay_fetch_bytes", self.replay_fetch_bytes as u64),
            ("writer_ttl_ms", duration_ms(self.writer_ttl)),
            ("snapshot_interval_ms", duration_ms(self.snapshot_interval)),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{section}.{name} must be at least 1"));
        }
        // A batch holds at most i32::MAX rows (its header's count), a request at most u32::MAX.
        let capped = [
            (
                "max_rows_per_batch",
                self.max_rows_per_batch,
                i32::MAX as u64,
            ),
            (
                "max_rows_per_request",
                self.max_rows_per_request,
                u64::from(u32::MAX),
            ),
        ];
        if let Some((name, value, max)) = capped.iter().find(|(_, v, max)| v > max) {
            return Err(format!("{section}.{name} ({value}) must be at most {max}"));
        }
        if self.max_rows_per_batch > self.max_rows_per_request {
            return Err(format!(
                "{section}.max_rows_per_batch ({}) must not exceed {section}.max_rows_per_request ({})",
                self.max_rows_per_batch, self.max_rows_per_request
            ));
        }
        let limit = crate::writers::snapshot::MAX_WRITERS;
        if self.max_writers > limit {
            return Err(format!(
                "{section}.max_writers ({}) must be at most {limit}: a snapshot of more writers \
                 would not fit the metadata store's value limit",
                self.max_writers
            ));
        }
        Ok(())
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_name_the_setting() {
        assert_eq!(TabletSettings::default().validate("tablet"), Ok(()));
        type Change = fn(&mut TabletSettings);
        let cases: [(&str, Change); 7] = [
            ("tablet.max_rows_per_batch must be at least 1", |s| {
                s.max_rows_per_batch = 0
            }),
            ("tablet.max_writers must be at least 1", |s| {
                s.max_writers = 0
            }),
            ("tablet.writer_ttl_ms must be at least 1", |s| {
                s.writer_ttl = Duration::ZERO
            }),
            ("tablet.max_request_bytes must be at least 1", |s| {
                s.max_request_bytes = 0
            }),
            (
                "tablet.max_rows_per_batch (4294967296) must be at most",
                |s| {
                    s.max_rows_per_batch = 1 << 32;
                    s.max_rows_per_request = 1 << 32;
                },
            ),
            ("tablet.max_rows_per_batch (10) must not exceed", |s| {
                s.max_rows_per_batch = 10;
                s.max_rows_per_request = 5;
            }),
            ("tablet.max_writers (1000000) must be at most", |s| {
                s.max_writers = 1_000_000
            }),
        ];
        for (message, change) in cases {
            let mut settings = TabletSettings::default();
            change(&mut settings);
            let error = settings.validate("tablet").unwrap_err();
            assert!(error.starts_with(message), "{message}: {error}");
        }
    }
}
