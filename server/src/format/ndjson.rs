//! NDJSON: one JSON object per line in an append, one per row in a read; and a batch's rows as one
//! JSON array (the `data` of an SSE event).

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::{RowBounds, internal, too_many_decoded_bytes, too_many_rows};
use crate::error::{ApiError, ApiResult};

/// Memory the JSON decoder may reserve for one batch of rows: it sizes its token tape from the
/// batch size times the number of (flattened) fields, so a wide table decodes fewer rows a batch.
const DECODE_BUDGET_BYTES: usize = 4 << 20;
/// Rows of one decoded batch at most.
const DECODE_BATCH_ROWS: usize = 8192;

/// Rows of NDJSON as one record batch of `schema`, within `bounds` (the rows of a request, and
/// the bytes they take once decoded).
///
/// The body is decoded in batches of a bounded number of rows, never one sized from the body (a
/// count of newlines would let a body of blank lines reserve gigabytes on a wide table), and each
/// batch is counted against both bounds before the next is decoded: a few bytes of `{}` per row
/// decode to the schema's whole null-row width ([`row_bytes`](super::schema::row_bytes)).
/// Whitespace between rows, blank lines included, is skipped; a body without a row is refused.
pub fn ndjson_to_rows(
    schema: &SchemaRef,
    body: &[u8],
    bounds: RowBounds,
) -> ApiResult<RecordBatch> {
    let bad = |e: arrow_schema::ArrowError| {
        ApiError::invalid("invalid_rows", format!("bad NDJSON row: {e}"))
    };
    let width = usize::try_from(super::schema::row_bytes(schema))
        .unwrap_or(usize::MAX)
        .max(1);
    let max_rows = bounds.max_rows;
    // Rows whose null-row width fits the decoded-bytes bound.
    let fit = bounds.max_decoded_bytes / width;
    let mut decoder = arrow_json::ReaderBuilder::new(schema.clone())
        .with_batch_size(decode_batch_rows(schema, width))
        .with_strict_mode(true)
        .build_decoder()
        .map_err(|e| ApiError::invalid("invalid_rows", e.to_string()))?;
    let mut parts = Vec::new();
    let mut rows = 0usize;
    let mut flush = |decoder: &mut arrow_json::reader::Decoder| -> ApiResult<bool> {
        let Some(batch) = decoder.flush().map_err(bad)? else {
            return Ok(false);
        };
        rows += batch.num_rows();
        if rows > max_rows {
            return Err(too_many_rows(max_rows, bounds.rows_setting));
        }
        if rows > fit {
            return Err(too_many_decoded_bytes(&bounds, width));
        }
        parts.push(batch);
        Ok(true)
    };
    let mut rest = body;
    while !rest.is_empty() {
        let read = decoder.decode(rest).map_err(bad)?;
        rest = rest.get(read..).unwrap_or_default();
        // The decoder stops reading once a batch is full: flush it to go on.
        if read == 0 && !flush(&mut decoder)? {
            break;
        }
    }
    flush(&mut decoder)?;
    if parts.is_empty() {
        return Err(ApiError::invalid("invalid_rows", "the body holds no rows"));
    }
    arrow_select::concat::concat_batches(schema, &parts)
        .map_err(|e| ApiError::invalid("invalid_rows", e.to_string()))
}

/// Rows a decoded batch of `schema` holds, within the decoder's budget: its token tape and the
/// rows' own null-row width (`width` bytes a row).
fn decode_batch_rows(schema: &SchemaRef, width: usize) -> usize {
    // The tape takes about two 8-byte tokens and two 8-byte offsets per field and row.
    let per_row = (32 * schema.flattened_fields().len().max(1) + 16).max(width);
    (DECODE_BUDGET_BYTES / per_row).clamp(1, DECODE_BATCH_ROWS)
}

/// Rows as NDJSON lines appended to `out`.
pub fn rows_to_ndjson(rows: &RecordBatch, out: &mut Vec<u8>) -> ApiResult<()> {
    let mut writer = arrow_json::LineDelimitedWriter::new(out);
    writer.write(rows).map_err(internal)?;
    writer.finish().map_err(internal)
}

/// Rows as one JSON array.
pub fn rows_to_json_array(rows: &RecordBatch) -> ApiResult<String> {
    let mut out = Vec::new();
    {
        let mut writer = arrow_json::ArrayWriter::new(&mut out);
        writer.write(rows).map_err(internal)?;
        writer.finish().map_err(internal)?;
    }
    if out.is_empty() {
        out.extend_from_slice(b"[]");
    }
    String::from_utf8(out).map_err(|e| ApiError::Internal {
        message: e.to_string(),
    })
}
