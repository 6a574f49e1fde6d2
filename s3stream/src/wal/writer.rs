//! Group commit: everything submitted on the node, across all streams, goes out in WAL objects,
//! one PUT per group, with each stream's acknowledgements released in its submission order.
//!
//! The policy has no timer. A submission joins the *open group*; whenever fewer than
//! `max_inflight_puts` PUTs are in flight, the open group is sealed and uploaded at once. So an
//! append on an idle node costs exactly one PUT and waits for nothing, and under load the appends
//! that arrive while every PUT slot is busy form the next group by themselves. A group that
//! reaches `max_object_bytes` is sealed early and queued until a slot frees. While every slot is
//! busy, the open group is also sealed once it holds an even share of the bytes in flight and
//! waiting over the slots (`min_split_bytes` at least): what arrives during a slow PUT then leaves
//! in several mid-sized PUTs as slots free, not in one large PUT that is slower than all of them
//! (docs/wal-group-split.md).
//!
//! An operator may trade latency for request cost with `min_put_interval`: the open group is
//! uploaded no sooner than that long after the last PUT started, gathering appends meanwhile, so
//! under load at most one group that is not full goes out per interval. An append after a quiet
//! spell (no PUT started within the interval) still goes at once in its own PUT, and a full group
//! is never held back.
//!
//! Uploads may finish in any order. A record is acknowledged, under the state lock, once its
//! group's PUT has succeeded and no earlier group still holds an unacknowledged record of the
//! same stream: one slow PUT holds back the streams it carries, not every stream of the node
//! (docs/wal-stream-release.md). A PUT that fails is retried with exponential backoff; if it
//! still fails, the writer becomes *failed*: that group's appends fail, every acknowledgement
//! called from then on is a failure, and new submissions are refused. Recovery (reopening the
//! engine) replays what did land, each stream up to its first missing record.
//!
//! In a cluster the writer has an [`AckFence`]: when a PUT's success arrives, the writer reads
//! the fence's clock, and if the fence does not admit that time (the node's lease may have
//! expired by then) the group is not acknowledged and the writer fails with
//! [`WalError::Fenced`] (docs/cluster.md, the acknowledgement rule).

use std::collections::VecDeque;
use std::mem;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::hedge::{self, Hedger};
use super::release::{Ack, Awaiting, PutTimes, WrittenObject};
use super::settings::MAX_INFLIGHT_PUTS;
use super::{WalError, WalIdError, WalSettings};
use crate::failpoints::{self, Failpoints};
use crate::format::wal::{self, WalRecord, WalSpan};
use crate::stages::{AppendStage, StageObserver};
use crate::storage::ObjectStorage;

/// Whether the appends of a PUT may be acknowledged, by when its success arrived: the
/// acknowledgement rule of docs/cluster.md, behind the node's lease session.
pub trait AckFence: Send + Sync + std::fmt::Debug + 'static {
    /// Now, on the monotonic clock `admits` is asked about.
    fn now(&self) -> Duration;
    /// Whether a PUT whose success arrived at `completed_at` may be acknowledged.
    fn admits(&self, completed_at: Duration) -> bool;
}

/// Where WAL object ids come from: blocks of increasing ids, registered (in the metadata) before
/// they are handed out, so that recovery finds every WAL object without listing the bucket.
/// Every block must be above every block handed out before it.
#[async_trait::async_trait]
pub trait WalIdSource: Send + Sync + 'static {
    /// Reserves and registers the next block of ids.
    async fn reserve(&self) -> Result<Range<u64>, WalIdError>;
}

/// Counters of the WAL writer.
#[derive(Debug, Default)]
pub struct WalMetrics {
    /// WAL objects written.
    pub puts: AtomicU64,
    /// Bytes written in WAL objects.
    pub put_bytes: AtomicU64,
    /// PUT attempts that failed and were retried.
    pub put_retries: AtomicU64,
    /// Second requests sent for PUTs still unanswered past the hedging delay.
    pub put_hedges: AtomicU64,
    /// Hedged PUTs whose second request answered first.
    pub put_hedge_wins: AtomicU64,
    /// Records acknowledged as durable.
    pub records_acked: AtomicU64,
}

#[derive(Default)]
struct Group {
    records: Vec<WalRecord>,
    acks: Vec<Ack>,
    /// When each record was submitted (for [`AppendStage::WalQueue`]).
    submitted: Vec<Instant>,
    bytes: usize,
}

struct State {
    open: Group,
    sealed: VecDeque<Group>,
    /// Bytes of the sealed groups.
    sealed_bytes: usize,
    inflight: usize,
    /// Bytes of the groups in flight.
    inflight_bytes: usize,
    /// When the last PUT started (for `min_put_interval`).
    last_put: Option<Instant>,
    /// A wake-up is set for when the open group may go (`min_put_interval`).
    paced: bool,
    /// Reserved ids not yet used, in increasing order.
    ids: VecDeque<Range<u64>>,
    refilling: bool,
    /// One past the last id used: every later WAL object has an id at or above it.
    next_id: u64,
    /// The dispatched groups not yet wholly acknowledged (`release.rs`).
    awaiting: Awaiting,
    failed: Option<Arc<WalError>>,
    shut_down: bool,
    /// WAL objects whose appends were acknowledged, oldest first, until the compactor has
    /// committed their data.
    written: VecDeque<Arc<WrittenObject>>,
}

struct Inner {
    storage: Arc<dyn ObjectStorage>,
    id_source: Arc<dyn WalIdSource>,
    failpoints: Option<Arc<Failpoints>>,
    fence: Option<Arc<dyn AckFence>>,
    stages: Option<Arc<dyn StageObserver>>,
    prefix: String,
    settings: WalSettings,
    hedger: Hedger,
    state: Mutex<State>,
    metrics: WalMetrics,
    idle: tokio::sync::Notify,
    /// Notified whenever the durable point moves.
    settled: tokio::sync::Notify,
    /// Turns true once, when the writer fails: what a node's health check waits on.
    failed: tokio::sync::watch::Sender<bool>,
}

/// The node's WAL writer; cheap to clone.
#[derive(Clone)]
pub struct WalWriter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for WalWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalWriter")
            .field("storage", &self.inner.storage.name())
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

impl WalWriter {
    /// A writer whose objects are `{prefix}{id:016x}`, with ids taken in submission order from
    /// `first_ids` and then from blocks that `id_source` reserves. Must be called inside a tokio
    /// runtime.
    pub fn new(
        storage: Arc<dyn ObjectStorage>,
        prefix: impl Into<String>,
        first_ids: Range<u64>,
        id_source: Arc<dyn WalIdSource>,
        settings: WalSettings,
    ) -> Self {
        let settings = WalSettings {
            max_inflight_puts: settings.max_inflight_puts.clamp(1, MAX_INFLIGHT_PUTS),
            ..settings
        };
        WalWriter {
            inner: Arc::new(Inner {
                storage,
                id_source,
                failpoints: None,
                fence: None,
                stages: None,
                prefix: prefix.into(),
                hedger: Hedger::new(&settings),
                settings,
                state: Mutex::new(State {
                    open: Group::default(),
                    sealed: VecDeque::new(),
                    sealed_bytes: 0,
                    inflight: 0,
                    inflight_bytes: 0,
                    last_put: None,
                    paced: false,
                    next_id: first_ids.start,
                    ids: VecDeque::from([first_ids]),
                    refilling: false,
                    awaiting: Awaiting::default(),
                    failed: None,
                    shut_down: false,
                    written: VecDeque::new(),
                }),
                metrics: WalMetrics::default(),
                idle: tokio::sync::Notify::new(),
                settled: tokio::sync::Notify::new(),
                failed: tokio::sync::watch::Sender::new(false),
            }),
        }
    }

    /// Arms this writer with `failpoints` (see [`failpoints::WAL_AFTER_PUT`]). Call before the
    /// first submission; later calls do nothing.
    pub fn with_failpoints(mut self, failpoints: Arc<Failpoints>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.failpoints = Some(failpoints);
        }
        self
    }

    /// Acknowledges a PUT only if `fence` admits the time its success arrived. Call before the
    /// first submission; later calls do nothing.
    pub fn with_fence(mut self, fence: Arc<dyn AckFence>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.fence = Some(fence);
        }
        self
    }

    /// Reports how long each record waited for its PUT, the PUT and the wait for earlier groups
    /// to `stages`. Call before the first submission; later calls do nothing.
    pub fn with_stages(mut self, stages: Arc<dyn StageObserver>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.stages = Some(stages);
        }
        self
    }

    /// The key of the WAL object with id `id` under `prefix`.
    pub fn object_key(prefix: &str, id: u64) -> String {
        format!("{prefix}{id:016x}")
    }

    /// Submits a record. `ack` is called exactly once, when the record and every record of its
    /// stream submitted before it are durable, or when it has failed; a stream's acknowledgements
    /// come in its submission order. Returns an error (and does not call `ack`) when the writer has
    /// failed or is shut down.
    pub fn submit(&self, record: WalRecord, ack: Ack) -> Result<(), WalError> {
        let mut state = self.lock();
        if let Some(cause) = &state.failed {
            return Err(WalError::Failed {
                cause: cause.clone(),
            });
        }
        if state.shut_down {
            return Err(WalError::ShutDown);
        }
        state.open.bytes += record.encoded_len();
        state.open.records.push(record);
        state.open.acks.push(ack);
        state.open.submitted.push(Instant::now());
        if state.open.bytes >= self.seal_at(&state) {
            let group = mem::take(&mut state.open);
            state.sealed_bytes += group.bytes;
            state.sealed.push_back(group);
        }
        self.dispatch(&mut state);
        Ok(())
    }

    /// How many bytes the open group holds when it is sealed: `max_object_bytes`, or, while
    /// every PUT slot is busy, an even share of the bytes in flight and waiting over the slots
    /// (at least `min_split_bytes`). With a free slot the open group goes at once anyway.
    fn seal_at(&self, state: &State) -> usize {
        let settings = &self.inner.settings;
        let max = settings.max_object_bytes;
        if settings.min_split_bytes == 0
            || !settings.min_put_interval.is_zero()
            || state.inflight < settings.max_inflight_puts
        {
            return max;
        }
        let waiting = state.inflight_bytes + state.sealed_bytes + state.open.bytes;
        (waiting / settings.max_inflight_puts).clamp(settings.min_split_bytes.min(max), max)
    }

    /// Runs `f` with the WAL object id below which every object written by this writer is
    /// durable and all its records acknowledged, under the state lock (no acknowledgement runs
    /// while `f` does). A stream's confirm offset may be past the point: its records in later
    /// objects are acknowledged once its own earlier records are durable.
    pub fn with_durable_point<T>(&self, f: impl FnOnce(u64) -> T) -> T {
        let state = self.lock();
        f(durable_point(&state))
    }

    /// Waits until every group dispatched so far is durable and acknowledged (or failed), so
    /// that the durable point has passed each record acknowledged before the call. Unlike
    /// [`flush`](Self::flush), it does not wait for what is submitted after it.
    pub async fn settle(&self) {
        let target = self.lock().next_id;
        loop {
            let notified = self.inner.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = self.lock();
                if durable_point(&state) >= target || state.failed.is_some() {
                    return;
                }
            }
            notified.await;
        }
    }

    /// The acknowledged WAL objects below `point` not yet handed over, oldest first.
    pub fn written_below(&self, point: u64) -> Vec<Arc<WrittenObject>> {
        let state = self.lock();
        state
            .written
            .iter()
            .take_while(|o| o.id < point)
            .cloned()
            .collect()
    }

    /// Forgets the acknowledged WAL objects below `point` (their data is committed) and returns
    /// them, oldest first.
    pub fn take_written_below(&self, point: u64) -> Vec<Arc<WrittenObject>> {
        let mut state = self.lock();
        let keep = state.written.partition_point(|o| o.id < point);
        state.written.drain(..keep).collect()
    }

    /// The key prefix of this writer's objects.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Counters.
    pub fn metrics(&self) -> &WalMetrics {
        &self.inner.metrics
    }

    /// The error that failed the writer, if it has failed.
    pub fn failure(&self) -> Option<Arc<WalError>> {
        self.lock().failed.clone()
    }

    /// Resolves with the cause once the writer has failed for good (at once if it already has).
    /// A failed writer never recovers: the engine must be reopened, so this is the signal for a
    /// node to stop serving appends and restart.
    pub async fn failed(&self) -> Arc<WalError> {
        let mut failed = self.inner.failed.subscribe();
        loop {
            if let Some(cause) = self.failure() {
                return cause;
            }
            // The sender lives in `inner`, which `self` keeps alive: `changed` cannot end.
            if failed.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Waits until everything submitted so far is acknowledged (or failed).
    pub async fn flush(&self) {
        loop {
            let notified = self.inner.idle.notified();
            {
                let state = self.lock();
                if state.inflight == 0 && state.open.records.is_empty() && state.sealed.is_empty() {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Uploads what was submitted, then refuses new submissions.
    pub async fn shutdown(&self) {
        self.lock().shut_down = true;
        self.flush().await;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated in a way that
        // matters more than losing the node, so keep going with the inner value.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts uploads while PUT slots and ids are free.
    fn dispatch(&self, state: &mut State) {
        while state.inflight < self.inner.settings.max_inflight_puts && state.failed.is_none() {
            if state.sealed.is_empty() && state.open.records.is_empty() {
                break;
            }
            if state.sealed.is_empty()
                && let Some(due) = self.paced_until(state)
            {
                self.wake_at(state, due);
                break;
            }
            let Some(id) = take_id(&mut state.ids) else {
                self.refill(state);
                break;
            };
            let group = match state.sealed.pop_front() {
                Some(group) => {
                    state.sealed_bytes -= group.bytes;
                    group
                }
                None => mem::take(&mut state.open),
            };
            let bytes = group.bytes;
            state.next_id = id + 1;
            state.inflight += 1;
            state.inflight_bytes += bytes;
            let acks = group
                .records
                .iter()
                .map(|r| r.stream_id)
                .zip(group.acks)
                .collect();
            state.awaiting.push(id, acks);
            // The PUT's time starts here, so that the stages of an append add up.
            let started = Instant::now();
            state.last_put = Some(started);
            let writer = self.clone();
            let records = group.records;
            let submitted = group.submitted;
            tokio::spawn(async move {
                // Observed here, not under the state lock.
                if let Some(stages) = &writer.inner.stages {
                    for submitted in submitted {
                        stages.observe(AppendStage::WalQueue, started - submitted, 1);
                    }
                }
                let outcome = writer.upload(id, records).await;
                let times = PutTimes {
                    started,
                    ended: Instant::now(),
                };
                writer.finish(id, bytes, outcome, times);
            });
        }
        let left: u64 = state.ids.iter().map(|r| r.end - r.start).sum();
        if left < (self.inner.settings.max_inflight_puts as u64) * 4 {
            self.refill(state);
        }
    }

    /// When the open group may go, if `min_put_interval` holds it back now: while the last PUT
    /// started less than that long ago.
    fn paced_until(&self, state: &State) -> Option<Instant> {
        let interval = self.inner.settings.min_put_interval;
        if interval.is_zero() {
            return None;
        }
        let due = state.last_put? + interval;
        (Instant::now() < due).then_some(due)
    }

    /// Dispatches again at `due` (once: a wake-up already set does).
    fn wake_at(&self, state: &mut State, due: Instant) {
        if mem::replace(&mut state.paced, true) {
            return;
        }
        let writer = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(due.into()).await;
            let mut state = writer.lock();
            state.paced = false;
            writer.dispatch(&mut state);
        });
    }

    /// Reserves the next block of ids in the background, retrying within the deadline.
    fn refill(&self, state: &mut State) {
        if state.refilling || state.failed.is_some() {
            return;
        }
        state.refilling = true;
        let writer = self.clone();
        tokio::spawn(async move {
            let settings = &writer.inner.settings;
            let started = Instant::now();
            let mut delays = settings.retry_backoff().delays();
            let outcome = loop {
                match writer.inner.id_source.reserve().await {
                    Ok(ids) => break Ok(ids),
                    Err(error) if started.elapsed() >= settings.retry_deadline => break Err(error),
                    Err(error) => {
                        let backoff = delays.next().unwrap_or(settings.retry_max_backoff);
                        tracing::warn!(%error, ?backoff, "reserving WAL ids failed; retrying");
                        tokio::time::sleep(backoff).await;
                    }
                }
            };
            let mut state = writer.lock();
            state.refilling = false;
            match outcome {
                Ok(ids) => {
                    state.ids.push_back(ids);
                    writer.dispatch(&mut state);
                }
                Err(error) => {
                    tracing::error!(%error, "reserving WAL ids failed; the WAL stops");
                    let error = WalError::Ids {
                        source: Arc::new(error),
                    };
                    writer.fail(&mut state, error);
                }
            }
        });
    }

    async fn upload(&self, id: u64, records: Vec<WalRecord>) -> Result<WrittenObject, WalError> {
        let key = Self::object_key(&self.inner.prefix, id);
        // The object in parts: its large batches are sent as they were appended, not copied.
        let (parts, spans): (Vec<Bytes>, Vec<WalSpan>) =
            wal::encode_parts(records, self.inner.settings.block_bytes);
        let size: usize = parts.iter().map(Bytes::len).sum();
        let settings = &self.inner.settings;
        let started = Instant::now();
        let mut delays = settings.retry_backoff().delays();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let (outcome, hedged) =
                hedge::put(&*self.inner.storage, &key, &parts, &self.inner.hedger).await;
            let metrics = &self.inner.metrics;
            metrics
                .put_hedges
                .fetch_add(u64::from(hedged.sent), Ordering::Relaxed);
            metrics
                .put_hedge_wins
                .fetch_add(u64::from(hedged.won), Ordering::Relaxed);
            match outcome {
                Ok(_) => {
                    // The clock is read first: the rule is about when the success arrived.
                    if let Some(fence) = &self.inner.fence
                        && !fence.admits(fence.now())
                    {
                        tracing::error!(%key, "WAL PUT succeeded past the lease deadline; not acknowledged");
                        return Err(WalError::Fenced { key });
                    }
                    if let Some(failpoints) = &self.inner.failpoints {
                        failpoints
                            .check(failpoints::WAL_AFTER_PUT)
                            .map_err(WalError::Failpoint)?;
                    }
                    metrics.puts.fetch_add(1, Ordering::Relaxed);
                    metrics.put_bytes.fetch_add(size as u64, Ordering::Relaxed);
                    return Ok(WrittenObject {
                        id,
                        key,
                        size: size as u64,
                        spans,
                    });
                }
                Err(error) => {
                    let retry = error.is_retryable() && started.elapsed() < settings.retry_deadline;
                    if !retry {
                        tracing::error!(%key, attempts, %error, "WAL PUT failed");
                        return Err(WalError::PutFailed {
                            key,
                            attempts,
                            source: Arc::new(error),
                        });
                    }
                    let backoff = delays.next().unwrap_or(settings.retry_max_backoff);
                    tracing::warn!(%key, attempts, %error, ?backoff, "WAL PUT failed; retrying");
                    self.inner
                        .metrics
                        .put_retries
                        .fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(backoff).await;
                }
            }
        }
    }

    fn finish(
        &self,
        id: u64,
        bytes: usize,
        outcome: Result<WrittenObject, WalError>,
        times: PutTimes,
    ) {
        let released = {
            let mut state = self.lock();
            state.inflight -= 1;
            state.inflight_bytes -= bytes;
            state.awaiting.finish(id, outcome, times);
            let released = self.release(&mut state);
            self.dispatch(&mut state);
            if state.inflight == 0 {
                self.inner.idle.notify_waiters();
            }
            released
        };
        // A group's stages are observed once per append: outside the state lock.
        if let Some(stages) = &self.inner.stages {
            for (times, released_at, count) in released {
                stages.observe(AppendStage::Put, times.ended - times.started, count);
                stages.observe(AppendStage::Ordering, released_at - times.ended, count);
            }
        }
    }

    /// Calls the acknowledgements that may go (`release.rs`), failing the writer first if an
    /// upload failed; hands the wholly acknowledged objects to `written`. Returns, for each group
    /// that released acknowledgements, its PUT times, when and how many.
    fn release(&self, state: &mut State) -> Vec<(PutTimes, Instant, usize)> {
        // A failed upload fails the writer at once.
        if let Some(error) = state.awaiting.failure()
            && state.failed.is_none()
        {
            self.fail(state, error);
        }
        let failed = state.failed.clone();
        let released = state
            .awaiting
            .release(failed.as_ref(), self.inner.stages.is_some());
        self.inner
            .metrics
            .records_acked
            .fetch_add(released.acked, Ordering::Relaxed);
        state
            .written
            .extend(released.written.into_iter().map(Arc::new));
        if released.moved {
            self.inner.settled.notify_waiters();
        }
        released.groups
    }

    /// Fails the writer: everything not yet uploaded fails now, everything in flight fails when
    /// its upload finishes, and new submissions are refused.
    fn fail(&self, state: &mut State, error: WalError) {
        let cause = Arc::new(error);
        state.failed = Some(cause.clone());
        self.inner.failed.send_replace(true);
        let mut dropped = mem::take(&mut state.open).acks;
        state.sealed_bytes = 0;
        for group in state.sealed.drain(..) {
            dropped.extend(group.acks);
        }
        for ack in dropped {
            ack(Err(WalError::Failed {
                cause: cause.clone(),
            }));
        }
        if state.inflight == 0 {
            self.inner.idle.notify_waiters();
        }
        self.inner.settled.notify_waiters();
    }
}

/// The WAL object id below which every object is durable and all its records acknowledged.
fn durable_point(state: &State) -> u64 {
    state.awaiting.first().unwrap_or(state.next_id)
}

fn take_id(ids: &mut VecDeque<Range<u64>>) -> Option<u64> {
    while let Some(range) = ids.front_mut() {
        if let Some(id) = range.next() {
            return Some(id);
        }
        ids.pop_front();
    }
    None
}
