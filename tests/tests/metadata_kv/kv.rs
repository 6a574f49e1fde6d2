//! The KV contract itself: versions, compare-and-swap, all-or-nothing transactions, paged prefix
//! scans, watches, and typed errors for corrupt values and values of a future format.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use mink_metadata::value::{FORMAT_VERSION, HEADER_LEN, encode};
use mink_metadata::{
    CasOutcome, Compare, ErrorKind, IdKind, MetaError, MetaKvExt, Metadata, MetadataOptions, Op,
    Txn, WatchEvent, WriterSnapshot, keys,
};

use super::{Fixture, WAIT, b};

pub(super) async fn put_get_delete_track_versions(f: Fixture) {
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

pub(super) async fn get_many_reads_each_key_as_get_does(f: Fixture) {
    let kv = f.kv;
    let va = kv.put("mink/many/a", b("one")).await.unwrap();
    let vc = kv.put("mink/many/c", b("three")).await.unwrap();
    // Out of order, one absent, one twice.
    let keys: Vec<String> = ["mink/many/c", "mink/many/b", "mink/many/a", "mink/many/c"]
        .map(str::to_owned)
        .to_vec();
    let got = kv.get_many(&keys).await.unwrap();
    let versions: Vec<Option<u64>> = got.iter().map(|g| g.as_ref().map(|g| g.version)).collect();
    assert_eq!(versions, [Some(vc), None, Some(va), Some(vc)]);
    assert_eq!(got[0].as_ref().map(|g| g.value.clone()), Some(b("three")));
    assert_eq!(got[2].as_ref().map(|g| g.key.as_str()), Some("mink/many/a"));
    let one_by_one = futures::future::try_join_all(keys.iter().map(|k| kv.get(k)))
        .await
        .unwrap();
    assert_eq!(got, one_by_one);
    assert!(kv.get_many(&[]).await.unwrap().is_empty());
    let bad = ["mink/many/a".to_owned(), String::new()];
    assert_eq!(
        kv.get_many(&bad).await.unwrap_err().kind(),
        ErrorKind::Invalid
    );
}

pub(super) async fn compare_and_swap_needs_the_current_version(f: Fixture) {
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

pub(super) async fn txn_is_all_or_nothing(f: Fixture) {
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

pub(super) async fn scan_pages_through_a_prefix_only(f: Fixture) {
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

pub(super) async fn next_event(stream: &mut mink_metadata::WatchStream) -> WatchEvent {
    tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("watch event within the timeout")
        .expect("watch still open")
        .expect("watch event, not error")
}

pub(super) async fn watch_sees_changes_under_its_prefix_in_order(f: Fixture) {
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

pub(super) async fn corrupt_and_future_values_are_typed_errors(f: Fixture) {
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

/// Leases: keys put with one live while it is renewed and go when it is revoked or expires; on
/// redb, which has none, every lease call is refused.
pub(super) async fn leases_hold_keys_until_revoked_or_expired(f: Fixture) {
    let put_with = |lease: i64, key: &str| Txn {
        compares: vec![],
        on_success: vec![Op::Put {
            key: key.to_owned(),
            value: b("held"),
            lease: Some(lease),
        }],
    };
    if f.kv.backend() == "redb" {
        let refused = f.kv.grant_lease(std::time::Duration::from_secs(5)).await;
        assert_eq!(refused.unwrap_err().kind(), ErrorKind::Unsupported);
        let refused = f.kv.txn(put_with(1, "mink/l/a")).await.unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::Unsupported);
        return;
    }
    let asked = std::time::Duration::from_millis(1500);
    let lease = f.kv.grant_lease(asked).await.unwrap();
    assert!(lease.ttl >= asked, "granted {:?} for {asked:?}", lease.ttl);
    f.kv.txn(put_with(lease.id, "mink/l/a")).await.unwrap();
    let mut keeper = f.kv.lease_keeper(lease.id).await.unwrap();
    assert_eq!(keeper.renew().await.unwrap(), Some(lease.ttl));
    let left = f.other.lease_ttl(lease.id).await.unwrap().expect("alive");
    assert!(left <= lease.ttl, "{left:?}");
    assert!(f.other.get("mink/l/a").await.unwrap().is_some());

    // Revoked: its key is deleted (watchers see it), it cannot hold keys again, renewals say so.
    let mut watch = f.other.watch_prefix("mink/l/").await.unwrap();
    f.kv.revoke_lease(lease.id).await.unwrap();
    assert!(
        matches!(next_event(&mut watch).await, WatchEvent::Delete { key, .. } if key == "mink/l/a")
    );
    assert!(f.other.get("mink/l/a").await.unwrap().is_none());
    assert_eq!(f.kv.lease_ttl(lease.id).await.unwrap(), None);
    assert_eq!(keeper.renew().await.unwrap(), None);
    let refused = f.kv.txn(put_with(lease.id, "mink/l/b")).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::NotFound, "{refused}");
    assert!(f.kv.get("mink/l/b").await.unwrap().is_none());
    // Revoking again is not an error.
    f.kv.revoke_lease(lease.id).await.unwrap();

    // Not renewed: it expires by itself, within its TTL and a little.
    let lease = f.kv.grant_lease(asked).await.unwrap();
    f.kv.txn(put_with(lease.id, "mink/l/c")).await.unwrap();
    let give_up = std::time::Instant::now() + lease.ttl + std::time::Duration::from_secs(5);
    while f.other.get("mink/l/c").await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < give_up,
            "the lease never expired"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(f.other.lease_ttl(lease.id).await.unwrap(), None);
}

/// The leader election: the first candidate leads, its fence passes while it stands, and once it
/// resigns or its lease ends the next one leads and the old fence fails.
pub(super) async fn one_leader_at_a_time_and_a_fence_that_outlives_no_leadership(f: Fixture) {
    use mink_metadata::{Election, keys};
    let lease = |f: &Fixture| {
        let kv = Arc::clone(&f.kv);
        async move {
            match kv.grant_lease(std::time::Duration::from_secs(10)).await {
                Ok(l) => Some(l.id),
                Err(e) if e.kind() == ErrorKind::Unsupported => None,
                Err(e) => panic!("{e}"),
            }
        }
    };
    let prefix = keys::LEADER;
    assert_eq!(Election::leader(f.kv.as_ref(), prefix).await.unwrap(), None);
    let first = Election::campaign(f.kv.as_ref(), prefix, "a~1", lease(&f).await)
        .await
        .unwrap();
    let second_lease = lease(&f).await;
    let second = Election::campaign(f.other.as_ref(), prefix, "b~1", second_lease)
        .await
        .unwrap();
    let refused = Election::campaign(f.kv.as_ref(), prefix, "a~1", None).await;
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::Conflict);
    assert_eq!(
        Election::leader(f.other.as_ref(), prefix).await.unwrap(),
        Some(("a~1".to_owned(), first.revision()))
    );
    assert!(first.is_leader(f.kv.as_ref()).await.unwrap());
    assert!(!second.is_leader(f.other.as_ref()).await.unwrap());
    tokio::time::timeout(WAIT, first.leadership(f.kv.as_ref()))
        .await
        .unwrap()
        .unwrap();

    // The leader's decision passes its fence.
    let decide = |fence: Compare, value: &str| Txn {
        compares: vec![fence],
        on_success: vec![Op::put("mink/assign/t/default/0", b(value))],
    };
    let old_fence = first.fence();
    assert!(
        f.kv.txn(decide(old_fence.clone(), "a"))
            .await
            .unwrap()
            .succeeded
    );

    // b waits for leadership; a resigns; b leads, and a's fence no longer passes.
    let waiting = tokio::spawn({
        let other = Arc::clone(&f.other);
        let second = second.clone();
        async move { second.leadership(other.as_ref()).await }
    });
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished());
    first.resign(f.kv.as_ref()).await.unwrap();
    tokio::time::timeout(WAIT, waiting)
        .await
        .expect("b leads once a resigns")
        .unwrap()
        .unwrap();
    assert!(
        !f.kv
            .txn(decide(old_fence, "stale"))
            .await
            .unwrap()
            .succeeded
    );
    assert!(
        f.other
            .txn(decide(second.fence(), "b"))
            .await
            .unwrap()
            .succeeded
    );
    assert_eq!(
        f.kv.get("mink/assign/t/default/0")
            .await
            .unwrap()
            .unwrap()
            .value,
        b("b")
    );
    // A candidacy held by a lease ends with it.
    if let Some(lease) = second_lease {
        f.kv.revoke_lease(lease).await.unwrap();
        assert_eq!(Election::leader(f.kv.as_ref(), prefix).await.unwrap(), None);
        let gone = second.leadership(f.other.as_ref()).await.unwrap_err();
        assert_eq!(gone.kind(), ErrorKind::NotFound);
    }
}

/// Many transactions at once (a store may commit them together): each compare-and-swap applies
/// exactly once or fails against the version it saw, every success has a revision of its own,
/// and a watch sees the changes in revision order.
pub(super) async fn concurrent_transactions_apply_once_each_in_revision_order(f: Fixture) {
    const TASKS: usize = 24;
    const INCREMENTS: usize = 5;
    let mut watch = f.kv.watch_prefix("mink/c/").await.unwrap();
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let kv = if task % 2 == 0 {
            Arc::clone(&f.kv)
        } else {
            Arc::clone(&f.other)
        };
        tasks.push(tokio::spawn(async move {
            let mut revisions = Vec::new();
            let mut refused = 0usize;
            for _ in 0..INCREMENTS {
                loop {
                    let seen = kv.get("mink/c/counter").await.unwrap();
                    let (version, count) = seen.map_or((0, 0u64), |kv| {
                        (
                            kv.version,
                            String::from_utf8_lossy(&kv.value).parse().unwrap(),
                        )
                    });
                    let out = kv
                        .txn(Txn {
                            compares: vec![Compare::version("mink/c/counter", version)],
                            on_success: vec![
                                Op::put("mink/c/counter", (count + 1).to_string()),
                                Op::put(format!("mink/c/task-{task:02}"), count.to_string()),
                            ],
                        })
                        .await
                        .unwrap();
                    if out.succeeded {
                        revisions.push(out.revision);
                        break;
                    }
                    refused += 1;
                }
            }
            (revisions, refused)
        }));
    }
    let mut revisions = Vec::new();
    for task in tasks {
        revisions.extend(task.await.unwrap().0);
    }
    let total = TASKS * INCREMENTS;
    let counter = f.kv.get("mink/c/counter").await.unwrap().unwrap();
    assert_eq!(&counter.value[..], total.to_string().as_bytes());
    revisions.sort_unstable();
    revisions.dedup();
    assert_eq!(revisions.len(), total, "every success has its own revision");
    assert_eq!(counter.version, *revisions.last().unwrap());
    // Two puts per success, seen in revision order, each counter value once.
    let mut last = 0;
    let mut counts = Vec::new();
    for _ in 0..2 * total {
        match next_event(&mut watch).await {
            WatchEvent::Put(kv) => {
                assert!(kv.version >= last, "revision {} after {last}", kv.version);
                last = kv.version;
                if kv.key == "mink/c/counter" {
                    counts.push(String::from_utf8_lossy(&kv.value).parse::<usize>().unwrap());
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(counts, (1..=total).collect::<Vec<_>>());
}
