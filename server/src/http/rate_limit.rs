//! The rate limit in front of `/v1`: a token bucket admitting `http.rate_limit_per_sec` requests
//! per second with bursts of `http.rate_limit_burst` (0 = unlimited); a refused request gets 429
//! `rate_limited` with `Retry-After` and is counted in `mink_rate_limited_total`.
//!
//! Hand-written because neither tower-http nor tower (as the workspace declares it) has a limiter
//! that refuses: tower's `RateLimit` makes requests wait instead.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;

use crate::error::ApiError;
use crate::metrics::Metrics;

/// A token bucket admitting `rate` requests per second with bursts of `burst`.
#[derive(Debug)]
struct RateLimiter {
    rate: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    fn new(rate: u32, burst: u32) -> Option<Self> {
        (rate > 0).then(|| RateLimiter {
            rate: f64::from(rate),
            burst: f64::from(burst.max(1)),
            state: Mutex::new((f64::from(burst.max(1)), Instant::now())),
        })
    }

    fn admit(&self) -> bool {
        let mut state = self.state.lock();
        let now = Instant::now();
        let elapsed = now.duration_since(state.1).as_secs_f64();
        state.0 = (state.0 + elapsed * self.rate).min(self.burst);
        state.1 = now;
        if state.0 >= 1.0 {
            state.0 -= 1.0;
            true
        } else {
            false
        }
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
