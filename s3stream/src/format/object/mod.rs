//! The committed-object format, version 1, shared by stream-set objects (many streams) and
//! stream objects (one stream). The compactor writes them; the read path reads them through the
//! metadata's object index, never by listing. All integers are little-endian.
//!
//! An object is a sequence of data blocks, then an index, then a fixed footer:
//!
//! ```text
//! [block 0][block 1]...[block n-1][index][footer]
//! ```
//!
//! A data block holds consecutive batches of one stream, at most about `block_bytes` (a batch is
//! never split). Block header (32 bytes), then its batches:
//!
//! | position | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 8 | stream_id | the stream |
//! | 8 | 8 | start_offset | base offset of the first batch |
//! | 16 | 8 | end_offset | offset after the last batch |
//! | 24 | 4 | body_len | bytes of batch frames that follow |
//! | 28 | 4 | crc | CRC32C of bytes 0..28, then of the body |
//!
//! Each batch frame: base_offset u64, count u32, len u32, then `len` bytes of the batch (opaque).
//!
//! Index: one 40-byte entry per block, in object order (sorted by stream, then offset):
//!
//! | position | size | field |
//! |---|---|---|
//! | 0 | 8 | stream_id |
//! | 8 | 8 | start_offset |
//! | 16 | 8 | end_offset |
//! | 24 | 8 | position of the block in the object |
//! | 32 | 4 | len of the block (header included) |
//! | 36 | 4 | batch_count |
//!
//! Footer (24 bytes, the last bytes of the object):
//!
//! | position | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 8 | index_position | where the index starts |
//! | 8 | 4 | index_len | bytes of index (a multiple of 40) |
//! | 12 | 4 | index_crc | CRC32C of the index |
//! | 16 | 2 | version | 1 |
//! | 18 | 2 | reserved | 0 |
//! | 20 | 4 | magic | `MKOB` |
//!
//! Decoding never panics: every length and position is checked against the bytes at hand.

use std::ops::Range;

use bytes::Bytes;

use mink_metadata::StreamRange;

use super::le::{TagFault, Truncated, check_tag, take, u32_at, u64_at};
use super::parts::Parts;

use crate::batch::StreamBatch;

mod builder;

pub use builder::{COMBINE_FROM, FramedBatch, ObjectBuilder, copied_bytes};

/// Last bytes of every committed object.
pub const OBJECT_MAGIC: [u8; 4] = *b"MKOB";
/// The version this module writes and reads.
pub const OBJECT_VERSION: u16 = 1;
/// Bytes of the footer.
pub const FOOTER_LEN: usize = 24;
/// Bytes of an index entry.
pub const INDEX_ENTRY_LEN: usize = 40;
/// Bytes of a block header.
pub const BLOCK_HEADER_LEN: usize = 32;
/// Bytes of a batch frame header.
pub const FRAME_HEADER_LEN: usize = 16;

/// Why a committed object (or part of it) could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ObjectFormatError {
    /// The bytes ended inside a field.
    #[error("object {0}")]
    Truncated(#[from] Truncated),
    /// The footer does not end with [`OBJECT_MAGIC`].
    #[error("not a committed object: footer magic {found:02x?}, expected {OBJECT_MAGIC:02x?}")]
    BadMagic {
        /// The last four bytes.
        found: [u8; 4],
    },
    /// Written by a version this build does not read.
    #[error(
        "committed object version {found} is not supported (this build reads {OBJECT_VERSION})"
    )]
    UnsupportedVersion {
        /// The version found.
        found: u16,
    },
    /// A checksum did not match.
    #[error(
        "checksum mismatch in {field} at byte {position}: stored {stored:#010x}, computed {computed:#010x}"
    )]
    CrcMismatch {
        /// The index or block whose checksum failed.
        field: &'static str,
        /// Byte position of it.
        position: u64,
        /// The stored checksum.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// The footer or index points outside the object, or a block disagrees with its entry.
    #[error("inconsistent object: {0}")]
    Inconsistent(String),
}

/// One index entry: where a block of one stream's batches lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockEntry {
    /// The stream.
    pub stream_id: u64,
    /// Base offset of the block's first batch.
    pub start_offset: u64,
    /// Offset after its last batch.
    pub end_offset: u64,
    /// Byte position of the block in the object.
    pub position: u64,
    /// Bytes of the block, header included.
    pub len: u32,
    /// Batches in the block.
    pub batch_count: u32,
}

impl BlockEntry {
    /// The block's bytes in the object.
    pub fn range(&self) -> Range<u64> {
        self.position..self.position + u64::from(self.len)
    }
}

/// The span of each stream in an index: consecutive entries of one stream merged.
pub fn spans(index: &[BlockEntry]) -> Vec<StreamRange> {
    let mut spans: Vec<StreamRange> = Vec::new();
    for entry in index {
        match spans.last_mut() {
            Some(span) if span.stream_id == entry.stream_id => {
                span.end_offset = entry.end_offset;
                span.len += u64::from(entry.len);
            }
            _ => spans.push(StreamRange {
                stream_id: entry.stream_id,
                start_offset: entry.start_offset,
                end_offset: entry.end_offset,
                position: entry.position,
                len: u64::from(entry.len),
            }),
        }
    }
    spans
}

/// The index of a whole object held in memory: its footer, index and CRC checked.
pub fn decode_object_index(
    object: &[u8],
) -> Result<(Range<u64>, Vec<BlockEntry>), ObjectFormatError> {
    let size = object.len() as u64;
    let footer = take(
        object,
        object.len().saturating_sub(FOOTER_LEN),
        FOOTER_LEN,
        "footer",
    )?;
    let range = decode_footer(footer, size)?;
    let crc = footer_index_crc(footer)?;
    let index = take(
        object,
        range.start as usize,
        (range.end - range.start) as usize,
        "index",
    )?;
    let entries = decode_index(index, crc, range.start)?;
    Ok((range, entries))
}

/// The footer of an object of `object_size` bytes, from its last [`FOOTER_LEN`] bytes: the
/// byte range of the index.
pub fn decode_footer(footer: &[u8], object_size: u64) -> Result<Range<u64>, ObjectFormatError> {
    let footer = take(footer, 0, FOOTER_LEN, "footer")?;
    check_tag(footer, 16, OBJECT_MAGIC, OBJECT_VERSION).map_err(|fault| match fault {
        TagFault::Magic(found) => ObjectFormatError::BadMagic { found },
        TagFault::Version(found) => ObjectFormatError::UnsupportedVersion { found },
        TagFault::Reserved => {
            ObjectFormatError::Inconsistent("reserved footer bytes are not zero".to_owned())
        }
    })?;
    let position = u64_at(footer, 0);
    let len = u64::from(u32_at(footer, 8));
    let end = position.checked_add(len);
    if end != object_size.checked_sub(FOOTER_LEN as u64) || len % INDEX_ENTRY_LEN as u64 != 0 {
        return Err(ObjectFormatError::Inconsistent(format!(
            "index at {position}+{len} does not end at the footer of a {object_size}-byte object"
        )));
    }
    Ok(position..position + len)
}

/// The index CRC stored in a footer.
pub fn footer_index_crc(footer: &[u8]) -> Result<u32, ObjectFormatError> {
    Ok(u32_at(take(footer, 0, FOOTER_LEN, "footer")?, 12))
}

/// Decodes an index (the bytes the footer points at), checking its CRC and that every block
/// lies before `index_position`.
pub fn decode_index(
    index: &[u8],
    stored_crc: u32,
    index_position: u64,
) -> Result<Vec<BlockEntry>, ObjectFormatError> {
    let computed = crc32c::crc32c(index);
    if computed != stored_crc {
        return Err(ObjectFormatError::CrcMismatch {
            field: "index",
            position: index_position,
            stored: stored_crc,
            computed,
        });
    }
    let mut entries = Vec::with_capacity(index.len() / INDEX_ENTRY_LEN);
    for chunk in index.chunks(INDEX_ENTRY_LEN) {
        let e = take(chunk, 0, INDEX_ENTRY_LEN, "index entry")?;
        let entry = BlockEntry {
            stream_id: u64_at(e, 0),
            start_offset: u64_at(e, 8),
            end_offset: u64_at(e, 16),
            position: u64_at(e, 24),
            len: u32_at(e, 32),
            batch_count: u32_at(e, 36),
        };
        let fits = entry
            .position
            .checked_add(u64::from(entry.len))
            .is_some_and(|end| end <= index_position);
        if !fits || entry.start_offset >= entry.end_offset || entry.len < BLOCK_HEADER_LEN as u32 {
            return Err(ObjectFormatError::Inconsistent(format!(
                "index entry {entry:?} is out of bounds or empty"
            )));
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// Decodes one block (its bytes as read from `entry.range()`), checking its CRC and that it
/// agrees with its index entry.
pub fn decode_block(
    block: &Bytes,
    entry: &BlockEntry,
) -> Result<Vec<StreamBatch>, ObjectFormatError> {
    decode_block_parts(std::slice::from_ref(block), entry)
}

/// [`decode_block`] of a block held as consecutive parts (slices of cache pages): each batch is
/// a slice of its part, and only a batch that crosses from one part into the next is copied.
pub fn decode_block_parts(
    parts: &[Bytes],
    entry: &BlockEntry,
) -> Result<Vec<StreamBatch>, ObjectFormatError> {
    let block = Parts::new(parts);
    let header = block.take(0, BLOCK_HEADER_LEN, "block header")?;
    let body_len = u32_at(&header, 24) as usize;
    let stored = u32_at(&header, 28);
    block.check(BLOCK_HEADER_LEN, body_len, "block body")?;
    let computed = block
        .pieces(BLOCK_HEADER_LEN, body_len)
        .fold(crc32c::crc32c(&header[..28]), |crc, piece| {
            crc32c::crc32c_append(crc, &piece)
        });
    if stored != computed {
        return Err(ObjectFormatError::CrcMismatch {
            field: "block",
            position: entry.position,
            stored,
            computed,
        });
    }
    let (stream_id, start, end) = (u64_at(&header, 0), u64_at(&header, 8), u64_at(&header, 16));
    if stream_id != entry.stream_id || start != entry.start_offset || end != entry.end_offset {
        return Err(ObjectFormatError::Inconsistent(format!(
            "block at {} holds stream {stream_id} [{start}, {end}), its index entry says {entry:?}",
            entry.position
        )));
    }
    // The entry's count is untrusted: it may size nothing beyond what the body can hold.
    let mut batches =
        Vec::with_capacity((entry.batch_count as usize).min(body_len / FRAME_HEADER_LEN));
    let mut position = BLOCK_HEADER_LEN;
    let mut expected = start;
    while position < BLOCK_HEADER_LEN + body_len {
        let frame = block.take(position, FRAME_HEADER_LEN, "batch frame")?;
        let base_offset = u64_at(&frame, 0);
        let count = u32_at(&frame, 8);
        let len = u32_at(&frame, 12) as usize;
        let payload_start = position + FRAME_HEADER_LEN;
        if base_offset != expected || count == 0 {
            return Err(ObjectFormatError::Inconsistent(format!(
                "batch at byte {position} of block {} starts at offset {base_offset} with {count} \
                 records; expected offset {expected}",
                entry.position
            )));
        }
        let payload = block.take(payload_start, len, "batch payload")?;
        expected = base_offset.checked_add(u64::from(count)).ok_or_else(|| {
            ObjectFormatError::Inconsistent(format!(
                "batch at byte {position} of block {} ends past the largest offset",
                entry.position
            ))
        })?;
        batches.push(StreamBatch {
            base_offset,
            count,
            payload,
        });
        position = payload_start + len;
    }
    if expected != end || position != BLOCK_HEADER_LEN + body_len {
        return Err(ObjectFormatError::Inconsistent(format!(
            "block at {} ends at offset {expected}, header says {end}",
            entry.position
        )));
    }
    if batches.len() != entry.batch_count as usize {
        return Err(ObjectFormatError::Inconsistent(format!(
            "block at {} holds {} batches, its index entry says {}",
            entry.position,
            batches.len(),
            entry.batch_count
        )));
    }
    Ok(batches)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batches(stream: u64, from: u64, n: u64, len: usize) -> Vec<StreamBatch> {
        (0..n)
            .map(|i| StreamBatch {
                base_offset: from + i * 2,
                count: 2,
                payload: Bytes::from(vec![(stream + i) as u8; len]),
            })
            .collect()
    }

    fn parse(object: &Bytes) -> Vec<(BlockEntry, Vec<StreamBatch>)> {
        let size = object.len() as u64;
        let footer = &object[object.len() - FOOTER_LEN..];
        let index_range = decode_footer(footer, size).unwrap();
        let index = &object[index_range.start as usize..index_range.end as usize];
        let entries =
            decode_index(index, footer_index_crc(footer).unwrap(), index_range.start).unwrap();
        entries
            .into_iter()
            .map(|e| {
                let block = object.slice(e.position as usize..e.range().end as usize);
                (e, decode_block(&block, &e).unwrap())
            })
            .collect()
    }

    /// A builder in parts gives the same bytes as one that copies everything, with the payloads
    /// from its threshold up left where they are, whatever the block size.
    #[test]
    fn a_builder_in_parts_gives_the_same_object() {
        let mut a = batches(1, 0, 3, 50);
        a.extend(batches(1, 6, 2, 5000));
        a.extend(batches(1, 10, 2, 10));
        let b = batches(2, 100, 4, 4999);
        for block_bytes in [1, 6000, 1 << 20] {
            let mut whole = ObjectBuilder::new(block_bytes);
            let mut sharing = ObjectBuilder::sharing(block_bytes, 5000, copied_bytes(&a, 5000));
            for builder in [&mut whole, &mut sharing] {
                builder.add_stream(1, &a);
                builder.add_stream(2, &b);
            }
            assert_eq!(whole.data_len(), sharing.data_len());
            let (bytes, spans) = whole.finish();
            let (parts, index) = sharing.finish_parts(&[]);
            assert_eq!(crate::storage::join_parts(&parts), bytes, "{block_bytes}");
            assert_eq!(super::spans(&index), spans);
            for batch in a.iter().chain(&b) {
                let shared = parts.iter().any(|p| p.as_ptr() == batch.payload.as_ptr());
                assert_eq!(shared, batch.payload.len() >= 5000);
            }
            assert_eq!(parse(&bytes).len(), index.len());
        }
    }

    #[test]
    fn round_trip_with_block_splitting() {
        let a = batches(1, 10, 50, 100);
        let b = batches(2, 0, 3, 10);
        let mut builder = ObjectBuilder::new(1000);
        builder.add_stream(1, &a);
        builder.add_stream(2, &b);
        let (object, spans) = builder.finish();
        assert_eq!(spans.len(), 2);
        assert_eq!((spans[0].start_offset, spans[0].end_offset), (10, 110));
        assert_eq!((spans[1].start_offset, spans[1].end_offset), (0, 6));
        let parsed = parse(&object);
        assert!(parsed.len() > 2, "stream 1 is cut into several blocks");
        let back: Vec<StreamBatch> = parsed
            .iter()
            .filter(|(e, _)| e.stream_id == 1)
            .flat_map(|(_, b)| b.clone())
            .collect();
        assert_eq!(back, a);
        let span_bytes: u64 = parsed
            .iter()
            .filter(|(e, _)| e.stream_id == 1)
            .map(|(e, _)| u64::from(e.len))
            .sum();
        assert_eq!(span_bytes, spans[0].len);
    }

    #[test]
    fn a_block_in_parts_decodes_as_the_whole_block_and_copies_only_batches_across_a_cut() {
        let mut builder = ObjectBuilder::new(1 << 20);
        builder.add_stream(1, &batches(1, 0, 6, 50));
        let (object, _) = builder.finish();
        let (entry, whole) = parse(&object).remove(0);
        let block = object.slice(entry.position as usize..entry.range().end as usize);
        for cut in 1..block.len() {
            let parts = [block.slice(..cut), block.slice(cut..)];
            let read = decode_block_parts(&parts, &entry).expect("decodes in parts");
            assert_eq!(read, whole, "cut at {cut}");
            for batch in &read {
                let start = batch.payload.as_ptr() as usize;
                let in_first = start >= parts[0].as_ptr() as usize
                    && start + batch.payload.len() <= parts[0].as_ptr() as usize + cut;
                let in_second = start >= parts[1].as_ptr() as usize
                    && start + batch.payload.len() <= parts[1].as_ptr() as usize + parts[1].len();
                let copied = !in_first && !in_second;
                let offset_of = |p: usize| p - block.as_ptr() as usize;
                let crosses = {
                    let at = whole
                        .iter()
                        .find(|b| b.base_offset == batch.base_offset)
                        .map(|b| offset_of(b.payload.as_ptr() as usize))
                        .expect("same batch");
                    at < cut && at + batch.payload.len() > cut
                };
                assert_eq!(copied, crosses, "cut at {cut}, batch {}", batch.base_offset);
            }
        }
        let mut bad = block.to_vec();
        bad[BLOCK_HEADER_LEN + 3] ^= 1;
        let bad = Bytes::from(bad);
        assert!(matches!(
            decode_block_parts(&[bad.slice(..40), bad.slice(40..)], &entry),
            Err(ObjectFormatError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn corruption_is_detected_everywhere() {
        let mut builder = ObjectBuilder::new(64);
        builder.add_stream(1, &batches(1, 0, 4, 20));
        let (object, _) = builder.finish();
        for at in 0..object.len() {
            let mut bytes = object.to_vec();
            bytes[at] ^= 0x41;
            let bytes = Bytes::from(bytes);
            let size = bytes.len() as u64;
            let footer = &bytes[bytes.len() - FOOTER_LEN..];
            let result = decode_footer(footer, size).and_then(|r| {
                let index = bytes
                    .get(r.start as usize..r.end as usize)
                    .ok_or_else(|| ObjectFormatError::Inconsistent("index".into()))?;
                let entries = decode_index(index, footer_index_crc(footer)?, r.start)?;
                for e in &entries {
                    let block = bytes.slice(e.position as usize..e.range().end as usize);
                    decode_block(&block, e)?;
                }
                Ok(())
            });
            assert!(result.is_err(), "flipped byte {at} went unnoticed");
        }
    }

    /// A block, its CRC right, holding frames `(base_offset, count, payload)`.
    fn raw_block(stream: u64, start: u64, end: u64, frames: &[(u64, u32, &[u8])]) -> Bytes {
        let mut body = Vec::new();
        for (base_offset, count, payload) in frames {
            body.extend_from_slice(&base_offset.to_le_bytes());
            body.extend_from_slice(&count.to_le_bytes());
            body.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            body.extend_from_slice(payload);
        }
        let mut block = Vec::new();
        for word in [stream, start, end] {
            block.extend_from_slice(&word.to_le_bytes());
        }
        block.extend_from_slice(&(body.len() as u32).to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&block), &body);
        block.extend_from_slice(&crc.to_le_bytes());
        block.extend_from_slice(&body);
        Bytes::from(block)
    }

    /// Found by the `wal_object` and `committed_object` fuzz targets: an index entry naming
    /// u32::MAX batches made the decoder reserve room for all of them (hundreds of GB).
    #[test]
    fn a_forged_batch_count_sizes_nothing_and_is_an_error() {
        let block = raw_block(1, 0, 2, &[(0, 2, b"ab")]);
        let mut entry = BlockEntry {
            stream_id: 1,
            start_offset: 0,
            end_offset: 2,
            position: 0,
            len: block.len() as u32,
            batch_count: 1,
        };
        assert_eq!(decode_block(&block, &entry).unwrap().len(), 1);
        entry.batch_count = u32::MAX;
        assert!(matches!(
            decode_block(&block, &entry),
            Err(ObjectFormatError::Inconsistent(_))
        ));
    }

    /// An offset at the top of the range: the end of a batch past it is an error, not an
    /// overflow.
    #[test]
    fn offsets_past_the_largest_are_errors() {
        let start = u64::MAX - 1;
        let block = raw_block(1, start, u64::MAX, &[(start, 2, b"ab")]);
        let entry = BlockEntry {
            stream_id: 1,
            start_offset: start,
            end_offset: u64::MAX,
            position: 0,
            len: block.len() as u32,
            batch_count: 1,
        };
        assert!(matches!(
            decode_block(&block, &entry),
            Err(ObjectFormatError::Inconsistent(_))
        ));
    }

    #[test]
    fn truncated_parts_are_errors() {
        let mut builder = ObjectBuilder::new(1 << 20);
        builder.add_stream(3, &batches(3, 0, 2, 10));
        let (object, _) = builder.finish();
        let entries = {
            let footer = &object[object.len() - FOOTER_LEN..];
            let r = decode_footer(footer, object.len() as u64).unwrap();
            decode_index(
                &object[r.start as usize..r.end as usize],
                footer_index_crc(footer).unwrap(),
                r.start,
            )
            .unwrap()
        };
        let entry = entries[0];
        for len in 0..entry.len as usize {
            assert!(decode_block(&object.slice(..len), &entry).is_err());
        }
        assert!(decode_footer(&object[..10], object.len() as u64).is_err());
    }
}
