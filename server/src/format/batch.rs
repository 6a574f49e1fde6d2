//! Mink batches as the node handles them: rows encoded into one append-only batch (the codec
//! writes the bytes and documents their layout), stored batches decoded, header fields read.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use mink_codec::{BatchMeta, BatchView, Encoder};

use crate::error::{ApiError, ApiResult};

/// Encodes rows as one append-only mink batch.
pub fn encode_rows(rows: &RecordBatch, meta: BatchMeta) -> ApiResult<Bytes> {
    Encoder::new()
        .encode(rows, None, meta)
        .map(Bytes::from)
        .map_err(|e| ApiError::invalid("invalid_rows", e.to_string()))
}

/// Decodes one stored batch with `schema`; header-only batches give `None`.
pub fn decode_batch(batch: &Bytes, schema: &SchemaRef) -> ApiResult<Option<RecordBatch>> {
    let corrupt = |e: mink_codec::Error| ApiError::Internal {
        message: format!("a stored batch does not decode: {e}"),
    };
    let view = BatchView::new(batch.clone()).map_err(corrupt)?;
    if view.record_count() == 0 {
        return Ok(None);
    }
    let (rows, _changes) = view.decode(schema).map_err(corrupt)?;
    Ok(Some(rows))
}

/// The schema id of a stored batch.
pub fn schema_id_of(batch: &Bytes) -> ApiResult<i16> {
    BatchView::new(batch.clone())
        .map(|v| v.schema_id())
        .map_err(|e| ApiError::Internal {
            message: format!("a stored batch has a bad header: {e}"),
        })
}

/// The offset of a stored batch's first row.
pub fn base_offset_of(batch: &Bytes) -> ApiResult<u64> {
    BatchView::new(batch.clone())
        .map(|v| u64::try_from(v.base_offset()).unwrap_or(0))
        .map_err(|e| ApiError::Internal {
            message: format!("a stored batch has a bad header: {e}"),
        })
}

/// The offset after a stored batch.
pub fn next_offset_of(batch: &Bytes) -> ApiResult<u64> {
    BatchView::new(batch.clone())
        .map(|v| u64::try_from(v.next_offset()).unwrap_or(0))
        .map_err(|e| ApiError::Internal {
            message: format!("a stored batch has a bad header: {e}"),
        })
}
