//! Shared pieces of the codec fuzz targets: the fixed schema, the harness, and seed batches.

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Int32Builder, ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, BinaryArray, Float64Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use mink_codec::header::{CRC_START, pos};
use mink_codec::{BatchMeta, BatchView, ChangeType, Encoder, Projection, batches};

/// The schema every fuzzed batch is decoded with: ints, float, bool, string, binary, list, nullable or not.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("n", DataType::Int32, true),
        Field::new("x", DataType::Float64, true),
        Field::new("flag", DataType::Boolean, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("blob", DataType::Binary, false),
        Field::new("tags", DataType::new_list(DataType::Utf8, true), true),
    ]))
}

/// A valid batch of `rows` rows of [`schema`].
pub fn sample(rows: usize) -> RecordBatch {
    let mut n = Int32Builder::new();
    let mut flag = BooleanBuilder::new();
    let mut name = StringBuilder::new();
    let mut tags = ListBuilder::new(StringBuilder::new());
    for i in 0..rows {
        if i % 3 == 0 { n.append_null() } else { n.append_value(i as i32 * 7) }
        flag.append_value(i % 2 == 0);
        if i % 4 == 1 { name.append_null() } else { name.append_value(format!("row-{i}")) }
        for t in 0..i % 3 {
            tags.values().append_value(format!("t{t}"));
        }
        tags.append(i % 5 != 4);
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values((0..rows as i64).map(|i| i * 1000))),
        Arc::new(n.finish()),
        Arc::new(Float64Array::from_iter((0..rows).map(|i| (i % 2 == 0).then_some(i as f64 / 3.0)))),
        Arc::new(flag.finish()),
        Arc::new(name.finish()),
        Arc::new(BinaryArray::from_iter_values((0..rows).map(|i| vec![i as u8; i % 5]))),
        Arc::new(tags.finish()),
    ];
    RecordBatch::try_new(schema(), columns).expect("sample batch matches its schema")
}

/// Encoded seed inputs: single batches of several shapes and a buffer of several batches.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut encoder = Encoder::new();
    let mut out = Vec::new();
    for rows in [0usize, 1, 3, 17] {
        let ct: Vec<ChangeType> = (0..rows).map(|i| ChangeType::ALL[i % 5]).collect();
        for change_types in [None, Some(&ct[..])] {
            let meta = BatchMeta::new(1).with_writer(5, rows as i32);
            out.push(encoder.encode(&sample(rows), change_types, meta).expect("seed encodes"));
        }
    }
    out.push(out.concat());
    out
}

/// Runs every reader entry point on `data`, then again with each framed batch's CRC recomputed so that
/// mutations reach the Arrow parser.
pub fn run(data: &[u8]) {
    let schema = schema();
    let mut projection = Projection::new(schema.clone(), &[6, 0, 4]).expect("valid projection");
    exercise(data, &schema, &mut projection);

    let mut sealed = data.to_vec();
    let spans: Vec<(usize, usize)> = batches(data).flatten().map(|v| (v.position(), v.len())).collect();
    for (at, len) in spans {
        let batch = &mut sealed[at..at + len];
        let crc = crc32c::crc32c(&batch[CRC_START..]);
        batch[pos::CRC..pos::CRC + 4].copy_from_slice(&crc.to_le_bytes());
    }
    exercise(&sealed, &schema, &mut projection);
}

fn exercise(data: &[u8], schema: &SchemaRef, projection: &mut Projection) {
    for view in batches(Bytes::copy_from_slice(data)).flatten() {
        let _ = view.check_header();
        let valid = view.validate().is_ok();
        match view.decode(schema) {
            Ok((rows, changes)) => {
                assert!(valid, "decode accepted a batch validate rejected");
                assert_eq!(rows.num_rows(), view.record_count() as usize);
                if let Some(c) = changes {
                    assert_eq!(c.len(), rows.num_rows());
                }
                // Touch every value.
                let _ = format!("{rows:?}");
                let projected = projection.project(&view).expect("a decodable batch projects");
                let pv = BatchView::new(projected.as_slice()).expect("projection output frames");
                let (p, _) = pv.decode(projection.projected_schema()).expect("projection output decodes");
                // Debug text, not ==: fuzzed floats may be NaN.
                let expected = rows.project(projection.indices()).expect("project");
                assert_eq!(format!("{p:?}"), format!("{expected:?}"));
            }
            Err(_) => {
                let _ = projection.project(&view);
            }
        }
    }
    if let Ok(view) = BatchView::new(data) {
        let _ = view.validate();
        let _ = view.decode(schema);
    }
}
