//! The wire formats of appends and reads, and conversions between them.
//!
//! | Media type | Append body | Read body |
//! |---|---|---|
//! | `application/vnd.mink.batches` | mink batches back to back, as the codec writes them (writer id and sequence in each header) | the stored batches, offsets filled in |
//! | `application/vnd.apache.arrow.stream` | an Arrow IPC stream; all its record batches become one mink batch | an Arrow IPC stream (one schema per response) |
//! | `application/x-ndjson` | one JSON object per line (blank lines skipped); all lines become one mink batch | one JSON object per row |
//! | `text/event-stream` | - | SSE: one event per batch (several for a batch that renders past `http.max_render_bytes`), `data` a JSON array of its rows, `id` the offset after them |
//!
//! Arrow and NDJSON appends hold at most [`MAX_ROWS_PER_REQUEST`] rows, counted as they are
//! decoded (400 `limit_exceeded`).
//!
//! For Arrow and NDJSON appends the node encodes the batch itself: the schema is the table's newest
//! (or `Mink-Schema-Id`), the writer id and sequence come from `Mink-Writer-Id` and `Mink-Sequence`.
//!
//! - `ndjson`: NDJSON rows in and out (and the JSON arrays of SSE events).
//! - `arrow`: Arrow IPC streams in and out.
//! - `batch`: mink batches: encoding rows into one, decoding a stored one, reading its header.
//! - `render`: read responses rendered in bounded pieces of rows (`http.max_render_bytes`), the
//!   NDJSON and Arrow bodies streamed and the JSON arrays of SSE events.
//! - [`schema`]: table schemas as JSON.

mod arrow;
mod batch;
mod ndjson;
mod render;
pub mod schema;

pub use arrow::{arrow_to_rows, rows_to_arrow};
pub use batch::{base_offset_of, decode_batch, encode_rows, next_offset_of, schema_id_of};
pub use ndjson::{ndjson_to_rows, rows_to_json_array, rows_to_ndjson};
pub use render::{
    BodyFormat, JsonArrayEvent, Rendered, StoredRows, Tail, json_array_event, render_bounded,
};

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
            NDJSON
            | "application/ndjson"
            | "application/jsonl"
            | "application/x-jsonlines"
            | "application/json" => Some(Format::Ndjson),
            SSE => Some(Format::Sse),
            _ => None,
        }
    }

    /// The format of an append body from its Content-Type, which must be given and known.
    ///
    /// No default: a missing type, or curl's and HTML forms' `application/x-www-form-urlencoded`,
    /// is refused (415), so a web page cannot append through a browser's simple request (which
    /// may only send form, multipart or plain-text types without asking first).
    pub fn of_content_type(content_type: Option<&str>) -> ApiResult<Self> {
        let refused = |content_type: &str| ApiError::UnsupportedMediaType {
            content_type: content_type.to_owned(),
            accepted: "application/vnd.mink.batches, application/vnd.apache.arrow.stream, application/x-ndjson",
        };
        let Some(ct) = content_type else {
            return Err(refused("(none)"));
        };
        match Self::from_media_type(ct) {
            Some(Format::Sse) | None => Err(refused(ct)),
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

/// Rows an Arrow or NDJSON append may hold: the default of `limits.max_rows_per_request`, the
/// setting the `[limits]` section brings (until then the bound is this constant).
pub const MAX_ROWS_PER_REQUEST: usize = 1 << 20;

/// The refusal of an append of more than `max_rows` rows.
fn too_many_rows(max_rows: usize) -> ApiError {
    ApiError::LimitExceeded {
        setting: "limits.max_rows_per_request",
        limit: max_rows as u64,
        message: format!("the request holds more than {max_rows} rows"),
    }
}

/// An Arrow error while encoding a response.
fn internal(e: arrow_schema::ArrowError) -> ApiError {
    ApiError::Internal {
        message: format!("encoding the response failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema, SchemaRef};
    use mink_codec::BatchMeta;

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
        for refused in [
            Some("text/html"),
            None,
            Some("application/x-www-form-urlencoded"),
            Some("text/plain"),
            Some("multipart/form-data; boundary=x"),
        ] {
            assert_eq!(
                Format::of_content_type(refused).unwrap_err().kind(),
                "unsupported_media_type",
                "{refused:?}"
            );
        }
        assert_eq!(
            Format::of_content_type(Some("application/x-ndjson; charset=utf-8")).unwrap(),
            Format::Ndjson
        );
    }

    #[test]
    fn ndjson_and_arrow_round_trip_through_a_batch() {
        let rows = ndjson_to_rows(
            &schema(),
            b"{\"id\":1,\"msg\":\"a\"}\n{\"id\":2,\"msg\":null}\n",
            MAX_ROWS_PER_REQUEST,
        )
        .unwrap();
        assert_eq!(rows.num_rows(), 2);
        let ipc = rows_to_arrow(&schema(), std::slice::from_ref(&rows)).unwrap();
        let back = arrow_to_rows(&schema(), &ipc, MAX_ROWS_PER_REQUEST).unwrap();
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
            assert!(
                ndjson_to_rows(&schema(), body, MAX_ROWS_PER_REQUEST).is_err(),
                "{body:?}"
            );
        }
        assert!(arrow_to_rows(&schema(), b"garbage", MAX_ROWS_PER_REQUEST).is_err());
    }

    #[test]
    fn appends_over_the_row_limit_are_refused_as_they_decode() {
        // The case: a few hundred bytes of Arrow IPC holding a `Null` column of 64 Mi rows.
        let nulls = Arc::new(Schema::new(vec![Field::new("n", DataType::Null, true)]));
        let rows = RecordBatch::try_new(
            nulls.clone(),
            vec![Arc::new(arrow_array::NullArray::new(64 << 20))],
        )
        .unwrap();
        let ipc = rows_to_arrow(&nulls, &[rows]).unwrap();
        assert!(ipc.len() < 400, "{} bytes", ipc.len());
        let refused = arrow_to_rows(&nulls, &ipc, MAX_ROWS_PER_REQUEST).unwrap_err();
        assert_eq!(refused.kind(), "limit_exceeded");
        assert_eq!(refused.body()["setting"], "limits.max_rows_per_request");

        let body = "{\"id\":1}\n".repeat(11);
        assert_eq!(
            ndjson_to_rows(&schema(), body.as_bytes(), 11)
                .unwrap()
                .num_rows(),
            11
        );
        let refused = ndjson_to_rows(&schema(), body.as_bytes(), 10).unwrap_err();
        assert_eq!(refused.kind(), "limit_exceeded");
    }

    #[test]
    fn ndjson_decodes_in_batches_of_bounded_rows() {
        // More rows than one decoded batch holds, and blank lines around them.
        let body: String = (0..20_000)
            .map(|i| format!("\n{{\"id\":{i}}}\n\n"))
            .collect();
        let rows = ndjson_to_rows(&schema(), body.as_bytes(), MAX_ROWS_PER_REQUEST).unwrap();
        assert_eq!(rows.num_rows(), 20_000);
        let ids = rows
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert!(ids.values().iter().copied().eq(0..20_000));
        let blank = vec![b'\n'; 1 << 20];
        assert_eq!(
            ndjson_to_rows(&schema(), &blank, MAX_ROWS_PER_REQUEST)
                .unwrap_err()
                .kind(),
            "invalid_rows"
        );
    }
}
