//! The `mink` CLI driven as a user drives it: child processes against a node, JSON on stdout when
//! piped, the node's error and exit status 1 on stderr when a request fails, a tail that sees rows
//! another process appends (across the node recycling its event stream).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use mink_server::{Node, NodeBuilder, Settings};
use serde_json::Value;

struct Cli {
    url: String,
}

impl Cli {
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mink"));
        command
            .args(args)
            .env("MINK_URL", &self.url)
            .env_remove("MINK_AUTH_TOKEN")
            .stdin(Stdio::null());
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("mink runs")
    }

    /// Runs `args` with `stdin`; asserts exit 0 and returns stdout.
    fn ok_with(&self, args: &[&str], stdin: &[u8]) -> String {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mink runs");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin)
            .expect("write stdin");
        let out = child.wait_with_output().expect("mink ends");
        assert!(
            out.status.success(),
            "mink {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    }

    fn ok(&self, args: &[&str]) -> String {
        self.ok_with(args, b"")
    }

    fn json(&self, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(args)).expect("one JSON value")
    }

    /// Runs `args`, expects exit status 1 and returns stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(out.status.code(), Some(1), "mink {args:?} should fail");
        String::from_utf8(out.stderr).expect("utf-8")
    }
}

async fn node(dir: &std::path::Path, token: Option<&str>) -> Node {
    let mut settings = Settings {
        data_dir: dir.to_path_buf(),
        listen: "127.0.0.1:0".parse().expect("address"),
        ..Settings::default()
    };
    settings.flight.listen = None;
    settings.kafka.listen = None;
    // Short event streams, so the tail below reconnects while it follows.
    settings.http.sse_recycle = Duration::from_millis(700);
    settings.auth.token = token.map(mink_server::settings::Secret::new);
    NodeBuilder::from_settings(settings)
        .await
        .expect("components")
        .start()
        .await
        .expect("node starts")
}

fn ndjson(ids: std::ops::Range<i64>) -> String {
    ids.map(|i| format!("{{\"id\":{i},\"msg\":\"row {i}\"}}\n"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_manages_tables_appends_reads_and_tails() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let node = node(dir.path(), None).await;
    let cli = Arc::new(Cli { url: node.url() });
    tokio::task::spawn_blocking(move || scenario(&cli, dir.path()))
        .await
        .expect("scenario");
    node.shutdown().await.expect("shutdown");
}

fn scenario(cli: &Cli, dir: &std::path::Path) {
    // Tables.
    let created = cli.json(&[
        "tables",
        "create",
        "t",
        "--schema",
        "id:int64!,msg:utf8",
        "--buckets",
        "2",
    ]);
    assert_eq!(
        (&created["name"], &created["buckets"]),
        (&"t".into(), &2.into()),
        "{created}"
    );
    let again = cli.fails(&["tables", "create", "t", "--schema", "id:int64"]);
    assert!(again.contains("409 table_exists"), "{again}");
    let bad = cli.fails(&["tables", "create", "u", "--schema", "id"]);
    assert!(bad.contains("needs a type"), "{bad}");
    let listed = cli.ok(&["tables", "ls"]);
    let names: Vec<Value> = listed
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(names.len(), 1);
    assert_eq!(names[0]["name"], "t");

    // A tail started before the rows, in its own process.
    let mut tail = cli
        .command(&["tail", "t"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("tail runs");
    let (seen_tx, seen) = mpsc::channel::<Value>();
    let tail_out = tail.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(tail_out).lines().map_while(Result::ok) {
            if seen_tx
                .send(serde_json::from_str(&line).expect("a row"))
                .is_err()
            {
                return;
            }
        }
    });
    // Wait until the tail's stream is open: a row appended before would be before `now`.
    std::thread::sleep(Duration::from_millis(500));

    // Append from stdin, in several requests, idempotently.
    let acked: Value = serde_json::from_str(&cli.ok_with(
        &["append", "t", "--request-bytes", "1000"],
        ndjson(0..100).as_bytes(),
    ))
    .expect("json");
    assert_eq!(
        (&acked["rows"], &acked["base_offset"], &acked["next_offset"]),
        (&100.into(), &0.into(), &100.into()),
        "{acked}"
    );
    assert!(acked["requests"].as_u64().is_some_and(|r| r > 1), "{acked}");
    for want in 0..100 {
        let row = seen
            .recv_timeout(Duration::from_secs(10))
            .expect("the tail prints each row");
        assert_eq!(row["id"], want, "{row}");
    }
    // Past a recycle of the tail's event stream, rows keep coming, none twice.
    std::thread::sleep(Duration::from_millis(1200));
    cli.ok_with(&["append", "t"], ndjson(100..102).as_bytes());
    for want in 100..102 {
        let row = seen
            .recv_timeout(Duration::from_secs(10))
            .expect("the tail reconnected");
        assert_eq!(row["id"], want, "{row}");
    }
    tail.kill().expect("stop the tail");
    let _ = tail.wait();

    // Read: everything, a projection within bounds, Arrow.
    let rows = cli.ok(&["read", "t"]);
    assert_eq!(rows.lines().count(), 102);
    let some = cli.ok(&[
        "read",
        "t",
        "--from",
        "5",
        "--until",
        "8",
        "--columns",
        "id",
    ]);
    assert_eq!(some, "{\"id\":5}\n{\"id\":6}\n{\"id\":7}\n");
    let arrow = cli.run(&["read", "t", "--format", "arrow"]);
    assert!(arrow.status.success());
    let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(arrow.stdout), None)
        .expect("one Arrow IPC stream");
    let total: usize = reader.map(|b| b.expect("batch").num_rows()).sum();
    assert_eq!(total, 102);

    // Append an Arrow IPC file to bucket 1.
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(vec![7, 8, 9])),
            Arc::new(StringArray::from(vec!["a", "b", "c"])),
        ],
    )
    .expect("batch");
    let file = dir.join("rows.arrow");
    let mut writer = arrow_ipc::writer::FileWriter::try_new(
        std::fs::File::create(&file).expect("create"),
        &schema,
    )
    .expect("writer");
    writer.write(&batch).expect("write");
    writer.finish().expect("finish");
    let acked: Value =
        serde_json::from_str(&cli.ok(&["append", "t/1", "--file", file.to_str().expect("path")]))
            .expect("json");
    assert_eq!(acked["rows"], 3, "{acked}");
    assert_eq!(
        cli.ok(&["read", "t/1", "--columns", "msg"]),
        "{\"msg\":\"a\"}\n{\"msg\":\"b\"}\n{\"msg\":\"c\"}\n"
    );

    // Offsets, trim, and the error of a read below the log start.
    let offsets = cli.json(&["offsets", "t"]);
    assert_eq!(
        (&offsets["log_start"], &offsets["high_watermark"]),
        (&0.into(), &102.into()),
        "{offsets}"
    );
    assert!(
        offsets["retained_bytes"].as_u64().is_some_and(|b| b > 0),
        "{offsets}"
    );
    let trimmed = cli.json(&["trim", "t", "50"]);
    assert_eq!(trimmed["log_start"], 50);
    let gone = cli.fails(&["read", "t", "--from", "0"]);
    assert!(gone.contains("410 offset_trimmed"), "{gone}");
    let described = cli.json(&["tables", "describe", "t"]);
    let buckets = described["bucket_offsets"]
        .as_array()
        .expect("bucket offsets");
    assert_eq!(buckets.len(), 2);
    assert_eq!(buckets[0]["log_start"], 50);
    assert_eq!(buckets[1]["high_watermark"], 3);
    let writer = cli.json(&["writer", "init"]);
    assert!(writer["writer_id"].as_u64().is_some(), "{writer}");

    // Errors a user meets: no such table, no node there.
    let missing = cli.fails(&["offsets", "nope"]);
    assert!(missing.contains("404 table_not_found"), "{missing}");
    let nobody = cli.fails(&["tables", "ls", "--url", "http://127.0.0.1:9"]);
    assert!(nobody.contains("cannot connect"), "{nobody}");
    cli.ok(&["tables", "drop", "t"]);
    assert_eq!(cli.ok(&["tables", "ls"]), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_takes_the_token_from_its_setting() {
    const TOKEN: &str = "cli-test-token-0123456789";
    let dir = tempfile::tempdir().expect("temporary folder");
    let node = node(dir.path(), Some(TOKEN)).await;
    let cli = Cli { url: node.url() };
    tokio::task::spawn_blocking(move || {
        let refused = cli.fails(&["tables", "ls"]);
        assert!(refused.contains("401 unauthorized"), "{refused}");
        assert!(
            refused.contains("MINK_AUTH_TOKEN"),
            "says how to give one: {refused}"
        );
        let created = cli.json(&[
            "tables", "create", "t", "--schema", "id:int64", "--token", TOKEN,
        ]);
        assert_eq!(created["name"], "t");
        let out = cli
            .command(&["tables", "ls"])
            .env("MINK_AUTH_TOKEN", TOKEN)
            .output()
            .expect("mink runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("\"name\":\"t\""));
    })
    .await
    .expect("scenario");
    node.shutdown().await.expect("shutdown");
}

/// `mink admin backup` after a node stopped, more rows appended, the metadata file lost, `mink
/// admin restore` and `mink admin rebuild`: the node comes back with every row at its offset,
/// the ones appended after the backup too, and new ids do not collide with old ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_and_restore_bring_the_tables_back_after_the_metadata_is_lost() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let data_dir = dir.path().to_str().expect("path").to_owned();
    let first = node(dir.path(), None).await;
    let cli = Cli { url: first.url() };
    tokio::task::spawn_blocking(move || {
        cli.json(&["tables", "create", "t", "--schema", "id:int64!,msg:utf8"]);
        cli.ok_with(&["append", "t"], ndjson(0..50).as_bytes());
    })
    .await
    .expect("writes");
    first.shutdown().await.expect("shutdown");

    // The admin commands work on the stores, not through a node: no URL.
    let offline = Cli { url: String::new() };
    let admin = |args: &[&str]| {
        let mut all = vec!["admin"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--data-dir", &data_dir]);
        offline.run(&all)
    };
    let backup = admin(&["backup"]);
    assert!(
        backup.status.success(),
        "{}",
        String::from_utf8_lossy(&backup.stderr)
    );
    let said: Value = serde_json::from_slice(&backup.stdout).expect("json");
    assert!(said["keys"].as_u64().is_some_and(|k| k > 3), "{said}");
    // Rows the backup does not know of.
    let later = node(dir.path(), None).await;
    let cli = Cli { url: later.url() };
    tokio::task::spawn_blocking(move || {
        cli.ok_with(&["append", "t"], ndjson(50..80).as_bytes());
        // A table the backup does not know of at all.
        cli.json(&["tables", "create", "u", "--schema", "id:int64!,msg:utf8"]);
        cli.ok_with(&["append", "u"], ndjson(0..7).as_bytes());
    })
    .await
    .expect("writes");
    later.shutdown().await.expect("shutdown");
    std::fs::remove_file(dir.path().join("meta.redb")).expect("the metadata is lost");
    let restored = admin(&["restore"]);
    assert!(
        restored.status.success(),
        "{}",
        String::from_utf8_lossy(&restored.stderr)
    );
    let said: Value = serde_json::from_slice(&restored.stdout).expect("json");
    assert_eq!(
        said["keys"],
        serde_json::from_slice::<Value>(&backup.stdout).expect("json")["keys"]
    );
    // A second restore finds the store full and changes nothing.
    let again = admin(&["restore"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already holds"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let rebuild = |args: &[&str]| {
        let out = admin(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).expect("json")
    };
    let dry = rebuild(&["rebuild", "--dry-run"]);
    // A dry run recreates no table, so the new table's stream is only reported.
    assert_eq!(dry["offsets_recovered"], 30 + 7, "{dry}");
    let rebuilt = rebuild(&["rebuild"]);
    assert_eq!(rebuilt["offsets_recovered"], 30 + 7, "{rebuilt}");
    assert_eq!(rebuilt["complete"], true, "{rebuilt}");
    assert_eq!(
        rebuilt["tables"]["created"],
        serde_json::json!(["u"]),
        "{rebuilt}"
    );
    assert_eq!(rebuilt["tablets"]["registered"], 1, "{rebuilt}");

    let second = node(dir.path(), None).await;
    let cli = Cli { url: second.url() };
    tokio::task::spawn_blocking(move || {
        let rows = cli.ok(&["read", "t"]);
        let ids: Vec<i64> = rows
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).expect("row")["id"]
                    .as_i64()
                    .expect("id")
            })
            .collect();
        assert_eq!(ids, (0..80).collect::<Vec<_>>());
        let rows = cli.ok(&["read", "u"]);
        assert_eq!(rows.lines().count(), 7, "{rows}");
        let acked: Value =
            serde_json::from_str(&cli.ok_with(&["append", "t"], ndjson(80..81).as_bytes()))
                .expect("json");
        assert_eq!(acked["base_offset"], 80, "{acked}");
        assert!(
            acked["writer_id"].as_u64().is_some_and(|w| w >= 1 << 32),
            "ids continue far above the snapshot's: {acked}"
        );
    })
    .await
    .expect("reads");
    second.shutdown().await.expect("shutdown");
}
