//! Projection by buffer copy over every column type the codec accepts: the projected batch decodes to
//! exactly the chosen columns of the source (nulls, sliced and empty arrays, nested types, views with
//! several variadic buffers), and a mutated source gives an error or a batch that validates, never a
//! panic.

use std::sync::Arc;

use arrow_array::builder::{
    BinaryViewBuilder, Int64Builder, LargeListBuilder, MapBuilder, StringBuilder, StringViewBuilder,
};
use arrow_array::types::{Int16Type, Int32Type, IntervalMonthDayNano};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Decimal256Array,
    FixedSizeBinaryArray, FixedSizeListArray, Int64Array, IntervalMonthDayNanoArray,
    LargeBinaryArray, LargeListArray, LargeListViewArray, LargeStringArray, ListArray,
    ListViewArray, NullArray, RecordBatch, StringArray, StructArray, Time64MicrosecondArray,
    TimestampMicrosecondArray,
};
use arrow_buffer::{NullBuffer, i256};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use bytes::Bytes;
use mink_codec::header::{CRC_START, pos};
use mink_codec::{
    BatchMeta, BatchView, ChangeType, Compression, Encoder, HEADER_LEN, Projection, encode_batch,
};
use proptest::prelude::*;

/// Every kind of column the codec accepts (dictionaries, unions and run-end encoding it refuses).
const KINDS: usize = 23;

/// A deterministic value stream, so (kind, rows, seed) fully determines a column.
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

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// `Some(value)`, or `None` one time in four when `nullable`.
    fn opt<T>(&mut self, nullable: bool, value: impl FnOnce(&mut Self) -> T) -> Option<T> {
        if nullable && self.below(4) == 0 {
            None
        } else {
            Some(value(self))
        }
    }

    /// Text of 0..40 bytes: views of more than 12 bytes go to variadic buffers.
    fn text(&mut self) -> String {
        let len = self.below(40) as usize;
        (0..len)
            .map(|_| char::from(b'a' + self.below(26) as u8))
            .collect()
    }

    fn nulls(&mut self, nullable: bool, rows: usize) -> Option<NullBuffer> {
        nullable.then(|| NullBuffer::from_iter((0..rows).map(|_| self.below(4) != 0)))
    }
}

fn column(kind: usize, nullable: bool, rows: usize, seed: u64) -> ArrayRef {
    let mut r = Rng(seed);
    let n = nullable;
    let ints = |r: &mut Rng| -> Vec<Option<i32>> {
        (0..r.below(4))
            .map(|_| r.opt(true, |r| r.next() as i32))
            .collect()
    };
    match kind {
        0 => Arc::new(Int64Array::from_iter(
            (0..rows).map(|_| r.opt(n, |r| r.next() as i64)),
        )),
        1 => Arc::new(BooleanArray::from_iter(
            (0..rows).map(|_| r.opt(n, |r| r.below(2) == 0)),
        )),
        2 => Arc::new(NullArray::new(rows)),
        3 => Arc::new(
            Decimal128Array::from_iter((0..rows).map(|_| r.opt(n, |r| r.below(1 << 40) as i128)))
                .with_precision_and_scale(20, 3)
                .unwrap(),
        ),
        4 => Arc::new(
            Decimal256Array::from_iter(
                (0..rows).map(|_| r.opt(n, |r| i256::from_i128(r.below(1 << 50) as i128))),
            )
            .with_precision_and_scale(40, 5)
            .unwrap(),
        ),
        5 => Arc::new(Date32Array::from_iter(
            (0..rows).map(|_| r.opt(n, |r| r.below(30_000) as i32)),
        )),
        6 => Arc::new(
            TimestampMicrosecondArray::from_iter(
                (0..rows).map(|_| r.opt(n, |r| r.next() as i64 / 2)),
            )
            .with_timezone("+02:00"),
        ),
        7 => Arc::new(Time64MicrosecondArray::from_iter(
            (0..rows).map(|_| r.opt(n, |r| r.below(86_400_000_000) as i64)),
        )),
        8 => Arc::new(IntervalMonthDayNanoArray::from_iter((0..rows).map(|_| {
            r.opt(n, |r| {
                IntervalMonthDayNano::new(r.below(24) as i32, r.below(31) as i32, r.next() as i64)
            })
        }))),
        9 => {
            let values: Vec<Option<Vec<u8>>> = (0..rows)
                .map(|_| r.opt(n, |r| r.next().to_le_bytes()[..5].to_vec()))
                .collect();
            Arc::new(
                FixedSizeBinaryArray::try_from_sparse_iter_with_size(values.into_iter(), 5)
                    .unwrap(),
            )
        }
        10 => Arc::new(StringArray::from_iter(
            (0..rows).map(|_| r.opt(n, Rng::text)),
        )),
        11 => Arc::new(LargeStringArray::from_iter(
            (0..rows).map(|_| r.opt(n, Rng::text)),
        )),
        12 => Arc::new(BinaryArray::from_iter(
            (0..rows).map(|_| r.opt(n, |r| r.text().into_bytes())),
        )),
        13 => Arc::new(LargeBinaryArray::from_iter(
            (0..rows).map(|_| r.opt(n, |r| r.text().into_bytes())),
        )),
        14 => {
            // Small blocks: a column of a few rows already spans several variadic buffers.
            let mut b = StringViewBuilder::new().with_fixed_block_size(48);
            for _ in 0..rows {
                b.append_option(r.opt(n, Rng::text));
            }
            Arc::new(b.finish())
        }
        15 => {
            let mut b = BinaryViewBuilder::new().with_fixed_block_size(40);
            for _ in 0..rows {
                b.append_option(r.opt(n, |r| r.text().into_bytes()));
            }
            Arc::new(b.finish())
        }
        16 => Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(
            (0..rows).map(|_| r.opt(n, ints)).collect::<Vec<_>>(),
        )),
        17 => {
            let mut b = LargeListBuilder::new(StringBuilder::new());
            for _ in 0..rows {
                if r.opt(n, |_| ()).is_some() {
                    for _ in 0..r.below(3) {
                        let text = r.text();
                        b.values().append_value(text);
                    }
                    b.append(true);
                } else {
                    b.append(false);
                }
            }
            Arc::new(b.finish())
        }
        18 => Arc::new(ListViewArray::from(ListArray::from_iter_primitive::<
            Int32Type,
            _,
            _,
        >(
            (0..rows).map(|_| r.opt(n, ints)).collect::<Vec<_>>(),
        ))),
        19 => Arc::new(LargeListViewArray::from(
            LargeListArray::from_iter_primitive::<Int32Type, _, _>(
                (0..rows).map(|_| r.opt(n, ints)).collect::<Vec<_>>(),
            ),
        )),
        20 => Arc::new(FixedSizeListArray::from_iter_primitive::<Int16Type, _, _>(
            (0..rows)
                .map(|_| {
                    r.opt(n, |r| {
                        (0..3)
                            .map(|_| r.opt(true, |r| r.next() as i16))
                            .collect::<Vec<_>>()
                    })
                })
                .collect::<Vec<_>>(),
            3,
        )),
        21 => {
            let mut b = MapBuilder::new(None, StringBuilder::new(), Int64Builder::new());
            for _ in 0..rows {
                if r.opt(n, |_| ()).is_some() {
                    for _ in 0..r.below(3) {
                        let key = r.text();
                        b.keys().append_value(key);
                        let value = r.opt(true, |r| r.next() as i64);
                        b.values().append_option(value);
                    }
                    b.append(true).unwrap();
                } else {
                    b.append(false).unwrap();
                }
            }
            Arc::new(b.finish())
        }
        _ => {
            // A struct of a primitive, a view (variadic buffers inside a struct) and a list.
            let a = column(0, true, rows, r.next());
            let b = column(14, true, rows, r.next());
            let c = column(16, true, rows, r.next());
            let fields = Fields::from(vec![
                Field::new("a", a.data_type().clone(), true),
                Field::new("b", b.data_type().clone(), true),
                Field::new("c", c.data_type().clone(), true),
            ]);
            let nulls = r.nulls(n, rows);
            Arc::new(StructArray::try_new(fields, vec![a, b, c], nulls).unwrap())
        }
    }
}

/// A batch over `columns` (kind, nullable) of `rows` rows, each column cut from a longer one at
/// `skip` so sliced arrays are encoded.
fn make_batch(columns: &[(usize, bool)], rows: usize, skip: usize, seed: u64) -> RecordBatch {
    let arrays: Vec<ArrayRef> = columns
        .iter()
        .enumerate()
        .map(|(i, (kind, nullable))| {
            column(
                *kind,
                *nullable,
                rows + skip,
                seed.wrapping_add(i as u64 * 7919),
            )
            .slice(skip, rows)
        })
        .collect();
    let fields: Vec<Field> = arrays
        .iter()
        .zip(columns)
        .enumerate()
        .map(|(i, (a, (_, nullable)))| {
            // Null arrays are always nullable.
            let nullable = *nullable || a.null_count() > 0 || a.data_type() == &DataType::Null;
            Field::new(format!("c{i}"), a.data_type().clone(), nullable)
        })
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
}

/// Every kind once, nullable or not by turns: the hostile-input tests' source.
fn every_kind(rows: usize, seed: u64) -> RecordBatch {
    let columns: Vec<(usize, bool)> = (0..KINDS).map(|k| (k, k % 2 == 0)).collect();
    make_batch(&columns, rows, 1, seed)
}

fn reseal(buf: &mut [u8]) {
    if buf.len() >= HEADER_LEN {
        let crc = crc32c::crc32c(&buf[CRC_START..]);
        buf[pos::CRC..pos::CRC + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Projects `buf` (which may be hostile): an error, or a batch that validates; when the source
/// decodes in full, the projected batch decodes to its chosen columns. Returns whether it projected.
fn project_checked(buf: &[u8], schema: &SchemaRef, projection: &mut Projection) -> bool {
    let Ok(view) = BatchView::new(Bytes::copy_from_slice(buf)) else {
        return false;
    };
    let Ok(projected) = projection.project(&view) else {
        return false;
    };
    let out = BatchView::new(projected.as_slice()).expect("a projected batch frames");
    out.validate().expect("a projected batch validates");
    let decoded = out.decode(projection.projected_schema());
    if let Ok((source, changes)) = view.decode(schema) {
        let expected = source.project(projection.indices()).unwrap();
        let (rows, projected_changes) = decoded.expect("the chosen columns of a decodable source");
        assert_eq!(rows, expected);
        assert_eq!(projected_changes, changes);
    }
    true
}

/// The codecs a source may be encoded with: none, LZ4 frame, zstd.
const CODECS: [Option<Compression>; 3] =
    [None, Some(Compression::Lz4Frame), Some(Compression::ZSTD)];

/// `rb` encoded as one batch with `codec` (an index into [`CODECS`]).
fn encode(rb: &RecordBatch, ct: Option<&[ChangeType]>, meta: BatchMeta, codec: usize) -> Vec<u8> {
    Encoder::new()
        .with_compression(CODECS[codec])
        .unwrap()
        .encode(rb, ct, meta)
        .unwrap()
}

fn arb_columns() -> impl Strategy<Value = Vec<(usize, bool)>> {
    prop::collection::vec((0..KINDS, any::<bool>()), 1..8)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_buffer_copy_decodes_to_the_chosen_columns(
        (columns, picks) in arb_columns().prop_flat_map(|columns| {
            let n = columns.len();
            (Just(columns), prop::sample::subsequence((0..n).collect::<Vec<_>>(), 1..=n).prop_shuffle())
        }),
        rows in prop_oneof![Just(0usize), 1usize..40],
        skip in 0usize..5,
        seed in any::<u64>(),
        changes in any::<bool>(),
        (base, ts, epoch) in (any::<i64>(), any::<i64>(), any::<i32>()),
        codec in 0..CODECS.len(),
    ) {
        let rb = make_batch(&columns, rows, skip, seed);
        let ct: Vec<ChangeType> = (0..rows).map(|i| ChangeType::ALL[(i + skip) % ChangeType::ALL.len()]).collect();
        let ct = changes.then_some(ct);
        let meta = BatchMeta::new(3).with_writer(42, 7);
        let mut bytes = encode(&rb, ct.as_deref(), meta, codec);
        mink_codec::write_append_fields(&mut bytes, base, ts, epoch).unwrap();
        let source = BatchView::new(Bytes::from(bytes)).unwrap();

        let mut projection = Projection::new(rb.schema(), &picks).unwrap();
        let projected = projection.project(&source).unwrap();
        let view = BatchView::new(projected.as_slice()).unwrap();
        view.validate().unwrap();
        let (decoded, decoded_changes) = view.decode(projection.projected_schema()).unwrap();
        prop_assert_eq!(&decoded, &rb.project(&picks).unwrap());
        prop_assert_eq!(decoded_changes, ct);
        // Compressed buffers are copied as they are: the projection keeps the source's codec.
        let codec = CODECS[codec].map(|c| c.name());
        prop_assert_eq!(source.compression().unwrap().map(|c| c.name()), codec.filter(|_| rows > 0));
        prop_assert_eq!(view.compression().unwrap().map(|c| c.name()), codec.filter(|_| rows > 0));
        let (h, s) = (view.header(), source.header());
        prop_assert_eq!(
            (h.base_offset, h.commit_timestamp, h.leader_epoch, h.schema_id, h.attributes,
             h.last_offset_delta, h.writer_id, h.batch_sequence, h.record_count),
            (s.base_offset, s.commit_timestamp, s.leader_epoch, s.schema_id, s.attributes,
             s.last_offset_delta, s.writer_id, s.batch_sequence, s.record_count)
        );
        if rows == 0 {
            prop_assert_eq!(projected.len(), HEADER_LEN);
        } else {
            // The body stays 8-aligned from the batch start, so a `Bytes` view decodes in place.
            let (message, body) = view.message_parts().unwrap().unwrap();
            prop_assert_eq!(body.start % 8, 0);
            prop_assert!(message.end <= body.start);
        }
        // Projecting the projection to all its columns gives the same bytes: the copy is exact.
        let all: Vec<usize> = (0..picks.len()).collect();
        let again = Projection::new(projection.projected_schema().clone(), &all)
            .unwrap()
            .project(&view)
            .unwrap();
        prop_assert_eq!(again, projected);
    }
}

/// Sources with many variadic buffers per view column: the counts follow their columns.
#[test]
fn views_keep_their_variadic_buffer_counts() {
    let rb = make_batch(
        &[(14, true), (0, false), (15, false), (22, true)],
        200,
        3,
        11,
    );
    let bytes = encode_batch(&rb, None, BatchMeta::new(1)).unwrap();
    let source = BatchView::new(bytes.as_slice()).unwrap();
    let data = rb.column(0).to_data();
    assert!(
        data.buffers().len() > 4,
        "the source view column spans several buffers"
    );
    for picks in [vec![3, 2, 0], vec![2], vec![1, 3], vec![0, 1, 2, 3]] {
        let mut projection = Projection::new(rb.schema(), &picks).unwrap();
        let projected = projection.project(&source).unwrap();
        let (decoded, _) = BatchView::new(projected.as_slice())
            .unwrap()
            .decode(projection.projected_schema())
            .unwrap();
        assert_eq!(decoded, rb.project(&picks).unwrap(), "{picks:?}");
    }
}

/// One column of ten: the projected batch holds that column's buffers and little else.
#[test]
fn one_column_of_ten_copies_only_its_buffers() {
    let columns: Vec<(usize, bool)> = std::iter::once((0, false))
        .chain((1..10).map(|_| (10, true)))
        .collect();
    let rb = make_batch(&columns, 1000, 0, 5);
    let bytes = encode_batch(&rb, None, BatchMeta::new(1)).unwrap();
    let source = BatchView::new(bytes.as_slice()).unwrap();
    let mut projection = Projection::new(rb.schema(), &[0]).unwrap();
    let projected = projection.project(&source).unwrap();
    // 8000 bytes of values and no validity bitmap (Arrow's writer sends an empty one for a column
    // without nulls), then header and metadata.
    let (_, body) = BatchView::new(projected.as_slice())
        .unwrap()
        .message_parts()
        .unwrap()
        .unwrap();
    assert_eq!(body.len(), 8000);
    assert!(projected.len() < 8000 + 300, "{}", projected.len());
}

/// Every truncation of a projected source, with its length field kept or fixed and its CRC
/// recomputed, gives an error or a batch that validates.
#[test]
fn every_truncation_of_the_source_is_handled() {
    let rb = every_kind(6, 21);
    let schema = rb.schema();
    let ct = [ChangeType::Delete; 6];
    let cases = [(None, 0), (Some(&ct[..]), 0), (None, 1), (Some(&ct[..]), 2)];
    for (ct, codec) in cases {
        let good = encode(&rb, ct, BatchMeta::new(1), codec);
        let mut projection = Projection::new(schema.clone(), &[22, 14, 2, 0, 18, 21, 9]).unwrap();
        assert!(project_checked(&good, &schema, &mut projection));
        for len in 0..good.len() {
            let mut buf = good[..len].to_vec();
            project_checked(&buf, &schema, &mut projection);
            if buf.len() >= HEADER_LEN {
                let length = (buf.len() - 12) as i32;
                buf[pos::LENGTH..pos::LENGTH + 4].copy_from_slice(&length.to_le_bytes());
                reseal(&mut buf);
                assert!(
                    !project_checked(&buf, &schema, &mut projection),
                    "a batch cut at {len} of {} projects",
                    good.len()
                );
            }
        }
    }
}

/// Every byte of a projected source flipped several ways, CRC recomputed, gives an error or a batch
/// that validates and, when the source decodes, decodes to its chosen columns.
#[test]
fn every_flipped_byte_of_the_source_is_handled() {
    let rb = every_kind(5, 33);
    let schema = rb.schema();
    for codec in 0..CODECS.len() {
        let good = encode(&rb, None, BatchMeta::new(1), codec);
        let mut projection =
            Projection::new(schema.clone(), &[15, 22, 3, 17, 8, 20, 19, 2]).unwrap();
        let mut projected = 0;
        for at in 0..good.len() {
            for mask in [0x01u8, 0x10, 0x80, 0xFF] {
                let mut buf = good.clone();
                buf[at] ^= mask;
                reseal(&mut buf);
                projected += usize::from(project_checked(&buf, &schema, &mut projection));
            }
        }
        assert!(projected > 0, "flips in unread bytes leave the batch whole");
    }
}

/// A projection trusting the CRC skips only the CRC: a batch whose CRC is wrong projects (a
/// checking projection refuses it), and every flipped byte, CRC left as it is, still gives an
/// error or a batch that validates, never a panic.
#[test]
fn trusting_the_crc_skips_only_the_crc() {
    let rb = every_kind(5, 41);
    let schema = rb.schema();
    let good = encode_batch(&rb, None, BatchMeta::new(1)).unwrap();
    let columns = [15, 22, 3, 17, 8, 20, 19, 2];
    let mut checking = Projection::new(schema.clone(), &columns).unwrap();
    let mut trusting = Projection::new(schema.clone(), &columns)
        .unwrap()
        .trusting_crc();
    let mut stale = good.clone();
    stale[pos::CRC] ^= 0x5A;
    let view = BatchView::new(stale.as_slice()).unwrap();
    assert!(
        checking.project(&view).is_err(),
        "a checking projection refuses a bad CRC"
    );
    let projected = trusting.project(&view).unwrap();
    let expected = checking
        .project(&BatchView::new(good.as_slice()).unwrap())
        .unwrap();
    assert_eq!(
        projected, expected,
        "the same projection, with a CRC of its own"
    );
    for at in 0..good.len() {
        for mask in [0x01u8, 0x80, 0xFF] {
            let mut buf = good.clone();
            buf[at] ^= mask;
            project_checked(&buf, &schema, &mut trusting);
        }
    }
}
