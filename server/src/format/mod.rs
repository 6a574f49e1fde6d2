//! The wire formats of appends and reads, and conversions between them.
//!
//! | Media type | Append body | Read body |
//! |---|---|---|
//! | `application/vnd.mink.batches` | mink batches back to back, as the codec writes them (writer id and sequence in each header) | the stored batches, offsets filled in |
//! | `application/vnd.apache.arrow.stream` | an Arrow IPC stream; all its record batches become one mink batch | an Arrow IPC stream (one schema per response) |
//! | `application/x-ndjson` | one JSON object per line (blank lines skipped); all lines become one mink batch | one JSON object per row |
//! | `text/event-stream` | - | SSE: one event per batch (several for a batch that renders past `http.max_render_bytes`), `data` a JSON array of its rows, `id` the offset after them |
//!
//! Arrow and NDJSON appends hold at most [`RowBounds`] rows and decoded bytes, counted as they
//! are decoded (400 `limit_exceeded`).
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
pub use batch::{
    base_offset_of, codec_of, commit_timestamp_of, compress_batches, decode_batch, encode_rows,
    next_offset_of, schema_id_of,
};
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

/// Rows an Arrow or NDJSON append may hold by default: `tablet.max_rows_per_request` and
/// `tablet.max_rows_per_batch` (such an append becomes one batch) both default to it.
pub const MAX_ROWS_PER_REQUEST: usize = 1 << 20;

/// What the rows of one Arrow or NDJSON append may come to as they are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowBounds {
    /// Rows in all: the smaller of `tablet.max_rows_per_request` and `tablet.max_rows_per_batch`.
    pub max_rows: usize,
    /// The setting `max_rows` comes from, named in a refusal.
    pub rows_setting: &'static str,
    /// Bytes of the decoded rows, counted as rows times the schema's null-row width
    /// (`http.body.max_decoded_bytes`).
    pub max_decoded_bytes: usize,
}

impl Default for RowBounds {
    fn default() -> Self {
        RowBounds {
            max_rows: MAX_ROWS_PER_REQUEST,
            rows_setting: "tablet.max_rows_per_request",
            max_decoded_bytes: crate::settings::BodyLimits::default().max_decoded_bytes,
        }
    }
}

/// The refusal of an append of more than `max_rows` rows, the limit of `setting`.
fn too_many_rows(max_rows: usize, setting: &'static str) -> ApiError {
    ApiError::LimitExceeded {
        setting,
        limit: max_rows as u64,
        message: format!("the request holds more than {max_rows} rows"),
    }
}

/// The refusal of an append whose rows, `width` bytes each once decoded, pass the bound.
fn too_many_decoded_bytes(bounds: &RowBounds, width: usize) -> ApiError {
    let rows = bounds.max_decoded_bytes / width;
    ApiError::LimitExceeded {
        setting: "http.body.max_decoded_bytes",
        limit: bounds.max_decoded_bytes as u64,
        message: format!(
            "a row of this table takes {width} bytes once decoded, so a request may hold at most {rows} rows ({} bytes)",
            bounds.max_decoded_bytes
        ),
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
            RowBounds::default(),
        )
        .unwrap();
        assert_eq!(rows.num_rows(), 2);
        let ipc = rows_to_arrow(&schema(), std::slice::from_ref(&rows)).unwrap();
        let back = arrow_to_rows(&schema(), &ipc, RowBounds::default()).unwrap();
        assert_eq!(back, rows);
        let batch = encode_rows(&back, BatchMeta::new(1), None).unwrap();
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
                ndjson_to_rows(&schema(), body, RowBounds::default()).is_err(),
                "{body:?}"
            );
        }
        assert!(arrow_to_rows(&schema(), b"garbage", RowBounds::default()).is_err());
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
        let refused = arrow_to_rows(&nulls, &ipc, RowBounds::default()).unwrap_err();
        assert_eq!(refused.kind(), "limit_exceeded");
        assert_eq!(refused.body()["setting"], "tablet.max_rows_per_request");

        let body = "{\"id\":1}\n".repeat(11);
        assert_eq!(
            ndjson_to_rows(&schema(), body.as_bytes(), rows_at_most(11))
                .unwrap()
                .num_rows(),
            11
        );
        let refused = ndjson_to_rows(&schema(), body.as_bytes(), rows_at_most(10)).unwrap_err();
        assert_eq!(refused.kind(), "limit_exceeded");
        assert_eq!(refused.body()["setting"], "tablet.max_rows_per_request");
    }

    fn rows_at_most(max_rows: usize) -> RowBounds {
        RowBounds {
            max_rows,
            ..RowBounds::default()
        }
    }

    #[test]
    fn ndjson_rows_are_bounded_by_their_decoded_bytes() {
        // Each `{}` is three bytes of body and a row of 1000 nullable i64 columns once decoded.
        let wide = Arc::new(Schema::new(
            (0..1000)
                .map(|i| Field::new(format!("c{i}"), DataType::Int64, true))
                .collect::<Vec<_>>(),
        ));
        assert_eq!(schema::row_bytes(&wide), 8000);
        let bounds = RowBounds {
            max_decoded_bytes: 8000 * 100,
            ..RowBounds::default()
        };
        let hundred = "{}\n".repeat(100);
        assert_eq!(
            ndjson_to_rows(&wide, hundred.as_bytes(), bounds)
                .unwrap()
                .num_rows(),
            100
        );
        // 8 MB of `{}` lines: 2.8 million rows, 22 GB decoded, refused after the first batches.
        let body = "{}\n".repeat((8 << 20) / 3);
        let refused = ndjson_to_rows(&wide, body.as_bytes(), bounds).unwrap_err();
        assert_eq!(refused.kind(), "limit_exceeded");
        assert_eq!(refused.body()["setting"], "http.body.max_decoded_bytes");
        assert!(
            refused.to_string().contains("at most 100 rows"),
            "{refused}"
        );
    }

    /// A fuzz finding: an IPC body whose record batch names a buffer past the message body, which
    /// Arrow's own stream reader panics on.
    #[test]
    fn an_arrow_body_with_a_buffer_past_its_end_is_refused() {
        let body = include_bytes!("../../../fuzz/regressions/arrow_rows-buffer-slice-panic");
        let own = Arc::new(mink_codec::ipc_stream_schema(body).unwrap());
        let refused = arrow_to_rows(&own, body, RowBounds::default()).unwrap_err();
        assert_eq!(refused.kind(), "invalid_rows", "{refused}");
    }

    #[test]
    fn ndjson_decodes_in_batches_of_bounded_rows() {
        // More rows than one decoded batch holds, and blank lines around them.
        let body: String = (0..20_000)
            .map(|i| format!("\n{{\"id\":{i}}}\n\n"))
            .collect();
        let rows = ndjson_to_rows(&schema(), body.as_bytes(), RowBounds::default()).unwrap();
        assert_eq!(rows.num_rows(), 20_000);
        let ids = rows
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert!(ids.values().iter().copied().eq(0..20_000));
        let blank = vec![b'\n'; 1 << 20];
        assert_eq!(
            ndjson_to_rows(&schema(), &blank, RowBounds::default())
                .unwrap_err()
                .kind(),
            "invalid_rows"
        );
    }
}
