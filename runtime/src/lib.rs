//! What the engine takes from its environment, in one place so every crate does it one way and
//! tests can control it:
//!
//! - [`Clock`]: wall-clock time in Unix milliseconds and monotonic time that counts suspends,
//!   injected ([`SystemClock`] in production, [`ManualClock`] in tests, behind the `test-util`
//!   feature);
//! - [`SeededRng`]: a small seeded pseudo-random generator whose sequence never changes, for fault
//!   and latency injection and load generators, so a recorded seed replays;
//! - [`Backoff`]: exponential retry delays with jitter (the `backon` crate), for every retry loop;
//! - [`duration_ms`]: how settings files spell a duration (whole milliseconds).
//!
//! No I/O and no async runtime: the crate is a leaf every other crate may depend on.

mod backoff;
mod clock;
pub mod duration_ms;
mod rng;

pub use backoff::Backoff;
pub use backon::Retryable;
#[cfg(any(test, feature = "test-util"))]
pub use clock::ManualClock;
pub use clock::{Clock, SystemClock};
pub use rng::SeededRng;
