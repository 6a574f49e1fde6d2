//! One test per malformed-input case: each asserts the error variant, the field and the byte position.

mod common;

use arrow_schema::SchemaRef;
use mink_codec::header::{CRC_START, pos};
use mink_codec::{
    BatchMeta, BatchView, ChangeType, Error, HEADER_LEN, Projection, batches, encode_batch,
};

const ROWS: usize = 5;

fn sample(change_types: bool) -> (Vec<u8>, SchemaRef) {
    let rb = common::make_batch(&common::fixed_columns(), ROWS, 42);
    let ct = [
        ChangeType::Insert,
        ChangeType::UpdateBefore,
        ChangeType::UpdateAfter,
        ChangeType::Delete,
        ChangeType::Insert,
    ];
    let bytes = encode_batch(
        &rb,
        change_types.then_some(&ct[..]),
        BatchMeta::new(7).with_writer(9, 3),
    )
    .unwrap();
    (bytes, rb.schema())
}

fn reseal(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[CRC_START..]);
    batch[pos::CRC..pos::CRC + 4].copy_from_slice(&crc.to_le_bytes());
}

fn set_i32(batch: &mut [u8], at: usize, v: i32) {
    batch[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn set_length(batch: &mut [u8]) {
    let len = batch.len() as i32 - 12;
    set_i32(batch, pos::LENGTH, len);
}

/// Runs the full check (and decode) on a single batch and returns the error.
fn full_error(bytes: &[u8], schema: &SchemaRef) -> Error {
    let view = BatchView::new(bytes).unwrap();
    let validate = view.validate().unwrap_err();
    let decode = view.decode(schema).unwrap_err();
    assert_eq!(
        validate.to_string(),
        decode.to_string(),
        "validate and decode agree"
    );
    validate
}

#[test]
fn truncated_at_every_position_is_reported() {
    let (bytes, _) = sample(true);
    for cut in 0..bytes.len() {
        let err = BatchView::new(&bytes[..cut]).unwrap_err();
        assert!(
            matches!(err, Error::Truncated { .. }),
            "cut at {cut}: {err}"
        );
        let expected_field = if cut < 12 { "header" } else { "length" };
        assert_eq!(err.field(), Some(expected_field), "cut at {cut}");
        assert_eq!(err.position(), Some(if cut < 12 { 0 } else { pos::LENGTH }));
        if cut > 0 {
            let err = batches(&bytes[..cut]).next().unwrap().unwrap_err();
            assert!(
                matches!(err, Error::Truncated { .. }),
                "cut at {cut}: {err}"
            );
        }
    }
    assert!(
        batches(&bytes[..0]).next().is_none(),
        "an empty buffer holds no batches"
    );
}

#[test]
fn truncation_of_a_later_batch_names_its_position() {
    let (one, _) = sample(false);
    let mut buf = one.clone();
    buf.extend_from_slice(&one[..one.len() - 3]);
    let mut it = batches(buf.as_slice());
    assert!(it.next().unwrap().is_ok());
    let err = it.next().unwrap().unwrap_err();
    assert!(
        matches!(err, Error::Truncated { needed, available, .. } if needed == available + 3),
        "{err}"
    );
    assert_eq!(err.position(), Some(one.len() + pos::LENGTH));
    assert!(it.next().is_none(), "the iterator stops after an error");
}

#[test]
fn length_shorter_than_header_is_bad_length() {
    let (mut bytes, _) = sample(true);
    set_i32(&mut bytes, pos::LENGTH, 10);
    let err = BatchView::new(bytes.as_slice()).unwrap_err();
    assert!(matches!(err, Error::BadLength { value: 10, .. }), "{err}");
    assert_eq!(
        (err.field(), err.position()),
        (Some("length"), Some(pos::LENGTH))
    );
    set_i32(&mut bytes, pos::LENGTH, -1);
    let err = batches(bytes.as_slice()).next().unwrap().unwrap_err();
    assert!(matches!(err, Error::BadLength { value: -1, .. }), "{err}");
}

#[test]
fn length_past_the_buffer_is_truncated_and_length_short_of_it_leaves_trailing_bytes() {
    let (mut bytes, _) = sample(true);
    let real = bytes.len() as i32 - 12;
    set_i32(&mut bytes, pos::LENGTH, real + 1);
    let err = BatchView::new(bytes.as_slice()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Truncated {
                field: "length",
                position: 8,
                ..
            }
        ),
        "{err}"
    );
    set_i32(&mut bytes, pos::LENGTH, real - 1);
    let err = BatchView::new(bytes.as_slice()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadLength {
                field: "length",
                position: 8,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn bad_magic_is_reported_at_byte_12() {
    let (mut bytes, schema) = sample(true);
    bytes[pos::MAGIC] = 2;
    let err = full_error(&bytes, &schema);
    assert!(
        matches!(
            err,
            Error::BadMagic {
                found: 2,
                expected: 1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!((err.field(), err.position()), (Some("magic"), Some(12)));
    assert!(
        BatchView::new(bytes.as_slice())
            .unwrap()
            .check_header()
            .is_err()
    );
}

#[test]
fn flipped_bit_gives_crc_mismatch() {
    let (mut bytes, schema) = sample(true);
    let last = bytes.len() - 1;
    bytes[last] ^= 0x10;
    let stored = u32::from_le_bytes(bytes[pos::CRC..pos::CRC + 4].try_into().unwrap());
    let err = full_error(&bytes, &schema);
    let Error::CrcMismatch {
        expected,
        actual,
        position,
    } = err
    else {
        panic!("{err}")
    };
    assert_eq!(expected, stored);
    assert_eq!(actual, crc32c::crc32c(&bytes[CRC_START..]));
    assert_eq!(position, pos::CRC);
}

#[test]
fn crc_error_in_second_batch_names_its_absolute_position() {
    let (one, _) = sample(true);
    let mut buf = one.clone();
    buf.extend_from_slice(&one);
    let last = buf.len() - 1;
    buf[last] ^= 1;
    let views: Vec<_> = batches(buf.as_slice()).collect::<Result<_, _>>().unwrap();
    views[0].check_header().unwrap();
    let err = views[1].check_header().unwrap_err();
    assert!(matches!(err, Error::CrcMismatch { .. }));
    assert_eq!(err.position(), Some(one.len() + pos::CRC));
}

#[test]
fn last_offset_delta_not_record_count_minus_one_is_count_mismatch() {
    let (mut bytes, schema) = sample(true);
    set_i32(&mut bytes, pos::LAST_OFFSET_DELTA, ROWS as i32);
    reseal(&mut bytes);
    let err = full_error(&bytes, &schema);
    assert!(
        matches!(
            err,
            Error::CountMismatch {
                field: "last_offset_delta",
                expected: 4,
                actual: 5,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.position(), Some(pos::LAST_OFFSET_DELTA));
}

#[test]
fn record_count_differing_from_arrow_rows_is_count_mismatch() {
    // Append-only so the change vector does not move: record_count 4 + delta 3 agree, Arrow says 5.
    let (mut bytes, schema) = sample(false);
    set_i32(&mut bytes, pos::RECORD_COUNT, 4);
    set_i32(&mut bytes, pos::LAST_OFFSET_DELTA, 3);
    reseal(&mut bytes);
    let view = BatchView::new(bytes.as_slice()).unwrap();
    view.check_header().unwrap(); // The cheap check cannot see the Arrow row count.
    let err = full_error(&bytes, &schema);
    assert!(
        matches!(
            err,
            Error::CountMismatch {
                field: "arrow.length",
                expected: 4,
                actual: 5,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.position(), Some(HEADER_LEN + 8));
}

#[test]
fn change_vector_one_byte_short_is_count_mismatch() {
    let (bytes, schema) = sample(true);
    let mut short = bytes[..HEADER_LEN + ROWS - 1].to_vec();
    short.extend_from_slice(&bytes[HEADER_LEN + ROWS..]);
    set_length(&mut short);
    reseal(&mut short);
    let err = full_error(&short, &schema);
    assert!(
        matches!(
            err,
            Error::CountMismatch {
                field: "change_types",
                expected: 5,
                actual: 4,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.position(), Some(HEADER_LEN));
}

#[test]
fn change_vector_one_byte_long_is_count_mismatch() {
    let (bytes, schema) = sample(true);
    let mut long = bytes[..HEADER_LEN + ROWS].to_vec();
    long.push(ChangeType::Insert.to_byte());
    long.extend_from_slice(&bytes[HEADER_LEN + ROWS..]);
    set_length(&mut long);
    reseal(&mut long);
    BatchView::new(long.as_slice())
        .unwrap()
        .check_header()
        .unwrap();
    let err = full_error(&long, &schema);
    assert!(
        matches!(
            err,
            Error::CountMismatch {
                field: "change_types",
                expected: 5,
                actual: 6,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.position(), Some(HEADER_LEN));
}

#[test]
fn change_type_byte_out_of_range_is_bad_change_type() {
    let (mut bytes, schema) = sample(true);
    bytes[HEADER_LEN + 2] = 5;
    reseal(&mut bytes);
    let err = full_error(&bytes, &schema);
    assert!(
        matches!(err, Error::BadChangeType { value: 5, .. }),
        "{err}"
    );
    assert_eq!(
        (err.field(), err.position()),
        (Some("change_types"), Some(HEADER_LEN + 2))
    );
}

#[test]
fn unknown_attribute_bits_are_rejected() {
    let (mut bytes, schema) = sample(true);
    bytes[pos::ATTRIBUTES] |= 0x80;
    reseal(&mut bytes);
    let err = full_error(&bytes, &schema);
    assert!(
        matches!(err, Error::BadAttributes { value: 0x80, .. }),
        "{err}"
    );
    assert_eq!(err.position(), Some(pos::ATTRIBUTES));
}

#[test]
fn garbage_arrow_bytes_with_a_correct_crc_are_an_arrow_error() {
    let (mut bytes, schema) = sample(true);
    let msg = HEADER_LEN + ROWS;
    // Garbage flatbuffer metadata, valid prefix.
    let mut meta_garbage = bytes.clone();
    for (i, b) in meta_garbage[msg + 8..msg + 40].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37) ^ 0xA5;
    }
    reseal(&mut meta_garbage);
    let err = full_error(&meta_garbage, &schema);
    assert!(
        matches!(
            err,
            Error::InvalidArrowMessage {
                field: "arrow.metadata",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.position(), Some(msg + 8));

    // Garbage prefix.
    bytes[msg] = 0x12;
    reseal(&mut bytes);
    let err = full_error(&bytes, &schema);
    assert!(
        matches!(
            err,
            Error::InvalidArrowMessage {
                field: "arrow.prefix",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.position(), Some(msg));
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
    assert!(
        matches!(
            err,
            Error::Arrow {
                field: "arrow.body",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.position(), Some(body_start));
}

#[test]
fn decoding_with_the_wrong_schema_is_an_error() {
    let (bytes, _) = sample(true);
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
fn zero_row_header_only_batch_is_valid_and_a_missing_message_is_not() {
    let rb = common::make_batch(&common::fixed_columns(), 0, 1);
    let bytes = encode_batch(&rb, Some(&[]), BatchMeta::new(3)).unwrap();
    assert_eq!(bytes.len(), HEADER_LEN);
    let view = BatchView::new(bytes.as_slice()).unwrap();
    view.validate().unwrap();
    assert_eq!((view.record_count(), view.last_offset_delta()), (0, -1));
    let (decoded, changes) = view.decode(&rb.schema()).unwrap();
    assert_eq!(decoded.num_rows(), 0);
    assert_eq!(changes, Some(vec![]));

    // A header claiming rows but carrying no message.
    let mut bad = bytes.clone();
    set_i32(&mut bad, pos::RECORD_COUNT, 1);
    set_i32(&mut bad, pos::LAST_OFFSET_DELTA, 0);
    bad[pos::ATTRIBUTES] = 1;
    reseal(&mut bad);
    let err = full_error(&bad, &rb.schema());
    assert!(
        matches!(
            err,
            Error::Truncated {
                field: "arrow.prefix",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.position(), Some(HEADER_LEN));
}

#[test]
fn empty_projection_is_an_error() {
    let (_, schema) = sample(true);
    assert!(matches!(
        Projection::new(schema.clone(), &[]),
        Err(Error::EmptyProjection)
    ));
    let none: [&str; 0] = [];
    assert!(matches!(
        Projection::by_names(schema, &none),
        Err(Error::EmptyProjection)
    ));
}

#[test]
fn unknown_column_and_index_out_of_range_are_errors() {
    let (_, schema) = sample(true);
    let err = Projection::by_names(schema.clone(), &["c0", "nope"]).unwrap_err();
    assert!(
        matches!(&err, Error::UnknownColumn { name, .. } if name == "nope"),
        "{err}"
    );
    let err = Projection::new(schema.clone(), &[0, 7]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ColumnOutOfRange {
                index: 7,
                columns: 7
            }
        ),
        "{err}"
    );
    let err = Projection::new(schema, &[1, 1]).unwrap_err();
    assert!(matches!(err, Error::DuplicateColumn { index: 1 }), "{err}");
}

#[test]
fn projection_of_a_corrupt_batch_fails_and_leaves_output_untouched() {
    let (mut bytes, schema) = sample(true);
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let mut projection = Projection::new(schema, &[0]).unwrap();
    let mut out = vec![1, 2, 3];
    let err = projection
        .project_into(&BatchView::new(bytes.as_slice()).unwrap(), &mut out)
        .unwrap_err();
    assert!(matches!(err, Error::CrcMismatch { .. }), "{err}");
    assert_eq!(out, [1, 2, 3]);
}

#[test]
fn in_place_writes_on_a_short_buffer_are_errors() {
    let mut short = [0u8; 20];
    assert!(matches!(
        mink_codec::write_leader_epoch(&mut short, 1),
        Err(Error::Truncated { .. })
    ));
    assert!(mink_codec::write_base_offset(&mut short, 1).is_err());
    assert!(mink_codec::write_commit_timestamp(&mut short, 1).is_err());
}
