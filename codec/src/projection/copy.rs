//! The projected Arrow message, written without decoding rows.
//!
//! An Arrow IPC record-batch message lists, in the schema's depth-first order, one field node per
//! array (a column and each of its nested children), the body ranges of their buffers (validity,
//! offsets, values, ... as `arrow_data::layout` names them; a view column's views then its variadic
//! data buffers) and, for view columns, how many variadic buffers each has. Projecting a batch keeps
//! the chosen top-level columns' runs of these lists, in the projection's order, and copies their
//! buffers into a new body, each at an 8-aligned offset; compressed buffers are copied as they
//! are (each carries its own uncompressed length) and the new message names the source's codec.
//! The source message is checked first as a
//! decode checks it ([`ipc::check_message`], [`ipc::walk_columns`]), so every range copied lies inside
//! the body and every index inside its list: hostile bytes give an error, not a panic.

use std::ops::Range;

use arrow_ipc::{
    BodyCompressionMethod, CompressionType, FieldNode, MessageHeader, MetadataVersion,
};
use arrow_schema::SchemaRef;
use flatbuffers::FlatBufferBuilder;

use crate::error::{Error, Result, field};
use crate::ipc::{self, ColumnSpan, MessageLayout};

/// Alignment of every buffer in the new body, as Arrow's writer pads them.
const BUFFER_ALIGN: usize = 8;

/// A projected message being built; its vectors and flatbuffer builder are reused between batches.
#[derive(Default)]
pub(super) struct MessageCopy {
    fbb: FlatBufferBuilder<'static>,
    spans: Vec<ColumnSpan>,
    nodes: Vec<FieldNode>,
    buffers: Vec<arrow_ipc::Buffer>,
    /// The source body range of each buffer in `buffers`.
    sources: Vec<Range<usize>>,
    variadic: Vec<i64>,
    body_len: usize,
}

impl std::fmt::Debug for MessageCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageCopy")
            .field("nodes", &self.nodes.len())
            .field("buffers", &self.buffers.len())
            .field("body_len", &self.body_len)
            .finish_non_exhaustive()
    }
}

impl MessageCopy {
    /// Checks the message of `batch` (at `position` in its buffer) against `schema` and plans the
    /// message of its `indices` columns: the flatbuffer is built, the body is left to [`write`].
    ///
    /// [`write`]: Self::write
    pub(super) fn plan(
        &mut self,
        batch: &[u8],
        position: usize,
        layout: &MessageLayout,
        record_count: i32,
        schema: &SchemaRef,
        indices: &[usize],
    ) -> Result<()> {
        let (version, rb) = ipc::check_message(batch, position, layout, record_count)?;
        let meta_pos = position + layout.meta_start;
        self.spans.clear();
        let body = batch.get(layout.body_start..).unwrap_or_default();
        ipc::walk_columns(&rb, body, schema, meta_pos, |span| self.spans.push(span))?;
        // Compressed buffers are copied as they are, so the new message names the same codec.
        let compression = rb.compression().map(|c| c.codec());
        // `check_message` made sure both lists exist; `walk_columns` that the spans cover them.
        let (Some(nodes), Some(buffers)) = (rb.nodes(), rb.buffers()) else {
            return Err(invalid(
                meta_pos,
                "the record batch lacks its node or buffer list",
            ));
        };
        let counts = rb.variadicBufferCounts();
        self.nodes.clear();
        self.buffers.clear();
        self.sources.clear();
        self.variadic.clear();
        self.body_len = 0;
        for index in indices {
            let span = self
                .spans
                .get(*index)
                .ok_or_else(|| invalid(meta_pos, "a projected column is not in the message"))?;
            self.nodes.extend(
                nodes
                    .iter()
                    .skip(span.nodes.start)
                    .take(span.nodes.len())
                    .map(|n| FieldNode::new(n.length(), n.null_count())),
            );
            for buffer in buffers
                .iter()
                .skip(span.buffers.start)
                .take(span.buffers.len())
            {
                // `check_message` made sure offset and length are non-negative and inside the body.
                let (Ok(offset), Ok(length)) = (
                    usize::try_from(buffer.offset()),
                    usize::try_from(buffer.length()),
                ) else {
                    return Err(invalid(
                        meta_pos,
                        "a buffer has a negative offset or length",
                    ));
                };
                let at = i64::try_from(self.body_len).map_err(|_| too_large(self.body_len))?;
                self.buffers
                    .push(arrow_ipc::Buffer::new(at, buffer.length()));
                self.sources.push(offset..offset + length);
                self.body_len = self
                    .body_len
                    .checked_add(length.next_multiple_of(BUFFER_ALIGN))
                    .ok_or_else(|| too_large(usize::MAX))?;
            }
            if let Some(counts) = counts {
                self.variadic.extend(
                    counts
                        .iter()
                        .skip(span.variadic.start)
                        .take(span.variadic.len()),
                );
            }
        }
        let body_len = i64::try_from(self.body_len).map_err(|_| too_large(self.body_len))?;
        self.build(version, rb.length(), body_len, compression);
        Ok(())
    }

    fn build(
        &mut self,
        version: MetadataVersion,
        length: i64,
        body_len: i64,
        compression: Option<CompressionType>,
    ) {
        let fbb = &mut self.fbb;
        fbb.reset();
        let compression = compression.map(|codec| {
            let mut body = arrow_ipc::BodyCompressionBuilder::new(fbb);
            body.add_codec(codec);
            body.add_method(BodyCompressionMethod::BUFFER);
            body.finish()
        });
        let nodes = fbb.create_vector(&self.nodes);
        let buffers = fbb.create_vector(&self.buffers);
        // Arrow's writer leaves the list out when no column has variadic buffers; so does this.
        let variadic = (!self.variadic.is_empty()).then(|| fbb.create_vector(&self.variadic));
        let mut batch = arrow_ipc::RecordBatchBuilder::new(fbb);
        batch.add_length(length);
        batch.add_nodes(nodes);
        batch.add_buffers(buffers);
        if let Some(variadic) = variadic {
            batch.add_variadicBufferCounts(variadic);
        }
        if let Some(compression) = compression {
            batch.add_compression(compression);
        }
        let batch = batch.finish();
        let mut message = arrow_ipc::MessageBuilder::new(fbb);
        message.add_version(version);
        message.add_header_type(MessageHeader::RecordBatch);
        message.add_bodyLength(body_len);
        message.add_header(batch.as_union_value());
        let message = message.finish();
        fbb.finish(message, None);
    }

    /// Appends the planned message to `out`, for the batch that starts at `batch_start` in `out`;
    /// `body` is the source message's body.
    pub(super) fn write(&self, body: &[u8], out: &mut Vec<u8>, batch_start: usize) -> Result<()> {
        ipc::write_message_head(out, batch_start, self.fbb.finished_data(), self.body_len)?;
        for range in &self.sources {
            let bytes = body.get(range.clone()).ok_or(Error::Truncated {
                field: field::ARROW_BODY,
                position: range.start,
                needed: range.len(),
                available: body.len().saturating_sub(range.start),
            })?;
            out.extend_from_slice(bytes);
            out.resize(
                out.len() + (BUFFER_ALIGN - bytes.len() % BUFFER_ALIGN) % BUFFER_ALIGN,
                0,
            );
        }
        Ok(())
    }
}

fn invalid(position: usize, reason: &str) -> Error {
    Error::InvalidArrowMessage {
        field: field::ARROW_METADATA,
        position,
        reason: reason.to_owned(),
    }
}

fn too_large(value: usize) -> Error {
    Error::TooLarge {
        what: "projected Arrow body",
        value,
        max: i64::MAX as usize,
    }
}
