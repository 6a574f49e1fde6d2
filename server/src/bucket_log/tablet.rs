//! [`BucketLog`] over `mink-tablet`: one [`Tablet`] per bucket on the node's s3stream engine.
//! Tablet errors become API errors through `From<TabletError> for ApiError` (`crate::error`).

use std::sync::Arc;
use std::time::Duration;

use arrow_schema::SchemaRef;
use async_trait::async_trait;
use bytes::Bytes;
use mink_metadata::MetaError;
use mink_runtime::{Clock, SystemClock};
use mink_s3stream::Footprint;
use mink_s3stream::StreamError;
use mink_s3stream::engine::Engine;
use mink_tablet::{Columns, ErrorKind, Isolation, Schemas, Tablet, TabletId, TabletSettings};
use tokio_util::sync::CancellationToken;

use super::{
    AppendOutcome, BatchOutcome, BucketLog, LogKey, LogOffsets, LogProvider, ReadChunk, TailWatch,
};
use crate::catalog::{TableInfo, TableSchemas};
use crate::cluster::Suspects;
use crate::error::{ApiError, ApiResult};

impl Schemas for TableSchemas {
    fn schema(&self, schema_id: i16) -> Option<SchemaRef> {
        self.get(schema_id)
    }
}

/// Opens tablets on an engine.
#[derive(Debug, Clone)]
pub struct TabletProvider {
    engine: Engine,
    settings: TabletSettings,
    clock: Arc<dyn Clock>,
    /// Where members found holding a stream are reported, in a cluster.
    suspects: Option<Suspects>,
}

impl TabletProvider {
    /// A provider over `engine`, on the system clock.
    pub fn new(engine: Engine, settings: TabletSettings) -> Self {
        TabletProvider {
            engine,
            settings,
            clock: Arc::new(SystemClock),
            suspects: None,
        }
    }

    /// Reports to `suspects` each member found holding a stream this node could not open (it
    /// may be dead and not yet recovered: failover looks at it).
    pub fn with_suspects(mut self, suspects: Suspects) -> Self {
        self.suspects = Some(suspects);
        self
    }

    /// The clock the tablets stamp commit timestamps and judge writer idleness with.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

/// The member holding the stream open, when that is why a tablet could not open.
fn held_by(error: &mink_tablet::TabletError) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if let Some(StreamError::Metadata(meta)) = e.downcast_ref::<StreamError>()
            && let MetaError::StreamHeld { owner, .. } = meta.as_ref()
        {
            return Some(owner.clone());
        }
        cause = e.source();
    }
    None
}

fn tablet_id(key: &LogKey) -> TabletId {
    TabletId::new(key.table.clone(), key.partition.clone(), key.bucket)
        .with_incarnation(key.incarnation)
}

#[async_trait]
impl LogProvider for TabletProvider {
    async fn open(&self, key: &LogKey, table: &Arc<TableInfo>) -> ApiResult<Arc<dyn BucketLog>> {
        let tablet = Tablet::builder(tablet_id(key))
            .engine(self.engine.clone())
            .schemas(table.schemas.clone())
            .settings(self.settings.clone())
            .clock(self.clock.clone())
            .require_table()
            .open_or_create()
            .await
            .map_err(|e| match e.kind() {
                // The table was dropped (or is another incarnation now) since it was looked up.
                ErrorKind::NotFound => ApiError::TableNotFound {
                    table: key.table.clone(),
                },
                _ => match held_by(&e) {
                    // Another member holds the stream open: it is closing it (a transfer), or it
                    // is dead and not yet recovered (a failover).
                    Some(owner) => {
                        if let Some(suspects) = &self.suspects {
                            suspects.report(&owner);
                        }
                        ApiError::BucketUnavailable {
                            message: format!(
                                "bucket {key} is still open on {owner}; it opens here once {owner} closes it or is recovered"
                            ),
                        }
                    }
                    None => ApiError::from(e),
                },
            })?;
        tracing::info!(log = %key, stream = tablet.stream_id(), "tablet opened");
        Ok(Arc::new(TabletLog {
            tablet,
            closed: CancellationToken::new(),
        }))
    }

    async fn destroy_closed(&self, key: &LogKey) -> ApiResult<()> {
        let existed = Tablet::builder(tablet_id(key))
            .engine(self.engine.clone())
            .destroy()
            .await?;
        if existed {
            tracing::info!(log = %key, "tablet destroyed");
        }
        Ok(())
    }
}

/// One open tablet.
struct TabletLog {
    tablet: Tablet,
    /// Cancelled by close and destroy so parked readers return.
    closed: CancellationToken,
}

#[async_trait]
impl BucketLog for TabletLog {
    async fn append(&self, batches: Bytes) -> ApiResult<AppendOutcome> {
        let result = self.tablet.append(batches).await?;
        Ok(outcome(&result))
    }

    async fn append_then(
        &self,
        batches: Bytes,
        sequenced: tokio::sync::oneshot::Sender<()>,
    ) -> ApiResult<AppendOutcome> {
        let result = self
            .tablet
            .append_then(batches, move || {
                let _ = sequenced.send(());
            })
            .await?;
        Ok(outcome(&result))
    }

    async fn read(
        &self,
        from: u64,
        until: Option<u64>,
        columns: Option<&[String]>,
        max_bytes: usize,
    ) -> ApiResult<ReadChunk> {
        let to = until.unwrap_or(u64::MAX);
        if to <= from {
            let offsets = self.offsets();
            if from < offsets.log_start {
                return Err(ApiError::OffsetTrimmed {
                    offset: from,
                    log_start: offsets.log_start,
                });
            }
            return Ok(ReadChunk {
                batches: Vec::new(),
                next_offset: from,
            });
        }
        let columns = columns.map(|c| Columns::Names(c.to_vec()));
        let result = self
            .tablet
            .read(
                from,
                to,
                columns.as_ref(),
                Isolation::HighWatermark,
                max_bytes,
            )
            .await?;
        Ok(ReadChunk {
            next_offset: result.next_offset,
            batches: result.batches.into_iter().map(|b| b.bytes).collect(),
        })
    }

    fn offsets(&self) -> LogOffsets {
        let o = self.tablet.offsets();
        LogOffsets {
            log_start: o.log_start,
            high_watermark: o.high_watermark,
        }
    }

    fn footprint(&self) -> Footprint {
        self.tablet.footprint()
    }

    async fn wait_past(&self, offset: u64, timeout: Duration) -> u64 {
        tokio::select! {
            hw = self.tablet.wait_past(offset, timeout) => hw,
            _ = self.closed.cancelled() => self.tablet.high_watermark(),
        }
    }

    fn watch_tail(&self) -> TailWatch {
        TailWatch::new(self.tablet.watch_high_watermark(), self.closed.clone())
    }

    fn is_closed(&self) -> bool {
        self.closed.is_cancelled() || self.tablet.is_closed()
    }

    async fn offset_for_timestamp(&self, timestamp: i64) -> ApiResult<u64> {
        self.tablet
            .offset_for_timestamp(timestamp)
            .await
            .map_err(ApiError::from)
    }

    async fn trim(&self, offset: u64) -> ApiResult<()> {
        self.tablet.trim(offset).await.map_err(ApiError::from)
    }

    async fn close(&self) -> ApiResult<()> {
        self.closed.cancel();
        self.tablet.close().await.map_err(ApiError::from)
    }

    async fn destroy(&self) -> ApiResult<()> {
        self.closed.cancel();
        self.tablet.destroy().await.map_err(ApiError::from)
    }
}

/// What a tablet append gave, as the node answers it.
fn outcome(result: &mink_tablet::AppendResult) -> AppendOutcome {
    AppendOutcome {
        base_offset: result.base_offset(),
        last_offset: result.next_offset().saturating_sub(1),
        commit_timestamp: result.batches.last().map_or(0, |b| b.commit_timestamp),
        duplicate: result.is_duplicate(),
        batches: result
            .batches
            .iter()
            .map(|b| BatchOutcome {
                base_offset: b.base_offset,
                next_offset: b.next_offset(),
                commit_timestamp: b.commit_timestamp,
                duplicate: b.duplicate,
            })
            .collect(),
    }
}
