//! Hedged WAL PUTs: a PUT still unanswered well past what recent PUTs took is sent a second
//! time, and the first success wins.
//!
//! An object store's latency has a long tail of requests that are slow on their own (on S3 a
//! request that takes several times the median is usually fast when sent again), and the WAL
//! releases acknowledgements in submission order, so one slow PUT holds every later append. The
//! writer keeps the latencies of its last [`SAMPLES`] PUTs; a PUT unanswered after their
//! `put_hedge_quantile` (each recent latency scaled up by the ratio of the sizes when this
//! object is larger, never down), and at least `put_hedge_min_delay`, gets a second request with
//! the same key and bytes. The two may both land: the object is the same either way, and the
//! WAL's keys are written by one writer only. Hedges are bounded to `put_hedge_budget` of the
//! PUTs (a token bucket filled by each PUT), so a store that is slow for everyone (overloaded,
//! or throttling) gets at most that much more load.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::TryFutureExt;

use super::WalSettings;
use crate::storage::{ObjectStorage, PutResult, Result};

/// Recent PUT latencies kept.
pub(crate) const SAMPLES: usize = 128;
/// No hedging before this many PUTs have been timed.
pub(crate) const MIN_SAMPLES: usize = 16;
/// The most hedges the budget can save up.
const MAX_TOKENS: f64 = 4.0;

/// When to hedge a WAL PUT, from the latencies of the recent ones.
#[derive(Debug)]
pub(crate) struct Hedger {
    quantile: f64,
    min_delay: Duration,
    budget: f64,
    state: Mutex<HedgeState>,
}

#[derive(Debug, Default)]
struct HedgeState {
    /// The last PUTs: how long each took to succeed and its size.
    samples: VecDeque<(Duration, usize)>,
    tokens: f64,
}

impl Hedger {
    pub(crate) fn new(settings: &WalSettings) -> Self {
        Hedger {
            quantile: settings.put_hedge_quantile,
            min_delay: settings.put_hedge_min_delay,
            budget: settings.put_hedge_budget,
            state: Mutex::new(HedgeState::default()),
        }
    }

    fn enabled(&self) -> bool {
        self.quantile > 0.0 && self.budget > 0.0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HedgeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long a PUT of `size` bytes may go unanswered before it is hedged; `None` when hedging
    /// is off or too few PUTs were timed yet.
    pub(crate) fn delay(&self, size: usize) -> Option<Duration> {
        if !self.enabled() {
            return None;
        }
        let state = self.lock();
        if state.samples.len() < MIN_SAMPLES {
            return None;
        }
        let mut scaled: Vec<f64> = state
            .samples
            .iter()
            .map(|&(took, was)| took.as_secs_f64() * (size as f64 / was.max(1) as f64).max(1.0))
            .collect();
        drop(state);
        let rank = ((scaled.len() as f64 * self.quantile).ceil() as usize).clamp(1, scaled.len());
        let (_, at, _) = scaled.select_nth_unstable_by(rank - 1, f64::total_cmp);
        let delay = Duration::try_from_secs_f64(*at).unwrap_or(Duration::MAX);
        Some(delay.max(self.min_delay))
    }

    /// Notes a PUT that succeeded after `took`, and earns the budget its share of a hedge.
    pub(crate) fn record(&self, took: Duration, size: usize) {
        if !self.enabled() {
            return;
        }
        let mut state = self.lock();
        if state.samples.len() == SAMPLES {
            state.samples.pop_front();
        }
        state.samples.push_back((took, size));
        state.tokens = (state.tokens + self.budget).min(MAX_TOKENS);
    }

    /// Spends one hedge from the budget, if it has one.
    fn take(&self) -> bool {
        let mut state = self.lock();
        if state.tokens >= 1.0 {
            state.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Whether an attempt was hedged, for the writer's counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hedged {
    /// A second request was sent.
    pub(crate) sent: bool,
    /// The second request's success answered the attempt.
    pub(crate) won: bool,
}

/// Tags a request's success with whether it was the hedge (one type for both requests).
fn answered(hedge: bool) -> impl FnOnce(PutResult) -> (PutResult, bool) {
    move |done| (done, hedge)
}

/// One attempt at the PUT of `parts` as `key`, hedged: if the first request is unanswered after
/// the hedger's delay (and its budget allows), a second one is sent and the first success is
/// taken; the other request is dropped. Fails only when every request sent failed (with the
/// last error).
pub(crate) async fn put(
    storage: &dyn ObjectStorage,
    key: &str,
    parts: &[Bytes],
    hedger: &Hedger,
) -> (Result<PutResult>, Hedged) {
    let size: usize = parts.iter().map(Bytes::len).sum();
    let started = Instant::now();
    // A boxed future (`async_trait`): it can be polled by reference, then moved into the race.
    let mut first = storage.put_parts(key, parts.to_vec());
    let mut hedged = Hedged::default();
    let outcome = match hedger.delay(size) {
        None => first.await,
        Some(delay) => tokio::select! {
            biased;
            outcome = &mut first => outcome,
            () = tokio::time::sleep(delay) => {
                if hedger.take() {
                    hedged.sent = true;
                    let second = storage.put_parts(key, parts.to_vec());
                    // The first success, or the last error when both fail.
                    let race = [first.map_ok(answered(false)), second.map_ok(answered(true))];
                    futures::future::select_ok(race).await.map(|((done, won), _)| {
                        hedged.won = won;
                        done
                    })
                } else {
                    first.await
                }
            }
        },
    };
    if outcome.is_ok() {
        hedger.record(started.elapsed(), size);
    }
    (outcome, hedged)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::storage::{ObjectMeta, ObjectStoreBackend};

    fn settings(quantile: f64, min_delay_ms: u64, budget: f64) -> WalSettings {
        WalSettings {
            put_hedge_quantile: quantile,
            put_hedge_min_delay: Duration::from_millis(min_delay_ms),
            put_hedge_budget: budget,
            ..WalSettings::default()
        }
    }

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn the_delay_is_the_quantile_of_recent_latencies_scaled_up_to_the_size() {
        let hedger = Hedger::new(&settings(0.9, 0, 1.0));
        for i in 1..=MIN_SAMPLES as u64 - 1 {
            hedger.record(ms(i * 10), 1000);
        }
        assert_eq!(hedger.delay(1000), None, "too few samples");
        hedger.record(ms(160), 1000);
        // 16 samples of 10..=160 ms: the 0.9 quantile is the 15th, 150 ms.
        assert_eq!(hedger.delay(1000), Some(ms(150)));
        // A smaller object is not scaled down; a larger one is scaled up.
        assert_eq!(hedger.delay(10), Some(ms(150)));
        assert_eq!(hedger.delay(2000), Some(ms(300)));
        // Only the last SAMPLES count.
        for _ in 0..SAMPLES {
            hedger.record(ms(5), 1000);
        }
        assert_eq!(hedger.delay(1000), Some(ms(5)));
    }

    #[test]
    fn the_delay_is_never_below_the_floor_and_off_means_none() {
        let hedger = Hedger::new(&settings(0.95, 50, 0.1));
        for _ in 0..MIN_SAMPLES {
            hedger.record(ms(1), 100);
        }
        assert_eq!(hedger.delay(100), Some(ms(50)));
        let off = Hedger::new(&settings(0.0, 0, 0.1));
        for _ in 0..MIN_SAMPLES {
            off.record(ms(1), 100);
        }
        assert_eq!(off.delay(100), None);
    }

    #[test]
    fn the_budget_allows_its_share_of_hedges_and_saves_up_a_few() {
        let hedger = Hedger::new(&settings(0.95, 0, 0.25));
        assert!(!hedger.take(), "nothing earned yet");
        for _ in 0..4 {
            hedger.record(ms(1), 1);
        }
        assert!(hedger.take());
        assert!(!hedger.take());
        for _ in 0..100 {
            hedger.record(ms(1), 1);
        }
        let saved = std::iter::from_fn(|| hedger.take().then_some(())).count();
        assert_eq!(saved, MAX_TOKENS as usize);
    }

    /// An in-memory store whose PUT request number `hang_at` (from 0) never answers, and whose
    /// later PUTs fail when told to.
    #[derive(Debug)]
    pub(crate) struct HangingPut {
        inner: ObjectStoreBackend,
        pub(crate) puts: AtomicUsize,
        hang_at: usize,
        fail_after: bool,
    }

    impl HangingPut {
        pub(crate) fn new(hang_at: usize, fail_after: bool) -> Self {
            HangingPut {
                inner: ObjectStoreBackend::memory(),
                puts: AtomicUsize::new(0),
                hang_at,
                fail_after,
            }
        }
    }

    #[async_trait]
    impl ObjectStorage for HangingPut {
        fn name(&self) -> &str {
            "hanging-put"
        }
        async fn put(&self, key: &str, data: Bytes) -> Result<PutResult> {
            let n = self.puts.fetch_add(1, Ordering::SeqCst);
            if n == self.hang_at {
                std::future::pending::<()>().await;
            }
            if self.fail_after && n > self.hang_at {
                return Err(crate::storage::StorageError::Unavailable {
                    op: crate::storage::StorageOp::Put,
                    key: key.to_owned(),
                    source: "refused".into(),
                });
            }
            self.inner.put(key, data).await
        }
        async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutResult> {
            self.inner.put_if_absent(key, data).await
        }
        async fn get(&self, key: &str) -> Result<Bytes> {
            self.inner.get(key).await
        }
        async fn get_range(&self, key: &str, range: std::ops::Range<u64>) -> Result<Bytes> {
            self.inner.get_range(key, range).await
        }
        async fn head(&self, key: &str) -> Result<ObjectMeta> {
            self.inner.head(key).await
        }
        async fn delete(&self, key: &str) -> Result<()> {
            self.inner.delete(key).await
        }
        async fn delete_many(&self, keys: &[String]) -> Result<()> {
            self.inner.delete_many(keys).await
        }
        async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
            self.inner.list(prefix).await
        }
    }

    fn primed(quantile: f64) -> Hedger {
        let hedger = Hedger::new(&settings(quantile, 0, 1.0));
        for _ in 0..MIN_SAMPLES {
            hedger.record(ms(20), 4);
        }
        hedger
    }

    #[tokio::test(start_paused = true)]
    async fn a_put_unanswered_past_the_delay_is_sent_again_and_the_second_answer_wins() {
        let store = HangingPut::new(0, false);
        let hedger = primed(0.95);
        let parts = [Bytes::from_static(b"ab"), Bytes::from_static(b"cd")];
        let started = tokio::time::Instant::now();
        let (outcome, hedged) = put(&store, "wal/1", &parts, &hedger).await;
        outcome.unwrap();
        assert_eq!(started.elapsed(), ms(20), "hedged after the quantile");
        assert_eq!(
            store.get("wal/1").await.unwrap(),
            Bytes::from_static(b"abcd")
        );
        assert_eq!(store.puts.load(Ordering::SeqCst), 2);
        assert_eq!(
            hedged,
            Hedged {
                sent: true,
                won: true
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_hedging_or_budget_the_first_request_is_all_there_is() {
        for hedger in [primed(0.0), Hedger::new(&settings(0.95, 0, 0.01))] {
            let store = HangingPut::new(0, false);
            for _ in 0..MIN_SAMPLES {
                hedger.record(ms(20), 4);
            }
            let parts = [Bytes::from_static(b"ab")];
            let outcome =
                tokio::time::timeout(ms(10_000), put(&store, "wal/1", &parts, &hedger)).await;
            assert!(outcome.is_err(), "the hung request is waited for");
            assert_eq!(store.puts.load(Ordering::SeqCst), 1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_hedge_leaves_the_first_request_to_answer() {
        let store = Arc::new(HangingPut::new(0, true));
        let hedger = primed(0.95);
        let parts = [Bytes::from_static(b"ab")];
        let outcome =
            tokio::time::timeout(ms(10_000), put(&*store, "wal/1", &parts, &hedger)).await;
        assert!(outcome.is_err(), "the failed hedge is not the answer");
        assert_eq!(store.puts.load(Ordering::SeqCst), 2);
    }
}
