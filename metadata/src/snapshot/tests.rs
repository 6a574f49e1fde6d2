use std::sync::Arc;

use super::*;
use crate::kv::MemoryKv;
use crate::log::{Metadata, MetadataOptions};
use crate::records::TableRecord;
use crate::value::encode;

/// A store with a table, a stream, allocated ids, a live node, and recovery claims.
async fn populated() -> (Arc<MemoryKv>, Metadata) {
    let kv = Arc::new(MemoryKv::new());
    let meta = Metadata::open(kv.clone(), MetadataOptions::default())
        .await
        .unwrap();
    let table = TableRecord {
        name: "t".to_owned(),
        schemas: [(1u16, "s".to_owned())].into(),
        bucket_count: 2,
        partitions: vec!["default".to_owned()],
        incarnation: meta.allocate_table_incarnation().await.unwrap(),
        retention: None,
        kafka_key: None,
        stream: None,
        compression: None,
    };
    meta.create_table(&table).await.unwrap();
    meta.create_stream().await.unwrap();
    meta.allocate_writer_id().await.unwrap();
    meta.allocate_object_id().await.unwrap();
    meta.next_incarnation("n1").await.unwrap();
    kv.put(&keys::node("n1"), Bytes::from_static(b"live"))
        .await
        .unwrap();
    let done = RecoveryClaim {
        claimer: "n2".to_owned(),
        done: true,
    };
    let running = RecoveryClaim {
        claimer: "n2".to_owned(),
        done: false,
    };
    kv.put(&keys::recovery("old~1"), encode(&done))
        .await
        .unwrap();
    kv.put(&keys::recovery("old~2"), encode(&running))
        .await
        .unwrap();
    (kv, meta)
}

#[tokio::test]
async fn a_snapshot_round_trips_and_restores_the_durable_keys() {
    let (kv, _) = populated().await;
    let snapshot = MetaSnapshot::take(kv.as_ref(), 1234).await.unwrap();
    let keys: Vec<&str> = snapshot.entries.iter().map(|(k, _)| k.as_str()).collect();
    assert!(keys.contains(&"mink/tables/t"), "{keys:?}");
    assert!(keys.contains(&keys::recovery("old~1").as_str()));
    // What a live process holds under its lease stays out.
    assert!(!keys.iter().any(|k| k.starts_with(keys::NODES)), "{keys:?}");
    assert!(
        !keys.contains(&keys::recovery("old~2").as_str()),
        "{keys:?}"
    );

    let bytes = snapshot.encode();
    let back = MetaSnapshot::decode("snap", &bytes).unwrap();
    assert_eq!(back, snapshot);

    let target = Arc::new(MemoryKv::new());
    let report = back.restore(target.as_ref(), false).await.unwrap();
    assert_eq!(report.keys, snapshot.entries.len());
    // writer, stream, object and table counters, and node n1's incarnations.
    assert_eq!(report.counters_raised, 5, "{report:?}");
    let restored = Metadata::open(target.clone(), MetadataOptions::default())
        .await
        .unwrap();
    assert_eq!(restored.list_tables().await.unwrap().len(), 1);
    for (key, value) in &snapshot.entries {
        let is_counter = key.starts_with(keys::IDS) || key.starts_with(keys::INCARNATIONS);
        let got = target.get(key).await.unwrap().expect("restored");
        if !is_counter {
            assert_eq!(&got.value, value, "{key}");
        }
    }
    // New ids are far above any handed out before the snapshot, or after it.
    assert!(restored.allocate_object_id().await.unwrap() >= COUNTER_GAP);
    assert!(restored.allocate_writer_id().await.unwrap() >= COUNTER_GAP);
    assert!(restored.next_incarnation("n1").await.unwrap() > COUNTER_GAP);
}

#[tokio::test]
async fn restore_refuses_a_store_that_is_not_empty_unless_forced() {
    let (kv, _) = populated().await;
    let snapshot = MetaSnapshot::take(kv.as_ref(), 1).await.unwrap();
    let target = Arc::new(MemoryKv::new());
    target
        .put("mink/tables/other", Bytes::from_static(b"x"))
        .await
        .unwrap();
    let refused = snapshot.restore(target.as_ref(), false).await.unwrap_err();
    assert!(
        matches!(
            refused,
            MetaError::Invalid(InvalidRequest::StoreNotEmpty { keys: 1 })
        ),
        "{refused}"
    );
    assert!(
        target.get("mink/tables/t").await.unwrap().is_none(),
        "nothing written"
    );
    let report = snapshot.restore(target.as_ref(), true).await.unwrap();
    assert_eq!(report.replaced, 1);
    assert!(target.get("mink/tables/other").await.unwrap().is_none());
    assert!(target.get("mink/tables/t").await.unwrap().is_some());
}

#[tokio::test]
async fn a_damaged_snapshot_is_refused_naming_it_never_a_panic() {
    let (kv, _) = populated().await;
    let bytes = MetaSnapshot::take(kv.as_ref(), 1).await.unwrap().encode();
    // Every truncation and every flipped byte.
    for len in 0..bytes.len() {
        let e = MetaSnapshot::decode("snap-7", &bytes[..len]).unwrap_err();
        assert!(e.to_string().contains("snap-7"), "{e}");
    }
    for i in 0..bytes.len() {
        let mut bad = bytes.to_vec();
        bad[i] ^= 0x5a;
        assert!(
            MetaSnapshot::decode("snap-7", &bad).is_err(),
            "byte {i} flipped"
        );
    }
    // A newer version is named as such.
    let mut newer = bytes.to_vec();
    newer[8] = SNAPSHOT_VERSION + 1;
    assert!(matches!(
        MetaSnapshot::decode("s", &newer),
        Err(MetaError::UnknownVersion { version, .. }) if version == SNAPSHOT_VERSION + 1
    ));
    // A count that cannot fit is refused before anything is allocated for it, even with a
    // checksum that matches.
    let mut lying = bytes[..HEADER_LEN].to_vec();
    lying[20..28].copy_from_slice(&u64::MAX.to_le_bytes());
    let crc = crc32c::crc32c(&lying);
    lying.extend_from_slice(&crc.to_le_bytes());
    let e = MetaSnapshot::decode("s", &lying).unwrap_err();
    assert!(e.to_string().contains("cannot fit"), "{e}");
}
