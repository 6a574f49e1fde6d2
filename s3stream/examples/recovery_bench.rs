//! Figures of metadata recovery (docs/metadata-recovery.md), each beside a baseline from the same
//! run on the same store (these machines are shared and noisy, so ratios mean more than times):
//!
//! - **Snapshot**: a metadata store holding `--buckets` buckets (a stream record, a tablet entry
//!   and a writer snapshot each) and `--objects` object records, on redb (the embedded default)
//!   and, when `MINK_TEST_ETCD_ENDPOINTS` is set, on etcd: the time to take a consistent
//!   snapshot (read at one moment, encoded) against one plain paged scan of the same keys, its
//!   size, and the time to decode it.
//! - **Rebuild**: `--rebuild-objects` committed objects on the store (`--store local|moto`) that
//!   (`--store`, see `common/store.rs`) the metadata does not know: the time `rebuild` takes to list, read every index and record
//!   them, against a plain listing plus one ranged GET of each object's tail with as many in
//!   flight.
//!
//! ```text
//! cargo run --release -p mink-s3stream --features test-util --example recovery_bench -- \
//!     [--store local|moto|s3-standard|s3-express] [--buckets N] [--objects N] [--rebuild-objects N] [--out FILE]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt, stream};
use mink_metadata::kv::{MetaKv, MetaKvExt, Op, Txn};
use mink_metadata::snapshot::MetaSnapshot;
use mink_metadata::value::encode;
use mink_metadata::{
    EtcdKv, Metadata, MetadataOptions, ObjectKind, ObjectRecord, RedbKv, StreamRange, StreamRecord,
    StreamState, keys,
};
use mink_s3stream::StreamBatch;
use mink_s3stream::format::object::ObjectBuilder;
use mink_s3stream::rebuild::{RebuildSettings, rebuild};
use mink_s3stream::storage::ObjectStorage;

#[path = "common/store.rs"]
mod store;

use store::store;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Objects read at once by the rebuild and by its baseline.
const CONCURRENCY: usize = 16;

struct Options {
    store: String,
    buckets: u64,
    objects: u64,
    rebuild_objects: u64,
    out: Option<String>,
}

fn options() -> Result<Options, Error> {
    let mut o = Options {
        store: "local".into(),
        buckets: 10_000,
        objects: 100_000,
        rebuild_objects: 10_000,
        out: None,
    };
    let mut args = std::env::args().skip(1);
    let number = |args: &mut dyn Iterator<Item = String>, flag: &str| -> Result<u64, Error> {
        Ok(args
            .next()
            .ok_or(format!("{flag} needs a number"))?
            .parse()?)
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--store" => o.store = args.next().ok_or("--store needs a value")?,
            "--buckets" => o.buckets = number(&mut args, "--buckets")?,
            "--objects" => o.objects = number(&mut args, "--objects")?,
            "--rebuild-objects" => o.rebuild_objects = number(&mut args, "--rebuild-objects")?,
            "--out" => o.out = Some(args.next().ok_or("--out needs a file")?),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(o)
}

fn stream_record(id: u64, end: u64) -> StreamRecord {
    StreamRecord {
        id,
        epoch: 3,
        owner: Some("bench~1".to_owned()),
        start_offset: 0,
        end_offset: end,
        state: StreamState::Closed,
    }
}

/// Fills `kv` with `buckets` buckets and `objects` object records of 1-4 ranges each.
async fn populate(kv: &dyn MetaKv, buckets: u64, objects: u64) -> Result<(), Error> {
    let mut ops = Vec::new();
    for b in 1..=buckets {
        ops.push(Op::put(keys::stream(b), encode(&stream_record(b, 1 << 20))));
        ops.push(Op::put(
            format!("mink/tablets/bench/default/{b}"),
            Bytes::from(vec![7u8; 17]),
        ));
        ops.push(Op::put(
            format!("{}bench/default/{b}", keys::WRITERS),
            Bytes::from(vec![9u8; 96]),
        ));
    }
    for o in 1..=objects {
        let ranges = (0..1 + o % 4)
            .map(|i| StreamRange {
                stream_id: 1 + (o * 7 + i) % buckets.max(1),
                start_offset: o * 10,
                end_offset: o * 10 + 10,
                position: i * 4096,
                len: 4096,
            })
            .collect::<Vec<_>>();
        let record = ObjectRecord {
            id: o,
            kind: ObjectKind::StreamSet,
            key: format!("data/{o:016x}"),
            size: ranges.len() as u64 * 4096 + 200,
            ranges,
        };
        ops.push(Op::put(keys::object(o), encode(&record)));
    }
    let chunk = kv.max_txn_ops().unwrap_or(256).min(256);
    let chunks: Vec<Vec<Op>> = ops.chunks(chunk).map(<[Op]>::to_vec).collect();
    stream::iter(chunks)
        .map(|on_success| async move {
            kv.txn(Txn {
                compares: Vec::new(),
                on_success,
            })
            .await
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The snapshot figures of one backend, as a Markdown table row.
async fn snapshot_row(name: &str, kv: &dyn MetaKv, o: &Options) -> Result<String, Error> {
    let started = Instant::now();
    populate(kv, o.buckets, o.objects).await?;
    eprintln!(
        "recovery_bench: {name}: {} buckets and {} objects written in {:.1} s",
        o.buckets,
        o.objects,
        started.elapsed().as_secs_f64()
    );
    let (mut takes, mut scans, mut decodes) = (Vec::new(), Vec::new(), Vec::new());
    let mut size = 0;
    let mut keys_held = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let all = kv.scan_all(keys::ROOT, 512).await?;
        scans.push(t.elapsed());
        keys_held = all.len();
        let t = Instant::now();
        let snapshot = MetaSnapshot::take(kv, 0).await?;
        let encoded = snapshot.encode();
        takes.push(t.elapsed());
        size = encoded.len();
        let t = Instant::now();
        let decoded = MetaSnapshot::decode("bench", &encoded)?;
        decodes.push(t.elapsed());
        assert_eq!(decoded.entries.len(), snapshot.entries.len());
    }
    let (take, scan, decode) = (median(takes), median(scans), median(decodes));
    Ok(format!(
        "| {name} | {keys_held} | {:.1} MiB | {:.0} B | {:.0} | {:.0} | {:.2}x | {:.0} |\n",
        size as f64 / f64::from(1 << 20),
        size as f64 / (o.buckets + o.objects) as f64,
        ms(take),
        ms(scan),
        take.as_secs_f64() / scan.as_secs_f64(),
        ms(decode),
    ))
}

/// Writes `count` committed objects of one 4 KiB block each, 10 consecutive ones per stream.
async fn write_objects(storage: &Arc<dyn ObjectStorage>, count: u64) -> Result<u64, Error> {
    let streams = count.div_ceil(10);
    stream::iter(0..count)
        .map(|i| {
            let storage = storage.clone();
            async move {
                let (stream_id, nth) = (1 + i / 10, i % 10);
                let mut builder = ObjectBuilder::new(1 << 20);
                let batch = StreamBatch {
                    base_offset: nth * 4,
                    count: 4,
                    payload: Bytes::from(vec![b'x'; 4096]),
                };
                builder.add_stream(stream_id, &[batch]);
                let (bytes, _) = builder.finish();
                storage
                    .put(&format!("data/{:016x}", 1 + i), bytes)
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(streams)
}

/// The rebuild figures on `storage`, as Markdown.
async fn rebuild_section(o: &Options, storage: Arc<dyn ObjectStorage>) -> Result<String, Error> {
    let started = Instant::now();
    let streams = write_objects(&storage, o.rebuild_objects).await?;
    eprintln!(
        "recovery_bench: {} objects of {streams} streams written to {} in {:.1} s",
        o.rebuild_objects,
        o.store,
        started.elapsed().as_secs_f64()
    );
    // Baseline: what any rebuild must do at least: list, then read each object's tail.
    let t = Instant::now();
    let listed = storage.list("data/").await?;
    let tails: Vec<u64> = stream::iter(listed.iter())
        .map(|m| {
            let storage = storage.clone();
            async move {
                let from = m.size.saturating_sub(64 << 10);
                storage
                    .get_range(&m.key, from..m.size)
                    .await
                    .map(|b| b.len() as u64)
            }
        })
        .buffered(CONCURRENCY)
        .try_collect()
        .await?;
    let baseline = t.elapsed();
    assert_eq!(tails.len() as u64, o.rebuild_objects);

    let dir = tempfile::tempdir()?;
    let kv: Arc<dyn MetaKv> = Arc::new(RedbKv::open(dir.path().join("meta.redb"))?);
    let records: Vec<Op> = (1..=streams)
        .map(|id| Op::put(keys::stream(id), encode(&stream_record(id, 0))))
        .collect();
    for chunk in records.chunks(256) {
        kv.txn(Txn {
            compares: Vec::new(),
            on_success: chunk.to_vec(),
        })
        .await?;
    }
    let metadata = Metadata::open(kv.clone(), MetadataOptions::default()).await?;
    let t = Instant::now();
    let report = rebuild(
        &metadata,
        &storage,
        &storage,
        &RebuildSettings {
            concurrency: CONCURRENCY,
            ..RebuildSettings::default()
        },
    )
    .await?;
    let took = t.elapsed();
    assert_eq!(
        report.objects_placed as u64, o.rebuild_objects,
        "{report:?}"
    );
    assert!(report.complete(), "{report:?}");
    let per_10k = took.as_secs_f64() * 10_000.0 / o.rebuild_objects as f64;
    Ok(format!(
        "### Rebuild from objects (`{}`)\n\n\
         {} committed objects of one 4 KiB block each, 10 per stream, that the metadata (redb) \
         does not know; {CONCURRENCY} reads in flight.\n\n\
         | | time | per 10k objects |\n|---|---:|---:|\n\
         | baseline: LIST + one ranged GET of each object's tail | {:.2} s | {:.2} s |\n\
         | `rebuild` (list, read every index, place, write {} records and {streams} streams) | {:.2} s | {:.2} s |\n\
         | ratio | {:.2}x | |\n\n",
        o.store,
        o.rebuild_objects,
        baseline.as_secs_f64(),
        baseline.as_secs_f64() * 10_000.0 / o.rebuild_objects as f64,
        report.objects_placed,
        took.as_secs_f64(),
        per_10k,
        took.as_secs_f64() / baseline.as_secs_f64(),
    ))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let o = options()?;
    let dir = tempfile::tempdir()?;
    let mut md = format!(
        "### Metadata snapshots\n\n{} buckets (stream record, tablet entry, writer snapshot) and \
         {} object records of 1-4 ranges; median of 3. Baseline: one plain scan of every key, \
         512 a page; a snapshot reads them at one moment (pinned to one revision on etcd, one \
         read transaction on redb) and encodes them.\n\n\
         | store | keys | snapshot | per bucket or object | take (ms) | scan (ms) | take / scan | decode (ms) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
        o.buckets, o.objects
    );
    let redb = RedbKv::open(dir.path().join("snapshot.redb"))?;
    md += &snapshot_row("redb", &redb, &o).await?;
    drop(redb);
    if let Ok(endpoints) = std::env::var("MINK_TEST_ETCD_ENDPOINTS") {
        let endpoints: Vec<String> = endpoints.split(',').map(str::to_owned).collect();
        let prefix = format!("recovery-bench-{}/", std::process::id());
        let etcd = EtcdKv::connect(&endpoints, &prefix).await?;
        md += &snapshot_row("etcd", &etcd, &o).await?;
        let all = etcd.scan_all(keys::ROOT, 512).await?;
        for chunk in all.chunks(128) {
            etcd.txn(Txn {
                compares: Vec::new(),
                on_success: chunk.iter().map(|kv| Op::delete(kv.key.clone())).collect(),
            })
            .await?;
        }
    }
    md += "\n";
    let storage = store(&o.store, &dir.path().join("objects"))?;
    md += &rebuild_section(&o, storage.clone()).await?;
    let listed = storage.list("data/").await?;
    let keys: Vec<String> = listed.into_iter().map(|m| m.key).collect();
    storage.delete_many(&keys).await?;
    print_report(&md);
    if let Some(out) = &o.out {
        std::fs::write(out, &md)?;
    }
    Ok(())
}

#[expect(clippy::print_stdout, reason = "the report is the program's output")]
fn print_report(md: &str) {
    println!("{md}");
}
