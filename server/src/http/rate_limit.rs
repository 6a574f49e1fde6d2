//! The rate limit in front of `/v1`: a token bucket admitting `http.rate_limit_per_sec` requests
//! per second with bursts of `http.rate_limit_burst` (0 = unlimited); a refused request gets 429
//! `rate_limited` with `Retry-After` and is counted in `mink_rate_limited_total`.
//!
//! The limiter is the `governor` crate's; the check is ours (a gate, `gate.rs`) so that a refusal is the API's
//! JSON error and is counted (tower's `RateLimit` would make requests wait instead).

use std::num::NonZeroU32;
use std::sync::Arc;

use axum::extract::Request;
use governor::{DefaultDirectRateLimiter, Quota};

use super::gate::Check;
use crate::error::ApiError;
use crate::metrics::Metrics;

/// Admits `rate` requests per second with bursts of `burst` (governor's GCRA, the token bucket
/// without a refill task).
struct RateLimiter(DefaultDirectRateLimiter);

impl RateLimiter {
    fn new(rate: u32, burst: u32) -> Option<Self> {
        let rate = NonZeroU32::new(rate)?;
        let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_second(rate).allow_burst(burst);
        Some(RateLimiter(DefaultDirectRateLimiter::direct(quota)))
    }

    fn admit(&self) -> bool {
        self.0.check().is_ok()
    }
}

/// The state of the middleware.
pub(super) struct RateLimit {
    limiter: Option<RateLimiter>,
    metrics: Arc<Metrics>,
}

impl RateLimit {
    /// `rate` requests per second with bursts of `burst` (`rate` 0: no limit).
    pub(super) fn new(rate: u32, burst: u32, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(RateLimit {
            limiter: RateLimiter::new(rate, burst),
            metrics,
        })
    }
}

/// The rate limit as a gate (`gate.rs`): admits the request, or answers 429.
impl Check for Arc<RateLimit> {
    type Kept = ();

    fn check(&self, _: &mut Request) -> Result<(), ApiError> {
        if let Some(limiter) = &self.limiter
            && !limiter.admit()
        {
            self.metrics.rate_limited.inc();
            return Err(ApiError::RateLimited);
        }
        Ok(())
    }
}
