//! The idempotent writers: each takes a writer id and sends numbered NDJSON batches with unique
//! row ids, retrying the same (writer id, sequence, body) until acknowledged, across restarts.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mink_runtime::SeededRng;
use reqwest::StatusCode;

use crate::journal::{Ack, Ctx, lock, records_url};

/// Row ids are `writer ordinal * ROW_SPACE + sequence * 16 + row`, unique over a run.
pub(crate) const ROW_SPACE: i64 = 1 << 40;
pub(crate) const MAX_ROWS: u64 = 4;

pub(crate) async fn init_writer(ctx: &Ctx) -> Option<i64> {
    loop {
        let answer = ctx
            .http
            .post(format!("{}/v1/writers", ctx.url()))
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        if answer.is_err() {
            ctx.unreachable();
        }
        if let Ok(r) = answer
            && r.status() == StatusCode::OK
            && let Ok(v) = r.json::<serde_json::Value>().await
            && let Some(id) = v["writer_id"].as_i64()
        {
            return Some(id);
        }
        if Instant::now() > ctx.deadline {
            ctx.journal
                .violation("init_writer never succeeded before the deadline".to_owned());
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) async fn writer(ctx: Arc<Ctx>, bucket: u32, ordinal: i64, mut rng: SeededRng) {
    let Some(writer_id) = init_writer(&ctx).await else {
        return;
    };
    let mut sequence: i32 = 0;
    while !ctx.stop_writing.load(Ordering::SeqCst) {
        let count = rng.between(1, MAX_ROWS);
        let rows: Vec<i64> = (0..count as i64)
            .map(|i| ordinal * ROW_SPACE + i64::from(sequence) * 16 + i)
            .collect();
        let mut body = String::new();
        let pad = "x".repeat(ctx.pad_bytes);
        for id in &rows {
            let _ = writeln!(
                body,
                "{{\"id\":{id},\"msg\":\"w{writer_id} s{sequence}{pad}\"}}"
            );
        }
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let answer = ctx
                .http
                .post(records_url(&ctx, bucket))
                .header("content-type", "application/x-ndjson")
                .header("mink-writer-id", writer_id)
                .header("mink-sequence", sequence)
                .body(body.clone())
                .timeout(Duration::from_secs(60))
                .send()
                .await;
            let retry = match answer {
                Ok(r) if r.status() == StatusCode::OK => {
                    match r.json::<serde_json::Value>().await {
                        Ok(v) => {
                            record_ack(&ctx, bucket, writer_id, sequence, &rows, &v);
                            break;
                        }
                        // The node died while sending the answer: ask again.
                        Err(_) => true,
                    }
                }
                Ok(r) if r.status().is_server_error() => true,
                Ok(r) => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    ctx.journal.violation(format!(
                        "bucket {bucket}: append of writer {writer_id} sequence {sequence} \
                         (attempt {attempt}) was rejected with {status}: {text}"
                    ));
                    return;
                }
                Err(_) => {
                    ctx.unreachable();
                    true
                }
            };
            if retry {
                ctx.journal.append_retries.fetch_add(1, Ordering::Relaxed);
                if Instant::now() > ctx.deadline {
                    ctx.journal.violation(format!(
                        "bucket {bucket}: writer {writer_id} sequence {sequence} was never \
                         acknowledged ({attempt} attempts before the deadline)"
                    ));
                    return;
                }
                tokio::time::sleep(Duration::from_millis(rng.between(10, 60))).await;
            }
        }
        sequence += 1;
        // A little air between batches, so two cores also serve readers and the compactor.
        tokio::time::sleep(Duration::from_millis(rng.between(0, 10))).await;
    }
}

pub(crate) fn record_ack(
    ctx: &Ctx,
    bucket: u32,
    writer_id: i64,
    sequence: i32,
    rows: &[i64],
    answer: &serde_json::Value,
) {
    let base = answer["base_offset"].as_u64();
    let last = answer["last_offset"].as_u64();
    let (Some(base), Some(last)) = (base, last) else {
        ctx.journal.violation(format!(
            "bucket {bucket}: the acknowledgement of writer {writer_id} sequence {sequence} has \
             no offsets: {answer}"
        ));
        return;
    };
    if last < base || last + 1 - base != rows.len() as u64 {
        ctx.journal.violation(format!(
            "bucket {bucket}: writer {writer_id} sequence {sequence} sent {} rows but was \
             acknowledged offsets {base}..={last}",
            rows.len()
        ));
    }
    if answer["duplicate"].as_bool() == Some(true) {
        ctx.journal.duplicate_acks.fetch_add(1, Ordering::Relaxed);
    }
    lock(&ctx.journal.acks).push(Ack {
        bucket,
        writer_id,
        sequence,
        base_offset: base,
        rows: rows.to_vec(),
    });
}
