//! `[tablet]`: the settings every tablet of the node opens with ([`TabletSettings`], the tablet
//! crate's own, so the keys are its field names: `writer_ttl_ms`, `snapshot_every_appends`,
//! `snapshot_interval_ms`, `max_request_bytes`, `max_request_batches`, `max_rows_per_batch`,
//! `max_rows_per_request`, `max_writers`, `replay_fetch_bytes`).

pub use mink_tablet::TabletSettings;

/// Refuses zero and inconsistent values, naming the setting (`tablet.max_writers must be at
/// least 1`).
pub(super) fn validate(settings: &TabletSettings) -> Result<(), String> {
    settings.validate("tablet")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::Settings;

    #[test]
    fn the_section_sets_the_tablet_limits_and_refuses_bad_ones() {
        let s = Settings::from_toml(
            "[tablet]\nmax_writers = 50\nmax_rows_per_batch = 10\nwriter_ttl_ms = 1500",
        )
        .unwrap();
        assert_eq!(s.tablet.max_writers, 50);
        assert_eq!(s.tablet.max_rows_per_batch, 10);
        assert_eq!(s.tablet.writer_ttl, Duration::from_millis(1500));
        assert_eq!(s.validate(), Ok(()));
        assert!(Settings::from_toml("[tablet]\nmax_writer = 5").is_err());
        let cases = [
            (
                "[tablet]\nmax_writers = 0",
                "tablet.max_writers must be at least 1",
            ),
            (
                "[tablet]\nmax_rows_per_request = 0",
                "tablet.max_rows_per_request must be at least 1",
            ),
            (
                "[tablet]\nwriter_ttl_ms = 0",
                "tablet.writer_ttl_ms must be at least 1",
            ),
            (
                "[tablet]\nmax_writers = 20000",
                "tablet.max_writers (20000) must be at most",
            ),
        ];
        for (toml, message) in cases {
            let error = Settings::from_toml(toml).unwrap().validate().unwrap_err();
            assert!(error.starts_with(message), "{toml}: {error}");
        }
    }
}
