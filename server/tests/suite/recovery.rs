//! Metadata recovery (docs/metadata-recovery.md): the node writes snapshots of its metadata to
//! the object store on request and periodically (keeping the newest few); after the metadata is
//! lost (redb file deleted, or a new, empty etcd prefix), restoring the newest snapshot brings
//! every table back, every row at its offset, with new ids above the old ones.

use std::time::{Duration, Instant};

use mink_metadata::snapshot::MetaSnapshot;
use mink_server::NodeBuilder;
use mink_server::settings::MetadataBackend;
use reqwest::StatusCode;
use serde_json::Value;

use super::data::{ids_of, ndjson};
use super::harness::{Backend, Harness, store_of};

pub async fn metadata_snapshot_and_restore(backend: Backend) {
    let mut h = Harness::start_with(backend, |s| {
        s.metadata.snapshot_interval = Duration::from_millis(150);
        s.metadata.snapshots_kept = 2;
    })
    .await;
    h.create_table("r").await;
    h.append_ndjson("r", &ndjson(&[1, 2, 3])).await;
    let w = h.writer_id().await;
    let r = h.append_as("r", w, 0, &[4, 5]).await;
    assert_eq!(r.status(), StatusCode::OK);

    // Periodic snapshots, the newest two kept.
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.metric("mink_metadata_snapshots_total").await < 4.0 {
        assert!(Instant::now() < deadline, "periodic snapshots never came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(h.metric("mink_metadata_snapshot_bytes").await > 0.0);
    // One on request, once the rows are in committed objects and nothing more is written: the
    // one restored below. (What is appended or compacted after the newest snapshot is for the
    // rebuild from the objects, not built yet.)
    h.node
        .as_ref()
        .expect("node")
        .engine()
        .compact_now()
        .await
        .expect("compaction");
    let written: Value = h
        .post_json(h.v1("admin/snapshot"), &Value::Null)
        .await
        .json()
        .await
        .expect("json");
    let key = written["key"].as_str().expect("key").to_owned();
    assert!(written["keys"].as_u64().is_some_and(|k| k > 3), "{written}");
    h.stop().await;

    let store = store_of(&h.backend.settings);
    let listed: Vec<String> = store
        .list("meta-snapshots/")
        .await
        .expect("list")
        .into_iter()
        .map(|m| m.key)
        .collect();
    assert!(listed.len() <= 3 && listed.contains(&key), "{listed:?}");

    // The metadata is lost: a new, empty one.
    match h.backend.settings.metadata.backend {
        MetadataBackend::Etcd => {
            let prefix = &mut h.backend.settings.metadata.etcd_prefix;
            *prefix = format!("{}lost/", prefix);
        }
        _ => std::fs::remove_file(h.backend.settings.redb_path()).expect("remove meta.redb"),
    }
    let raw = store.get(&key).await.expect("the snapshot");
    let snapshot = MetaSnapshot::decode(&key, &raw).expect("decodes");
    let parts = NodeBuilder::from_settings(h.backend.settings.clone())
        .await
        .expect("components");
    let kv = parts.metadata_kv().expect("kv");
    let report = snapshot.restore(kv.as_ref(), false).await.expect("restore");
    assert_eq!(report.keys, snapshot.entries.len());
    drop(parts);

    h.restart().await;
    let (rows, _) = h.read_ndjson("r", "offset=0").await;
    assert_eq!(ids_of(&rows), [1, 2, 3, 4, 5]);
    // The writer's window came back with the snapshot: its retry is a duplicate.
    let again: Value = h
        .append_as("r", w, 0, &[4, 5])
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(
        (again["duplicate"].as_bool(), again["base_offset"].as_u64()),
        (Some(true), Some(3)),
        "{again}"
    );
    let fresh = h.writer_id().await;
    assert!(
        fresh >= 1 << 32,
        "new writer ids are far above the old ones: {fresh}"
    );
    let next = h.append_ndjson("r", &ndjson(&[6])).await;
    assert_eq!(next["base_offset"], 5, "{next}");
}
