//! The other key families: writer snapshots, tables and their schema versions, node registrations
//! held by their lease, and the WAL registry of uncompacted WAL objects.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mink_metadata::{
    CommitRequest, ErrorKind, LeaseSession, Metadata, MetadataOptions, NodeRecord, ObjectKind,
    TableRecord, WalCompacted, WriterSnapshot,
};
use mink_runtime::SystemClock;

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
        retention: None,
        kafka_key: None,
        stream: None,
        compression: None,
    };
    meta.create_table(&table).await.unwrap();
    assert_eq!(
        meta.create_table(&table).await.unwrap_err().kind(),
        ErrorKind::Conflict
    );
    // A table with more bucket assignments than one etcd transaction takes.
    let wide = TableRecord {
        name: "wide".into(),
        bucket_count: 300,
        ..table.clone()
    };
    let assignments: Vec<(String, u32, String)> = (0..300)
        .map(|b| ("default".to_owned(), b, format!("n{}", b % 3)))
        .collect();
    meta.create_table_assigned(&wide, &assignments)
        .await
        .unwrap();
    let written = meta.assignments().await.unwrap();
    assert_eq!(written.len(), 300);
    assert!(written.iter().all(|(_, a)| a.leader == 0));
    assert_eq!(
        meta.create_table_assigned(&wide, &assignments)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Conflict
    );
    assert!(meta.delete_table("wide").await.unwrap());
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
    assert_eq!(
        meta.list_dropped_tables().await.unwrap(),
        std::slice::from_ref(&table)
    );
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

pub(super) async fn node_registrations_follow_their_lease(f: Fixture) {
    let meta = Metadata::open(Arc::clone(&f.kv), MetadataOptions::default())
        .await
        .unwrap();
    // Every start is a new incarnation; the broker id is the node id's for good.
    assert_eq!(meta.next_incarnation("n1").await.unwrap(), 1);
    assert_eq!(meta.next_incarnation("n1").await.unwrap(), 2);
    assert_eq!(meta.next_incarnation("n2").await.unwrap(), 1);
    let broker = meta.broker_id("n1").await.unwrap();
    assert_eq!(meta.broker_id("n1").await.unwrap(), broker);
    assert_ne!(meta.broker_id("n2").await.unwrap(), broker);
    assert!(broker > 0);

    let leases = f.kv.backend() != "redb";
    let session = if leases {
        Some(
            LeaseSession::start(
                Arc::clone(&f.kv),
                Arc::new(SystemClock),
                Duration::from_secs(5),
                Duration::from_millis(500),
            )
            .await
            .unwrap(),
        )
    } else {
        None
    };
    let record = NodeRecord {
        node_id: "n1".to_owned(),
        incarnation: 2,
        broker_id: broker,
        http_url: "http://127.0.0.1:9000".to_owned(),
        kafka_address: None,
        flight_url: None,
        lease: session.as_ref().map(LeaseSession::id),
        started_at_ms: 1,
        draining: false,
    };
    assert_eq!(record.member(), "n1~2");
    meta.register_node(&record).await.unwrap();
    // While it is registered, another life of n1 cannot register.
    let again = NodeRecord {
        incarnation: 3,
        lease: None,
        ..record.clone()
    };
    let refused = meta.register_node(&again).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Conflict, "{refused}");
    assert!(refused.to_string().contains("n1~2"), "{refused}");
    // Nor can it rewrite or remove the registration of the life that holds it.
    assert_eq!(
        meta.update_node(&again).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    meta.deregister_node(&again).await.unwrap();
    let draining = NodeRecord {
        draining: true,
        ..record.clone()
    };
    meta.update_node(&draining).await.unwrap();
    assert_eq!(meta.live_nodes().await.unwrap(), vec![draining.clone()]);

    if let Some(session) = session {
        // The registration goes with the lease.
        session.revoke().await.unwrap();
        assert!(meta.live_nodes().await.unwrap().is_empty());
    } else {
        meta.deregister_node(&draining).await.unwrap();
        assert!(meta.live_nodes().await.unwrap().is_empty());
    }
    meta.register_node(&again).await.unwrap();
    assert_eq!(meta.live_nodes().await.unwrap(), vec![again]);
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
