//! The node-wide budget of request bytes in flight (`http.max_inflight_request_bytes`), shared by
//! every front end.
//!
//! Every append reserves the bytes of its body before reading it (its `Content-Length`, or chunk
//! by chunk when the length is not known), and holds them, resized to the batches it made, until
//! the append is answered (a Flight DoPut holds the batches it has taken and not yet answered). A request that would take the node past the budget is refused with
//! 503 `overloaded` and `Retry-After`, so many large requests at once slow clients down instead
//! of growing the node's memory until it aborts. The bytes held are the gauge
//! `mink_http_inflight_request_bytes`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;

/// The budget: bytes held now and the most it allows.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: usize,
    used: AtomicUsize,
    metrics: Arc<Metrics>,
}

impl Budget {
    /// A budget of `limit` bytes, reported in `metrics`.
    pub(crate) fn new(limit: usize, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Budget {
            limit,
            used: AtomicUsize::new(0),
            metrics,
        })
    }

    /// Holds `bytes` until the permit is dropped, or refuses with 503 `overloaded`.
    pub(crate) fn reserve(self: &Arc<Self>, bytes: usize) -> ApiResult<Permit> {
        self.take(bytes)?;
        Ok(Permit {
            budget: Arc::clone(self),
            bytes,
        })
    }

    fn take(&self, bytes: usize) -> ApiResult<()> {
        if bytes == 0 {
            return Ok(());
        }
        let taken = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            });
        match taken {
            Ok(_) => {
                self.metrics.inflight_request_bytes.inc_by(gauge(bytes));
                Ok(())
            }
            Err(used) => {
                self.metrics.overloaded.inc();
                Err(ApiError::Overloaded {
                    message: format!(
                        "requests in flight hold {used} bytes and this one needs {bytes} more, \
                         past the {} of `http.max_inflight_request_bytes`; retry",
                        self.limit
                    ),
                })
            }
        }
    }

    fn give_back(&self, bytes: usize) {
        if bytes > 0 {
            self.used.fetch_sub(bytes, Ordering::AcqRel);
            self.metrics.inflight_request_bytes.dec_by(gauge(bytes));
        }
    }

    /// Bytes held now.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

fn gauge(bytes: usize) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// Bytes held against the budget; given back when dropped.
#[derive(Debug)]
pub(crate) struct Permit {
    budget: Arc<Budget>,
    bytes: usize,
}

impl Permit {
    /// Bytes this permit holds.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds `bytes` instead: growing may be refused (503 `overloaded`, the permit unchanged),
    /// shrinking gives the difference back.
    pub(crate) fn resize(&mut self, bytes: usize) -> ApiResult<()> {
        if bytes > self.bytes {
            self.budget.take(bytes - self.bytes)?;
        } else {
            self.budget.give_back(self.bytes - bytes);
        }
        self.bytes = bytes;
        Ok(())
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_past_the_budget_are_refused_and_dropped_permits_give_back() {
        let metrics = Arc::new(Metrics::new(None));
        let budget = Budget::new(100, metrics.clone());
        let first = budget.reserve(60).unwrap();
        let mut second = budget.reserve(40).unwrap();
        let refused = budget.reserve(1).unwrap_err();
        assert_eq!(refused.kind(), "overloaded");
        assert!(
            refused
                .to_string()
                .contains("http.max_inflight_request_bytes"),
            "{refused}"
        );
        assert_eq!(second.resize(41).unwrap_err().kind(), "overloaded");
        assert_eq!(
            second.bytes(),
            40,
            "a refused growth leaves the permit as it was"
        );
        second.resize(10).unwrap();
        assert_eq!(budget.used(), 70);
        drop(first);
        assert_eq!(budget.used(), 10);
        assert_eq!(metrics.inflight_request_bytes.get(), 10);
        drop(second);
        assert_eq!(budget.used(), 0);
        assert_eq!(metrics.inflight_request_bytes.get(), 0);
        assert_eq!(metrics.overloaded.get(), 2);
        budget.reserve(100).unwrap();
    }
}
