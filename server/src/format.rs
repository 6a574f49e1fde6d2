//! The wire formats of appends and reads, and conversions between them.
//!
//! | Media type | Append body | Read body |
//! |---|---|---|
//! | `application/vnd.mink.batches` | mink batches back to back, as the codec writes them (writer id and sequence in each header) | the stored batches, offsets filled in |
//! | `application/vnd.apache.arrow.stream` | an Arrow IPC stream; all its record batches become one mink batch | an Arrow IPC stream (one schema per response) |
//! | `application/x-ndjson` | one JSON object per line; all lines become one mink batch | one JSON object per row |
//! | `text/event-stream` | - | SSE: one event per batch, `data` a JSON array of its rows, `id` the next offset |
//!
//! For Arrow and NDJSON appends the node encodes the batch itself: the schema is the table's newest
//! (or `Mink-Schema-Id`), the writer id and sequence come from `Mink-Writer-Id` and `Mink-Sequence`.

use std::io::Cursor;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use mink_codec::{BatchMeta, BatchView, Encoder};

use crate::error::{ApiError, ApiResult};

/// Mink batches.
pub const MINK: &str = "application/vnd.mink.batches";
/// Arrow IPC stream.
pub const ARROW: &str = "application/vnd.apache.arrow.stream";
/// Newline-delimited JSON.
pub const NDJSON: &str = "application/x-ndjson";
/// Server-sent events.
pub const SSE: &str = "text/event-stream";

/// A body format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// [`MINK`].
    Mink,
    /// [`ARROW`].
    Arrow,
    /// [`NDJSON`].
    Ndjson,
    /// [`SSE`] (reads only).
    Sse,
}

impl Format {
    /// The media type.
    pub fn media_type(self) -> &'static str {
        match self {
            Format::Mink => MINK,
            Format::Arrow => ARROW,
            Format::Ndjson => NDJSON,
            Format::Sse => SSE,
        }
    }

    fn from_media_type(media: &str) -> Option<Self> {
        let media = media.split(';').next().unwrap_or("").trim();
        match media.to_ascii_lowercase().as_str() {
            MINK => Some(Format::Mink),
            ARROW | "application/vnd.apache.arrow.file" | "application/arrow" => {
                Some(Format::Arrow)
            }
            NDJSON | "application/ndjson" | "application/jsonl" | "application/x-jsonlines"
            | "application/json"
            // curl's default for `-d`: nobody posts HTML forms here, so read it as NDJSON.
            | "application/x-www-form-urlencoded" => Some(Format::Ndjson),
            SSE => Some(Format::Sse),
            _ => None,
        }
    }

    /// The format of an append body from its Content-Type (none given, or curl's default
    /// `application/x-www-form-urlencoded`: NDJSON).
    pub fn of_content_type(content_type: Option<&str>) -> ApiResult<Self> {
        let Some(ct) = content_type else {
            return Ok(Format::Ndjson);
        };
        match Self::from_media_type(ct) {
            Some(Format::Sse) | None => Err(ApiError::UnsupportedMediaType {
                content_type: ct.to_owned(),
                accepted: "application/vnd.mink.batches, application/vnd.apache.arrow.stream, application/x-ndjson",
            }),
            Some(f) => Ok(f),
        }
    }

    /// The format of a read from its Accept header: the first listed type we serve; `*/*` or
    /// nothing: NDJSON.
    pub fn of_accept(accept: Option<&str>) -> Self {
        accept
            .into_iter()
            .flat_map(|a| a.split(','))
            .find_map(Self::from_media_type)
            .unwrap_or(Format::Ndjson)
    }
}

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

/// The record batches of an Arrow IPC stream, checked against `schema` and joined into one.
pub fn arrow_to_rows(schema: &SchemaRef, body: &[u8]) -> ApiResult<RecordBatch> {
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
    for batch in reader {
        let batch = batch.map_err(bad)?;
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

fn internal(e: arrow_schema::ArrowError) -> ApiError {
    ApiError::Internal {
        message: format!("encoding the response failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("msg", DataType::Utf8, true),
        ]))
    }

    #[test]
    fn accept_and_content_type_pick_formats() {
        assert_eq!(Format::of_accept(None), Format::Ndjson);
        assert_eq!(Format::of_accept(Some("*/*")), Format::Ndjson);
        assert_eq!(Format::of_accept(Some("text/event-stream")), Format::Sse);
        assert_eq!(
            Format::of_accept(Some("text/html, application/vnd.apache.arrow.stream;q=0.9")),
            Format::Arrow
        );
        assert_eq!(
            Format::of_content_type(Some("application/vnd.mink.batches")).unwrap(),
            Format::Mink
        );
        assert_eq!(
            Format::of_content_type(Some("text/html"))
                .unwrap_err()
                .kind(),
            "unsupported_media_type"
        );
    }

    #[test]
    fn ndjson_and_arrow_round_trip_through_a_batch() {
        let rows = ndjson_to_rows(
            &schema(),
            b"{\"id\":1,\"msg\":\"a\"}\n{\"id\":2,\"msg\":null}\n",
        )
        .unwrap();
        assert_eq!(rows.num_rows(), 2);
        let ipc = rows_to_arrow(&schema(), std::slice::from_ref(&rows)).unwrap();
        let back = arrow_to_rows(&schema(), &ipc).unwrap();
        assert_eq!(back, rows);
        let batch = encode_rows(&back, BatchMeta::new(1)).unwrap();
        let decoded = decode_batch(&batch, &schema()).unwrap().unwrap();
        let mut out = Vec::new();
        rows_to_ndjson(&decoded, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"id\":1,\"msg\":\"a\"}\n{\"id\":2}\n"
        );
        let ids = decoded
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(ids.values(), &[1, 2]);
        let _ = StringArray::from(vec!["x"]);
    }

    #[test]
    fn bad_rows_are_rejected() {
        for body in [
            &b"{\"id\":\"x\"}"[..],
            b"{\"id\":1,\"other\":2}",
            b"not json",
            b"",
            b"{\"msg\":\"no id\"}",
        ] {
            assert!(ndjson_to_rows(&schema(), body).is_err(), "{body:?}");
        }
        assert!(arrow_to_rows(&schema(), b"garbage").is_err());
    }
}
