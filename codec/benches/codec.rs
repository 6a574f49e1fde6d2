//! Codec micro-benchmarks, each beside a baseline measured in the same run:
//! - `validate`: the append path's header check (magic, counts, CRC32C) and the full structural
//!   validation of a 1 MiB batch, beside a memcpy of the same 1 MiB.
//! - `projection`: on a 10-column table (an int64 and nine ~110-byte strings, as end-to-end item 5),
//!   rewriting a 1 MiB batch to 1 column (the buffer copy), and that plus decoding the one column,
//!   beside decoding all 10 columns and beside the header check alone (CRC32C over the whole batch,
//!   which every projection of a stored batch pays). Throughput is rows, so the ratio of two lines
//!   is the ratio of rows/s.

use std::hint::black_box;
use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mink_codec::{BatchMeta, BatchView, ChangeType, Projection, encode_batch};

/// A 10-column batch of `rows` rows: ints, floats, bools, strings, a list.
fn ten_columns(rows: usize) -> RecordBatch {
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for i in 0..4 {
        fields.push(Field::new(format!("i{i}"), DataType::Int64, false));
        columns.push(Arc::new(Int64Array::from_iter_values(
            (0..rows as i64).map(|v| v * (i + 1)),
        )));
    }
    for i in 0..2 {
        fields.push(Field::new(format!("f{i}"), DataType::Float64, true));
        columns.push(Arc::new(Float64Array::from_iter(
            (0..rows).map(|v| (v % 7 != 0).then_some(v as f64 / (i + 2) as f64)),
        )));
    }
    fields.push(Field::new("n", DataType::Int32, false));
    columns.push(Arc::new(Int32Array::from_iter_values(0..rows as i32)));
    fields.push(Field::new("b", DataType::Boolean, false));
    columns.push(Arc::new(BooleanArray::from_iter(
        (0..rows).map(|v| Some(v % 3 == 0)),
    )));
    let mut s = StringBuilder::new();
    let mut l = ListBuilder::new(StringBuilder::new());
    for v in 0..rows {
        s.append_value(format!("user-{v:08}"));
        l.values().append_value("tag");
        l.append(true);
    }
    fields.push(Field::new("s", DataType::Utf8, false));
    columns.push(Arc::new(s.finish()));
    fields.push(Field::new(
        "l",
        DataType::new_list(DataType::Utf8, true),
        false,
    ));
    columns.push(Arc::new(l.finish()));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("bench batch")
}

/// The end-to-end bench's wide table (item 5): `c0` an int64, `c1`..`c9` strings of about 110 bytes.
fn wide_strings(rows: usize) -> RecordBatch {
    let mut fields = vec![Field::new("c0", DataType::Int64, false)];
    let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from_iter_values(0..rows as i64))];
    for c in 1..10 {
        fields.push(Field::new(format!("c{c}"), DataType::Utf8, true));
        columns.push(Arc::new(StringArray::from_iter_values(
            (0..rows).map(|i| format!("{c}-{i:06}-{}", "v".repeat(100))),
        )));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("bench batch")
}

/// A batch of about `target` bytes with change types.
fn encoded(target: usize) -> (RecordBatch, Vec<u8>) {
    let probe = 1000;
    let size = encode_batch(&ten_columns(probe), None, BatchMeta::new(1))
        .expect("encode")
        .len();
    let rows = target * probe / size;
    let rb = ten_columns(rows);
    let ct = vec![ChangeType::Insert; rows];
    let bytes = encode_batch(&rb, Some(&ct), BatchMeta::new(1)).expect("encode");
    (rb, bytes)
}

fn validate(c: &mut Criterion) {
    let (_, bytes) = encoded(1 << 20);
    let bytes = Bytes::from(bytes);
    let mut group = c.benchmark_group("validate");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    let mut dst = vec![0u8; bytes.len()];
    group.bench_function("memcpy_1MiB", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&bytes));
            black_box(&dst);
        })
    });
    group.bench_function("check_header_1MiB", |b| {
        b.iter(|| {
            let view = BatchView::new(black_box(bytes.as_ref())).expect("frames");
            view.check_header().expect("valid");
        })
    });
    group.bench_function("validate_1MiB", |b| {
        b.iter(|| {
            let view = BatchView::new(black_box(bytes.as_ref())).expect("frames");
            view.validate().expect("valid");
        })
    });
    group.finish();
}

fn projection(c: &mut Criterion) {
    let rows = (1 << 20) / 1024;
    let rb = wide_strings(rows);
    let ct = vec![ChangeType::Insert; rows];
    let bytes = Bytes::from(encode_batch(&rb, Some(&ct), BatchMeta::new(1)).expect("encode"));
    let schema = rb.schema();
    let mut group = c.benchmark_group("projection");
    group.throughput(Throughput::Elements(rows as u64));
    group.bench_function("decode_all_10_columns", |b| {
        b.iter(|| {
            let view = BatchView::new(black_box(bytes.clone())).expect("frames");
            black_box(view.decode(&schema).expect("decodes"));
        })
    });
    // The floor of any projection that checks the source's CRC32C over the whole batch.
    group.bench_function("check_header_of_10_columns", |b| {
        b.iter(|| {
            let view = BatchView::new(black_box(bytes.clone())).expect("frames");
            view.check_header().expect("valid");
        })
    });
    let mut one = Projection::by_names(schema.clone(), &["c0"]).expect("projection");
    group.bench_function("project_1_of_10_columns", |b| {
        b.iter(|| {
            let view = BatchView::new(black_box(bytes.clone())).expect("frames");
            black_box(one.project(&view).expect("projects"));
        })
    });
    // As a log's reads project: the stored batches' CRC was checked by the storage layer.
    let mut trusting = Projection::by_names(schema.clone(), &["c0"])
        .expect("projection")
        .trusting_crc();
    group.bench_function("project_1_of_10_columns_trusting_crc", |b| {
        b.iter(|| {
            let view = BatchView::new(black_box(bytes.clone())).expect("frames");
            black_box(trusting.project(&view).expect("projects"));
        })
    });
    let projected = one.projected_schema().clone();
    group.bench_function("project_and_decode_1_of_10_columns", |b| {
        b.iter(|| {
            let view = BatchView::new(black_box(bytes.clone())).expect("frames");
            let out = Bytes::from(one.project(&view).expect("projects"));
            let view = BatchView::new(out).expect("frames");
            black_box(view.decode(&projected).expect("decodes"));
        })
    });
    let mut string = Projection::by_names(schema.clone(), &["c1"]).expect("projection");
    group.bench_function("project_1_string_of_10_columns", |b| {
        b.iter(|| {
            let view = BatchView::new(black_box(bytes.clone())).expect("frames");
            black_box(string.project(&view).expect("projects"));
        })
    });
    group.finish();
}

criterion_group!(benches, validate, projection);
criterion_main!(benches);
