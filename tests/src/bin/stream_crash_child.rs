//! A process that appends to one stream as fast as it can and prints `ACK <end offset>` for each
//! append once it is durable; the crash test kills it with SIGKILL at a random moment and checks
//! that the next process finds everything it printed.
//!
//! Usage: `stream_crash_child <dir>`; objects live in `<dir>/objects`, metadata in
//! `<dir>/meta.redb`, the stream id in `<dir>/stream-id`. Each batch of 2 offsets holds the text
//! `batch <base offset>`, so the checker can tell every batch from every other.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mink_metadata::{Metadata, MetadataOptions, RedbKv};
use mink_s3stream::engine::{CompactionSettings, Engine, EngineSettings};
use mink_s3stream::storage::ObjectStoreBackend;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Appends kept in flight, so crashes land between PUTs, acks and compactions alike.
const DEPTH: usize = 8;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: stream_crash_child <dir>")?,
    );
    let engine = open(&dir).await?;
    let id_file = dir.join("stream-id");
    let id = match std::fs::read_to_string(&id_file) {
        Ok(id) => id.trim().parse()?,
        Err(_) => {
            let id = engine.create_stream().await?.id;
            std::fs::write(&id_file, id.to_string())?;
            id
        }
    };
    let stream = engine.open_stream(id).await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "OPEN {}", stream.offsets().next)?;
    out.flush()?;
    let mut in_flight = VecDeque::new();
    loop {
        while in_flight.len() < DEPTH {
            let next = stream.offsets().next;
            let payload = Bytes::from(format!("batch {next}").into_bytes());
            in_flight.push_back(stream.append_at(next, 2, payload).await?);
        }
        if let Some(pending) = in_flight.pop_front() {
            let end = pending.end_offset;
            pending.durable().await?;
            writeln!(out, "ACK {end}")?;
            out.flush()?;
        }
    }
}

/// The engine on `dir`, compacting often so that crashes also hit compaction: WAL objects of
/// several batches are adopted as they are, smaller ones rewritten, and the second pass merges
/// and regroups every 200 ms.
async fn open(dir: &std::path::Path) -> Result<Engine, Error> {
    let storage = Arc::new(ObjectStoreBackend::local(dir.join("objects"))?);
    let kv = Arc::new(RedbKv::open(dir.join("meta.redb"))?);
    let metadata = Arc::new(Metadata::open(kv, MetadataOptions::default()).await?);
    let settings = EngineSettings {
        compaction: CompactionSettings {
            interval: Duration::from_millis(20),
            maintenance_interval: Duration::from_millis(200),
            stream_object_bytes: 2 << 10,
            adopt_wal_object_bytes: 256,
            merge_min_objects: 3,
            delete_grace: Duration::from_millis(50),
            ..CompactionSettings::default()
        },
        ..EngineSettings::default()
    };
    Ok(Engine::builder()
        .node("crash-node")
        .wal_storage(storage)
        .metadata(metadata)
        .settings(settings)
        .open()
        .await?)
}
