//! The format of metadata values. Every value Mink stores in the metadata KV is one record framed
//! by a small header, so a reader can tell a corrupt value, a value of the wrong kind and a value
//! written by a newer Mink apart, and report each as a typed error instead of misreading it.
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 4 | magic `MKMV` (0x4D 0x4B 0x4D 0x56) |
//! | 4 | 1 | format version, currently 1; a larger version fails with [`MetaError::UnknownVersion`] |
//! | 5 | 1 | record kind (see [`RecordKind`]) |
//! | 6 | 4 | body length n, u32 little-endian |
//! | 10 | 4 | CRC32C of the body, u32 little-endian |
//! | 14 | n | body |
//!
//! Bodies: the id counter is a u64 little-endian (the next id to hand out); a writer snapshot is
//! the snapshot offset as u64 little-endian followed by the opaque snapshot bytes; every other
//! record is a JSON object (serde_json) of the record's fields. Trailing bytes after the body are
//! corruption.

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{MetaError, Result};

/// Magic at the start of every metadata value.
pub const MAGIC: [u8; 4] = *b"MKMV";
/// The format version this build writes and the highest it reads.
pub const FORMAT_VERSION: u8 = 1;
/// Header length in bytes.
pub const HEADER_LEN: usize = 14;

/// Record kinds, byte 5 of the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
#[non_exhaustive]
pub enum RecordKind {
    /// [`crate::TableRecord`].
    Table = 1,
    /// [`crate::StreamRecord`].
    Stream = 2,
    /// [`crate::ObjectRecord`].
    Object = 3,
    /// [`crate::WalReservation`].
    WalReservation = 4,
    /// [`crate::NodeRecord`].
    Node = 5,
    /// [`crate::WriterSnapshot`].
    WriterSnapshot = 6,
    /// An id allocator's counter.
    IdCounter = 7,
    /// [`crate::BucketAssignment`].
    Assignment = 8,
    /// [`crate::RecoveryClaim`].
    Recovery = 9,
    /// [`crate::GroupOffset`].
    GroupOffset = 10,
    /// [`crate::ProducerName`].
    ProducerName = 11,
}

/// A record stored as one metadata value.
pub trait MetaRecord: Sized {
    /// The record's kind byte.
    const KIND: RecordKind;
    /// The body bytes.
    fn encode_body(&self) -> Vec<u8>;
    /// Parses a body (already length- and CRC-checked). `key` is for error messages.
    fn decode_body(key: &str, body: &[u8]) -> Result<Self>;
}

/// Encodes a JSON body.
pub(crate) fn json_body<T: Serialize>(value: &T) -> Vec<u8> {
    // Serialising plain structs of numbers, strings and maps with string keys cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

/// Decodes a JSON body.
pub(crate) fn from_json_body<T: DeserializeOwned>(key: &str, body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| MetaError::Corrupt {
        key: key.to_owned(),
        reason: format!("invalid record body: {e}"),
    })
}

/// Frames `record` as a metadata value.
pub fn encode<R: MetaRecord>(record: &R) -> Bytes {
    let body = record.encode_body();
    let mut out = BytesMut::with_capacity(HEADER_LEN + body.len());
    out.put_slice(&MAGIC);
    out.put_u8(FORMAT_VERSION);
    out.put_u8(R::KIND as u8);
    out.put_u32_le(u32::try_from(body.len()).unwrap_or(u32::MAX));
    out.put_u32_le(crc32c::crc32c(&body));
    out.put_slice(&body);
    out.freeze()
}

/// Parses a metadata value stored at `key` as a record of type `R`. Never panics.
pub fn decode<R: MetaRecord>(key: &str, raw: &[u8]) -> Result<R> {
    let corrupt = |reason: String| MetaError::Corrupt {
        key: key.to_owned(),
        reason,
    };
    if raw.len() < HEADER_LEN {
        return Err(corrupt(format!(
            "value is {} bytes, shorter than the {HEADER_LEN}-byte header",
            raw.len()
        )));
    }
    if raw[0..4] != MAGIC {
        return Err(corrupt(format!(
            "bad magic {:02x?}, expected {MAGIC:02x?}",
            &raw[0..4]
        )));
    }
    let version = raw[4];
    if version == 0 || version > FORMAT_VERSION {
        return Err(MetaError::UnknownVersion {
            key: key.to_owned(),
            version,
            supported: FORMAT_VERSION,
        });
    }
    let kind = raw[5];
    if kind != R::KIND as u8 {
        return Err(MetaError::WrongKind {
            key: key.to_owned(),
            expected: R::KIND as u8,
            found: kind,
        });
    }
    let len = u32::from_le_bytes([raw[6], raw[7], raw[8], raw[9]]) as usize;
    let crc = u32::from_le_bytes([raw[10], raw[11], raw[12], raw[13]]);
    let body = &raw[HEADER_LEN..];
    if body.len() != len {
        return Err(corrupt(format!(
            "header says {len} body bytes, value has {}",
            body.len()
        )));
    }
    let actual = crc32c::crc32c(body);
    if actual != crc {
        return Err(corrupt(format!(
            "body CRC32C is {actual:08x}, header says {crc:08x}"
        )));
    }
    R::decode_body(key, body)
}

/// Reads a little-endian u64 at the start of `body`.
pub(crate) fn read_u64<'a>(key: &str, body: &'a [u8]) -> Result<(u64, &'a [u8])> {
    match body.split_first_chunk::<8>() {
        Some((head, rest)) => Ok((u64::from_le_bytes(*head), rest)),
        None => Err(MetaError::Corrupt {
            key: key.to_owned(),
            reason: format!("body is {} bytes, expected at least 8", body.len()),
        }),
    }
}
