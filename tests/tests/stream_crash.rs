//! kill -9 of a process appending to a stream on the embedded default (local files + redb): after
//! every kill, a new process recovers, and in the end every acknowledged batch is readable exactly
//! once, in order, with offsets contiguous from 0.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use mink_metadata::{Metadata, MetadataOptions, RedbKv};
use mink_s3stream::ReadBound;
use mink_s3stream::engine::Engine;
use mink_s3stream::storage::ObjectStoreBackend;

const KILLS: usize = 20;

/// Runs the child until it has acknowledged `acks` appends, then kills it with SIGKILL. Returns
/// the next offset it recovered to and the highest end offset it acknowledged.
fn run_and_kill(dir: &std::path::Path, acks: usize) -> (u64, u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stream_crash_child"))
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the child");
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut opened = None;
    let mut acked = 0;
    let mut seen = 0;
    while seen < acks {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the child keeps acknowledging");
        if let Some(next) = line.strip_prefix("OPEN ") {
            opened = Some(next.parse::<u64>().expect("an offset"));
        } else if let Some(end) = line.strip_prefix("ACK ") {
            let end: u64 = end.parse().expect("an offset");
            assert!(end > acked, "acknowledgements arrive in order");
            acked = end;
            seen += 1;
        }
    }
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    // Lines printed before the kill are acknowledgements too.
    reader.join().expect("reader thread");
    for line in rx.try_iter() {
        if let Some(end) = line.strip_prefix("ACK ") {
            acked = acked.max(end.parse().expect("an offset"));
        }
    }
    (opened.expect("the child printed OPEN"), acked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut acked = 0;
    for round in 0..KILLS {
        let (opened, round_acked) = run_and_kill(dir.path(), 10 + (round * 37) % 150);
        assert!(
            opened >= acked,
            "round {round}: recovered to {opened}, but {acked} was acknowledged"
        );
        acked = acked.max(round_acked);
    }

    let storage = Arc::new(ObjectStoreBackend::local(dir.path().join("objects")).unwrap());
    let kv = Arc::new(RedbKv::open(dir.path().join("meta.redb")).unwrap());
    let metadata = Arc::new(
        Metadata::open(kv, MetadataOptions::default())
            .await
            .unwrap(),
    );
    let engine = Engine::builder()
        .node("crash-node")
        .wal_storage(storage)
        .metadata(metadata)
        .open()
        .await
        .unwrap();
    let id: u64 = std::fs::read_to_string(dir.path().join("stream-id"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stream = engine.open_stream(id).await.unwrap();
    let offsets = stream.offsets();
    assert!(
        offsets.next >= acked,
        "{offsets:?} lost acknowledged offsets below {acked}"
    );
    let mut cursor = 0;
    while cursor < offsets.confirm {
        let batches = stream
            .fetch(cursor, u64::MAX, 1 << 16, ReadBound::Confirmed)
            .await
            .unwrap();
        assert!(!batches.is_empty());
        for batch in batches {
            assert_eq!(batch.base_offset, cursor, "offsets are contiguous");
            assert_eq!(batch.payload, format!("batch {cursor}").as_bytes());
            cursor = batch.end_offset();
        }
    }
    assert_eq!(cursor, offsets.next);
    engine.shutdown().await.unwrap();
}
