//! Arrow IPC streams from untrusted sources (an HTTP append body): the same checks the codec makes
//! on a batch's own message, applied to every record-batch message of a stream before Arrow's
//! decoder reads it.
//!
//! A stream is a sequence of encapsulated messages (a 0xFFFFFFFF continuation marker, an i32
//! metadata length, the flatbuffer `Message` and its body; writers before Arrow 0.15 omit the
//! marker), the first a `Schema`, the rest `RecordBatch`es, ended by a zero length or by the end
//! of the bytes. Arrow's stream reader slices each buffer straight from the offsets in the
//! metadata, and panics on one that lies past the body; [`decode_ipc_stream`] refuses such a
//! stream with an error instead. [`ipc_stream_schema`] reads the stream's schema message, so the
//! caller can compare it with its own before decoding any rows.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_ipc::reader::RecordBatchDecoder;
use arrow_ipc::{MessageHeader, MetadataVersion};
use arrow_schema::{Schema, SchemaRef};

use crate::error::{Error, Result, field};
use crate::ipc::{CONTINUATION, check_buffer_widths, check_record_batch};

/// The record batches of the Arrow IPC stream `stream`, decoded against `schema` (which the caller
/// has compared with the stream's own schema message), at most `max_rows` rows in all, counted
/// from each message's metadata before its body is decoded, and at most `max_bytes` bytes of
/// bodies once decompressed (each message at most [`crate::MAX_UNCOMPRESSED_BODY`]), counted from
/// the buffers' declared lengths before anything is decompressed. Bodies may be compressed
/// (LZ4_FRAME or ZSTD). Dictionary batches are refused (the codec stores no dictionary columns).
///
/// # Errors
/// [`Error::TooLarge`] past `max_rows`; [`Error::Decompression`] past `max_bytes`;
/// [`Error::Truncated`], [`Error::BadLength`] or
/// [`Error::InvalidArrowMessage`] for a frame or message that does not hold together;
/// [`Error::Arrow`] when Arrow's decoder refuses the checked message.
pub fn decode_ipc_stream(
    stream: &[u8],
    schema: &SchemaRef,
    max_rows: usize,
    max_bytes: usize,
) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    let mut rows = 0usize;
    let mut at = 0usize;
    let mut messages = 0usize;
    let mut uncompressed = 0usize;
    let dictionaries: HashMap<i64, ArrayRef> = HashMap::new();
    while let Some(frame) = next_frame(stream, at)? {
        let position = frame.meta_start;
        let invalid = |reason: String| Error::InvalidArrowMessage {
            field: field::ARROW_METADATA,
            position,
            reason,
        };
        let message = arrow_ipc::root_as_message(frame.meta)
            .map_err(|e| invalid(format!("flatbuffer does not verify: {e}")))?;
        let version = message.version();
        if version != MetadataVersion::V4 && version != MetadataVersion::V5 {
            return Err(invalid(format!(
                "metadata version {version:?} is not supported (V4 or V5)"
            )));
        }
        let declared = message.bodyLength();
        let body = usize::try_from(declared)
            .ok()
            .and_then(|len| Some(frame.body_start..frame.body_start.checked_add(len)?))
            .and_then(|range| stream.get(range))
            .ok_or(Error::Truncated {
                field: field::ARROW_BODY,
                position: frame.body_start,
                needed: usize::try_from(declared).unwrap_or(usize::MAX),
                available: stream.len().saturating_sub(frame.body_start),
            })?;
        at = frame.body_start + body.len();
        let first = messages == 0;
        messages += 1;
        match (first, message.header_type()) {
            (true, MessageHeader::Schema) => continue,
            (true, other) => {
                return Err(invalid(format!(
                    "the stream starts with a {other:?} message, not its Schema"
                )));
            }
            (false, MessageHeader::RecordBatch) => {}
            (false, other) => {
                return Err(invalid(format!(
                    "a {other:?} message where a RecordBatch was expected (dictionary columns \
                     are not supported)"
                )));
            }
        }
        let rb = message
            .header_as_record_batch()
            .ok_or_else(|| invalid("a RecordBatch message without its header".into()))?;
        let count = usize::try_from(rb.length())
            .map_err(|_| invalid(format!("negative row count {}", rb.length())))?;
        rows = rows.saturating_add(count);
        if rows > max_rows {
            return Err(Error::TooLarge {
                what: "rows in the Arrow stream",
                value: rows,
                max: max_rows,
            });
        }
        uncompressed =
            uncompressed.saturating_add(check_record_batch(&rb, body, frame.body_start, invalid)?);
        if uncompressed > max_bytes {
            return Err(Error::Decompression {
                position: frame.body_start,
                declared: uncompressed,
                max: max_bytes,
            });
        }
        check_buffer_widths(&rb, body, schema, position)?;
        let body = arrow_buffer::Buffer::from(body);
        let batch =
            RecordBatchDecoder::try_new(&body, rb, Arc::clone(schema), &dictionaries, &version)
                .and_then(|d| d.with_require_alignment(false).read_record_batch())
                .map_err(|source| Error::Arrow {
                    field: field::ARROW_BODY,
                    position: frame.body_start,
                    source,
                })?;
        batches.push(batch);
    }
    if messages == 0 {
        return Err(Error::Truncated {
            field: field::ARROW_PREFIX,
            position: 0,
            needed: 8,
            available: stream.len(),
        });
    }
    Ok(batches)
}

/// The schema of the Arrow IPC stream `stream`: its first message, which must be a `Schema`.
///
/// # Errors
/// [`Error::Truncated`] or [`Error::BadLength`] for a frame that does not hold together;
/// [`Error::InvalidArrowMessage`] when the first message is not a schema Arrow can read.
pub fn ipc_stream_schema(stream: &[u8]) -> Result<Schema> {
    let frame = next_frame(stream, 0)?.ok_or(Error::Truncated {
        field: field::ARROW_PREFIX,
        position: 0,
        needed: 8,
        available: stream.len(),
    })?;
    schema_of(frame.meta, frame.meta_start, "the stream starts with")
}

/// The schema in the flatbuffer `Message` `meta` found at `position`; `what` begins the error
/// for a message of another type.
pub(crate) fn schema_of(meta: &[u8], position: usize, what: &str) -> Result<Schema> {
    let invalid = |reason: String| Error::InvalidArrowMessage {
        field: field::ARROW_METADATA,
        position,
        reason,
    };
    let message = arrow_ipc::root_as_message(meta)
        .map_err(|e| invalid(format!("flatbuffer does not verify: {e}")))?;
    let schema = message.header_as_schema().ok_or_else(|| {
        invalid(format!(
            "{what} a {:?} message, not its Schema",
            message.header_type()
        ))
    })?;
    arrow_ipc::convert::try_fb_to_schema(schema).map_err(|e| invalid(e.to_string()))
}

/// One message's frame: its metadata and where its body starts.
struct Frame<'a> {
    meta: &'a [u8],
    meta_start: usize,
    body_start: usize,
}

/// The frame at `at`, or `None` at the end of the stream (no bytes left, or a zero length).
fn next_frame(stream: &[u8], at: usize) -> Result<Option<Frame<'_>>> {
    let Some(rest) = stream.get(at..).filter(|r| !r.is_empty()) else {
        return Ok(None);
    };
    let word = |i: usize| {
        rest.get(i..i + 4)
            .and_then(|w| <[u8; 4]>::try_from(w).ok())
            .ok_or(Error::Truncated {
                field: field::ARROW_PREFIX,
                position: at + i,
                needed: i + 4,
                available: rest.len(),
            })
    };
    let first = word(0)?;
    let (len_at, raw) = if first == CONTINUATION {
        (4, i32::from_le_bytes(word(4)?))
    } else {
        (0, i32::from_le_bytes(first))
    };
    if raw == 0 {
        return Ok(None);
    }
    let len = usize::try_from(raw).map_err(|_| Error::BadLength {
        field: field::ARROW_PREFIX,
        position: at + len_at,
        value: i64::from(raw),
        reason: "Arrow metadata length must not be negative",
    })?;
    let meta_start = at + len_at + 4;
    let meta = stream
        .get(meta_start..)
        .and_then(|m| m.get(..len))
        .ok_or(Error::Truncated {
            field: field::ARROW_METADATA,
            position: meta_start,
            needed: len,
            available: stream.len().saturating_sub(meta_start),
        })?;
    Ok(Some(Frame {
        meta,
        meta_start,
        body_start: meta_start + len,
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use arrow_ipc::writer::StreamWriter;
    use arrow_schema::{DataType, Field, Schema, SchemaRef};

    use super::{decode_ipc_stream, ipc_stream_schema};
    use crate::Error;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("msg", DataType::Utf8, true),
        ]))
    }

    fn rows(from: i64, n: i64) -> RecordBatch {
        let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(from..from + n));
        let msgs: ArrayRef = Arc::new(StringArray::from_iter(
            (from..from + n).map(|i| (i % 2 == 0).then(|| format!("row {i}"))),
        ));
        RecordBatch::try_new(schema(), vec![ids, msgs]).unwrap()
    }

    fn stream(schema: &SchemaRef, batches: &[RecordBatch]) -> Vec<u8> {
        let mut writer = StreamWriter::try_new(Vec::new(), schema).unwrap();
        for b in batches {
            writer.write(b).unwrap();
        }
        writer.finish().unwrap();
        writer.into_inner().unwrap()
    }

    #[test]
    fn a_stream_decodes_to_its_batches() {
        let batches = [rows(0, 5), rows(5, 3)];
        let bytes = stream(&schema(), &batches);
        assert_eq!(ipc_stream_schema(&bytes).unwrap(), *schema());
        assert_eq!(
            decode_ipc_stream(&bytes, &schema(), 100, usize::MAX).unwrap(),
            batches
        );
        // Without the end-of-stream marker, the end of the bytes ends it.
        let unterminated = bytes.get(..bytes.len() - 8).unwrap();
        assert_eq!(
            decode_ipc_stream(unterminated, &schema(), 100, usize::MAX).unwrap(),
            batches
        );
    }

    #[test]
    fn rows_past_the_bound_are_refused_before_decoding() {
        let bytes = stream(&schema(), &[rows(0, 5), rows(5, 3)]);
        assert!(matches!(
            decode_ipc_stream(&bytes, &schema(), 7, usize::MAX),
            Err(Error::TooLarge {
                value: 8,
                max: 7,
                ..
            })
        ));
        assert_eq!(
            decode_ipc_stream(&bytes, &schema(), 8, usize::MAX)
                .unwrap()
                .len(),
            2
        );
    }

    /// The `id` column's values buffer is (offset 0, length 40) in the metadata: five i64s.
    fn values_buffer_at(bytes: &[u8]) -> usize {
        let mut pattern = 0i64.to_le_bytes().to_vec();
        pattern.extend_from_slice(&40i64.to_le_bytes());
        let at: Vec<usize> = bytes
            .windows(16)
            .enumerate()
            .filter(|(_, w)| *w == pattern.as_slice())
            .map(|(i, _)| i)
            .collect();
        assert_eq!(at.len(), 1, "one (0, 40) buffer entry");
        at[0]
    }

    #[test]
    fn a_buffer_past_the_body_is_an_error_not_a_panic() {
        let mut bytes = stream(&schema(), &[rows(0, 5)]);
        let at = values_buffer_at(&bytes);
        bytes[at..at + 8].copy_from_slice(&4096i64.to_le_bytes());
        let error = decode_ipc_stream(&bytes, &schema(), 100, usize::MAX).unwrap_err();
        assert!(
            error.to_string().contains("outside"),
            "unexpected error: {error}"
        );
    }

    #[test]
    fn a_batch_with_more_columns_than_the_schema_is_refused() {
        let bytes = stream(&schema(), &[rows(0, 5)]);
        let ids = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let error = decode_ipc_stream(&bytes, &ids, 100, usize::MAX).unwrap_err();
        assert!(
            error.to_string().contains("field nodes"),
            "unexpected error: {error}"
        );
    }

    #[test]
    fn truncated_and_foreign_bytes_are_errors() {
        let bytes = stream(&schema(), &[rows(0, 5)]);
        for cut in [0, 3, 7, 9, bytes.len() / 2, bytes.len() - 12] {
            let part = bytes.get(..cut).unwrap();
            assert!(
                decode_ipc_stream(part, &schema(), 100, usize::MAX).is_err(),
                "a stream cut at {cut} of {} decoded",
                bytes.len()
            );
        }
        assert!(ipc_stream_schema(b"").is_err());
        assert!(ipc_stream_schema(b"garbage!garbage!").is_err());
        // A record batch where the schema belongs.
        let batch_only = bytes.get(values_buffer_at(&bytes)..).unwrap();
        assert!(decode_ipc_stream(batch_only, &schema(), 100, usize::MAX).is_err());
    }

    #[test]
    fn no_single_byte_change_panics() {
        let bytes = stream(&schema(), &[rows(0, 5), rows(5, 2)]);
        let mut refused = 0;
        for at in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xFF] {
                let mut changed = bytes.clone();
                changed[at] ^= flip;
                let _ = ipc_stream_schema(&changed);
                match decode_ipc_stream(&changed, &schema(), 100, usize::MAX) {
                    // A change in a value's bytes still decodes, to the same shape.
                    Ok(batches) => {
                        assert!(batches.iter().all(|b| b.schema() == schema()));
                        assert!(batches.iter().map(RecordBatch::num_rows).sum::<usize>() <= 100);
                    }
                    Err(_) => refused += 1,
                }
            }
        }
        assert!(
            refused > bytes.len(),
            "most changes to framing and metadata are refused"
        );
    }
}
