//! Item 9: the Arrow Flight front end. A cold DoGet of item 4's replay data against the HTTP
//! Arrow IPC read of the same rows (also cold) and item 4's raw sequential GET; DoPut throughput
//! against raw sequential PUTs; and DoGet of 1 of item 5's 10 columns against all of them.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_flight::{FlightClient, FlightData, FlightDescriptor, Ticket};
use arrow_schema::{DataType, Field, Schema};
use futures::TryStreamExt;
use tonic::transport::Channel;

use super::Bench;
use crate::client::{body_len, header_u64};
use crate::raw::raw_put_throughput;
use crate::report::verdict;
use crate::rows::kv_fields;
use crate::{ARROW, Error};

impl Bench {
    /// Item 9: Flight replay, DoPut and projection.
    pub(crate) async fn flight(&mut self) -> Result<(), Error> {
        let end = self.client.high_watermark("replay", 0).await?;
        // Each read from a new life of the node: empty caches, as item 4's cold replay, once
        // compaction has committed what the WAL held (item 5's rows, recovered by the restart),
        // so neither cold read shares the store with it. Then again at once: warm (as far as the
        // block cache holds the data).
        self.restart().await?;
        self.drained().await?;
        let (flight_bytes, flight_seconds) = self.flight_read("replay", end, None).await?;
        let (_, flight_warm_seconds) = self.flight_read("replay", end, None).await?;
        self.restart().await?;
        self.drained().await?;
        let (http_bytes, http_seconds) = self.http_arrow_read("replay", end).await?;
        let (_, http_warm_seconds) = self.http_arrow_read("replay", end).await?;
        let mbps = |bytes: u64, seconds: f64| bytes as f64 / seconds / 1e6;
        let flight_mbps = mbps(flight_bytes, flight_seconds);
        let http_mbps = mbps(http_bytes, http_seconds);
        let flight_warm = mbps(flight_bytes, flight_warm_seconds);
        let http_warm = mbps(http_bytes, http_warm_seconds);
        let raw = self.replay_raw_mbps;
        let relay = self.replay_relay_mbps;

        let (put_mbps, put_bytes, put_seconds) = self.flight_put().await?;
        let raw_put = raw_put_throughput(
            self.raw.as_ref(),
            Duration::from_secs_f64(put_seconds.max(5.0)),
        )
        .await?;

        let wide = self.client.high_watermark("wide", 0).await?;
        self.flight_read("wide", wide, None).await?; // warm up, as item 5
        let (_, all_seconds) = self.flight_read("wide", wide, None).await?;
        let (_, one_seconds) = self
            .flight_read("wide", wide, Some(vec!["c0".into()]))
            .await?;
        let (all, one) = (wide as f64 / all_seconds, wide as f64 / one_seconds);

        let _ = write!(
            self.report.md,
            "### 9. Arrow Flight\n\n\
             Replay of item 4's {:.0} MB of rows ({end} rows) in one DoGet after a restart (cold \
             caches) and once more at once (warm, as far as the block cache holds it), beside the \
             HTTP Arrow IPC read of the same rows (reads of up to 16 MiB, also after a restart, \
             then again) and item 4's raw sequential GET of the committed objects:\n\n\
             | | MB/s | ratio to raw GET | goal |\n|---|---|---|---|\n\
             | raw sequential GET (item 4) | {raw:.1} | 1.00x | |\n\
             | the same GETs relayed through a loopback socket (item 4: no format, cache or protocol) | {relay:.1} | {:.2}x | |\n\
             | HTTP, Arrow IPC, cold ({:.0} MB) | {http_mbps:.1} | {:.2}x | |\n\
             | Flight DoGet, cold ({:.0} MB) | {flight_mbps:.1} | **{:.2}x** | >= 0.8x: {}; faster than HTTP: {} ({:.2}x) |\n\
             | HTTP, Arrow IPC, warm | {http_warm:.1} | {:.2}x | |\n\
             | Flight DoGet, warm | {flight_warm:.1} | **{:.2}x** | faster than HTTP: {} ({:.2}x) |\n\n\
             Cold, both read at the pace of the node's cold read path (item 4's cold replay).\n\n\
             DoPut of {:.0} MB in batches of 1000 rows of 1 KiB (one stream, no waiting between \
             batches) against raw sequential PUTs of 8 MiB objects for as long:\n\n\
             | | MB/s | ratio |\n|---|---|---|\n\
             | raw sequential PUT | {raw_put:.1} | 1.00x |\n\
             | Flight DoPut, acknowledged | {put_mbps:.1} | **{:.2}x** |\n\n\
             Projection over Flight, item 5's {wide} rows (warm):\n\n\
             | columns | rows/s | ratio |\n|---|---|---|\n\
             | all 10 | {all:.0} | 1.00x |\n\
             | 1 (`columns: [\"c0\"]`) | {one:.0} | **{:.2}x** |\n\n\
             A DoGet sends each stored batch's Arrow message as stored (the projected one when \
             columns are asked for); the HTTP Arrow read decodes and encodes every batch. Bytes \
             are those of the responses (Flight: message headers and bodies). The Flight client \
             opens HTTP/2 receive windows of 8 MiB per stream and 16 MiB per connection (tonic's \
             `initial_stream_window_size` and `initial_connection_window_size`), as a client \
             reading in bulk would.\n\n",
            flight_bytes as f64 / 1e6,
            relay / raw,
            http_bytes as f64 / 1e6,
            http_mbps / raw,
            flight_bytes as f64 / 1e6,
            flight_mbps / raw,
            verdict(flight_mbps / raw >= 0.8),
            verdict(flight_mbps > http_mbps),
            flight_mbps / http_mbps,
            http_warm / raw,
            flight_warm / raw,
            verdict(flight_warm > http_warm),
            flight_warm / http_warm,
            put_bytes as f64 / 1e6,
            put_mbps / raw_put,
            one / all,
        );
        Ok(())
    }

    async fn flight_client(&self) -> Result<FlightClient, Error> {
        let url = format!("http://{}", self.node.flight_address());
        let channel = Channel::from_shared(url)
            .map_err(|e| format!("Flight URL: {e}"))?
            .initial_stream_window_size(Some(8 << 20))
            .initial_connection_window_size(Some(16 << 20))
            .connect()
            .await
            .map_err(|e| format!("connect to Flight: {e}"))?;
        Ok(FlightClient::new(channel))
    }

    /// One DoGet of `[0, end)` of bucket 0 of `table`: bytes received and seconds.
    async fn flight_read(
        &self,
        table: &str,
        end: u64,
        columns: Option<Vec<String>>,
    ) -> Result<(u64, f64), Error> {
        let mut client = self.flight_client().await?;
        let ticket = serde_json::json!({
            "v": 1, "table": table, "bucket": 0, "offset": 0, "until": end, "columns": columns,
        });
        let started = Instant::now();
        let mut stream = client
            .inner_mut()
            .do_get(Ticket::new(ticket.to_string()))
            .await
            .map_err(|e| format!("DoGet: {e}"))?
            .into_inner();
        let mut bytes = 0u64;
        let mut last = 0u64;
        while let Some(message) = stream.message().await.map_err(|e| format!("DoGet: {e}"))? {
            bytes += (message.data_header.len() + message.data_body.len()) as u64;
            if let Ok(meta) = serde_json::from_slice::<serde_json::Value>(&message.app_metadata)
                && let Some(next) = meta["next_offset"].as_u64()
            {
                last = next;
            }
        }
        if last != end {
            return Err(format!("DoGet of {table} ended at {last}, not {end}"));
        }
        Ok((bytes, started.elapsed().as_secs_f64()))
    }

    /// Reads `[0, end)` of bucket 0 of `table` over HTTP as Arrow IPC: bytes and seconds.
    async fn http_arrow_read(&self, table: &str, end: u64) -> Result<(u64, f64), Error> {
        let started = Instant::now();
        let (mut offset, mut bytes) = (0u64, 0u64);
        while offset < end {
            let r = self
                .client
                .http
                .get(format!(
                    "{}?offset={offset}&until={end}&max_bytes={}",
                    self.client.records(table, 0),
                    16 << 20
                ))
                .header("accept", ARROW)
                .send()
                .await
                .map_err(|e| format!("read: {e}"))?;
            if !r.status().is_success() {
                return Err(format!("read at {offset}: {}", r.status()));
            }
            let next = header_u64(&r, "mink-next-offset").ok_or("no mink-next-offset")?;
            bytes += body_len(r).await?;
            if next <= offset {
                return Err(format!("read made no progress at {offset}"));
            }
            offset = next;
        }
        Ok((bytes, started.elapsed().as_secs_f64()))
    }

    /// DoPut of batches of 1000 rows of about 1 KiB into a new table: MB/s, bytes, seconds.
    async fn flight_put(&self) -> Result<(f64, u64, f64), Error> {
        let total: u64 = if self.options.quick {
            64 << 20
        } else {
            256 << 20
        };
        self.client
            .create_table("flightput", kv_fields(), 1)
            .await?;
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("msg", DataType::Utf8, true),
        ]));
        let ids: Vec<i64> = (0..1000).collect();
        let msgs: Vec<String> = ids
            .iter()
            .map(|i| format!("{i:08}{}", "p".repeat(1016)))
            .collect();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ids)) as ArrayRef,
                Arc::new(StringArray::from(msgs)),
            ],
        )
        .map_err(|e| format!("rows: {e}"))?;
        let mut encoded = arrow_flight::utils::batches_to_flight_data(&schema, [&batch])
            .map_err(|e| format!("encode: {e}"))?;
        let body = encoded.pop().ok_or("no batch message")?;
        let mut first = encoded.pop().ok_or("no schema message")?;
        first.flight_descriptor = Some(FlightDescriptor::new_path(vec![
            "flightput".into(),
            "0".into(),
        ]));
        let size = (body.data_header.len() + body.data_body.len()) as u64;
        let count = total.div_ceil(size);
        let messages = std::iter::once(first)
            .chain((0..count).map(move |_| body.clone()))
            .map(Ok::<FlightData, arrow_flight::error::FlightError>);
        let mut client = self.flight_client().await?;
        let started = Instant::now();
        let results: Vec<_> = client
            .do_put(futures::stream::iter(messages))
            .await
            .map_err(|e| format!("DoPut: {e}"))?
            .try_collect()
            .await
            .map_err(|e| format!("DoPut: {e}"))?;
        let seconds = started.elapsed().as_secs_f64();
        if results.len() as u64 != count {
            return Err(format!(
                "DoPut answered {} of {count} batches",
                results.len()
            ));
        }
        let bytes = count * size;
        Ok((bytes as f64 / seconds / 1e6, bytes, seconds))
    }
}
