//! The test bodies of the conformance suite: each takes an `Arc<dyn ObjectStorage>` and checks
//! one promise of the trait (round trips, ranges, listing, conditional PUTs, deletes, invalid
//! keys) or of the counting and fault-injecting wrappers over it.

use super::*;
use futures::StreamExt;
use mink_s3stream::storage::{CountingStorage, FaultKind, FaultyStorage, StorageCounts, StorageOp};

pub(super) async fn put_get_round_trip(store: Arc<dyn ObjectStorage>) {
    let data = pattern(1000, 1);
    store.put("a/b/obj-1", data.clone()).await.unwrap();
    assert_eq!(store.get("a/b/obj-1").await.unwrap(), data);
    assert!(!store.name().is_empty());
}

/// `put_parts` writes the parts' concatenation as one object, with `put`'s rules, directly and
/// through the counting wrapper (one PUT, the parts' bytes).
pub(super) async fn put_parts_writes_their_concatenation(store: Arc<dyn ObjectStorage>) {
    let parts = vec![
        pattern(100, 1),
        Bytes::new(),
        pattern(1 << 20, 2),
        pattern(16, 3),
        pattern(70_000, 4),
    ];
    let whole: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
    store.put_parts("parts/a", parts.clone()).await.unwrap();
    assert_eq!(store.get("parts/a").await.unwrap(), whole);
    assert_eq!(
        store.head("parts/a").await.unwrap().size,
        whole.len() as u64
    );
    assert_eq!(
        store
            .get_range("parts/a", 1_048_000..1_048_700)
            .await
            .unwrap(),
        &whole[1_048_000..1_048_700]
    );
    // It replaces an object, and no parts at all is an empty object.
    store
        .put_parts("parts/a", vec![pattern(10, 5)])
        .await
        .unwrap();
    assert_eq!(store.get("parts/a").await.unwrap(), pattern(10, 5));
    store.put_parts("parts/empty", Vec::new()).await.unwrap();
    assert!(store.get("parts/empty").await.unwrap().is_empty());
    // Through a wrapper: one request, the parts' bytes.
    let counting = CountingStorage::new(store.clone());
    counting.put_parts("parts/b", parts).await.unwrap();
    let counts = counting.counts();
    assert_eq!((counts.puts, counts.bytes_in), (1, whole.len() as u64));
    assert_eq!(store.get("parts/b").await.unwrap(), whole);
    // A bad key is refused before anything is sent.
    assert!(matches!(
        store.put_parts("bad//key", vec![pattern(3, 6)]).await,
        Err(StorageError::InvalidKey { .. })
    ));
}

pub(super) async fn ranged_gets(store: Arc<dyn ObjectStorage>) {
    let data = pattern(1000, 2);
    store.put("r", data.clone()).await.unwrap();
    assert_eq!(
        store.get_range("r", 0..10).await.unwrap(),
        data.slice(0..10)
    );
    assert_eq!(
        store.get_range("r", 400..600).await.unwrap(),
        data.slice(400..600)
    );
    assert_eq!(
        store.get_range("r", 990..1000).await.unwrap(),
        data.slice(990..1000)
    );
    assert_eq!(store.get_range("r", 0..1000).await.unwrap(), data);
    // Ending past the end is clipped to the end.
    assert_eq!(
        store.get_range("r", 990..5000).await.unwrap(),
        data.slice(990..1000)
    );
    // Starting at or past the end is an invalid range.
    for bad in [1000..1001, 2000..3000] {
        match store.get_range("r", bad.clone()).await {
            Err(StorageError::InvalidRange { key, range, .. }) => {
                assert_eq!(key, "r");
                assert_eq!(range, bad);
            }
            other => panic!("{bad:?}: expected InvalidRange, got {other:?}"),
        }
    }
    // Empty and reversed ranges are invalid.
    #[expect(
        clippy::reversed_empty_ranges,
        reason = "the invalid range is the point"
    )]
    let reversed = 10..5;
    for bad in [5..5, reversed] {
        let err = store.get_range("r", bad.clone()).await.unwrap_err();
        assert!(
            matches!(err, StorageError::InvalidRange { .. }),
            "{bad:?}: {err:?}"
        );
    }
}

pub(super) async fn ranged_gets_in_pieces(store: Arc<dyn ObjectStorage>) {
    let data = pattern(1000, 5);
    store.put("p", data.clone()).await.unwrap();
    let counting = Arc::new(CountingStorage::new(store.clone()));
    let faulty = Arc::new(FaultyStorage::new(store.clone(), 1));
    let wrapped: [Arc<dyn ObjectStorage>; 3] = [store.clone(), counting.clone(), faulty];
    for store in wrapped {
        for (range, piece_len) in [
            (0..1000, 100),
            (10..1000, 100),
            (150..420, 64),
            (0..1000, 0),
            (0..1000, 4096),
            (990..5000, 4),
        ] {
            let pieces = store
                .get_range_pieces("p", range.clone(), piece_len)
                .await
                .unwrap();
            let end = range.end.min(1000) as usize;
            assert_eq!(
                pieces.concat(),
                data.slice(range.start as usize..end),
                "{range:?} in pieces of {piece_len}"
            );
            let lens: Vec<usize> = pieces.iter().map(Bytes::len).collect();
            let expected: Vec<usize> = if piece_len == 0 {
                vec![end - range.start as usize]
            } else {
                (range.start as usize..end)
                    .step_by(piece_len as usize)
                    .map(|at| (end - at).min(piece_len as usize))
                    .collect()
            };
            assert_eq!(lens, expected, "{range:?} in pieces of {piece_len}");
        }
        for bad in [1000..1001, 2000..3000, 5..5] {
            let err = store
                .get_range_pieces("p", bad.clone(), 10)
                .await
                .unwrap_err();
            assert!(
                matches!(err, StorageError::InvalidRange { .. }),
                "{bad:?}: {err:?}"
            );
        }
        let err = store
            .get_range_pieces("no/such/key", 0..10, 4)
            .await
            .unwrap_err();
        assert!(err.is_not_found(), "{err:?}");
    }
    let counts = counting.counts();
    assert_eq!(counts.gets, 10, "one request per call, however many pieces");
    assert_eq!(counts.bytes_out, 1000 + 990 + 270 + 1000 + 1000 + 10);
}

pub(super) async fn head_reports_size_and_time(store: Arc<dyn ObjectStorage>) {
    store.put("h/obj", pattern(1234, 3)).await.unwrap();
    let meta = store.head("h/obj").await.unwrap();
    assert_eq!(meta.key, "h/obj");
    assert_eq!(meta.size, 1234);
    let modified = meta.last_modified.expect("a last-modified time");
    let age = std::time::SystemTime::now()
        .duration_since(modified)
        .unwrap_or_default();
    assert!(age < Duration::from_secs(600), "object is {age:?} old");
}

pub(super) async fn missing_objects_are_not_found(store: Arc<dyn ObjectStorage>) {
    let check = |what: &str, res: Result<(), StorageError>| match res {
        Err(StorageError::NotFound { key }) => assert_eq!(key, "no/such/key", "{what}"),
        other => panic!("{what}: expected NotFound, got {other:?}"),
    };
    check("get", store.get("no/such/key").await.map(drop));
    check("head", store.head("no/such/key").await.map(drop));
    check(
        "get_range",
        store.get_range("no/such/key", 0..10).await.map(drop),
    );
    let err = store.get("no/such/key").await.unwrap_err();
    assert!(!err.is_retryable());
    assert!(err.is_not_found());
}

pub(super) async fn delete_is_idempotent(store: Arc<dyn ObjectStorage>) {
    store.put("d/obj", pattern(10, 4)).await.unwrap();
    store.delete("d/obj").await.unwrap();
    assert!(store.get("d/obj").await.unwrap_err().is_not_found());
    assert!(store.head("d/obj").await.unwrap_err().is_not_found());
    store.delete("d/obj").await.unwrap();
    store.delete("d/never-existed").await.unwrap();
    assert!(store.list("d/").await.unwrap().is_empty());
}

pub(super) async fn delete_many_deletes_listed_keys(store: Arc<dyn ObjectStorage>) {
    for i in 0..5 {
        store.put(&format!("m/{i}"), pattern(10, i)).await.unwrap();
    }
    let doomed: Vec<String> = vec!["m/0".into(), "m/2".into(), "m/4".into(), "m/missing".into()];
    store.delete_many(&doomed).await.unwrap();
    let left: Vec<String> = store
        .list("m/")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    assert_eq!(left, vec!["m/1", "m/3"]);
    store.delete_many(&doomed).await.unwrap();
    store.delete_many(&[]).await.unwrap();
    // One bad key rejects the whole batch before anything is deleted.
    let err = store
        .delete_many(&["m/1".to_owned(), "bad//key".to_owned()])
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::InvalidKey { .. }), "{err:?}");
    assert!(store.head("m/1").await.is_ok());
}

pub(super) async fn delete_many_over_one_request(store: Arc<dyn ObjectStorage>) {
    // More keys than one S3 DeleteObjects request takes (1000).
    let keys: Vec<String> = (0..1005).map(|i| format!("many/{i:05}")).collect();
    futures::stream::iter(keys.iter())
        .for_each_concurrent(32, |k| {
            let store = store.clone();
            async move {
                store.put(k, Bytes::from_static(b"x")).await.unwrap();
            }
        })
        .await;
    assert_eq!(store.list("many/").await.unwrap().len(), 1005);
    store.delete_many(&keys).await.unwrap();
    assert!(store.list("many/").await.unwrap().is_empty());
}

pub(super) async fn put_if_absent_fails_when_present(store: Arc<dyn ObjectStorage>) {
    let first = pattern(100, 5);
    store.put_if_absent("fence", first.clone()).await.unwrap();
    match store.put_if_absent("fence", pattern(50, 6)).await {
        Err(StorageError::Precondition { key, op }) => {
            assert_eq!(key, "fence");
            assert_eq!(op, StorageOp::PutIfAbsent);
        }
        other => panic!("expected Precondition, got {other:?}"),
    }
    assert_eq!(store.get("fence").await.unwrap(), first);
    // After a delete the key can be created again.
    store.delete("fence").await.unwrap();
    store.put_if_absent("fence", pattern(7, 7)).await.unwrap();
    assert_eq!(store.head("fence").await.unwrap().size, 7);
}

pub(super) async fn put_if_absent_has_one_winner(store: Arc<dyn ObjectStorage>) {
    let attempts = futures::future::join_all((0..8u8).map(|i| {
        let store = store.clone();
        async move { (i, store.put_if_absent("race", pattern(64, i)).await) }
    }))
    .await;
    let winners: Vec<u8> = attempts
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(winners.len(), 1, "{attempts:?}");
    for (_, res) in &attempts {
        if let Err(e) = res {
            assert!(e.is_precondition(), "{e:?}");
        }
    }
    assert_eq!(store.get("race").await.unwrap(), pattern(64, winners[0]));
}

pub(super) async fn list_by_string_prefix(store: Arc<dyn ObjectStorage>) {
    let keys = ["wal/0001", "wal/0002", "wal/0010", "walrus/1", "data/x/1"];
    for (i, k) in keys.iter().enumerate() {
        store.put(k, pattern(i + 1, 0)).await.unwrap();
    }
    let list = |prefix: &'static str| {
        let store = store.clone();
        async move {
            store
                .list(prefix)
                .await
                .unwrap()
                .into_iter()
                .map(|m| (m.key, m.size))
                .collect::<Vec<_>>()
        }
    };
    let own = |v: &[(&str, u64)]| {
        v.iter()
            .map(|(k, s)| ((*k).to_owned(), *s))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        list("wal/").await,
        own(&[("wal/0001", 1), ("wal/0002", 2), ("wal/0010", 3)])
    );
    assert_eq!(
        list("wal/000").await,
        own(&[("wal/0001", 1), ("wal/0002", 2)])
    );
    assert_eq!(
        list("wal").await.len(),
        4,
        "a string prefix also matches walrus/"
    );
    assert_eq!(list("data/x/1").await, own(&[("data/x/1", 5)]));
    assert_eq!(list("").await.len(), 5);
    assert!(list("nothing/").await.is_empty());
}

pub(super) async fn overwrite_replaces_object(store: Arc<dyn ObjectStorage>) {
    store.put("o", pattern(300, 8)).await.unwrap();
    let second = pattern(120, 9);
    store.put("o", second.clone()).await.unwrap();
    assert_eq!(store.get("o").await.unwrap(), second);
    assert_eq!(store.head("o").await.unwrap().size, 120);
    assert_eq!(store.list("o").await.unwrap().len(), 1);
}

pub(super) async fn empty_objects(store: Arc<dyn ObjectStorage>) {
    store.put("e", Bytes::new()).await.unwrap();
    assert_eq!(store.get("e").await.unwrap(), Bytes::new());
    assert_eq!(store.head("e").await.unwrap().size, 0);
    let err = store.get_range("e", 0..1).await.unwrap_err();
    assert!(matches!(err, StorageError::InvalidRange { .. }), "{err:?}");
    store.put_if_absent("e2", Bytes::new()).await.unwrap();
    assert!(
        store
            .put_if_absent("e2", Bytes::new())
            .await
            .unwrap_err()
            .is_precondition()
    );
}

pub(super) async fn large_objects(store: Arc<dyn ObjectStorage>) {
    const LEN: usize = 8 << 20;
    let data = pattern(LEN, 10);
    store.put("big", data.clone()).await.unwrap();
    assert_eq!(store.head("big").await.unwrap().size, LEN as u64);
    let back = store.get("big").await.unwrap();
    assert_eq!(back.len(), LEN);
    assert!(back == data, "8 MiB object read back differs");
    let tail = (LEN - 100) as u64..LEN as u64 + 100;
    assert_eq!(
        store.get_range("big", tail).await.unwrap(),
        data.slice(LEN - 100..)
    );
    let mid = 3_000_000u64..4_048_576;
    assert_eq!(
        store.get_range("big", mid).await.unwrap(),
        data.slice(3_000_000..4_048_576)
    );
}

pub(super) async fn concurrent_puts(store: Arc<dyn ObjectStorage>) {
    let results = futures::future::join_all((0..64u8).map(|i| {
        let store = store.clone();
        async move { store.put(&format!("c/{i:03}"), pattern(4096, i)).await }
    }))
    .await;
    for r in results {
        r.unwrap();
    }
    let listed = store.list("c/").await.unwrap();
    assert_eq!(listed.len(), 64);
    for i in 0..64u8 {
        assert_eq!(
            store.get(&format!("c/{i:03}")).await.unwrap(),
            pattern(4096, i)
        );
    }
}

pub(super) async fn invalid_keys_are_rejected(store: Arc<dyn ObjectStorage>) {
    for bad in ["", "/abs", "a//b", "trailing/", "a/../b", "sp ace", "q?x"] {
        match store.put(bad, Bytes::from_static(b"x")).await {
            Err(StorageError::InvalidKey { key, .. }) => assert_eq!(key, bad),
            other => panic!("{bad:?}: expected InvalidKey, got {other:?}"),
        }
        assert!(matches!(
            store.get(bad).await,
            Err(StorageError::InvalidKey { .. })
        ));
    }
    assert!(matches!(
        store.list("/x").await,
        Err(StorageError::InvalidKey { .. })
    ));
    assert!(
        store.list("").await.unwrap().is_empty(),
        "nothing was written"
    );
}

pub(super) async fn counting_counts_requests_and_bytes(store: Arc<dyn ObjectStorage>) {
    let counting = Arc::new(CountingStorage::new(store));
    let s: Arc<dyn ObjectStorage> = counting.clone();
    assert_eq!(counting.counts(), StorageCounts::default());
    s.put("k1", pattern(10, 0)).await.unwrap();
    s.put("k2", pattern(20, 0)).await.unwrap();
    s.put_if_absent("k1", pattern(5, 0)).await.unwrap_err();
    let before = counting.counts();
    s.get("k1").await.unwrap();
    s.get_range("k2", 0..5).await.unwrap();
    s.get("missing").await.unwrap_err();
    s.head("k1").await.unwrap();
    s.delete("k1").await.unwrap();
    s.delete_many(&["k2".to_owned(), "x".to_owned(), "y".to_owned()])
        .await
        .unwrap();
    s.list("").await.unwrap();
    let after = counting.counts();
    assert_eq!(before.puts, 3);
    assert_eq!(before.bytes_in, 30, "the failed put writes nothing");
    assert_eq!(before.errors, 1);
    let delta = after - before;
    assert_eq!(delta.gets, 3);
    assert_eq!(delta.bytes_out, 15);
    assert_eq!(delta.heads, 1);
    assert_eq!(delta.deletes, 2);
    assert_eq!(delta.deleted_keys, 4);
    assert_eq!(delta.lists, 1);
    assert_eq!(delta.errors, 1);
    assert_eq!(delta.puts, 0);
    assert_eq!(after.requests(), 3 + 3 + 1 + 2 + 1);
}

pub(super) async fn fault_injection_fails_what_it_says(store: Arc<dyn ObjectStorage>) {
    let faulty = Arc::new(FaultyStorage::new(store, 7));
    let s: Arc<dyn ObjectStorage> = faulty.clone();

    // The next two calls fail with throttling, whatever they are.
    faulty.fail_next(2, FaultKind::Throttled);
    let err = s.put("f", pattern(10, 0)).await.unwrap_err();
    assert!(
        matches!(
            err,
            StorageError::Throttled {
                op: StorageOp::Put,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_retryable());
    let err = s.get("f").await.unwrap_err();
    assert!(
        matches!(
            err,
            StorageError::Throttled {
                op: StorageOp::Get,
                ..
            }
        ),
        "{err:?}"
    );
    // The failed PUT wrote nothing, and the third call goes through.
    assert!(s.get("f").await.unwrap_err().is_not_found());
    assert_eq!(faulty.injected(), 2);

    // Per-operation: only HEAD fails, with a permanent error.
    faulty.fail_next_op(StorageOp::Head, 1, FaultKind::Other);
    s.put("f", pattern(10, 0)).await.unwrap();
    let err = s.head("f").await.unwrap_err();
    assert!(
        matches!(
            err,
            StorageError::Other {
                op: StorageOp::Head,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert_eq!(s.head("f").await.unwrap().size, 10);

    // Timeouts hang for the given time, then fail as timeouts.
    faulty.fail_next_op(
        StorageOp::List,
        1,
        FaultKind::Timeout {
            after: Duration::from_millis(50),
        },
    );
    let started = Instant::now();
    let err = s.list("").await.unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert!(
        matches!(
            err,
            StorageError::Timeout {
                op: StorageOp::List,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_retryable());

    faulty.fail_next_op(StorageOp::Delete, 1, FaultKind::Unavailable);
    let err = s.delete("f").await.unwrap_err();
    assert!(matches!(err, StorageError::Unavailable { .. }), "{err:?}");
    assert!(
        s.head("f").await.is_ok(),
        "the failed delete deleted nothing"
    );
    s.delete("f").await.unwrap();
    assert_eq!(faulty.injected(), 5);
}

pub(super) async fn fault_injection_rates_are_seeded(store: Arc<dyn ObjectStorage>) {
    store.put("rate", pattern(8, 0)).await.unwrap();
    async fn pattern_of(store: Arc<dyn ObjectStorage>, seed: u64) -> Vec<bool> {
        let faulty = FaultyStorage::new(store, seed);
        faulty.set_failure_rate(StorageOp::Head, 0.3, FaultKind::Unavailable);
        let mut failed = Vec::new();
        for _ in 0..200 {
            match faulty.head("rate").await {
                Ok(_) => failed.push(false),
                Err(StorageError::Unavailable { .. }) => failed.push(true),
                Err(other) => panic!("unexpected error {other:?}"),
            }
        }
        failed
    }
    let a = pattern_of(store.clone(), 99).await;
    let b = pattern_of(store.clone(), 99).await;
    let c = pattern_of(store.clone(), 100).await;
    assert_eq!(a, b, "the same seed fails the same calls");
    assert_ne!(a, c, "another seed fails other calls");
    let failures = a.iter().filter(|f| **f).count();
    assert!(
        (30..=90).contains(&failures),
        "{failures} of 200 failed at rate 0.3"
    );
}

pub(super) async fn fault_injection_slow_and_ambiguous_puts(store: Arc<dyn ObjectStorage>) {
    let faulty = Arc::new(FaultyStorage::new(store, 1));
    let s: Arc<dyn ObjectStorage> = faulty.clone();
    faulty.set_put_delay(Duration::from_millis(100));
    let started = Instant::now();
    s.put("slow", pattern(10, 0)).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(100));
    let started = Instant::now();
    s.get("slow").await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "only PUTs are slowed"
    );

    // The write lands but the caller is told it timed out.
    faulty.clear();
    faulty.set_fail_after_write(true);
    faulty.fail_next_op(
        StorageOp::Put,
        1,
        FaultKind::Timeout {
            after: Duration::ZERO,
        },
    );
    let err = s.put("ambiguous", pattern(33, 0)).await.unwrap_err();
    assert!(matches!(err, StorageError::Timeout { .. }), "{err:?}");
    assert_eq!(s.get("ambiguous").await.unwrap(), pattern(33, 0));
}
