//! Format compatibility: this build reads the fixtures an earlier build wrote
//! (`tests/fixtures/v1/`, see `mink_tests::fixtures`) and its encoders still write them byte for
//! byte. A failure here means a format changed: give it a new version (its magic) and new
//! fixtures beside these, and keep reading the old ones.

use std::path::Path;

use bytes::Bytes;
use mink_codec::BatchView;
use mink_s3stream::format::object::{ObjectBuilder, decode_block, decode_object_index};
use mink_s3stream::format::wal;
use mink_server::{NodeBuilder, Settings};
use mink_tests::fixtures::{self, NodeHistory};
use serde_json::{Value, json};

fn read(name: &str) -> Vec<u8> {
    let path = fixtures::dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn a_mink_batch_of_format_1_decodes_and_encodes_the_same() {
    let stored = read("batch.bin");
    let view = BatchView::new(&stored[..]).unwrap();
    view.validate().unwrap();
    assert_eq!(
        (view.schema_id(), view.writer_id(), view.batch_sequence()),
        (1, 7, 3)
    );
    let (rows, changes) = view.decode(&fixtures::schema()).unwrap();
    assert_eq!(rows, fixtures::fixture_rows(0..5));
    assert_eq!(changes, None);
    assert_eq!(
        fixtures::fixture_batch(),
        stored,
        "the encoder's output changed"
    );
}

#[test]
fn a_wal_object_of_version_2_decodes_and_encodes_the_same() {
    let stored = Bytes::from(read("wal.bin"));
    let mut expected = fixtures::wal_records();
    expected.sort_by_key(|r| (r.stream_id, r.epoch, r.base_offset));
    assert_eq!(wal::decode(&stored).unwrap(), expected);
    let (encoded, _) = wal::encode(fixtures::wal_records(), fixtures::BLOCK_BYTES);
    assert_eq!(encoded, stored, "the WAL encoder's output changed");
}

#[test]
fn a_committed_object_decodes_and_encodes_the_same() {
    let stored = Bytes::from(read("object.bin"));
    let (_, index) = decode_object_index(&stored).unwrap();
    let mut found: Vec<(u64, Vec<mink_s3stream::StreamBatch>)> = Vec::new();
    for entry in &index {
        let block = stored.slice(entry.range().start as usize..entry.range().end as usize);
        let batches = decode_block(&block, entry).unwrap();
        match found.last_mut() {
            Some((stream, all)) if *stream == entry.stream_id => all.extend(batches),
            _ => found.push((entry.stream_id, batches)),
        }
    }
    assert_eq!(found, fixtures::object_batches());
    assert!(index.len() > 2, "the fixture has several blocks");
    let mut builder = ObjectBuilder::new(fixtures::BLOCK_BYTES);
    for (stream, batches) in fixtures::object_batches() {
        builder.add_stream(stream, &batches);
    }
    assert_eq!(
        builder.finish().0,
        stored,
        "the object encoder's output changed"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

async fn rows(http: &reqwest::Client, url: &str, bucket: u32, offset: u64) -> Vec<Value> {
    let r = http
        .get(format!(
            "{url}/v1/tables/{}/buckets/{bucket}/records?offset={offset}",
            fixtures::TABLE
        ))
        .header("accept", "application/x-ndjson")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn expected(ids: impl IntoIterator<Item = std::ops::Range<i64>>) -> Vec<Value> {
    ids.into_iter().flatten().map(fixtures::row).collect()
}

/// A node started on a copy of the fixture `name` serves its table as written: schema, rows,
/// log start, and the writer's window (a retry is a duplicate, the next sequence appends).
async fn node_fixture_is_served_as_written(name: &str, extra: Option<std::ops::Range<i64>>) {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixtures::dir().join(name), dir.path());
    let history: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("history.json")).unwrap()).unwrap();
    let writer = history["writer_id"].as_u64().unwrap();
    let mut settings = Settings {
        node_id: "fixture".to_owned(),
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        ..Settings::default()
    };
    settings.flight.listen = None;
    settings.kafka.listen = None;
    let node = NodeBuilder::from_settings(settings)
        .await
        .unwrap()
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let url = node.url();
    let table: Value = http
        .get(format!("{url}/v1/tables/{}", fixtures::TABLE))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(table["buckets"], 2, "{table}");
    assert_eq!(
        table["schemas"],
        json!([{"schema_id": 1, "schema": {"fields": [
            {"name": "id", "nullable": false, "type": "int64"},
            {"name": "msg", "nullable": true, "type": "utf8"},
            {"name": "score", "nullable": true, "type": "float64"},
            {"name": "ok", "nullable": true, "type": "bool"}
        ]}}]),
        "{table}"
    );

    assert_eq!(
        rows(&http, &url, 0, 0).await,
        expected(NodeHistory::WRITER_BATCHES)
    );
    let offsets: Value = http
        .get(format!(
            "{url}/v1/tables/{}/buckets/1/offsets",
            fixtures::TABLE
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(offsets["log_start"], NodeHistory::TRIM, "{offsets}");
    let mut bucket1: Vec<Value> = expected(NodeHistory::PLAIN_BATCHES);
    bucket1.drain(..NodeHistory::TRIM as usize);
    bucket1.extend(expected(extra));
    assert_eq!(rows(&http, &url, 1, NodeHistory::TRIM).await, bucket1);

    // The writer's window came back from its snapshot (or the WAL's replay).
    let append = |sequence: i32, ids: std::ops::Range<i64>| {
        let http = http.clone();
        let url = url.clone();
        async move {
            let body: String = ids.map(|i| format!("{}\n", fixtures::row(i))).collect();
            let r = http
                .post(format!(
                    "{url}/v1/tables/{}/buckets/0/records",
                    fixtures::TABLE
                ))
                .header("content-type", "application/x-ndjson")
                .header("mink-writer-id", writer.to_string())
                .header("mink-sequence", sequence.to_string())
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let retry = append(2, NodeHistory::WRITER_BATCHES[2].clone()).await;
    assert_eq!(
        (&retry["duplicate"], &retry["base_offset"]),
        (&json!(true), &json!(6)),
        "{retry}"
    );
    let next = append(3, 10..11).await;
    assert_eq!(
        (&next["duplicate"], &next["base_offset"]),
        (&json!(false), &json!(10)),
        "{next}"
    );
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_folder_left_by_a_graceful_shutdown_is_served_as_written() {
    node_fixture_is_served_as_written("clean", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_folder_left_by_a_crash_is_recovered_as_written() {
    node_fixture_is_served_as_written("crashed", Some(NodeHistory::after_crash())).await;
}

#[tokio::test]
async fn a_metadata_snapshot_of_version_1_decodes_encodes_the_same_and_restores() {
    use mink_metadata::snapshot::MetaSnapshot;
    let stored = read(fixtures::SNAPSHOT);
    let snapshot = MetaSnapshot::decode(fixtures::SNAPSHOT, &stored).unwrap();
    assert_eq!(snapshot.taken_at_ms, fixtures::SNAPSHOT_TAKEN_AT_MS);
    assert_eq!(
        snapshot.encode(),
        stored,
        "the snapshot encoder's output changed"
    );
    // Restored into an empty store, it holds the clean history's table and its streams.
    let kv = std::sync::Arc::new(mink_metadata::MemoryKv::new());
    snapshot.restore(kv.as_ref(), false).await.unwrap();
    let meta = mink_metadata::Metadata::open(kv, mink_metadata::MetadataOptions::default())
        .await
        .unwrap();
    let tables = meta.list_tables().await.unwrap();
    assert_eq!(
        tables.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        [fixtures::TABLE]
    );
    assert!(meta.list_streams().await.unwrap().len() >= 2);
}

#[test]
fn a_stream_manifest_of_version_1_decodes_and_encodes_the_same() {
    use mink_s3stream::format::manifest::StreamManifest;
    let stored = read(fixtures::MANIFEST);
    let manifest = StreamManifest::decode(&stored).unwrap();
    assert_eq!(manifest, fixtures::manifest());
    assert_eq!(
        manifest.encode(),
        stored,
        "the manifest encoder's output changed"
    );
    let tablet = mink_tablet::TabletId::from_label(&manifest.label).expect("a tablet's label");
    assert_eq!(
        (tablet.table.as_str(), tablet.bucket, tablet.incarnation),
        (fixtures::TABLE, 3, 1)
    );
}
