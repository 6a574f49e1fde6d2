//! The tablet end to end on in-memory storage and metadata: every rule of spec/log-tablets.md.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use mink_codec::BatchView;
use mink_s3stream::storage::{
    FaultKind, FaultyStorage, ObjectStorage, ObjectStoreBackend, StorageOp,
};
use mink_s3stream::wal::WalSettings;
use mink_tablet::{
    Columns, CountingStream, ErrorKind, Isolation, ManualClock, Tablet, TabletError, TabletSettings,
};

async fn read_all(tablet: &Tablet, from: u64) -> Vec<mink_tablet::ReadBatch> {
    let hw = tablet.high_watermark();
    let mut out = Vec::new();
    let mut cursor = from;
    while cursor < hw {
        let got = tablet
            .read(cursor, u64::MAX, None, Isolation::HighWatermark, 1 << 20)
            .await
            .unwrap();
        assert!(!got.batches.is_empty());
        cursor = got.next_offset;
        out.extend(got.batches);
    }
    out
}

#[tokio::test]
async fn appends_get_contiguous_offsets_and_stamped_headers() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let clock = Arc::new(ManualClock::new(5_000));
    let tablet = open_with(&engine, TabletSettings::default(), clock.clone(), None).await;
    let first = tablet.append(plain(3)).await.unwrap();
    assert_eq!((first.base_offset(), first.next_offset()), (0, 3));
    clock.advance(10);
    let second = tablet.append(plain(2)).await.unwrap();
    assert_eq!((second.base_offset(), second.next_offset()), (3, 5));
    assert_eq!(second.batches[0].commit_timestamp, 5_010);
    assert!(second.high_watermark >= 5);
    let offsets = tablet.offsets();
    assert_eq!(
        (offsets.log_start, offsets.high_watermark, offsets.log_end),
        (0, 5, 5)
    );
    let batches = read_all(&tablet, 0).await;
    assert_eq!(batches.len(), 2);
    for (b, (base, ts)) in batches.iter().zip([(0, 5_000), (3, 5_010)]) {
        let view = BatchView::new(b.bytes.clone()).unwrap();
        view.validate().unwrap();
        assert_eq!(view.base_offset(), base);
        assert_eq!(view.commit_timestamp(), ts);
        assert_eq!(view.leader_epoch(), tablet.leader_epoch());
        assert!(tablet.leader_epoch() > 0);
    }
    // A read from inside a batch starts at the batch holding the offset.
    let got = tablet
        .read(4, 5, None, Isolation::HighWatermark, 1 << 20)
        .await
        .unwrap();
    assert_eq!(got.batches[0].base_offset(), 3);
    assert_eq!(got.next_offset, 5);
}

#[tokio::test]
async fn a_request_of_several_batches_is_one_unit() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    tablet.append(plain(1)).await.unwrap();
    let got = tablet
        .append(concat(&[plain(2), batch(3, 9, 0), plain(4)]))
        .await
        .unwrap();
    let ranges: Vec<(u64, u64)> = got
        .batches
        .iter()
        .map(|b| (b.base_offset, b.next_offset()))
        .collect();
    assert_eq!(ranges, vec![(1, 3), (3, 6), (6, 10)]);
    // A read from the middle of the request starts at the batch holding the offset.
    let read = tablet
        .read(4, u64::MAX, None, Isolation::HighWatermark, 1 << 20)
        .await
        .unwrap();
    let bases: Vec<u64> = read.batches.iter().map(|b| b.base_offset()).collect();
    assert_eq!(bases, vec![3, 6]);
    assert_eq!(read.next_offset, 10);

    // A corrupt batch anywhere rejects the whole request: nothing is appended.
    let mut bad = plain(2).to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let err = tablet
        .append(concat(&[batch(1, 9, 1), Bytes::from(bad), plain(1)]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidBatch);
    assert!(
        matches!(err, TabletError::InvalidBatch { index: 1, .. }),
        "{err}"
    );
    assert_eq!(tablet.offsets().log_end, 10);
    // The writer's sequence 1 was not consumed by the failed request.
    let next = tablet.append(batch(1, 9, 1)).await.unwrap();
    assert!(!next.is_duplicate());
}

#[tokio::test]
async fn bad_batches_are_rejected_with_clear_errors_and_change_nothing() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    tablet.append(plain(1)).await.unwrap();

    let good = plain(2).to_vec();
    let mut crc = good.clone();
    crc[60] ^= 1;
    let mut count = good.clone();
    count[32..36].copy_from_slice(&5i32.to_le_bytes()); // last_offset_delta, with a valid CRC
    let sealed = crc32c::crc32c(&count[29..]);
    count[25..29].copy_from_slice(&sealed.to_le_bytes());
    let truncated = good[..good.len() - 3].to_vec();
    let unknown_schema = mink_codec::encode_batch(
        &arrow_array::RecordBatch::new_empty(schema()),
        None,
        mink_codec::BatchMeta::new(7),
    )
    .unwrap();
    let other_schema = {
        let rows = arrow_array::RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(arrow_array::Int64Array::from(vec![1])),
                Arc::new(arrow_array::StringArray::from(vec!["a"])),
            ],
        )
        .unwrap();
        mink_codec::encode_batch(&rows, None, mink_codec::BatchMeta::new(7)).unwrap()
    };
    let cases: Vec<(&str, Vec<u8>, ErrorKind, &str)> = vec![
        ("crc", crc, ErrorKind::InvalidBatch, "CRC"),
        ("count", count, ErrorKind::InvalidBatch, "last_offset_delta"),
        ("truncated", truncated, ErrorKind::InvalidBatch, "truncated"),
        (
            "empty request",
            Vec::new(),
            ErrorKind::InvalidBatch,
            "no batch",
        ),
        (
            "zero rows",
            unknown_schema,
            ErrorKind::InvalidBatch,
            "no rows",
        ),
        (
            "schema",
            other_schema,
            ErrorKind::UnknownSchema,
            "unknown schema id 7",
        ),
        (
            "writer",
            batch(1, -5, 0).to_vec(),
            ErrorKind::InvalidBatch,
            "writer id",
        ),
    ];
    for (name, bytes, kind, message) in cases {
        let err = tablet.append(Bytes::from(bytes)).await.unwrap_err();
        assert_eq!(err.kind(), kind, "{name}: {err}");
        assert!(err.to_string().contains(message), "{name}: {err}");
        assert_eq!(tablet.offsets().log_end, 1, "{name} appended something");
    }
    let small = TabletSettings {
        max_request_bytes: 10,
        ..TabletSettings::default()
    };
    drop(tablet);
    let other = mink_tablet::Tablet::builder(mink_tablet::TabletId::new("t2", "p", 0))
        .engine(engine.clone())
        .schemas(schemas())
        .settings(small)
        .create()
        .await
        .unwrap();
    let err = other.append(plain(1)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TooLarge);
}

#[tokio::test]
async fn duplicates_return_first_offsets_and_out_of_order_names_the_expected_sequence() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    let mut offsets = Vec::new();
    for seq in 0..6 {
        let r = tablet.append(batch(2, 42, seq)).await.unwrap();
        assert!(!r.is_duplicate());
        offsets.push(r.base_offset());
    }
    let end = tablet.offsets().log_end;
    // The last five are duplicates with their first offsets; nothing is appended.
    for seq in 1..6 {
        let r = tablet.append(batch(2, 42, seq)).await.unwrap();
        assert!(r.is_duplicate(), "sequence {seq}");
        assert_eq!(r.base_offset(), offsets[seq as usize]);
        assert_eq!(r.batches[0].record_count, 2);
    }
    assert_eq!(tablet.offsets().log_end, end);
    // Sequence 0 was evicted by the five newer ones: out of order.
    for seq in [0, 7, 100] {
        let err = tablet.append(batch(2, 42, seq)).await.unwrap_err();
        assert!(
            matches!(err, TabletError::OutOfOrderSequence { expected: 6, received, writer_id: 42, .. } if received == seq),
            "{err}"
        );
        assert!(err.to_string().contains("expected 6"), "{err}");
    }
    assert_eq!(tablet.offsets().log_end, end);
    let writers = tablet.writers().await;
    assert_eq!(writers.len(), 1);
    let seqs: Vec<i32> = writers[0].batches.iter().map(|b| b.sequence).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
    assert_eq!(writers[0].next_sequence(), Some(6));
    // An unknown writer may start at any sequence.
    assert!(
        !tablet
            .append(batch(1, 43, 1000))
            .await
            .unwrap()
            .is_duplicate()
    );
    // A request mixing a duplicate and a new batch appends only the new one.
    let r = tablet
        .append(concat(&[batch(2, 42, 5), batch(2, 42, 6)]))
        .await
        .unwrap();
    assert!(r.batches[0].duplicate && !r.batches[1].duplicate);
    assert_eq!(r.batches[0].base_offset, offsets[5]);
    assert_eq!(tablet.offsets().log_end, end + 1 + 2);
}

#[tokio::test]
async fn sequences_wrap_from_i32_max_to_zero() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    for seq in [i32::MAX - 1, i32::MAX, 0, 1] {
        assert!(
            !tablet
                .append(batch(1, 1, seq))
                .await
                .unwrap()
                .is_duplicate()
        );
    }
    let r = tablet.append(batch(1, 1, i32::MAX)).await.unwrap();
    assert!(r.is_duplicate());
    assert_eq!(r.base_offset(), 1);
    let err = tablet.append(batch(1, 1, 3)).await.unwrap_err();
    assert!(matches!(
        err,
        TabletError::OutOfOrderSequence { expected: 2, .. }
    ));
}

#[tokio::test]
async fn an_idle_writer_expires_after_the_ttl() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let clock = Arc::new(ManualClock::new(1_000_000));
    let settings = TabletSettings {
        writer_ttl: Duration::from_secs(60),
        ..TabletSettings::default()
    };
    let tablet = open_with(&engine, settings, clock.clone(), None).await;
    tablet.append(batch(1, 5, 10)).await.unwrap();
    clock.advance(60_000);
    // At the TTL exactly the writer is still known.
    assert!(matches!(
        tablet.append(batch(1, 5, 50)).await.unwrap_err(),
        TabletError::OutOfOrderSequence { expected: 11, .. }
    ));
    assert!(tablet.append(batch(1, 5, 10)).await.unwrap().is_duplicate());
    clock.advance(1);
    // Past it, any sequence is accepted and the window restarts.
    let r = tablet.append(batch(1, 5, 50)).await.unwrap();
    assert!(!r.is_duplicate());
    let writers = tablet.writers().await;
    assert_eq!(writers[0].batches.len(), 1);
    assert_eq!(writers[0].next_sequence(), Some(51));
    // The old sequence is no longer a duplicate.
    assert!(tablet.append(batch(1, 5, 10)).await.is_err());
}

#[tokio::test]
async fn commit_timestamps_never_go_backwards() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let clock = Arc::new(ManualClock::new(10_000));
    let tablet = open_with(&engine, TabletSettings::default(), clock.clone(), None).await;
    let a = tablet.append(plain(1)).await.unwrap();
    clock.set(5_000);
    let b = tablet.append(plain(1)).await.unwrap();
    assert_eq!(a.batches[0].commit_timestamp, 10_000);
    assert_eq!(b.batches[0].commit_timestamp, 10_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appenders_get_contiguous_offsets_and_a_monotonic_watermark() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    let mut hw = tablet.watch_high_watermark();
    let watcher = tokio::spawn(async move {
        let mut seen = vec![*hw.borrow()];
        while hw.changed().await.is_ok() {
            let v = *hw.borrow_and_update();
            seen.push(v);
            if v >= 8 * 50 * 3 {
                break;
            }
        }
        seen
    });
    let mut tasks = Vec::new();
    for writer in 0..8i64 {
        let tablet = tablet.clone();
        tasks.push(tokio::spawn(async move {
            let mut ranges = Vec::new();
            for seq in 0..50 {
                let r = tablet.append(batch(3, writer, seq)).await.unwrap();
                assert!(!r.is_duplicate());
                assert!(r.high_watermark >= r.next_offset());
                ranges.push((r.base_offset(), r.next_offset()));
            }
            ranges
        }));
    }
    let mut ranges = Vec::new();
    for t in tasks {
        let mine = t.await.unwrap();
        assert!(
            mine.windows(2).all(|w| w[0].1 <= w[1].0),
            "a writer's offsets go forward"
        );
        ranges.extend(mine);
    }
    ranges.sort();
    let mut expect = 0;
    for (base, next) in ranges {
        assert_eq!(base, expect, "no gap and no overlap");
        expect = next;
    }
    assert_eq!(expect, 8 * 50 * 3);
    let seen = tokio::time::timeout(WAIT, watcher).await.unwrap().unwrap();
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    assert_eq!(*seen.last().unwrap(), expect);
    // Every row reads back exactly once, in offset order.
    let batches = read_all(&tablet, 0).await;
    assert_eq!(batches.len(), 400);
    assert!(
        batches
            .windows(2)
            .all(|w| w[0].next_offset() == w[1].base_offset())
    );
}

#[tokio::test]
async fn reads_are_checked_against_log_start_and_the_bound() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    for _ in 0..4 {
        tablet.append(plain(5)).await.unwrap();
    }
    tablet.trim(10).await.unwrap();
    assert_eq!(tablet.offsets().log_start, 10);
    let err = tablet
        .read(9, 20, None, Isolation::HighWatermark, 1 << 20)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            TabletError::BelowLogStart {
                offset: 9,
                log_start: 10
            }
        ),
        "{err}"
    );
    let err = tablet
        .read(21, 30, None, Isolation::HighWatermark, 1 << 20)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            TabletError::OffsetOutOfRange {
                offset: 21,
                bound: 20,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("beyond the read bound 20"),
        "{err}"
    );
    let err = tablet
        .read(15, 12, None, Isolation::HighWatermark, 1 << 20)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OffsetOutOfRange);
    // At the bound: an empty answer, not an error.
    let at = tablet
        .read(20, 30, None, Isolation::HighWatermark, 1 << 20)
        .await
        .unwrap();
    assert!(at.batches.is_empty());
    assert_eq!(at.next_offset, 20);
    // `to` is exclusive on base offsets and max_bytes keeps at least one batch.
    let got = tablet
        .read(10, 15, None, Isolation::HighWatermark, 1)
        .await
        .unwrap();
    assert_eq!(got.batches.len(), 1);
    assert_eq!(got.next_offset, 15);
    let err = tablet.trim(21).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OffsetOutOfRange);
}

/// A new tablet's stream manifest is written beside its open and its first append's WAL PUT, and
/// is on the store before that append is acknowledged: a rebuild from objects must be able to
/// name every stream that holds acknowledged data. Time is paused, so the PUTs' delays are
/// exact.
#[tokio::test(start_paused = true)]
async fn a_new_tablets_manifest_is_written_beside_its_first_append_and_before_the_ack() {
    let faulty = Arc::new(FaultyStorage::new(
        Arc::new(ObjectStoreBackend::memory()),
        1,
    ));
    let world = World::with_storage(faulty.clone() as Arc<dyn ObjectStorage>);
    let engine = world.engine("n1").await;
    // The manifest's PUT (started by the open) takes 600 ms, the WAL's after it 300 ms.
    faulty.set_put_delay(Duration::from_millis(600));
    let started = tokio::time::Instant::now();
    let tablet = open(&engine, TabletSettings::default()).await;
    // Paused time moves only when no task can run: the manifest's task starts its PUT first.
    tokio::time::sleep(Duration::from_millis(1)).await;
    faulty.set_put_delay(Duration::from_millis(300));
    tablet.append(plain(1)).await.unwrap();
    let took = started.elapsed();
    let manifests = world.storage.list("manifests/streams/").await.unwrap();
    assert_eq!(manifests.len(), 1, "{manifests:?}");
    // Side by side: the open and the first append took the manifest's 600 ms, not 900.
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_millis(900),
        "{took:?}"
    );
    faulty.set_put_delay(Duration::ZERO);
    // Opening it again (an existing stream) writes no second manifest.
    tablet.close().await.unwrap();
    let again = open(&engine, TabletSettings::default()).await;
    assert_eq!(again.offsets().high_watermark, 1);
    let manifests = world.storage.list("manifests/streams/").await.unwrap();
    assert_eq!(manifests.len(), 1, "{manifests:?}");
}

#[tokio::test]
async fn log_end_isolation_sees_appends_before_they_are_durable() {
    let faulty = Arc::new(FaultyStorage::new(
        Arc::new(ObjectStoreBackend::memory()),
        1,
    ));
    let world = World::with_storage(faulty.clone() as Arc<dyn ObjectStorage>);
    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    tablet.append(plain(2)).await.unwrap();
    faulty.set_put_delay(Duration::from_millis(300));
    let slow = tokio::spawn({
        let tablet = tablet.clone();
        async move { tablet.append(plain(3)).await }
    });
    let mut end = 0;
    tokio::time::timeout(WAIT, async {
        while end < 5 {
            end = tablet.offsets().log_end;
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    assert_eq!(tablet.high_watermark(), 2);
    let err = tablet
        .read(3, 5, None, Isolation::HighWatermark, 1 << 20)
        .await
        .unwrap_err();
    assert!(
        matches!(err, TabletError::OffsetOutOfRange { bound: 2, .. }),
        "{err}"
    );
    let got = tablet
        .read(2, 5, None, Isolation::LogEnd, 1 << 20)
        .await
        .unwrap();
    assert_eq!(got.batches.len(), 1);
    assert_eq!(got.next_offset, 5);
    // wait_past wakes when the append becomes durable.
    assert_eq!(tablet.wait_past(2, WAIT).await, 5);
    slow.await.unwrap().unwrap();
    // And times out with the watermark when nothing comes.
    assert_eq!(tablet.wait_past(5, Duration::from_millis(20)).await, 5);
}

#[tokio::test]
async fn reads_project_columns() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    tablet.append(concat(&[plain(3), plain(2)])).await.unwrap();
    let names = Columns::Names(vec!["name".to_owned()]);
    let got = tablet
        .read(0, u64::MAX, Some(&names), Isolation::HighWatermark, 1 << 20)
        .await
        .unwrap();
    assert_eq!(got.batches.len(), 2);
    let projected = Arc::new(schema().project(&[1]).unwrap());
    let view = BatchView::new(got.batches[1].bytes.clone()).unwrap();
    assert_eq!(view.base_offset(), 3);
    let (rows, _) = view.decode(&projected).unwrap();
    assert_eq!(rows.num_columns(), 1);
    assert_eq!(rows.num_rows(), 2);
    let by_index = Columns::Indices(vec![0]);
    let got = tablet
        .read(0, 3, Some(&by_index), Isolation::HighWatermark, 1 << 20)
        .await
        .unwrap();
    assert_eq!(got.batches.len(), 1);
    let bad = Columns::Names(vec!["nope".to_owned()]);
    let err = tablet
        .read(0, 3, Some(&bad), Isolation::HighWatermark, 1 << 20)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidProjection);
    assert!(err.to_string().contains("nope"), "{err}");
}

#[tokio::test]
async fn offset_for_timestamp_is_a_binary_search_over_batch_headers() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let clock = Arc::new(ManualClock::new(1_000));
    let fetches = Arc::new(AtomicU64::new(0));
    let tablet = open_with(
        &engine,
        TabletSettings::default(),
        clock.clone(),
        Some(CountingStream::layer(fetches.clone())),
    )
    .await;
    assert_eq!(tablet.offset_for_timestamp(0).await.unwrap(), 0);
    let batches: u64 = 100;
    for i in 0..batches {
        clock.set(1_000 + 10 * i as i64);
        // Two mink batches per request: the stream batch holds both.
        tablet.append(concat(&[plain(2), plain(1)])).await.unwrap();
    }
    clock.set(1_000_000);
    let bound = (batches as f64).log2().ceil() as u64 + 1;
    for i in 0..batches {
        for (ts, expect) in [
            (1_000 + 10 * i as i64, 3 * i),
            (1_000 + 10 * i as i64 - 5, 3 * i),
        ] {
            let before = fetches.load(Ordering::SeqCst);
            assert_eq!(
                tablet.offset_for_timestamp(ts).await.unwrap(),
                expect,
                "ts {ts}"
            );
            let cost = fetches.load(Ordering::SeqCst) - before;
            assert!(cost <= bound, "{cost} fetches for {batches} batches");
        }
    }
    // After the newest batch: the high watermark.
    assert_eq!(tablet.offset_for_timestamp(999_999).await.unwrap(), 300);
    let err = tablet.offset_for_timestamp(1_000_001).await.unwrap_err();
    assert!(matches!(
        err,
        TabletError::FutureTimestamp {
            timestamp: 1_000_001,
            now: 1_000_000
        }
    ));
    // After a trim, the answer is never below the log start.
    tablet.trim(31).await.unwrap();
    assert_eq!(tablet.offset_for_timestamp(0).await.unwrap(), 31);
}

#[tokio::test]
async fn a_retry_of_an_append_in_flight_waits_and_is_a_duplicate() {
    let faulty = Arc::new(FaultyStorage::new(
        Arc::new(ObjectStoreBackend::memory()),
        1,
    ));
    let world = World::with_storage(faulty.clone() as Arc<dyn ObjectStorage>);
    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    tablet.append(batch(1, 3, 0)).await.unwrap();
    faulty.set_put_delay(Duration::from_millis(200));
    let first = tokio::spawn({
        let tablet = tablet.clone();
        async move { tablet.append(batch(4, 3, 1)).await }
    });
    tokio::time::timeout(WAIT, async {
        while tablet.offsets().log_end < 5 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
    assert_eq!(
        tablet.high_watermark(),
        1,
        "the first attempt is still in flight"
    );
    let retry = tablet.append(batch(4, 3, 1)).await.unwrap();
    assert!(retry.is_duplicate());
    assert_eq!(retry.base_offset(), 1);
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.base_offset(), 1);
    assert_eq!(tablet.offsets().log_end, 5);
}

#[tokio::test]
async fn a_failed_append_leaves_no_window_entry() {
    let faulty = Arc::new(FaultyStorage::new(
        Arc::new(ObjectStoreBackend::memory()),
        1,
    ));
    let world = World::with_storage(faulty.clone() as Arc<dyn ObjectStorage>);
    let mut settings = manual();
    settings.wal = WalSettings {
        retry_initial_backoff: Duration::from_millis(1),
        retry_max_backoff: Duration::from_millis(2),
        retry_deadline: Duration::from_millis(20),
        ..WalSettings::default()
    };
    let engine = world.engine_with("n1", settings).await;
    let tablet = open(&engine, TabletSettings::default()).await;
    tablet.append(batch(1, 3, 0)).await.unwrap();
    faulty.set_failure_rate(StorageOp::Put, 1.0, FaultKind::Unavailable);
    let err = tablet.append(batch(1, 3, 1)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.kind().is_retryable());
    let writers = tablet.writers().await;
    let seqs: Vec<i32> = writers[0].batches.iter().map(|b| b.sequence).collect();
    assert_eq!(seqs, vec![0], "the failed batch is not in the window");
    assert_eq!(tablet.high_watermark(), 1);
}

#[tokio::test]
async fn a_crash_after_a_snapshot_keeps_deduplication_exact() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let settings = TabletSettings {
        snapshot_every_appends: 10,
        ..TabletSettings::default()
    };
    let tablet = open(&engine, settings.clone()).await;
    let mut sent = Vec::new();
    for round in 0..8 {
        for writer in 0..3i64 {
            let r = tablet.append(batch(2, writer, round)).await.unwrap();
            sent.push((writer, round, r.base_offset()));
        }
    }
    // Wait for the periodic snapshot (taken in the background) to land.
    let metadata = world.metadata().await;
    tokio::time::timeout(WAIT, async {
        loop {
            if let Some(s) = metadata
                .get_writer_snapshot("orders", "default", 0)
                .await
                .unwrap()
                && s.offset >= 40
            {
                return s.offset;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    // More appends after the snapshot, then a crash: no close, no shutdown.
    for round in 8..11 {
        for writer in 0..3i64 {
            let r = tablet.append(batch(2, writer, round)).await.unwrap();
            sent.push((writer, round, r.base_offset()));
        }
    }
    let end = tablet.offsets().log_end;
    engine.abort();
    drop((tablet, engine));

    let engine = world.engine("n1").await;
    let tablet = open(&engine, settings).await;
    assert_eq!(tablet.offsets().log_end, end);
    // Every retained batch (the last five of each writer) is recognised as a duplicate.
    for &(writer, round, base) in sent.iter().filter(|(_, round, _)| *round >= 6) {
        let r = tablet.append(batch(2, writer, round)).await.unwrap();
        assert!(r.is_duplicate(), "writer {writer} sequence {round}");
        assert_eq!(r.base_offset(), base);
    }
    assert_eq!(tablet.offsets().log_end, end, "nothing appended twice");
    for writer in 0..3i64 {
        let err = tablet.append(batch(2, writer, 5)).await.unwrap_err();
        assert!(
            matches!(err, TabletError::OutOfOrderSequence { expected: 11, .. }),
            "{err}"
        );
        assert!(
            !tablet
                .append(batch(2, writer, 11))
                .await
                .unwrap()
                .is_duplicate()
        );
    }
}

#[tokio::test]
async fn close_hands_the_tablet_to_another_node_with_its_writers() {
    let world = World::new();
    let one = world.engine("n1").await;
    let two = world.engine("n2").await;
    let tablet = open(&one, TabletSettings::default()).await;
    for seq in 0..3 {
        tablet.append(batch(1, 77, seq)).await.unwrap();
    }
    tablet.close().await.unwrap();
    assert!(tablet.is_closed());
    let err = tablet.append(batch(1, 77, 3)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    tablet.close().await.unwrap();
    let snapshot = world
        .metadata()
        .await
        .get_writer_snapshot("orders", "default", 0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(snapshot.offset, 3, "close snapshots at the end of the log");

    let moved = open(&two, TabletSettings::default()).await;
    assert_eq!(moved.stream_id(), tablet.stream_id());
    assert!(moved.leader_epoch() > tablet.leader_epoch());
    assert_eq!(moved.offsets().log_end, 3);
    assert!(moved.append(batch(1, 77, 2)).await.unwrap().is_duplicate());
    assert_eq!(
        moved.append(batch(1, 77, 3)).await.unwrap().base_offset(),
        3
    );
}

#[tokio::test]
async fn an_older_owner_is_fenced() {
    let world = World::new();
    let one = world.engine("n1").await;
    let two = world.engine("n2").await;
    let old = open(&one, TabletSettings::default()).await;
    old.append(plain(1)).await.unwrap();
    one.compact_now().await.unwrap();
    let new = open(&two, TabletSettings::default()).await;
    new.append(plain(1)).await.unwrap();
    // The old owner's appends may be acknowledged by its WAL but never committed; its close fails.
    let err = old.close().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Fenced, "{err}");
}

/// Large batches reach the WAL with their blocks' CRCs extended from the batches' own checked
/// CRCs (their bytes are not read again): a crash, whose recovery reads every block back and
/// checks its CRC, gives back exactly the rows appended, also from a retried request whose
/// duplicate was dropped from the payload.
#[tokio::test]
async fn large_batches_come_back_after_a_crash_with_block_crcs_from_their_own() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    let big = |first, sequence| Bytes::from(batch_from(first, 2000, 1, sequence));
    assert!(big(0, 0).len() >= mink_s3stream::format::object::COMBINE_FROM);
    tablet
        .append(concat(&[big(0, 0), batch(3, 2, 0), big(2000, 1)]))
        .await
        .unwrap();
    // A retry of the last batch with a new one: the duplicate is left out of the payload.
    let retried = tablet
        .append(concat(&[big(2000, 1), big(4000, 2)]))
        .await
        .unwrap();
    assert_eq!(
        retried
            .batches
            .iter()
            .map(|b| b.duplicate)
            .collect::<Vec<_>>(),
        [true, false]
    );
    tablet.append(batch(1, 2, 1)).await.unwrap();
    let end = tablet.offsets().log_end;
    assert_eq!(end, 2000 + 3 + 2000 + 2000 + 1);
    let before = read_all(&tablet, 0).await;
    engine.abort();
    drop((tablet, engine));

    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    assert_eq!(tablet.offsets().log_end, end);
    assert_eq!(read_all(&tablet, 0).await, before);
}

#[tokio::test]
async fn create_open_and_destroy() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let builder = || {
        Tablet::builder(id())
            .engine(engine.clone())
            .schemas(schemas())
    };
    let err = builder().open().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let tablet = builder().create().await.unwrap();
    tablet.append(batch(1, 1, 0)).await.unwrap();
    tablet.close().await.unwrap();
    let err = builder().create().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    let tablet = builder().open().await.unwrap();
    assert_eq!(tablet.offsets().log_end, 1);
    tablet.destroy().await.unwrap();
    assert_eq!(
        tablet.append(plain(1)).await.unwrap_err().kind(),
        ErrorKind::Closed
    );
    let metadata = world.metadata().await;
    assert!(
        metadata
            .get_writer_snapshot("orders", "default", 0)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        builder().open().await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // A new tablet under the same id starts a new, empty log.
    let again = builder().create().await.unwrap();
    assert_ne!(again.stream_id(), tablet.stream_id());
    assert_eq!(again.offsets().log_end, 0);
    let bad = Tablet::builder(mink_tablet::TabletId::new("a/b", "p", 0))
        .engine(engine.clone())
        .schemas(schemas())
        .open_or_create()
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("must not contain '/'"), "{bad}");
}

#[tokio::test]
async fn reads_after_compaction_come_from_objects() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    for i in 0..10 {
        tablet
            .append(concat(&[plain(1 + i % 3), plain(2)]))
            .await
            .unwrap();
    }
    let before = read_all(&tablet, 0).await;
    engine.compact_now().await.unwrap();
    let after = read_all(&tablet, 0).await;
    assert_eq!(before, after);
    assert_eq!(tablet.offset_for_timestamp(0).await.unwrap(), 0);
}

/// Metadata in which a rival registers a tablet between an open's read of the registry and its
/// registering transaction: the first transaction that requires one of `rivals`' keys to be
/// absent finds that key written first.
struct RivalKv {
    inner: Arc<dyn mink_metadata::MetaKv>,
    rivals: std::sync::Mutex<std::collections::HashMap<String, Bytes>>,
}

#[async_trait::async_trait]
impl mink_metadata::MetaKv for RivalKv {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    async fn get(&self, key: &str) -> mink_metadata::Result<Option<mink_metadata::KeyValue>> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &str, value: Bytes) -> mink_metadata::Result<u64> {
        self.inner.put(key, value).await
    }
    async fn delete(&self, key: &str) -> mink_metadata::Result<bool> {
        self.inner.delete(key).await
    }
    async fn txn(
        &self,
        txn: mink_metadata::Txn,
    ) -> mink_metadata::Result<mink_metadata::TxnOutcome> {
        let rival = {
            let mut rivals = self.rivals.lock().unwrap();
            txn.compares
                .iter()
                .filter(|c| c.version == 0)
                .find_map(|c| rivals.remove_entry(&c.key))
        };
        if let Some((key, value)) = rival {
            self.inner.put(&key, value).await?;
        }
        self.inner.txn(txn).await
    }
    async fn scan(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> mink_metadata::Result<mink_metadata::ScanPage> {
        self.inner.scan(prefix, start_after, limit).await
    }
    async fn watch_prefix(
        &self,
        prefix: &str,
    ) -> mink_metadata::Result<mink_metadata::WatchStream> {
        self.inner.watch_prefix(prefix).await
    }
}

/// An open that loses its creation race uses the winner's stream (or, creating, is refused) and
/// leaves nothing of its own behind: no stream record, no manifest.
#[tokio::test]
async fn an_open_that_loses_the_creation_race_uses_the_winners_stream_and_leaves_nothing() {
    let rivals = Arc::new(RivalKv {
        inner: Arc::new(mink_metadata::MemoryKv::new()),
        rivals: Default::default(),
    });
    let world = World {
        kv: rivals.clone(),
        storage: Arc::new(ObjectStoreBackend::memory()),
    };
    let metadata = world.metadata().await;
    let engine = world.engine("n1").await;
    let winner = metadata.create_stream().await.unwrap().id;
    let of = |bucket| mink_tablet::TabletId::new("orders", "default", bucket);
    for bucket in [0, 1] {
        rivals.rivals.lock().unwrap().insert(
            of(bucket).registry_key(),
            Bytes::from(mink_tablet::registry::encode(winner)),
        );
    }
    let builder = |bucket| {
        Tablet::builder(of(bucket))
            .engine(engine.clone())
            .schemas(schemas())
    };
    let err = builder(1).create().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    let tablet = builder(0).open_or_create().await.unwrap();
    assert_eq!(tablet.stream_id(), winner);
    assert!(
        rivals.rivals.lock().unwrap().is_empty(),
        "both races were run"
    );
    let streams = metadata.list_streams().await.unwrap();
    assert_eq!(streams.len(), 1, "{streams:?}");
    assert_eq!(
        (streams[0].id, streams[0].epoch, streams[0].owner.as_deref()),
        (winner, 1, Some("n1"))
    );
    assert!(world.storage.list("manifests/").await.unwrap().is_empty());
    tablet.append(batch(1, 1, 0)).await.unwrap();
    assert_eq!(tablet.offsets().log_end, 1);
}

/// A tablet of a table's incarnation opens only while the table record names that incarnation,
/// and keys its registry entry and writer snapshot apart from the other incarnations'.
#[tokio::test]
async fn tablets_of_a_table_incarnation_open_only_while_the_table_is_that_incarnation() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let metadata = world.metadata().await;
    let of = |incarnation: u64| {
        Tablet::builder(id().with_incarnation(incarnation))
            .engine(engine.clone())
            .schemas(schemas())
            .require_table()
    };
    // No table record: nothing is created.
    let err = of(3).open_or_create().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let registry = |incarnation: u64| id().with_incarnation(incarnation).registry_key();
    assert!(metadata.kv().get(&registry(3)).await.unwrap().is_none());

    let mut table = mink_metadata::TableRecord {
        name: id().table,
        schemas: [(1u16, "s".to_owned())].into(),
        bucket_count: 1,
        partitions: vec!["default".to_owned()],
        incarnation: 3,
        retention: None,
        kafka_key: None,
        stream: None,
        compression: None,
    };
    metadata.create_table(&table).await.unwrap();
    let three = of(3).open_or_create().await.unwrap();
    three.append(batch(2, 1, 0)).await.unwrap();
    three.snapshot().await.unwrap();
    // Another incarnation is refused while the record names 3.
    let err = of(4).open_or_create().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    three.close().await.unwrap();

    // The table dropped and created again as incarnation 4: 3 can no longer be opened (even
    // though its registry entry is still there), 4 starts empty on its own keys.
    assert!(metadata.drop_table(&table.name).await.unwrap().is_some());
    table.incarnation = 4;
    metadata.create_table(&table).await.unwrap();
    let err = of(3).open().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let four = of(4).open_or_create().await.unwrap();
    assert_eq!(four.offsets().log_end, 0);
    assert_ne!(four.stream_id(), three.stream_id());
    let snapshot = |incarnation: u64| {
        let metadata = metadata.clone();
        async move {
            metadata
                .get_writer_snapshot(
                    &id().with_incarnation(incarnation).table_segment(),
                    "default",
                    0,
                )
                .await
                .unwrap()
        }
    };
    assert!(snapshot(3).await.is_some());
    assert!(snapshot(4).await.is_none());

    // The dropped incarnation is destroyed without being opened; a second run finds nothing.
    let destroy = || {
        Tablet::builder(id().with_incarnation(3))
            .engine(engine.clone())
            .destroy()
    };
    assert!(destroy().await.unwrap());
    assert!(metadata.kv().get(&registry(3)).await.unwrap().is_none());
    assert!(snapshot(3).await.is_none());
    let stream = metadata
        .get_stream(three.stream_id())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stream.state, mink_metadata::StreamState::Deleted);
    assert!(!destroy().await.unwrap());
    // Incarnation 4 is untouched.
    four.append(plain(1)).await.unwrap();
    assert_eq!(four.offsets().high_watermark, 1);
}

/// A destroy stopped after deleting the stream (before the registry entry) is finished by the
/// next one.
#[tokio::test]
async fn destroying_a_half_destroyed_tablet_finishes_it() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let metadata = world.metadata().await;
    let tablet = open(&engine, TabletSettings::default()).await;
    tablet.append(batch(1, 1, 0)).await.unwrap();
    tablet.close().await.unwrap();
    // What a first run leaves when it stops after the stream is deleted.
    let stream = engine.open_stream(tablet.stream_id()).await.unwrap();
    stream.destroy().await.unwrap();
    assert!(
        metadata
            .kv()
            .get(&id().registry_key())
            .await
            .unwrap()
            .is_some()
    );
    let destroyed = Tablet::builder(id())
        .engine(engine.clone())
        .destroy()
        .await
        .unwrap();
    assert!(destroyed);
    assert!(
        metadata
            .kv()
            .get(&id().registry_key())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        metadata
            .get_writer_snapshot("orders", "default", 0)
            .await
            .unwrap()
            .is_none()
    );
}
