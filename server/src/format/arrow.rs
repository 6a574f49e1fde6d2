//! Arrow IPC streams: an append's stream becomes one record batch of the table's schema; a read
//! answers one stream of one schema.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::{RowBounds, internal, too_many_rows};
use crate::error::{ApiError, ApiResult};

/// The record batches of an Arrow IPC stream, checked against `schema` and joined into one, at
/// most `bounds.max_rows` rows in all and `bounds.max_decoded_bytes` bytes of bodies once
/// decompressed (an uncompressed body's rows are its own buffers; a compressed one, LZ4_FRAME or
/// ZSTD, is counted from its buffers' declared lengths before anything is decompressed, so a
/// decompression bomb is refused unread): the rows are counted from each
/// message's metadata before its body is decoded, so an oversized stream is refused before anything
/// is built. Every message is checked by the codec first (buffers inside the body, node lengths,
/// buffer widths against the schema), which Arrow's own stream reader does not do.
pub fn arrow_to_rows(schema: &SchemaRef, body: &[u8], bounds: RowBounds) -> ApiResult<RecordBatch> {
    let max_rows = bounds.max_rows;
    let bad = |e: mink_codec::Error| {
        ApiError::invalid("invalid_rows", format!("bad Arrow IPC stream: {e}"))
    };
    let theirs = mink_codec::ipc_stream_schema(body).map_err(bad)?;
    if theirs.fields().len() != schema.fields().len()
        || theirs
            .fields()
            .iter()
            .zip(schema.fields())
            .any(|(a, b)| a.name() != b.name() || a.data_type() != b.data_type())
    {
        return Err(ApiError::invalid(
            "schema_mismatch",
            format!(
                "the Arrow stream's schema {:?} does not match the table's {:?}",
                theirs
                    .fields()
                    .iter()
                    .map(|f| format!("{}: {}", f.name(), f.data_type()))
                    .collect::<Vec<_>>(),
                schema
                    .fields()
                    .iter()
                    .map(|f| format!("{}: {}", f.name(), f.data_type()))
                    .collect::<Vec<_>>()
            ),
        ));
    }
    // Decoded against the stream's own fields (its nullability), then re-labelled with the
    // table's schema so the table's nullability is enforced.
    let decoded =
        mink_codec::decode_ipc_stream(body, &Arc::new(theirs), max_rows, bounds.max_decoded_bytes);
    let batches = match decoded {
        Err(mink_codec::Error::TooLarge { .. }) => {
            return Err(too_many_rows(max_rows, bounds.rows_setting));
        }
        Err(e @ mink_codec::Error::Decompression { max, .. })
            if max == bounds.max_decoded_bytes =>
        {
            return Err(ApiError::LimitExceeded {
                setting: "http.body.max_decoded_bytes",
                limit: bounds.max_decoded_bytes as u64,
                message: e.to_string(),
            });
        }
        other => other.map_err(bad)?,
    };
    let mut parts = Vec::with_capacity(batches.len());
    for batch in batches {
        let batch = RecordBatch::try_new(schema.clone(), batch.columns().to_vec())
            .map_err(|e| ApiError::invalid("schema_mismatch", e.to_string()))?;
        parts.push(batch);
    }
    let rows = arrow_select::concat::concat_batches(schema, &parts)
        .map_err(|e| ApiError::invalid("invalid_rows", e.to_string()))?;
    if rows.num_rows() == 0 {
        return Err(ApiError::invalid(
            "invalid_rows",
            "the Arrow stream holds no rows",
        ));
    }
    Ok(rows)
}

/// Record batches as an Arrow IPC stream.
pub fn rows_to_arrow(schema: &SchemaRef, rows: &[RecordBatch]) -> ApiResult<Vec<u8>> {
    let mut writer =
        arrow_ipc::writer::StreamWriter::try_new(Vec::new(), schema).map_err(internal)?;
    for r in rows {
        writer.write(r).map_err(internal)?;
    }
    writer.finish().map_err(internal)?;
    writer.into_inner().map_err(internal)
}
