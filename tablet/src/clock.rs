//! Time, injected: the tablet stamps `commit_timestamp` and judges writer idleness with a [`Clock`], so
//! tests can move time by hand ([`ManualClock`]).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in Unix milliseconds.
///
/// # Contract
///
/// `now_ms` may go backwards (wall clocks do); the tablet never stamps a batch with a time lower than
/// the previous batch's, so the log's commit timestamps stay non-decreasing whatever the clock does.
pub trait Clock: Send + Sync + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
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
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        ManualClock {
            now: AtomicI64::new(now_ms),
        }
    }

    /// Sets the time.
    pub fn set(&self, now_ms: i64) {
        self.now.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `ms`.
    pub fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}
