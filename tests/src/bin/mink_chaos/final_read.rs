//! The final read: after the last life, every bucket is read from offset 0 to its high watermark,
//! with the row ids of each batch, for the checks.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Array, Int64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use reqwest::StatusCode;

use crate::journal::{Ctx, SeenBatch, header_u64, records_url};
use crate::{Error, MINK_BATCHES};

/// A batch of the final log with its row ids.
pub(crate) struct LoggedBatch {
    pub(crate) batch: SeenBatch,
    pub(crate) rows: Vec<i64>,
}

pub(crate) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, true),
    ]))
}

/// Reads a whole bucket from its log start (0, unless retention runs) to its high watermark:
/// the batches, the high watermark and the log start.
pub(crate) async fn read_all(
    ctx: &Ctx,
    bucket: u32,
) -> Result<(Vec<LoggedBatch>, u64, u64), Error> {
    let schema = schema();
    let mut out = Vec::new();
    let mut start = None;
    let mut next = 0u64;
    let mut failures = 0;
    loop {
        let answer = ctx
            .http
            .get(format!("{}?offset={next}", records_url(ctx, bucket)))
            .header("accept", MINK_BATCHES)
            .timeout(Duration::from_secs(60))
            .send()
            .await;
        let response = match answer {
            Ok(r) if r.status() == StatusCode::OK => r,
            // Retention moved the log start past this read: read again from there.
            Ok(r) if r.status() == StatusCode::GONE && ctx.retention => {
                let body: serde_json::Value = r.json().await.unwrap_or_default();
                next = body["log_start"].as_u64().ok_or(format!(
                    "bucket {bucket}: a 410 without the log start: {body}"
                ))?;
                out.clear();
                start = None;
                continue;
            }
            other => {
                failures += 1;
                if failures > 20 {
                    return Err(format!(
                        "bucket {bucket}: the final read at offset {next} keeps failing: {:?}",
                        other.map(|r| r.status())
                    ));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let hw = header_u64(&response, "mink-high-watermark").unwrap_or(0);
        let log_start = header_u64(&response, "mink-log-start").unwrap_or(0);
        if log_start != 0 && !ctx.retention {
            return Err(format!(
                "bucket {bucket}: the log starts at {log_start}, not 0 (nothing was trimmed)"
            ));
        }
        let start = *start.get_or_insert(next);
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("bucket {bucket}: final read body: {e}"))?;
        let mut progressed = false;
        for view in mink_codec::batches(body) {
            let view = view.map_err(|e| format!("bucket {bucket}: final read: {e}"))?;
            let (rows, _) = view
                .decode(&schema)
                .map_err(|e| format!("bucket {bucket}: batch at {}: {e}", view.base_offset()))?;
            let ids = rows
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or(format!("bucket {bucket}: the id column is not int64"))?;
            let batch = SeenBatch {
                base_offset: u64::try_from(view.base_offset()).unwrap_or(u64::MAX),
                record_count: u64::try_from(view.record_count()).unwrap_or(0),
                writer_id: view.writer_id(),
                sequence: view.batch_sequence(),
            };
            next = batch.base_offset.saturating_add(batch.record_count);
            progressed = true;
            out.push(LoggedBatch {
                batch,
                rows: (0..ids.len()).map(|i| ids.value(i)).collect(),
            });
        }
        if next >= hw {
            return Ok((out, hw, start));
        }
        if !progressed {
            return Err(format!(
                "bucket {bucket}: the final read at {next} returned nothing below the high \
                 watermark {hw}"
            ));
        }
    }
}
