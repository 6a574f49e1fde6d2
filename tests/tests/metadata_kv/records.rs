//! The other key families: writer snapshots, tables and their schema versions, node registrations
//! and their expiry, and the WAL registry of uncompacted WAL objects.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mink_metadata::{
    CommitRequest, ErrorKind, Metadata, MetadataOptions, ObjectKind, TableRecord, WalCompacted,
    WriterSnapshot,
};

use super::Fixture;
use super::streams::object;

pub(super) async fn writer_snapshots_round_trip(f: Fixture) {
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

pub(super) async fn tables_and_schema_versions(f: Fixture) {
    let meta = Metadata::open(Arc::clone(&f.kv), MetadataOptions::default())
        .await
        .unwrap();
    let table = TableRecord {
        name: "orders".into(),
        schemas: [(1u16, "{\"fields\":[]}".to_owned())].into(),
        bucket_count: 8,
        partitions: vec!["default".into()],
        incarnation: 0,
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

    // A drop deletes the record and leaves its tombstone in one step; incarnations never repeat.
    let first = meta.allocate_table_incarnation().await.unwrap();
    let second = meta.allocate_table_incarnation().await.unwrap();
    assert!(first > 0 && second > first, "{first} {second}");
    let table = TableRecord {
        incarnation: first,
        ..table
    };
    meta.create_table(&table).await.unwrap();
    assert_eq!(
        meta.drop_table("orders").await.unwrap().as_ref(),
        Some(&table)
    );
    assert_eq!(meta.get_table("orders").await.unwrap(), None);
    assert_eq!(meta.drop_table("orders").await.unwrap(), None);
    assert_eq!(meta.list_dropped_tables().await.unwrap(), [table.clone()]);
    // The name is free at once for a new incarnation.
    let again = TableRecord {
        incarnation: second,
        ..table.clone()
    };
    meta.create_table(&again).await.unwrap();
    assert!(meta.delete_tombstone(&table).await.unwrap());
    assert!(!meta.delete_tombstone(&table).await.unwrap());
    assert!(meta.list_dropped_tables().await.unwrap().is_empty());
    assert_eq!(meta.get_table("orders").await.unwrap(), Some(again));
}

pub(super) async fn node_registrations_expire(f: Fixture) {
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

pub(super) async fn wal_registry_finds_uncompacted_wal_objects(f: Fixture) {
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
