//! Zero-copy views over buffers of batches: framing, header checks, full validation and decoding.
//!
//! [`batches`] walks a buffer holding any number of batches back to back and yields a [`BatchView`] per
//! batch, or one error (and then nothing) at the first batch whose framing is broken. A view borrows (or,
//! over [`bytes::Bytes`], shares) the batch bytes: nothing is copied until [`BatchView::decode`], which
//! hands the Arrow body to Arrow without a copy when the buffer is `Bytes`.
//!
//! Checks come in two weights. [`BatchView::check_header`] is the append path's check: magic, CRC,
//! attributes, counts and the change-type vector, with no Arrow parsing. [`BatchView::validate`] adds the
//! Arrow message's framing and flatbuffer metadata (row count, buffer ranges), without building arrays.
//! [`BatchView::decode`] builds and validates the Arrow arrays.

use std::ops::Range;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;

use crate::change::ChangeType;
use crate::compression::Compression;
use crate::error::{Error, Result, field};
use crate::header::{
    ATTR_APPEND_ONLY, ATTR_RECORD_SEQUENCE, CRC_START, HEADER_LEN, Header, LENGTH_PREFIX, MAGIC,
    pos,
};
use crate::ipc::{self, CONTINUATION, MessageLayout};

/// A byte container a [`BatchView`] can sit on: `&[u8]` (decoding copies the Arrow body) or
/// [`bytes::Bytes`] (decoding shares it).
pub trait BatchBuf: AsRef<[u8]> + Clone {
    /// A sub-range of the buffer; an out-of-range request yields an empty buffer.
    fn slice_range(&self, range: Range<usize>) -> Self;
    /// The bytes as an Arrow buffer.
    fn to_arrow_buffer(&self) -> arrow_buffer::Buffer;
}

impl BatchBuf for &[u8] {
    fn slice_range(&self, range: Range<usize>) -> Self {
        self.get(range).unwrap_or(&[])
    }

    fn to_arrow_buffer(&self) -> arrow_buffer::Buffer {
        arrow_buffer::Buffer::from(*self)
    }
}

impl BatchBuf for Bytes {
    fn slice_range(&self, range: Range<usize>) -> Self {
        if range.start <= range.end && range.end <= self.len() {
            self.slice(range)
        } else {
            Bytes::new()
        }
    }

    fn to_arrow_buffer(&self) -> arrow_buffer::Buffer {
        arrow_buffer::Buffer::from(self.clone())
    }
}

/// Iterates over the batches in `buf`, which holds zero or more batches back to back.
pub fn batches<B: BatchBuf>(buf: B) -> Batches<B> {
    Batches {
        buf,
        pos: 0,
        done: false,
    }
}

/// Iterator over the batches of a buffer; see [`batches`]. Yields an error at the first batch whose
/// framing (length field) is broken, then stops. Per-batch content checks are the caller's:
/// [`BatchView::check_header`], [`BatchView::validate`].
#[derive(Debug, Clone)]
pub struct Batches<B> {
    buf: B,
    pos: usize,
    done: bool,
}

impl<B: BatchBuf> Batches<B> {
    /// Byte position of the next batch in the buffer.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl<B: BatchBuf> Iterator for Batches<B> {
    type Item = Result<BatchView<B>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let bytes = self.buf.as_ref();
        if self.pos >= bytes.len() {
            self.done = true;
            return None;
        }
        match frame(bytes, self.pos) {
            Ok((len, header)) => {
                let view = BatchView {
                    buf: self.buf.slice_range(self.pos..self.pos + len),
                    position: self.pos,
                    header,
                };
                self.pos += len;
                Some(Ok(view))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl<B: BatchBuf> std::iter::FusedIterator for Batches<B> {}

/// Reads the header at `at` and checks that the batch's declared length fits `buf`.
fn frame(buf: &[u8], at: usize) -> Result<(usize, Header)> {
    let available = buf.len().saturating_sub(at);
    let length_pos = at + pos::LENGTH;
    let raw_len = buf
        .get(length_pos..length_pos + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map(i32::from_le_bytes);
    let Some(raw_len) = raw_len else {
        return Err(Error::Truncated {
            field: field::HEADER,
            position: at,
            needed: HEADER_LEN,
            available,
        });
    };
    let length = usize::try_from(raw_len)
        .ok()
        .filter(|l| *l >= HEADER_LEN - LENGTH_PREFIX)
        .ok_or(Error::BadLength {
            field: field::LENGTH,
            position: length_pos,
            value: i64::from(raw_len),
            reason: "shorter than the 52-byte header",
        })?;
    let after_length = available - LENGTH_PREFIX;
    if length > after_length {
        return Err(Error::Truncated {
            field: field::LENGTH,
            position: length_pos,
            needed: length,
            available: after_length,
        });
    }
    let header_bytes = buf
        .get(at..at + HEADER_LEN)
        .and_then(|s| <&[u8; HEADER_LEN]>::try_from(s).ok())
        .ok_or(Error::Truncated {
            field: field::HEADER,
            position: at,
            needed: HEADER_LEN,
            available,
        })?;
    Ok((LENGTH_PREFIX + length, Header::from_bytes(header_bytes)))
}

/// A view of one batch: its bytes (exactly the batch) and its position in the buffer it came from.
#[derive(Debug, Clone)]
pub struct BatchView<B> {
    buf: B,
    position: usize,
    header: Header,
}

impl<B: BatchBuf> BatchView<B> {
    /// A view over a buffer holding exactly one batch (position 0). Checks the framing only.
    pub fn new(buf: B) -> Result<Self> {
        let bytes = buf.as_ref();
        let (len, header) = frame(bytes, 0)?;
        if len != bytes.len() {
            return Err(Error::BadLength {
                field: field::LENGTH,
                position: pos::LENGTH,
                value: i64::from(header.length),
                reason: "the buffer holds bytes after the batch",
            });
        }
        Ok(BatchView {
            buf,
            position: 0,
            header,
        })
    }

    /// The batch bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// The underlying buffer (exactly this batch's bytes).
    pub fn buf(&self) -> &B {
        &self.buf
    }

    /// Gives back the underlying buffer.
    pub fn into_inner(self) -> B {
        self.buf
    }

    /// Byte position of the batch in the buffer it was read from.
    pub fn position(&self) -> usize {
        self.position
    }

    /// All header fields.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Size of the batch in bytes.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// Always false: a batch holds at least its header.
    pub fn is_empty(&self) -> bool {
        self.as_bytes().is_empty()
    }

    /// Offset of the first row.
    pub fn base_offset(&self) -> i64 {
        self.header.base_offset
    }
    /// Bytes after the `length` field.
    pub fn length(&self) -> i32 {
        self.header.length
    }
    /// Format version byte.
    pub fn magic(&self) -> u8 {
        self.header.magic
    }
    /// Commit time, milliseconds.
    pub fn commit_timestamp(&self) -> i64 {
        self.header.commit_timestamp
    }
    /// Bucket leader epoch.
    pub fn leader_epoch(&self) -> i32 {
        self.header.leader_epoch
    }
    /// Stored CRC32C.
    pub fn crc(&self) -> u32 {
        self.header.crc
    }
    /// Schema version of the rows.
    pub fn schema_id(&self) -> i16 {
        self.header.schema_id
    }
    /// Attribute bits.
    pub fn attributes(&self) -> u8 {
        self.header.attributes
    }
    /// Whether the batch is append-only (no change-type vector).
    pub fn is_append_only(&self) -> bool {
        self.header.is_append_only()
    }
    /// `record_count - 1`.
    pub fn last_offset_delta(&self) -> i32 {
        self.header.last_offset_delta
    }
    /// Idempotent writer identity (the `writer_id` field: id and epoch), or -1.
    pub fn writer_id(&self) -> i64 {
        self.header.writer_id
    }
    /// Whether the writer's sequence counts records (attribute bit 1).
    pub fn counts_records(&self) -> bool {
        self.header.counts_records()
    }
    /// Idempotent writer sequence, or -1.
    pub fn batch_sequence(&self) -> i32 {
        self.header.batch_sequence
    }
    /// Rows in the batch.
    pub fn record_count(&self) -> i32 {
        self.header.record_count
    }
    /// Offset after the batch: `base_offset + record_count`.
    pub fn next_offset(&self) -> i64 {
        self.header.next_offset()
    }

    /// The raw change-type vector (`None` for append-only batches). Only meaningful after
    /// [`check_header`](Self::check_header) succeeded; empty if the vector does not fit.
    pub fn change_type_bytes(&self) -> Option<&[u8]> {
        if self.is_append_only() {
            return None;
        }
        let rows = usize::try_from(self.record_count()).unwrap_or(0);
        Some(
            self.as_bytes()
                .get(HEADER_LEN..HEADER_LEN + rows)
                .unwrap_or(&[]),
        )
    }

    /// The change types (`None` for append-only batches). Only meaningful after
    /// [`check_header`](Self::check_header) succeeded; invalid bytes are skipped.
    pub fn change_types(&self) -> Option<impl Iterator<Item = ChangeType> + '_> {
        self.change_type_bytes()
            .map(|b| b.iter().filter_map(|b| ChangeType::from_byte(*b)))
    }

    fn at(&self, relative: usize) -> usize {
        self.position + relative
    }

    /// The cheap check the append path runs: magic, CRC, attributes, `record_count` ==
    /// `last_offset_delta + 1`, and the change-type vector (fits, bytes 0..=4). Does not look at the
    /// Arrow message.
    pub fn check_header(&self) -> Result<()> {
        self.check_magic()?;
        let h = &self.header;
        let actual = crc32c::crc32c(self.as_bytes().get(CRC_START..).unwrap_or(&[]));
        if actual != h.crc {
            return Err(Error::CrcMismatch {
                position: self.at(pos::CRC),
                expected: h.crc,
                actual,
            });
        }
        self.check_header_fields()
    }

    /// [`check_header`](Self::check_header) without the CRC, for bytes whose integrity was
    /// checked where they came from (the storage layer checks a CRC over every block it reads):
    /// what a reader must still check before it relies on the header's counts and vectors.
    pub fn check_header_trusting_crc(&self) -> Result<()> {
        self.check_magic()?;
        self.check_header_fields()
    }

    fn check_magic(&self) -> Result<()> {
        let h = &self.header;
        if h.magic != MAGIC {
            return Err(Error::BadMagic {
                position: self.at(pos::MAGIC),
                found: h.magic,
                expected: MAGIC,
            });
        }
        Ok(())
    }

    /// Attributes, counts and the change-type vector.
    fn check_header_fields(&self) -> Result<()> {
        let h = &self.header;
        let bytes = self.as_bytes();
        let known = if h.writer_id >= 0 {
            ATTR_APPEND_ONLY | ATTR_RECORD_SEQUENCE
        } else {
            ATTR_APPEND_ONLY
        };
        if h.attributes & !known != 0 {
            return Err(Error::BadAttributes {
                position: self.at(pos::ATTRIBUTES),
                value: h.attributes,
            });
        }
        let rows = usize::try_from(h.record_count).map_err(|_| Error::CountMismatch {
            field: field::RECORD_COUNT,
            position: self.at(pos::RECORD_COUNT),
            expected: 0,
            actual: i64::from(h.record_count),
        })?;
        if i64::from(h.last_offset_delta) + 1 != i64::from(h.record_count) {
            return Err(Error::CountMismatch {
                field: field::LAST_OFFSET_DELTA,
                position: self.at(pos::LAST_OFFSET_DELTA),
                expected: i64::from(h.record_count) - 1,
                actual: i64::from(h.last_offset_delta),
            });
        }
        if !self.is_append_only() {
            self.check_change_types(bytes, rows)?;
        }
        Ok(())
    }

    fn check_change_types(&self, bytes: &[u8], rows: usize) -> Result<()> {
        let available = bytes.len() - HEADER_LEN;
        let vector = bytes
            .get(HEADER_LEN..HEADER_LEN + rows)
            .ok_or(Error::Truncated {
                field: field::CHANGE_TYPES,
                position: self.at(HEADER_LEN),
                needed: rows,
                available,
            })?;
        if vector.iter().all(|b| *b <= ChangeType::Delete.to_byte()) {
            return Ok(());
        }
        let bad = vector
            .iter()
            .position(|b| ChangeType::from_byte(*b).is_none());
        let Some(i) = bad else { return Ok(()) };
        // A vector shorter than record_count runs into the Arrow message's continuation marker: say so
        // rather than blaming the marker byte.
        let run_into_message = bytes
            .get(HEADER_LEN + i..HEADER_LEN + i + CONTINUATION.len())
            .is_some_and(|m| m == CONTINUATION);
        if run_into_message {
            return Err(Error::CountMismatch {
                field: field::CHANGE_TYPES,
                position: self.at(HEADER_LEN),
                expected: i64::from(self.record_count()),
                actual: i64::try_from(i).unwrap_or(i64::MAX),
            });
        }
        Err(Error::BadChangeType {
            position: self.at(HEADER_LEN + i),
            value: vector.get(i).copied().unwrap_or(0),
        })
    }

    /// Start of the Arrow message relative to the batch start.
    fn message_start(&self) -> usize {
        let rows = usize::try_from(self.record_count()).unwrap_or(0);
        if self.is_append_only() {
            HEADER_LEN
        } else {
            HEADER_LEN + rows
        }
    }

    /// Locates the Arrow message; `None` for a header-only zero-row batch. Call after `check_header`.
    pub(crate) fn message(&self) -> Result<Option<MessageLayout>> {
        let bytes = self.as_bytes();
        let start = self.message_start();
        if start >= bytes.len() {
            if self.record_count() == 0 {
                return Ok(None);
            }
            return Err(Error::Truncated {
                field: field::ARROW_PREFIX,
                position: self.at(start),
                needed: ipc::PREFIX_LEN,
                available: 0,
            });
        }
        ipc::locate(bytes, self.position, start)
            .map(Some)
            .map_err(|e| self.diagnose_long_vector(bytes, start).unwrap_or(e))
    }

    /// If the Arrow message starts later than `record_count` says, with only change-type bytes in
    /// between, the change-type vector is longer than the row count.
    fn diagnose_long_vector(&self, bytes: &[u8], start: usize) -> Option<Error> {
        if self.is_append_only() {
            return None;
        }
        let rest = bytes.get(start..)?;
        let extra = rest
            .iter()
            .position(|b| ChangeType::from_byte(*b).is_none())?;
        let marker = rest.get(extra..extra + CONTINUATION.len())?;
        (extra > 0 && marker == CONTINUATION).then(|| Error::CountMismatch {
            field: field::CHANGE_TYPES,
            position: self.at(HEADER_LEN),
            expected: i64::from(self.record_count()),
            actual: i64::from(self.record_count()) + i64::try_from(extra).unwrap_or(i64::MAX),
        })
    }

    /// The full structural check: [`check_header`](Self::check_header), then the Arrow message:
    /// framing, flatbuffer verification, a RecordBatch header whose body length fills the batch exactly,
    /// row count equal to `record_count`, and every buffer range inside the body. Builds no arrays.
    pub fn validate(&self) -> Result<()> {
        self.check_header()?;
        if let Some(layout) = self.message()? {
            ipc::check_message(self.as_bytes(), self.position, &layout, self.record_count())?;
        }
        Ok(())
    }

    /// The codec of the batch's Arrow body: `None` when it is not compressed or the batch is
    /// header-only. Checks the Arrow message as [`validate`](Self::validate) does, not the header.
    pub fn compression(&self) -> Result<Option<Compression>> {
        let Some(layout) = self.message()? else {
            return Ok(None);
        };
        let (_, rb) =
            ipc::check_message(self.as_bytes(), self.position, &layout, self.record_count())?;
        Ok(rb
            .compression()
            .and_then(|c| Compression::of_arrow(c.codec())))
    }

    /// Validates the batch and decodes its rows with `schema` (the Arrow schema registered for
    /// [`schema_id`](Self::schema_id)) and its change types (`None` for append-only batches).
    /// Arrow arrays are fully validated: garbage yields an error.
    pub fn decode(&self, schema: &SchemaRef) -> Result<(RecordBatch, Option<Vec<ChangeType>>)> {
        let rows = self.decode_rows(schema, None)?;
        let changes = self.change_types().map(|c| c.collect());
        Ok((rows, changes))
    }

    /// Validates the batch and decodes the rows, only the `projection` columns if given.
    pub(crate) fn decode_rows(
        &self,
        schema: &SchemaRef,
        projection: Option<&[usize]>,
    ) -> Result<RecordBatch> {
        ipc::check_schema_fields(schema.fields().iter())?;
        self.check_header()?;
        let Some(layout) = self.message()? else {
            let schema = match projection {
                Some(p) => {
                    std::sync::Arc::new(schema.project(p).map_err(|source| Error::Arrow {
                        field: field::HEADER,
                        position: self.position,
                        source,
                    })?)
                }
                None => std::sync::Arc::clone(schema),
            };
            return Ok(RecordBatch::new_empty(schema));
        };
        let bytes = self.as_bytes();
        let (version, rb) = ipc::check_message(bytes, self.position, &layout, self.record_count())?;
        let body = self
            .buf
            .slice_range(layout.body_start..bytes.len())
            .to_arrow_buffer();
        ipc::decode_rows(
            &body,
            self.position,
            &layout,
            version,
            rb,
            schema,
            projection,
        )
    }
}
