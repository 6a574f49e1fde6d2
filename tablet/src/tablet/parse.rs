//! The checks of an append request, made before anything is reserved or locked: framing, the row
//! and batch limits (on the header's counts, before any other work, so a forged count costs
//! nothing), the schema id and writer fields, then each batch decoded in full against the schema
//! its `schema_id` names. A batch that passes would decode on read; one that does not is refused
//! with its index, and the request changes nothing.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use mink_codec::BatchView;

use super::Tablet;
use crate::error::{Result, TabletError};
use crate::writers::{Batches, Claim};

/// One batch of an append request after the checks.
pub(super) struct Parsed {
    pub(super) range: Range<usize>,
    pub(super) record_count: u32,
    /// The allocated writer id (bits 0-47 of the header's field), -1 without a writer.
    pub(super) writer_id: i64,
    /// The writer epoch (bits 48-62 of the field).
    pub(super) epoch: i16,
    pub(super) sequence: i32,
    /// The sequence counts records (attribute bit 1).
    pub(super) counts_records: bool,
    /// The header's CRC32C, checked against the bytes it covers (from `CRC_START` on, which
    /// stamping leaves alone).
    pub(super) crc: u32,
}

impl Parsed {
    /// What the batch claims about its writer, for the windows.
    pub(super) fn claim(&self) -> Claim {
        Claim {
            writer: self.writer_id,
            epoch: self.epoch,
            sequence: self.sequence,
            rows: self.record_count,
            records: self.counts_records,
        }
    }
}

impl Tablet {
    /// Checks every batch of an append request (see the module doc). `request` is shared, not
    /// copied, by the decoded arrays, which are dropped before this returns, so the caller can
    /// still stamp the request in place.
    pub(super) fn parse(&self, request: &Bytes) -> Result<Batches<Parsed>> {
        let settings = &self.inner.settings;
        if request.len() as u64 > settings.max_request_bytes {
            return Err(TabletError::TooLarge {
                what: "request bytes",
                value: request.len() as u64,
                limit: settings.max_request_bytes,
            });
        }
        let mut parsed = Batches::new();
        let mut total: u64 = 0;
        for (index, view) in mink_codec::batches(request.clone()).enumerate() {
            let invalid = |e: mink_codec::Error| TabletError::InvalidBatch {
                index,
                source: Arc::new(e),
            };
            let view = view.map_err(invalid)?;
            if parsed.len() as u64 >= settings.max_request_batches {
                return Err(TabletError::TooLarge {
                    what: "batches in the request",
                    value: parsed.len() as u64 + 1,
                    limit: settings.max_request_batches,
                });
            }
            let Some(record_count) = u32::try_from(view.record_count()).ok().filter(|c| *c > 0)
            else {
                // A negative count or one that disagrees with last_offset_delta is the header
                // check's to name; a consistent zero is an empty batch.
                view.check_header().map_err(invalid)?;
                return Err(TabletError::InvalidRequest {
                    reason: format!(
                        "batch {index} has no rows; every appended batch must hold at least one row"
                    ),
                });
            };
            let rows = u64::from(record_count);
            if rows > settings.max_rows_per_batch {
                return Err(TabletError::TooManyRows {
                    index,
                    setting: "max_rows_per_batch",
                    rows,
                    limit: settings.max_rows_per_batch,
                });
            }
            total += rows;
            if total > settings.max_rows_per_request {
                return Err(TabletError::TooManyRows {
                    index,
                    setting: "max_rows_per_request",
                    rows: total,
                    limit: settings.max_rows_per_request,
                });
            }
            let Some(schema) = self.inner.schemas.schema(view.schema_id()) else {
                // A corrupt header is reported as such, not as the schema id it happens to hold.
                view.check_header().map_err(invalid)?;
                return Err(TabletError::UnknownSchema {
                    index,
                    schema_id: view.schema_id(),
                });
            };
            let (writer_id, sequence) = (view.writer_id(), view.batch_sequence());
            if writer_id < mink_codec::NO_WRITER_ID || (writer_id >= 0 && sequence < 0) {
                view.check_header().map_err(invalid)?;
                return Err(TabletError::InvalidRequest {
                    reason: format!(
                        "batch {index} has writer id {writer_id} and sequence {sequence}; a writer id \
                         is -1 (none) or non-negative with a non-negative sequence"
                    ),
                });
            }
            decode(&view, &schema, record_count).map_err(invalid)?;
            let (writer_id, epoch) = mink_codec::writer_parts(writer_id).unwrap_or((-1, 0));
            let start = view.position();
            parsed.push(Parsed {
                range: start..start + view.len(),
                record_count,
                writer_id,
                epoch,
                sequence,
                counts_records: view.counts_records(),
                crc: view.crc(),
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

/// Decodes the batch as a read would (the header checks included: magic, CRC, counts, change
/// types, so they run once), and checks the rows built are the `record_count` its header claims,
/// which is what moves the offsets.
fn decode(
    view: &BatchView<Bytes>,
    schema: &arrow_schema::SchemaRef,
    record_count: u32,
) -> mink_codec::Result<()> {
    let (rows, _changes) = view.decode(schema)?;
    if rows.num_rows() as u64 != u64::from(record_count) {
        return Err(mink_codec::Error::CountMismatch {
            field: "record_count",
            position: view.position() + mink_codec::header::pos::RECORD_COUNT,
            expected: i64::from(record_count),
            actual: i64::try_from(rows.num_rows()).unwrap_or(i64::MAX),
        });
    }
    Ok(())
}
