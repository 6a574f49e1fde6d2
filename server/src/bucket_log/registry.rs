//! The node's registry of open bucket logs: each log is opened once, on first use, and closed
//! together at shutdown; [`Logs::owner`] is where ownership (which node serves a bucket) goes.
//!
//! Opens of different logs run side by side, `node.max_concurrent_opens` at a time (an open replays
//! the log and writes metadata: a table's first appends to a thousand buckets must not queue
//! behind one another); two opens of one log are one. Drops, releases and the shutdown wait for
//! the opens in flight and keep new ones out while they run.

use std::collections::HashMap;
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
    /// Opens hold it shared; drops, releases and the shutdown exclusively.
    changes: RwLock<()>,
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

    /// Destroys every bucket log of the (dropped) table `table`'s incarnation, open or not.
    /// Safe to repeat after a partial run. Under the lock that opens take, so an open of the
    /// same incarnation either finished before (and its log is destroyed here) or comes after
    /// and finds the table record gone.
    pub async fn destroy_table(&self, table: &TableRecord) -> ApiResult<()> {
        let _changing = self.changes.write().await;
        for partition in &table.partitions {
            for bucket in 0..table.bucket_count {
                let key = LogKey {
                    table: table.name.clone(),
                    partition: partition.clone(),
                    bucket,
                    incarnation: table.incarnation,
                };
                let open = self.open.write().remove(&key);
                match open {
                    Some(log) => log.destroy().await?,
                    None => self.provider.destroy_closed(&key).await?,
                }
            }
        }
        Ok(())
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

/// Closes `logs`, [`CLOSE_PARALLELISM`] at a time; returns the keys closed and the first error
/// (every log is tried).
async fn close_logs(logs: Vec<(LogKey, Arc<dyn BucketLog>)>) -> (Vec<LogKey>, ApiResult<()>) {
    use futures::StreamExt;
    // Boxed before they go into the stream: a stream over the logs themselves defeats the
    // compiler's proof that the task running it is `Send`.
    type Close = std::pin::Pin<
        Box<dyn std::future::Future<Output = (LogKey, ApiResult<()>)> + Send + 'static>,
    >;
    let closes: Vec<Close> = logs
        .into_iter()
        .map(|(key, log)| -> Close {
            Box::pin(async move {
                let closed = log.close().await;
                (key, closed)
            })
        })
        .collect();
    let outcomes: Vec<(LogKey, ApiResult<()>)> = futures::stream::iter(closes)
        .buffer_unordered(CLOSE_PARALLELISM)
        .collect()
        .await;
    let mut closed = Vec::with_capacity(outcomes.len());
    let mut first_error = None;
    for (key, outcome) in outcomes {
        match outcome {
            Ok(()) => closed.push(key),
            Err(e) => {
                tracing::warn!(log = %key, error = %e, "closing a log failed");
                first_error.get_or_insert(e);
            }
        }
    }
    (closed, first_error.map_or(Ok(()), Err))
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

    fn table() -> Arc<TableInfo> {
        Arc::new(TableInfo {
            record: parking_lot::RwLock::new(TableRecord {
                name: "t".to_owned(),
                schemas: Default::default(),
                bucket_count: 8,
                partitions: vec![String::new()],
                incarnation: 1,
                retention: None,
                kafka_key: None,
                stream: None,
                compression: None,
            }),
            schemas: Arc::new(TableSchemas::default()),
        })
    }

    fn key(bucket: u32) -> LogKey {
        LogKey {
            table: "t".to_owned(),
            partition: String::new(),
            bucket,
            incarnation: 1,
        }
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
