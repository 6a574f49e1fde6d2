//! The WAL writer's settings (`[engine.wal]` in a node's configuration).

use std::time::Duration;

use mink_runtime::Backoff;
use serde::{Deserialize, Serialize};

/// Settings of the WAL writer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WalSettings {
    /// PUTs of WAL objects that may be in flight at once, 1 to [`MAX_INFLIGHT_PUTS`]. More
    /// slots lower latency under load and raise the PUT rate (and the bill). Default 8.
    pub max_inflight_puts: usize,
    /// A group is sealed when its records reach this many bytes. Default 8 MiB.
    pub max_object_bytes: usize,
    /// While every PUT slot is busy, the open group is sealed once it holds an even share of the
    /// bytes in flight and waiting over the slots (at least this many, at most
    /// `max_object_bytes`), and the next group starts: the slots, as they free, then carry
    /// several groups of about that size instead of one group of everything that arrived
    /// meanwhile, whose PUT is the slowest (docs/wal-group-split.md). 0 turns it off, and so does
    /// `min_put_interval`, which asks for fewer PUTs. Default 4 MiB, compaction's
    /// `adopt_wal_object_bytes`: smaller pieces would each be written a second time.
    pub min_split_bytes: usize,
    /// Data blocks in WAL objects are cut at about this size (WAL objects are laid out like
    /// committed objects, so that the compactor can commit a large one as it is). Default 1 MiB.
    pub block_bytes: usize,
    /// First retry delay of a failed PUT; doubles per attempt, each delay stretched by a random
    /// jitter of up to its own length. Default 20 ms.
    #[serde(with = "mink_runtime::duration_ms")]
    pub retry_initial_backoff: Duration,
    /// Largest retry delay. Default 1 s.
    #[serde(with = "mink_runtime::duration_ms")]
    pub retry_max_backoff: Duration,
    /// How long a PUT keeps being retried before its appends fail. Default 30 s.
    #[serde(with = "mink_runtime::duration_ms")]
    pub retry_deadline: Duration,
    /// The open group is uploaded no sooner than this long after the last PUT started (it
    /// gathers appends meanwhile): fewer, larger PUTs under load, at the cost of latency. An
    /// append after a quiet spell is not held, nor is a full group. Default 0: off.
    #[serde(with = "mink_runtime::duration_ms")]
    pub min_put_interval: Duration,
    /// A WAL PUT still unanswered after this quantile of the recent WAL PUTs' latencies (each
    /// scaled up by the sizes' ratio when this object is larger) is sent a second time with the
    /// same key and bytes, and the first success wins (docs/hedged-puts.md). 0 turns hedging off.
    /// Default 0.95.
    pub put_hedge_quantile: f64,
    /// No PUT is hedged sooner than this after it was sent. Default 50 ms.
    #[serde(with = "mink_runtime::duration_ms")]
    pub put_hedge_min_delay: Duration,
    /// Hedged requests are at most this share of the WAL's PUTs. Default 0.1.
    pub put_hedge_budget: f64,
}

/// The most WAL PUTs a writer keeps in flight, whatever its settings: so no more than this many
/// WAL objects can be missing among the ones a writer used, and a replay that finds more than
/// this many missing in a row has passed the last one used (`replay.rs`).
pub const MAX_INFLIGHT_PUTS: usize = 32;

impl WalSettings {
    /// Whether the settings are in range: 1 to [`MAX_INFLIGHT_PUTS`] PUT slots, a hedging
    /// quantile and budget in `[0, 1]`.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_INFLIGHT_PUTS).contains(&self.max_inflight_puts) {
            return Err(format!(
                "engine.wal.max_inflight_puts must be between 1 and {MAX_INFLIGHT_PUTS}"
            ));
        }
        if !(0.0..=1.0).contains(&self.put_hedge_quantile) {
            return Err("engine.wal.put_hedge_quantile must be between 0 and 1".to_owned());
        }
        if !(0.0..=1.0).contains(&self.put_hedge_budget) {
            return Err("engine.wal.put_hedge_budget must be between 0 and 1".to_owned());
        }
        Ok(())
    }

    /// The delays between attempts of a failed PUT or id reservation.
    pub(crate) fn retry_backoff(&self) -> Backoff {
        Backoff::new(self.retry_initial_backoff, self.retry_max_backoff)
    }
}

impl Default for WalSettings {
    fn default() -> Self {
        WalSettings {
            max_inflight_puts: 8,
            max_object_bytes: 8 << 20,
            min_split_bytes: 4 << 20,
            block_bytes: 1 << 20,
            retry_initial_backoff: Duration::from_millis(20),
            retry_max_backoff: Duration::from_secs(1),
            retry_deadline: Duration::from_secs(30),
            min_put_interval: Duration::ZERO,
            put_hedge_quantile: 0.95,
            put_hedge_min_delay: Duration::from_millis(50),
            put_hedge_budget: 0.1,
        }
    }
}
