//! The header checks of an append request, made before anything is reserved or locked.

use std::ops::Range;
use std::sync::Arc;

use super::Tablet;
use crate::error::{Result, TabletError};
use crate::writers::Batches;

/// One batch of an append request after the header checks.
pub(super) struct Parsed {
    pub(super) range: Range<usize>,
    pub(super) record_count: u32,
    pub(super) writer_id: i64,
    pub(super) sequence: i32,
}

impl Tablet {
    /// Checks every batch of an append request (framing, magic, CRC, counts, schema, writer fields).
    pub(super) fn parse(&self, request: &[u8]) -> Result<Batches<Parsed>> {
        let settings = &self.inner.settings;
        if request.len() as u64 > settings.max_request_bytes {
            return Err(TabletError::TooLarge {
                what: "request bytes",
                value: request.len() as u64,
                limit: settings.max_request_bytes,
            });
        }
        let mut parsed = Batches::new();
        let mut total: u32 = 0;
        for (index, view) in mink_codec::batches(request).enumerate() {
            let invalid = |e: mink_codec::Error| TabletError::InvalidBatch {
                index,
                source: Arc::new(e),
            };
            let view = view.map_err(invalid)?;
            view.check_header().map_err(invalid)?;
            if parsed.len() as u64 >= settings.max_request_batches {
                return Err(TabletError::TooLarge {
                    what: "batches in the request",
                    value: parsed.len() as u64 + 1,
                    limit: settings.max_request_batches,
                });
            }
            let record_count = u32::try_from(view.record_count()).unwrap_or(0);
            if record_count == 0 {
                return Err(TabletError::InvalidRequest {
                    reason: format!(
                        "batch {index} has no rows; every appended batch must hold at least one row"
                    ),
                });
            }
            if !self.inner.schemas.contains(view.schema_id()) {
                return Err(TabletError::UnknownSchema {
                    index,
                    schema_id: view.schema_id(),
                });
            }
            let (writer_id, sequence) = (view.writer_id(), view.batch_sequence());
            if writer_id < mink_codec::NO_WRITER_ID || (writer_id >= 0 && sequence < 0) {
                return Err(TabletError::InvalidRequest {
                    reason: format!(
                        "batch {index} has writer id {writer_id} and sequence {sequence}; a writer id \
                         is -1 (none) or non-negative with a non-negative sequence"
                    ),
                });
            }
            total = total
                .checked_add(record_count)
                .ok_or(TabletError::TooLarge {
                    what: "rows in the request",
                    value: u64::from(total) + u64::from(record_count),
                    limit: u64::from(u32::MAX),
                })?;
            let start = view.position();
            parsed.push(Parsed {
                range: start..start + view.len(),
                record_count,
                writer_id,
                sequence,
            });
        }
        if parsed.is_empty() {
            return Err(TabletError::InvalidRequest {
                reason: "the request holds no batch".to_owned(),
            });
        }
        Ok(parsed)
    }
}
