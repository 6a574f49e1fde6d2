//! [`FaultyStorage`]: forwards calls but injects failures (throttling, timeouts, transient and
//! permanent errors) and slow PUTs, driven by a seeded RNG so a failing run can be replayed.
//!
//! Faults are decided per call, in this order: a pending "fail the next N calls" for the
//! operation, then one for any operation, then the operation's failure rate. An injected error is
//! an ordinary [`StorageError`] of the chosen kind whose source is an [`InjectedFault`] error.
//! With [`FaultyStorage::set_fail_after_write`], writes reach the inner store before the error is
//! returned: the caller sees a failure although the object landed, as after a PUT whose response
//! was lost.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::{ObjectMeta, ObjectStorage, PutResult, Result, StorageError, StorageOp};
use mink_runtime::SeededRng;

/// The kind of failure to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultKind {
    /// [`StorageError::Throttled`], at once.
    Throttled,
    /// [`StorageError::Unavailable`], at once.
    Unavailable,
    /// [`StorageError::Other`], at once (a permanent failure).
    Other,
    /// The call hangs for `after`, then fails with [`StorageError::Timeout`].
    Timeout {
        /// How long the call hangs before failing.
        after: Duration,
    },
}

/// The source of every injected error.
#[derive(Debug, thiserror::Error)]
#[error("injected {kind:?} fault on {op} (FaultyStorage)")]
pub struct InjectedFault {
    /// The operation that was failed.
    pub op: StorageOp,
    /// The fault.
    pub kind: FaultKind,
}

#[derive(Debug)]
struct State {
    rng: SeededRng,
    rates: HashMap<StorageOp, (f64, FaultKind)>,
    fail_next_any: Option<(u64, FaultKind)>,
    fail_next_op: HashMap<StorageOp, (u64, FaultKind)>,
    put_delay: Duration,
    fail_after_write: bool,
}

/// Wraps an [`ObjectStorage`] and fails calls on demand (feature `test-util`).
#[derive(Debug)]
pub struct FaultyStorage {
    inner: Arc<dyn ObjectStorage>,
    state: Mutex<State>,
    injected: AtomicU64,
    /// While true, deletes wait before they reach the inner store.
    deletes_held: tokio::sync::watch::Sender<bool>,
}

fn take_one(slot: &mut Option<(u64, FaultKind)>) -> Option<FaultKind> {
    let (left, kind) = slot.as_mut()?;
    let kind = *kind;
    *left -= 1;
    if *left == 0 {
        *slot = None;
    }
    Some(kind)
}

impl FaultyStorage {
    /// Forwards to `inner` with no faults until told otherwise; `seed` drives the failure rates.
    pub fn new(inner: Arc<dyn ObjectStorage>, seed: u64) -> Self {
        FaultyStorage {
            inner,
            state: Mutex::new(State {
                rng: SeededRng::new(seed),
                rates: HashMap::new(),
                fail_next_any: None,
                fail_next_op: HashMap::new(),
                put_delay: Duration::ZERO,
                fail_after_write: false,
            }),
            injected: AtomicU64::new(0),
            deletes_held: tokio::sync::watch::Sender::new(false),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the plain-data state inconsistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fails each `op` call with probability `rate` (0.0 to 1.0) with `kind`. `rate` 0 removes it.
    pub fn set_failure_rate(&self, op: StorageOp, rate: f64, kind: FaultKind) {
        let mut s = self.state();
        if rate <= 0.0 {
            s.rates.remove(&op);
        } else {
            s.rates.insert(op, (rate.min(1.0), kind));
        }
    }

    /// Fails the next `n` calls, of any operation, with `kind`.
    pub fn fail_next(&self, n: u64, kind: FaultKind) {
        self.state().fail_next_any = (n > 0).then_some((n, kind));
    }

    /// Fails the next `n` calls of `op` with `kind` (other operations pass).
    pub fn fail_next_op(&self, op: StorageOp, n: u64, kind: FaultKind) {
        let mut s = self.state();
        if n == 0 {
            s.fail_next_op.remove(&op);
        } else {
            s.fail_next_op.insert(op, (n, kind));
        }
    }

    /// Delays every PUT (`put`, `put_if_absent`) by `delay` before it reaches the inner store.
    pub fn set_put_delay(&self, delay: Duration) {
        self.state().put_delay = delay;
    }

    /// While `hold` is true, deletes (`delete`, `delete_many`) wait before they reach the inner
    /// store; they go on when it is set false again (or by [`FaultyStorage::clear`]).
    pub fn hold_deletes(&self, hold: bool) {
        self.deletes_held.send_replace(hold);
    }

    /// When on, failed writes (`put`, `put_if_absent`, `delete`, `delete_many`) are first applied
    /// to the inner store, then reported as failed.
    pub fn set_fail_after_write(&self, on: bool) {
        self.state().fail_after_write = on;
    }

    /// Removes every fault and delay.
    pub fn clear(&self) {
        let mut s = self.state();
        s.rates.clear();
        s.fail_next_any = None;
        s.fail_next_op.clear();
        s.put_delay = Duration::ZERO;
        s.fail_after_write = false;
        self.deletes_held.send_replace(false);
    }

    /// How many faults were injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    fn decide(&self, op: StorageOp) -> Option<FaultKind> {
        let mut s = self.state();
        let mut per_op = s.fail_next_op.get(&op).copied();
        let kind = if let Some(kind) = take_one(&mut per_op) {
            match per_op {
                Some(left) => s.fail_next_op.insert(op, left),
                None => s.fail_next_op.remove(&op),
            };
            Some(kind)
        } else if let Some(kind) = take_one(&mut s.fail_next_any) {
            Some(kind)
        } else if let Some((rate, kind)) = s.rates.get(&op).copied() {
            (s.rng.next_f64() < rate).then_some(kind)
        } else {
            None
        };
        if kind.is_some() {
            self.injected.fetch_add(1, Ordering::Relaxed);
        }
        kind
    }

    async fn injected_error(&self, op: StorageOp, key: &str, kind: FaultKind) -> StorageError {
        let key = key.to_owned();
        let source = Box::new(InjectedFault { op, kind });
        match kind {
            FaultKind::Throttled => StorageError::Throttled { op, key, source },
            FaultKind::Unavailable => StorageError::Unavailable { op, key, source },
            FaultKind::Other => StorageError::Other { op, key, source },
            FaultKind::Timeout { after } => {
                tokio::time::sleep(after).await;
                StorageError::Timeout { op, key, source }
            }
        }
    }

    /// Runs a write through the fault plan.
    async fn write<T, F>(&self, op: StorageOp, key: &str, call: F) -> Result<T>
    where
        F: Future<Output = Result<T>> + Send,
    {
        let (delay, after_write) = {
            let s = self.state();
            let delay = if matches!(op, StorageOp::Put | StorageOp::PutIfAbsent) {
                s.put_delay
            } else {
                Duration::ZERO
            };
            (delay, s.fail_after_write)
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if matches!(op, StorageOp::Delete | StorageOp::DeleteMany) {
            // The sender lives as long as `self`, so the wait ends only when the hold does.
            let _ = self.deletes_held.subscribe().wait_for(|held| !held).await;
        }
        match self.decide(op) {
            None => call.await,
            Some(kind) => {
                if after_write {
                    // The outcome is what the caller must not learn; only the error is reported.
                    let _landed = call.await;
                }
                Err(self.injected_error(op, key, kind).await)
            }
        }
    }

    async fn read<T, F>(&self, op: StorageOp, key: &str, call: F) -> Result<T>
    where
        F: Future<Output = Result<T>> + Send,
    {
        match self.decide(op) {
            None => call.await,
            Some(kind) => Err(self.injected_error(op, key, kind).await),
        }
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStorage for FaultyStorage {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<PutResult> {
        self.write(StorageOp::Put, key, self.inner.put(key, data))
            .await
    }

    async fn put_parts(&self, key: &str, parts: Vec<Bytes>) -> Result<PutResult> {
        self.write(StorageOp::Put, key, self.inner.put_parts(key, parts))
            .await
    }

    async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutResult> {
        self.write(
            StorageOp::PutIfAbsent,
            key,
            self.inner.put_if_absent(key, data),
        )
        .await
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        self.read(StorageOp::Get, key, self.inner.get(key)).await
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.read(StorageOp::Get, key, self.inner.get_range(key, range))
            .await
    }

    async fn get_range_pieces(
        &self,
        key: &str,
        range: Range<u64>,
        piece_len: u64,
    ) -> Result<Vec<Bytes>> {
        self.read(
            StorageOp::Get,
            key,
            self.inner.get_range_pieces(key, range, piece_len),
        )
        .await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.read(StorageOp::Head, key, self.inner.head(key)).await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.write(StorageOp::Delete, key, self.inner.delete(key))
            .await
    }

    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        let what = format!("{} keys", keys.len());
        self.write(StorageOp::DeleteMany, &what, self.inner.delete_many(keys))
            .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        self.read(StorageOp::List, prefix, self.inner.list(prefix))
            .await
    }
}
