use bytes::Bytes;
use mink_metadata::StreamState;

use super::*;
use crate::format::wal;

/// A record of `stream` at `epoch` covering `base..base + count`.
fn record(stream_id: u64, epoch: u64, base_offset: u64, count: u32) -> WalRecord {
    WalRecord {
        stream_id,
        epoch,
        base_offset,
        count,
        payload: Bytes::from(vec![stream_id as u8; 16]),
        payload_crc: None,
    }
}

/// WAL object `id` holding `records`, as replay reads it back.
fn object(id: u64, records: Vec<WalRecord>) -> ReplayedObject {
    let (bytes, _) = wal::encode(records, 1 << 20);
    let (records, spans) = wal::decode_with_spans(&bytes).expect("decodes");
    ReplayedObject {
        id,
        key: format!("wal/n/{id:016x}"),
        size: bytes.len() as u64,
        records,
        spans,
    }
}

/// Open streams: `(id, epoch, committed end)`.
fn streams(open: &[(u64, u64, u64)]) -> BTreeMap<u64, StreamRecord> {
    open.iter()
        .map(|&(id, epoch, end)| {
            let record = StreamRecord {
                id,
                epoch,
                owner: Some("n".into()),
                start_offset: 0,
                end_offset: end,
                state: StreamState::Open,
            };
            (id, record)
        })
        .collect()
}

/// The adopted objects' places and ranges as `(place, stream, start, end)`.
fn adopted(adoption: &Adoption) -> Vec<(usize, u64, u64, u64)> {
    adoption
        .objects
        .iter()
        .flat_map(|(at, ranges)| {
            ranges
                .iter()
                .map(|r| (*at, r.stream_id, r.start_offset, r.end_offset))
        })
        .collect()
}

/// Each round's parts as `(stream, first offset, end)`.
fn rounds(adoption: &Adoption) -> Vec<Vec<(u64, u64, u64)>> {
    adoption
        .rounds
        .iter()
        .map(|round| {
            round
                .iter()
                .map(|p| {
                    let first = p.batches.first().map_or(0, |b| b.batch.base_offset);
                    let end = p.batches.last().map_or(0, |b| b.batch.end_offset());
                    (p.stream_id, first, end)
                })
                .collect()
        })
        .collect()
}

#[test]
fn objects_whose_records_are_all_kept_are_adopted_and_nothing_is_written() {
    let objects = vec![
        object(1, vec![record(1, 3, 10, 2), record(2, 1, 0, 1)]),
        object(2, vec![record(1, 3, 12, 2), record(2, 1, 1, 4)]),
    ];
    let kept = keep(&objects, &streams(&[(1, 3, 10), (2, 1, 0)]));
    assert_eq!(kept[&1].to(), 14);
    assert_eq!(kept[&2].to(), 5);
    let adoption = adopt(&objects, &kept).expect("adopted");
    assert_eq!(
        adopted(&adoption),
        vec![(0, 1, 10, 12), (0, 2, 0, 1), (1, 1, 12, 14), (1, 2, 1, 5)]
    );
    assert!(adoption.rounds.is_empty());
}

#[test]
fn an_object_holding_records_past_a_gap_is_written_anew_without_them() {
    // Stream 1's records 2..4 were in a WAL object that never landed.
    let objects = vec![
        object(1, vec![record(1, 1, 0, 2), record(2, 1, 0, 2)]),
        object(3, vec![record(1, 1, 4, 2), record(2, 1, 2, 2)]),
    ];
    let kept = keep(&objects, &streams(&[(1, 1, 0), (2, 1, 0)]));
    assert_eq!(kept[&1].to(), 2, "stream 1 stops at its gap");
    let adoption = adopt(&objects, &kept).expect("the first object is adopted");
    assert_eq!(adopted(&adoption), vec![(0, 1, 0, 2), (0, 2, 0, 2)]);
    assert_eq!(rounds(&adoption), vec![vec![(2, 2, 4)]]);
}

#[test]
fn an_object_straddling_a_streams_committed_end_is_not_adopted() {
    let objects = vec![object(1, vec![record(1, 1, 0, 4)])];
    let kept = keep(&objects, &streams(&[(1, 1, 2)]));
    assert!(
        kept[&1].batches.is_empty(),
        "the record starts below the end"
    );
    assert!(adopt(&objects, &kept).is_none());

    let objects = vec![object(1, vec![record(1, 1, 0, 2), record(1, 1, 2, 2)])];
    let kept = keep(&objects, &streams(&[(1, 1, 2)]));
    assert!(
        adopt(&objects, &kept).is_none(),
        "one span covers committed and kept offsets"
    );
}

#[test]
fn spans_of_other_epochs_committed_offsets_and_streams_not_open_do_not_stop_adoption() {
    let objects = vec![object(
        1,
        vec![
            record(1, 1, 0, 3),
            record(1, 2, 3, 2),
            record(4, 2, 0, 2),
            record(9, 1, 0, 2),
        ],
    )];
    let mut open = streams(&[(1, 2, 3), (4, 2, 5)]);
    open.insert(9, StreamRecord::new(9));
    let kept = keep(&objects, &open);
    assert!(!kept.contains_key(&9), "a closed stream keeps nothing");
    let adoption = adopt(&objects, &kept).expect("adopted");
    assert_eq!(adopted(&adoption), vec![(0, 1, 3, 5)]);
    assert!(adoption.rounds.is_empty());
}

#[test]
fn runs_left_between_adopted_objects_are_written_in_separate_rounds() {
    // Stream 2 has a gap before everything the WAL holds of it, so the objects that hold it
    // are not adopted; stream 1's records in them are written anew, one run per round.
    let objects = vec![
        object(1, vec![record(1, 1, 0, 2), record(2, 1, 7, 1)]),
        object(2, vec![record(1, 1, 2, 2)]),
        object(3, vec![record(1, 1, 4, 2), record(2, 1, 8, 1)]),
    ];
    let kept = keep(&objects, &streams(&[(1, 1, 0), (2, 1, 5)]));
    let adoption = adopt(&objects, &kept).expect("the middle object is adopted");
    assert_eq!(adopted(&adoption), vec![(1, 1, 2, 4)]);
    assert_eq!(rounds(&adoption), vec![vec![(1, 0, 2)], vec![(1, 4, 6)]]);
}

#[test]
fn the_same_records_in_two_objects_adopt_nothing() {
    let objects = vec![
        object(1, vec![record(1, 1, 0, 2)]),
        object(2, vec![record(1, 1, 0, 2)]),
    ];
    let kept = keep(&objects, &streams(&[(1, 1, 0)]));
    assert_eq!(kept[&1].to(), 2);
    assert!(adopt(&objects, &kept).is_none());
}
