//! The rate limit in front of `/v1`: a token bucket admitting `http.rate_limit_per_sec` requests
//! per second with bursts of `http.rate_limit_burst` (0 = unlimited); a refused request gets 429
//! `rate_limited` with `Retry-After` and is counted in `mink_rate_limited_total`.
//!
//! The limiter is the `governor` crate's; the middleware is ours so that a refusal is the API's
//! JSON error and is counted (tower's `RateLimit` would make requests wait instead).

use std::num::NonZeroU32;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::{DefaultDirectRateLimiter, Quota};

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

/// The middleware: admits the request through the rate limit, or answers 429.
pub(super) async fn admit(
    State(limit): State<Arc<RateLimit>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(limiter) = &limit.limiter
        && !limiter.admit()
    {
        limit.metrics.rate_limited.inc();
        return ApiError::RateLimited.into_response();
    }
    next.run(request).await
}
