//! Wall-clock time, injected.

use std::fmt::Debug;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in Unix milliseconds.
///
/// # Contract
///
/// A wall clock may go backwards (NTP steps it); callers that need monotonic values keep their own
/// high-water mark (the tablet never stamps a batch lower than the previous one). Values mean the
/// same thing across restarts (Unix time), so they may be stored.
pub trait Clock: Send + Sync + Debug + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// Now, in milliseconds since the Unix epoch, as an unsigned number (0 before the epoch).
    fn now_ms_unsigned(&self) -> u64 {
        u64::try_from(self.now_ms()).unwrap_or(0)
    }
}

/// Compile-time check that [`Clock`] stays object-safe.
fn _assert_object_safe(_: &dyn Clock) {}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to (tests).
#[cfg(any(test, feature = "test-util"))]
#[derive(Debug, Default)]
pub struct ManualClock {
    now: std::sync::atomic::AtomicI64,
}

#[cfg(any(test, feature = "test-util"))]
impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        ManualClock {
            now: std::sync::atomic::AtomicI64::new(now_ms),
        }
    }

    /// Sets the time.
    pub fn set(&self, now_ms: i64) {
        self.now.store(now_ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// Moves the time forward by `ms`.
    pub fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(any(test, feature = "test-util"))]
impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_reads_unix_time_and_a_manual_clock_moves_only_when_told() {
        // 2020-01-01 and 2200-01-01: a clock outside these is not reading Unix milliseconds.
        let now = SystemClock.now_ms();
        assert!(
            (1_577_836_800_000..7_258_118_400_000).contains(&now),
            "{now}"
        );

        let clock = ManualClock::new(10);
        assert_eq!(clock.now_ms(), 10);
        clock.advance(5);
        assert_eq!(clock.now_ms(), 15);
        clock.set(-3);
        assert_eq!((clock.now_ms(), clock.now_ms_unsigned()), (-3, 0));
    }
}
