//! Item 1: idle append latency and PUTs per append, against raw PUTs of the WAL object's size;
//! one row as NDJSON (the node encodes the batch) and as a mink batch, samples interleaved.

use std::fmt::Write as _;
use std::time::Instant;

use bytes::Bytes;

use crate::MINK_BATCHES;
use crate::report::{ms, pct, verdict};
use crate::rows::{kv_fields, mink_batch, ndjson_row};

use super::Bench;
use crate::Error;

impl Bench {
    /// Item 1: idle append latency and PUTs, against raw PUTs of the WAL object's size.
    pub(crate) async fn idle_append(&mut self) -> Result<(), Error> {
        let samples = self.samples(2000) as u64;
        let c = &self.client;
        c.create_table("idle", kv_fields(), 1).await?;
        // Warm up, and learn the size of the WAL object one append costs.
        let (puts0, bytes0) = (
            c.metric("wal_puts").await?,
            c.metric("wal_put_bytes").await?,
        );
        for i in 0..10 {
            c.append("idle", 0, "application/x-ndjson", ndjson_row(i))
                .await?;
        }
        let (puts1, bytes1) = (
            c.metric("wal_puts").await?,
            c.metric("wal_put_bytes").await?,
        );
        let object_size = ((bytes1 - bytes0) / (puts1 - puts0).max(1.0)).round() as usize;
        let object = Bytes::from(vec![0x42u8; object_size.max(1)]);
        let (mut raw, mut appends, mut batches) = (Vec::new(), Vec::new(), Vec::new());
        let mut floor = Vec::new();
        let batch = mink_batch(1)?;
        let objects0 = c.metric("object_puts").await?;
        let hedges0 = (
            c.metric("wal_put_hedges").await?,
            c.metric("wal_put_hedge_wins").await?,
        );
        for i in 0..samples {
            let started = Instant::now();
            self.raw
                .put(&format!("raw/idle-{i}"), object.clone())
                .await
                .map_err(|e| format!("raw PUT: {e}"))?;
            raw.push(ms(started.elapsed()));
            let started = Instant::now();
            c.append("idle", 0, "application/x-ndjson", ndjson_row(i))
                .await?;
            appends.push(ms(started.elapsed()));
            let started = Instant::now();
            c.append("idle", 0, MINK_BATCHES, batch.clone()).await?;
            batches.push(ms(started.elapsed()));
            // The same route's cheapest request: what HTTP and the node's request path cost an
            // append before and after its PUT.
            let started = Instant::now();
            c.high_watermark("idle", 0).await?;
            floor.push(ms(started.elapsed()));
        }
        let puts = c.metric("wal_puts").await? - puts1;
        let objects = c.metric("object_puts").await? - objects0;
        let hedges = c.metric("wal_put_hedges").await? - hedges0.0;
        let hedge_wins = c.metric("wal_put_hedge_wins").await? - hedges0.1;
        let (raw, app, bat) = (pct(&mut raw), pct(&mut appends), pct(&mut batches));
        let floor = pct(&mut floor);
        let floor_ratio = (raw.p50 + floor.p50) / raw.p50.max(1e-9);
        self.report.latency("1. raw PUT", &raw);
        self.report.latency("1. HTTP append (durable)", &app);
        self.report
            .latency("1. HTTP append of a mink batch (durable)", &bat);
        let per_append = puts / (2 * samples) as f64;
        let ratio = app.p50 / raw.p50.max(1e-9);
        let batch_ratio = bat.p50 / raw.p50.max(1e-9);
        let _ = write!(
            self.report.md,
            "### 1. Idle append: one 1 KiB row per request, acknowledged durable ({samples} samples)\n\n\
             | | p50 ms | p99 ms | p99.9 ms |\n|---|---|---|---|\n\
             | raw PUT of the same WAL object ({object_size} B), same store | {:.3} | {:.3} | {:.3} |\n\
             | HTTP append of NDJSON until acknowledged | {:.3} | {:.3} | {:.3} |\n\
             | ratio to raw PUT | **{ratio:.2}x** | {:.2}x | {:.2}x |\n\
             | HTTP append of a mink batch until acknowledged | {:.3} | {:.3} | {:.3} |\n\
             | ratio to raw PUT | **{batch_ratio:.2}x** | {:.2}x | {:.2}x |\n\
             | HTTP request for the bucket's offsets (no PUT, no body) | {:.3} | {:.3} | {:.3} |\n\n\
             | goal | figure | |\n|---|---|---|\n\
             | exactly 1 PUT per idle append | {per_append:.3} WAL PUTs per append | {} |\n\
             | p50 <= 1.2x raw PUT, mink batch | {batch_ratio:.2}x | {} |\n\
             | (NDJSON beside it) | {ratio:.2}x | |\n\n\
             The raw PUT, the NDJSON append, the mink batch append and the offsets request take \
             turns. A raw PUT plus the offsets request, at their p50s, is {floor_ratio:.2}x the \
             raw PUT: about what an append over HTTP would cost if its own work were free. \
             Compaction PUT \
             {objects} committed objects during these {} appends (they are not on the append's \
             path; the WAL PUT is). {hedges} of the {puts} WAL PUTs were sent a second time for \
             answering later than the recent ones (`engine.wal.put_hedge_quantile`, \
             docs/hedged-puts.md), and the second request answered first {hedge_wins} times.\n\n",
            raw.p50,
            raw.p99,
            raw.p999,
            app.p50,
            app.p99,
            app.p999,
            app.p99 / raw.p99.max(1e-9),
            app.p999 / raw.p999.max(1e-9),
            bat.p50,
            bat.p99,
            bat.p999,
            bat.p99 / raw.p99.max(1e-9),
            bat.p999 / raw.p999.max(1e-9),
            floor.p50,
            floor.p99,
            floor.p999,
            verdict((per_append - 1.0).abs() < 1e-9),
            verdict(batch_ratio <= 1.2),
            2 * samples,
        );
        Ok(())
    }
}
