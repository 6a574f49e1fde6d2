//! Mink batches as the node handles them: rows encoded into one append-only batch (the codec
//! writes the bytes and documents their layout), stored batches decoded, header fields read.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use mink_codec::{BatchMeta, BatchView, Compression, Encoder};
use mink_metadata::{CompressionCodec, TableCompression};

use crate::error::{ApiError, ApiResult};

/// Encodes rows as one append-only mink batch, its Arrow body compressed with `compression`
/// (a table's setting: [`codec_of`]).
pub fn encode_rows(
    rows: &RecordBatch,
    meta: BatchMeta,
    compression: Option<Compression>,
) -> ApiResult<Bytes> {
    encoder(compression)?
        .encode(rows, None, meta)
        .map(Bytes::from)
        .map_err(|e| ApiError::invalid("invalid_rows", e.to_string()))
}

/// The mink batches `body` (an append request, checked by the tablet after this) with every
/// batch whose body is not compressed compressed with `compression`; batches compressed already
/// are kept as sent. `schema` gives each batch's schema by id. A batch that does not decode is
/// refused as the tablet would refuse it (400 `invalid_batch`, naming its index).
pub fn compress_batches(
    body: Bytes,
    compression: Option<Compression>,
    schema: impl Fn(i16) -> Option<SchemaRef>,
) -> ApiResult<Bytes> {
    if compression.is_none() {
        return Ok(body);
    }
    let mut encoder = encoder(compression)?;
    let mut out: Option<Vec<u8>> = None;
    let mut kept = 0;
    for (index, view) in mink_codec::batches(body.clone()).enumerate() {
        let invalid = |e: mink_codec::Error| {
            ApiError::invalid("invalid_batch", format!("batch {index}: {e}"))
        };
        let view = view.map_err(invalid)?;
        // An unknown schema id is the tablet's to refuse, with its own error.
        let Some(schema) = schema(view.schema_id()) else {
            return Ok(body);
        };
        let end = view.position() + view.len();
        if let Some(again) = encoder.compress_batch(&view, &schema).map_err(invalid)? {
            let out = out.get_or_insert_with(|| Vec::with_capacity(body.len()));
            out.extend_from_slice(body.get(kept..view.position()).unwrap_or_default());
            out.extend_from_slice(&again);
            kept = end;
        }
    }
    Ok(match out {
        Some(mut out) => {
            out.extend_from_slice(body.get(kept..).unwrap_or_default());
            Bytes::from(out)
        }
        None => body,
    })
}

fn encoder(compression: Option<Compression>) -> ApiResult<Encoder> {
    Encoder::new()
        .with_compression(compression)
        .map_err(|e| ApiError::Internal {
            message: format!("the table's compression setting does not apply: {e}"),
        })
}

/// The codec of a table's compression setting.
pub fn codec_of(setting: Option<&TableCompression>) -> Option<Compression> {
    setting.map(|s| match s.codec {
        CompressionCodec::Lz4 => Compression::Lz4Frame,
        CompressionCodec::Zstd => Compression::Zstd {
            level: s.level.unwrap_or(Compression::ZSTD_DEFAULT_LEVEL),
        },
    })
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

/// When a stored batch was committed (ms); `None` when its header does not decode.
pub fn commit_timestamp_of(batch: &Bytes) -> Option<i64> {
    BatchView::new(batch.clone())
        .ok()
        .map(|v| v.header().commit_timestamp)
}

/// The offset after a stored batch.
pub fn next_offset_of(batch: &Bytes) -> ApiResult<u64> {
    BatchView::new(batch.clone())
        .map(|v| u64::try_from(v.next_offset()).unwrap_or(0))
        .map_err(|e| ApiError::Internal {
            message: format!("a stored batch has a bad header: {e}"),
        })
}
