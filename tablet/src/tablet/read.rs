//! Reads bounded by the isolation, with projection, and the timestamp lookup.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use mink_codec::{Header, Projection};
use mink_s3stream::ReadBound;
use mink_s3stream::error::StreamError;

use super::Tablet;
use super::types::{Columns, Isolation, ReadBatch, ReadResult};
use crate::error::{Result, TabletError};

impl Tablet {
    /// Reads `[from, to)` (`to` is clipped to the isolation bound): whole batches, the first holding
    /// `from`, about `max_bytes` in all but at least one batch when any is below the bound. With
    /// `columns`, each batch is rewritten to those columns.
    pub async fn read(
        &self,
        from: u64,
        to: u64,
        columns: Option<&Columns>,
        isolation: Isolation,
        max_bytes: usize,
    ) -> Result<ReadResult> {
        if to < from {
            return Err(TabletError::InvalidRange { from, to });
        }
        let offsets = self.inner.stream.offsets();
        let (bound, stream_bound) = match isolation {
            Isolation::HighWatermark => (offsets.confirm, ReadBound::Confirmed),
            Isolation::LogEnd => (offsets.next, ReadBound::NextOffset),
        };
        if from < offsets.start {
            return Err(TabletError::BelowLogStart {
                offset: from,
                log_start: offsets.start,
            });
        }
        if from > bound {
            return Err(TabletError::OffsetOutOfRange {
                offset: from,
                bound,
                isolation,
            });
        }
        let mut out = ReadResult {
            batches: Vec::new(),
            next_offset: from,
            high_watermark: offsets.confirm,
            log_start: offsets.start,
        };
        let to = to.min(bound);
        if from >= to {
            return Ok(out);
        }
        let fetched = self
            .inner
            .stream
            .fetch(from, to, max_bytes, stream_bound)
            .await
            .map_err(|e| match e {
                StreamError::BeyondBound { offset, bound, .. } => TabletError::OffsetOutOfRange {
                    offset,
                    bound,
                    isolation,
                },
                other => self.stream_error("fetch", other),
            })?;
        let mut projections: HashMap<i16, Projection> = HashMap::new();
        let mut bytes_out = 0usize;
        'outer: for stream_batch in fetched {
            for view in mink_codec::batches(stream_batch.payload.clone()) {
                let view = view.map_err(|e| TabletError::Corrupt {
                    offset: stream_batch.base_offset,
                    reason: e.to_string(),
                })?;
                let base = u64::try_from(view.base_offset()).unwrap_or(0);
                let next = u64::try_from(view.next_offset()).unwrap_or(0);
                if next <= from {
                    continue;
                }
                if base >= to || (bytes_out >= max_bytes && !out.batches.is_empty()) {
                    break 'outer;
                }
                let bytes = match columns {
                    None => view.buf().clone(),
                    Some(columns) => {
                        let schema_id = view.schema_id();
                        let projection = match projections.entry(schema_id) {
                            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                            std::collections::hash_map::Entry::Vacant(v) => {
                                v.insert(self.projection(schema_id, base, columns)?)
                            }
                        };
                        Bytes::from(projection.project(&view).map_err(|e| {
                            TabletError::Corrupt {
                                offset: base,
                                reason: format!("projecting the batch failed: {e}"),
                            }
                        })?)
                    }
                };
                bytes_out += bytes.len();
                out.next_offset = next;
                out.batches.push(ReadBatch {
                    header: *view.header(),
                    bytes,
                });
            }
        }
        Ok(out)
    }

    fn projection(&self, schema_id: i16, offset: u64, columns: &Columns) -> Result<Projection> {
        let schema = self
            .inner
            .schemas
            .schema(schema_id)
            .ok_or_else(|| TabletError::Corrupt {
                offset,
                reason: format!(
                    "the stored batch has schema id {schema_id}, which the table does not know"
                ),
            })?;
        let projection = match columns {
            Columns::Names(names) => Projection::by_names(schema, names),
            Columns::Indices(indices) => Projection::new(schema, indices),
        }
        // The stream checked its blocks' CRCs; the batches' own were checked at append.
        .map(Projection::trusting_crc);
        projection.map_err(|e| TabletError::InvalidProjection {
            schema_id,
            source: Arc::new(e),
        })
    }

    /// The first offset whose batch has a commit timestamp at or after `timestamp` (ms); the high
    /// watermark when every batch is older. A timestamp in the future is refused.
    ///
    /// A binary search over the batch headers, with no index: each probe fetches the one stream batch
    /// holding the middle offset and reads its first header, so with batches of similar sizes it
    /// costs at most `ceil(log2(batches)) + 1` fetches (with very uneven sizes, `log2(offsets)`).
    pub async fn offset_for_timestamp(&self, timestamp: i64) -> Result<u64> {
        let now = self.inner.clock.now_ms();
        if timestamp > now {
            return Err(TabletError::FutureTimestamp { timestamp, now });
        }
        let offsets = self.inner.stream.offsets();
        let (mut lo, mut hi) = (offsets.start, offsets.confirm);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let batches = self
                .inner
                .stream
                .fetch(mid, mid + 1, 1, ReadBound::Confirmed)
                .await
                .map_err(|e| self.stream_error("fetch", e))?;
            let Some(batch) = batches.into_iter().next() else {
                return Err(TabletError::Inconsistent {
                    tablet: self.inner.name.clone(),
                    message: format!("no batch holds offset {mid} below the high watermark {hi}"),
                });
            };
            let header = first_header(&batch.payload, batch.base_offset)?;
            if header.commit_timestamp >= timestamp {
                hi = batch.base_offset.max(lo);
            } else {
                lo = batch.end_offset();
            }
        }
        Ok(lo.min(offsets.confirm))
    }
}

/// The first header of a stream batch.
fn first_header(payload: &Bytes, offset: u64) -> Result<Header> {
    match mink_codec::batches(payload.as_ref()).next() {
        Some(Ok(view)) => Ok(*view.header()),
        Some(Err(e)) => Err(TabletError::Corrupt {
            offset,
            reason: e.to_string(),
        }),
        None => Err(TabletError::Corrupt {
            offset,
            reason: "empty stream batch".to_owned(),
        }),
    }
}
