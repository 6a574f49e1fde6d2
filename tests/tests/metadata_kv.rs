//! Conformance suite of the metadata KV and the metadata log: every test runs against every backend
//! (memory, redb in a temporary file, etcd on the server `cargo xtask test` started).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use mink_metadata::value::{FORMAT_VERSION, HEADER_LEN, encode};
use mink_metadata::{
    CasOutcome, CommitRequest, Compare, ErrorKind, EtcdKv, IdAllocator, IdKind, MemoryKv,
    MetaError, MetaKv, MetaKvExt, Metadata, MetadataOptions, ObjectKind, ObjectRecord, Op, RedbKv,
    StreamRange, StreamState, TableRecord, Txn, WalCompacted, WatchEvent, WriterSnapshot, keys,
};

/// One store under test, reachable through two handles: `kv` and `other` (a second connection on
/// etcd, the same store for memory and redb), to play two processes or nodes.
struct Fixture {
    kv: Arc<dyn MetaKv>,
    other: Arc<dyn MetaKv>,
    _dir: Option<tempfile::TempDir>,
}

async fn memory() -> Fixture {
    let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    Fixture {
        other: Arc::clone(&kv),
        kv,
        _dir: None,
    }
}

async fn redb() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let kv = RedbKv::open(dir.path().join("meta.redb")).expect("open redb");
    Fixture {
        other: Arc::new(kv.clone()),
        kv: Arc::new(kv),
        _dir: Some(dir),
    }
}

async fn etcd() -> Fixture {
    let endpoints = mink_tests::etcd_endpoints();
    let prefix = format!("{}/", mink_tests::unique_prefix("metadata"));
    let kv = EtcdKv::connect(&endpoints, &prefix)
        .await
        .expect("connect etcd");
    let other = EtcdKv::connect(&endpoints, &prefix)
        .await
        .expect("connect etcd");
    Fixture {
        kv: Arc::new(kv),
        other: Arc::new(other),
        _dir: None,
    }
}

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        mod memory_backend {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() { super::$test(super::memory().await).await })*
        }
        mod redb_backend {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() { super::$test(super::redb().await).await })*
        }
        mod etcd_backend {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() { super::$test(super::etcd().await).await })*
        }
    };
}

conformance!(
    put_get_delete_track_versions,
    compare_and_swap_needs_the_current_version,
    txn_is_all_or_nothing,
    scan_pages_through_a_prefix_only,
    watch_sees_changes_under_its_prefix_in_order,
    corrupt_and_future_values_are_typed_errors,
    concurrent_allocators_never_repeat_an_id,
    open_stream_fences_the_previous_epoch,
    commit_adds_removes_advances_and_indexes,
    rejected_commits_change_nothing,
    trim_moves_the_start_forward_only,
    writer_snapshots_round_trip,
    tables_and_schema_versions,
    node_registrations_expire,
    wal_registry_finds_uncompacted_wal_objects,
    index_is_rebuilt_on_open_and_follows_other_writers,
);

const WAIT: Duration = Duration::from_secs(10);

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

async fn put_get_delete_track_versions(f: Fixture) {
    let kv = f.kv;
    assert_eq!(kv.get("mink/a").await.unwrap(), None);
    let v1 = kv.put("mink/a", b("one")).await.unwrap();
    assert!(v1 > 0);
    let got = kv.get("mink/a").await.unwrap().unwrap();
    assert_eq!(
        (got.key.as_str(), &got.value[..], got.version),
        ("mink/a", &b"one"[..], v1)
    );
    let v2 = kv.put("mink/a", b("two")).await.unwrap();
    assert!(v2 > v1, "versions grow: {v1} then {v2}");
    let v3 = kv.put("mink/b", b("x")).await.unwrap();
    assert!(v3 > v2, "versions are store-wide revisions");
    assert_eq!(kv.get("mink/a").await.unwrap().unwrap().version, v2);
    // The other handle sees the same store.
    assert_eq!(
        f.other.get("mink/a").await.unwrap().unwrap().value,
        b("two")
    );
    assert!(kv.delete("mink/a").await.unwrap());
    assert!(!kv.delete("mink/a").await.unwrap());
    assert_eq!(kv.get("mink/a").await.unwrap(), None);
    // After a delete, a new put still gets a larger version.
    let v4 = kv.put("mink/a", b("three")).await.unwrap();
    assert!(v4 > v3);
    assert_eq!(kv.get("").await.unwrap_err().kind(), ErrorKind::Invalid);
}

async fn compare_and_swap_needs_the_current_version(f: Fixture) {
    let kv = f.kv;
    let created = kv
        .compare_and_swap("mink/cas", 0, Some(b("v1")))
        .await
        .unwrap();
    let CasOutcome::Swapped { version } = created else {
        panic!("create on absent failed: {created:?}")
    };
    // Creating again (expecting absent) conflicts and reports what is there.
    match kv
        .compare_and_swap("mink/cas", 0, Some(b("other")))
        .await
        .unwrap()
    {
        CasOutcome::Conflict { current: Some(kv) } => {
            assert_eq!((kv.value, kv.version), (b("v1"), version))
        }
        other => panic!("expected conflict, got {other:?}"),
    }
    // A stale version loses, the current one wins.
    let stale = version;
    let CasOutcome::Swapped { version: v2 } = kv
        .compare_and_swap("mink/cas", version, Some(b("v2")))
        .await
        .unwrap()
    else {
        panic!("swap at current version failed")
    };
    assert!(matches!(
        kv.compare_and_swap("mink/cas", stale, Some(b("v3")))
            .await
            .unwrap(),
        CasOutcome::Conflict { .. }
    ));
    assert_eq!(kv.get("mink/cas").await.unwrap().unwrap().value, b("v2"));
    // Delete by CAS.
    assert!(matches!(
        kv.compare_and_swap("mink/cas", v2, None).await.unwrap(),
        CasOutcome::Swapped { .. }
    ));
    assert_eq!(kv.get("mink/cas").await.unwrap(), None);
}

async fn txn_is_all_or_nothing(f: Fixture) {
    let kv = f.kv;
    let va = kv.put("mink/t/a", b("a0")).await.unwrap();
    kv.put("mink/t/gone", b("x")).await.unwrap();
    // One failing compare among several: nothing is applied.
    let failed = kv
        .txn(Txn {
            compares: vec![
                Compare::version("mink/t/a", va),
                Compare::absent("mink/t/gone"),
            ],
            on_success: vec![
                Op::put("mink/t/a", b("a1")),
                Op::put("mink/t/new", b("n")),
                Op::delete("mink/t/gone"),
            ],
        })
        .await
        .unwrap();
    assert!(!failed.succeeded);
    assert_eq!(kv.get("mink/t/a").await.unwrap().unwrap().value, b("a0"));
    assert_eq!(kv.get("mink/t/new").await.unwrap(), None);
    assert!(kv.get("mink/t/gone").await.unwrap().is_some());
    // All compares hold: every op applies at one revision.
    let ok = kv
        .txn(Txn {
            compares: vec![
                Compare::version("mink/t/a", va),
                Compare::absent("mink/t/new"),
            ],
            on_success: vec![
                Op::put("mink/t/a", b("a1")),
                Op::put("mink/t/new", b("n")),
                Op::delete("mink/t/gone"),
            ],
        })
        .await
        .unwrap();
    assert!(ok.succeeded);
    let a = kv.get("mink/t/a").await.unwrap().unwrap();
    let n = kv.get("mink/t/new").await.unwrap().unwrap();
    assert_eq!((a.value, a.version), (b("a1"), ok.revision));
    assert_eq!(n.version, ok.revision);
    assert_eq!(kv.get("mink/t/gone").await.unwrap(), None);
    // Writing one key twice in a transaction is refused, changing nothing.
    let err = kv
        .txn(Txn {
            compares: vec![],
            on_success: vec![Op::put("mink/t/a", b("x")), Op::delete("mink/t/a")],
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert_eq!(kv.get("mink/t/a").await.unwrap().unwrap().value, b("a1"));
}

async fn scan_pages_through_a_prefix_only(f: Fixture) {
    let kv = f.kv;
    for i in 0..25 {
        kv.put(&format!("mink/s/{i:03}"), b(&i.to_string()))
            .await
            .unwrap();
    }
    kv.put("mink/s", b("the prefix itself without slash"))
        .await
        .unwrap();
    kv.put("mink/sa/0", b("neighbour")).await.unwrap();
    kv.put("mink/r/0", b("before")).await.unwrap();
    let page = kv.scan("mink/s/", None, 10).await.unwrap();
    assert_eq!(page.items.len(), 10);
    assert!(page.more);
    assert_eq!(page.items[0].key, "mink/s/000");
    let page2 = kv
        .scan("mink/s/", Some(&page.items[9].key), 10)
        .await
        .unwrap();
    assert_eq!(page2.items[0].key, "mink/s/010");
    let all = kv.scan_all("mink/s/", 7).await.unwrap();
    let keys: Vec<String> = all.iter().map(|kv| kv.key.clone()).collect();
    let expected: Vec<String> = (0..25).map(|i| format!("mink/s/{i:03}")).collect();
    assert_eq!(keys, expected);
    let last = kv.scan("mink/s/", Some("mink/s/024"), 10).await.unwrap();
    assert!(last.items.is_empty() && !last.more);
    let exact = kv.scan("mink/s/", None, 25).await.unwrap();
    assert_eq!(exact.items.len(), 25);
    assert!(!exact.more, "no more keys after exactly `limit` items");
    assert_eq!(
        kv.scan("mink/s/", None, 0).await.unwrap_err().kind(),
        ErrorKind::Invalid
    );
}

async fn next_event(stream: &mut mink_metadata::WatchStream) -> WatchEvent {
    tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("watch event within the timeout")
        .expect("watch still open")
        .expect("watch event, not error")
}

async fn watch_sees_changes_under_its_prefix_in_order(f: Fixture) {
    let mut watch = f.kv.watch_prefix("mink/w/").await.unwrap();
    // A change through the other handle (another node on etcd) is seen too.
    let v1 = f.other.put("mink/w/a", b("1")).await.unwrap();
    f.kv.put("mink/x/outside", b("no")).await.unwrap();
    let out =
        f.kv.txn(Txn {
            compares: vec![],
            on_success: vec![Op::put("mink/w/b", b("2")), Op::delete("mink/w/a")],
        })
        .await
        .unwrap();
    match next_event(&mut watch).await {
        WatchEvent::Put(kv) => assert_eq!(
            (kv.key.as_str(), kv.value, kv.version),
            ("mink/w/a", b("1"), v1)
        ),
        other => panic!("expected put of mink/w/a, got {other:?}"),
    }
    let mut rest = [next_event(&mut watch).await, next_event(&mut watch).await];
    rest.sort_by(|a, b| a.key().cmp(b.key()));
    assert_eq!(
        rest[0],
        WatchEvent::Delete {
            key: "mink/w/a".into(),
            revision: out.revision
        }
    );
    assert!(
        matches!(&rest[1], WatchEvent::Put(kv) if kv.key == "mink/w/b" && kv.version == out.revision)
    );
    // Nothing outside the prefix was delivered.
    f.kv.put("mink/w/c", b("3")).await.unwrap();
    assert_eq!(next_event(&mut watch).await.key(), "mink/w/c");
}

async fn corrupt_and_future_values_are_typed_errors(f: Fixture) {
    let meta = Metadata::open(Arc::clone(&f.kv), MetadataOptions::default())
        .await
        .unwrap();
    let stream = meta.create_stream().await.unwrap();
    let key = keys::stream(stream.id);
    let good = f.kv.get(&key).await.unwrap().unwrap().value;
    let cases: Vec<(&str, Bytes, ErrorKind)> = vec![
        ("empty", Bytes::new(), ErrorKind::Corrupt),
        (
            "garbage",
            b("not a metadata value at all"),
            ErrorKind::Corrupt,
        ),
        (
            "truncated",
            good.slice(..good.len() - 3),
            ErrorKind::Corrupt,
        ),
        (
            "bit flip in body",
            {
                let mut v = good.to_vec();
                let last = v.len() - 2;
                v[last] ^= 0x20;
                Bytes::from(v)
            },
            ErrorKind::Corrupt,
        ),
        (
            "future version",
            {
                let mut v = good.to_vec();
                v[4] = FORMAT_VERSION + 1;
                Bytes::from(v)
            },
            ErrorKind::Corrupt,
        ),
        (
            "wrong kind",
            encode(&WriterSnapshot {
                offset: 1,
                data: b("x"),
            }),
            ErrorKind::Corrupt,
        ),
    ];
    for (what, value, kind) in cases {
        f.kv.put(&key, value).await.unwrap();
        let err = meta.get_stream(stream.id).await.expect_err(what);
        assert_eq!(err.kind(), kind, "{what}: {err}");
        if what == "future version" {
            assert!(
                matches!(err, MetaError::UnknownVersion { version, .. } if version == FORMAT_VERSION + 1)
            );
        }
        // A write through the typed layer fails too and leaves the bad bytes alone.
        assert!(meta.open_stream(stream.id, "n1").await.is_err(), "{what}");
    }
    assert!(good.len() > HEADER_LEN);
    // A corrupt id counter is reported, not overwritten.
    f.kv.put(&IdKind::Writer.key(), b("junk")).await.unwrap();
    assert_eq!(
        meta.allocate_writer_id().await.unwrap_err().kind(),
        ErrorKind::Corrupt
    );
}

async fn concurrent_allocators_never_repeat_an_id(f: Fixture) {
    let mut tasks = Vec::new();
    for i in 0..6 {
        let kv = if i % 2 == 0 {
            Arc::clone(&f.kv)
        } else {
            Arc::clone(&f.other)
        };
        tasks.push(tokio::spawn(async move {
            let alloc = Arc::new(IdAllocator::new(kv, IdKind::Writer, 7));
            let mut inner = Vec::new();
            // Two concurrent users of one allocator, too.
            for _ in 0..2 {
                let alloc = Arc::clone(&alloc);
                inner.push(tokio::spawn(async move {
                    let mut ids = Vec::new();
                    for _ in 0..40 {
                        ids.push(alloc.next().await.unwrap());
                    }
                    ids
                }));
            }
            let mut ids = Vec::new();
            for t in inner {
                ids.extend(t.await.unwrap());
            }
            ids
        }));
    }
    let mut seen = HashSet::new();
    for t in tasks {
        for id in t.await.unwrap() {
            assert!(seen.insert(id), "id {id} handed out twice");
        }
    }
    assert_eq!(seen.len(), 6 * 80);
    // A new allocator after all of them (a restart) continues past every block handed out.
    let max = *seen.iter().max().unwrap();
    let fresh = IdAllocator::new(Arc::clone(&f.kv), IdKind::Writer, 7)
        .next()
        .await
        .unwrap();
    assert!(fresh > max, "fresh id {fresh} must exceed {max}");
    // Kinds are independent spaces.
    let stream_id = IdAllocator::new(f.kv, IdKind::Stream, 7)
        .next()
        .await
        .unwrap();
    assert_eq!(stream_id, 0);
}

fn object(id: u64, kind: ObjectKind, ranges: &[(u64, u64, u64)]) -> ObjectRecord {
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

async fn open_stream_fences_the_previous_epoch(f: Fixture) {
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

async fn commit_adds_removes_advances_and_indexes(f: Fixture) {
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

async fn rejected_commits_change_nothing(f: Fixture) {
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

async fn trim_moves_the_start_forward_only(f: Fixture) {
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

async fn writer_snapshots_round_trip(f: Fixture) {
    let meta = Metadata::open(Arc::clone(&f.kv), MetadataOptions::default())
        .await
        .unwrap();
    assert_eq!(
        meta.get_writer_snapshot("orders", "p0", 3).await.unwrap(),
        None
    );
    let snap = WriterSnapshot {
        offset: 4242,
        data: Bytes::from(vec![0u8, 1, 2, 255, 254]),
    };
    meta.put_writer_snapshot("orders", "p0", 3, &snap)
        .await
        .unwrap();
    assert!(
        f.kv.get("mink/writers/orders/p0/3")
            .await
            .unwrap()
            .is_some(),
        "lives at the spec's key"
    );
    assert_eq!(
        meta.get_writer_snapshot("orders", "p0", 3).await.unwrap(),
        Some(snap.clone())
    );
    assert_eq!(
        meta.get_writer_snapshot("orders", "p0", 4).await.unwrap(),
        None
    );
    let newer = WriterSnapshot {
        offset: 5000,
        data: Bytes::new(),
    };
    meta.put_writer_snapshot("orders", "p0", 3, &newer)
        .await
        .unwrap();
    assert_eq!(
        meta.get_writer_snapshot("orders", "p0", 3).await.unwrap(),
        Some(newer)
    );
    assert!(
        meta.delete_writer_snapshot("orders", "p0", 3)
            .await
            .unwrap()
    );
    assert_eq!(
        meta.get_writer_snapshot("orders", "p0", 3).await.unwrap(),
        None
    );
    assert_eq!(
        meta.put_writer_snapshot("a/b", "p0", 0, &snap)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Invalid
    );
}

async fn tables_and_schema_versions(f: Fixture) {
    let meta = Metadata::open(Arc::clone(&f.kv), MetadataOptions::default())
        .await
        .unwrap();
    let table = TableRecord {
        name: "orders".into(),
        schemas: [(1u16, "{\"fields\":[]}".to_owned())].into(),
        bucket_count: 8,
        partitions: vec!["default".into()],
    };
    meta.create_table(&table).await.unwrap();
    assert_eq!(
        meta.create_table(&table).await.unwrap_err().kind(),
        ErrorKind::Conflict
    );
    let t = meta
        .add_schema("orders", 2, "{\"fields\":[1]}")
        .await
        .unwrap();
    assert_eq!(t.latest_schema_id(), Some(2));
    assert_eq!(
        meta.add_schema("orders", 2, "{\"fields\":[1]}")
            .await
            .unwrap(),
        t,
        "idempotent"
    );
    assert_eq!(
        meta.add_schema("orders", 1, "different")
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Invalid
    );
    assert_eq!(
        meta.get_table("orders")
            .await
            .unwrap()
            .unwrap()
            .schemas
            .len(),
        2
    );
    assert_eq!(meta.list_tables().await.unwrap().len(), 1);
    assert!(meta.delete_table("orders").await.unwrap());
    assert_eq!(meta.get_table("orders").await.unwrap(), None);
}

async fn node_registrations_expire(f: Fixture) {
    let meta = Metadata::open(Arc::clone(&f.kv), MetadataOptions::default())
        .await
        .unwrap();
    let rec = meta
        .register_node("n1", "127.0.0.1:9000", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        rec.lease.is_some(),
        f.kv.backend() == "etcd",
        "leases exactly where the backend has them"
    );
    meta.register_node("n2", "127.0.0.1:9001", Duration::from_secs(30))
        .await
        .unwrap();
    let now = rec.expires_at_ms - 30_000;
    let live: Vec<String> = meta
        .live_nodes(now)
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.node_id)
        .collect();
    assert_eq!(live, vec!["n1", "n2"]);
    // Past the expiry, nodes count as dead unless they heartbeat.
    assert!(meta.live_nodes(rec.expires_at_ms + 1).await.unwrap().len() <= 1);
    let beat = meta
        .heartbeat_node("n1", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(beat.expires_at_ms > rec.expires_at_ms);
    let live: Vec<String> = meta
        .live_nodes(rec.expires_at_ms + 1)
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.node_id)
        .collect();
    assert!(live.contains(&"n1".to_owned()));
    meta.deregister_node("n1").await.unwrap();
    assert_eq!(
        meta.heartbeat_node("n1", Duration::from_secs(1))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}

async fn wal_registry_finds_uncompacted_wal_objects(f: Fixture) {
    let meta = Metadata::open(Arc::clone(&f.kv), MetadataOptions::default())
        .await
        .unwrap();
    let s = meta.create_stream().await.unwrap().id;
    let e = meta.open_stream(s, "n1").await.unwrap().epoch;
    let r1 = meta.reserve_wal_ids("n1", 4).await.unwrap();
    let r2 = meta.reserve_wal_ids("n1", 4).await.unwrap();
    let other = meta.reserve_wal_ids("n2", 4).await.unwrap();
    assert!(r1.end <= r2.start || r2.end <= r1.start);
    // Ordinary object ids never collide with reserved WAL ids.
    let ordinary = meta.allocate_object_id().await.unwrap();
    assert!(!r1.contains(&ordinary) && !r2.contains(&ordinary) && !other.contains(&ordinary));
    let ranges: Vec<(u64, u64)> = meta
        .wal_reservations("n1")
        .await
        .unwrap()
        .iter()
        .map(|r| (r.first_id, r.end_id))
        .collect();
    assert_eq!(ranges, vec![(r1.start, r1.end), (r2.start, r2.end)]);
    // Compact everything below r2.start + 1 in the same commit that adds the stream-set object.
    let ss = meta.allocate_object_id().await.unwrap();
    meta.commit(CommitRequest {
        stream_epochs: vec![(s, e)],
        add_objects: vec![object(ss, ObjectKind::StreamSet, &[(s, 0, 10)])],
        advance: vec![(s, 10)],
        remove_wal: vec![WalCompacted {
            node: "n1".into(),
            below: r2.start + 1,
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    let ranges: Vec<(u64, u64)> = meta
        .wal_reservations("n1")
        .await
        .unwrap()
        .iter()
        .map(|r| (r.first_id, r.end_id))
        .collect();
    assert_eq!(ranges, vec![(r2.start + 1, r2.end)]);
    assert_eq!(
        meta.wal_reservations("n2").await.unwrap().len(),
        1,
        "other nodes untouched"
    );
    let mut nodes = meta.wal_nodes().await.unwrap();
    nodes.sort();
    assert_eq!(nodes, vec!["n1", "n2"]);
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    tokio::time::timeout(WAIT, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting until {what}"));
}

async fn index_is_rebuilt_on_open_and_follows_other_writers(f: Fixture) {
    let writer = Metadata::open(Arc::clone(&f.kv), MetadataOptions::default())
        .await
        .unwrap();
    let s = writer.create_stream().await.unwrap().id;
    let e = writer.open_stream(s, "n1").await.unwrap().epoch;
    let mut ids = Vec::new();
    for i in 0..20u64 {
        let id = writer.allocate_object_id().await.unwrap();
        ids.push(id);
        writer
            .commit(CommitRequest {
                stream_epochs: vec![(s, e)],
                add_objects: vec![object(id, ObjectKind::Stream, &[(s, i * 10, i * 10 + 10)])],
                advance: vec![(s, i * 10 + 10)],
                ..Default::default()
            })
            .await
            .unwrap();
    }
    // A reader opened afterwards (another node) rebuilt its index from the store.
    let reader = Metadata::open(Arc::clone(&f.other), MetadataOptions::default())
        .await
        .unwrap();
    let cov: Vec<u64> = reader
        .index()
        .covering(s, 55, 100)
        .iter()
        .map(|r| r.object.id)
        .collect();
    assert_eq!(cov, ids[5..].to_vec());
    // It follows later commits by the writer, adds and removals, through the watch.
    let merged = writer.allocate_object_id().await.unwrap();
    writer
        .commit(CommitRequest {
            stream_epochs: vec![(s, e)],
            add_objects: vec![object(merged, ObjectKind::Stream, &[(s, 0, 200)])],
            remove_objects: ids.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let index = Arc::clone(reader.index());
    wait_until("the reader's index shows the merged object only", || {
        let cov: Vec<u64> = index
            .covering(s, 55, 100)
            .iter()
            .map(|r| r.object.id)
            .collect();
        cov == vec![merged]
    })
    .await;
    assert_eq!(reader.index().len(), 1);
}

#[tokio::test]
async fn etcd_unreachable_is_a_typed_error() {
    // Nothing listens on port 1.
    let result = async {
        let kv = EtcdKv::connect(&["http://127.0.0.1:1".to_owned()], "x/").await?;
        kv.get("mink/a").await
    }
    .await;
    let err = result.expect_err("no etcd there");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
}

#[tokio::test]
async fn redb_keeps_commits_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    let (s, object_id) = {
        let kv: Arc<dyn MetaKv> = Arc::new(RedbKv::open(&path).unwrap());
        let meta = Metadata::open(kv, MetadataOptions::default())
            .await
            .unwrap();
        let s = meta.create_stream().await.unwrap().id;
        let e = meta.open_stream(s, "n1").await.unwrap().epoch;
        let id = meta.allocate_object_id().await.unwrap();
        meta.commit(CommitRequest {
            stream_epochs: vec![(s, e)],
            add_objects: vec![object(id, ObjectKind::Stream, &[(s, 0, 7)])],
            advance: vec![(s, 7)],
            ..Default::default()
        })
        .await
        .unwrap();
        (s, id)
    };
    let kv: Arc<dyn MetaKv> = Arc::new(RedbKv::open(&path).unwrap());
    let meta = Metadata::open(Arc::clone(&kv), MetadataOptions::default())
        .await
        .unwrap();
    assert_eq!(meta.get_stream(s).await.unwrap().unwrap().end_offset, 7);
    assert_eq!(meta.index().covering(s, 0, 10)[0].object.id, object_id);
    // Ids keep growing after a restart.
    assert!(meta.allocate_object_id().await.unwrap() > object_id);
    // A file that is not a redb database is a typed error.
    let junk = dir.path().join("junk.redb");
    std::fs::write(&junk, b"definitely not redb").unwrap();
    assert!(RedbKv::open(&junk).is_err());
}
