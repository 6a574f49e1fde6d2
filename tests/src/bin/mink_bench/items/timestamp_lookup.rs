//! Item 6: `offset_for_timestamp`, batch fetches per lookup against log2(batches), on an
//! in-process tablet with a counting stream layer (the node does not count the fetches of one
//! lookup); the node's `offsets?timestamp=` endpoint timed beside it.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use mink_metadata::{MemoryKv, Metadata, MetadataOptions};
use mink_s3stream::engine::Engine;
use mink_tablet::{CountingStream, ManualClock, StaticSchemas, Tablet, TabletId};

use crate::SCHEMA_ID;
use crate::raw::raw_store;
use crate::report::{ms, pct};
use crate::rows::{kv_schema, mink_batch};

use super::Bench;
use crate::Error;

impl Bench {
    /// Item 6: offset_for_timestamp costs, in-process tablet with a counting stream on the same
    /// kind of store; the node's endpoint timed beside it.
    pub(crate) async fn timestamp_lookup(&mut self) -> Result<(), Error> {
        let batches: u64 = if self.options.quick { 1024 } else { 8192 };
        let lookups = 200;
        let metadata = Metadata::open(Arc::new(MemoryKv::new()), MetadataOptions::default())
            .await
            .map_err(|e| format!("metadata: {e}"))?;
        let engine = Engine::builder()
            .node("bench-ts")
            .wal_storage(raw_store(
                self.options.store,
                &self.node.process.dir().join("tablet-objects"),
                &format!("{}-tablet", self.node.prefix),
            )?)
            .metadata(Arc::new(metadata))
            .open()
            .await
            .map_err(|e| format!("engine: {e}"))?;
        let clock = Arc::new(ManualClock::new(1_000_000));
        let fetches = Arc::new(AtomicU64::new(0));
        let counter = fetches.clone();
        let tablet = Tablet::builder(TabletId::new("ts", "default", 0))
            .engine(engine.clone())
            .schemas(Arc::new(StaticSchemas::with_schemas([(
                SCHEMA_ID,
                kv_schema(),
            )])))
            .clock(clock.clone())
            .stream_layer(CountingStream::layer(counter))
            .create()
            .await
            .map_err(|e| format!("tablet: {e}"))?;
        let body = mink_batch(4)?;
        let next = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..32 {
            let (tablet, body, next, clock) =
                (tablet.clone(), body.clone(), next.clone(), clock.clone());
            tasks.push(tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < batches {
                    clock.advance(1);
                    tablet
                        .append(body.clone())
                        .await
                        .map_err(|e| format!("tablet append: {e}"))?;
                }
                Ok::<_, Error>(())
            }));
        }
        for task in tasks {
            task.await.map_err(|e| format!("append task: {e}"))??;
        }
        let last = 1_000_000 + batches as i64;
        clock.set(last + 1);
        let mut costs = Vec::with_capacity(lookups);
        let mut latencies = Vec::with_capacity(lookups);
        for i in 0..lookups {
            // Timestamps spread over the whole log, deterministic.
            let ts = 1_000_000 + ((i as u64 * 7919) % (batches + 1)) as i64;
            let before = fetches.load(Ordering::SeqCst);
            let started = Instant::now();
            tablet
                .offset_for_timestamp(ts)
                .await
                .map_err(|e| format!("offset_for_timestamp: {e}"))?;
            latencies.push(ms(started.elapsed()));
            costs.push((fetches.load(Ordering::SeqCst) - before) as f64);
        }
        tablet.close().await.map_err(|e| format!("close: {e}"))?;
        engine
            .shutdown()
            .await
            .map_err(|e| format!("engine shutdown: {e}"))?;
        let mean = costs.iter().sum::<f64>() / costs.len() as f64;
        let max = costs.iter().copied().fold(0.0, f64::max);
        let log2 = (batches as f64).log2();
        let lat = pct(&mut latencies);
        // The node's endpoint, on the replay table (its log is long), over the time it was written.
        let (from, to) = self.replay_window;
        let mut node_lat = Vec::with_capacity(lookups);
        for i in 0..lookups {
            let ts = from + (i as i64 * (to - from)) / lookups as i64;
            let started = Instant::now();
            let r = self
                .client
                .http
                .get(format!(
                    "{}/v1/tables/replay/buckets/0/offsets?timestamp={ts}",
                    self.client.url
                ))
                .send()
                .await
                .map_err(|e| format!("offsets?timestamp: {e}"))?;
            if !r.status().is_success() {
                return Err(format!("offsets?timestamp: {}", r.status()));
            }
            let _ = r.bytes().await;
            node_lat.push(ms(started.elapsed()));
        }
        let node = pct(&mut node_lat);
        self.report
            .latency("6. offset_for_timestamp (tablet)", &lat);
        let _ = write!(
            self.report.md,
            "### 6. offset_for_timestamp: {lookups} lookups over {batches} batches\n\n\
             Measured on an in-process tablet over the same kind of store (a counting layer on its \
             stream counts fetches; the node exposes no per-lookup fetch count).\n\n\
             | | figure |\n|---|---|\n\
             | log2(batches) (baseline) | {log2:.1} |\n\
             | batch fetches per lookup, mean / max | **{mean:.2}** / {max:.0} (bound: ceil(log2) + 1 = {:.0}) |\n\
             | lookup latency p50 / p99 (in-process) | {:.3} / {:.3} ms |\n\
             | node `offsets?timestamp=` over HTTP, p50 / p99 (log of item 4) | {:.3} / {:.3} ms |\n\n",
            log2.ceil() + 1.0,
            lat.p50,
            lat.p99,
            node.p50,
            node.p99,
        );
        Ok(())
    }
}
