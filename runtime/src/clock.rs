//! Wall-clock and monotonic time, injected.

use std::fmt::Debug;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in Unix milliseconds, and of monotonic time.
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

    /// Time since an arbitrary start (the boot, for [`SystemClock`]) that never goes backwards and
    /// keeps counting while the process is stopped and while the machine is suspended: what lease
    /// deadlines are measured on (docs/cluster.md, the acknowledgement rule). Values mean nothing
    /// across machines or boots; never store them.
    fn monotonic(&self) -> Duration;
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

    /// `CLOCK_BOOTTIME` on Linux: unlike `CLOCK_MONOTONIC` (what `std::time::Instant` reads) it
    /// counts the time the machine spent suspended. Elsewhere, an `Instant` since the first call.
    fn monotonic(&self) -> Duration {
        #[cfg(target_os = "linux")]
        {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
            Duration::new(
                u64::try_from(t.tv_sec).unwrap_or(0),
                u32::try_from(t.tv_nsec).unwrap_or(0),
            )
        }
        #[cfg(not(target_os = "linux"))]
        {
            static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            START.get_or_init(std::time::Instant::now).elapsed()
        }
    }
}

/// A clock that only moves when told to (tests). [`advance`](ManualClock::advance) moves both
/// its wall clock and its monotonic clock; [`set`](ManualClock::set) moves the wall clock only,
/// as an NTP step would.
#[cfg(any(test, feature = "test-util"))]
#[derive(Debug, Default)]
pub struct ManualClock {
    now: std::sync::atomic::AtomicI64,
    monotonic_ms: std::sync::atomic::AtomicU64,
}

#[cfg(any(test, feature = "test-util"))]
impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        ManualClock {
            now: std::sync::atomic::AtomicI64::new(now_ms),
            monotonic_ms: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Sets the time.
    pub fn set(&self, now_ms: i64) {
        self.now.store(now_ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// Moves the time forward by `ms` (the monotonic clock too, unless `ms` is negative).
    pub fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
        self.monotonic_ms.fetch_add(
            u64::try_from(ms).unwrap_or(0),
            std::sync::atomic::Ordering::SeqCst,
        );
    }
}

#[cfg(any(test, feature = "test-util"))]
impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn monotonic(&self) -> Duration {
        Duration::from_millis(self.monotonic_ms.load(std::sync::atomic::Ordering::SeqCst))
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
        // Setting the wall clock leaves the monotonic one where advancing put it.
        assert_eq!(clock.monotonic(), Duration::from_millis(5));
    }

    #[test]
    fn the_system_monotonic_clock_does_not_go_backwards_and_counts_real_time() {
        let a = SystemClock.monotonic();
        std::thread::sleep(Duration::from_millis(20));
        let b = SystemClock.monotonic();
        assert!(b >= a + Duration::from_millis(20), "{a:?} then {b:?}");
        assert!(b - a < Duration::from_secs(60), "{a:?} then {b:?}");
    }
}
