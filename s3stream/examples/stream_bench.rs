//! End-to-end figures of the stream engine, each beside its raw object-store baseline measured
//! in the same run (these machines are shared and noisy, so only ratios mean much).
//!
//! ```text
//! cargo run --release -p mink-s3stream --features test-util --example stream_bench -- \
//!     [--store local|moto|s3-standard|s3-express] [--quick] [--out FILE]
//! ```
//!
//! - `local`: object_store on a local directory; `moto`: the S3 server named by
//!   `MINK_TEST_S3_ENDPOINT` / `MINK_TEST_S3_BUCKET` (`cargo xtask bench` starts one);
//!   `s3-standard` / `s3-express`: an in-memory store behind the latency model of that S3 class.
//! - Idle append: sequential 1 KiB appends to one stream, each awaited, interleaved with raw PUTs
//!   of a same-sized object: latency p50/p99 of both and WAL PUTs per append.
//! - Group commit: 1000 streams, one appender each keeping 4 appends of 16 KiB in flight, for a
//!   fixed time: throughput, WAL PUTs/s and p99 latency, against the raw sequential PUT
//!   throughput of 8 MiB objects measured for the same time just before.
//!
//! Prints a Markdown report (and writes it to `--out` when given).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mink_metadata::{MemoryKv, MetaKv, Metadata, MetadataOptions};
use mink_s3stream::storage::{CountingStorage, ObjectStorage};
use mink_s3stream::{Engine, EngineSettings, ReadBound};

#[path = "common/store.rs"]
mod store;

use store::store;

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Options {
    store: String,
    quick: bool,
    out: Option<String>,
}

fn options() -> Result<Options, Error> {
    let mut options = Options {
        store: "local".into(),
        quick: false,
        out: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--store" => options.store = args.next().ok_or("--store needs a value")?,
            "--quick" => options.quick = true,
            "--out" => options.out = Some(args.next().ok_or("--out needs a file")?),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(options)
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort_unstable();
    let at = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples.get(at).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn engine(storage: Arc<dyn ObjectStorage>, kv: Arc<dyn MetaKv>) -> Result<Engine, Error> {
    engine_with_settings(storage, kv, EngineSettings::default()).await
}

async fn engine_with_settings(
    storage: Arc<dyn ObjectStorage>,
    kv: Arc<dyn MetaKv>,
    settings: EngineSettings,
) -> Result<Engine, Error> {
    let metadata = Arc::new(Metadata::open(kv, MetadataOptions::default()).await?);
    Ok(Engine::builder()
        .node("bench")
        .wal_storage(storage)
        .metadata(metadata)
        .settings(settings)
        .open()
        .await?)
}

/// A catch-up read of a whole stream from committed objects.
struct CatchUp {
    objects: usize,
    bytes: u64,
    mbps: f64,
    gets: u64,
    loaded: u64,
}

async fn catch_up(
    engine: &Engine,
    counting: &CountingStorage,
    stream: &mink_s3stream::Stream,
) -> Result<CatchUp, Error> {
    let objects = engine
        .metadata()
        .index()
        .covering(stream.id(), 0, usize::MAX)
        .len();
    let (cache, gets) = (engine.cache_metrics(), counting.counts().gets);
    let started = Instant::now();
    let (mut cursor, mut bytes) = (0u64, 0u64);
    let end = stream.offsets().confirm;
    while cursor < end {
        for batch in stream
            .fetch(cursor, u64::MAX, 4 << 20, ReadBound::Confirmed)
            .await?
        {
            bytes += batch.payload.len() as u64;
            cursor = batch.end_offset();
        }
    }
    Ok(CatchUp {
        objects,
        bytes,
        mbps: bytes as f64 / started.elapsed().as_secs_f64() / 1e6,
        gets: counting.counts().gets - gets,
        loaded: engine.cache_metrics().bytes_loaded - cache.bytes_loaded,
    })
}

#[tokio::main]
#[expect(clippy::print_stdout, reason = "the report is the program's output")]
async fn main() -> Result<(), Error> {
    let options = options()?;
    let dir = tempfile::tempdir()?;
    let raw = store(&options.store, dir.path())?;
    let counting = Arc::new(CountingStorage::new(raw.clone()));
    let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
    let engine = engine(counting.clone(), kv.clone()).await?;
    let mut report = format!(
        "## Stream engine on `{}`{}\n\n",
        options.store,
        if options.quick { " (quick)" } else { "" }
    );

    // 1. Idle appends against raw PUTs of the same size, interleaved.
    let samples = if options.quick { 100 } else { 500 };
    let id = engine.create_stream().await?.id;
    let stream = engine.open_stream(id).await?;
    let payload = Bytes::from(vec![0x42u8; 1024]);
    // The raw object is as large as the WAL object holding one such append.
    let (wal_object, _) = mink_s3stream::format::wal::encode(
        vec![mink_s3stream::wal::WalRecord {
            stream_id: id,
            epoch: 1,
            base_offset: 0,
            count: 1,
            payload: payload.clone(),
            payload_crc: None,
        }],
        EngineSettings::default().wal.block_bytes,
    );
    let raw_object = Bytes::from(vec![0x42u8; wal_object.len()]);
    raw.put("bench/warmup", raw_object.clone()).await?;
    stream.append(1, payload.clone()).await?.durable().await?;
    let (mut raw_lat, mut append_lat) = (Vec::new(), Vec::new());
    let puts_before = engine.wal_metrics().puts.load(Ordering::Relaxed);
    for i in 0..samples {
        let started = Instant::now();
        raw.put(&format!("bench/raw-{i}"), raw_object.clone())
            .await?;
        raw_lat.push(started.elapsed());
        let started = Instant::now();
        stream.append(1, payload.clone()).await?.durable().await?;
        append_lat.push(started.elapsed());
    }
    let wal_puts = engine.wal_metrics().puts.load(Ordering::Relaxed) - puts_before;
    let (raw50, raw99) = (
        percentile(&mut raw_lat, 0.5),
        percentile(&mut raw_lat, 0.99),
    );
    let (app50, app99) = (
        percentile(&mut append_lat, 0.5),
        percentile(&mut append_lat, 0.99),
    );
    report += &format!(
        "### Idle append (1 KiB, {samples} samples)\n\n\
         | | p50 ms | p99 ms |\n|---|---|---|\n\
         | raw PUT ({} B) | {:.3} | {:.3} |\n| append until durable | {:.3} | {:.3} |\n\
         | ratio | **{:.2}x** | {:.2}x |\n\n\
         WAL PUTs per idle append: **{:.3}** (goal: 1)\n\n",
        raw_object.len(),
        ms(raw50),
        ms(raw99),
        ms(app50),
        ms(app99),
        ms(app50) / ms(raw50),
        ms(app99) / ms(raw99),
        wal_puts as f64 / samples as f64,
    );

    // 2. Raw sequential PUT throughput of WAL-sized objects, for as long as the group-commit run
    //    below: a short burst would measure only the page cache (local files) or an idle server,
    //    while the engine runs long enough to meet dirty-page writeback and a loaded server. The
    //    objects are deleted afterwards, outside the timing.
    const DEPTH: usize = 4;
    const BATCH: usize = 16 << 10;
    let streams = 1000;
    let duration = Duration::from_secs(if options.quick { 4 } else { 15 });
    let big = Bytes::from(vec![0x17u8; 8 << 20]);
    let started = Instant::now();
    let mut rounds = 0;
    while started.elapsed() < duration {
        raw.put(&format!("bench/big-{rounds}"), big.clone()).await?;
        rounds += 1;
    }
    let raw_mbps = (rounds * big.len()) as f64 / started.elapsed().as_secs_f64() / 1e6;
    for i in 0..rounds {
        raw.delete(&format!("bench/big-{i}")).await?;
    }

    // 3. Group commit: 1000 streams, each with a pipelining appender that keeps `DEPTH` appends
    //    in flight, as a producer with several requests in flight does.
    let batch = Bytes::from(vec![0x33u8; BATCH]);
    let mut handles = Vec::with_capacity(streams);
    for _ in 0..streams {
        let id = engine.create_stream().await?.id;
        handles.push(engine.open_stream(id).await?);
    }
    let one_of_many = handles.first().map(|s| s.id()).ok_or("no streams")?;
    let acked = Arc::new(AtomicU64::new(0));
    let puts_before = engine.wal_metrics().puts.load(Ordering::Relaxed);
    let wal_bytes_before = engine.wal_metrics().put_bytes.load(Ordering::Relaxed);
    let object_bytes_before = engine
        .metrics()
        .object_bytes_written
        .load(Ordering::Relaxed);
    let adopted_before = engine.metrics().wal_bytes_adopted.load(Ordering::Relaxed);
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::with_capacity(streams);
    for stream in handles {
        let batch = batch.clone();
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut in_flight = std::collections::VecDeque::with_capacity(DEPTH);
            loop {
                let more = Instant::now() < deadline;
                if more && in_flight.len() < DEPTH {
                    let sent = Instant::now();
                    in_flight.push_back((sent, stream.append(1, batch.clone()).await?));
                    continue;
                }
                let Some((sent, pending)) = in_flight.pop_front() else {
                    break;
                };
                pending.durable().await?;
                latencies.push(sent.elapsed());
                acked.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, mink_s3stream::StreamError>(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed();
    let wal_puts = engine.wal_metrics().puts.load(Ordering::Relaxed) - puts_before;
    let wal_bytes = engine.wal_metrics().put_bytes.load(Ordering::Relaxed) - wal_bytes_before;
    let object_bytes = engine
        .metrics()
        .object_bytes_written
        .load(Ordering::Relaxed)
        - object_bytes_before;
    let adopted = engine.metrics().wal_bytes_adopted.load(Ordering::Relaxed) - adopted_before;
    let bytes = acked.load(Ordering::Relaxed) as f64 * batch.len() as f64;
    let mbps = bytes / elapsed.as_secs_f64() / 1e6;
    let p99 = percentile(&mut latencies, 0.99);
    let p50 = percentile(&mut latencies, 0.5);
    report += &format!(
        "### Group commit ({streams} streams, one appender each with {DEPTH} appends in flight, \
         {} KiB batches, {:.1} s)\n\n\
         | | figure |\n|---|---|\n\
         | raw sequential PUT throughput (8 MiB objects) | {raw_mbps:.1} MB/s |\n\
         | appended and durable | {mbps:.1} MB/s, {:.0} batches/s |\n\
         | ratio to raw | **{:.2}x** (goal: >= 0.8x) |\n\
         | WAL PUTs/s | {:.0} |\n| append latency p50 / p99 | {:.1} / {:.1} ms |\n\
         | written to the store per byte appended: WAL / rewritten by compaction | {:.2} / {:.2} |\n\
         | WAL bytes committed as they are (adopted), per byte appended | {:.2} |\n\n\
         The baseline ran for as long as the appenders, just before them. Compaction commits WAL \
         objects of at least `adopt_wal_object_bytes` as they are and rewrites smaller ones; \
         figures count what it did during the run (it may lag the appenders within the \
         uncompacted budget).\n\n",
        BATCH >> 10,
        elapsed.as_secs_f64(),
        acked.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64(),
        mbps / raw_mbps,
        wal_puts as f64 / elapsed.as_secs_f64(),
        ms(p50),
        ms(p99),
        wal_bytes as f64 / bytes,
        object_bytes as f64 / bytes,
        adopted as f64 / bytes,
    );

    // 4. A reader following a writer at the tail.
    let id = engine.create_stream().await?.id;
    let writer = engine.open_stream(id).await?;
    let reader = writer.clone();
    // One durable append after another: on a modelled S3 class each waits for a PUT of tens of
    // milliseconds, so those stores take fewer (the full bench stays within about an hour).
    let appends = if options.quick || options.store.starts_with("s3-") {
        2000
    } else {
        10000
    };
    let reader_gets = || engine.metrics().object_gets.load(Ordering::Relaxed);
    let (cache_before, gets_before, reader_gets_before) = (
        engine.cache_metrics(),
        counting.counts().gets,
        reader_gets(),
    );
    let follow = tokio::spawn(async move {
        let (mut cursor, mut reads) = (0u64, 0u64);
        while cursor < appends {
            reader.wait_past(cursor, Duration::from_secs(10)).await;
            let batches = reader
                .fetch(cursor, u64::MAX, 1 << 20, ReadBound::Confirmed)
                .await?;
            reads += 1;
            cursor = batches.last().map_or(cursor, |b| b.end_offset());
        }
        Ok::<_, mink_s3stream::StreamError>(reads)
    });
    let small = Bytes::from(vec![7u8; 1024]);
    for _ in 0..appends {
        writer.append(1, small.clone()).await?.durable().await?;
    }
    let reads = follow.await??;
    let cache = engine.cache_metrics();
    let tail_hits = cache.tail_hits - cache_before.tail_hits;
    let tail_gets = reader_gets() - reader_gets_before;
    let all_gets = counting.counts().gets - gets_before;
    report += &format!(
        "### Tail reader ({appends} appends of 1 KiB, a reader following with wait_past)\n\n\
         | | figure |\n|---|---|\n\
         | reads | {reads} |\n| served by the tail cache | {tail_hits} (**{:.1}%**, goal >= 99%) |\n\
         | the reader's object-store GETs | **{tail_gets}** (goal: 0) |\n\
         | all object-store GETs meanwhile (compaction's regrouping reads committed objects) | {all_gets} |\n\n",
        100.0 * tail_hits as f64 / reads.max(1) as f64,
    );

    // 5. Catch-up replay from committed objects: cold (a new engine, empty caches) and warm,
    //    against raw sequential GETs of the same objects.
    let total: u64 = if options.quick { 128 << 20 } else { 1 << 30 };
    let id = engine.create_stream().await?.id;
    let history = engine.open_stream(id).await?;
    let chunk = Bytes::from(vec![0x5eu8; 256 << 10]);
    let mut in_flight = std::collections::VecDeque::new();
    for _ in 0..total / chunk.len() as u64 {
        in_flight.push_back(history.append(1, chunk.clone()).await?);
        if in_flight.len() >= 16
            && let Some(pending) = in_flight.pop_front()
        {
            pending.durable().await?;
        }
    }
    for pending in in_flight {
        pending.durable().await?;
    }
    history.close().await?;
    engine.shutdown().await?;
    let objects: Vec<_> = engine
        .metadata()
        .list_objects()
        .await?
        .into_iter()
        .filter(|o| o.ranges.iter().any(|r| r.stream_id == id))
        .collect();
    let started = Instant::now();
    let mut raw_bytes = 0u64;
    for object in &objects {
        raw_bytes += raw.get(&object.key).await?.len() as u64;
    }
    let raw_get = raw_bytes as f64 / started.elapsed().as_secs_f64() / 1e6;
    // The same objects in 8 MiB ranges, one after another: what a reader that cannot hold whole
    // objects pays per request on this store.
    let started = Instant::now();
    let mut ranged_bytes = 0u64;
    for object in &objects {
        let mut at = 0;
        while at < object.size {
            let end = (at + (8 << 20)).min(object.size);
            ranged_bytes += raw.get_range(&object.key, at..end).await?.len() as u64;
            at = end;
        }
    }
    let raw_ranged = ranged_bytes as f64 / started.elapsed().as_secs_f64() / 1e6;
    let replayer =
        engine_with_settings(counting.clone(), kv.clone(), EngineSettings::default()).await?;
    let history = replayer.open_stream(id).await?;
    let cold = catch_up(&replayer, &counting, &history).await?;
    let after_cold = replayer.cache_metrics();
    let warm = catch_up(&replayer, &counting, &history).await?;
    report += &format!(
        "### Catch-up replay of {} MiB from committed objects ({} objects)\n\n\
         | | MB/s | ratio to raw GET |\n|---|---|---|\n\
         | raw sequential GET of the same objects | {raw_get:.1} | 1.00x |\n\
         | raw sequential 8 MiB ranged GETs of the same objects | {raw_ranged:.1} | {:.2}x |\n",
        total >> 20,
        objects.len(),
        raw_ranged / raw_get,
    );
    for (label, replay) in [("cold", cold), ("warm", warm)] {
        assert_eq!(replay.bytes, total, "the replay read every byte");
        report += &format!(
            "| replay, {label} caches | {:.1} | **{:.2}x** |\n",
            replay.mbps,
            replay.mbps / raw_get
        );
    }
    report += &format!(
        "\nCold replay: {} loads ({} by readahead, {} readahead skipped), {} MiB loaded. Block \
         cache: {} MiB of memory, so a replay larger than that cannot be warm.\n\n",
        after_cold.loads,
        after_cold.readahead_loads,
        after_cold.readahead_skipped,
        after_cold.bytes_loaded >> 20,
        EngineSettings::default().cache.block.memory_bytes >> 20
    );

    // 6. Catch-up of one stream among the 1000 of the group-commit run: its history is spread
    //    over objects that hold every stream (stream-set objects, adopted WAL objects among them),
    //    then again after the second pass regrouped them by stream.
    let one = replayer.open_stream(one_of_many).await?;
    let before = catch_up(&replayer, &counting, &one).await?;
    let started = Instant::now();
    let mut passes = 0;
    loop {
        let done = replayer.metrics().set_compactions.load(Ordering::Relaxed);
        replayer.maintain_now().await?;
        if replayer.metrics().set_compactions.load(Ordering::Relaxed) == done || passes >= 64 {
            break;
        }
        passes += 1;
    }
    let regrouping = started.elapsed();
    let after = catch_up(&replayer, &counting, &one).await?;
    report += &format!(
        "### Catch-up of one stream among {streams} (its group-commit history, cold caches)\n\n\
         | | objects | KiB | MB/s | ratio to raw sequential GET above | GETs | bytes loaded per byte read |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for (label, c) in [("as written", before), ("after regrouping", after)] {
        report += &format!(
            "| {label} | {} | {} | {:.1} | **{:.2}x** | {} | {:.1} |\n",
            c.objects,
            c.bytes >> 10,
            c.mbps,
            c.mbps / raw_get,
            c.gets,
            c.loaded as f64 / c.bytes.max(1) as f64,
        );
    }
    report += &format!(
        "\nRegrouping: {passes} passes of up to {} MiB of stream-set objects in {:.1} s. The block \
         cache loads whole pages of {} KiB.\n\n",
        EngineSettings::default().compaction.set_compaction_bytes >> 20,
        regrouping.as_secs_f64(),
        EngineSettings::default().cache.block.page_size >> 10,
    );
    replayer.shutdown().await?;
    print!("{report}");
    if let Some(out) = options.out {
        std::fs::write(out, &report)?;
    }
    Ok(())
}
