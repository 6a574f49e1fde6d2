//! The codec's malformed-input cases, each asserting the error variant, the field and the byte position.
//!
//! Most cases are rows of [`DAMAGED`]: a valid sample batch, damaged one way, checked at one entry point.
//! Cases that need several batches, another sample or more than the error (the truncation sweep, output
//! left untouched) are tests of their own over the same assertion helper.

mod common;

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use arrow_schema::SchemaRef;
use mink_codec::header::{CRC_START, pos};
use mink_codec::{
    BatchMeta, BatchView, ChangeType, Error, HEADER_LEN, Projection, batches, encode_batch,
};

const ROWS: usize = 5;
/// Where the Arrow message starts in the sample with change types.
const MESSAGE: usize = HEADER_LEN + ROWS;

/// The valid batch a case starts from.
#[derive(Clone, Copy)]
enum Sample {
    /// `ROWS` rows of the fixed columns, with change types.
    Changes,
    /// The same rows, append-only (no change-type vector).
    AppendOnly,
    /// Zero rows: a header with no Arrow message.
    Empty,
}

impl Sample {
    fn build(self) -> (Vec<u8>, SchemaRef) {
        let rows = match self {
            Sample::Changes | Sample::AppendOnly => ROWS,
            Sample::Empty => 0,
        };
        let rb = common::make_batch(&common::fixed_columns(), rows, 42);
        let ct = [
            ChangeType::Insert,
            ChangeType::UpdateBefore,
            ChangeType::UpdateAfter,
            ChangeType::Delete,
            ChangeType::Insert,
        ];
        let changes = match self {
            Sample::Changes => Some(&ct[..]),
            Sample::AppendOnly => None,
            Sample::Empty => Some(&ct[..0]),
        };
        let bytes = encode_batch(&rb, changes, BatchMeta::new(7).with_writer(9, 3)).unwrap();
        (bytes, rb.schema())
    }
}

/// The entry point a damaged batch is checked at.
#[derive(Clone, Copy, Debug)]
enum Check {
    /// `BatchView::new`, which checks the framing.
    View,
    /// The first item of `batches`, which frames the same way.
    Iter,
    /// The cheap `check_header`, `validate` and `decode` all fail with the same error.
    Header,
    /// `check_header` passes; `validate` and `decode` fail with the same error.
    Message,
}

/// One damaged batch and the error it must give.
struct Case {
    name: &'static str,
    sample: Sample,
    damage: fn(&mut Vec<u8>),
    check: Check,
    /// The variant and its values; gets the damaged bytes for values that depend on them.
    variant: fn(&Error, &[u8]) -> bool,
    field: &'static str,
    position: usize,
}

const DAMAGED: &[Case] = &[
    Case {
        name: "length shorter than the header",
        sample: Sample::Changes,
        damage: |b| set_i32(b, pos::LENGTH, 10),
        check: Check::View,
        variant: |e, _| matches!(e, Error::BadLength { value: 10, .. }),
        field: "length",
        position: pos::LENGTH,
    },
    Case {
        name: "negative length",
        sample: Sample::Changes,
        damage: |b| set_i32(b, pos::LENGTH, -1),
        check: Check::Iter,
        variant: |e, _| matches!(e, Error::BadLength { value: -1, .. }),
        field: "length",
        position: pos::LENGTH,
    },
    Case {
        name: "length one past the buffer",
        sample: Sample::Changes,
        damage: |b| set_length(b, 1),
        check: Check::View,
        variant: |e, _| missing_bytes(e) == Some(1),
        field: "length",
        position: pos::LENGTH,
    },
    Case {
        name: "length one short of the buffer",
        sample: Sample::Changes,
        damage: |b| set_length(b, -1),
        check: Check::View,
        variant: |e, b| {
            let fits = i64::from(length_of(b));
            matches!(e, Error::BadLength { value, .. } if *value == fits - 1)
        },
        field: "length",
        position: pos::LENGTH,
    },
    Case {
        // The CRC does not cover the magic byte, so no reseal is needed.
        name: "bad magic",
        sample: Sample::Changes,
        damage: |b| b[pos::MAGIC] = 2,
        check: Check::Header,
        variant: |e, _| {
            matches!(
                e,
                Error::BadMagic {
                    found: 2,
                    expected: 1,
                    ..
                }
            )
        },
        field: "magic",
        position: 12,
    },
    Case {
        name: "flipped bit, not resealed",
        sample: Sample::Changes,
        damage: |b| *b.last_mut().unwrap() ^= 0x10,
        check: Check::Header,
        variant: |e, b| {
            let stored = u32::from_le_bytes(b[pos::CRC..pos::CRC + 4].try_into().unwrap());
            matches!(e, Error::CrcMismatch { expected, actual, .. }
                if *expected == stored && *actual == crc32c::crc32c(&b[CRC_START..]))
        },
        field: "crc",
        position: pos::CRC,
    },
    Case {
        name: "last_offset_delta equal to record_count",
        sample: Sample::Changes,
        damage: |b| {
            set_i32(b, pos::LAST_OFFSET_DELTA, ROWS as i32);
            reseal(b);
        },
        check: Check::Header,
        variant: |e, _| {
            matches!(
                e,
                Error::CountMismatch {
                    expected: 4,
                    actual: 5,
                    ..
                }
            )
        },
        field: "last_offset_delta",
        position: pos::LAST_OFFSET_DELTA,
    },
    Case {
        // Append-only so the change vector does not move: record_count 4 and delta 3 agree, Arrow says 5,
        // which only the full check sees.
        name: "record_count below the Arrow row count",
        sample: Sample::AppendOnly,
        damage: |b| {
            claim_rows(b, 4);
            reseal(b);
        },
        check: Check::Message,
        variant: |e, _| {
            matches!(
                e,
                Error::CountMismatch {
                    expected: 4,
                    actual: 5,
                    ..
                }
            )
        },
        field: "arrow.length",
        position: HEADER_LEN + 8,
    },
    Case {
        name: "change vector one byte short",
        sample: Sample::Changes,
        damage: |b| {
            b.remove(MESSAGE - 1);
            set_length(b, 0);
            reseal(b);
        },
        check: Check::Header,
        variant: |e, _| {
            matches!(
                e,
                Error::CountMismatch {
                    expected: 5,
                    actual: 4,
                    ..
                }
            )
        },
        field: "change_types",
        position: HEADER_LEN,
    },
    Case {
        name: "change vector one byte long",
        sample: Sample::Changes,
        damage: |b| {
            b.insert(MESSAGE, ChangeType::Insert.to_byte());
            set_length(b, 0);
            reseal(b);
        },
        check: Check::Message,
        variant: |e, _| {
            matches!(
                e,
                Error::CountMismatch {
                    expected: 5,
                    actual: 6,
                    ..
                }
            )
        },
        field: "change_types",
        position: HEADER_LEN,
    },
    Case {
        name: "change type byte out of range",
        sample: Sample::Changes,
        damage: |b| {
            b[HEADER_LEN + 2] = 5;
            reseal(b);
        },
        check: Check::Header,
        variant: |e, _| matches!(e, Error::BadChangeType { value: 5, .. }),
        field: "change_types",
        position: HEADER_LEN + 2,
    },
    Case {
        name: "record-counting bit on a batch without a writer",
        sample: Sample::Changes,
        damage: |b| {
            b[pos::WRITER_ID..pos::WRITER_ID + 8].copy_from_slice(&(-1i64).to_le_bytes());
            set_i32(b, pos::BATCH_SEQUENCE, -1);
            b[pos::ATTRIBUTES] |= 0x02;
            reseal(b);
        },
        check: Check::Header,
        variant: |e, _| matches!(e, Error::BadAttributes { value: 0x02, .. }),
        field: "attributes",
        position: pos::ATTRIBUTES,
    },
    Case {
        name: "unknown attribute bit",
        sample: Sample::Changes,
        damage: |b| {
            b[pos::ATTRIBUTES] |= 0x80;
            reseal(b);
        },
        check: Check::Header,
        variant: |e, _| matches!(e, Error::BadAttributes { value: 0x80, .. }),
        field: "attributes",
        position: pos::ATTRIBUTES,
    },
    Case {
        name: "garbage Arrow metadata behind a valid prefix, resealed",
        sample: Sample::Changes,
        damage: |b| {
            for (i, byte) in b[MESSAGE + 8..MESSAGE + 40].iter_mut().enumerate() {
                *byte = (i as u8).wrapping_mul(37) ^ 0xA5;
            }
            reseal(b);
        },
        check: Check::Message,
        variant: |e, _| matches!(e, Error::InvalidArrowMessage { .. }),
        field: "arrow.metadata",
        position: MESSAGE + 8,
    },
    Case {
        name: "garbage Arrow prefix, resealed",
        sample: Sample::Changes,
        damage: |b| {
            b[MESSAGE] = 0x12;
            reseal(b);
        },
        check: Check::Message,
        variant: |e, _| matches!(e, Error::InvalidArrowMessage { .. }),
        field: "arrow.prefix",
        position: MESSAGE,
    },
    Case {
        name: "header claiming a row but carrying no message",
        sample: Sample::Empty,
        damage: |b| {
            claim_rows(b, 1);
            b[pos::ATTRIBUTES] = 1;
            reseal(b);
        },
        check: Check::Message,
        variant: |e, _| matches!(e, Error::Truncated { .. }),
        field: "arrow.prefix",
        position: HEADER_LEN,
    },
];

impl Case {
    /// Damages the sample, checks it at the case's entry point; panics naming the case.
    fn run(&self) {
        let (mut bytes, schema) = self.sample.build();
        (self.damage)(&mut bytes);
        let err = match self.check {
            Check::View => BatchView::new(bytes.as_slice()).unwrap_err(),
            Check::Iter => batches(bytes.as_slice()).next().unwrap().unwrap_err(),
            Check::Header | Check::Message => {
                let err = full_error(self.name, &bytes, &schema);
                let header = BatchView::new(bytes.as_slice()).unwrap().check_header();
                match (self.check, header) {
                    (Check::Header, Err(e)) => assert_eq!(
                        e.to_string(),
                        err.to_string(),
                        "{}: check_header and validate agree",
                        self.name
                    ),
                    (Check::Message, Ok(())) => {}
                    (check, header) => panic!(
                        "{}: {check:?} expected, check_header gave {header:?}",
                        self.name
                    ),
                }
                err
            }
        };
        let variant = (self.variant)(&err, &bytes);
        assert_error(self.name, &err, variant, self.field, self.position);
    }
}

#[test]
fn damaged_batches_give_the_named_error() {
    let failed: Vec<&str> = DAMAGED
        .iter()
        .filter(|case| panic::catch_unwind(AssertUnwindSafe(|| case.run())).is_err())
        .map(|case| case.name)
        .collect();
    assert!(failed.is_empty(), "failing cases: {failed:?}");
}

/// Asserts that `err` is the expected variant (`variant`, from a `matches!` at the caller) and points at
/// `field` at byte `position`.
fn assert_error(case: &str, err: &Error, variant: bool, field: &str, position: usize) {
    assert!(variant, "{case}: unexpected error {err:?}");
    assert_eq!(
        (err.field(), err.position()),
        (Some(field), Some(position)),
        "{case}: {err}"
    );
}

/// Runs the full check and decode on a single batch and returns the error they agree on.
fn full_error(case: &str, bytes: &[u8], schema: &SchemaRef) -> Error {
    let view = BatchView::new(bytes).unwrap();
    let validate = view.validate().unwrap_err();
    let decode = view.decode(schema).unwrap_err();
    assert_eq!(
        validate.to_string(),
        decode.to_string(),
        "{case}: validate and decode agree"
    );
    validate
}

/// How many bytes a `Truncated` error says are missing.
fn missing_bytes(err: &Error) -> Option<usize> {
    match err {
        Error::Truncated {
            needed, available, ..
        } => needed.checked_sub(*available),
        _ => None,
    }
}

fn reseal(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[CRC_START..]);
    batch[pos::CRC..pos::CRC + 4].copy_from_slice(&crc.to_le_bytes());
}

fn set_i32(batch: &mut [u8], at: usize, v: i32) {
    batch[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Sets `record_count` to `rows` and `last_offset_delta` to match, so the header agrees with itself.
fn claim_rows(batch: &mut [u8], rows: i32) {
    set_i32(batch, pos::RECORD_COUNT, rows);
    set_i32(batch, pos::LAST_OFFSET_DELTA, rows - 1);
}

/// The `length` field that fits the buffer exactly.
fn length_of(batch: &[u8]) -> i32 {
    batch.len() as i32 - 12
}

/// Sets the `length` field `off` bytes away from the one that fits the buffer exactly.
fn set_length(batch: &mut [u8], off: i32) {
    set_i32(batch, pos::LENGTH, length_of(batch) + off);
}

#[test]
fn truncated_at_every_position_is_reported() {
    let (bytes, _) = Sample::Changes.build();
    for cut in 0..bytes.len() {
        let case = format!("cut at {cut}");
        let (field, position) = if cut < 12 {
            ("header", 0)
        } else {
            ("length", pos::LENGTH)
        };
        let err = BatchView::new(&bytes[..cut]).unwrap_err();
        let variant = matches!(err, Error::Truncated { .. });
        assert_error(&case, &err, variant, field, position);
        if cut > 0 {
            let err = batches(&bytes[..cut]).next().unwrap().unwrap_err();
            let variant = matches!(err, Error::Truncated { .. });
            assert_error(&case, &err, variant, field, position);
        }
    }
    assert!(
        batches(&bytes[..0]).next().is_none(),
        "an empty buffer holds no batches"
    );
}

#[test]
fn truncation_of_a_later_batch_names_its_position() {
    let (one, _) = Sample::AppendOnly.build();
    let mut buf = one.clone();
    buf.extend_from_slice(&one[..one.len() - 3]);
    let mut it = batches(buf.as_slice());
    assert!(it.next().unwrap().is_ok());
    let err = it.next().unwrap().unwrap_err();
    let variant = missing_bytes(&err) == Some(3);
    assert_error(
        "second batch",
        &err,
        variant,
        "length",
        one.len() + pos::LENGTH,
    );
    assert!(it.next().is_none(), "the iterator stops after an error");
}

#[test]
fn crc_error_in_second_batch_names_its_absolute_position() {
    let (one, _) = Sample::Changes.build();
    let mut buf = one.clone();
    buf.extend_from_slice(&one);
    *buf.last_mut().unwrap() ^= 1;
    let views: Vec<_> = batches(buf.as_slice()).collect::<Result<_, _>>().unwrap();
    views[0].check_header().unwrap();
    let err = views[1].check_header().unwrap_err();
    let variant = matches!(err, Error::CrcMismatch { .. });
    assert_error("second batch", &err, variant, "crc", one.len() + pos::CRC);
}

#[test]
fn garbage_arrow_body_with_a_correct_crc_fails_decode_but_not_validate() {
    // String offsets overwritten with garbage: the structure is fine, the arrays are not.
    let rb = common::make_batch(&[(common::Kind::Utf8, false)], 8, 3);
    let mut bytes = encode_batch(&rb, None, BatchMeta::new(0)).unwrap();
    let body_end = bytes.len();
    // The body ends with the string data; the offsets precede it. Fill the whole body with 0xFF.
    let view = BatchView::new(bytes.as_slice()).unwrap();
    view.validate().unwrap();
    let meta_len =
        i32::from_le_bytes(bytes[HEADER_LEN + 4..HEADER_LEN + 8].try_into().unwrap()) as usize;
    let body_start = HEADER_LEN + 8 + meta_len;
    bytes[body_start..body_end].fill(0xFF);
    reseal(&mut bytes);
    let view = BatchView::new(bytes.as_slice()).unwrap();
    view.validate().unwrap();
    let err = view.decode(&rb.schema()).unwrap_err();
    let variant = matches!(err, Error::Arrow { .. });
    assert_error("garbage body", &err, variant, "arrow.body", body_start);
}

#[test]
fn decoding_with_the_wrong_schema_is_an_error() {
    let (bytes, _) = Sample::Changes.build();
    let other = common::make_batch(
        &[(common::Kind::Utf8, false), (common::Kind::Utf8, false)],
        1,
        0,
    )
    .schema();
    let err = BatchView::new(bytes.as_slice())
        .unwrap()
        .decode(&other)
        .unwrap_err();
    assert!(
        matches!(err, Error::Arrow { .. } | Error::InvalidArrowMessage { .. }),
        "{err}"
    );
}

#[test]
fn a_batch_with_more_columns_than_its_schema_is_refused() {
    // Arrow's decoder reads the columns the schema names and would ignore the rest.
    let (bytes, schema) = Sample::Changes.build();
    assert!(schema.fields().len() > 1);
    let fewer = Arc::new(arrow_schema::Schema::new(
        schema
            .fields()
            .iter()
            .take(schema.fields().len() - 1)
            .cloned()
            .collect::<Vec<_>>(),
    ));
    let view = BatchView::new(bytes.as_slice()).unwrap();
    let err = view.decode(&fewer).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArrowMessage { reason, .. } if reason.contains("field nodes")),
        "{err}"
    );
    assert!(view.decode(&schema).is_ok());
}

/// The valid counterpart of the "header claiming a row but carrying no message" case.
#[test]
fn zero_row_header_only_batch_is_valid() {
    let (bytes, schema) = Sample::Empty.build();
    assert_eq!(bytes.len(), HEADER_LEN);
    let view = BatchView::new(bytes.as_slice()).unwrap();
    view.validate().unwrap();
    assert_eq!((view.record_count(), view.last_offset_delta()), (0, -1));
    let (decoded, changes) = view.decode(&schema).unwrap();
    assert_eq!(decoded.num_rows(), 0);
    assert_eq!(changes, Some(vec![]));
}

/// Projections a schema cannot give, and the error each must fail with. Not decode errors: no field, no
/// position.
#[test]
fn bad_projections_are_rejected() {
    type Build = fn(SchemaRef) -> Result<Projection, Error>;
    type Matches = fn(&Error) -> bool;
    let cases: [(&str, Build, Matches); 5] = [
        (
            "no indices",
            |s| Projection::new(s, &[]),
            |e| matches!(e, Error::EmptyProjection),
        ),
        (
            "no names",
            |s| Projection::by_names::<&str>(s, &[]),
            |e| matches!(e, Error::EmptyProjection),
        ),
        (
            "unknown name",
            |s| Projection::by_names(s, &["c0", "nope"]),
            |e| matches!(e, Error::UnknownColumn { name, .. } if name == "nope"),
        ),
        (
            "index past the last column",
            |s| Projection::new(s, &[0, 7]),
            |e| {
                matches!(
                    e,
                    Error::ColumnOutOfRange {
                        index: 7,
                        columns: 7
                    }
                )
            },
        ),
        (
            "index named twice",
            |s| Projection::new(s, &[1, 1]),
            |e| matches!(e, Error::DuplicateColumn { index: 1 }),
        ),
    ];
    let (_, schema) = Sample::Changes.build();
    for (case, build, variant) in cases {
        let err = build(schema.clone()).unwrap_err();
        assert!(variant(&err), "{case}: unexpected error {err:?}");
        assert_eq!((err.field(), err.position()), (None, None), "{case}: {err}");
    }
}

#[test]
fn projection_of_a_corrupt_batch_fails_and_leaves_output_untouched() {
    let (mut bytes, schema) = Sample::Changes.build();
    *bytes.last_mut().unwrap() ^= 1;
    let mut projection = Projection::new(schema, &[0]).unwrap();
    let mut out = vec![1, 2, 3];
    let err = projection
        .project_into(&BatchView::new(bytes.as_slice()).unwrap(), &mut out)
        .unwrap_err();
    let variant = matches!(err, Error::CrcMismatch { .. });
    assert_error("projection", &err, variant, "crc", pos::CRC);
    assert_eq!(out, [1, 2, 3]);
}

#[test]
fn in_place_writes_on_a_short_buffer_are_errors() {
    type Write = fn(&mut [u8]) -> Result<(), Error>;
    let writes: [(&str, Write); 3] = [
        ("write_leader_epoch", |b| {
            mink_codec::write_leader_epoch(b, 1)
        }),
        ("write_base_offset", |b| mink_codec::write_base_offset(b, 1)),
        ("write_commit_timestamp", |b| {
            mink_codec::write_commit_timestamp(b, 1)
        }),
    ];
    let mut short = [0u8; 20];
    for (case, write) in writes {
        let err = write(&mut short).unwrap_err();
        let variant = matches!(
            err,
            Error::Truncated {
                needed: HEADER_LEN,
                available: 20,
                ..
            }
        );
        assert_error(case, &err, variant, "header", 0);
    }
}
