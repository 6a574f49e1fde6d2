//! The WAL object format.
//!
//! One WAL object holds one group commit: the records of any number of streams. All integers
//! are little-endian.
//!
//! # Version 2 (written)
//!
//! A version-2 WAL object is laid out as a committed object (see [`super::object`]: data blocks
//! of one stream's consecutive batches, each with a CRC32C, then an index and a footer ending in
//! `MKOB`), with a WAL section between the last block and the index. The compactor can therefore
//! commit a large WAL object as a stream-set object as it is, without writing its bytes again;
//! readers of committed objects never look at the WAL section.
//!
//! ```text
//! [block 0]...[block n-1][WAL section][index: n entries][footer]
//! ```
//!
//! Blocks are sorted by stream id, then epoch, then offset. A block never mixes epochs, and the
//! batches of a block have consecutive offsets.
//!
//! WAL section (8n + 16 bytes; it ends where the index starts):
//!
//! | position | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 8n | epochs | the epoch of each block's stream when its batches were appended, in index order (recovery fences on it) |
//! | 8n | 4 | block_count | n, the number of index entries |
//! | 8n+4 | 4 | crc | CRC32C of bytes 0..8n+4 of the section |
//! | 8n+8 | 2 | version | 2 |
//! | 8n+10 | 2 | reserved | 0 |
//! | 8n+12 | 4 | magic | `MKWL` |
//!
//! # Version 1 (never released)
//!
//! Version 1 put the magic and version first and the records after them, each with its own
//! CRC32C. No release wrote it; an object that starts with `MKWL` and is no version-2 object is
//! refused as [`WalFormatError::UnsupportedVersion`].
//!
//! Decoding never panics: every length is checked before it is used.

use bytes::{BufMut, Bytes, BytesMut};

use mink_metadata::StreamRange;

use super::le::{TagFault, Truncated, check_tag, take, u32_at, u64_at};
use super::object::{self, BlockEntry, FramedBatch, ObjectBuilder, ObjectFormatError};

/// The WAL's magic: the last bytes of the WAL section (version 2; version 1 began with it).
pub const WAL_MAGIC: [u8; 4] = *b"MKWL";
/// The version this module writes.
pub const WAL_VERSION: u16 = 2;
/// Bytes of the WAL section's trailer.
pub const SECTION_TRAILER_LEN: usize = 16;

/// One appended batch as the WAL carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalRecord {
    /// The stream the batch belongs to.
    pub stream_id: u64,
    /// The stream's epoch at append time.
    pub epoch: u64,
    /// Offset of the batch's first record.
    pub base_offset: u64,
    /// Offsets the batch covers.
    pub count: u32,
    /// The batch bytes.
    pub payload: Bytes,
    /// The CRC32C of `payload` when the appender knows it (see
    /// [`FramedBatch::payload_crc`]); never read back from a WAL object.
    pub payload_crc: Option<u32>,
}

impl WalRecord {
    /// The offset after the batch.
    pub fn end_offset(&self) -> u64 {
        self.base_offset + u64::from(self.count)
    }

    /// Bytes this record takes in a WAL object, about (a frame header and its payload; block
    /// headers and the index come on top).
    pub fn encoded_len(&self) -> usize {
        object::FRAME_HEADER_LEN + self.payload.len()
    }
}

impl FramedBatch for WalRecord {
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
    fn payload_crc(&self) -> Option<u32> {
        self.payload_crc
    }
}

/// The batches of one stream and epoch that lie together in a WAL object, at consecutive
/// offsets: what the compactor needs to commit the object as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalSpan {
    /// The stream's epoch when the batches were appended.
    pub epoch: u64,
    /// The stream, its offsets and where its blocks lie in the object.
    pub range: StreamRange,
}

/// Why a WAL object could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WalFormatError {
    /// The object ended inside a field.
    #[error("WAL object {0}")]
    Truncated(#[from] Truncated),
    /// The WAL section does not end with [`WAL_MAGIC`].
    #[error("not a WAL object: magic {found:02x?}, expected {WAL_MAGIC:02x?}")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// The object was written by a version this build does not read.
    #[error("WAL object version {found} is not supported (this build reads version {WAL_VERSION})")]
    UnsupportedVersion {
        /// The version found.
        found: u16,
    },
    /// A checksum did not match: the object is corrupt.
    #[error(
        "WAL object checksum mismatch in {field} at byte {position}: stored {stored:#010x}, computed {computed:#010x}"
    )]
    CrcMismatch {
        /// The header or record whose checksum failed.
        field: &'static str,
        /// Byte position of that header.
        position: usize,
        /// The checksum stored in the object.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// The blocks, index or footer are damaged.
    #[error("WAL object layout: {0}")]
    Layout(#[from] ObjectFormatError),
}

/// Payloads of at least this many bytes go to the store as they are, as parts of their own of
/// a WAL object sent in parts ([`encode_parts`]); smaller ones are copied together with the
/// object's own fields, so that a group of many small appends stays a few parts.
pub const SHARED_PAYLOAD_BYTES: usize = 16 << 10;

/// Encodes `records` (in submission order) as one WAL object with data blocks of about
/// `block_bytes`. Returns the object and the spans of its streams, in object order.
pub fn encode(records: Vec<WalRecord>, block_bytes: usize) -> (Bytes, Vec<WalSpan>) {
    let data: usize = records.iter().map(WalRecord::encoded_len).sum();
    let builder = ObjectBuilder::with_capacity(block_bytes, data + data / 16 + 4096);
    let (parts, spans) = build(records, builder);
    (crate::storage::join_parts(&parts), spans)
}

/// [`encode`] as parts whose concatenation is the object: payloads of
/// [`SHARED_PAYLOAD_BYTES`] or more are parts of their own, the records' bytes as they are
/// (docs/write-copies.md).
pub fn encode_parts(records: Vec<WalRecord>, block_bytes: usize) -> (Vec<Bytes>, Vec<WalSpan>) {
    let copied = object::copied_bytes(&records, SHARED_PAYLOAD_BYTES);
    let builder = ObjectBuilder::sharing(block_bytes, SHARED_PAYLOAD_BYTES, copied + 4096);
    build(records, builder)
}

/// Adds `records` to `builder` by stream and epoch and finishes the object with the WAL
/// section.
fn build(mut records: Vec<WalRecord>, mut builder: ObjectBuilder) -> (Vec<Bytes>, Vec<WalSpan>) {
    // A stream's records arrive in offset order, so a stable sort keeps each run in order.
    records.sort_by_key(|r| (r.stream_id, r.epoch));
    let mut epochs: Vec<u64> = Vec::new();
    let mut rest = records.as_slice();
    while let Some(first) = rest.first() {
        // A run: one stream, one epoch, consecutive offsets.
        let mut len = 1;
        while let (Some(prev), Some(next)) = (rest.get(len - 1), rest.get(len)) {
            if next.stream_id != first.stream_id
                || next.epoch != first.epoch
                || next.base_offset != prev.end_offset()
            {
                break;
            }
            len += 1;
        }
        let (run, tail) = rest.split_at(len);
        builder.add_stream(first.stream_id, run);
        epochs.resize(builder.block_count(), first.epoch);
        rest = tail;
    }
    let mut section = BytesMut::with_capacity(epochs.len() * 8 + SECTION_TRAILER_LEN);
    for epoch in &epochs {
        section.put_u64_le(*epoch);
    }
    section.put_u32_le(u32::try_from(epochs.len()).unwrap_or(u32::MAX));
    let crc = crc32c::crc32c(&section);
    section.put_u32_le(crc);
    section.put_u16_le(WAL_VERSION);
    section.put_u16_le(0);
    section.put_slice(&WAL_MAGIC);
    let (parts, index) = builder.finish_parts(&section);
    (parts, spans(&index, &epochs))
}

/// One span per run of blocks of the same stream and epoch at consecutive offsets.
fn spans(index: &[BlockEntry], epochs: &[u64]) -> Vec<WalSpan> {
    let mut spans: Vec<WalSpan> = Vec::new();
    for (entry, &epoch) in index.iter().zip(epochs) {
        match spans.last_mut() {
            Some(span)
                if span.range.stream_id == entry.stream_id
                    && span.epoch == epoch
                    && span.range.end_offset == entry.start_offset =>
            {
                span.range.end_offset = entry.end_offset;
                span.range.len += u64::from(entry.len);
            }
            _ => spans.push(WalSpan {
                epoch,
                range: StreamRange {
                    stream_id: entry.stream_id,
                    start_offset: entry.start_offset,
                    end_offset: entry.end_offset,
                    position: entry.position,
                    len: u64::from(entry.len),
                },
            }),
        }
    }
    spans
}

/// Decodes a WAL object: its records, by stream, then epoch, then offset. Payloads share the
/// object's buffer (no copy).
pub fn decode(object: &Bytes) -> Result<Vec<WalRecord>, WalFormatError> {
    decode_with_spans(object).map(|(records, _)| records)
}

/// [`decode`], with the object's spans as [`encode`] returned them: what recovery needs to
/// commit the object as it is.
pub fn decode_with_spans(object: &Bytes) -> Result<(Vec<WalRecord>, Vec<WalSpan>), WalFormatError> {
    decode_blocks(object).map_err(|error| match leading_version(object) {
        Some(found) => WalFormatError::UnsupportedVersion { found },
        None => error,
    })
}

/// The version an object names when it is laid out as version 1 was (the magic first, then
/// the version), which this build does not read.
fn leading_version(object: &[u8]) -> Option<u16> {
    let head = object.get(..6)?;
    (head[..4] == WAL_MAGIC).then(|| u16::from_le_bytes([head[4], head[5]]))
}

/// The index of a WAL object held in memory, each block with the epoch its stream had when the
/// block's batches were appended (checked against the WAL section's CRC). What a rebuild needs
/// to place a WAL object's blocks without decoding their batches.
pub fn decode_index_epochs(object: &[u8]) -> Result<Vec<(BlockEntry, u64)>, WalFormatError> {
    index_epochs(object).map_err(|error| match leading_version(object) {
        Some(found) => WalFormatError::UnsupportedVersion { found },
        None => error,
    })
}

fn index_epochs(object: &[u8]) -> Result<Vec<(BlockEntry, u64)>, WalFormatError> {
    let (index_range, index) = object::decode_object_index(object)?;
    let section_end = index_range.start as usize;
    let trailer_start = section_end
        .checked_sub(SECTION_TRAILER_LEN)
        .ok_or(Truncated {
            field: "WAL section",
            position: 0,
            needed: SECTION_TRAILER_LEN,
            available: section_end,
        })?;
    let trailer = take(object, trailer_start, SECTION_TRAILER_LEN, "WAL section")?;
    check_tag(trailer, 8, WAL_MAGIC, WAL_VERSION).map_err(|fault| match fault {
        TagFault::Magic(found) => WalFormatError::BadMagic { found },
        TagFault::Version(found) => WalFormatError::UnsupportedVersion { found },
        TagFault::Reserved => {
            ObjectFormatError::Inconsistent("reserved WAL section bytes are not zero".into()).into()
        }
    })?;
    let count = u32_at(trailer, 0) as usize;
    if count != index.len() {
        return Err(ObjectFormatError::Inconsistent(format!(
            "the WAL section names {count} blocks, the index {}",
            index.len()
        ))
        .into());
    }
    let section_start = trailer_start.checked_sub(count * 8).ok_or(Truncated {
        field: "WAL epochs",
        position: 0,
        needed: count * 8,
        available: trailer_start,
    })?;
    let covered = take(object, section_start, count * 8 + 4, "WAL section")?;
    let stored = u32_at(trailer, 4);
    let computed = crc32c::crc32c(covered);
    if stored != computed {
        return Err(WalFormatError::CrcMismatch {
            field: "WAL section",
            position: section_start,
            stored,
            computed,
        });
    }
    let mut blocks = Vec::with_capacity(index.len());
    for (i, entry) in index.into_iter().enumerate() {
        if entry.range().end > section_start as u64 {
            return Err(ObjectFormatError::Inconsistent(format!(
                "block {entry:?} overlaps the WAL section at byte {section_start}"
            ))
            .into());
        }
        blocks.push((entry, u64_at(covered, i * 8)));
    }
    Ok(blocks)
}

fn decode_blocks(object: &Bytes) -> Result<(Vec<WalRecord>, Vec<WalSpan>), WalFormatError> {
    let blocks = index_epochs(object)?;
    let mut records = Vec::new();
    for &(entry, epoch) in &blocks {
        let block = object.slice(entry.position as usize..entry.range().end as usize);
        for batch in object::decode_block(&block, &entry)? {
            records.push(WalRecord {
                stream_id: entry.stream_id,
                epoch,
                base_offset: batch.base_offset,
                count: batch.count,
                payload: batch.payload,
                payload_crc: None,
            });
        }
    }
    let (index, epochs): (Vec<BlockEntry>, Vec<u64>) = blocks.into_iter().unzip();
    Ok((records, spans(&index, &epochs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        stream_id: u64,
        epoch: u64,
        base_offset: u64,
        count: u32,
        payload: &[u8],
    ) -> WalRecord {
        WalRecord {
            stream_id,
            epoch,
            base_offset,
            count,
            payload: Bytes::copy_from_slice(payload),
            payload_crc: None,
        }
    }

    /// Submission order: streams interleaved, one stream with two epochs, an empty payload.
    fn sample() -> Vec<WalRecord> {
        vec![
            record(9, 1, 0, 1, b""),
            record(7, 2, 100, 3, b"first batch"),
            record(9, 1, 1, 2, b"second of 9"),
            record(7, 2, 103, 1, b"next of 7"),
            record(7, 3, 100, 2, b"a newer epoch of 7"),
        ]
    }

    fn sorted(mut records: Vec<WalRecord>) -> Vec<WalRecord> {
        records.sort_by_key(|r| (r.stream_id, r.epoch, r.base_offset));
        records
    }

    #[test]
    fn round_trip_groups_records_by_stream_and_epoch() {
        let (object, spans) = encode(sample(), 1 << 20);
        assert_eq!(decode(&object).unwrap(), sorted(sample()));
        let summary: Vec<_> = spans
            .iter()
            .map(|s| {
                (
                    s.range.stream_id,
                    s.epoch,
                    s.range.start_offset,
                    s.range.end_offset,
                )
            })
            .collect();
        assert_eq!(summary, [(7, 2, 100, 104), (7, 3, 100, 102), (9, 1, 0, 3)]);
        let (empty, spans) = encode(Vec::new(), 1 << 20);
        assert_eq!(decode(&empty).unwrap(), vec![]);
        assert!(spans.is_empty());
    }

    /// The object in parts is the same bytes as in one buffer; payloads from
    /// [`SHARED_PAYLOAD_BYTES`] up are parts of their own, the records' own memory, and smaller
    /// ones are copied together with the object's fields.
    #[test]
    fn an_object_in_parts_is_the_same_bytes_with_large_payloads_not_copied() {
        let sizes = [
            0,
            100,
            SHARED_PAYLOAD_BYTES - 1,
            SHARED_PAYLOAD_BYTES,
            3 * SHARED_PAYLOAD_BYTES,
            7,
            SHARED_PAYLOAD_BYTES + 1,
        ];
        let records: Vec<WalRecord> = sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let i = i as u64;
                record(1 + i % 2, 1, i / 2, 1, &vec![i as u8 + 1; len])
            })
            .collect();
        for block_bytes in [1, 20_000, 1 << 20] {
            let (whole, whole_spans) = encode(records.clone(), block_bytes);
            let (parts, spans) = encode_parts(records.clone(), block_bytes);
            assert_eq!(crate::storage::join_parts(&parts), whole, "{block_bytes}");
            assert_eq!(spans, whole_spans);
            assert_eq!(decode(&whole).unwrap(), sorted(records.clone()));
            for r in &records {
                let shared = parts.iter().any(|p| p.as_ptr() == r.payload.as_ptr());
                assert_eq!(
                    shared,
                    r.payload.len() >= SHARED_PAYLOAD_BYTES,
                    "a payload of {} bytes",
                    r.payload.len()
                );
            }
            // The small ones and every field go in a few parts: at most one between two shared
            // payloads, and one at the end.
            assert!(parts.len() <= 2 * 3 + 1, "{} parts", parts.len());
        }
    }

    #[test]
    fn a_known_payload_crc_gives_the_same_object_and_a_wrong_one_fails_its_reads() {
        use crate::format::object::COMBINE_FROM;
        let payloads: Vec<Vec<u8>> = [COMBINE_FROM, 100, COMBINE_FROM * 3 + 7]
            .iter()
            .enumerate()
            .map(|(i, len)| (0..*len).map(|b| (b * 31 + i) as u8).collect())
            .collect();
        let records = |crc: &dyn Fn(&[u8]) -> Option<u32>| -> Vec<WalRecord> {
            let mut at = 0;
            payloads
                .iter()
                .map(|p| {
                    let mut r = record(9, 2, at, 4, p);
                    r.payload_crc = crc(p);
                    at += 4;
                    r
                })
                .collect()
        };
        let (computed, _) = encode(records(&|_| None), 1 << 20);
        let (known, _) = encode(records(&|p| Some(crc32c::crc32c(p))), 1 << 20);
        assert_eq!(known, computed);
        let back: Vec<Bytes> = decode(&known)
            .unwrap()
            .into_iter()
            .map(|r| r.payload)
            .collect();
        assert_eq!(
            back,
            payloads
                .iter()
                .map(|p| Bytes::from(p.clone()))
                .collect::<Vec<_>>()
        );
        // A CRC that is not the payload's is taken as given (for large payloads only), so the
        // block fails its check on every read.
        let (wrong, _) = encode(records(&|p| Some(crc32c::crc32c(p) ^ 1)), 1 << 20);
        assert!(decode(&wrong).is_err());
        let small_only = |p: &[u8]| (p.len() < COMBINE_FROM).then(|| crc32c::crc32c(p) ^ 1);
        assert_eq!(encode(records(&small_only), 1 << 20).0, computed);
    }

    #[test]
    fn a_gap_in_offsets_starts_a_new_span() {
        let records = vec![record(4, 1, 0, 1, b"a"), record(4, 1, 5, 1, b"b")];
        let (object, spans) = encode(records.clone(), 1 << 20);
        assert_eq!(spans.len(), 2);
        assert_eq!(decode(&object).unwrap(), records);
    }

    #[test]
    fn a_wal_object_reads_as_a_committed_object() {
        let records: Vec<WalRecord> = (0..40)
            .map(|i| record(3 + i % 2, 1, i / 2 * 10, 10, &[i as u8; 100]))
            .collect();
        let (object, spans) = encode(records.clone(), 500);
        let (_, index) = object::decode_object_index(&object).unwrap();
        assert!(index.len() > 2, "blocks are cut at about 500 bytes");
        for span in &spans {
            let blocks: Vec<_> = index
                .iter()
                .filter(|e| e.stream_id == span.range.stream_id)
                .collect();
            assert_eq!(blocks.first().unwrap().position, span.range.position);
            let len: u64 = blocks.iter().map(|e| u64::from(e.len)).sum();
            assert_eq!(len, span.range.len);
            let mut batches = Vec::new();
            for entry in blocks {
                let block = object.slice(entry.position as usize..entry.range().end as usize);
                batches.extend(object::decode_block(&block, entry).unwrap());
            }
            let expected: Vec<_> = records
                .iter()
                .filter(|r| r.stream_id == span.range.stream_id)
                .map(|r| (r.base_offset, r.payload.clone()))
                .collect();
            let got: Vec<_> = batches
                .into_iter()
                .map(|b| (b.base_offset, b.payload))
                .collect();
            assert_eq!(got, expected);
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let (object, _) = encode(sample(), 16);
        for len in 0..object.len() {
            let cut = object.slice(..len);
            assert!(decode(&cut).is_err(), "truncated to {len} bytes decoded");
        }
    }

    #[test]
    fn every_flipped_byte_is_an_error() {
        let (object, _) = encode(sample(), 16);
        for at in 0..object.len() {
            let mut bytes = object.to_vec();
            bytes[at] ^= 0x5a;
            assert!(
                decode(&Bytes::from(bytes)).is_err(),
                "flipped byte {at} decoded"
            );
        }
    }

    /// Rewrites the WAL section's trailer field at `at` (relative to the trailer) and its CRC.
    fn patch_trailer(object: &Bytes, at: usize, value: &[u8]) -> Bytes {
        let (range, index) = object::decode_object_index(object).unwrap();
        let trailer = range.start as usize - SECTION_TRAILER_LEN;
        let section = trailer - index.len() * 8;
        let mut bytes = object.to_vec();
        bytes[trailer + at..trailer + at + value.len()].copy_from_slice(value);
        let crc = crc32c::crc32c(&bytes[section..trailer + 4]);
        bytes[trailer + 4..trailer + 8].copy_from_slice(&crc.to_le_bytes());
        Bytes::from(bytes)
    }

    #[test]
    fn bad_magic_version_and_count_are_named() {
        let (object, _) = encode(sample(), 1 << 20);
        assert!(matches!(
            decode(&patch_trailer(&object, 12, b"XKWL")),
            Err(WalFormatError::BadMagic { .. })
        ));
        assert_eq!(
            decode(&patch_trailer(&object, 8, &9u16.to_le_bytes())),
            Err(WalFormatError::UnsupportedVersion { found: 9 })
        );
        assert!(matches!(
            decode(&patch_trailer(&object, 0, &u32::MAX.to_le_bytes())),
            Err(WalFormatError::Layout(_))
        ));
    }

    #[test]
    fn version_1_objects_are_refused_as_unsupported() {
        // The header of version 1: magic, version, reserved, record count, header CRC.
        let mut head = WAL_MAGIC.to_vec();
        head.extend_from_slice(&1u16.to_le_bytes());
        head.extend_from_slice(&[0; 6]);
        let crc = crc32c::crc32c(&head);
        head.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode(&Bytes::from(head)),
            Err(WalFormatError::UnsupportedVersion { found: 1 })
        );
    }

    fn records() -> impl proptest::strategy::Strategy<Value = Vec<WalRecord>> {
        use proptest::prelude::*;
        prop::collection::vec(
            (
                0u64..4,
                1u64..3,
                1u32..4,
                prop::collection::vec(any::<u8>(), 0..64),
            ),
            0..24,
        )
        .prop_map(|specs| {
            // Offsets continue per stream and epoch, as a stream's sequencing assigns them.
            let mut next = std::collections::HashMap::new();
            specs
                .into_iter()
                .map(|(stream_id, epoch, count, payload)| {
                    let at = next.entry((stream_id, epoch)).or_insert(0u64);
                    let base_offset = *at;
                    *at += u64::from(count);
                    WalRecord {
                        stream_id,
                        epoch,
                        base_offset,
                        count,
                        payload: Bytes::from(payload),
                        payload_crc: None,
                    }
                })
                .collect()
        })
    }

    proptest::proptest! {
        #[test]
        fn any_group_round_trips(records in records(), block_bytes in 1usize..300) {
            let (object, spans) = encode(records.clone(), block_bytes);
            proptest::prop_assert_eq!(decode(&object).unwrap(), sorted(records.clone()));
            let (parts, _) = encode_parts(records.clone(), block_bytes);
            proptest::prop_assert_eq!(crate::storage::join_parts(&parts), object.clone());
            let covered: u64 = spans
                .iter()
                .map(|s| s.range.end_offset - s.range.start_offset)
                .sum();
            let offsets: u64 = records.iter().map(|r| u64::from(r.count)).sum();
            proptest::prop_assert_eq!(covered, offsets);
        }

        #[test]
        fn damaged_objects_are_refused_without_panic(
            records in records(),
            flips in proptest::collection::vec((proptest::prelude::any::<usize>(), 1u8..), 1..4),
            cut in proptest::prelude::any::<usize>(),
        ) {
            let (object, _) = encode(records, 64);
            let mut bytes = object.to_vec();
            for (at, mask) in flips {
                let len = bytes.len();
                bytes[at % len] ^= mask;
            }
            if bytes[..] != object[..] {
                proptest::prop_assert!(decode(&Bytes::from(bytes.clone())).is_err());
            }
            let cut = cut % object.len();
            proptest::prop_assert!(decode(&object.slice(..cut)).is_err(), "cut to {}", cut);
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = decode(&Bytes::from(bytes));
        }
    }
}
