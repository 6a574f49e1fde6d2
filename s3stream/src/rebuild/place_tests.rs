use super::*;

fn stream(id: u64, start: u64, end: u64, epoch: u64) -> StreamRecord {
    StreamRecord {
        id,
        epoch,
        owner: Some("n1~1".to_owned()),
        start_offset: start,
        end_offset: end,
        state: StreamState::Open,
    }
}

fn streams(list: &[StreamRecord]) -> BTreeMap<u64, StreamRecord> {
    list.iter().map(|s| (s.id, s.clone())).collect()
}

/// A known record holding `ranges` of `(stream, start, end)`.
fn known(id: u64, ranges: &[(u64, u64, u64)]) -> ObjectRecord {
    ObjectRecord {
        id,
        kind: ObjectKind::StreamSet,
        key: format!("data/{id:016x}"),
        size: 1000,
        ranges: ranges
            .iter()
            .enumerate()
            .map(|(i, (stream_id, start, end))| StreamRange {
                stream_id: *stream_id,
                start_offset: *start,
                end_offset: *end,
                position: i as u64 * 100,
                len: 100,
            })
            .collect(),
    }
}

/// A found object of blocks `(stream, start, end, epoch)` of 100 bytes each, in order.
fn found(key: &str, blocks: &[(u64, u64, u64, Option<u64>)]) -> FoundObject {
    FoundObject {
        key: key.to_owned(),
        size: blocks.len() as u64 * 100 + 64,
        wal: blocks.iter().any(|b| b.3.is_some()),
        blocks: blocks
            .iter()
            .enumerate()
            .map(|(i, (stream_id, start, end, epoch))| {
                (
                    BlockEntry {
                        stream_id: *stream_id,
                        start_offset: *start,
                        end_offset: *end,
                        position: i as u64 * 100,
                        len: 100,
                        batch_count: 1,
                    },
                    *epoch,
                )
            })
            .collect(),
    }
}

/// The placed ranges as `(object, stream, start, end, position, len)`.
fn placed(p: &Placement) -> Vec<(usize, u64, u64, u64, u64, u64)> {
    p.ranges
        .iter()
        .flat_map(|(o, ranges)| {
            ranges.iter().map(move |r| {
                (
                    *o,
                    r.stream_id,
                    r.start_offset,
                    r.end_offset,
                    r.position,
                    r.len,
                )
            })
        })
        .collect()
}

#[test]
fn a_wal_tail_written_after_the_snapshot_extends_the_stream_and_raises_its_epoch() {
    let s = streams(&[stream(1, 0, 10, 1)]);
    let known = [known(5, &[(1, 0, 10)])];
    let wal = [found(
        "wal/n1~2/0000000000000009",
        &[(1, 10, 15, Some(2)), (1, 15, 20, Some(2))],
    )];
    let p = place(&s, &known, &wal);
    assert_eq!(placed(&p), vec![(0, 1, 10, 20, 0, 200)]);
    assert_eq!(
        p.streams,
        vec![StreamRecord {
            end_offset: 20,
            epoch: 2,
            ..stream(1, 0, 10, 1)
        }]
    );
    assert!(p.holes.is_empty() && p.unknown_streams.is_empty());
    let records = records(&wal, &p, &mut [77].into_iter());
    assert_eq!(records.len(), 1);
    assert_eq!(
        (records[0].id, records[0].kind),
        (77, ObjectKind::StreamSet)
    );
    records[0].validate().unwrap();
}

#[test]
fn a_merge_after_the_snapshot_fills_the_place_of_the_objects_it_replaced() {
    // Known [0,10) present; [10,20) and [20,30) were merged into one object and deleted.
    let s = streams(&[stream(1, 0, 30, 1)]);
    let known = [known(5, &[(1, 0, 10)])];
    let merged = [found(
        "data/00000000000000aa",
        &[(1, 10, 20, None), (1, 20, 30, None)],
    )];
    let p = place(&s, &known, &merged);
    assert_eq!(placed(&p), vec![(0, 1, 10, 30, 0, 200)]);
    assert!(p.streams.is_empty(), "the end was already 30");
    assert!(p.holes.is_empty());
    assert_eq!(merged[0].kind(), ObjectKind::Stream);
}

#[test]
fn known_ranges_win_and_a_merge_that_overlaps_them_is_left_unplaced() {
    let s = streams(&[stream(1, 0, 30, 1)]);
    let known = [known(5, &[(1, 0, 10)]), known(6, &[(1, 10, 30)])];
    let merged = [found("data/00000000000000aa", &[(1, 0, 30, None)])];
    let p = place(&s, &known, &merged);
    assert!(placed(&p).is_empty());
    let left: Vec<&str> = unplaced(&merged, &p).map(|f| f.key.as_str()).collect();
    assert_eq!(left, ["data/00000000000000aa"]);
}

#[test]
fn a_fenced_owners_late_wal_blocks_are_never_placed() {
    // Epoch 3 wrote [10,14) after epoch 4 took the stream at 10.
    let s = streams(&[stream(1, 0, 10, 2)]);
    let known = [known(5, &[(1, 0, 10)])];
    let objects = [
        found(
            "wal/n1~1/0000000000000001",
            &[(1, 10, 14, Some(3)), (1, 14, 30, Some(3))],
        ),
        found("wal/n2~1/0000000000000002", &[(1, 10, 12, Some(4))]),
        found("wal/n2~1/0000000000000003", &[(1, 12, 16, Some(4))]),
    ];
    let p = place(&s, &known, &objects);
    assert_eq!(
        placed(&p),
        vec![(1, 1, 10, 12, 0, 100), (2, 1, 12, 16, 0, 100)]
    );
    assert_eq!(p.streams[0].end_offset, 16);
    assert_eq!(p.streams[0].epoch, 4);
    assert!(p.holes.is_empty(), "{:?}", p.holes);
}

#[test]
fn a_committed_block_is_preferred_to_a_wal_block_at_the_same_offset() {
    let s = streams(&[stream(1, 0, 0, 1)]);
    let objects = [
        found("wal/n1~1/0000000000000001", &[(1, 0, 10, Some(1))]),
        found("data/0000000000000002", &[(1, 0, 10, None)]),
    ];
    let p = place(&s, &[], &objects);
    assert_eq!(placed(&p), vec![(1, 1, 0, 10, 0, 100)]);
    assert_eq!(p.streams[0].end_offset, 10);
}

#[test]
fn offsets_no_object_holds_are_reported_as_holes_and_nothing_beyond_is_placed() {
    let s = streams(&[stream(1, 0, 10, 1), stream(2, 0, 40, 1)]);
    let known = [known(5, &[(1, 0, 10), (2, 0, 10)])];
    let objects = [found("data/0000000000000002", &[(1, 20, 30, None)])];
    let p = place(&s, &known, &objects);
    assert!(placed(&p).is_empty());
    assert_eq!(
        p.holes,
        vec![
            Hole {
                stream_id: 1,
                from: 10,
                to: 30
            },
            Hole {
                stream_id: 2,
                from: 10,
                to: 40
            }
        ]
    );
    assert!(p.streams.is_empty(), "ends never move back");
}

#[test]
fn streams_without_a_record_are_reported_and_deleted_ones_skipped() {
    let mut deleted = stream(2, 0, 0, 1);
    deleted.state = StreamState::Deleted;
    let s = streams(&[deleted]);
    let objects = [found(
        "data/0000000000000002",
        &[(2, 0, 10, None), (9, 0, 5, None)],
    )];
    let p = place(&s, &[], &objects);
    assert!(placed(&p).is_empty());
    assert_eq!(p.unknown_streams, BTreeMap::from([(9, (1, 100))]));
    assert!(p.streams.is_empty());
}

#[test]
fn an_object_gets_one_range_per_stream_even_when_the_chain_comes_back_to_it() {
    // Object 0 holds [0,5) then [10,15); object 1 holds [5,10): the chain 0 -> 1 -> 0 cannot
    // give object 0 one range, so the chain stops at 10.
    let s = streams(&[stream(1, 0, 0, 1)]);
    let objects = [
        found(
            "wal/n1~1/0000000000000001",
            &[(1, 0, 5, Some(1)), (1, 10, 15, Some(2))],
        ),
        found("wal/n1~1/0000000000000002", &[(1, 5, 10, Some(2))]),
    ];
    let p = place(&s, &[], &objects);
    assert_eq!(
        placed(&p),
        vec![(0, 1, 0, 5, 0, 100), (1, 1, 5, 10, 0, 100)]
    );
    assert_eq!(
        p.holes,
        vec![Hole {
            stream_id: 1,
            from: 10,
            to: 15
        }]
    );
    assert_eq!(p.streams[0].end_offset, 10);
}

#[test]
fn a_log_start_with_nothing_left_below_moves_up_to_the_lowest_offset_found() {
    let s = streams(&[stream(1, 0, 20, 1)]);
    let known = [known(5, &[(1, 10, 20)])];
    let p = place(&s, &known, &[]);
    assert_eq!(p.starts_moved, vec![(1, 0, 10)]);
    assert_eq!(p.streams[0].start_offset, 10);
}
