//! Reads of committed objects: the object index (metadata) names the objects covering an
//! offset; each object's footer and index say which blocks hold the stream; ranged GETs fetch
//! just those blocks.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use mink_metadata::{Metadata, ObjectRecord};

use super::EngineMetrics;
use crate::error::{Result, StreamError};
use crate::log_cache::StreamBatch;
use crate::object::{self, BlockEntry, FOOTER_LEN};
use crate::storage::ObjectStorage;

/// Bytes read from an object's end to get its footer, and usually its whole index with it.
const TAIL_READ: u64 = 64 << 10;
/// Parsed indexes kept; the oldest half is dropped beyond this.
const INDEX_ENTRIES: usize = 4096;
/// Objects consulted per look-up in the object index.
const COVERING_LIMIT: usize = 8;

pub(crate) struct ObjectReader {
    storage: Arc<dyn ObjectStorage>,
    metrics: Arc<EngineMetrics>,
    indexes: Mutex<HashMap<u64, Arc<Vec<BlockEntry>>>>,
}

impl ObjectReader {
    pub(crate) fn new(storage: Arc<dyn ObjectStorage>, metrics: Arc<EngineMetrics>) -> Self {
        ObjectReader {
            storage,
            metrics,
            indexes: Mutex::new(HashMap::new()),
        }
    }

    /// Batches of `stream_id` from the one holding `from` up to `to`, about `max_bytes`.
    pub(crate) async fn read(
        &self,
        metadata: &Metadata,
        stream_id: u64,
        from: u64,
        to: u64,
        max_bytes: usize,
    ) -> Result<Vec<StreamBatch>> {
        let mut out: Vec<StreamBatch> = Vec::new();
        let mut bytes = 0usize;
        let mut cursor = from;
        while cursor < to {
            let mut covering = metadata.index().covering(stream_id, cursor, COVERING_LIMIT);
            if covering
                .first()
                .is_none_or(|c| c.range.start_offset > cursor)
            {
                // Another node's commit may not have reached this node's index yet (watches
                // lag): catch up from the metadata once before calling it an error.
                metadata.rebuild_index().await?;
                covering = metadata.index().covering(stream_id, cursor, COVERING_LIMIT);
            }
            let Some(first) = covering.first() else {
                return Err(StreamError::Inconsistent {
                    stream_id,
                    message: format!("no committed object holds offset {cursor}"),
                });
            };
            if first.range.start_offset > cursor {
                return Err(StreamError::Inconsistent {
                    stream_id,
                    message: format!(
                        "committed objects skip from offset {cursor} to {}",
                        first.range.start_offset
                    ),
                });
            }
            for covering in covering {
                if covering.range.start_offset > cursor || cursor >= to {
                    break;
                }
                let index = self.index(&covering.object).await?;
                let start = cursor;
                let blocks = index.iter().filter(|e| {
                    e.stream_id == stream_id && e.end_offset > start && e.start_offset < to
                });
                for entry in blocks {
                    for batch in self.block(&covering.object, entry).await? {
                        if batch.end_offset() <= cursor {
                            continue;
                        }
                        if batch.base_offset >= to
                            || (!out.is_empty() && bytes + batch.payload.len() > max_bytes)
                        {
                            return Ok(out);
                        }
                        bytes += batch.payload.len();
                        cursor = batch.end_offset();
                        out.push(batch);
                    }
                }
                if cursor < covering.range.end_offset.min(to) {
                    return Err(StreamError::Inconsistent {
                        stream_id,
                        message: format!(
                            "object {} should hold offsets up to {} but its blocks end at {cursor}",
                            covering.object.key, covering.range.end_offset
                        ),
                    });
                }
            }
        }
        Ok(out)
    }

    async fn get(&self, object: &ObjectRecord, range: std::ops::Range<u64>) -> Result<Bytes> {
        let bytes = self.storage.get_range(&object.key, range).await?;
        self.metrics.object_gets.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .object_bytes_read
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(bytes)
    }

    fn corrupt(object: &ObjectRecord, source: object::ObjectFormatError) -> StreamError {
        StreamError::CorruptObject {
            key: object.key.clone(),
            source,
        }
    }

    /// The object's block index, from the cache or from its tail.
    async fn index(&self, object: &ObjectRecord) -> Result<Arc<Vec<BlockEntry>>> {
        if let Some(index) = self.lock().get(&object.id) {
            return Ok(index.clone());
        }
        let size = object.size;
        if size < FOOTER_LEN as u64 {
            return Err(Self::corrupt(
                object,
                object::ObjectFormatError::Inconsistent(format!(
                    "object of {size} bytes has no footer"
                )),
            ));
        }
        let tail_start = size.saturating_sub(TAIL_READ);
        let tail = self.get(object, tail_start..size).await?;
        let footer = tail
            .len()
            .checked_sub(FOOTER_LEN)
            .and_then(|at| tail.get(at..))
            .ok_or_else(|| {
                Self::corrupt(
                    object,
                    object::ObjectFormatError::Inconsistent("short read of the footer".into()),
                )
            })?;
        let index_range =
            object::decode_footer(footer, size).map_err(|e| Self::corrupt(object, e))?;
        let crc = object::footer_index_crc(footer).map_err(|e| Self::corrupt(object, e))?;
        let index_bytes = if index_range.start >= tail_start {
            let at = (index_range.start - tail_start) as usize;
            let len = (index_range.end - index_range.start) as usize;
            tail.slice(at..at + len)
        } else {
            self.get(object, index_range.clone()).await?
        };
        let entries = object::decode_index(&index_bytes, crc, index_range.start)
            .map_err(|e| Self::corrupt(object, e))?;
        let entries = Arc::new(entries);
        let mut indexes = self.lock();
        if indexes.len() >= INDEX_ENTRIES {
            let drop: Vec<u64> = indexes.keys().take(INDEX_ENTRIES / 2).copied().collect();
            for id in drop {
                indexes.remove(&id);
            }
        }
        indexes.insert(object.id, entries.clone());
        Ok(entries)
    }

    async fn block(&self, object: &ObjectRecord, entry: &BlockEntry) -> Result<Vec<StreamBatch>> {
        let bytes = self.get(object, entry.range()).await?;
        object::decode_block(&bytes, entry).map_err(|e| Self::corrupt(object, e))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Vec<BlockEntry>>>> {
        self.indexes.lock().unwrap_or_else(|p| p.into_inner())
    }
}
