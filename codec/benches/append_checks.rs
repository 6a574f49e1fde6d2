//! The append path's checks of one batch, header only against full validation, on batches of
//! the shapes appends carry; the report is their ratio in the same run.
//!
//! - `check_header`: what the tablet checked before full validation: magic, CRC32C, counts.
//! - `decode`: what it runs now (`BatchView::decode` against the schema, which includes the
//!   header checks): the Arrow message verified and every array built and validated, UTF-8
//!   included.
//!
//! Shapes: 100 rows of an int64 and a 1 KiB utf8 (about 100 KiB), 1000 small rows of an int64 and
//! a 12-byte utf8 (about 20 KiB), and 10 rows of the same (the tablet's append benchmark batch).
//!
//! Run: `cargo bench -p mink-codec --bench append_checks` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mink_codec::{BatchMeta, BatchView, encode_batch};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("payload", DataType::Utf8, true),
    ]))
}

/// `rows` rows whose utf8 values are `width` bytes each, encoded as a client sends them.
fn batch(rows: usize, width: usize) -> Bytes {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows as i64));
    let payloads: ArrayRef = Arc::new(StringArray::from_iter_values((0..rows).map(|i| {
        let mut s = format!("row-{i:08}");
        while s.len() < width {
            s.push((b'a' + (s.len() % 26) as u8) as char);
        }
        s.truncate(width);
        s
    })));
    let rows = RecordBatch::try_new(schema(), vec![ids, payloads]).expect("bench rows");
    Bytes::from(encode_batch(&rows, None, BatchMeta::new(1).with_writer(7, 0)).expect("encodable"))
}

fn append_checks(c: &mut Criterion) {
    let schema = schema();
    for (name, rows, width) in [
        ("100x1KiB", 100, 1024),
        ("1000x12B", 1000, 12),
        ("10x12B", 10, 12),
    ] {
        let bytes = batch(rows, width);
        let mut group = c.benchmark_group(format!("append_checks/{name}"));
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function("check_header", |b| {
            b.iter(|| {
                let view = BatchView::new(black_box(bytes.clone())).expect("frames");
                view.check_header().expect("valid");
            })
        });
        group.bench_function("decode", |b| {
            b.iter(|| {
                let view = BatchView::new(black_box(bytes.clone())).expect("frames");
                let (rows, _) = view.decode(&schema).expect("decodes");
                black_box(rows.num_rows());
            })
        });
        group.finish();
    }
}

criterion_group!(benches, append_checks);
criterion_main!(benches);
