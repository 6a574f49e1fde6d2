//! Writing a committed object (the format is in the parent module's documentation): the
//! builder, which cuts a stream's batches into blocks and adds the index and footer, in one
//! buffer or in parts whose large payloads are sent where they are (docs/write-copies.md).

use bytes::{BufMut, Bytes, BytesMut};

use mink_metadata::StreamRange;

use super::{BLOCK_HEADER_LEN, BlockEntry, FRAME_HEADER_LEN, OBJECT_MAGIC, OBJECT_VERSION, spans};
use crate::batch::{KnownBatch, StreamBatch};
use crate::format::crc;

/// Payloads of at least this many bytes whose CRC is known extend their block's CRC by
/// [`crc::combine`] instead of being read: below it, reading them costs less than combining.
pub const COMBINE_FROM: usize = 16 << 10;

/// What the builder needs of a batch: its offsets and its bytes.
pub trait FramedBatch {
    /// Offset of the batch's first record.
    fn base_offset(&self) -> u64;
    /// Offsets the batch covers (at least 1).
    fn count(&self) -> u32;
    /// The batch bytes.
    fn payload(&self) -> &[u8];
    /// The batch bytes as a buffer a builder in parts can send as they are, without a copy;
    /// `None` (the default) when the batch has none to share.
    fn shared_payload(&self) -> Option<Bytes> {
        None
    }
    /// The CRC32C of the payload when the caller knows it already, so that a block's CRC can be
    /// extended over the payload without reading it ([`crate::format::crc::combine`]); `None`
    /// (the default) when it must be computed. A wrong value makes the block fail its check on
    /// every read, so only a CRC computed or checked over these very bytes may be given.
    fn payload_crc(&self) -> Option<u32> {
        None
    }
    /// The offset after the batch.
    fn end_offset(&self) -> u64 {
        self.base_offset() + u64::from(self.count())
    }
}

impl FramedBatch for StreamBatch {
    fn base_offset(&self) -> u64 {
        self.base_offset
    }
    fn count(&self) -> u32 {
        self.count
    }
    fn payload(&self) -> &[u8] {
        &self.payload
    }
    fn shared_payload(&self) -> Option<Bytes> {
        Some(self.payload.clone())
    }
}

/// The batch as a [`StreamBatch`] is, with the CRC it carries.
impl FramedBatch for KnownBatch {
    fn base_offset(&self) -> u64 {
        self.batch.base_offset()
    }
    fn count(&self) -> u32 {
        self.batch.count()
    }
    fn payload(&self) -> &[u8] {
        self.batch.payload()
    }
    fn shared_payload(&self) -> Option<Bytes> {
        self.batch.shared_payload()
    }
    fn payload_crc(&self) -> Option<u32> {
        self.payload_crc
    }
}

/// Writes one committed object. Streams must be added in increasing id order, each stream's
/// batches contiguous and in offset order.
///
/// The object is built as parts (docs/write-copies.md): the bytes copied into the current
/// buffer, and, for a builder made with [`sharing`](Self::sharing), the payloads of large
/// batches as they are. [`finish`](Self::finish) and [`finish_with_section`](Self::finish_with_section)
/// give one buffer; [`finish_parts`](Self::finish_parts) the parts.
#[derive(Debug)]
pub struct ObjectBuilder {
    /// The bytes after the last part.
    buf: BytesMut,
    /// Parts before `buf`, in order.
    parts: Vec<Bytes>,
    /// Bytes in `parts`.
    parts_len: usize,
    /// Payloads of at least this many bytes become parts of their own (`usize::MAX`: none).
    share_from: usize,
    index: Vec<BlockEntry>,
    block_bytes: usize,
}

impl ObjectBuilder {
    /// A builder cutting blocks at about `block_bytes`.
    pub fn new(block_bytes: usize) -> Self {
        Self::with_capacity(block_bytes, 0)
    }

    /// A builder cutting blocks at about `block_bytes`, with room for `capacity` bytes.
    pub fn with_capacity(block_bytes: usize, capacity: usize) -> Self {
        ObjectBuilder {
            buf: BytesMut::with_capacity(capacity),
            parts: Vec::new(),
            parts_len: 0,
            share_from: usize::MAX,
            index: Vec::new(),
            block_bytes: block_bytes.max(1),
        }
    }

    /// A builder cutting blocks at about `block_bytes` that keeps the payloads of `share_from`
    /// bytes or more as parts of their own, when the batches share them
    /// ([`FramedBatch::shared_payload`]); `capacity` is the room for the rest.
    pub fn sharing(block_bytes: usize, share_from: usize, capacity: usize) -> Self {
        ObjectBuilder {
            share_from: share_from.max(1),
            ..Self::with_capacity(block_bytes, capacity)
        }
    }

    /// Where the next byte lands in the object.
    fn position(&self) -> usize {
        self.parts_len + self.buf.len()
    }

    /// Ends the current buffer as a part, then adds `part`.
    fn push_part(&mut self, part: Bytes) {
        if !self.buf.is_empty() {
            let copied = self.buf.split().freeze();
            self.parts_len += copied.len();
            self.parts.push(copied);
        }
        self.parts_len += part.len();
        self.parts.push(part);
    }

    /// Adds a stream's batches (contiguous, in order) as one or more blocks.
    pub fn add_stream<B: FramedBatch>(&mut self, stream_id: u64, batches: &[B]) {
        let mut rest = batches;
        while !rest.is_empty() {
            let mut take = 0;
            let mut bytes = 0;
            for batch in rest {
                let framed = FRAME_HEADER_LEN + batch.payload().len();
                if take > 0 && bytes + framed > self.block_bytes {
                    break;
                }
                bytes += framed;
                take += 1;
            }
            let (block, tail) = rest.split_at(take);
            self.add_block(stream_id, block, bytes);
            rest = tail;
        }
    }

    fn add_block<B: FramedBatch>(&mut self, stream_id: u64, batches: &[B], body_len: usize) {
        let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
            return;
        };
        let position = self.position();
        // The CRC first (the header, then every frame), so that the header is written whole:
        // its bytes may leave for a part before the block ends.
        let mut header = [0u8; BLOCK_HEADER_LEN];
        header[0..8].copy_from_slice(&stream_id.to_le_bytes());
        header[8..16].copy_from_slice(&first.base_offset().to_le_bytes());
        header[16..24].copy_from_slice(&last.end_offset().to_le_bytes());
        header[24..28].copy_from_slice(&u32::try_from(body_len).unwrap_or(u32::MAX).to_le_bytes());
        let mut crc = crc32c::crc32c(&header[..28]);
        for batch in batches {
            crc = crc32c::crc32c_append(crc, &frame_header(batch));
            let payload = batch.payload();
            crc = match batch.payload_crc() {
                Some(known) if payload.len() >= COMBINE_FROM => {
                    crc::combine(crc, known, payload.len() as u64)
                }
                _ => crc32c::crc32c_append(crc, payload),
            };
        }
        header[28..32].copy_from_slice(&crc.to_le_bytes());
        self.buf
            .reserve(BLOCK_HEADER_LEN + body_len.min(self.share_from));
        self.buf.put_slice(&header);
        for batch in batches {
            self.buf.put_slice(&frame_header(batch));
            match batch.shared_payload() {
                Some(payload) if payload.len() >= self.share_from => self.push_part(payload),
                _ => self.buf.put_slice(batch.payload()),
            }
        }
        self.index.push(BlockEntry {
            stream_id,
            start_offset: first.base_offset(),
            end_offset: last.end_offset(),
            position: position as u64,
            len: u32::try_from(self.position() - position).unwrap_or(u32::MAX),
            batch_count: u32::try_from(batches.len()).unwrap_or(u32::MAX),
        });
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Blocks so far.
    pub fn block_count(&self) -> usize {
        self.index.len()
    }

    /// Bytes of blocks so far.
    pub fn data_len(&self) -> usize {
        self.position()
    }

    /// Finishes the object: its bytes and the span of each stream, in stream order.
    pub fn finish(self) -> (Bytes, Vec<StreamRange>) {
        let (bytes, index) = self.finish_with_section(&[]);
        (bytes, spans(&index))
    }

    /// Finishes the object with `section` between the last block and the index (readers of
    /// committed objects never look there; the WAL keeps its own fields in it). Returns the
    /// bytes and the index.
    pub fn finish_with_section(self, section: &[u8]) -> (Bytes, Vec<BlockEntry>) {
        let (parts, index) = self.finish_parts(section);
        (crate::storage::join_parts(&parts), index)
    }

    /// Finishes the object with `section` between the last block and the index, as parts whose
    /// concatenation is the object. Returns the parts and the index.
    pub fn finish_parts(mut self, section: &[u8]) -> (Vec<Bytes>, Vec<BlockEntry>) {
        self.buf.put_slice(section);
        let index_position = self.position() as u64;
        let index_start = self.buf.len();
        for entry in &self.index {
            self.buf.put_u64_le(entry.stream_id);
            self.buf.put_u64_le(entry.start_offset);
            self.buf.put_u64_le(entry.end_offset);
            self.buf.put_u64_le(entry.position);
            self.buf.put_u32_le(entry.len);
            self.buf.put_u32_le(entry.batch_count);
        }
        let index_len = self.buf.len() - index_start;
        let index_crc = crc32c::crc32c(&self.buf[index_start..]);
        self.buf.put_u64_le(index_position);
        self.buf
            .put_u32_le(u32::try_from(index_len).unwrap_or(u32::MAX));
        self.buf.put_u32_le(index_crc);
        self.buf.put_u16_le(OBJECT_VERSION);
        self.buf.put_u16_le(0);
        self.buf.put_slice(&OBJECT_MAGIC);
        let last = self.buf.split().freeze();
        self.push_part(last);
        (self.parts, self.index)
    }
}

/// The bytes a builder in parts copies of `batches`, payloads of `share_from` bytes or more
/// left out (their frame headers are copied): the room to give [`ObjectBuilder::sharing`].
pub fn copied_bytes<'a, B: FramedBatch + 'a>(
    batches: impl IntoIterator<Item = &'a B>,
    share_from: usize,
) -> usize {
    batches
        .into_iter()
        .map(|b| {
            let len = b.payload().len();
            FRAME_HEADER_LEN + if len >= share_from { 0 } else { len }
        })
        .sum()
}

/// A batch's frame header: base offset, count, payload length.
fn frame_header<B: FramedBatch>(batch: &B) -> [u8; FRAME_HEADER_LEN] {
    let mut header = [0u8; FRAME_HEADER_LEN];
    header[0..8].copy_from_slice(&batch.base_offset().to_le_bytes());
    header[8..12].copy_from_slice(&batch.count().to_le_bytes());
    header[12..16].copy_from_slice(
        &u32::try_from(batch.payload().len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    header
}
