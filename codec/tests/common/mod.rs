//! Shared test helpers: random schemas and batches.

#![allow(dead_code)]

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float32Builder, Float64Builder, Int8Builder, Int16Builder,
    Int32Builder, Int64Builder, ListBuilder, StringBuilder, UInt8Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use mink_codec::ChangeType;
use proptest::prelude::*;

/// Column kinds the generators produce.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt64,
    Float32,
    Float64,
    Bool,
    Utf8,
    Binary,
    ListInt32,
    ListUtf8,
}

pub(crate) fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Int8),
        Just(Kind::Int16),
        Just(Kind::Int32),
        Just(Kind::Int64),
        Just(Kind::UInt8),
        Just(Kind::UInt64),
        Just(Kind::Float32),
        Just(Kind::Float64),
        Just(Kind::Bool),
        Just(Kind::Utf8),
        Just(Kind::Binary),
        Just(Kind::ListInt32),
        Just(Kind::ListUtf8),
    ]
}

fn data_type(kind: Kind) -> DataType {
    match kind {
        Kind::Int8 => DataType::Int8,
        Kind::Int16 => DataType::Int16,
        Kind::Int32 => DataType::Int32,
        Kind::Int64 => DataType::Int64,
        Kind::UInt8 => DataType::UInt8,
        Kind::UInt64 => DataType::UInt64,
        Kind::Float32 => DataType::Float32,
        Kind::Float64 => DataType::Float64,
        Kind::Bool => DataType::Boolean,
        Kind::Utf8 => DataType::Utf8,
        Kind::Binary => DataType::Binary,
        Kind::ListInt32 => DataType::new_list(DataType::Int32, true),
        Kind::ListUtf8 => DataType::new_list(DataType::Utf8, true),
    }
}

/// A deterministic pseudo-random value stream, so a (seed, rows) pair fully determines a column.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let x = self.0;
        (x ^ (x >> 33)).wrapping_mul(0xff51afd7ed558ccd)
    }
    fn null(&mut self, nullable: bool) -> bool {
        nullable && self.next().is_multiple_of(5)
    }
}

fn column(kind: Kind, nullable: bool, rows: usize, seed: u64) -> ArrayRef {
    let mut r = Rng(seed);
    macro_rules! prim {
        ($b:ty, $conv:expr) => {{
            let mut b = <$b>::new();
            for _ in 0..rows {
                if r.null(nullable) {
                    b.append_null();
                } else {
                    let v = r.next();
                    b.append_value($conv(v));
                }
            }
            Arc::new(b.finish()) as ArrayRef
        }};
    }
    match kind {
        Kind::Int8 => prim!(Int8Builder, |v: u64| v as i8),
        Kind::Int16 => prim!(Int16Builder, |v: u64| v as i16),
        Kind::Int32 => prim!(Int32Builder, |v: u64| v as i32),
        Kind::Int64 => prim!(Int64Builder, |v: u64| v as i64),
        Kind::UInt8 => prim!(UInt8Builder, |v: u64| v as u8),
        Kind::UInt64 => prim!(UInt64Builder, |v: u64| v),
        Kind::Float32 => prim!(Float32Builder, |v: u64| (v % 100_000) as f32 / 7.0),
        Kind::Float64 => prim!(Float64Builder, |v: u64| (v % 1_000_000) as f64 / 3.0),
        Kind::Bool => prim!(BooleanBuilder, |v: u64| v.is_multiple_of(2)),
        Kind::Utf8 => prim!(StringBuilder, |v: u64| format!("s{}", v % 1000)
            .repeat((v % 4) as usize)),
        Kind::Binary => prim!(BinaryBuilder, |v: u64| vec![
            (v % 251) as u8;
            (v % 9) as usize
        ]),
        Kind::ListInt32 => {
            let mut b = ListBuilder::new(Int32Builder::new());
            for _ in 0..rows {
                if r.null(nullable) {
                    b.append_null();
                } else {
                    let n = r.next() % 4;
                    for _ in 0..n {
                        let v = r.next();
                        if v.is_multiple_of(7) {
                            b.values().append_null();
                        } else {
                            b.values().append_value(v as i32);
                        }
                    }
                    b.append(true);
                }
            }
            Arc::new(b.finish())
        }
        Kind::ListUtf8 => {
            let mut b = ListBuilder::new(StringBuilder::new());
            for _ in 0..rows {
                if r.null(nullable) {
                    b.append_null();
                } else {
                    let n = r.next() % 3;
                    for _ in 0..n {
                        let v = r.next();
                        b.values().append_value(format!("v{v}"));
                    }
                    b.append(true);
                }
            }
            Arc::new(b.finish())
        }
    }
}

/// Builds a record batch of `rows` rows over columns (kind, nullable).
pub(crate) fn make_batch(columns: &[(Kind, bool)], rows: usize, seed: u64) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .enumerate()
        .map(|(i, (k, n))| Field::new(format!("c{i}"), data_type(*k), *n))
        .collect();
    let schema: SchemaRef = Arc::new(Schema::new(fields));
    let arrays: Vec<ArrayRef> = columns
        .iter()
        .enumerate()
        .map(|(i, (k, n))| column(*k, *n, rows, seed.wrapping_add(i as u64 * 7919)))
        .collect();
    RecordBatch::try_new(schema, arrays).expect("valid batch")
}

/// A random batch: 1..6 columns, 0..40 rows.
pub(crate) fn arb_batch() -> impl Strategy<Value = RecordBatch> {
    (
        prop::collection::vec((kind(), any::<bool>()), 1..6),
        prop_oneof![Just(0usize), 0usize..40],
        any::<u64>(),
    )
        .prop_map(|(cols, rows, seed)| make_batch(&cols, rows, seed))
}

pub(crate) fn change_type() -> impl Strategy<Value = ChangeType> {
    prop::sample::select(ChangeType::ALL.to_vec())
}

/// A fixed schema used by error tests and the mutation fuzzer: ints, float, bool, string, binary, list,
/// nullable and not. Same column types as the `decode` fuzz target's schema, so its crash inputs replay
/// here.
pub(crate) fn fixed_columns() -> Vec<(Kind, bool)> {
    vec![
        (Kind::Int64, false),
        (Kind::Int32, true),
        (Kind::Float64, true),
        (Kind::Bool, false),
        (Kind::Utf8, true),
        (Kind::Binary, false),
        (Kind::ListUtf8, true),
    ]
}
