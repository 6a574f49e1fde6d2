//! Tests of the WAL writer and replay against in-memory storage with counting, latency and
//! fault-injecting wrappers.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::replay::replay;
use super::*;
use crate::storage::{
    CountingStorage, FaultKind, FaultyStorage, LatencyDistribution, LatencyProfile, LatencyStorage,
    ObjectStorage, ObjectStoreBackend, StorageOp,
};

const PREFIX: &str = "wal/node-a/";
const TIMEOUT: Duration = Duration::from_secs(20);

/// Hands out blocks of `block` ids after the first block, counting reservations.
struct Blocks {
    next: AtomicU64,
    block: u64,
    calls: AtomicU64,
}

#[async_trait::async_trait]
impl WalIdSource for Blocks {
    async fn reserve(&self) -> Result<Range<u64>, WalIdError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let start = self.next.fetch_add(self.block, Ordering::Relaxed);
        Ok(start..start + self.block)
    }
}

fn blocks(after: u64, block: u64) -> Arc<Blocks> {
    Arc::new(Blocks {
        next: AtomicU64::new(after),
        block,
        calls: AtomicU64::new(0),
    })
}

fn record(stream_id: u64, base_offset: u64, len: usize) -> WalRecord {
    WalRecord {
        stream_id,
        epoch: 1,
        base_offset,
        count: 1,
        payload: Bytes::from(vec![(base_offset % 251) as u8; len]),
        payload_crc: None,
    }
}

fn writer(storage: Arc<dyn ObjectStorage>, settings: WalSettings) -> WalWriter {
    WalWriter::new(storage, PREFIX, 0..1000, blocks(1000, 1000), settings)
}

/// Submits a record and returns a receiver of its outcome.
fn submit(wal: &WalWriter, record: WalRecord) -> oneshot::Receiver<Result<(), WalError>> {
    let (tx, rx) = oneshot::channel();
    wal.submit(
        record,
        Box::new(move |outcome| {
            let _ = tx.send(outcome);
        }),
    )
    .expect("the WAL accepts the record");
    rx
}

async fn outcome(rx: oneshot::Receiver<Result<(), WalError>>) -> Result<(), WalError> {
    tokio::time::timeout(TIMEOUT, rx)
        .await
        .expect("the append is acknowledged in time")
        .expect("the acknowledgement is sent")
}

fn memory() -> Arc<dyn ObjectStorage> {
    Arc::new(ObjectStoreBackend::memory())
}

#[tokio::test]
async fn an_idle_append_costs_exactly_one_put() {
    let counting = Arc::new(CountingStorage::new(memory()));
    let wal = writer(counting.clone(), WalSettings::default());
    for offset in 0..5 {
        outcome(submit(&wal, record(1, offset, 100))).await.unwrap();
        assert_eq!(
            counting.counts().puts,
            offset + 1,
            "one PUT per idle append"
        );
    }
    assert_eq!(wal.metrics().records_acked.load(Ordering::Relaxed), 5);
}

#[tokio::test]
async fn a_minimum_put_interval_holds_the_open_group_but_not_an_append_after_a_quiet_spell() {
    let interval = Duration::from_millis(1500);
    let counting = Arc::new(CountingStorage::new(memory()));
    let wal = writer(
        counting.clone(),
        WalSettings {
            min_put_interval: interval,
            ..WalSettings::default()
        },
    );
    // Nothing was written before: the first append goes at once, in its own PUT.
    let first = std::time::Instant::now();
    tokio::time::timeout(interval / 2, submit(&wal, record(1, 0, 100)))
        .await
        .expect("an append after a quiet spell is not held")
        .unwrap()
        .unwrap();
    assert_eq!(counting.counts().puts, 1);
    // The next ones, right after, wait out the interval together: one more PUT.
    let rest: Vec<_> = (1..21)
        .map(|offset| submit(&wal, record(1 + offset % 3, offset, 100)))
        .collect();
    for rx in rest {
        outcome(rx).await.unwrap();
    }
    assert!(first.elapsed() >= interval, "{:?}", first.elapsed());
    assert_eq!(counting.counts().puts, 2);
    // A full group is not held back.
    let big = WalSettings::default().max_object_bytes;
    let full = submit(&wal, record(4, 0, big));
    tokio::time::timeout(interval / 2, full)
        .await
        .expect("a full group is not held")
        .unwrap()
        .unwrap();
    assert_eq!(counting.counts().puts, 3);
}

#[tokio::test]
async fn appends_under_load_group_and_each_stream_is_acknowledged_in_submission_order() {
    // Slow PUTs and two slots: appends pile up behind them and go out together.
    let slow = Arc::new(LatencyStorage::new(
        memory(),
        LatencyProfile::none().with_put(LatencyDistribution::from_p50_p99(
            Duration::from_millis(5),
            Duration::from_millis(40),
        )),
        7,
    ));
    let counting = Arc::new(CountingStorage::new(slow));
    let wal = writer(
        counting.clone(),
        WalSettings {
            max_inflight_puts: 2,
            ..WalSettings::default()
        },
    );
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut receivers = Vec::new();
    for i in 0..500u64 {
        let (tx, rx) = oneshot::channel();
        let order = order.clone();
        wal.submit(
            record(i % 10, i, 64),
            Box::new(move |outcome| {
                order.lock().unwrap().push(i);
                let _ = tx.send(outcome);
            }),
        )
        .unwrap();
        receivers.push(rx);
        if i % 50 == 0 {
            tokio::task::yield_now().await;
        }
    }
    for rx in receivers {
        outcome(rx).await.unwrap();
    }
    // Each stream's appends are acknowledged in its submission order.
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len(), 500);
    for stream in 0..10 {
        let of_stream: Vec<u64> = order.iter().copied().filter(|i| i % 10 == stream).collect();
        let submitted: Vec<u64> = (0..500).filter(|i| i % 10 == stream).collect();
        assert_eq!(of_stream, submitted, "stream {stream}");
    }
    let puts = counting.counts().puts;
    assert!(puts < 50, "500 appends behind slow PUTs took {puts} PUTs");

    // Everything is in the WAL: each object holds its records by stream, in offset order, and
    // objects follow submission order.
    let replayed = replay(
        &(counting as Arc<dyn ObjectStorage>),
        PREFIX,
        std::slice::from_ref(&(0..1000)),
    )
    .await
    .unwrap();
    let mut offsets = Vec::new();
    let mut last_of_stream = std::collections::HashMap::new();
    for object in &replayed.objects {
        let mut keys: Vec<(u64, u64)> = object
            .records
            .iter()
            .map(|r| (r.stream_id, r.base_offset))
            .collect();
        let in_object_order = keys.clone();
        keys.sort_unstable();
        assert_eq!(in_object_order, keys, "records are by stream, then offset");
        for (stream, offset) in keys {
            let last = last_of_stream.insert(stream, offset);
            assert!(last < Some(offset), "stream {stream} goes back to {offset}");
            offsets.push(offset);
        }
    }
    offsets.sort_unstable();
    assert_eq!(offsets, (0..500).collect::<Vec<_>>());
    assert_eq!(replayed.ended_at, Some(puts));
}

/// An in-memory store whose PUT of one key waits until it is let go.
#[derive(Debug)]
struct HeldPut {
    inner: ObjectStoreBackend,
    held: String,
    go: tokio::sync::Semaphore,
}

#[async_trait::async_trait]
impl ObjectStorage for HeldPut {
    fn name(&self) -> &str {
        "held-put"
    }
    async fn put(
        &self,
        key: &str,
        data: Bytes,
    ) -> crate::storage::Result<crate::storage::PutResult> {
        if key == self.held {
            let _ = self.go.acquire().await;
        }
        self.inner.put(key, data).await
    }
    async fn put_if_absent(
        &self,
        key: &str,
        data: Bytes,
    ) -> crate::storage::Result<crate::storage::PutResult> {
        self.put(key, data).await
    }
    async fn get(&self, key: &str) -> crate::storage::Result<Bytes> {
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> crate::storage::Result<Bytes> {
        self.inner.get_range(key, range).await
    }
    async fn head(&self, key: &str) -> crate::storage::Result<crate::storage::ObjectMeta> {
        self.inner.head(key).await
    }
    async fn delete(&self, key: &str) -> crate::storage::Result<()> {
        self.inner.delete(key).await
    }
    async fn delete_many(&self, keys: &[String]) -> crate::storage::Result<()> {
        self.inner.delete_many(keys).await
    }
    async fn list(&self, prefix: &str) -> crate::storage::Result<Vec<crate::storage::ObjectMeta>> {
        self.inner.list(prefix).await
    }
}

#[tokio::test]
async fn a_slow_put_holds_back_only_the_streams_it_carries() {
    // The first WAL object's PUT waits; with a second slot, later groups go past it.
    let storage = Arc::new(HeldPut {
        inner: ObjectStoreBackend::memory(),
        held: WalWriter::object_key(PREFIX, 0),
        go: tokio::sync::Semaphore::new(0),
    });
    let wal = writer(
        storage.clone(),
        WalSettings {
            max_inflight_puts: 2,
            put_hedge_quantile: 0.0,
            ..WalSettings::default()
        },
    );
    let held = submit(&wal, record(1, 0, 10));
    // Object 1: stream 2 alone, acknowledged while object 0 is still in flight.
    outcome(submit(&wal, record(2, 0, 10))).await.unwrap();
    // Object 2: stream 1's next record, durable but held behind stream 1's first; object 3
    // (once object 2's slot is free): stream 3's, acknowledged.
    let mut behind = submit(&wal, record(1, 1, 10));
    outcome(submit(&wal, record(3, 0, 10))).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        behind.try_recv().is_err(),
        "stream 1's second record was acknowledged before its first was durable"
    );
    // The durable point stays at the held object: nothing at or past it is handed to compaction.
    assert_eq!(wal.with_durable_point(|point| point), 0);
    assert!(wal.written_below(u64::MAX).is_empty());
    storage.go.add_permits(1);
    outcome(held).await.unwrap();
    outcome(behind).await.unwrap();
    tokio::time::timeout(TIMEOUT, wal.settle()).await.unwrap();
    assert_eq!(wal.with_durable_point(|point| point), 4);
    let written: Vec<u64> = wal.written_below(u64::MAX).iter().map(|o| o.id).collect();
    assert_eq!(written, vec![0, 1, 2, 3]);
}

#[tokio::test]
async fn a_large_group_is_split_at_max_object_bytes() {
    let counting = Arc::new(CountingStorage::new(memory()));
    let faulty = Arc::new(FaultyStorage::new(counting.clone(), 1));
    faulty.set_put_delay(Duration::from_millis(50));
    let wal = writer(
        faulty,
        WalSettings {
            max_inflight_puts: 1,
            max_object_bytes: 10_000,
            ..WalSettings::default()
        },
    );
    let receivers: Vec<_> = (0..40).map(|i| submit(&wal, record(1, i, 1000))).collect();
    for rx in receivers {
        outcome(rx).await.unwrap();
    }
    let counts = counting.counts();
    // The first append goes alone; the other 39 (about 40 KB) wait and are cut at 10 KB.
    assert!(
        (4..=8).contains(&counts.puts),
        "{} PUTs for 40 KB in 10 KB objects",
        counts.puts
    );
}

#[tokio::test]
async fn appends_waiting_for_busy_slots_leave_in_groups_of_an_even_share() {
    // Records per WAL object, in order, when two appends take both slots and 30 more arrive
    // before either PUT finishes (the test's runtime has one thread, so no upload runs before
    // the test awaits).
    async fn groups(min_split_bytes: usize) -> Vec<usize> {
        let storage = memory();
        let wal = writer(
            storage.clone(),
            WalSettings {
                max_inflight_puts: 2,
                min_split_bytes,
                ..WalSettings::default()
            },
        );
        let receivers: Vec<_> = (0..32).map(|i| submit(&wal, record(1, i, 1000))).collect();
        for rx in receivers {
            outcome(rx).await.unwrap();
        }
        let replayed = replay(&storage, PREFIX, std::slice::from_ref(&(0..1000)))
            .await
            .unwrap();
        replayed.objects.iter().map(|o| o.records.len()).collect()
    }
    // Off: everything that waited goes in one group.
    assert_eq!(groups(0).await, [1, 1, 30]);
    // On: a group is sealed once it holds half (two slots) of the bytes in flight and waiting,
    // so the pieces grow with what waits: 2 of the 4 records then, 4 of 8, 8 of 16, 16 of 32.
    assert_eq!(groups(1).await, [1, 1, 2, 4, 8, 16]);
    // The floor: no group is sealed below `min_split_bytes` (here five records' worth); then 7
    // of the 14 in flight and waiting, 14 of 28, and the last 4 go when a slot frees.
    let five = 5 * record(1, 0, 1000).encoded_len();
    assert_eq!(groups(five).await, [1, 1, 5, 7, 14, 4]);
}

#[tokio::test]
async fn a_put_that_never_answers_is_hedged_and_its_append_acknowledged() {
    // The 21st PUT request hangs; by then 20 PUTs were timed (in microseconds), so it is sent
    // again after the floor of 10 ms and the second request lands.
    let storage = Arc::new(super::hedge::tests::HangingPut::new(20, false));
    let wal = writer(
        storage.clone(),
        WalSettings {
            put_hedge_min_delay: Duration::from_millis(10),
            put_hedge_budget: 1.0,
            ..WalSettings::default()
        },
    );
    for i in 0..21 {
        outcome(submit(&wal, record(1, i, 10))).await.unwrap();
    }
    assert_eq!(storage.puts.load(Ordering::SeqCst), 22);
    assert_eq!(wal.metrics().put_hedges.load(Ordering::Relaxed), 1);
    assert_eq!(wal.metrics().put_hedge_wins.load(Ordering::Relaxed), 1);
    let key = WalWriter::object_key(PREFIX, 20);
    assert!(storage.get(&key).await.is_ok(), "the hedged object landed");
}

#[tokio::test]
async fn a_retried_put_still_acknowledges() {
    let faulty = Arc::new(FaultyStorage::new(memory(), 3));
    faulty.fail_next_op(StorageOp::Put, 3, FaultKind::Throttled);
    let wal = writer(faulty.clone(), WalSettings::default());
    outcome(submit(&wal, record(1, 0, 10))).await.unwrap();
    assert_eq!(wal.metrics().put_retries.load(Ordering::Relaxed), 3);
    assert!(wal.failure().is_none());
}

#[tokio::test]
async fn a_failed_put_fails_it_and_everything_after_it_but_not_before() {
    let faulty = Arc::new(FaultyStorage::new(memory(), 5));
    let wal = writer(
        faulty.clone(),
        WalSettings {
            retry_deadline: Duration::from_millis(100),
            retry_initial_backoff: Duration::from_millis(5),
            ..WalSettings::default()
        },
    );
    outcome(submit(&wal, record(1, 0, 10))).await.unwrap();
    // Nobody waiting on the failure signal is woken while the writer is healthy.
    let signal = tokio::spawn({
        let wal = wal.clone();
        async move { wal.failed().await }
    });
    tokio::task::yield_now().await;
    assert!(!signal.is_finished());
    faulty.set_failure_rate(StorageOp::Put, 1.0, FaultKind::Unavailable);
    let failed = submit(&wal, record(1, 1, 10));
    let after = submit(&wal, record(2, 0, 10));
    assert!(matches!(
        outcome(failed).await,
        Err(WalError::PutFailed { .. })
    ));
    assert!(outcome(after).await.is_err());
    faulty.clear();
    // Refused from now on: the engine must be reopened.
    let refused = wal.submit(record(1, 2, 10), Box::new(|_| {}));
    assert!(matches!(refused, Err(WalError::Failed { .. })));
    assert!(wal.failure().is_some());
    let cause = tokio::time::timeout(TIMEOUT, signal)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(*cause, WalError::PutFailed { .. }), "{cause}");
    // A waiter arriving after the failure resolves at once.
    let again = tokio::time::timeout(TIMEOUT, wal.failed()).await.unwrap();
    assert!(Arc::ptr_eq(&again, &cause));
}

#[tokio::test]
async fn ids_are_taken_in_order_across_reserved_blocks() {
    let counting = Arc::new(CountingStorage::new(memory()));
    let source = blocks(100, 3);
    let wal = WalWriter::new(
        counting.clone(),
        PREFIX,
        0..2,
        source.clone(),
        WalSettings {
            max_inflight_puts: 1,
            ..WalSettings::default()
        },
    );
    for offset in 0..10 {
        outcome(submit(&wal, record(1, offset, 10))).await.unwrap();
    }
    assert!(source.calls.load(Ordering::Relaxed) >= 3);
    let keys: Vec<String> = counting
        .list(PREFIX)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert_eq!(keys.len(), 10);
    assert!(keys[0].ends_with(&format!("{:016x}", 0)));
    assert!(keys[2].ends_with(&format!("{:016x}", 100)));
}

#[tokio::test]
async fn replay_reads_past_a_missing_object_and_ends_after_more_missing_than_puts_in_flight() {
    let storage = memory();
    let wal = writer(storage.clone(), WalSettings::default());
    for offset in 0..6 {
        outcome(submit(&wal, record(1, offset, 10))).await.unwrap();
    }
    storage
        .delete(&WalWriter::object_key(PREFIX, 3))
        .await
        .unwrap();
    // As many missing in a row as PUTs may be in flight, then an object: still read. More than
    // that missing, then an object: past the end of the WAL, not read.
    let copy = storage
        .get(&WalWriter::object_key(PREFIX, 5))
        .await
        .unwrap();
    let within = 6 + MAX_INFLIGHT_PUTS as u64;
    let beyond = within + 1 + MAX_INFLIGHT_PUTS as u64 + 1;
    for id in [within, beyond] {
        storage
            .put(&WalWriter::object_key(PREFIX, id), copy.clone())
            .await
            .unwrap();
    }
    let replayed = replay(&storage, PREFIX, std::slice::from_ref(&(0..1000)))
        .await
        .unwrap();
    let ids: Vec<u64> = replayed.objects.iter().map(|o| o.id).collect();
    assert_eq!(ids, vec![0, 1, 2, 4, 5, within]);
    let mut gaps = vec![3];
    gaps.extend(6..within);
    assert_eq!(replayed.gaps, gaps);
    assert_eq!(replayed.ended_at, Some(within + 1));
}

#[tokio::test]
async fn replay_refuses_a_corrupt_object() {
    let storage = memory();
    let wal = writer(storage.clone(), WalSettings::default());
    outcome(submit(&wal, record(1, 0, 10))).await.unwrap();
    let key = WalWriter::object_key(PREFIX, 0);
    let mut bytes = storage.get(&key).await.unwrap().to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    storage.put(&key, Bytes::from(bytes)).await.unwrap();
    assert!(matches!(
        replay(&storage, PREFIX, std::slice::from_ref(&(0..10))).await,
        Err(replay::ReplayError::Corrupt { .. })
    ));
}

#[tokio::test]
async fn flush_and_shutdown_wait_for_uploads() {
    let faulty = Arc::new(FaultyStorage::new(memory(), 9));
    faulty.set_put_delay(Duration::from_millis(30));
    let wal = writer(faulty, WalSettings::default());
    let rx = submit(&wal, record(1, 0, 10));
    wal.shutdown().await;
    assert!(matches!(rx.await, Ok(Ok(()))));
    assert!(matches!(
        wal.submit(record(1, 1, 10), Box::new(|_| {})),
        Err(WalError::ShutDown)
    ));
}

/// A fence with a hand-moved clock and deadline.
#[derive(Debug, Default)]
struct TestFence {
    now_ms: AtomicU64,
    deadline_ms: AtomicU64,
}

impl AckFence for TestFence {
    fn now(&self) -> Duration {
        Duration::from_millis(self.now_ms.load(Ordering::SeqCst))
    }
    fn admits(&self, completed_at: Duration) -> bool {
        completed_at < Duration::from_millis(self.deadline_ms.load(Ordering::SeqCst))
    }
}

#[tokio::test]
async fn a_put_that_succeeds_past_the_fence_deadline_is_not_acknowledged() {
    let storage = memory();
    let fence = Arc::new(TestFence::default());
    fence.deadline_ms.store(1_000, Ordering::SeqCst);
    let wal = writer(storage.clone(), WalSettings::default()).with_fence(fence.clone());
    outcome(submit(&wal, record(1, 0, 10))).await.unwrap();
    // Renewals moved the deadline; the node goes on acknowledging.
    fence.now_ms.store(1_500, Ordering::SeqCst);
    fence.deadline_ms.store(2_000, Ordering::SeqCst);
    outcome(submit(&wal, record(1, 1, 10))).await.unwrap();
    // The node was paused past its deadline: the PUT lands, its success arrives too late.
    fence.now_ms.store(2_000, Ordering::SeqCst);
    let late = outcome(submit(&wal, record(1, 2, 10))).await;
    let Err(WalError::Fenced { key }) = late else {
        panic!("expected Fenced, got {late:?}");
    };
    assert!(
        storage.get(&key).await.is_ok(),
        "the object is in the store, unacknowledged"
    );
    // Nothing is acknowledged any more, even once the clock reads early again.
    fence.now_ms.store(0, Ordering::SeqCst);
    assert!(matches!(
        wal.submit(record(1, 3, 10), Box::new(|_| {})),
        Err(WalError::Failed { .. })
    ));
    assert!(matches!(
        wal.failure().as_deref(),
        Some(WalError::Fenced { .. })
    ));
    assert_eq!(wal.metrics().records_acked.load(Ordering::Relaxed), 2);
}
