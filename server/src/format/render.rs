//! Read responses rendered in bounded pieces, so the memory a read takes does not follow what its
//! rows render to (a few stored bytes of a `Null` column render to megabytes of NDJSON).
//!
//! A stored batch is cut into *pieces* of rows ([`RecordBatch::slice`]) that render about
//! [`PIECE_BYTES`] each: the first piece's size is guessed from the stored size and the column
//! names, the next ones from the bytes per row the previous piece rendered to. A response stops at
//! the first piece boundary once it has rendered `max_render_bytes` (at least one piece), so it
//! holds at most the bound plus one piece, and the offset after the last row sent is where the
//! next read continues; a read may start at any row (the tablet returns the whole batch holding
//! the offset, the pieces skip the rows before it).
//!
//! The position headers go out before the body, so [`render_bounded`] renders the response once to
//! learn where it stops, keeping the first [`EAGER_BYTES`] of output; what it did not keep is
//! rendered again, piece by piece, as the body streams ([`Rendered::tail`]). A small response is
//! rendered once and sent whole.

use std::collections::VecDeque;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;

use super::internal;
use crate::error::ApiResult;

/// Bytes one piece aims to render to (fewer when the render bound is smaller).
const PIECE_BYTES: usize = 64 << 10;
/// Rows in one piece at most, whatever the guess: a wrong guess stays small.
const PIECE_ROWS: usize = 8192;
/// Output a response keeps from its sizing pass; the rest is rendered again while it streams.
const EAGER_BYTES: usize = 256 << 10;

/// Rows of one stored batch a read may send.
#[derive(Debug, Clone)]
pub struct StoredRows {
    /// The decoded rows.
    pub rows: RecordBatch,
    /// The offset of the first row.
    pub base_offset: u64,
    /// The stored batch's size, for the first guess of a piece's size.
    pub stored_len: usize,
}

impl StoredRows {
    /// The rows of this batch within `[from, until)`, as a row range.
    pub fn window(&self, from: u64, until: Option<u64>) -> (usize, usize) {
        let rows = self.rows.num_rows();
        let at = |offset: u64| {
            usize::try_from(offset.saturating_sub(self.base_offset)).map_or(rows, |r| r.min(rows))
        };
        let start = at(from);
        let end = until.map_or(rows, at);
        (start, end.max(start))
    }
}

/// How many rows the next piece of a batch takes.
#[derive(Debug, Clone)]
struct Slicer {
    target: usize,
    /// Bytes one row is expected to render to (at least 1).
    per_row: usize,
}

impl Slicer {
    /// A slicer for `batch`, aiming at `target` bytes a piece. Text formats (`text`) render the
    /// column names in every row, so they count in the first guess.
    fn new(target: usize, batch: &StoredRows, text: bool) -> Self {
        let rows = batch.rows.num_rows().max(1);
        let names = if text {
            batch
                .rows
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().len() + 4)
                .sum::<usize>()
                + 3
        } else {
            0
        };
        Slicer {
            target: target.max(1),
            per_row: (batch.stored_len / rows + names).max(1),
        }
    }

    /// Rows of the next piece, `remaining` rows being left (at least one when any is).
    fn next_len(&self, remaining: usize) -> usize {
        (self.target / self.per_row)
            .clamp(1, PIECE_ROWS)
            .min(remaining)
    }

    /// Learns from a piece of `rows` rows that rendered to `bytes`.
    fn observe(&mut self, rows: usize, bytes: usize) {
        if rows > 0 {
            self.per_row = bytes.div_ceil(rows).max(1);
        }
    }
}

/// The formats a bounded body renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFormat {
    /// One JSON object per row.
    Ndjson,
    /// An Arrow IPC stream of one schema.
    Arrow,
}

/// Writes a body piece by piece; each piece's bytes are taken out as it is written.
enum BodyWriter {
    Ndjson(arrow_json::LineDelimitedWriter<Vec<u8>>),
    Arrow(Box<arrow_ipc::writer::StreamWriter<Vec<u8>>>),
}

impl BodyWriter {
    /// A writer; an Arrow stream's schema message is written at once.
    fn new(format: BodyFormat, schema: &SchemaRef) -> ApiResult<Self> {
        Ok(match format {
            BodyFormat::Ndjson => {
                BodyWriter::Ndjson(arrow_json::LineDelimitedWriter::new(Vec::new()))
            }
            BodyFormat::Arrow => BodyWriter::Arrow(Box::new(
                arrow_ipc::writer::StreamWriter::try_new(Vec::new(), schema).map_err(internal)?,
            )),
        })
    }

    fn write(&mut self, rows: &RecordBatch) -> ApiResult<()> {
        match self {
            BodyWriter::Ndjson(w) => w.write(rows).map_err(internal),
            BodyWriter::Arrow(w) => w.write(rows).map_err(internal),
        }
    }

    /// The end of the body (an Arrow stream's end marker).
    fn finish(&mut self) -> ApiResult<()> {
        match self {
            BodyWriter::Ndjson(w) => w.finish().map_err(internal),
            BodyWriter::Arrow(w) => w.finish().map_err(internal),
        }
    }

    /// What was written since the last take.
    fn take(&mut self) -> Bytes {
        let out = match self {
            BodyWriter::Ndjson(w) => w.get_mut(),
            BodyWriter::Arrow(w) => w.get_mut(),
        };
        Bytes::from(std::mem::take(out))
    }
}

/// Rows `[start, start + len)` of the batch at `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    index: usize,
    start: usize,
    len: usize,
}

/// A bounded response body: where it stops, what was kept from the sizing pass, and the rest.
pub struct Rendered {
    /// The offset after the last row sent, when the bound cut the response short.
    pub stopped_at: Option<u64>,
    /// The rows the response holds.
    pub rows: usize,
    /// The bytes the response holds.
    pub bytes: usize,
    /// Output kept from the sizing pass, sent first.
    pub head: Vec<Bytes>,
    /// What is rendered again while the body streams; `None` when `head` is the whole body.
    pub tail: Option<Tail>,
}

/// The pieces of a response rendered after its head, one chunk each.
pub struct Tail {
    writer: Option<BodyWriter>,
    batches: Vec<StoredRows>,
    pieces: VecDeque<Piece>,
}

impl Iterator for Tail {
    type Item = ApiResult<Bytes>;

    fn next(&mut self) -> Option<Self::Item> {
        let writer = self.writer.as_mut()?;
        let result = match self.pieces.pop_front() {
            Some(p) => match self.batches.get(p.index) {
                Some(b) => writer
                    .write(&b.rows.slice(p.start, p.len))
                    .map(|()| writer.take()),
                None => Err(crate::error::ApiError::Internal {
                    message: "a response piece names no batch".to_owned(),
                }),
            },
            None => {
                let end = writer.finish().map(|()| writer.take());
                self.writer = None;
                return Some(end);
            }
        };
        if result.is_err() {
            // The body ends with the error: nothing after it may look like the rest.
            self.writer = None;
        }
        Some(result)
    }
}

/// Renders the rows of `batches` within `[from, until)` in `format` (every batch of `schema`),
/// stopping at the first piece boundary once `bound` bytes are rendered (always at least one
/// piece). Errors here come before anything is sent.
pub fn render_bounded(
    format: BodyFormat,
    schema: &SchemaRef,
    batches: Vec<StoredRows>,
    from: u64,
    until: Option<u64>,
    bound: usize,
) -> ApiResult<Rendered> {
    let target = PIECE_BYTES.min(bound).max(1);
    let mut writer = BodyWriter::new(format, schema)?;
    // The schema message always goes in the head: the tail's writer writes it again and drops it.
    let header = writer.take();
    let mut bytes = header.len();
    let mut head = vec![header];
    let mut head_bytes = bytes;
    let mut kept = 0usize;
    let mut keeping = true;
    let mut pieces = Vec::new();
    let mut rows = 0usize;
    let mut stopped_at = None;
    'batches: for (index, batch) in batches.iter().enumerate() {
        let (mut start, end) = batch.window(from, until);
        let mut slicer = Slicer::new(target, batch, format == BodyFormat::Ndjson);
        while start < end {
            if bytes >= bound && !pieces.is_empty() {
                stopped_at = Some(batch.base_offset + start as u64);
                break 'batches;
            }
            let len = slicer.next_len(end - start);
            writer.write(&batch.rows.slice(start, len))?;
            let out = writer.take();
            slicer.observe(len, out.len());
            bytes += out.len();
            rows += len;
            pieces.push(Piece { index, start, len });
            if keeping && head_bytes + out.len() <= EAGER_BYTES {
                head_bytes += out.len();
                head.push(out);
                kept = pieces.len();
            } else {
                keeping = false;
            }
            start += len;
        }
    }
    writer.finish()?;
    let end = writer.take();
    bytes += end.len();
    let tail = if keeping {
        head.push(end);
        None
    } else {
        let mut writer = BodyWriter::new(format, schema)?;
        drop(writer.take());
        let mut batches = batches;
        batches.truncate(pieces.last().map_or(0, |p| p.index + 1));
        Some(Tail {
            writer: Some(writer),
            batches,
            pieces: pieces.split_off(kept).into(),
        })
    };
    head.retain(|b| !b.is_empty());
    Ok(Rendered {
        stopped_at,
        rows,
        bytes,
        head,
        tail,
    })
}

/// One SSE event's rows: a JSON array, its pieces written until `bound` bytes or the end.
pub struct JsonArrayEvent {
    /// The JSON array.
    pub data: String,
    /// The row after the last one in the event.
    pub end: usize,
}

/// Renders rows from `start` (before `end`) of `batch` as one JSON array of at most `bound` bytes
/// plus one piece, with at least one row when any is left.
pub fn json_array_event(
    batch: &StoredRows,
    mut start: usize,
    end: usize,
    bound: usize,
) -> ApiResult<JsonArrayEvent> {
    let mut slicer = Slicer::new(PIECE_BYTES.min(bound).max(1), batch, true);
    let mut writer = arrow_json::ArrayWriter::new(Vec::new());
    let mut first = true;
    while start < end && (first || writer.get_ref().len() < bound) {
        let len = slicer.next_len(end - start);
        let before = writer.get_ref().len();
        writer
            .write(&batch.rows.slice(start, len))
            .map_err(internal)?;
        slicer.observe(len, writer.get_ref().len() - before);
        start += len;
        first = false;
    }
    writer.finish().map_err(internal)?;
    let data =
        String::from_utf8(writer.into_inner()).map_err(|e| crate::error::ApiError::Internal {
            message: e.to_string(),
        })?;
    Ok(JsonArrayEvent { data, end: start })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, NullArray, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    fn wide(rows: usize, width: usize) -> StoredRows {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("msg", DataType::Utf8, true),
        ]));
        let ids = Int64Array::from_iter_values(0..rows as i64);
        let msgs = StringArray::from_iter_values((0..rows).map(|i| format!("{i:0width$}")));
        let rows = RecordBatch::try_new(schema, vec![Arc::new(ids), Arc::new(msgs)]).unwrap();
        StoredRows {
            stored_len: rows.get_array_memory_size(),
            rows,
            base_offset: 100,
        }
    }

    fn body(r: Rendered) -> Vec<u8> {
        let mut out: Vec<u8> = r.head.iter().flat_map(|b| b.to_vec()).collect();
        for chunk in r.tail.into_iter().flatten() {
            out.extend_from_slice(&chunk.unwrap());
        }
        out
    }

    fn ids(ndjson: &[u8]) -> Vec<i64> {
        ndjson
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                serde_json::from_slice::<serde_json::Value>(l).unwrap()["id"]
                    .as_i64()
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn a_small_response_is_rendered_once_and_whole() {
        let b = wide(10, 4);
        let schema = b.rows.schema();
        let r = render_bounded(BodyFormat::Ndjson, &schema, vec![b], 100, None, 1 << 20).unwrap();
        assert!(r.tail.is_none());
        assert_eq!(r.stopped_at, None);
        assert_eq!(ids(&body(r)), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn one_big_batch_stops_mid_batch_and_continues_exactly() {
        let bound = 300 << 10;
        let b = wide(20_000, 100);
        let schema = b.rows.schema();
        let mut from = 100;
        let mut seen = Vec::new();
        let mut responses = 0;
        loop {
            let r = render_bounded(
                BodyFormat::Ndjson,
                &schema,
                vec![b.clone()],
                from,
                None,
                bound,
            )
            .unwrap();
            let stopped = r.stopped_at;
            let out = body(r);
            // A piece renders about PIECE_BYTES; a response holds the bound plus one piece.
            assert!(out.len() <= bound + 2 * PIECE_BYTES, "{}", out.len());
            seen.extend(ids(&out));
            responses += 1;
            match stopped {
                Some(next) => from = next,
                None => break,
            }
        }
        assert!(responses > 5, "{responses}");
        assert_eq!(seen, (0..20_000).collect::<Vec<_>>());
    }

    #[test]
    fn until_and_a_mid_batch_start_clip_the_rows() {
        let b = wide(50, 3);
        let schema = b.rows.schema();
        let r = render_bounded(
            BodyFormat::Ndjson,
            &schema,
            vec![b],
            110,
            Some(120),
            1 << 20,
        )
        .unwrap();
        assert_eq!(r.rows, 10);
        assert_eq!(ids(&body(r)), (10..20).collect::<Vec<_>>());
    }

    #[test]
    fn an_arrow_stream_streams_whole_across_its_pieces() {
        let b = wide(20_000, 100);
        let schema = b.rows.schema();
        let r = render_bounded(
            BodyFormat::Arrow,
            &schema,
            vec![b.clone()],
            100,
            None,
            16 << 20,
        )
        .unwrap();
        assert!(r.tail.is_some(), "larger than the eager part");
        let out = body(r);
        let reader =
            arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(out), None).unwrap();
        let got: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
        let got = arrow_select::concat::concat_batches(&schema, &got).unwrap();
        assert_eq!(got, b.rows);
    }

    #[test]
    fn a_null_column_of_many_rows_renders_within_the_bound() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Null, true)]));
        let rows =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(NullArray::new(64 << 20))]).unwrap();
        let b = StoredRows {
            rows,
            base_offset: 0,
            stored_len: 224,
        };
        let bound = 1 << 20;
        let r = render_bounded(BodyFormat::Ndjson, &schema, vec![b], 0, None, bound).unwrap();
        let stopped = r.stopped_at.expect("cut short");
        let out = body(r);
        assert!(out.len() <= bound + PIECE_BYTES, "{}", out.len());
        assert_eq!(stopped as usize, out.len() / 3, "`{{}}\\n` a row");
    }

    #[test]
    fn json_array_events_split_a_batch() {
        let b = wide(5000, 100);
        let mut start = 0;
        let mut seen = Vec::new();
        while start < 5000 {
            let e = json_array_event(&b, start, 5000, 64 << 10).unwrap();
            assert!(e.data.len() <= 2 * (64 << 10) + 200, "{}", e.data.len());
            let rows: Vec<serde_json::Value> = serde_json::from_str(&e.data).unwrap();
            seen.extend(rows.iter().map(|r| r["id"].as_i64().unwrap()));
            start = e.end;
        }
        assert_eq!(seen, (0..5000).collect::<Vec<_>>());
    }

    #[test]
    fn a_failure_while_streaming_ends_the_tail_with_the_error() {
        let b = wide(20_000, 100);
        let schema = b.rows.schema();
        let r = render_bounded(BodyFormat::Ndjson, &schema, vec![b], 100, None, 16 << 20).unwrap();
        let mut tail = r.tail.expect("streams");
        assert!(tail.next().unwrap().is_ok());
        // The rows of the next pieces are gone: the next chunk is the error, and nothing follows
        // (no end of stream that would make the cut body look complete).
        tail.batches.clear();
        assert!(tail.next().unwrap().is_err());
        assert!(tail.next().is_none());
    }
}
