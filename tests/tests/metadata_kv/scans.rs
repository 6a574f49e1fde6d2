//! Reads of a whole prefix at one moment (`scan_all_at_one_revision`), what metadata snapshots
//! are taken with.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use mink_metadata::{MetaKvExt, Op, Txn};

use super::Fixture;

/// Pairs of keys far apart in key order (more than one page between them).
const PAIRS: usize = 600;

/// A read at one revision sees what a plain scan sees, and, while another connection keeps
/// rewriting pairs of keys in one transaction each, never a pair half-written.
pub(super) async fn one_revision_scans_see_one_state(f: Fixture) {
    let pair = |i: usize, n: u64| {
        let value = Bytes::from(n.to_string());
        vec![
            Op::put(format!("mink/a/{i:04}"), value.clone()),
            Op::put(format!("mink/z/{i:04}"), value),
        ]
    };
    let mut ops: Vec<Op> = (0..PAIRS).flat_map(|i| pair(i, 0)).collect();
    while !ops.is_empty() {
        let rest = ops.split_off(ops.len().min(100));
        f.kv.txn(Txn {
            compares: Vec::new(),
            on_success: std::mem::replace(&mut ops, rest),
        })
        .await
        .expect("txn");
    }
    let Some(all) = f.kv.scan_all_at_one_revision("mink/").await.expect("read") else {
        // Every backend of the suite reads at one revision.
        panic!("{} cannot read at one revision", f.kv.backend());
    };
    assert_eq!(all, f.kv.scan_all("mink/", 512).await.expect("scan"));
    assert_eq!(all.len(), 2 * PAIRS);

    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (kv, stop, written) = (f.other.clone(), stop.clone(), written.clone());
        tokio::spawn(async move {
            let mut n = 1;
            while !stop.load(Ordering::Relaxed) {
                let i = (n as usize * 7919) % PAIRS;
                kv.txn(Txn {
                    compares: Vec::new(),
                    on_success: pair(i, n),
                })
                .await
                .expect("txn");
                written.store(n, Ordering::Relaxed);
                n += 1;
            }
        })
    };
    // The reads start once the writer is writing.
    while written.load(Ordering::Relaxed) == 0 {
        tokio::task::yield_now().await;
    }
    for _ in 0..5 {
        let all =
            f.kv.scan_all_at_one_revision("mink/")
                .await
                .expect("read")
                .expect("one revision");
        assert_eq!(all.len(), 2 * PAIRS);
        let (a, z) = all.split_at(PAIRS);
        for (a, z) in a.iter().zip(z) {
            assert_eq!(
                a.value, z.value,
                "{} and {} differ: two moments",
                a.key, z.key
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");
}
