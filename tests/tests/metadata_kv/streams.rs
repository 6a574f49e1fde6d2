//! The metadata log's stream records: opening a stream fences the previous epoch; commits add and
//! remove objects, advance offsets and update the index, or change nothing when rejected; trims
//! move the start forward only.

use std::sync::Arc;

use bytes::Bytes;
use mink_metadata::{
    CommitRequest, Compare, ErrorKind, MetaError, MetaKvExt, Metadata, MetadataOptions, ObjectKind,
    ObjectRecord, Op, StreamRange, StreamState, Txn, keys,
};

use super::Fixture;

pub(super) fn object(id: u64, kind: ObjectKind, ranges: &[(u64, u64, u64)]) -> ObjectRecord {
    let mut position = 0;
    let ranges = ranges
        .iter()
        .map(|&(stream_id, start_offset, end_offset)| {
            let len = (end_offset - start_offset) * 10;
            let r = StreamRange {
                stream_id,
                start_offset,
                end_offset,
                position,
                len,
            };
            position += len;
            r
        })
        .collect();
    ObjectRecord {
        id,
        kind,
        key: format!("objects/{id}"),
        size: position,
        ranges,
    }
}

pub(super) async fn open_stream_fences_the_previous_epoch(f: Fixture) {
    let node1 = Metadata::open(Arc::clone(&f.kv), MetadataOptions::default())
        .await
        .unwrap();
    let node2 = Metadata::open(Arc::clone(&f.other), MetadataOptions::default())
        .await
        .unwrap();
    let s = node1.create_stream().await.unwrap();
    assert_eq!((s.epoch, s.state), (0, StreamState::Closed));
    let first = node1.open_stream(s.id, "n1").await.unwrap();
    assert_eq!(
        (first.epoch, first.owner.as_deref(), first.state),
        (1, Some("n1"), StreamState::Open)
    );
    let o1 = node1.allocate_object_id().await.unwrap();
    node1
        .commit(CommitRequest {
            stream_epochs: vec![(s.id, 1)],
            add_objects: vec![object(o1, ObjectKind::Stream, &[(s.id, 0, 10)])],
            advance: vec![(s.id, 10)],
            ..Default::default()
        })
        .await
        .unwrap();
    // Node 2 takes over: epoch 2. Node 1's next commit is fenced and changes nothing.
    let second = node2.open_stream(s.id, "n2").await.unwrap();
    assert_eq!(
        (second.epoch, second.owner.as_deref(), second.end_offset),
        (2, Some("n2"), 10)
    );
    let o2 = node1.allocate_object_id().await.unwrap();
    let err = node1
        .commit(CommitRequest {
            stream_epochs: vec![(s.id, 1)],
            add_objects: vec![object(o2, ObjectKind::Stream, &[(s.id, 10, 20)])],
            advance: vec![(s.id, 20)],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            MetaError::Fenced {
                epoch: 1,
                current_epoch: 2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        node2.get_stream(s.id).await.unwrap().unwrap().end_offset,
        10
    );
    assert_eq!(node2.get_object(o2).await.unwrap(), None);
    assert!(node1.index().object(o2).is_none());
    // The stale owner cannot trim or close either; the new one can.
    assert_eq!(
        node1.trim_stream(s.id, 1, 5).await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
    assert_eq!(
        node1.close_stream(s.id, 1).await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
    let closed = node2.close_stream(s.id, 2).await.unwrap();
    assert_eq!(closed.state, StreamState::Closed);
    // A closed stream takes no commits even at its epoch.
    let err = node2
        .commit(CommitRequest {
            stream_epochs: vec![(s.id, 2)],
            advance: vec![(s.id, 11)],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(err, MetaError::StreamNotOpen { .. }), "{err}");
    // Reopen and delete; a deleted stream never opens again.
    let third = node1.open_stream(s.id, "n1").await.unwrap();
    assert_eq!(third.epoch, 3);
    node1.delete_stream(s.id, 3).await.unwrap();
    assert_eq!(
        node2.open_stream(s.id, "n2").await.unwrap_err().kind(),
        ErrorKind::Conflict
    );
    assert_eq!(
        node1.open_stream(u64::MAX, "n1").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

pub(super) async fn commit_adds_removes_advances_and_indexes(f: Fixture) {
    let meta = Metadata::open(Arc::clone(&f.kv), MetadataOptions::default())
        .await
        .unwrap();
    let a = meta.create_stream().await.unwrap().id;
    let c = meta.create_stream().await.unwrap().id;
    let ea = meta.open_stream(a, "n1").await.unwrap().epoch;
    let ec = meta.open_stream(c, "n1").await.unwrap().epoch;
    // Two WAL objects, each holding both streams.
    let w1 = meta.allocate_object_id().await.unwrap();
    let w2 = meta.allocate_object_id().await.unwrap();
    let out = meta
        .commit(CommitRequest {
            stream_epochs: vec![(a, ea), (c, ec)],
            add_objects: vec![
                object(w1, ObjectKind::Wal, &[(a, 0, 100), (c, 0, 5)]),
                object(w2, ObjectKind::Wal, &[(a, 100, 250), (c, 5, 9)]),
            ],
            advance: vec![(a, 250), (c, 9)],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        out.streams.iter().map(|s| s.end_offset).collect::<Vec<_>>(),
        vec![250, 9]
    );
    let cov = meta.index().covering(a, 120, 10);
    assert_eq!(
        cov.iter().map(|r| r.object.id).collect::<Vec<_>>(),
        vec![w2]
    );
    let cov = meta.index().covering(a, 0, 10);
    assert_eq!(
        cov.iter().map(|r| r.object.id).collect::<Vec<_>>(),
        vec![w1, w2]
    );
    assert_eq!(
        cov[1].range,
        StreamRange {
            stream_id: a,
            start_offset: 100,
            end_offset: 250,
            position: 0,
            len: 1500
        }
    );
    assert!(
        meta.index().covering(a, 250, 10).is_empty(),
        "nothing committed past the end"
    );
    // Compaction: one stream-set object replaces both WAL objects, atomically.
    let s1 = meta.allocate_object_id().await.unwrap();
    meta.commit(CommitRequest {
        stream_epochs: vec![(a, ea), (c, ec)],
        add_objects: vec![object(s1, ObjectKind::StreamSet, &[(a, 0, 250), (c, 0, 9)])],
        remove_objects: vec![w1, w2],
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(meta.get_object(w1).await.unwrap(), None);
    assert_eq!(
        meta.get_object(s1).await.unwrap().unwrap().kind,
        ObjectKind::StreamSet
    );
    for (stream, from) in [(a, 0), (a, 249), (c, 3)] {
        let ids: Vec<u64> = meta
            .index()
            .covering(stream, from, 10)
            .iter()
            .map(|r| r.object.id)
            .collect();
        assert_eq!(ids, vec![s1], "stream {stream} from {from}");
    }
    assert_eq!(meta.list_objects().await.unwrap().len(), 1);
    assert_eq!(meta.get_stream(a).await.unwrap().unwrap().end_offset, 250);
}

pub(super) async fn rejected_commits_change_nothing(f: Fixture) {
    let meta = Metadata::open(Arc::clone(&f.kv), MetadataOptions::default())
        .await
        .unwrap();
    let s = meta.create_stream().await.unwrap().id;
    let e = meta.open_stream(s, "n1").await.unwrap().epoch;
    let o1 = meta.allocate_object_id().await.unwrap();
    meta.commit(CommitRequest {
        stream_epochs: vec![(s, e)],
        add_objects: vec![object(o1, ObjectKind::Stream, &[(s, 0, 10)])],
        advance: vec![(s, 10)],
        ..Default::default()
    })
    .await
    .unwrap();
    let before = f.kv.scan_all("mink/", 100).await.unwrap();
    let o2 = meta.allocate_object_id().await.unwrap();
    let bad = [
        // The end moving backwards.
        CommitRequest {
            stream_epochs: vec![(s, e)],
            advance: vec![(s, 5)],
            ..Default::default()
        },
        // Removing an object that does not exist, alongside a good addition.
        CommitRequest {
            stream_epochs: vec![(s, e)],
            add_objects: vec![object(o2, ObjectKind::Stream, &[(s, 10, 20)])],
            remove_objects: vec![u64::MAX - 1],
            advance: vec![(s, 20)],
            ..Default::default()
        },
        // Re-adding an existing object id.
        CommitRequest {
            stream_epochs: vec![(s, e)],
            add_objects: vec![object(o1, ObjectKind::Stream, &[(s, 10, 20)])],
            advance: vec![(s, 20)],
            ..Default::default()
        },
        // Advancing a stream it does not fence.
        CommitRequest {
            stream_epochs: vec![],
            advance: vec![(s, 20)],
            ..Default::default()
        },
        // A range past the object's size.
        CommitRequest {
            stream_epochs: vec![(s, e)],
            add_objects: vec![ObjectRecord {
                size: 1,
                ..object(o2, ObjectKind::Stream, &[(s, 10, 20)])
            }],
            ..Default::default()
        },
        // An unknown stream.
        CommitRequest {
            stream_epochs: vec![(u64::MAX, 1)],
            ..Default::default()
        },
    ];
    for (i, request) in bad.into_iter().enumerate() {
        let err = meta
            .commit(request)
            .await
            .expect_err("bad commit must fail");
        assert_ne!(err.kind(), ErrorKind::Unavailable, "case {i}: {err}");
        let after = f.kv.scan_all("mink/", 100).await.unwrap();
        assert_eq!(after, before, "case {i} ({err}) changed the store");
    }
    assert!(meta.index().object(o2).is_none());
}

/// A stream created open, with the caller's writes in the same transaction: the record is what
/// create and open leave; a compare that fails writes nothing, neither the stream nor the
/// caller's keys; a caller writing the stream's own key is refused.
pub(super) async fn create_open_stream_writes_the_stream_with_the_callers_keys_or_nothing(
    f: Fixture,
) {
    let meta = Metadata::open(Arc::clone(&f.kv), MetadataOptions::default())
        .await
        .unwrap();
    let entry = |id: u64| Txn {
        compares: vec![Compare::absent("mink/test/entry")],
        on_success: vec![Op::put("mink/test/entry", Bytes::from(id.to_string()))],
    };
    let created = meta
        .create_open_stream("n1", entry)
        .await
        .unwrap()
        .expect("the entry is absent");
    assert_eq!(
        (created.epoch, created.owner.as_deref(), created.state),
        (1, Some("n1"), StreamState::Open)
    );
    assert_eq!((created.start_offset, created.end_offset), (0, 0));
    assert_eq!(
        meta.get_stream(created.id).await.unwrap(),
        Some(created.clone())
    );
    let written = f.kv.get("mink/test/entry").await.unwrap().unwrap();
    assert_eq!(written.value, Bytes::from(created.id.to_string()));
    // The stream is like any other open one: a later open fences it.
    let reopened = meta.open_stream(created.id, "n2").await.unwrap();
    assert_eq!((reopened.epoch, reopened.owner.as_deref()), (2, Some("n2")));

    // The entry is there now: nothing is written, and the next stream gets another id.
    let streams = meta.list_streams().await.unwrap();
    assert_eq!(meta.create_open_stream("n1", entry).await.unwrap(), None);
    assert_eq!(meta.list_streams().await.unwrap(), streams);
    assert_eq!(
        f.kv.get("mink/test/entry").await.unwrap().unwrap().version,
        written.version
    );
    let other = meta
        .create_open_stream("n1", |_| Txn::default())
        .await
        .unwrap()
        .expect("no compares");
    assert!(
        other.id > created.id + 1,
        "{} after {}",
        other.id,
        created.id
    );

    // The caller may not write the stream's own record.
    let err = meta
        .create_open_stream("n1", |id| Txn {
            compares: vec![],
            on_success: vec![Op::put(keys::stream(id), Bytes::from_static(b"x"))],
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
    assert_eq!(meta.list_streams().await.unwrap().len(), 2);
}

pub(super) async fn trim_moves_the_start_forward_only(f: Fixture) {
    let meta = Metadata::open(Arc::clone(&f.kv), MetadataOptions::default())
        .await
        .unwrap();
    let s = meta.create_stream().await.unwrap().id;
    let e = meta.open_stream(s, "n1").await.unwrap().epoch;
    meta.commit(CommitRequest {
        stream_epochs: vec![(s, e)],
        advance: vec![(s, 100)],
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(meta.trim_stream(s, e, 40).await.unwrap().start_offset, 40);
    assert_eq!(
        meta.trim_stream(s, e, 10).await.unwrap().start_offset,
        40,
        "never backwards"
    );
    assert_eq!(
        meta.trim_stream(s, e, 101).await.unwrap_err().kind(),
        ErrorKind::Invalid
    );
    let rec = meta.get_stream(s).await.unwrap().unwrap();
    assert_eq!((rec.start_offset, rec.end_offset), (40, 100));
}
