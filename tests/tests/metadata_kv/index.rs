//! The node-local object index: rebuilt from the metadata on open, and following commits that other
//! writers make.

use std::sync::Arc;
use std::time::Duration;

use mink_metadata::{CommitRequest, Metadata, MetadataOptions, ObjectKind};

use super::streams::object;
use super::{Fixture, WAIT};

pub(super) async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    tokio::time::timeout(WAIT, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting until {what}"));
}

pub(super) async fn index_is_rebuilt_on_open_and_follows_other_writers(f: Fixture) {
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
