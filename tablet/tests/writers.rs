//! Writer epochs and record-counting sequences (docs/writer-identity.md) on a real tablet: the
//! rules hold on append, and stay exact after a crash, whether the window comes back from the
//! writer snapshot or from replaying the log. A writer's appends pipelined with `append_then` keep
//! their order (docs/produce-pipelining.md).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use mink_codec::{BatchMeta, encode_batch, writer_field};
use mink_tablet::{Tablet, TabletError, TabletSettings};

const WAIT: Duration = Duration::from_secs(10);

/// A batch of `rows` rows for writer `id` at `epoch`, sequence `sequence`, counting records or
/// batches.
fn batch_at(rows: usize, id: i64, epoch: i16, sequence: i32, records: bool) -> Bytes {
    let plain = batch(rows, -1, -1);
    let view = mink_codec::BatchView::new(plain.as_ref()).unwrap();
    let (decoded, _) = view.decode(&schema()).unwrap();
    let meta = BatchMeta::new(SCHEMA_ID).with_writer(writer_field(id, epoch).unwrap(), sequence);
    let meta = if records {
        meta.counting_records()
    } else {
        meta
    };
    Bytes::from(encode_batch(&decoded, None, meta).unwrap())
}

async fn stale(tablet: &Tablet, bytes: Bytes) -> (i16, i16) {
    match tablet.append(bytes).await {
        Err(TabletError::StaleWriterEpoch { epoch, current, .. }) => (epoch, current),
        other => panic!("expected a stale epoch, got {other:?}"),
    }
}

async fn out_of_order(tablet: &Tablet, bytes: Bytes) -> i32 {
    match tablet.append(bytes).await {
        Err(TabletError::OutOfOrderSequence { expected, .. }) => expected,
        other => panic!("expected out of order, got {other:?}"),
    }
}

/// Appends as a Kafka producer would (records counted, an epoch bump in the middle), crashes,
/// reopens and checks every rule again. `snapshot` chooses whether a writer snapshot covers the
/// appends (the window comes from it) or not (the window comes from replaying the log).
async fn epochs_and_record_counts_survive_a_crash(snapshot: bool) {
    let world = World::new();
    let engine = world.engine("n1").await;
    let settings = TabletSettings {
        snapshot_every_appends: if snapshot { 1 } else { 1_000_000 },
        ..TabletSettings::default()
    };
    let tablet = open(&engine, settings.clone()).await;
    // Epoch 0: batches of 3, 4 and 2 records start at sequences 0, 3 and 7.
    let mut sent = Vec::new();
    for (rows, seq) in [(3, 0), (4, 3), (2, 7)] {
        let r = tablet
            .append(batch_at(rows, 9, 0, seq, true))
            .await
            .unwrap();
        assert!(!r.is_duplicate());
        sent.push((rows, seq, r.base_offset()));
    }
    assert_eq!(
        out_of_order(&tablet, batch_at(1, 9, 0, 3 + 1, true)).await,
        9
    );
    // A retry with another record count is not the batch it claims to repeat.
    assert_eq!(out_of_order(&tablet, batch_at(5, 9, 0, 3, true)).await, 9);
    // The producer bumps its epoch: sequence 0 again; the old incarnation is fenced.
    assert_eq!(out_of_order(&tablet, batch_at(1, 9, 1, 9, true)).await, 0);
    let bumped = tablet.append(batch_at(5, 9, 1, 0, true)).await.unwrap();
    assert!(!bumped.is_duplicate());
    assert_eq!(stale(&tablet, batch_at(1, 9, 0, 9, true)).await, (0, 1));
    // A batch-counting writer beside it keeps the old rule.
    tablet.append(batch(2, 4, 0)).await.unwrap();
    tablet.append(batch(2, 4, 1)).await.unwrap();
    let end = tablet.offsets().log_end;
    if snapshot {
        let metadata = world.metadata().await;
        tokio::time::timeout(WAIT, async {
            loop {
                let at = metadata
                    .get_writer_snapshot("orders", "default", 0)
                    .await
                    .unwrap()
                    .map_or(0, |s| s.offset);
                if at >= end {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
    }
    engine.abort();
    drop((tablet, engine));

    let engine = world.engine("n1").await;
    let tablet = open(&engine, settings).await;
    assert_eq!(tablet.offsets().log_end, end);
    let writers = tablet.writers().await;
    let kafka = writers.iter().find(|w| w.writer_id == 9).unwrap();
    assert_eq!(
        (kafka.epoch, kafka.counts_records, kafka.next_sequence()),
        (1, true, Some(5))
    );
    // The old epoch is still fenced, even for a batch that was appended at it.
    let (rows, seq, _) = sent[1];
    assert_eq!(
        stale(&tablet, batch_at(rows, 9, 0, seq, true)).await,
        (0, 1)
    );
    // The bumped batch is a duplicate with its first offsets; the next starts at 5.
    let again = tablet.append(batch_at(5, 9, 1, 0, true)).await.unwrap();
    assert!(again.is_duplicate());
    assert_eq!(again.base_offset(), bumped.base_offset());
    assert_eq!(out_of_order(&tablet, batch_at(1, 9, 1, 1, true)).await, 5);
    assert!(
        !tablet
            .append(batch_at(1, 9, 1, 5, true))
            .await
            .unwrap()
            .is_duplicate()
    );
    // The old epoch's batches left the window at the bump: its sequence 3 of 4 records is not
    // a duplicate at the new epoch.
    assert_eq!(out_of_order(&tablet, batch_at(4, 9, 1, 3, true)).await, 6);
    assert_eq!(out_of_order(&tablet, batch(1, 4, 3)).await, 2);
    assert!(tablet.append(batch(2, 4, 1)).await.unwrap().is_duplicate());
}

#[tokio::test]
async fn epochs_and_record_counts_survive_a_crash_from_the_snapshot() {
    epochs_and_record_counts_survive_a_crash(true).await;
}

#[tokio::test]
async fn epochs_and_record_counts_survive_a_crash_from_the_log() {
    epochs_and_record_counts_survive_a_crash(false).await;
}

#[tokio::test]
async fn a_writer_pipelines_appends_placed_in_order_before_they_are_durable() {
    let faulty = Arc::new(mink_s3stream::storage::FaultyStorage::new(
        Arc::new(mink_s3stream::storage::ObjectStoreBackend::memory()),
        1,
    ));
    faulty.set_put_delay(Duration::from_millis(200));
    let world =
        World::with_storage(faulty.clone() as Arc<dyn mink_s3stream::storage::ObjectStorage>);
    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    let writer = 7;
    // The first append is placed (offsets assigned) while its WAL PUT is still delayed: the
    // high watermark has not moved when the callback runs.
    let (placed, is_placed) = tokio::sync::oneshot::channel();
    let first = {
        let tablet = tablet.clone();
        let seen = tablet.clone();
        tokio::spawn(async move {
            tablet
                .append_then(batch(2, writer, 0), move || {
                    let _ = placed.send(seen.high_watermark());
                })
                .await
        })
    };
    let watermark_when_placed = is_placed.await.expect("the callback runs");
    assert_eq!(watermark_when_placed, 0);
    // The writer's next batch, started now, goes after it, before the first is durable.
    let second = tablet.append(batch(3, writer, 1)).await.unwrap();
    let first = first.await.unwrap().unwrap();
    assert_eq!((first.base_offset(), first.next_offset()), (0, 2));
    assert_eq!((second.base_offset(), second.next_offset()), (2, 5));
    // A duplicate is placed at once and calls back too.
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    let again = tablet
        .append_then(batch(2, writer, 0), move || {
            flag.store(true, Ordering::SeqCst)
        })
        .await
        .unwrap();
    assert!(again.is_duplicate());
    assert!(called.load(Ordering::SeqCst));
    // An append refused before it is placed calls back as well.
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    assert!(
        tablet
            .append_then(Bytes::from_static(b"not a batch"), move || flag
                .store(true, Ordering::SeqCst))
            .await
            .is_err()
    );
    assert!(called.load(Ordering::SeqCst));
}
