//! The tailing readers: one long-polling reader per bucket that checks, across restarts, that
//! batches follow each other and the high watermark never goes backwards (nor the log start,
//! when retention moves it; a reader it overtakes goes on from the new log start).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::StatusCode;

use crate::journal::{Ctx, SeenBatch, header_u64, lock, records_url};
use crate::{Error, MINK_BATCHES};

/// Tails one bucket with long-polls from offset 0, checking that batches follow each other and
/// that the high watermark never goes backwards, across restarts.
pub(crate) async fn reader(ctx: Arc<Ctx>, bucket: u32) {
    let mut next = 0u64;
    let mut max_hw = 0u64;
    let mut max_log_start = 0u64;
    let mut seen = Vec::new();
    let mut reported_regression = false;
    let mut before_loss = true;
    loop {
        if before_loss && ctx.metadata_lost.load(Ordering::SeqCst) {
            // The node is down for the restore: what it answers next may have a lower log
            // start, once.
            before_loss = false;
            max_log_start = 0;
        }
        if let Some(&target) = lock(&ctx.reader_targets).get(&bucket)
            && next >= target
        {
            break;
        }
        if Instant::now() > ctx.deadline {
            ctx.journal.violation(format!(
                "bucket {bucket}: the reader was at offset {next} at the deadline"
            ));
            break;
        }
        let answer = ctx
            .http
            .get(format!(
                "{}?offset={next}&live=long-poll&timeout_ms=1000",
                records_url(&ctx, bucket)
            ))
            .header("accept", MINK_BATCHES)
            .timeout(Duration::from_secs(30))
            .send()
            .await;
        let response = match answer {
            Ok(r) if r.status() == StatusCode::OK || r.status() == StatusCode::NO_CONTENT => r,
            Ok(r) if r.status().is_server_error() => {
                ctx.journal
                    .reader_reconnects
                    .fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            // Retention moved the log start past this reader: it goes on from there, and the
            // log start never moves back.
            Ok(r) if r.status() == StatusCode::GONE && ctx.retention => {
                let body: serde_json::Value = r.json().await.unwrap_or_default();
                let Some(start) = body["log_start"].as_u64().filter(|s| *s > next) else {
                    ctx.journal.violation(format!(
                        "bucket {bucket}: a read at {next} got 410 without a log start past it: {body}"
                    ));
                    break;
                };
                if start < max_log_start {
                    ctx.journal.violation(format!(
                        "bucket {bucket}: the log start went back from {max_log_start} to {start}"
                    ));
                }
                max_log_start = max_log_start.max(start);
                ctx.journal
                    .reader_trim_jumps
                    .fetch_add(1, Ordering::Relaxed);
                next = start;
                continue;
            }
            Ok(r) => {
                // 416 here would mean the log end fell below what this reader already read.
                let status = r.status();
                let text = r.text().await.unwrap_or_default();
                if !reported_regression {
                    ctx.journal.violation(format!(
                        "bucket {bucket}: a read at offset {next} got {status}: {text}"
                    ));
                    reported_regression = true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(_) => {
                ctx.unreachable();
                ctx.journal
                    .reader_reconnects
                    .fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let hw = header_u64(&response, "mink-high-watermark");
        let next_header = header_u64(&response, "mink-next-offset");
        if let Some(start) = header_u64(&response, "mink-log-start") {
            if start < max_log_start {
                ctx.journal.violation(format!(
                    "bucket {bucket}: the log start went back from {max_log_start} to {start}"
                ));
            }
            max_log_start = max_log_start.max(start);
        }
        let Ok(body) = response.bytes().await else {
            ctx.journal
                .reader_reconnects
                .fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let Some(hw) = hw else {
            ctx.journal.violation(format!(
                "bucket {bucket}: a read at {next} has no Mink-High-Watermark"
            ));
            continue;
        };
        ctx.journal
            .high_watermarks_seen
            .fetch_add(1, Ordering::Relaxed);
        if hw < max_hw {
            ctx.journal.violation(format!(
                "bucket {bucket}: the high watermark went backwards from {max_hw} to {hw} \
                 (reader at offset {next})"
            ));
        }
        max_hw = max_hw.max(hw);
        let batches = match parse_batches(&body) {
            Ok(b) => b,
            Err(e) => {
                if !reported_regression {
                    ctx.journal.violation(format!(
                        "bucket {bucket}: a read at {next} returned undecodable batches: {e}"
                    ));
                    reported_regression = true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        for b in batches {
            if b.base_offset != next {
                ctx.journal.violation(format!(
                    "bucket {bucket}: the reader expected a batch at offset {next} and got one \
                     at {} (writer {} sequence {})",
                    b.base_offset, b.writer_id, b.sequence
                ));
            }
            next = b.base_offset + b.record_count;
            seen.push(b);
        }
        if next > hw {
            ctx.journal.violation(format!(
                "bucket {bucket}: a reader read up to {next}, past the high watermark {hw}"
            ));
        }
        if let Some(n) = next_header
            && n != next
        {
            ctx.journal.violation(format!(
                "bucket {bucket}: Mink-Next-Offset is {n} but the batches end at {next}"
            ));
            next = n;
        }
    }
    lock(&ctx.journal.reader_batches).insert(bucket, seen);
}

pub(crate) fn parse_batches(body: &Bytes) -> Result<Vec<SeenBatch>, Error> {
    mink_codec::batches(body.clone())
        .map(|b| {
            let b = b.map_err(|e| e.to_string())?;
            Ok(SeenBatch {
                base_offset: u64::try_from(b.base_offset()).map_err(|e| e.to_string())?,
                record_count: u64::try_from(b.record_count()).map_err(|e| e.to_string())?,
                writer_id: b.writer_id(),
                sequence: b.batch_sequence(),
            })
        })
        .collect()
}
