//! Crash test of the redb metadata backend: a child process (this test binary, re-executed) commits
//! in a loop and reports every acknowledged commit; the parent kills it with SIGKILL at an arbitrary
//! point, reopens the file and checks that every acknowledged commit is there and that no commit is
//! half-applied. Repeated over several kills on the same file.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use mink_metadata::{
    CommitRequest, MetaKv, Metadata, MetadataOptions, ObjectKind, ObjectRecord, RedbKv, StreamRange,
};

const CHILD_ENV: &str = "MINK_TEST_METADATA_CRASH_CHILD";
const TEST_NAME: &str = "redb_survives_kill_9_mid_commit";
const ROUNDS: usize = 3;

/// Child role: commit forever, one object of 10 offsets per commit, printing `ACK <end>` after each.
async fn child(path: &str) {
    let kv: Arc<dyn MetaKv> = Arc::new(RedbKv::open(path).expect("child opens redb"));
    let meta = Metadata::open(
        kv,
        MetadataOptions {
            id_block_size: 3,
            ..Default::default()
        },
    )
    .await
    .expect("child opens metadata");
    let stream = match meta.list_streams().await.expect("list").first() {
        Some(s) => s.id,
        None => meta.create_stream().await.expect("create").id,
    };
    let opened = meta.open_stream(stream, "child").await.expect("open");
    let mut end = opened.end_offset;
    let mut out = std::io::stdout();
    for _ in 0..1_000_000 {
        let id = meta.allocate_object_id().await.expect("object id");
        let range = StreamRange {
            stream_id: stream,
            start_offset: end,
            end_offset: end + 10,
            position: 0,
            len: 100,
        };
        let object = ObjectRecord {
            id,
            kind: ObjectKind::Stream,
            key: format!("o/{id}"),
            size: 100,
            ranges: vec![range],
        };
        meta.commit(CommitRequest {
            stream_epochs: vec![(stream, opened.epoch)],
            add_objects: vec![object],
            advance: vec![(stream, end + 10)],
            ..Default::default()
        })
        .await
        .expect("commit");
        end += 10;
        writeln!(out, "ACK {end}")
            .and_then(|()| out.flush())
            .expect("stdout");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_survives_kill_9_mid_commit() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(&path).await;
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    let exe = std::env::current_exe().unwrap();
    let mut acked_end = 0u64;
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let end = line
                    .strip_prefix("ACK ")
                    .and_then(|e| e.parse::<u64>().ok());
                if let Some(end) = end
                    && tx.send(end).is_err()
                {
                    return;
                }
            }
        });
        // Let it run a varying number of commits, then kill it wherever it is.
        let target = 20 + 15 * round;
        for _ in 0..target {
            let end = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("child keeps acknowledging commits");
            acked_end = acked_end.max(end);
        }
        child.kill().expect("SIGKILL the child");
        child.wait().unwrap();
        reader.join().unwrap();
        // Acks that were written before the kill count too.
        while let Ok(end) = rx.try_recv() {
            acked_end = acked_end.max(end);
        }

        let kv: Arc<dyn MetaKv> = Arc::new(RedbKv::open(&path).expect("reopen after kill -9"));
        let meta = Metadata::open(kv, MetadataOptions::default())
            .await
            .unwrap();
        let streams = meta.list_streams().await.unwrap();
        assert_eq!(streams.len(), 1);
        let stream = &streams[0];
        assert!(
            stream.end_offset >= acked_end,
            "round {round}: acknowledged end {acked_end} lost, store has {}",
            stream.end_offset
        );
        // No half-applied commit: the objects tile [0, end) exactly, one per commit.
        let mut objects = meta.list_objects().await.unwrap();
        objects.sort_by_key(|o| o.ranges[0].start_offset);
        let mut next = 0;
        for o in &objects {
            assert_eq!(
                o.ranges[0].start_offset, next,
                "round {round}: gap or overlap at {next}"
            );
            next = o.ranges[0].end_offset;
        }
        assert_eq!(
            next, stream.end_offset,
            "round {round}: objects and stream end disagree"
        );
        // The index rebuilt on open agrees.
        assert_eq!(
            meta.index().covering(stream.id, 0, usize::MAX).len(),
            objects.len()
        );
        acked_end = stream.end_offset;
    }
}
