//! Arrow IPC streams: an append's stream becomes one record batch of the table's schema; a read
//! answers one stream of one schema.

use std::io::Cursor;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::{internal, too_many_rows};
use crate::error::{ApiError, ApiResult};

/// The record batches of an Arrow IPC stream, checked against `schema` and joined into one, at
/// most `max_rows` rows in all (`limits.max_rows_per_request`): the rows are counted batch by
/// batch as the stream is read, so an oversized stream is refused before anything is joined.
pub fn arrow_to_rows(schema: &SchemaRef, body: &[u8], max_rows: usize) -> ApiResult<RecordBatch> {
    let bad = |e: arrow_schema::ArrowError| {
        ApiError::invalid("invalid_rows", format!("bad Arrow IPC stream: {e}"))
    };
    let reader = arrow_ipc::reader::StreamReader::try_new(Cursor::new(body), None).map_err(bad)?;
    let theirs = reader.schema();
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
    let mut parts = Vec::new();
    let mut rows = 0usize;
    for batch in reader {
        let batch = batch.map_err(bad)?;
        rows = rows.saturating_add(batch.num_rows());
        if rows > max_rows {
            return Err(too_many_rows(max_rows));
        }
        // Re-label with the table's schema so its nullability is enforced.
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
