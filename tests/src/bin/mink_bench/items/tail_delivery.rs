//! Item 3: from an append's acknowledgement to a parked long-poll reader, and to an SSE reader.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::report::{pct, signed_ms, verdict};
use crate::rows::{kv_fields, ndjson_row};

use super::Bench;
use crate::Error;

impl Bench {
    /// Item 3: ack -> parked long-poll / SSE reader.
    pub(crate) async fn tail_delivery(&mut self) -> Result<(), Error> {
        let n = self.samples(1000);
        let c = &self.client;
        c.create_table("tail", kv_fields(), 1).await?;
        let records = c.records("tail", 0);
        let mut next = 0u64;
        let mut long_poll = Vec::with_capacity(n);
        for i in 0..n {
            let reader = c.long_poll(format!(
                "{records}?offset={next}&live=long-poll&timeout_ms=20000"
            ));
            // Let the reader park: the parked reader's wake-up is what is measured.
            tokio::time::sleep(Duration::from_millis(3)).await;
            c.append("tail", 0, "application/x-ndjson", ndjson_row(i as u64))
                .await?;
            let acked = Instant::now();
            let received = reader.await.map_err(|e| format!("reader task: {e}"))??;
            long_poll.push(signed_ms(acked, received));
            next += 1;
        }
        let mut response = c
            .http
            .get(format!("{records}?offset={next}&live=sse"))
            .send()
            .await
            .map_err(|e| format!("SSE: {e}"))?;
        let mut sse = Vec::with_capacity(n);
        let mut buffer = String::new();
        for i in 0..n {
            tokio::time::sleep(Duration::from_millis(3)).await;
            c.append("tail", 0, "application/x-ndjson", ndjson_row(i as u64))
                .await?;
            let acked = Instant::now();
            let want = format!("id: {}\n", next + 1);
            let want_compact = format!("id:{}\n", next + 1);
            crate::client::read_until(&mut response, &mut buffer, &[want, want_compact]).await?;
            sse.push(signed_ms(acked, Instant::now()));
            buffer.clear();
            next += 1;
        }
        drop(response);
        let (lp, sse) = (pct(&mut long_poll), pct(&mut sse));
        self.report.latency("3. long-poll after ack", &lp);
        self.report.latency("3. SSE after ack", &sse);
        let _ = write!(
            self.report.md,
            "### 3. Tail delivery: the writer's acknowledgement -> a parked reader holding the row ({n} samples each)\n\n\
             | reader | p50 ms | p99 ms | p99.9 ms | goal p99 < 1 ms |\n|---|---|---|---|---|\n\
             | long-poll (`live=long-poll`, parked before the append) | {:.3} | {:.3} | {:.3} | {} |\n\
             | SSE (`live=sse`) | {:.3} | {:.3} | {:.3} | {} |\n\n\
             Measured on the client: the time from the append's response to the reader's response \
             (long-poll) or event (SSE); negative when the reader had the row before the writer \
             had its acknowledgement.\n\n",
            lp.p50,
            lp.p99,
            lp.p999,
            verdict(lp.p99 < 1.0),
            sse.p50,
            sse.p99,
            sse.p999,
            verdict(sse.p99 < 1.0),
        );
        Ok(())
    }
}
