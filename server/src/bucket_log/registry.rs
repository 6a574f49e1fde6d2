//! The node's registry of open bucket logs: each log is opened once, on first use, and closed
//! together at shutdown; [`Logs::owner`] is where ownership (which node serves a bucket) goes.
//!
//! Opens of different logs run side by side, `node.max_concurrent_opens` at a time (an open replays
//! the log and writes metadata: a table's first appends to a thousand buckets must not queue
//! behind one another); two opens of one log are one. Releases and the shutdown wait for the
//! opens in flight and keep new ones out while they run. A drop waits for the opens in flight,
//! marks its incarnation so that none of its logs opens again, and destroys its logs many at once
//! while the other tables' logs go on opening.

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
    /// Opens hold it shared; drops (while they mark their incarnation), releases and the
    /// shutdown exclusively.
    changes: RwLock<()>,
    /// The incarnations (table, incarnation) whose logs a drop is destroying: none opens.
    dropping: parking_lot::Mutex<HashSet<(String, u64)>>,
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
    /// Under the exclusive lock only while it marks the incarnation and takes its open logs out:
    /// an open of the same incarnation either finished before (and its log is destroyed here) or
    /// comes after and is refused, so opens of other tables wait for nothing but the opens in
    /// flight.
    pub async fn destroy_table(&self, table: &TableRecord) -> ApiResult<()> {
        let marked = (table.name.clone(), table.incarnation);
        let logs: Vec<(LogKey, Option<Arc<dyn BucketLog>>)> = {
            let _changing = self.changes.write().await;
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
        close_logs(logs).await.1
    }

    /// The keys of the open logs.
    pub fn open_keys(&self) -> Vec<LogKey> {
        self.open.read().keys().cloned().collect()
    }

    /// Closes the logs of `keys` that are open (writer snapshot, stream closed),
    /// [`CLOSE_PARALLELISM`] at a time, so another node can open them: their buckets moved
    /// away. Their parked readers return; requests that come after find them gone and are
    /// routed by ownership. Returns the keys released, and the first error.
    pub async fn release(&self, keys: &[LogKey]) -> (Vec<LogKey>, ApiResult<()>) {
        let _changing = self.changes.write().await;
        let logs: Vec<(LogKey, Arc<dyn BucketLog>)> = {
            let mut open = self.open.write();
            keys.iter()
                .filter_map(|key| Some((key.clone(), open.remove(key)?)))
                .collect()
        };
        close_logs(logs).await
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
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    use async_trait::async_trait;
    use bytes::Bytes;
    use mink_s3stream::Footprint;
    use tokio::sync::watch;

    use super::*;
    use crate::bucket_log::{AppendOutcome, LogOffsets, ReadChunk, TailWatch};
    use crate::catalog::TableSchemas;

    /// A log that only knows whether it was closed.
    #[derive(Default)]
    struct Quiet {
        closed: AtomicBool,
    }

    #[async_trait]
    impl BucketLog for Quiet {
        async fn append(&self, _: Bytes) -> ApiResult<AppendOutcome> {
            Err(ApiError::ShuttingDown)
        }
        async fn read(
            &self,
            _: u64,
            _: Option<u64>,
            _: Option<&[String]>,
            _: usize,
        ) -> ApiResult<ReadChunk> {
            Err(ApiError::ShuttingDown)
        }
        fn offsets(&self) -> LogOffsets {
            LogOffsets {
                log_start: 0,
                high_watermark: 0,
            }
        }
        fn footprint(&self) -> Footprint {
            Footprint {
                start: 0,
                confirm: 0,
                pieces: Vec::new(),
            }
        }
        async fn wait_past(&self, offset: u64, _: Duration) -> u64 {
            offset
        }
        fn watch_tail(&self) -> TailWatch {
            // A log that never moves: its watermark's sender is gone at once.
            TailWatch::new(
                watch::channel(0).1,
                tokio_util::sync::CancellationToken::new(),
            )
        }
        fn is_closed(&self) -> bool {
            self.closed.load(Ordering::Acquire)
        }
        async fn offset_for_timestamp(&self, _: i64) -> ApiResult<u64> {
            Err(ApiError::ShuttingDown)
        }
        async fn trim(&self, _: u64) -> ApiResult<()> {
            Err(ApiError::ShuttingDown)
        }
        async fn close(&self) -> ApiResult<()> {
            self.closed.store(true, Ordering::Release);
            Ok(())
        }
        async fn destroy(&self) -> ApiResult<()> {
            self.close().await
        }
    }

    /// Opens that each wait until `needed` opens are in flight at once (or a release).
    struct Rendezvous {
        needed: usize,
        inflight: watch::Sender<usize>,
        opens: AtomicUsize,
    }

    #[async_trait]
    impl LogProvider for Rendezvous {
        async fn open(&self, _: &LogKey, _: &Arc<TableInfo>) -> ApiResult<Arc<dyn BucketLog>> {
            self.opens.fetch_add(1, Ordering::AcqRel);
            self.inflight.send_modify(|n| *n += 1);
            let mut seen = self.inflight.subscribe();
            // A registry that opened one log at a time would leave this waiting forever.
            let met = tokio::time::timeout(
                Duration::from_secs(20),
                seen.wait_for(|n| *n >= self.needed),
            )
            .await;
            assert!(met.is_ok(), "opens of different logs ran one at a time");
            Ok(Arc::new(Quiet::default()))
        }
        async fn destroy_closed(&self, _: &LogKey) -> ApiResult<()> {
            Ok(())
        }
    }

    /// Opens at once; destroys of closed logs that each wait for `gate` to open, counting how
    /// many wait at once.
    struct Gated {
        gate: watch::Sender<bool>,
        destroying: watch::Sender<usize>,
        most: AtomicUsize,
        destroyed: AtomicUsize,
    }

    #[async_trait]
    impl LogProvider for Gated {
        async fn open(&self, _: &LogKey, _: &Arc<TableInfo>) -> ApiResult<Arc<dyn BucketLog>> {
            Ok(Arc::new(Quiet::default()))
        }
        async fn destroy_closed(&self, _: &LogKey) -> ApiResult<()> {
            self.destroying.send_modify(|n| *n += 1);
            self.most
                .fetch_max(*self.destroying.borrow(), Ordering::AcqRel);
            let _ = self.gate.subscribe().wait_for(|open| *open).await;
            self.destroying.send_modify(|n| *n -= 1);
            self.destroyed.fetch_add(1, Ordering::AcqRel);
            Ok(())
        }
    }

    fn record(name: &str, bucket_count: u32) -> TableRecord {
        TableRecord {
            name: name.to_owned(),
            schemas: Default::default(),
            bucket_count,
            partitions: vec![String::new()],
            incarnation: 1,
            retention: None,
            kafka_key: None,
            stream: None,
            compression: None,
        }
    }

    fn table() -> Arc<TableInfo> {
        Arc::new(TableInfo {
            record: parking_lot::RwLock::new(record("t", 8)),
            schemas: Arc::new(TableSchemas::default()),
        })
    }

    fn key(bucket: u32) -> LogKey {
        key_of("t", bucket)
    }

    fn key_of(table: &str, bucket: u32) -> LogKey {
        LogKey {
            table: table.to_owned(),
            partition: String::new(),
            bucket,
            incarnation: 1,
        }
    }

    #[tokio::test]
    async fn a_drop_destroys_its_logs_side_by_side_while_other_tables_open() {
        let provider = Arc::new(Gated {
            gate: watch::Sender::new(false),
            destroying: watch::Sender::new(0),
            most: AtomicUsize::new(0),
            destroyed: AtomicUsize::new(0),
        });
        let logs = Arc::new(Logs::new(provider.clone()));
        let opened = logs.get(&key(0), &table()).await.unwrap();
        let dropped = record("t", 200);
        let drop = tokio::spawn({
            let logs = logs.clone();
            async move { logs.destroy_table(&dropped).await }
        });
        // One destroy at a time would leave this waiting: the others queue behind the gate.
        let mut destroying = provider.destroying.subscribe();
        let all_at_once = tokio::time::timeout(
            Duration::from_secs(20),
            destroying.wait_for(|n| *n == DESTROY_PARALLELISM),
        )
        .await
        .is_ok();
        assert!(all_at_once, "the drop destroyed its logs one at a time");
        // Meanwhile another table's log opens, and the dropped incarnation's does not.
        let other = Arc::new(TableInfo {
            record: parking_lot::RwLock::new(record("u", 1)),
            schemas: Arc::new(TableSchemas::default()),
        });
        let open = tokio::time::timeout(Duration::from_secs(20), logs.get(&key_of("u", 0), &other))
            .await
            .expect("an open of another table waited for the drop");
        assert!(open.is_ok());
        let refused = logs.get(&key(7), &table()).await.err();
        assert!(
            matches!(refused, Some(ApiError::TableNotFound { .. })),
            "{refused:?}"
        );
        provider.gate.send_replace(true);
        drop.await.unwrap().unwrap();
        assert!(opened.is_closed(), "the open log was destroyed");
        assert_eq!(provider.destroyed.load(Ordering::Acquire), 199);
        assert_eq!(provider.most.load(Ordering::Acquire), DESTROY_PARALLELISM);
        assert_eq!(logs.open_count(), 1, "only the other table's log is open");
        assert!(logs.dropping.lock().is_empty());
    }

    #[tokio::test]
    async fn logs_open_side_by_side_and_each_once() {
        let provider = Arc::new(Rendezvous {
            needed: 4,
            inflight: watch::Sender::new(0),
            opens: AtomicUsize::new(0),
        });
        let logs = Arc::new(Logs::new(provider.clone()));
        let table = table();
        // Four buckets, each asked for three times at once.
        let mut gets = Vec::new();
        for bucket in 0..4 {
            for _ in 0..3 {
                let (logs, table) = (logs.clone(), table.clone());
                gets.push(tokio::spawn(async move {
                    let log = logs.get(&key(bucket), &table).await.unwrap();
                    (bucket, log)
                }));
            }
        }
        let mut by_bucket: HashMap<u32, Vec<Arc<dyn BucketLog>>> = HashMap::new();
        for get in gets {
            let (bucket, log) = get.await.unwrap();
            by_bucket.entry(bucket).or_default().push(log);
        }
        assert_eq!(
            provider.opens.load(Ordering::Acquire),
            4,
            "one open per log"
        );
        for (bucket, got) in &by_bucket {
            assert!(
                got.iter().all(|log| Arc::ptr_eq(log, &got[0])),
                "every use of bucket {bucket} got the same log"
            );
        }
        assert_eq!(logs.open_count(), 4);
        assert!(logs.opening.lock().is_empty(), "no open left behind");
        logs.close_all().await.unwrap();
        assert!(by_bucket.values().flatten().all(|log| log.is_closed()));
    }
}
