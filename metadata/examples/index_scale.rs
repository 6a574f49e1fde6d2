//! The object index as the committed objects grow (issue 18's scale curve): for 10k, 100k and 1M
//! object records in the embedded metadata store (redb), synthetic and spread over 1,000 streams,
//!
//! - **memory**: the heap the index holds per object (a counting allocator: live bytes after the
//!   records are inserted minus before), beside the record's encoded size (what the store holds);
//! - **open**: the time `Metadata::open` takes to read every record into the index, against one
//!   plain paged scan of the same keys in the same run;
//! - **lookup**: the latency of `covering(stream, offset, 4)` (the reader's question: the objects
//!   holding a stream from an offset) at a random stream and offset, timed one by one.
//!
//! ```text
//! cargo run --release -p mink-metadata --example index_scale -- [--objects 10000,100000,1000000] [--out DIR]
//! ```
//!
//! Writes `DIR/scale-objects.md` and `DIR/scale-objects.csv` (one row per size, for the chart).

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use mink_metadata::kv::{MetaKv, MetaKvExt, Op, Txn};
use mink_metadata::value::{decode, encode};
use mink_metadata::{
    Metadata, MetadataOptions, ObjectIndex, ObjectKind, ObjectRecord, RedbKv, StreamRange, keys,
};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The system allocator, counting the bytes allocated and not yet freed.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

#[expect(
    unsafe_code,
    reason = "a global allocator is an unsafe trait; this one passes every call to `System`"
)]
// SAFETY: every call is passed to `System` unchanged; the counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Streams the objects are spread over (the buckets of a node).
const STREAMS: u64 = 1_000;
/// Offsets each range of an object holds.
const RANGE_OFFSETS: u64 = 100;
/// Lookups timed at each size.
const LOOKUPS: usize = 200_000;

struct Options {
    sizes: Vec<u64>,
    out: Option<PathBuf>,
}

fn options() -> Result<Options, Error> {
    let mut o = Options {
        sizes: vec![10_000, 100_000, 1_000_000],
        out: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--objects" => {
                let list = args.next().ok_or("--objects needs a list of numbers")?;
                o.sizes = list
                    .split(',')
                    .map(|s| s.trim().parse::<u64>())
                    .collect::<Result<_, _>>()?;
            }
            "--out" => o.out = Some(args.next().ok_or("--out needs a folder")?.into()),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(o)
}

/// `objects` records as compaction leaves them: three in four are stream objects (one range),
/// the rest stream-set objects of four ranges; each stream's ranges follow one another.
fn records(objects: u64) -> impl Iterator<Item = ObjectRecord> {
    let mut next = vec![0u64; STREAMS as usize];
    let mut cursor = 0u64;
    (1..=objects).map(move |id| {
        let count = if id % 4 == 0 { 4 } else { 1 };
        let ranges = (0..count)
            .map(|i| {
                let stream = cursor % STREAMS;
                cursor += 1;
                let start = next[stream as usize];
                next[stream as usize] += RANGE_OFFSETS;
                StreamRange {
                    stream_id: stream + 1,
                    start_offset: start,
                    end_offset: start + RANGE_OFFSETS,
                    position: i * 65_536,
                    len: 65_536,
                }
            })
            .collect::<Vec<_>>();
        ObjectRecord {
            id,
            kind: if count == 1 {
                ObjectKind::Stream
            } else {
                ObjectKind::StreamSet
            },
            key: format!("data/{id:016x}"),
            size: count * 65_536 + 512,
            ranges,
        }
    })
}

/// Writes the records into `kv`, 256 puts per transaction, 8 transactions in flight; returns
/// their encoded bytes.
async fn populate(kv: &dyn MetaKv, objects: u64) -> Result<u64, Error> {
    let mut encoded = 0u64;
    let mut chunks = Vec::new();
    let mut ops = Vec::with_capacity(256);
    for record in records(objects) {
        let value = encode(&record);
        encoded += value.len() as u64;
        ops.push(Op::put(keys::object(record.id), value));
        if ops.len() == 256 {
            chunks.push(std::mem::replace(&mut ops, Vec::with_capacity(256)));
        }
    }
    chunks.push(ops);
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
    Ok(encoded)
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1e9
}

/// One size's figures.
struct Row {
    objects: u64,
    populate_s: f64,
    encoded_per_object: f64,
    index_per_object: f64,
    open_process_per_object: f64,
    scan_ms: f64,
    open_ms: f64,
    lookup_p50_ns: f64,
    lookup_p99_ns: f64,
    lookup_p999_ns: f64,
}

async fn measure(objects: u64) -> Result<Row, Error> {
    let dir = tempfile::tempdir()?;
    let kv: Arc<dyn MetaKv> = Arc::new(RedbKv::open(dir.path().join("meta.redb"))?);
    let started = Instant::now();
    let encoded = populate(kv.as_ref(), objects).await?;
    let populate_s = started.elapsed().as_secs_f64();
    eprintln!("index_scale: {objects} records written in {populate_s:.1} s");

    // The baseline: one plain paged scan of the records.
    let started = Instant::now();
    let scanned = kv.scan_all(keys::OBJECTS, 1_000).await?;
    let scan_ms = started.elapsed().as_secs_f64() * 1e3;
    if scanned.len() as u64 != objects {
        return Err(format!("scanned {} records of {objects}", scanned.len()).into());
    }

    // The index alone: the records decoded one by one into an empty index, as `open` does.
    let before = live();
    let index = ObjectIndex::new();
    for kv in &scanned {
        index.insert(decode::<ObjectRecord>(&kv.key, &kv.value)?);
    }
    let index_bytes = live() - before;
    if index.len() as u64 != objects {
        return Err(format!("the index holds {} objects of {objects}", index.len()).into());
    }
    drop(index);
    drop(scanned);

    // `Metadata::open`: the scan and the index together, and what the process holds after it.
    let before = live();
    let started = Instant::now();
    let meta = Metadata::open(
        kv.clone(),
        MetadataOptions {
            watch_objects: false,
            ..MetadataOptions::default()
        },
    )
    .await?;
    let open_ms = started.elapsed().as_secs_f64() * 1e3;
    let open_bytes = live() - before;
    let index = meta.index();
    if index.len() as u64 != objects {
        return Err(format!("open indexed {} objects of {objects}", index.len()).into());
    }

    // Lookups at random streams and offsets below each stream's end.
    let per_stream_end = (objects * 7 / 4 / STREAMS).max(1) * RANGE_OFFSETS;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut samples = Vec::with_capacity(LOOKUPS);
    let mut found = 0usize;
    for _ in 0..LOOKUPS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let stream = 1 + x % STREAMS;
        let offset = (x >> 20) % per_stream_end;
        let at = Instant::now();
        let got = index.covering(stream, offset, 4);
        samples.push(at.elapsed());
        found += usize::from(!got.is_empty());
    }
    if found * 2 < LOOKUPS {
        return Err(format!("only {found} of {LOOKUPS} lookups found an object").into());
    }
    samples.sort_unstable();
    drop(meta);
    Ok(Row {
        objects,
        populate_s,
        encoded_per_object: encoded as f64 / objects as f64,
        index_per_object: index_bytes as f64 / objects as f64,
        open_process_per_object: open_bytes as f64 / objects as f64,
        scan_ms,
        open_ms,
        lookup_p50_ns: percentile(&samples, 0.50),
        lookup_p99_ns: percentile(&samples, 0.99),
        lookup_p999_ns: percentile(&samples, 0.999),
    })
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let o = options()?;
    let mut rows = Vec::new();
    for &objects in &o.sizes {
        rows.push(measure(objects).await?);
    }
    let mut md = format!(
        "### Committed objects: the object index at {} objects (in process, redb, synthetic records over {STREAMS} streams)\n\n\
         | objects | index bytes per object | encoded record bytes | process heap after open, per object | open (index rebuild) ms | plain scan ms | open / scan | lookup p50 / p99 / p999 ns |\n\
         |---|---|---|---|---|---|---|---|\n",
        o.sizes
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" / "),
    );
    let mut csv = String::from(
        "objects,index_bytes_per_object,encoded_bytes_per_object,open_ms,scan_ms,lookup_p50_ns,lookup_p99_ns\n",
    );
    for r in &rows {
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2}x | {:.0} / {:.0} / {:.0} |",
            r.objects,
            r.index_per_object,
            r.encoded_per_object,
            r.open_process_per_object,
            r.open_ms,
            r.scan_ms,
            r.open_ms / r.scan_ms,
            r.lookup_p50_ns,
            r.lookup_p99_ns,
            r.lookup_p999_ns,
        );
        let _ = writeln!(
            csv,
            "{},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1}",
            r.objects,
            r.index_per_object,
            r.encoded_per_object,
            r.open_ms,
            r.scan_ms,
            r.lookup_p50_ns,
            r.lookup_p99_ns,
        );
    }
    let _ = write!(
        md,
        "\nThree in four records are stream objects (one range), the rest stream-set objects of \
         four ranges. Index bytes: the heap the index holds per object (a counting allocator), \
         beside the record's encoded size in the store. Open: `Metadata::open` reading every record \
         into the index, against one plain paged scan of the same keys. Lookup: \
         `covering(stream, offset, 4)` at a random stream and offset, {LOOKUPS} timed one by one \
         (the timer's own cost included). Writing the records took {}.\n\n",
        rows.iter()
            .map(|r| format!("{:.1} s for {}", r.populate_s, r.objects))
            .collect::<Vec<_>>()
            .join(", "),
    );
    #[expect(clippy::print_stdout, reason = "the report is the example's output")]
    {
        print!("{md}");
    }
    if let Some(out) = &o.out {
        std::fs::create_dir_all(out)?;
        std::fs::write(out.join("scale-objects.md"), &md)?;
        std::fs::write(out.join("scale-objects.csv"), &csv)?;
    }
    Ok(())
}
