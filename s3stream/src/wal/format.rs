//! The WAL object format, version 1.
//!
//! One WAL object holds one group commit: the records of any number of streams, in submission
//! order. All integers are little-endian.
//!
//! Object header (16 bytes):
//!
//! | position | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 4 | magic | `MKWL` |
//! | 4 | 2 | version | 1 |
//! | 6 | 2 | reserved | 0 |
//! | 8 | 4 | record_count | records that follow |
//! | 12 | 4 | header_crc | CRC32C of bytes 0..12 |
//!
//! Then `record_count` records, each a 36-byte record header followed by its payload:
//!
//! | position | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 8 | stream_id | the stream the batch belongs to |
//! | 8 | 8 | epoch | the stream's epoch when the batch was appended (recovery fences on it) |
//! | 16 | 8 | base_offset | offset of the batch's first record |
//! | 24 | 4 | count | offsets the batch covers (at least 1) |
//! | 28 | 4 | payload_len | bytes of payload that follow |
//! | 32 | 4 | crc | CRC32C of bytes 0..32 of this header, then of the payload |
//! | 36 | payload_len | payload | the batch, opaque to s3stream |
//!
//! Nothing follows the last record. The object is self-delimiting, so a truncated or padded
//! object is detected. Decoding never panics: every length is checked before it is used.

use bytes::{BufMut, Bytes, BytesMut};

use crate::le::{u32_at, u64_at};

/// First bytes of every WAL object.
pub const WAL_MAGIC: [u8; 4] = *b"MKWL";
/// The version this module writes and reads.
pub const WAL_VERSION: u16 = 1;
/// Bytes of the object header.
pub const OBJECT_HEADER_LEN: usize = 16;
/// Bytes of a record header.
pub const RECORD_HEADER_LEN: usize = 36;

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
}

impl WalRecord {
    /// The offset after the batch.
    pub fn end_offset(&self) -> u64 {
        self.base_offset + u64::from(self.count)
    }

    /// Bytes this record takes in a WAL object.
    pub fn encoded_len(&self) -> usize {
        RECORD_HEADER_LEN + self.payload.len()
    }
}

/// Why a WAL object could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WalFormatError {
    /// The object ended inside a header or payload.
    #[error(
        "WAL object truncated in {field} at byte {position}: needed {needed} bytes, {available} left"
    )]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Byte position in the object.
        position: usize,
        /// Bytes needed.
        needed: usize,
        /// Bytes left.
        available: usize,
    },
    /// The object does not start with [`WAL_MAGIC`].
    #[error("not a WAL object: magic {found:02x?} at byte 0, expected {WAL_MAGIC:02x?}")]
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
    /// A record claims to cover no offsets.
    #[error("WAL record at byte {position} covers no offsets")]
    EmptyRecord {
        /// Byte position of the record header.
        position: usize,
    },
    /// Bytes remain after the last record.
    #[error("WAL object has {extra} bytes after its last record (at byte {position})")]
    TrailingBytes {
        /// Where the extra bytes start.
        position: usize,
        /// How many there are.
        extra: usize,
    },
}

/// Encodes `records` as one WAL object.
pub fn encode(records: &[WalRecord]) -> Bytes {
    let len = OBJECT_HEADER_LEN + records.iter().map(WalRecord::encoded_len).sum::<usize>();
    let mut buf = BytesMut::with_capacity(len);
    buf.put_slice(&WAL_MAGIC);
    buf.put_u16_le(WAL_VERSION);
    buf.put_u16_le(0);
    buf.put_u32_le(u32::try_from(records.len()).unwrap_or(u32::MAX));
    let crc = crc32c::crc32c(&buf[..12]);
    buf.put_u32_le(crc);
    for record in records {
        let start = buf.len();
        buf.put_u64_le(record.stream_id);
        buf.put_u64_le(record.epoch);
        buf.put_u64_le(record.base_offset);
        buf.put_u32_le(record.count);
        buf.put_u32_le(u32::try_from(record.payload.len()).unwrap_or(u32::MAX));
        let crc = crc32c::crc32c_append(crc32c::crc32c(&buf[start..]), &record.payload);
        buf.put_u32_le(crc);
        buf.put_slice(&record.payload);
    }
    buf.freeze()
}

/// Decodes a WAL object. Payloads share the object's buffer (no copy).
pub fn decode(object: &Bytes) -> Result<Vec<WalRecord>, WalFormatError> {
    let header = take(object, 0, OBJECT_HEADER_LEN, "object header")?;
    let magic = [header[0], header[1], header[2], header[3]];
    if magic != WAL_MAGIC {
        return Err(WalFormatError::BadMagic { found: magic });
    }
    let stored = u32_at(header, 12);
    let computed = crc32c::crc32c(&header[..12]);
    if stored != computed {
        return Err(WalFormatError::CrcMismatch {
            field: "object header",
            position: 0,
            stored,
            computed,
        });
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    if version != WAL_VERSION {
        return Err(WalFormatError::UnsupportedVersion { found: version });
    }
    let count = u32_at(header, 8) as usize;
    // Never trust the count for an allocation larger than the object could hold.
    let mut records = Vec::with_capacity(count.min(object.len() / RECORD_HEADER_LEN));
    let mut position = OBJECT_HEADER_LEN;
    for _ in 0..count {
        let head = take(object, position, RECORD_HEADER_LEN, "record header")?;
        let record_count = u32_at(head, 24);
        let payload_len = u32_at(head, 28) as usize;
        let stored = u32_at(head, 32);
        let payload_start = position + RECORD_HEADER_LEN;
        let payload = take(object, payload_start, payload_len, "record payload")?;
        let computed = crc32c::crc32c_append(crc32c::crc32c(&head[..32]), payload);
        if stored != computed {
            return Err(WalFormatError::CrcMismatch {
                field: "record",
                position,
                stored,
                computed,
            });
        }
        if record_count == 0 {
            return Err(WalFormatError::EmptyRecord { position });
        }
        records.push(WalRecord {
            stream_id: u64_at(head, 0),
            epoch: u64_at(head, 8),
            base_offset: u64_at(head, 16),
            count: record_count,
            payload: object.slice(payload_start..payload_start + payload_len),
        });
        position = payload_start + payload_len;
    }
    if position != object.len() {
        return Err(WalFormatError::TrailingBytes {
            position,
            extra: object.len() - position,
        });
    }
    Ok(records)
}

/// `len` bytes at `position`, or a truncation error naming `field`.
fn take<'a>(
    bytes: &'a [u8],
    position: usize,
    len: usize,
    field: &'static str,
) -> Result<&'a [u8], WalFormatError> {
    crate::le::take(bytes, position, len).map_err(|short| WalFormatError::Truncated {
        field,
        position: short.position,
        needed: short.needed,
        available: short.available,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<WalRecord> {
        vec![
            WalRecord {
                stream_id: 7,
                epoch: 2,
                base_offset: 100,
                count: 3,
                payload: Bytes::from_static(b"first batch"),
            },
            WalRecord {
                stream_id: 9,
                epoch: 1,
                base_offset: 0,
                count: 1,
                payload: Bytes::new(),
            },
        ]
    }

    #[test]
    fn round_trip() {
        let records = sample();
        let object = encode(&records);
        assert_eq!(
            object.len(),
            OBJECT_HEADER_LEN + records.iter().map(WalRecord::encoded_len).sum::<usize>()
        );
        assert_eq!(decode(&object).unwrap(), records);
        assert_eq!(decode(&encode(&[])).unwrap(), vec![]);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let object = encode(&sample());
        for len in 0..object.len() {
            let cut = object.slice(..len);
            assert!(decode(&cut).is_err(), "truncated to {len} bytes decoded");
        }
    }

    #[test]
    fn every_flipped_byte_is_an_error() {
        let object = encode(&sample());
        for at in 0..object.len() {
            let mut bytes = object.to_vec();
            bytes[at] ^= 0x5a;
            assert!(
                decode(&Bytes::from(bytes)).is_err(),
                "flipped byte {at} decoded"
            );
        }
    }

    #[test]
    fn trailing_bytes_are_an_error() {
        let mut bytes = encode(&sample()).to_vec();
        bytes.push(0);
        assert!(matches!(
            decode(&Bytes::from(bytes)),
            Err(WalFormatError::TrailingBytes { extra: 1, .. })
        ));
    }

    #[test]
    fn bad_magic_and_version_are_named() {
        let mut bytes = encode(&sample()).to_vec();
        bytes[0] = b'X';
        assert!(matches!(
            decode(&Bytes::from(bytes)),
            Err(WalFormatError::BadMagic { .. })
        ));
        let mut bytes = encode(&sample()).to_vec();
        bytes[4] = 9;
        let crc = crc32c::crc32c(&bytes[..12]);
        bytes[12..16].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode(&Bytes::from(bytes)),
            Err(WalFormatError::UnsupportedVersion { found: 9 })
        );
    }

    #[test]
    fn a_huge_record_count_does_not_allocate_or_panic() {
        let mut bytes = encode(&[]).to_vec();
        bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        let crc = crc32c::crc32c(&bytes[..12]);
        bytes[12..16].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            decode(&Bytes::from(bytes)),
            Err(WalFormatError::Truncated { .. })
        ));
    }
}
