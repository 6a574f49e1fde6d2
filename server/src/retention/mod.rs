//! Retention (docs/retention.md): a background task that moves each bucket's log start forward
//! as its table's policy says, through the bucket log's own `trim`, so garbage collection then
//! deletes the objects wholly below it.
//!
//! Every `retention.interval_ms`, a run walks the tables whose effective policy keeps less than
//! everything; for each, the tablets that exist (one scan of the table's tablet keys, so buckets
//! never written are not created), `retention.max_concurrent` buckets at a time. A bucket another
//! node owns is left to its owner. For each of its own, the target is the larger of
//!
//! - the age cut: the first offset whose batch was committed at or after `now - age_ms`, on the
//!   node's clock (the one commit timestamps are stamped with);
//! - the size cut: the lowest object-range start from which what the bucket keeps fits
//!   `bytes` ([`Footprint::trim_point_for_bytes`](mink_s3stream::Footprint::trim_point_for_bytes));
//!
//! clipped to the high watermark, and the log is trimmed only when that is above its log start.

pub mod policy;

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use mink_metadata::{MetaKvExt, TableRecord};

use crate::catalog::TableInfo;
use crate::core::NodeCore;
use crate::error::{ApiError, ApiResult};
use policy::{Effective, Reason};

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunReport {
    /// Buckets of this node examined.
    pub buckets: usize,
    /// Buckets whose log start moved.
    pub trimmed: usize,
    /// Offsets moved below the log starts, summed.
    pub trimmed_offsets: u64,
    /// Buckets that failed (logged; the next run retries).
    pub errors: usize,
}

/// Runs retention every `retention.interval_ms` until the node shuts down.
pub async fn run(core: Arc<NodeCore>) {
    let interval = core.settings().retention.interval;
    loop {
        tokio::select! {
            () = core.shutdown_signal().cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        if let Err(e) = run_once(&core).await {
            core.metrics().retention_errors.inc();
            tracing::warn!(error = %e, "listing tables for retention failed; the next run retries");
        }
    }
}

/// One pass over every table with a policy.
pub async fn run_once(core: &NodeCore) -> ApiResult<RunReport> {
    let started = Instant::now();
    let node_policy = core.settings().retention.default_policy();
    let mut buckets = Vec::new();
    for record in core.catalog().list().await? {
        let effective = Effective::of(record.retention.as_ref(), &node_policy);
        if effective.keeps_everything() {
            continue;
        }
        let info = core.catalog().get(&record.name).await?;
        if info.record().incarnation != record.incarnation {
            // Dropped and created again elsewhere: the cleanup pass refreshes the cache.
            continue;
        }
        for (partition, bucket) in existing_tablets(core, &record).await? {
            buckets.push((Arc::clone(&info), effective, partition, bucket));
        }
    }
    let limit = core.settings().retention.max_concurrent;
    let outcomes: Vec<Outcome> = futures::stream::iter(buckets)
        .map(|(info, effective, partition, bucket)| async move {
            apply(core, &info, effective, &partition, bucket).await
        })
        .buffer_unordered(limit)
        .collect()
        .await;
    let mut report = RunReport::default();
    for outcome in outcomes {
        match outcome {
            Outcome::NotOwned => {}
            Outcome::Kept => report.buckets += 1,
            Outcome::Trimmed(offsets) => {
                report.buckets += 1;
                report.trimmed += 1;
                report.trimmed_offsets += offsets;
            }
            Outcome::Failed => {
                report.buckets += 1;
                report.errors += 1;
            }
        }
    }
    let metrics = core.metrics();
    metrics.retention_runs.inc();
    metrics
        .retention_trimmed_offsets
        .inc_by(report.trimmed_offsets);
    metrics.retention_errors.inc_by(report.errors as u64);
    metrics
        .retention_last_run_ms
        .set(i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX));
    Ok(report)
}

/// The (partition, bucket) of every tablet of `table` that exists, from one scan of its keys.
async fn existing_tablets(core: &NodeCore, table: &TableRecord) -> ApiResult<Vec<(String, u32)>> {
    let prefix = format!("{}{}/", mink_tablet::registry::TABLETS, table.key_segment());
    let keys = core.metadata().kv().scan_all(&prefix, 512).await?;
    Ok(keys
        .iter()
        .filter_map(|kv| {
            let (partition, bucket) = kv.key.strip_prefix(&prefix)?.rsplit_once('/')?;
            let bucket: u32 = bucket.parse().ok()?;
            let known =
                bucket < table.bucket_count && table.partitions.iter().any(|p| p == partition);
            known.then(|| (partition.to_owned(), bucket))
        })
        .collect())
}

enum Outcome {
    NotOwned,
    Kept,
    Trimmed(u64),
    Failed,
}

async fn apply(
    core: &NodeCore,
    info: &Arc<TableInfo>,
    effective: Effective,
    partition: &str,
    bucket: u32,
) -> Outcome {
    let table = info.name();
    match trim_bucket(core, info, effective, partition, bucket).await {
        Ok(Some((from, to, reason))) => {
            tracing::info!(
                table,
                partition,
                bucket,
                from,
                to,
                reason = reason.as_str(),
                "retention trimmed a bucket"
            );
            Outcome::Trimmed(to - from)
        }
        Ok(None) => Outcome::Kept,
        Err(ApiError::Moved { .. } | ApiError::BucketUnavailable { .. }) => Outcome::NotOwned,
        Err(ApiError::ShuttingDown | ApiError::TableNotFound { .. }) => Outcome::NotOwned,
        Err(e) => {
            tracing::warn!(table, partition, bucket, error = %e, "retention could not trim a bucket; the next run retries");
            Outcome::Failed
        }
    }
}

/// Trims one bucket as its policy says: `Some((old log start, new log start, why))` when it moved.
async fn trim_bucket(
    core: &NodeCore,
    info: &Arc<TableInfo>,
    effective: Effective,
    partition: &str,
    bucket: u32,
) -> ApiResult<Option<(u64, u64, Reason)>> {
    let log = core.bucket_log(info, bucket, partition, None).await?;
    let offsets = log.offsets();
    if offsets.high_watermark <= offsets.log_start {
        return Ok(None);
    }
    let by_age = match effective.age_ms {
        Some(limit) => {
            let now = core.metadata().clock().now_ms();
            let cut = now.saturating_sub(i64::try_from(limit.value).unwrap_or(i64::MAX));
            if cut <= 0 {
                None
            } else {
                Some(log.offset_for_timestamp(cut).await?)
            }
        }
        None => None,
    };
    let by_bytes = effective
        .bytes
        .and_then(|limit| log.footprint().trim_point_for_bytes(limit.value));
    let Some((to, reason)) =
        policy::target(offsets.log_start, offsets.high_watermark, by_age, by_bytes)
    else {
        return Ok(None);
    };
    log.trim(to).await?;
    Ok(Some((offsets.log_start, to, reason)))
}
