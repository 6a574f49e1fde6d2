//! Exponential retry delays with jitter: the one backoff every retry loop uses.
//!
//! The delays come from the `backon` crate. A loop either drives them itself (`delays()`: an
//! iterator, ended when the retries are used up) or hands an async operation to backon's
//! [`Retryable`](crate::Retryable) with `builder()`.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Delays between retries: the first about `initial`, doubling up to `max`, each stretched by a
/// random jitter of up to its own length (so a delay lies in `[d, 2d)` for the nominal `d`), so that
/// many callers failing together do not retry together. At most `max_retries` delays, or without end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    max_retries: Option<usize>,
}

impl Backoff {
    /// Delays from `initial` doubling to `max`, without end.
    pub const fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            max_retries: None,
        }
    }

    /// At most `retries` delays (so `retries + 1` attempts).
    pub const fn with_max_retries(self, retries: usize) -> Self {
        Backoff {
            max_retries: Some(retries),
            ..self
        }
    }

    /// The delays, in order.
    pub fn delays(&self) -> ExponentialBackoff {
        self.builder().build()
    }

    /// The same policy as a backon builder, for `operation.retry(backoff.builder())`.
    pub fn builder(&self) -> ExponentialBuilder {
        let builder = ExponentialBuilder::new()
            .with_min_delay(self.initial)
            .with_max_delay(self.max.max(self.initial))
            .with_jitter();
        match self.max_retries {
            Some(retries) => builder.with_max_times(retries),
            None => builder.without_max_times(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_to_the_cap_with_jitter_and_stop_after_the_retries() {
        let ms = Duration::from_millis;
        let delays: Vec<Duration> = Backoff::new(ms(10), ms(40))
            .with_max_retries(6)
            .delays()
            .collect();
        assert_eq!(delays.len(), 6);
        for (delay, nominal) in delays.iter().zip([10, 20, 40, 40, 40, 40]) {
            assert!(
                (ms(nominal)..ms(2 * nominal)).contains(delay),
                "{delay:?} for nominal {nominal} ms in {delays:?}"
            );
        }
        // Jitter: a hundred delays at the cap are not all the same.
        let capped: Vec<Duration> = Backoff::new(ms(40), ms(40)).delays().take(100).collect();
        assert!(capped.iter().any(|d| *d != capped[0]), "{capped:?}");
        assert_eq!(
            Backoff::new(ms(1), ms(1))
                .with_max_retries(0)
                .delays()
                .next(),
            None
        );
    }
}
