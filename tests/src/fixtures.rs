//! Format fixtures: files written once by today's formats into `tests/fixtures/v1/` (by the
//! `write_fixtures` binary) and read back by `tests/tests/formats.rs` on every later build, so a
//! change that stops a build reading what an earlier one wrote fails a test. Each format is
//! versioned by its magic; a new version writes new fixtures beside these, never over them.
//!
//! - `batch.bin`: one mink batch ([`fixture_rows`], writer 7, sequence 3, schema id 1).
//! - `wal.bin`: one WAL object of [`wal_records`] (two streams, two epochs, small blocks).
//! - `object.bin`: one committed object of [`object_batches`] (two streams).
//! - `clean/`: a node's data folder (objects and `meta.redb`) after a graceful shutdown, holding
//!   the table [`TABLE`] as [`NodeHistory`] wrote it: committed objects, writer snapshots.
//! - `crashed/`: the same history plus [`NodeHistory::after_crash`], stopped as a crash would
//!   (WAL objects the next start replays).
//!
//! The encoders must still produce `batch.bin`, `wal.bin` and `object.bin` byte for byte: a
//! silent change of a format is caught even before a reader breaks.

use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use mink_codec::BatchMeta;
use mink_s3stream::StreamBatch;
use mink_s3stream::format::wal::WalRecord;
use serde_json::{Value, json};

/// The fixtures' folder.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join("v1")
}

/// The table of the node fixtures.
pub const TABLE: &str = "fixture";

/// The metadata snapshot fixture (of the `clean` history's metadata).
pub const SNAPSHOT: &str = "snapshot.bin";

/// When the snapshot fixture says it was taken (2026-01-01T00:00:00Z).
pub const SNAPSHOT_TAKEN_AT_MS: i64 = 1_767_225_600_000;

/// The stream manifest fixture.
pub const MANIFEST: &str = "manifest.bin";

/// What the stream manifest fixture holds: stream 7, labelled as bucket 3 of [`TABLE`]'s
/// incarnation 1 (a tablet's label).
pub fn manifest() -> mink_s3stream::format::manifest::StreamManifest {
    let tablet = mink_tablet::TabletId::new(TABLE, "default", 3).with_incarnation(1);
    mink_s3stream::format::manifest::StreamManifest {
        stream_id: 7,
        label: tablet.label(),
    }
}

/// The create request of [`TABLE`].
pub fn table_request() -> Value {
    json!({"name": TABLE, "buckets": 2, "schema": {"fields": [
        {"name": "id", "type": "int64", "nullable": false},
        {"name": "msg", "type": "utf8"},
        {"name": "score", "type": "float64"},
        {"name": "ok", "type": "bool"}
    ]}})
}

/// The Arrow schema of [`TABLE`].
pub fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, true),
        Field::new("score", DataType::Float64, true),
        Field::new("ok", DataType::Boolean, true),
    ]))
}

/// Row `i` as NDJSON (every fourth `msg` null, so nulls are in the fixtures).
pub fn row(i: i64) -> Value {
    let mut row = json!({"id": i, "score": i as f64 / 4.0, "ok": i % 3 == 0});
    if i % 4 != 1 {
        row["msg"] = json!(format!("row {i}"));
    }
    row
}

/// Rows `ids` as an Arrow batch.
pub fn fixture_rows(ids: std::ops::Range<i64>) -> RecordBatch {
    let msgs: Vec<Option<String>> = ids
        .clone()
        .map(|i| (i % 4 != 1).then(|| format!("row {i}")))
        .collect();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(ids.clone())) as ArrayRef,
            Arc::new(StringArray::from(msgs)),
            Arc::new(Float64Array::from_iter_values(
                ids.clone().map(|i| i as f64 / 4.0),
            )),
            Arc::new(BooleanArray::from_iter(ids.map(|i| Some(i % 3 == 0)))),
        ],
    )
    .expect("fixture rows")
}

/// The batch of `batch.bin`: rows 0..5, writer 7, sequence 3, schema id 1.
pub fn fixture_batch() -> Vec<u8> {
    mink_codec::encode_batch(
        &fixture_rows(0..5),
        None,
        BatchMeta::new(1).with_writer(7, 3),
    )
    .expect("fixture batch")
}

fn payload(seed: u8, len: usize) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|i| seed.wrapping_add(i as u8))
            .collect::<Vec<_>>(),
    )
}

/// The records of `wal.bin`: stream 3 at epoch 1 then 2, stream 9 at epoch 4.
pub fn wal_records() -> Vec<WalRecord> {
    let record = |stream_id, epoch, base_offset, count, seed| WalRecord {
        stream_id,
        epoch,
        base_offset,
        count,
        payload: payload(seed, 40 + usize::from(seed)),
        payload_crc: None,
    };
    vec![
        record(3, 1, 0, 2, 1),
        record(3, 1, 2, 5, 2),
        record(9, 4, 100, 1, 3),
        record(3, 2, 7, 3, 4),
    ]
}

/// The block size `wal.bin` and `object.bin` were cut with (small: several blocks).
pub const BLOCK_BYTES: usize = 64;

/// The batches of `object.bin`, by stream: 3 then 9.
pub fn object_batches() -> Vec<(u64, Vec<StreamBatch>)> {
    let batch = |base_offset, count, seed| StreamBatch {
        base_offset,
        count,
        payload: payload(seed, 30),
    };
    vec![
        (3, vec![batch(0, 4, 10), batch(4, 1, 11), batch(5, 2, 12)]),
        (9, vec![batch(50, 3, 13)]),
    ]
}

/// What the node fixtures hold, as the generator wrote it and the test reads it back.
#[derive(Debug, Clone, Copy)]
pub struct NodeHistory;

impl NodeHistory {
    /// Bucket 0's appends by one idempotent writer (sequences 0, 1, 2): row ids of each.
    pub const WRITER_BATCHES: [std::ops::Range<i64>; 3] = [0..4, 4..6, 6..10];
    /// Bucket 1's appends without a writer: row ids of each.
    pub const PLAIN_BATCHES: [std::ops::Range<i64>; 2] = [100..103, 103..106];
    /// Bucket 1 is trimmed to this offset.
    pub const TRIM: u64 = 2;
    /// Appended to bucket 1 after the shutdown's history, before the crash (no writer).
    pub fn after_crash() -> std::ops::Range<i64> {
        106..108
    }
}
