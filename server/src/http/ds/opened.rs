//! A stream found and opened on this node: its table, configuration, log and in-memory entry;
//! and the expiry of streams (docs/durable-streams.md, "TTL and expiry").

use std::sync::Arc;

use mink_metadata::StreamConfig;

use super::answer::Refusal;
use super::config::Mode;
use super::names;
use super::streams::{Stream, Streams};
use crate::bucket_log::BucketLog;
use crate::catalog::TableInfo;
use crate::core::NodeCore;
use crate::error::{ApiError, ApiResult};

/// A stream found and opened on this node.
pub(crate) struct Opened {
    pub(crate) info: Arc<TableInfo>,
    pub(crate) config: StreamConfig,
    pub(crate) mode: Mode,
    pub(crate) log: Arc<dyn BucketLog>,
    pub(crate) stream: Arc<Stream>,
}

impl Opened {
    /// Whether the stream is closed.
    pub(crate) async fn closed(&self, core: &NodeCore) -> ApiResult<bool> {
        let mut tail = self.stream.tail.lock().await;
        Ok(self
            .stream
            .tail_of(core, &self.log, self.mode, &mut tail)
            .await?
            .closed)
    }
}

/// The stream `name` as this node serves it: 404 when there is none (or it expired: then it is
/// deleted now), 307 when another node serves it.
pub(crate) async fn open(
    core: &NodeCore,
    streams: &Streams,
    name: &str,
    redirected_by: Option<&str>,
) -> Result<Opened, Refusal> {
    let table = names::table_of(name)?;
    let info = core.catalog().get(&table).await?;
    let record = info.record();
    let Some(config) = record.stream.clone() else {
        return Err(not_found(name).into());
    };
    let log = core
        .bucket_log(&info, 0, &record.partitions[0], redirected_by)
        .await?;
    let stream = streams.get(&table, record.incarnation);
    let mode = Mode::of(&config.content_type);
    {
        let mut tail = stream.tail.lock().await;
        stream.tail_of(core, &log, mode, &mut tail).await?;
    }
    let now = now_ms(core);
    if expired(&config, stream.last_access(config.created_ms), now) {
        tracing::info!(stream = name, "stream expired; deleting it");
        streams.forget(&table);
        match core.drop_table(&table).await {
            Ok(()) | Err(ApiError::TableNotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        delete_producers(core, &record).await;
        return Err(not_found(name).into());
    }
    Ok(Opened {
        info,
        config,
        mode,
        log,
        stream,
    })
}

/// Whether a stream last read or appended to at `last_access` (ms) has expired at `now`.
pub(crate) fn expired(config: &StreamConfig, last_access: u64, now: u64) -> bool {
    let ttl_over = config
        .ttl_secs
        .is_some_and(|ttl| now >= last_access.saturating_add(ttl.saturating_mul(1000)));
    let past = config
        .expires_at_ms
        .is_some_and(|at| i64::try_from(now).unwrap_or(i64::MAX) >= at);
    ttl_over || past
}

/// Deletes a deleted stream's producer names (best effort: they are keyed by the table's
/// incarnation, so leftovers are never read again).
pub(crate) async fn delete_producers(core: &NodeCore, record: &mink_metadata::TableRecord) {
    if let Err(e) = core
        .metadata()
        .delete_producer_names(&record.key_segment())
        .await
    {
        tracing::warn!(table = record.name, error = %e, "deleting a stream's producer names failed");
    }
}

/// The node's clock, in milliseconds.
pub(crate) fn now_ms(core: &NodeCore) -> u64 {
    core.metadata().clock().now_ms_unsigned()
}

fn not_found(name: &str) -> ApiError {
    ApiError::TableNotFound {
        table: format!("stream `{name}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_slide_and_expiry_times_do_not() {
        let config = |ttl_secs, expires_at_ms| StreamConfig {
            content_type: "text/plain".to_owned(),
            ttl_secs,
            expires_at_ms,
            created_ms: 1_000,
        };
        assert!(!expired(&config(None, None), 0, u64::MAX));
        assert!(!expired(&config(Some(2), None), 5_000, 6_999));
        assert!(expired(&config(Some(2), None), 5_000, 7_000));
        assert!(!expired(&config(None, Some(10_000)), 9_000, 9_999));
        assert!(expired(&config(None, Some(10_000)), 9_000, 10_000));
    }
}
