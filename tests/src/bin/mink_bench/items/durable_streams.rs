//! Item 11: the Durable Streams front end (`/ds`) beside the `/v1` API in the same run, with
//! the same 1 KiB body: the idle append latency, and the delivery from the moment an append is
//! sent to a parked long-poll reader and to an SSE reader. The two front ends' samples are interleaved
//! (which goes first alternates), so the machine's noise falls on both alike.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::report::{Pct, ms, pct, signed_ms, verdict};
use crate::rows::{kv_fields, ndjson_row};

use super::Bench;
use crate::Error;

/// How long the driver keeps one SSE response for its samples (the node's recycle time is
/// 55 s by default).
const SSE_REOPEN: Duration = Duration::from_secs(20);

/// An offset as `/ds` renders it.
fn ds_offset(offset: u64) -> String {
    format!("{offset:020}")
}

/// The two front ends.
#[derive(Clone, Copy)]
enum Front {
    V1,
    Ds,
}

impl Bench {
    /// Item 11: `/ds` against `/v1`.
    pub(crate) async fn durable_streams(&mut self) -> Result<(), Error> {
        let n = self.samples(1000);
        let c = &self.client;
        c.create_table("dsv1", kv_fields(), 1).await?;
        let stream = format!("{}/ds/v1/stream/bench", c.url);
        let created = c
            .http
            .put(&stream)
            .header("content-type", "text/plain")
            .send()
            .await
            .map_err(|e| format!("create the stream: {e}"))?;
        if created.status() != reqwest::StatusCode::CREATED {
            return Err(format!("create the stream: {}", created.status()));
        }
        let records = c.records("dsv1", 0);
        let append = |front: Front, i: u64| {
            let (url, content_type) = match front {
                Front::V1 => (records.clone(), "application/x-ndjson"),
                Front::Ds => (stream.clone(), "text/plain"),
            };
            c.post(url, content_type, ndjson_row(i))
        };
        let fronts = |i: usize| {
            if i.is_multiple_of(2) {
                [Front::V1, Front::Ds]
            } else {
                [Front::Ds, Front::V1]
            }
        };

        // Warm both paths up (tablets open, connections made).
        for i in 0..10 {
            append(Front::V1, i).await?;
            append(Front::Ds, i).await?;
        }
        let mut next = 10u64;
        let (mut v1_append, mut ds_append) = (Vec::new(), Vec::new());
        for i in 0..n {
            for front in fronts(i) {
                let started = Instant::now();
                append(front, i as u64).await?;
                let took = ms(started.elapsed());
                match front {
                    Front::V1 => v1_append.push(took),
                    Front::Ds => ds_append.push(took),
                }
            }
            next += 1;
        }

        let (mut v1_poll, mut ds_poll) = (Vec::new(), Vec::new());
        for i in 0..n {
            for front in fronts(i) {
                let url = match front {
                    Front::V1 => {
                        format!("{records}?offset={next}&live=long-poll&timeout_ms=20000")
                    }
                    Front::Ds => format!("{stream}?offset={}&live=long-poll", ds_offset(next)),
                };
                let reader = c.long_poll(url);
                // Let the reader park: its wake-up is what is measured.
                tokio::time::sleep(Duration::from_millis(3)).await;
                let started = Instant::now();
                append(front, i as u64).await?;
                let received = reader.await.map_err(|e| format!("reader task: {e}"))??;
                match front {
                    Front::V1 => v1_poll.push(signed_ms(started, received)),
                    Front::Ds => ds_poll.push(signed_ms(started, received)),
                }
            }
            next += 1;
        }

        let open = |url: String| {
            let http = c.http.clone();
            async move { http.get(url).send().await.map_err(|e| format!("SSE: {e}")) }
        };
        let open_both = |next: u64| {
            let (v1, ds) = (
                open(format!("{records}?offset={next}&live=sse")),
                open(format!("{stream}?offset={}&live=sse", ds_offset(next))),
            );
            async move { Ok::<_, Error>((v1.await?, ds.await?, Instant::now())) }
        };
        let (mut v1_events, mut ds_events, mut opened) = open_both(next).await?;
        let (mut v1_sse, mut ds_sse) = (Vec::new(), Vec::new());
        let (mut v1_buffer, mut ds_buffer) = (String::new(), String::new());
        for i in 0..n {
            // The node ends an SSE response after its recycle time (55 s by default) and a
            // client reconnects; on a slow store the samples outlast it, so both streams are
            // opened again, between samples, well before that.
            if opened.elapsed() > SSE_REOPEN {
                (v1_events, ds_events, opened) = open_both(next).await?;
                v1_buffer.clear();
                ds_buffer.clear();
            }
            for front in fronts(i) {
                tokio::time::sleep(Duration::from_millis(3)).await;
                let started = Instant::now();
                append(front, i as u64).await?;
                let (response, buffer, wants) = match front {
                    Front::V1 => (
                        &mut v1_events,
                        &mut v1_buffer,
                        vec![format!("id: {}\n", next + 1), format!("id:{}\n", next + 1)],
                    ),
                    Front::Ds => {
                        let want = format!("\"streamNextOffset\":\"{}\"", ds_offset(next + 1));
                        (&mut ds_events, &mut ds_buffer, vec![want])
                    }
                };
                crate::client::read_until(response, buffer, &wants).await?;
                let delivered = signed_ms(started, Instant::now());
                buffer.clear();
                match front {
                    Front::V1 => v1_sse.push(delivered),
                    Front::Ds => ds_sse.push(delivered),
                }
            }
            next += 1;
        }
        drop((v1_events, ds_events));

        let rows = [
            (
                "append until acknowledged",
                pct(&mut v1_append),
                pct(&mut ds_append),
            ),
            (
                "append sent -> parked long-poll",
                pct(&mut v1_poll),
                pct(&mut ds_poll),
            ),
            (
                "append sent -> SSE event",
                pct(&mut v1_sse),
                pct(&mut ds_sse),
            ),
        ];
        let _ = write!(
            self.report.md,
            "### 11. Durable Streams (`/ds`) beside `/v1`: the same 1 KiB body, samples interleaved ({n} each)\n\n\
             | probe | `/v1` p50 ms | `/ds` p50 ms | p50 ratio | `/v1` p99 ms | `/ds` p99 ms | p99 ratio | goal: p50 within 10% |\n\
             |---|---|---|---|---|---|---|---|\n"
        );
        for (name, v1, ds) in &rows {
            self.report.latency(&format!("11. /v1 {name}"), v1);
            self.report.latency(&format!("11. /ds {name}"), ds);
            let _ = writeln!(self.report.md, "{}", row(name, v1, ds));
        }
        let _ = write!(
            self.report.md,
            "\n`/v1` appends NDJSON to a table with an `int64` and a `utf8` column; `/ds` appends \
             the same bytes as one `text/plain` message. Delivery is measured on the client, from \
             the moment the append is sent to the reader's response (long-poll) or event (SSE): the \
             write-to-read latency a user sees, which holds the append's own (the time from the \
             acknowledgement alone is tens of microseconds either way, item 3).\n\n"
        );
        Ok(())
    }
}

/// One line of the item's table.
fn row(name: &str, v1: &Pct, ds: &Pct) -> String {
    let ratio = |a: f64, b: f64| if b.abs() < 1e-9 { f64::NAN } else { a / b };
    let p50 = ratio(ds.p50, v1.p50);
    format!(
        "| {name} | {:.3} | {:.3} | {p50:.2}x | {:.3} | {:.3} | {:.2}x | {} |",
        v1.p50,
        ds.p50,
        v1.p99,
        ds.p99,
        ratio(ds.p99, v1.p99),
        verdict((p50 - 1.0).abs() <= 0.1),
    )
}
