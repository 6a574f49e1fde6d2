//! Tests of the registry of open logs: opens, drops and releases side by side.

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
    /// When set, a close waits for the gate to open, counted as closing meanwhile.
    gate: Option<(watch::Receiver<bool>, Arc<watch::Sender<usize>>)>,
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
        if let Some((gate, closing)) = &self.gate {
            closing.send_modify(|n| *n += 1);
            let _ = gate.clone().wait_for(|open| *open).await;
            closing.send_modify(|n| *n -= 1);
        }
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

/// Opens logs of table `t` whose closes wait for `gate`; other tables' logs close at once.
struct CloseGated {
    gate: watch::Sender<bool>,
    closing: Arc<watch::Sender<usize>>,
}

#[async_trait]
impl LogProvider for CloseGated {
    async fn open(&self, key: &LogKey, _: &Arc<TableInfo>) -> ApiResult<Arc<dyn BucketLog>> {
        let gate = (key.table == "t").then(|| (self.gate.subscribe(), self.closing.clone()));
        Ok(Arc::new(Quiet {
            gate,
            ..Quiet::default()
        }))
    }
    async fn destroy_closed(&self, _: &LogKey) -> ApiResult<()> {
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

/// Whether `count` reaches `wanted` within 20 s.
async fn reaches(count: &watch::Sender<usize>, wanted: usize) -> bool {
    let mut seen = count.subscribe();
    tokio::time::timeout(Duration::from_secs(20), seen.wait_for(|n| *n == wanted))
        .await
        .is_ok()
}

/// Whether a log of another table (`u`) opens within 20 s.
async fn opens_another(logs: &Logs) -> bool {
    let other = Arc::new(TableInfo {
        record: parking_lot::RwLock::new(record("u", 1)),
        schemas: Arc::new(TableSchemas::default()),
    });
    let key = key_of("u", 0);
    let open = tokio::time::timeout(Duration::from_secs(20), logs.get(&key, &other)).await;
    matches!(open, Ok(Ok(_)))
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
    let all_at_once = reaches(&provider.destroying, DESTROY_PARALLELISM).await;
    assert!(all_at_once, "the drop destroyed its logs one at a time");
    // Meanwhile another table's log opens, and the dropped incarnation's does not.
    assert!(
        opens_another(&logs).await,
        "an open of another table waited for the drop"
    );
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
async fn a_release_closes_its_logs_side_by_side_while_others_open() {
    let provider = Arc::new(CloseGated {
        gate: watch::Sender::new(false),
        closing: Arc::new(watch::Sender::new(0)),
    });
    let logs = Arc::new(Logs::new(provider.clone()));
    let table = table();
    let mut released = Vec::new();
    for bucket in 0..200 {
        released.push(logs.get(&key(bucket), &table).await.unwrap());
    }
    let release = tokio::spawn({
        let logs = logs.clone();
        let keys: Vec<LogKey> = (0..200).map(key).collect();
        async move { logs.release(&keys).await }
    });
    let side_by_side = reaches(&provider.closing, CLOSE_PARALLELISM).await;
    assert!(side_by_side, "the release closed its logs one at a time");
    // Meanwhile another table's log opens, and a log still closing does not open again.
    assert!(
        opens_another(&logs).await,
        "an open of another log waited for the release"
    );
    let refused = logs.get(&key(7), &table).await.err();
    assert!(
        matches!(refused, Some(ApiError::BucketUnavailable { .. })),
        "{refused:?}"
    );
    // The shutdown waits for the release's closes.
    let shutdown = tokio::spawn({
        let logs = logs.clone();
        async move { logs.close_all().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !shutdown.is_finished(),
        "the shutdown ended before the released logs closed"
    );
    provider.gate.send_replace(true);
    let (keys, outcome) = release.await.unwrap();
    outcome.unwrap();
    assert_eq!(keys.len(), 200);
    shutdown.await.unwrap().unwrap();
    assert!(released.iter().all(|log| log.is_closed()));
    assert!(logs.releasing.lock().is_empty());
    assert_eq!(logs.open_count(), 0);
}

#[tokio::test]
async fn a_log_released_opens_again_once_closed() {
    let provider = Arc::new(CloseGated {
        gate: watch::Sender::new(true),
        closing: Arc::new(watch::Sender::new(0)),
    });
    let logs = Logs::new(provider);
    let first = logs.get(&key(3), &table()).await.unwrap();
    let (keys, outcome) = logs.release(&[key(3), key(4)]).await;
    outcome.unwrap();
    assert_eq!(keys, vec![key(3)], "only the open log is released");
    assert!(first.is_closed());
    // The bucket moved back: a new log opens.
    let again = logs.get(&key(3), &table()).await.unwrap();
    assert!(!Arc::ptr_eq(&first, &again) && !again.is_closed());
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
