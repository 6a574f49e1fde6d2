//! NDJSON: one JSON object per line in an append, one per row in a read; and a batch's rows as one
//! JSON array (the `data` of an SSE event).

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::internal;
use crate::error::{ApiError, ApiResult};

/// Rows of NDJSON as one record batch of `schema`.
pub fn ndjson_to_rows(schema: &SchemaRef, body: &[u8]) -> ApiResult<RecordBatch> {
    let lines = body.iter().filter(|b| **b == b'\n').count() + 1;
    let mut decoder = arrow_json::ReaderBuilder::new(schema.clone())
        .with_batch_size(lines)
        .with_strict_mode(true)
        .build_decoder()
        .map_err(|e| ApiError::invalid("invalid_rows", e.to_string()))?;
    let mut rest = body;
    while !rest.is_empty() {
        let read = decoder
            .decode(rest)
            .map_err(|e| ApiError::invalid("invalid_rows", format!("bad NDJSON row: {e}")))?;
        if read == 0 {
            break;
        }
        rest = rest.get(read..).unwrap_or_default();
    }
    let rows = decoder
        .flush()
        .map_err(|e| ApiError::invalid("invalid_rows", format!("bad NDJSON row: {e}")))?
        .unwrap_or_else(|| RecordBatch::new_empty(schema.clone()));
    if rows.num_rows() == 0 {
        return Err(ApiError::invalid("invalid_rows", "the body holds no rows"));
    }
    Ok(rows)
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
