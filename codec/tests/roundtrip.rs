//! Property tests: build -> view -> validate -> decode round trips, in-place header writes, projection.

mod common;

use arrow_array::RecordBatch;
use bytes::Bytes;
use common::{arb_batch, change_type};
use mink_codec::{
    BatchMeta, BatchView, ChangeType, Encoder, HEADER_LEN, Projection, batches, encode_batch,
    write_append_fields,
};
use proptest::prelude::*;

fn arb_changes(rows: usize) -> impl Strategy<Value = Option<Vec<ChangeType>>> {
    prop_oneof![
        Just(None),
        prop::collection::vec(change_type(), rows..=rows).prop_map(Some)
    ]
}

fn arb_input() -> impl Strategy<Value = (RecordBatch, Option<Vec<ChangeType>>, BatchMeta)> {
    arb_batch().prop_flat_map(|rb| {
        let rows = rb.num_rows();
        (
            Just(rb),
            arb_changes(rows),
            any::<i16>(),
            prop_oneof![
                Just((-1i64, -1i32, false)),
                (0i64..i64::MAX, 0i32..i32::MAX, any::<bool>())
            ],
        )
            .prop_map(|(rb, ct, schema_id, (w, s, records))| {
                let meta = BatchMeta::new(schema_id).with_writer(w, s);
                (
                    rb,
                    ct,
                    if records {
                        meta.counting_records()
                    } else {
                        meta
                    },
                )
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn build_view_validate_decode_round_trips((rb, ct, meta) in arb_input()) {
        let bytes = encode_batch(&rb, ct.as_deref(), meta).unwrap();
        let view = BatchView::new(bytes.as_slice()).unwrap();
        view.check_header().unwrap();
        view.validate().unwrap();
        prop_assert_eq!(view.len(), bytes.len());
        prop_assert_eq!(view.schema_id(), meta.schema_id);
        prop_assert_eq!(view.writer_id(), meta.writer_id);
        prop_assert_eq!(view.batch_sequence(), meta.batch_sequence);
        prop_assert_eq!(view.counts_records(), meta.counts_records);
        prop_assert_eq!(view.record_count() as usize, rb.num_rows());
        prop_assert_eq!(view.last_offset_delta(), rb.num_rows() as i32 - 1);
        prop_assert_eq!(view.is_append_only(), ct.is_none());
        prop_assert_eq!((view.base_offset(), view.commit_timestamp(), view.leader_epoch()), (0, 0, 0));
        if rb.num_rows() == 0 {
            prop_assert_eq!(bytes.len(), HEADER_LEN, "zero-row batch is header-only");
        }
        let (decoded, changes) = view.decode(rb.schema_ref()).unwrap();
        prop_assert_eq!(&decoded, &rb);
        prop_assert_eq!(&changes, &ct);

        // The same over bytes::Bytes (zero-copy body).
        let shared = Bytes::from(bytes.clone());
        let view = BatchView::new(shared).unwrap();
        let (decoded, changes) = view.decode(rb.schema_ref()).unwrap();
        prop_assert_eq!(&decoded, &rb);
        prop_assert_eq!(&changes, &ct);
    }

    #[test]
    fn many_batches_in_one_buffer_iterate_in_order(inputs in prop::collection::vec(arb_input(), 0..5)) {
        let mut encoder = Encoder::new();
        let mut buf = Vec::new();
        for (rb, ct, meta) in &inputs {
            encoder.encode_into(rb, ct.as_deref(), *meta, &mut buf).unwrap();
        }
        let views: Vec<_> = batches(Bytes::from(buf)).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(views.len(), inputs.len());
        for (view, (rb, ct, _)) in views.iter().zip(&inputs) {
            view.validate().unwrap();
            let (decoded, changes) = view.decode(rb.schema_ref()).unwrap();
            prop_assert_eq!(&decoded, rb);
            prop_assert_eq!(&changes, ct);
        }
    }

    #[test]
    fn in_place_header_writes_keep_the_batch_valid(
        (rb, ct, meta) in arb_input(),
        base in any::<i64>(), ts in any::<i64>(), epoch in any::<i32>(),
    ) {
        let mut bytes = encode_batch(&rb, ct.as_deref(), meta).unwrap();
        write_append_fields(&mut bytes, base, ts, epoch).unwrap();
        let view = BatchView::new(bytes.as_slice()).unwrap();
        view.validate().unwrap();
        prop_assert_eq!(view.base_offset(), base);
        prop_assert_eq!(view.commit_timestamp(), ts);
        prop_assert_eq!(view.leader_epoch(), epoch);
        prop_assert_eq!(view.next_offset(), base.saturating_add(rb.num_rows() as i64));
        let (decoded, _) = view.decode(rb.schema_ref()).unwrap();
        prop_assert_eq!(&decoded, &rb);
    }

    #[test]
    fn projection_keeps_exactly_the_chosen_columns(
        ((rb, ct, meta), picks) in arb_input().prop_flat_map(|input| {
            let n = input.0.num_columns();
            (Just(input), prop::sample::subsequence((0..n).collect::<Vec<_>>(), 1..=n).prop_shuffle())
        }),
        base in any::<i64>(),
    ) {
        let mut bytes = encode_batch(&rb, ct.as_deref(), meta).unwrap();
        write_append_fields(&mut bytes, base, 77, 3).unwrap();
        let source = BatchView::new(bytes.as_slice()).unwrap();
        let mut projection = Projection::new(rb.schema(), &picks).unwrap();
        let projected = projection.project(&source).unwrap();
        let view = BatchView::new(projected.as_slice()).unwrap();
        view.validate().unwrap();
        let (decoded, changes) = view.decode(projection.projected_schema()).unwrap();
        prop_assert_eq!(decoded, rb.project(&picks).unwrap());
        prop_assert_eq!(changes, ct);
        let h = view.header();
        let s = source.header();
        prop_assert_eq!(
            (h.base_offset, h.commit_timestamp, h.leader_epoch, h.schema_id, h.attributes,
             h.last_offset_delta, h.writer_id, h.batch_sequence, h.record_count),
            (s.base_offset, s.commit_timestamp, s.leader_epoch, s.schema_id, s.attributes,
             s.last_offset_delta, s.writer_id, s.batch_sequence, s.record_count)
        );
        if rb.num_rows() == 0 {
            prop_assert_eq!(projected.len(), HEADER_LEN);
        }
        // By name gives the same bytes.
        let names: Vec<String> = picks.iter().map(|i| rb.schema().field(*i).name().clone()).collect();
        let by_name = Projection::by_names(rb.schema(), &names).unwrap().project(&source).unwrap();
        prop_assert_eq!(by_name, projected);
    }
}

#[test]
fn project_all_rewrites_every_batch_and_keeps_empty_ones() {
    let columns = common::fixed_columns();
    let full = common::make_batch(&columns, 10, 1);
    let empty = common::make_batch(&columns, 0, 2);
    let mut buf = Vec::new();
    let mut encoder = Encoder::new();
    for rb in [&full, &empty, &full] {
        encoder
            .encode_into(rb, None, BatchMeta::new(1), &mut buf)
            .unwrap();
    }
    let mut projection = Projection::by_names(full.schema(), &["c4", "c0"]).unwrap();
    let out = projection.project_all(buf.as_slice()).unwrap();
    let views: Vec<_> = batches(out.as_slice()).collect::<Result<_, _>>().unwrap();
    let counts: Vec<_> = views.iter().map(|v| v.record_count()).collect();
    assert_eq!(counts, [10, 0, 10]);
    assert_eq!(views[1].len(), HEADER_LEN);
    for v in &views {
        let (rb, _) = v.decode(projection.projected_schema()).unwrap();
        assert_eq!(rb.num_columns(), 2);
        assert_eq!(rb.schema().field(0).name(), "c4");
    }
}

#[test]
fn encoder_rejects_change_type_count_that_differs_from_rows() {
    let rb = common::make_batch(&common::fixed_columns(), 3, 9);
    let err = encode_batch(&rb, Some(&[ChangeType::Insert; 2]), BatchMeta::new(0)).unwrap_err();
    assert!(
        matches!(
            err,
            mink_codec::Error::ChangeTypeCount {
                rows: 3,
                change_types: 2
            }
        ),
        "{err}"
    );
}

#[test]
fn decoding_from_bytes_shares_the_buffer_instead_of_copying() {
    use arrow_array::Array;
    let rb = common::make_batch(&[(common::Kind::Int64, false)], 1000, 4);
    let encoded = encode_batch(&rb, None, BatchMeta::new(0)).unwrap();
    let shared = Bytes::from(encoded);
    let range = shared.as_ptr() as usize..shared.as_ptr() as usize + shared.len();
    // The writer aligns the body to 8 bytes from the batch start; the allocation itself is 16-aligned.
    assert_eq!(range.start % 8, 0);
    let (decoded, _) = BatchView::new(shared.clone())
        .unwrap()
        .decode(rb.schema_ref())
        .unwrap();
    let values = decoded.column(0).to_data().buffers()[0].as_ptr() as usize;
    assert!(
        range.contains(&values),
        "Int64 values point into the batch bytes"
    );
    // Over a borrowed slice the body is copied.
    let (copied, _) = BatchView::new(shared.as_ref())
        .unwrap()
        .decode(rb.schema_ref())
        .unwrap();
    let values = copied.column(0).to_data().buffers()[0].as_ptr() as usize;
    assert!(!range.contains(&values));
}

#[test]
fn the_writer_field_carries_an_id_and_an_epoch() {
    use mink_codec::{MAX_WRITER_EPOCH, MAX_WRITER_ID, NO_WRITER_ID, writer_field, writer_parts};
    for (id, epoch) in [
        (0, 0),
        (7, 0),
        (7, 1),
        (MAX_WRITER_ID, MAX_WRITER_EPOCH),
        (1 << 40, 3),
    ] {
        let field = writer_field(id, epoch).unwrap();
        assert!(field >= 0);
        assert_eq!(writer_parts(field), Some((id, epoch)));
    }
    // An id of epoch 0 is the number it always was.
    assert_eq!(writer_field(12345, 0), Some(12345));
    assert_eq!(writer_parts(12345), Some((12345, 0)));
    assert_eq!(writer_parts(NO_WRITER_ID), None);
    assert_eq!(writer_parts(i64::MIN), None);
    assert_eq!(writer_field(MAX_WRITER_ID + 1, 0), None);
    assert_eq!(writer_field(-1, 0), None);
    assert_eq!(writer_field(1, -1), None);
}
