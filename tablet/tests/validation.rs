//! Hostile appends: every batch is decoded against its schema before it is acknowledged, rows
//! are limited per batch and per request, and the writers a tablet tracks are capped. Each refusal
//! names its error and leaves the log exactly as it was: offsets, high watermark and the rows
//! already stored, which still read back.

mod common;

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use common::*;
use mink_codec::{BatchMeta, BatchView, encode_batch};
use mink_tablet::{ErrorKind, Isolation, ManualClock, Tablet, TabletError, TabletSettings};

/// Rewrites the CRC after a change, as a client forging a batch would.
fn reseal(mut bytes: Vec<u8>) -> Bytes {
    let crc = crc32c::crc32c(&bytes[29..]);
    bytes[25..29].copy_from_slice(&crc.to_le_bytes());
    Bytes::from(bytes)
}

/// A valid batch of two rows with its header's row count set to `count` (and
/// `last_offset_delta` to match), CRC resealed.
fn forged_count(count: i32) -> Bytes {
    let mut bytes = plain(2).to_vec();
    bytes[32..36].copy_from_slice(&(count - 1).to_le_bytes());
    bytes[48..52].copy_from_slice(&count.to_le_bytes());
    reseal(bytes)
}

/// The 52-byte header of a valid batch of `rows` rows with nothing after it.
fn header_only(rows: usize) -> Bytes {
    let mut bytes = plain(rows)[..mink_codec::HEADER_LEN].to_vec();
    bytes[8..12].copy_from_slice(&(mink_codec::HEADER_LEN as i32 - 12).to_le_bytes());
    reseal(bytes)
}

/// A batch of `rows` of another schema, labelled with the tablet's schema id.
fn other_schema(rows: usize) -> Bytes {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Float64, false)]));
    let values = Float64Array::from_iter_values((0..rows).map(|v| v as f64));
    let rows = RecordBatch::try_new(schema, vec![Arc::new(values)]).unwrap();
    Bytes::from(encode_batch(&rows, None, BatchMeta::new(SCHEMA_ID)).unwrap())
}

/// A valid batch whose Arrow message is replaced by pseudo-random bytes of the same length.
fn garbage_body() -> Bytes {
    let mut bytes = plain(3).to_vec();
    let mut x: u32 = 0x9e37_79b9;
    for b in &mut bytes[mink_codec::HEADER_LEN..] {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    reseal(bytes)
}

/// The ids of every row below the high watermark, decoded as a reader would.
async fn stored_ids(tablet: &Tablet) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut cursor = tablet.offsets().log_start;
    while cursor < tablet.high_watermark() {
        let got = tablet
            .read(cursor, u64::MAX, None, Isolation::HighWatermark, 1 << 20)
            .await
            .unwrap();
        for b in &got.batches {
            let (rows, _) = BatchView::new(b.bytes.clone())
                .unwrap()
                .decode(&schema())
                .unwrap();
            let column = rows
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            ids.extend(column.values().iter().copied());
        }
        cursor = got.next_offset;
    }
    ids
}

/// Asserts that `request` is refused with `kind` and a message containing `needle`, and that
/// nothing moved.
async fn refused(tablet: &Tablet, request: Bytes, kind: ErrorKind, needle: &str) -> TabletError {
    let before = tablet.offsets();
    let ids = stored_ids(tablet).await;
    let error = tablet.append(request).await.unwrap_err();
    assert_eq!(error.kind(), kind, "{error}");
    assert!(
        error.to_string().contains(needle),
        "`{needle}` not in: {error}"
    );
    assert_eq!(tablet.offsets(), before, "{error}: the offsets moved");
    assert_eq!(
        stored_ids(tablet).await,
        ids,
        "{error}: the stored rows changed"
    );
    error
}

#[tokio::test]
async fn batches_that_would_not_decode_are_refused_and_change_nothing() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let settings = TabletSettings {
        // High enough that the forged count reaches the decoder.
        max_rows_per_batch: i32::MAX as u64,
        max_rows_per_request: i32::MAX as u64,
        ..TabletSettings::default()
    };
    let tablet = open(&engine, settings).await;
    tablet
        .append(Bytes::from(batch_from(10, 3, -1, -1)))
        .await
        .unwrap();
    assert_eq!(stored_ids(&tablet).await, vec![10, 11, 12]);

    let cases: Vec<(&str, Bytes, &str)> = vec![
        ("header only, one row", header_only(1), "arrow.prefix"),
        (
            "header only, 2^31-1 rows",
            {
                let mut b = header_only(1).to_vec();
                b[32..36].copy_from_slice(&(i32::MAX - 1).to_le_bytes());
                b[48..52].copy_from_slice(&i32::MAX.to_le_bytes());
                reseal(b)
            },
            "arrow.prefix",
        ),
        (
            "forged count 2^31-1",
            forged_count(i32::MAX),
            "arrow.length",
        ),
        ("forged count 1000", forged_count(1000), "arrow.length"),
        ("another schema's body", other_schema(3), "batch 0"),
        ("garbage body", garbage_body(), "batch 0"),
    ];
    for (name, request, needle) in cases {
        let error = refused(&tablet, request, ErrorKind::InvalidBatch, needle).await;
        assert!(
            matches!(error, TabletError::InvalidBatch { index: 0, .. }),
            "{name}: {error}"
        );
    }
    // A bad batch after a good one: the index names it, and the good one is not appended either.
    let error = refused(
        &tablet,
        concat(&[plain(2), garbage_body()]),
        ErrorKind::InvalidBatch,
        "batch 1",
    )
    .await;
    assert!(matches!(error, TabletError::InvalidBatch { index: 1, .. }));
    // The tablet still takes good batches, at the next offset.
    let next = tablet
        .append(Bytes::from(batch_from(13, 2, -1, -1)))
        .await
        .unwrap();
    assert_eq!(next.base_offset(), 3);
    assert_eq!(stored_ids(&tablet).await, vec![10, 11, 12, 13, 14]);
}

#[tokio::test]
async fn an_idempotent_batch_refused_by_the_decoder_consumes_no_sequence() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    tablet.append(batch(1, 7, 0)).await.unwrap();
    let mut bad = batch(1, 7, 1).to_vec();
    let last = bad.len() - 8;
    bad.truncate(last);
    bad[8..12].copy_from_slice(&(last as i32 - 12).to_le_bytes());
    refused(&tablet, reseal(bad), ErrorKind::InvalidBatch, "batch 0").await;
    let writers = tablet.writers().await;
    assert_eq!(writers[0].next_sequence(), Some(1));
    assert!(!tablet.append(batch(1, 7, 1)).await.unwrap().is_duplicate());
}

#[tokio::test]
async fn rows_over_each_limit_are_refused_on_the_header_count() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let settings = TabletSettings {
        max_rows_per_batch: 5,
        max_rows_per_request: 8,
        ..TabletSettings::default()
    };
    let tablet = open(&engine, settings).await;
    tablet.append(concat(&[plain(5), plain(3)])).await.unwrap();

    let error = refused(
        &tablet,
        plain(6),
        ErrorKind::LimitExceeded,
        "max_rows_per_batch",
    )
    .await;
    assert!(matches!(
        error,
        TabletError::TooManyRows {
            index: 0,
            setting: "max_rows_per_batch",
            rows: 6,
            limit: 5
        }
    ));
    let error = refused(
        &tablet,
        concat(&[plain(5), plain(4)]),
        ErrorKind::LimitExceeded,
        "max_rows_per_request",
    )
    .await;
    assert!(matches!(
        error,
        TabletError::TooManyRows {
            index: 1,
            setting: "max_rows_per_request",
            rows: 9,
            limit: 8
        }
    ));
    // A forged count is refused on the header alone: the body is never looked at (here it holds
    // two rows and a CRC that no longer matches).
    let mut forged = plain(2).to_vec();
    forged[48..52].copy_from_slice(&i32::MAX.to_le_bytes());
    let error = refused(
        &tablet,
        Bytes::from(forged),
        ErrorKind::LimitExceeded,
        "2147483647",
    )
    .await;
    assert!(matches!(error, TabletError::TooManyRows { rows, .. } if rows == i32::MAX as u64));
    assert_eq!(tablet.offsets().log_end, 8);
}

#[tokio::test]
async fn at_the_writer_cap_new_writers_are_refused_and_known_ones_keep_deduplication() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let clock = Arc::new(ManualClock::new(1_000_000));
    let settings = TabletSettings {
        max_writers: 2,
        writer_ttl: Duration::from_secs(60),
        ..TabletSettings::default()
    };
    let tablet = open_with(&engine, settings, clock.clone(), None).await;
    tablet.append(batch(1, 1, 0)).await.unwrap();
    tablet.append(batch(1, 2, 0)).await.unwrap();

    let error = refused(
        &tablet,
        batch(1, 3, 0),
        ErrorKind::TooManyWriters,
        "writer 3",
    )
    .await;
    assert!(matches!(
        error,
        TabletError::TooManyWriters {
            index: 0,
            writer_id: 3,
            limit: 2
        }
    ));
    // A request that also holds a known writer's batch is refused whole: that writer's
    // sequence is not consumed.
    let error = refused(
        &tablet,
        concat(&[batch(1, 1, 1), batch(1, 4, 0)]),
        ErrorKind::TooManyWriters,
        "writer 4",
    )
    .await;
    assert!(matches!(
        error,
        TabletError::TooManyWriters { index: 1, .. }
    ));
    // Known writers go on, duplicates are still recognised, plain batches are not writers.
    assert!(!tablet.append(batch(1, 1, 1)).await.unwrap().is_duplicate());
    let retry = tablet.append(batch(1, 1, 1)).await.unwrap();
    assert!(retry.is_duplicate());
    assert_eq!(retry.base_offset(), 2);
    assert!(!tablet.append(batch(1, 2, 1)).await.unwrap().is_duplicate());
    tablet.append(plain(1)).await.unwrap();
    assert_eq!(tablet.writers().await.len(), 2);

    // Writer 2 goes idle past the TTL; writer 1 does not: writer 3 takes 2's place.
    clock.advance(30_000);
    tablet.append(batch(1, 1, 2)).await.unwrap();
    refused(
        &tablet,
        batch(1, 3, 0),
        ErrorKind::TooManyWriters,
        "writer 3",
    )
    .await;
    clock.advance(30_001);
    assert!(!tablet.append(batch(1, 3, 0)).await.unwrap().is_duplicate());
    let writers: Vec<i64> = tablet.writers().await.iter().map(|w| w.writer_id).collect();
    assert_eq!(writers, vec![1, 3]);
    // Writer 1 kept its window throughout.
    assert!(tablet.append(batch(1, 1, 2)).await.unwrap().is_duplicate());
    // Writer 2 is new again now, and there is no room for it.
    refused(
        &tablet,
        batch(1, 2, 2),
        ErrorKind::TooManyWriters,
        "writer 2",
    )
    .await;
}

#[tokio::test]
async fn an_idle_writer_of_the_request_itself_counts_as_new_when_room_is_made() {
    let world = World::new();
    let engine = world.engine("n1").await;
    let clock = Arc::new(ManualClock::new(1_000_000));
    let settings = TabletSettings {
        max_writers: 1,
        writer_ttl: Duration::from_secs(60),
        ..TabletSettings::default()
    };
    let tablet = open_with(&engine, settings, clock.clone(), None).await;
    tablet.append(batch(1, 1, 0)).await.unwrap();
    clock.advance(60_001);
    // Writer 1 is idle: forgetting it makes room for one writer, not for both.
    refused(
        &tablet,
        concat(&[batch(1, 1, 9), batch(1, 2, 0)]),
        ErrorKind::TooManyWriters,
        "writer 2",
    )
    .await;
    assert!(!tablet.append(batch(1, 2, 0)).await.unwrap().is_duplicate());
    assert_eq!(tablet.writers().await.len(), 1);
}

#[tokio::test]
async fn stored_batches_keep_their_strings() {
    // Full validation reads every value: a batch whose utf8 column is not UTF-8 is refused.
    let world = World::new();
    let engine = world.engine("n1").await;
    let tablet = open(&engine, TabletSettings::default()).await;
    let names = StringArray::from(vec!["row-aaaa"]);
    let rows = RecordBatch::try_new(
        schema(),
        vec![Arc::new(Int64Array::from(vec![1])), Arc::new(names)],
    )
    .unwrap();
    let mut bytes = encode_batch(&rows, None, BatchMeta::new(SCHEMA_ID)).unwrap();
    let at = bytes
        .windows(8)
        .position(|w| w == b"row-aaaa")
        .expect("the value is in the body");
    bytes[at + 4] = 0xff;
    let error = refused(&tablet, reseal(bytes), ErrorKind::InvalidBatch, "batch 0").await;
    assert!(error.to_string().to_lowercase().contains("utf"), "{error}");
}
