//! The node's registry of open bucket logs: each log is opened once, on first use, and closed
//! together at shutdown; [`Logs::owner`] is where ownership (which node serves a bucket) goes.
//!
//! Opens of different logs run side by side, `node.max_concurrent_opens` at a time (an open replays
//! the log and writes metadata: a table's first appends to a thousand buckets must not queue
//! behind one another); two opens of one log are one. The shutdown waits for the opens in flight
//! and keeps new ones out. A release (its buckets moved to another node) and a drop wait for the
//! opens in flight, mark what they take (the released logs, the dropped incarnation) so that
//! none of it opens again meanwhile, and close or destroy it many at once while other logs go on
//! opening.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{Mutex, RwLock, Semaphore};

use mink_metadata::TableRecord;

use super::{BucketLog, LogKey, LogProvider, Owner};
use crate::catalog::TableInfo;
use crate::error::{ApiError, ApiResult};
use crate::latency::Latencies;

/// The node's open logs.
pub struct Logs {
    provider: Arc<dyn LogProvider>,
    /// Open logs; read on every request, so a plain read lock.
    open: parking_lot::RwLock<HashMap<LogKey, Arc<dyn BucketLog>>>,
    /// Opens hold it shared; drops and releases (while they mark what they take) and the
    /// shutdown exclusively.
    changes: RwLock<()>,
    /// The incarnations (table, incarnation) whose logs a drop is destroying: none opens.
    dropping: parking_lot::Mutex<HashSet<(String, u64)>>,
    /// The logs a release is closing: none opens until its close has ended, so that a bucket
    /// moved back at once is not opened (fencing the closing stream) while it still closes.
    releasing: parking_lot::Mutex<HashSet<LogKey>>,
    /// Releases hold it shared while they close; the shutdown exclusively, so that it ends only
    /// once every released log is closed.
    releases: RwLock<()>,
    /// One lock per log being opened, so that concurrent first uses open it once.
    opening: parking_lot::Mutex<HashMap<LogKey, Arc<Mutex<()>>>>,
    /// Bounds the opens in flight.
    open_slots: Semaphore,
    closing: std::sync::atomic::AtomicBool,
    /// Where the opens are timed, if anywhere.
    latencies: Option<Arc<Latencies>>,
}

impl std::fmt::Debug for Logs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Logs").finish_non_exhaustive()
    }
}

impl Logs {
    /// A registry over `provider`.
    pub fn new(provider: Arc<dyn LogProvider>) -> Self {
        Logs {
            provider,
            open: parking_lot::RwLock::new(HashMap::new()),
            changes: RwLock::new(()),
            dropping: parking_lot::Mutex::new(HashSet::new()),
            releasing: parking_lot::Mutex::new(HashSet::new()),
            releases: RwLock::new(()),
            opening: parking_lot::Mutex::new(HashMap::new()),
            open_slots: Semaphore::new(OPEN_PARALLELISM),
            closing: std::sync::atomic::AtomicBool::new(false),
            latencies: None,
        }
    }

    /// Lets `opens` logs open at once instead of [`OPEN_PARALLELISM`] (`node.max_concurrent_opens`).
    pub fn with_open_parallelism(mut self, opens: usize) -> Self {
        self.open_slots = Semaphore::new(opens.max(1));
        self
    }

    /// Times each open and each wait for an open slot in `latencies`.
    pub fn with_latencies(mut self, latencies: Arc<Latencies>) -> Self {
        self.latencies = Some(latencies);
        self
    }

    /// Who owns `key`. Single node: always this one.
    pub fn owner(&self, _key: &LogKey) -> Owner {
        Owner::Local
    }

    /// The open log of `key`, opening it on first use.
    pub async fn get(&self, key: &LogKey, table: &Arc<TableInfo>) -> ApiResult<Arc<dyn BucketLog>> {
        if self.closing.load(std::sync::atomic::Ordering::Acquire) {
            return Err(ApiError::ShuttingDown);
        }
        if let Some(log) = self.open.read().get(key)
            && !log.is_closed()
        {
            return Ok(Arc::clone(log));
        }
        let _changing = self.changes.read().await;
        if self.closing.load(std::sync::atomic::Ordering::Acquire) {
            return Err(ApiError::ShuttingDown);
        }
        if self
            .dropping
            .lock()
            .contains(&(key.table.clone(), key.incarnation))
        {
            return Err(ApiError::TableNotFound {
                table: key.table.clone(),
            });
        }
        if self.releasing.lock().contains(key) {
            return Err(ApiError::BucketUnavailable {
                message: format!(
                    "bucket {key} is being released by this node (it moved) and is still closing; retry"
                ),
            });
        }
        let this_key = Arc::clone(
            self.opening
                .lock()
                .entry(key.clone())
                .or_insert_with(|| Arc::new(Mutex::new(()))),
        );
        let opened = {
            let _this_key = this_key.lock().await;
            self.open_once(key, table).await
        };
        // Whoever still waits on this key's lock holds it and finds the log open (or tries
        // again after a failure); a later first use makes a new one.
        let mut opening = self.opening.lock();
        if opening
            .get(key)
            .is_some_and(|entry| Arc::ptr_eq(entry, &this_key))
            && Arc::strong_count(&this_key) == 2
        {
            opening.remove(key);
        }
        opened
    }

    /// Opens `key`'s log unless it is open already; the caller holds the key's lock.
    async fn open_once(
        &self,
        key: &LogKey,
        table: &Arc<TableInfo>,
    ) -> ApiResult<Arc<dyn BucketLog>> {
        if let Some(log) = self.open.read().get(key)
            && !log.is_closed()
        {
            return Ok(Arc::clone(log));
        }
        let asked = Instant::now();
        let _slot = self
            .open_slots
            .acquire()
            .await
            .map_err(|_| ApiError::ShuttingDown)?;
        let started = Instant::now();
        let log = self.provider.open(key, table).await?;
        if let Some(latencies) = &self.latencies {
            latencies
                .log_open_wait
                .observe((started - asked).as_secs_f64());
            latencies.log_open.observe(started.elapsed().as_secs_f64());
        }
        self.open.write().insert(key.clone(), Arc::clone(&log));
        Ok(log)
    }

    /// Destroys every bucket log of the (dropped) table `table`'s incarnation, open or not,
    /// [`DESTROY_PARALLELISM`] at a time; returns the first error (every log is tried). Safe to
    /// repeat after a partial run.
    ///
    /// Under the exclusive lock only while it marks the incarnation and takes its open logs out
    /// (and waits for a release in flight):
    /// an open of the same incarnation either finished before (and its log is destroyed here) or
    /// comes after and is refused, so opens of other tables wait for nothing but the opens in
    /// flight.
    pub async fn destroy_table(&self, table: &TableRecord) -> ApiResult<()> {
        let marked = (table.name.clone(), table.incarnation);
        let logs: Vec<(LogKey, Option<Arc<dyn BucketLog>>)> = {
            let _changing = self.changes.write().await;
            // A release still closing some of these logs ends first (rare: the drop then holds
            // opens back for as long), so that no log is destroyed while it closes.
            let _released = self.releases.write().await;
            self.dropping.lock().insert(marked.clone());
            let mut open = self.open.write();
            table
                .partitions
                .iter()
                .flat_map(|partition| {
                    (0..table.bucket_count).map(move |bucket| LogKey {
                        table: table.name.clone(),
                        partition: partition.clone(),
                        bucket,
                        incarnation: table.incarnation,
                    })
                })
                .map(|key| {
                    let log = open.remove(&key);
                    (key, log)
                })
                .collect()
        };
        let destroys = logs
            .into_iter()
            .map(|(key, log)| -> Job {
                let provider = Arc::clone(&self.provider);
                Box::pin(async move {
                    let destroyed = match log {
                        Some(log) => log.destroy().await,
                        None => provider.destroy_closed(&key).await,
                    };
                    (key, destroyed)
                })
            })
            .collect();
        let (_, destroyed) = run_bounded(destroys, DESTROY_PARALLELISM, "destroying").await;
        // Every log of the incarnation is destroyed or failed: a run that failed is repeated by
        // the cleanup pass, and an open that comes now finds the table record gone.
        self.dropping.lock().remove(&marked);
        destroyed
    }

    /// Refuses new opens and closes every open log (writer snapshots, streams closed),
    /// [`CLOSE_PARALLELISM`] at a time.
    pub async fn close_all(&self) -> ApiResult<()> {
        self.closing
            .store(true, std::sync::atomic::Ordering::Release);
        let _changing = self.changes.write().await;
        let logs: Vec<(LogKey, Arc<dyn BucketLog>)> = self.open.write().drain().collect();
        let closed = close_logs(logs).await.1;
        // The logs releases took out are closed by them: wait for those closes too.
        let _released = self.releases.write().await;
        closed
    }

    /// The keys of the open logs.
    pub fn open_keys(&self) -> Vec<LogKey> {
        self.open.read().keys().cloned().collect()
    }

    /// Closes the logs of `keys` that are open (writer snapshot, stream closed),
    /// [`CLOSE_PARALLELISM`] at a time, so another node can open them: their buckets moved
    /// away. Their parked readers return; requests that come after find them gone and are
    /// routed by ownership. Returns the keys released, and the first error.
    ///
    /// Under the exclusive lock only while it takes the logs out and marks them: opens of other
    /// logs go on while these close, and an open of one of these is refused
    /// ([`ApiError::BucketUnavailable`], retry) until its close has ended.
    pub async fn release(&self, keys: &[LogKey]) -> (Vec<LogKey>, ApiResult<()>) {
        let (_releasing, logs) = {
            let _changing = self.changes.write().await;
            // Taken under `changes`, as the shutdown takes both: the two never wait on each other.
            let releasing_guard = self.releases.read().await;
            let mut open = self.open.write();
            let mut releasing = self.releasing.lock();
            let logs = keys
                .iter()
                .filter_map(|key| {
                    let log = open.remove(key)?;
                    releasing.insert(key.clone());
                    Some((key.clone(), log))
                })
                .collect::<Vec<(LogKey, Arc<dyn BucketLog>)>>();
            (releasing_guard, logs)
        };
        let taken: Vec<LogKey> = logs.iter().map(|(key, _)| key.clone()).collect();
        let released = close_logs(logs).await;
        // Closed or failed: either way the log is out of this node's hands (a failed close
        // leaves its stream to be fenced by the next owner's open).
        let mut releasing = self.releasing.lock();
        for key in &taken {
            releasing.remove(key);
        }
        released
    }

    /// How many logs are open.
    pub fn open_count(&self) -> usize {
        self.open.read().len()
    }
}

/// Logs opened at once by default (`node.max_concurrent_opens`): each open replays its log's tail
/// and writes its metadata; a bound keeps a burst of first uses from flooding the metadata store
/// and the object store.
pub(crate) const OPEN_PARALLELISM: usize = 256;

/// Logs closed at once by a release or the shutdown: each close waits for its appends in flight
/// and writes a snapshot, so thousands of them one after another would outlast a grace period.
const CLOSE_PARALLELISM: usize = 64;

/// Logs destroyed at once by a drop: each deletes its stream's metadata and manifest and its
/// writer snapshot, so a table of thousands of buckets destroyed one after another took tens of
/// seconds on a store with S3's latencies.
const DESTROY_PARALLELISM: usize = 64;

/// The work on one log, boxed before it goes into a stream: a stream over the logs themselves
/// defeats the compiler's proof that the task running it is `Send`.
type Job =
    std::pin::Pin<Box<dyn std::future::Future<Output = (LogKey, ApiResult<()>)> + Send + 'static>>;

/// Closes `logs`, [`CLOSE_PARALLELISM`] at a time; returns the keys closed and the first error
/// (every log is tried).
async fn close_logs(logs: Vec<(LogKey, Arc<dyn BucketLog>)>) -> (Vec<LogKey>, ApiResult<()>) {
    let closes = logs
        .into_iter()
        .map(|(key, log)| -> Job {
            Box::pin(async move {
                let closed = log.close().await;
                (key, closed)
            })
        })
        .collect();
    run_bounded(closes, CLOSE_PARALLELISM, "closing").await
}

/// Runs `jobs`, `parallelism` at a time; returns the keys whose job succeeded and the first
/// error, each failure logged as `doing` its log.
async fn run_bounded(
    jobs: Vec<Job>,
    parallelism: usize,
    doing: &'static str,
) -> (Vec<LogKey>, ApiResult<()>) {
    use futures::StreamExt;
    let outcomes: Vec<(LogKey, ApiResult<()>)> = futures::stream::iter(jobs)
        .buffer_unordered(parallelism)
        .collect()
        .await;
    let mut done = Vec::with_capacity(outcomes.len());
    let mut first_error = None;
    for (key, outcome) in outcomes {
        match outcome {
            Ok(()) => done.push(key),
            Err(e) => {
                tracing::warn!(log = %key, error = %e, "{doing} a log failed");
                first_error.get_or_insert(e);
            }
        }
    }
    (done, first_error.map_or(Ok(()), Err))
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
