//! Conformance suite of the metadata KV and the metadata log: every test runs against every backend
//! (memory, redb in a temporary file, etcd on the server `cargo xtask test` started).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mink_metadata::{
    CommitRequest, ErrorKind, EtcdKv, MemoryKv, MetaKv, Metadata, MetadataOptions, ObjectKind,
    RedbKv,
};

mod ids;
mod index;
mod kv;
mod records;
mod recovery;
mod scans;
mod streams;

use streams::object;

use ids::concurrent_allocators_never_repeat_an_id;
use index::index_is_rebuilt_on_open_and_follows_other_writers;
use kv::{
    compare_and_swap_needs_the_current_version,
    concurrent_transactions_apply_once_each_in_revision_order,
    corrupt_and_future_values_are_typed_errors, get_many_reads_each_key_as_get_does,
    leases_hold_keys_until_revoked_or_expired,
    one_leader_at_a_time_and_a_fence_that_outlives_no_leadership, put_get_delete_track_versions,
    scan_pages_through_a_prefix_only, txn_is_all_or_nothing,
    watch_sees_changes_under_its_prefix_in_order,
};
use records::{
    node_registrations_follow_their_lease, tables_and_schema_versions,
    wal_registry_finds_uncompacted_wal_objects, writer_snapshots_round_trip,
};
use recovery::recovery_is_claimed_once_after_the_member_is_gone;
use scans::one_revision_scans_see_one_state;
use streams::{
    commit_adds_removes_advances_and_indexes,
    create_open_stream_writes_the_stream_with_the_callers_keys_or_nothing,
    open_stream_fences_the_previous_epoch, rejected_commits_change_nothing,
    trim_moves_the_start_forward_only,
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
    get_many_reads_each_key_as_get_does,
    compare_and_swap_needs_the_current_version,
    txn_is_all_or_nothing,
    scan_pages_through_a_prefix_only,
    watch_sees_changes_under_its_prefix_in_order,
    corrupt_and_future_values_are_typed_errors,
    leases_hold_keys_until_revoked_or_expired,
    one_leader_at_a_time_and_a_fence_that_outlives_no_leadership,
    concurrent_allocators_never_repeat_an_id,
    open_stream_fences_the_previous_epoch,
    create_open_stream_writes_the_stream_with_the_callers_keys_or_nothing,
    commit_adds_removes_advances_and_indexes,
    rejected_commits_change_nothing,
    trim_moves_the_start_forward_only,
    writer_snapshots_round_trip,
    tables_and_schema_versions,
    node_registrations_follow_their_lease,
    wal_registry_finds_uncompacted_wal_objects,
    recovery_is_claimed_once_after_the_member_is_gone,
    index_is_rebuilt_on_open_and_follows_other_writers,
    one_revision_scans_see_one_state,
    concurrent_transactions_apply_once_each_in_revision_order,
);

const WAIT: Duration = Duration::from_secs(10);

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
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
