//! `write_fixtures [--force | --add-missing]`: writes the format fixtures of
//! `mink_tests::fixtures` into `tests/fixtures/v1/` with this build's formats. Run once per
//! format version; the fixtures are then committed and read back by every later build
//! (`tests/tests/formats.rs`). Refuses to overwrite existing fixtures without `--force`;
//! `--add-missing` writes only the fixtures of formats added since (`snapshot.bin`, a metadata
//! snapshot of the `clean` history, from its committed `meta.redb`; `manifest.bin`, a stream
//! manifest), leaving the rest as they are.

use std::path::Path;
use std::process::ExitCode;

use mink_s3stream::format::object::ObjectBuilder;
use mink_server::{Node, NodeBuilder, Settings};
use mink_tests::fixtures::{self, NodeHistory};
use serde_json::json;

type Error = String;

fn settings(dir: &Path) -> Settings {
    let mut settings = Settings {
        node_id: "fixture".to_owned(),
        listen: "127.0.0.1:0".parse().expect("address"),
        data_dir: dir.to_path_buf(),
        ..Settings::default()
    };
    settings.flight.listen = None;
    settings.kafka.listen = None;
    settings
}

async fn start(dir: &Path) -> Result<Node, Error> {
    NodeBuilder::from_settings(settings(dir))
        .await
        .map_err(|e| e.to_string())?
        .start()
        .await
        .map_err(|e| e.to_string())
}

fn ndjson(ids: std::ops::Range<i64>) -> String {
    ids.map(|i| format!("{}\n", fixtures::row(i))).collect()
}

async fn append(
    http: &reqwest::Client,
    node: &Node,
    bucket: u32,
    ids: std::ops::Range<i64>,
    writer: Option<(u64, i32)>,
) -> Result<(), Error> {
    let mut request = http
        .post(format!(
            "{}/v1/tables/{}/buckets/{bucket}/records",
            node.url(),
            fixtures::TABLE
        ))
        .header("content-type", "application/x-ndjson")
        .body(ndjson(ids));
    if let Some((id, sequence)) = writer {
        request = request
            .header("mink-writer-id", id.to_string())
            .header("mink-sequence", sequence.to_string());
    }
    let r = request.send().await.map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(format!("append: {}", r.text().await.unwrap_or_default()));
    }
    Ok(())
}

/// Runs [`NodeHistory`] on a node in `dir`; with `crash`, appends more and stops as a crash.
async fn history(dir: &Path, crash: bool) -> Result<(), Error> {
    let node = start(dir).await?;
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{}/v1/tables", node.url()))
        .json(&fixtures::table_request())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !created.status().is_success() {
        return Err(format!(
            "create: {}",
            created.text().await.unwrap_or_default()
        ));
    }
    let writer: serde_json::Value = http
        .post(format!("{}/v1/writers", node.url()))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    let writer = writer["writer_id"].as_u64().ok_or("no writer id")?;
    for (sequence, ids) in NodeHistory::WRITER_BATCHES.into_iter().enumerate() {
        append(&http, &node, 0, ids, Some((writer, sequence as i32))).await?;
    }
    for ids in NodeHistory::PLAIN_BATCHES {
        append(&http, &node, 1, ids, None).await?;
    }
    let trimmed = http
        .post(format!(
            "{}/v1/tables/{}/buckets/1/trim",
            node.url(),
            fixtures::TABLE
        ))
        .json(&json!({"offset": NodeHistory::TRIM}))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !trimmed.status().is_success() {
        return Err(format!("trim: {}", trimmed.status()));
    }
    std::fs::write(
        dir.join("history.json"),
        json!({"writer_id": writer}).to_string(),
    )
    .map_err(|e| e.to_string())?;
    if crash {
        append(&http, &node, 1, NodeHistory::after_crash(), None).await?;
        node.abort();
    } else {
        node.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    std::fs::write(path, bytes).map_err(|e| format!("write {}: {e}", path.display()))
}

/// `snapshot.bin`: a metadata snapshot of the `clean` history, read from a copy of its redb file.
async fn snapshot(out: &Path) -> Result<(), Error> {
    let path = out.join(fixtures::SNAPSHOT);
    if path.exists() {
        return Ok(());
    }
    let redb = std::env::temp_dir().join(format!("mink-fixture-{}.redb", std::process::id()));
    std::fs::copy(out.join("clean").join("meta.redb"), &redb).map_err(|e| e.to_string())?;
    let taken = async {
        let kv = mink_metadata::RedbKv::open(&redb).map_err(|e| e.to_string())?;
        mink_metadata::snapshot::MetaSnapshot::take(&kv, fixtures::SNAPSHOT_TAKEN_AT_MS)
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    let _ = std::fs::remove_file(&redb);
    write(&path, &taken?.encode())
}

/// The fixtures of formats added after the first set, each written only when missing.
async fn add_missing(out: &Path) -> Result<(), Error> {
    snapshot(out).await?;
    let manifest = out.join(fixtures::MANIFEST);
    if !manifest.exists() {
        write(&manifest, &fixtures::manifest().encode())?;
    }
    Ok(())
}

async fn run(force: bool) -> Result<(), Error> {
    let out = fixtures::dir();
    if out.exists() && !force {
        return Err(format!(
            "{} exists; fixtures are written once per format version (--force to rewrite)",
            out.display()
        ));
    }
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    write(&out.join("batch.bin"), &fixtures::fixture_batch())?;
    let (wal, _) =
        mink_s3stream::format::wal::encode(fixtures::wal_records(), fixtures::BLOCK_BYTES);
    write(&out.join("wal.bin"), &wal)?;
    let mut builder = ObjectBuilder::new(fixtures::BLOCK_BYTES);
    for (stream, batches) in fixtures::object_batches() {
        builder.add_stream(stream, &batches);
    }
    write(&out.join("object.bin"), &builder.finish().0)?;
    history(&out.join("clean"), false).await?;
    history(&out.join("crashed"), true).await?;
    add_missing(&out).await
}

#[tokio::main]
async fn main() -> ExitCode {
    let force = std::env::args().any(|a| a == "--force");
    let outcome = if std::env::args().any(|a| a == "--add-missing") {
        add_missing(&fixtures::dir()).await
    } else {
        run(force).await
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("write_fixtures: {e}");
            ExitCode::FAILURE
        }
    }
}
