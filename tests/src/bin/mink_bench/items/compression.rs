//! Item 14: tables stored compressed (docs/compression.md): bytes stored per byte of rows, append
//! throughput and node CPU, and replay rows/s, with `none`, `lz4` and `zstd`, on item 5's
//! 10-column rows and on a log-like text column. Ratios are against `none` of the same run.

use std::fmt::Write as _;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{Value, json};

use super::Bench;
use crate::node::cpu_seconds;
use crate::{ARROW, Error, MINK_BATCHES};

const CODECS: [&str; 3] = ["none", "lz4", "zstd"];
/// Appends in flight at once, to one bucket.
const WRITERS: usize = 4;

/// One data set: its columns and NDJSON request bodies.
struct DataSet {
    name: &'static str,
    describe: &'static str,
    fields: Value,
    bodies: Vec<Bytes>,
    rows: u64,
}

/// Item 5's rows: an int64 and nine ~110-byte strings (`{c}-{i:06}-vvv...`).
fn wide(rows: usize, per_request: usize) -> DataSet {
    let fields = std::iter::once(json!({"name": "c0", "type": "int64"}))
        .chain((1..10).map(|i| json!({"name": format!("c{i}"), "type": "utf8"})))
        .collect();
    let line = |i: usize| {
        let mut row = serde_json::Map::new();
        row.insert("c0".into(), json!(i));
        for c in 1..10 {
            row.insert(
                format!("c{c}"),
                json!(format!("{c}-{:06}-{}", i % 1000, "v".repeat(100))),
            );
        }
        Value::Object(row).to_string()
    };
    DataSet {
        name: "wide",
        describe: "item 5's rows: an int64 and nine ~110-byte strings",
        fields: Value::Array(fields),
        bodies: bodies(rows, per_request, line),
        rows: rows as u64,
    }
}

/// Access-log lines: a timestamp, level, service, method, path, status, latency, bytes, a client
/// address and a request id (16 random hex digits), about 190 bytes each.
fn log_lines(rows: usize, per_request: usize) -> DataSet {
    const LEVELS: [&str; 4] = ["INFO", "INFO", "WARN", "ERROR"];
    const SERVICES: [&str; 5] = ["api", "auth", "billing", "search", "gateway"];
    const PATHS: [&str; 6] = [
        "/v1/orders",
        "/v1/orders/{id}",
        "/v1/users/{id}/sessions",
        "/v1/search",
        "/healthz",
        "/v1/invoices/{id}/lines",
    ];
    let line = |i: usize| {
        let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let r = next();
        let ms = 1_767_225_600_000u64 + i as u64 * 3;
        let text = format!(
            "{}.{:03}Z {} {} method={} path={} status={} latency_ms={} bytes={} client=10.{}.{}.{} request_id={:016x}",
            ms / 1000,
            ms % 1000,
            LEVELS[(r % 4) as usize],
            SERVICES[(r >> 8) as usize % 5],
            if r >> 16 & 3 == 0 { "POST" } else { "GET" },
            PATHS[(r >> 20) as usize % 6].replace("{id}", &((r >> 24) % 100_000).to_string()),
            [200, 200, 200, 201, 204, 404, 500][(r >> 40) as usize % 7],
            (r >> 44) % 900 + 1,
            (r >> 32) % 65_536,
            (r >> 48) % 256,
            (r >> 56) % 256,
            r % 256,
            next()
        );
        json!({"id": i, "line": text}).to_string()
    };
    DataSet {
        name: "log",
        describe: "a log-like text column: access-log lines of ~190 bytes with a random request id",
        fields: json!([{"name": "id", "type": "int64"}, {"name": "line", "type": "utf8"}]),
        bodies: bodies(rows, per_request, line),
        rows: rows as u64,
    }
}

fn bodies(rows: usize, per_request: usize, line: impl Fn(usize) -> String) -> Vec<Bytes> {
    (0..rows)
        .step_by(per_request)
        .map(|first| {
            let mut body = String::new();
            for i in first..(first + per_request).min(rows) {
                body += &line(i);
                body.push('\n');
            }
            Bytes::from(body)
        })
        .collect()
}

/// What one (data set, codec) table measured.
#[derive(Debug, Clone, Copy)]
struct Measured {
    stored: u64,
    append_mbps: f64,
    cpu_s_per_gb: f64,
    cold_rows_per_s: f64,
    arrow_rows_per_s: f64,
}

impl Bench {
    /// Item 14: compression.
    pub(crate) async fn compression(&mut self) -> Result<(), Error> {
        let quick = self.options.quick;
        let sets = [
            wide(if quick { 50_000 } else { 200_000 }, 200),
            log_lines(if quick { 300_000 } else { 1_000_000 }, 2000),
        ];
        let _ = write!(
            self.report.md,
            "### 14. Compression: tables created with `compression` none, lz4 and zstd (level 3)\n\n\
             NDJSON appends of the same rows ({WRITERS} in flight, one bucket; the node encodes \
             each request into one batch, compressed on a table with the setting). Stored: the \
             stored batches' bytes (read back as mink batches) per byte of NDJSON appended. \
             Append: MB/s of NDJSON and the node's CPU seconds per GB of it. Replay: rows/s of a \
             cold read of the whole log as mink batches after a restart (stored bytes, no \
             decoding), and of a warm read as Arrow IPC (every batch decoded, so decompressed). \
             Ratios against `none` of the same data set.\n\n\
             | data | codec | stored / NDJSON byte | stored vs none | append MB/s | vs none | \
             CPU-s/GB | vs none | cold replay rows/s | vs none | Arrow replay rows/s | vs none |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|\n"
        );
        let mut notes = String::new();
        for set in &sets {
            let ndjson_bytes: u64 = set.bodies.iter().map(|b| b.len() as u64).sum();
            let mut baseline: Option<Measured> = None;
            for codec in CODECS {
                let table = format!("cmp-{}-{codec}", set.name);
                let m = self.measure(&table, codec, set).await?;
                let base = *baseline.get_or_insert(m);
                let _ = writeln!(
                    self.report.md,
                    "| {} | {codec} | {:.3} | {:.2}x | {:.1} | {:.2}x | {:.1} | {:.2}x | {:.0} | {:.2}x | {:.0} | {:.2}x |",
                    set.name,
                    m.stored as f64 / ndjson_bytes as f64,
                    m.stored as f64 / base.stored as f64,
                    m.append_mbps,
                    m.append_mbps / base.append_mbps,
                    m.cpu_s_per_gb,
                    m.cpu_s_per_gb / base.cpu_s_per_gb,
                    m.cold_rows_per_s,
                    m.cold_rows_per_s / base.cold_rows_per_s,
                    m.arrow_rows_per_s,
                    m.arrow_rows_per_s / base.arrow_rows_per_s,
                );
            }
            let _ = writeln!(
                notes,
                "- `{}`: {} rows, {:.1} MB of NDJSON; {}.",
                set.name,
                set.rows,
                ndjson_bytes as f64 / 1e6,
                set.describe
            );
        }
        let _ = write!(self.report.md, "\n{notes}\n");
        Ok(())
    }

    async fn measure(
        &mut self,
        table: &str,
        codec: &str,
        set: &DataSet,
    ) -> Result<Measured, Error> {
        let r = self
            .client
            .http
            .post(format!("{}/v1/tables", self.client.url))
            .json(&json!({"name": table, "schema": {"fields": set.fields}, "compression": codec}))
            .send()
            .await
            .map_err(|e| format!("create table {table}: {e}"))?;
        if !r.status().is_success() {
            return Err(format!("create table {table}: {}", r.status()));
        }
        let pid = self.node.pid().ok_or("the node is not running")?;
        let cpu = cpu_seconds(pid).unwrap_or(0.0);
        let started = Instant::now();
        let ndjson_bytes: u64 = set.bodies.iter().map(|b| b.len() as u64).sum();
        for chunk in set.bodies.chunks(WRITERS) {
            let sends = chunk.iter().map(|body| {
                self.client
                    .append(table, 0, "application/x-ndjson", body.clone())
            });
            for result in futures::future::join_all(sends).await {
                result?;
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds(pid).unwrap_or(cpu) - cpu;
        let end = self.client.high_watermark(table, 0).await?;
        if end != set.rows {
            return Err(format!("{table}: {end} rows appended, {} sent", set.rows));
        }
        self.restart().await?;
        let (cold_rows_per_s, stored) = self.read_all(table, end, MINK_BATCHES).await?;
        self.read_all(table, end, ARROW).await?; // warm up
        let (arrow_rows_per_s, _) = self.read_all(table, end, ARROW).await?;
        Ok(Measured {
            stored,
            append_mbps: ndjson_bytes as f64 / 1e6 / seconds,
            cpu_s_per_gb: cpu / (ndjson_bytes as f64 / 1e9),
            cold_rows_per_s,
            arrow_rows_per_s,
        })
    }

    /// Reads rows `0..end` of bucket 0 as `accept`: rows/s and the bytes of the answers.
    async fn read_all(&self, table: &str, end: u64, accept: &str) -> Result<(f64, u64), Error> {
        let (bytes, seconds) = self.client.read_range(table, 0, end, accept).await?;
        Ok((end as f64 / seconds, bytes))
    }
}
