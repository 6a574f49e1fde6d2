//! The Arrow IPC message inside a batch: locating it, checking its flatbuffer metadata against the body
//! before Arrow reads it, encoding it, and decoding rows from it.
//!
//! The message is framed as in the Arrow streaming format: a 0xFFFFFFFF continuation marker, an i32
//! metadata length, the flatbuffer `Message` (padded), then the body. Mink's writer pads the metadata so
//! that the body starts at a multiple of 8 bytes from the batch start, which lets Arrow use the body
//! without copying when the batch itself is 8-aligned in memory; readers do not rely on it.
//!
//! Arrow's reader slices buffers straight from the offsets in the metadata and would panic on an offset
//! past the body, so [`check_message`] checks every buffer range, node length and variadic count first.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_ipc::MetadataVersion;
use arrow_ipc::reader::RecordBatchDecoder;
use arrow_schema::{DataType, Field, SchemaRef};

use crate::compression;
use crate::error::field;
use crate::error::{Error, Result};

/// The IPC continuation marker that starts every message.
pub(crate) const CONTINUATION: [u8; 4] = [0xFF; 4];
/// Bytes before the flatbuffer metadata: continuation marker and metadata length.
pub(crate) const PREFIX_LEN: usize = 8;
/// Alignment of the body relative to the batch start.
pub(crate) const BODY_ALIGN: usize = 8;

/// Where the parts of a batch's Arrow message lie, relative to the batch start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MessageLayout {
    /// First byte of the flatbuffer metadata.
    pub(crate) meta_start: usize,
    /// Metadata length including padding.
    pub(crate) meta_len: usize,
    /// First byte of the body.
    pub(crate) body_start: usize,
    /// Body length.
    pub(crate) body_len: usize,
}

impl MessageLayout {
    pub(crate) fn meta<'a>(&self, batch: &'a [u8]) -> &'a [u8] {
        batch
            .get(self.meta_start..self.meta_start + self.meta_len)
            .unwrap_or(&[])
    }
}

/// Reads the message prefix at `start` in `batch` (whose absolute position is `base`) and returns the
/// message layout. The caller has already established that the message exists (`start < batch.len()`).
pub(crate) fn locate(batch: &[u8], base: usize, start: usize) -> Result<MessageLayout> {
    let available = batch.len().saturating_sub(start);
    let prefix = batch
        .get(start..start + PREFIX_LEN)
        .ok_or(Error::Truncated {
            field: field::ARROW_PREFIX,
            position: base + start,
            needed: PREFIX_LEN,
            available,
        })?;
    let (marker, len) = prefix.split_at(4);
    if marker != CONTINUATION {
        return Err(Error::InvalidArrowMessage {
            field: field::ARROW_PREFIX,
            position: base + start,
            reason: format!("expected the continuation marker ff ff ff ff, found {marker:02x?}"),
        });
    }
    let meta_len_raw = i32::from_le_bytes(<[u8; 4]>::try_from(len).unwrap_or([0; 4]));
    let meta_len = usize::try_from(meta_len_raw)
        .ok()
        .filter(|l| *l > 0)
        .ok_or(Error::BadLength {
            field: field::ARROW_PREFIX,
            position: base + start + 4,
            value: i64::from(meta_len_raw),
            reason: "Arrow metadata length must be positive",
        })?;
    let meta_start = start + PREFIX_LEN;
    let meta_available = batch.len().saturating_sub(meta_start);
    if meta_len > meta_available {
        return Err(Error::Truncated {
            field: field::ARROW_METADATA,
            position: base + meta_start,
            needed: meta_len,
            available: meta_available,
        });
    }
    let body_start = meta_start + meta_len;
    Ok(MessageLayout {
        meta_start,
        meta_len,
        body_start,
        body_len: batch.len() - body_start,
    })
}

/// Verifies the flatbuffer metadata and checks it against the body and the header's row count.
/// Returns the metadata version and the flatbuffer record batch, both safe to hand to Arrow's decoder.
pub(crate) fn check_message<'a>(
    batch: &'a [u8],
    base: usize,
    layout: &MessageLayout,
    record_count: i32,
) -> Result<(MetadataVersion, arrow_ipc::RecordBatch<'a>)> {
    let meta_pos = base + layout.meta_start;
    let invalid = |reason: String| Error::InvalidArrowMessage {
        field: field::ARROW_METADATA,
        position: meta_pos,
        reason,
    };
    let message = arrow_ipc::root_as_message(layout.meta(batch))
        .map_err(|e| invalid(format!("flatbuffer does not verify: {e}")))?;
    let version = message.version();
    if version != MetadataVersion::V4 && version != MetadataVersion::V5 {
        return Err(invalid(format!(
            "metadata version {version:?} is not supported (V4 or V5)"
        )));
    }
    let rb = message.header_as_record_batch().ok_or_else(|| {
        invalid(format!(
            "expected a RecordBatch message, found header type {:?}",
            message.header_type()
        ))
    })?;

    let body_pos = base + layout.body_start;
    let declared = message.bodyLength();
    let body_len = usize::try_from(declared).map_err(|_| Error::BadLength {
        field: field::ARROW_METADATA,
        position: meta_pos,
        value: declared,
        reason: "negative Arrow body length",
    })?;
    if body_len > layout.body_len {
        return Err(Error::Truncated {
            field: field::ARROW_BODY,
            position: body_pos,
            needed: body_len,
            available: layout.body_len,
        });
    }
    if body_len < layout.body_len {
        return Err(Error::BadLength {
            field: field::ARROW_BODY,
            position: body_pos,
            value: i64::try_from(layout.body_len).unwrap_or(i64::MAX),
            reason: "bytes left over after the Arrow body the metadata declares",
        });
    }

    if rb.length() != i64::from(record_count) {
        return Err(Error::CountMismatch {
            field: field::ARROW_LENGTH,
            position: meta_pos,
            expected: i64::from(record_count),
            actual: rb.length(),
        });
    }
    let body = batch.get(layout.body_start..).unwrap_or_default();
    check_record_batch(&rb, body, body_pos, invalid)?;
    Ok((version, rb))
}

/// Checks a flatbuffer record batch against its `body` (exactly the length the message declares,
/// at `body_pos` for errors): every buffer inside the body, every field node's length and null
/// count in range, the variadic buffer counts within the buffer list, and for a compressed body
/// its codec and every buffer's uncompressed length ([`compression::check_buffers`]). Arrow's
/// decoder slices buffers straight from these numbers. Returns the body's length once
/// decompressed (its length when it is not compressed).
pub(crate) fn check_record_batch(
    rb: &arrow_ipc::RecordBatch<'_>,
    body: &[u8],
    body_pos: usize,
    invalid: impl Fn(String) -> Error,
) -> Result<usize> {
    let declared = i64::try_from(body.len()).unwrap_or(i64::MAX);
    let codec = compression::of_batch(rb, &invalid)?;
    let buffers = rb
        .buffers()
        .ok_or_else(|| invalid("the record batch has no buffer list".into()))?;
    for (i, buffer) in buffers.iter().enumerate() {
        let (offset, length) = (buffer.offset(), buffer.length());
        let end = offset.checked_add(length);
        let fits = offset >= 0 && length >= 0 && end.is_some_and(|end| end <= declared);
        if !fits {
            return Err(invalid(format!(
                "buffer {i} at body offset {offset} with length {length} lies outside the {declared}-byte body"
            )));
        }
    }
    let nodes = rb
        .nodes()
        .ok_or_else(|| invalid("the record batch has no field-node list".into()))?;
    for (i, node) in nodes.iter().enumerate() {
        let (length, nulls) = (node.length(), node.null_count());
        if !(0..=i64::from(i32::MAX)).contains(&length) || !(0..=length).contains(&nulls) {
            return Err(invalid(format!(
                "field node {i} has length {length} and null count {nulls}"
            )));
        }
    }
    if let Some(counts) = rb.variadicBufferCounts() {
        let mut total: i64 = 0;
        for count in counts.iter() {
            total = total.saturating_add(count);
            let too_many = usize::try_from(total).map_or(true, |t| t > buffers.len());
            if count < 0 || too_many {
                return Err(invalid(format!(
                    "variadic buffer count {count} does not fit the {} buffers",
                    buffers.len()
                )));
            }
        }
    }
    match codec {
        Some(_) => compression::check_buffers(rb, body, body_pos),
        None => Ok(body.len()),
    }
}

/// Decodes the rows of a checked message. `body` is the body as an Arrow buffer (zero-copy when it came
/// from `bytes::Bytes`). With a projection, only the projected columns are built.
pub(crate) fn decode_rows(
    body: &arrow_buffer::Buffer,
    base: usize,
    layout: &MessageLayout,
    version: MetadataVersion,
    rb: arrow_ipc::RecordBatch<'_>,
    schema: &SchemaRef,
    projection: Option<&[usize]>,
) -> Result<RecordBatch> {
    let dictionaries: HashMap<i64, ArrayRef> = HashMap::new();
    let arrow = |source| Error::Arrow {
        field: field::ARROW_BODY,
        position: base + layout.body_start,
        source,
    };
    check_buffer_widths(&rb, body.as_slice(), schema, base + layout.meta_start)?;
    RecordBatchDecoder::try_new(body, rb, Arc::clone(schema), &dictionaries, &version)
        .map_err(arrow)?
        .with_projection(projection)
        .with_require_alignment(false)
        .read_record_batch()
        .map_err(arrow)
}

/// Rejects column types the batch format cannot carry: dictionaries (no dictionary messages), unions and
/// run-end encoding (not supported by the codec's pre-checks).
pub(crate) fn check_schema_fields<'a>(
    fields: impl IntoIterator<Item = &'a Arc<Field>>,
) -> Result<()> {
    for f in fields {
        check_type(f.name(), f.data_type())?;
    }
    Ok(())
}

fn check_type(name: &str, data_type: &DataType) -> Result<()> {
    match data_type {
        DataType::Dictionary(..) | DataType::Union(..) | DataType::RunEndEncoded(..) => {
            Err(Error::UnsupportedType {
                column: name.to_owned(),
                data_type: data_type.clone(),
            })
        }
        DataType::FixedSizeBinary(size) | DataType::FixedSizeList(_, size) if *size < 0 => {
            Err(Error::UnsupportedType {
                column: name.to_owned(),
                data_type: data_type.clone(),
            })
        }
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => check_type(name, f.data_type()),
        DataType::Struct(fields) => check_schema_fields(fields.iter()),
        _ => Ok(()),
    }
}

/// Appends an IPC message (prefix, metadata, padding, body) to `out`, padding the metadata so the body
/// starts at a multiple of [`BODY_ALIGN`] from `batch_start`.
pub(crate) fn write_message(
    out: &mut Vec<u8>,
    batch_start: usize,
    meta: &[u8],
    body: &[u8],
) -> Result<()> {
    write_message_head(out, batch_start, meta, body.len())?;
    out.extend_from_slice(body);
    Ok(())
}

/// Appends an IPC message's prefix, metadata and padding to `out` (the body, `body_len` bytes, is the
/// caller's to append next), padding the metadata so the body starts at a multiple of [`BODY_ALIGN`]
/// from `batch_start`.
pub(crate) fn write_message_head(
    out: &mut Vec<u8>,
    batch_start: usize,
    meta: &[u8],
    body_len: usize,
) -> Result<()> {
    let meta_start = out.len() - batch_start + PREFIX_LEN;
    let unpadded_end = meta_start + meta.len();
    let padding = (BODY_ALIGN - unpadded_end % BODY_ALIGN) % BODY_ALIGN;
    let meta_len = meta.len() + padding;
    let meta_len_i32 = i32::try_from(meta_len).map_err(|_| Error::TooLarge {
        what: "Arrow metadata",
        value: meta_len,
        max: i32::MAX as usize,
    })?;
    out.reserve(PREFIX_LEN + meta_len + body_len);
    out.extend_from_slice(&CONTINUATION);
    out.extend_from_slice(&meta_len_i32.to_le_bytes());
    out.extend_from_slice(meta);
    out.resize(out.len() + padding, 0);
    Ok(())
}

/// Walks the schema alongside the message's buffer list, in IPC order, and checks that every
/// fixed-width buffer (offsets, values) holds a whole number of elements. Arrow's validation reads such
/// buffers as typed slices and panics on a ragged length instead of returning an error.
pub(crate) fn check_buffer_widths(
    rb: &arrow_ipc::RecordBatch<'_>,
    body: &[u8],
    schema: &SchemaRef,
    position: usize,
) -> Result<()> {
    walk_columns(rb, body, schema, position, |_| {})
}

/// Where one top-level column lies in a message's lists, as index ranges: its field nodes (its own,
/// then its nested children's, depth first), its buffers and its variadic buffer counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ColumnSpan {
    pub(crate) nodes: Range<usize>,
    pub(crate) buffers: Range<usize>,
    pub(crate) variadic: Range<usize>,
}

/// The checks of [`check_buffer_widths`], handing each top-level column's [`ColumnSpan`] to
/// `column` in schema order. On success the spans cover the message's lists exactly, so every index
/// in them is in range. `body` is the message's body, whose buffers' uncompressed lengths are
/// the ones checked when it is compressed (checked by [`check_record_batch`] first).
pub(crate) fn walk_columns(
    rb: &arrow_ipc::RecordBatch<'_>,
    body: &[u8],
    schema: &SchemaRef,
    position: usize,
    mut column: impl FnMut(ColumnSpan),
) -> Result<()> {
    let mut walk = BufferWalk {
        rb,
        body,
        compressed: rb.compression().is_some(),
        next: 0,
        variadic: 0,
        nodes: 0,
        position,
    };
    for f in schema.fields() {
        let (nodes, buffers, variadic) = (walk.nodes, walk.next, walk.variadic);
        walk.field(f.data_type())?;
        column(ColumnSpan {
            nodes: nodes..walk.nodes,
            buffers: buffers..walk.next,
            variadic: variadic..walk.variadic,
        });
    }
    // Arrow's decoder reads what the schema names and ignores the rest, so a batch carrying more
    // columns than its schema would decode; it is not one a writer of that schema made.
    let buffers = rb.buffers().map_or(0, |b| b.len());
    let nodes = rb.nodes().map_or(0, |n| n.len());
    let variadic = rb.variadicBufferCounts().map_or(0, |c| c.len());
    if (walk.next, walk.nodes, walk.variadic) != (buffers, nodes, variadic) {
        return Err(walk.invalid(format!(
            "the message holds {nodes} field nodes and {buffers} buffers ({variadic} variadic counts); \
             the schema's {} columns take {} and {} ({})",
            schema.fields().len(),
            walk.nodes,
            walk.next,
            walk.variadic
        )));
    }
    Ok(())
}

struct BufferWalk<'r, 'a> {
    rb: &'r arrow_ipc::RecordBatch<'a>,
    body: &'r [u8],
    /// Whether the buffers are compressed: their widths are checked once decompressed.
    compressed: bool,
    next: usize,
    variadic: usize,
    /// Field nodes taken so far: one per column and per nested child.
    nodes: usize,
    position: usize,
}

impl BufferWalk<'_, '_> {
    fn invalid(&self, reason: String) -> Error {
        Error::InvalidArrowMessage {
            field: field::ARROW_METADATA,
            position: self.position,
            reason,
        }
    }

    /// Takes the next buffer and checks its length is a multiple of `width`.
    fn take(&mut self, width: usize, data_type: &DataType) -> Result<()> {
        let index = self.next;
        let buffer = self
            .rb
            .buffers()
            .filter(|b| index < b.len())
            .map(|b| b.get(index))
            .ok_or_else(|| {
                self.invalid(format!(
                    "too few buffers for the schema: column of type {data_type} needs buffer {index}"
                ))
            })?;
        self.next += 1;
        let length = if self.compressed {
            let (Ok(offset), Ok(length)) = (
                usize::try_from(buffer.offset()),
                usize::try_from(buffer.length()),
            ) else {
                return Err(self.invalid(format!("buffer {index} has a negative range")));
            };
            let length = compression::uncompressed_len(self.body, 0, offset, length)?;
            i64::try_from(length).unwrap_or(i64::MAX)
        } else {
            buffer.length()
        };
        let ragged = u64::try_from(length)
            .ok()
            .zip(u64::try_from(width).ok())
            .is_none_or(|(l, w)| w > 1 && l % w != 0);
        if ragged {
            return Err(self.invalid(format!(
                "buffer {index} of a {data_type} column is {length} bytes, not a multiple of {width}"
            )));
        }
        Ok(())
    }

    fn field(&mut self, data_type: &DataType) -> Result<()> {
        self.nodes += 1;
        if matches!(data_type, DataType::Null) {
            return Ok(());
        }
        self.take(1, data_type)?; // validity bitmap
        match data_type {
            DataType::FixedSizeBinary(_) => self.take(1, data_type)?,
            DataType::Utf8View | DataType::BinaryView => {
                self.take(16, data_type)?;
                let index = self.variadic;
                let count = self
                    .rb
                    .variadicBufferCounts()
                    .filter(|c| index < c.len())
                    .map(|c| c.get(index))
                    .ok_or_else(|| {
                        self.invalid(format!(
                            "missing variadic buffer count for a {data_type} column"
                        ))
                    })?;
                self.variadic += 1;
                for _ in 0..count {
                    self.take(1, data_type)?;
                }
            }
            _ => {
                for spec in arrow_data::layout(data_type).buffers {
                    let width = match spec {
                        arrow_data::BufferSpec::FixedWidth { byte_width, .. } => byte_width,
                        _ => 1,
                    };
                    self.take(width, data_type)?;
                }
            }
        }
        match data_type {
            DataType::List(f)
            | DataType::LargeList(f)
            | DataType::ListView(f)
            | DataType::LargeListView(f)
            | DataType::FixedSizeList(f, _)
            | DataType::Map(f, _) => self.field(f.data_type()),
            DataType::Struct(fields) => fields.iter().try_for_each(|f| self.field(f.data_type())),
            _ => Ok(()),
        }
    }
}
