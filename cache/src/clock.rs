//! The clock the block cache measures page age with, injected so that tests can control it.

use std::{
    fmt::Debug,
    sync::atomic::{AtomicU64, Ordering},
    time::{SystemTime, UNIX_EPOCH},
};

/// A source of wall-clock time in milliseconds.
///
/// Contract: values never go backwards within one process. Page ages are stored with the page (also in
/// the disk tier), so the clock must mean the same thing across restarts: Unix time.
pub trait Clock: Send + Sync + Debug + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_millis(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told to; for tests.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock showing `now_millis`.
    pub fn new(now_millis: u64) -> Self {
        Self {
            now: AtomicU64::new(now_millis),
        }
    }

    /// Moves the clock forward by `millis`.
    pub fn advance(&self, millis: u64) {
        self.now.fetch_add(millis, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}
