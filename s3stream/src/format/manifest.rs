//! The stream manifest, version 1: one small object per stream, written when the stream is
//! created, naming what the stream is for in a label the engine does not parse (the tablet's
//! identity), so that a rebuild from objects can recreate a stream the metadata lost
//! (docs/metadata-recovery.md, "Manifests"). All integers are little-endian.
//!
//! | position | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 4 | magic | `MKSM` |
//! | 4 | 1 | version | 1 |
//! | 5 | 1 | reserved | 0 |
//! | 6 | 8 | stream_id | the stream |
//! | 14 | 4 | label_len | bytes of the label, at most [`MAX_LABEL_LEN`] |
//! | 18 | label_len | label | opaque to the engine |
//! | 18 + label_len | 4 | crc | CRC32C of every byte before it |
//!
//! Decoding never panics: every length is checked against the bytes at hand.

use bytes::{BufMut, Bytes, BytesMut};

use super::le::{Truncated, take, u32_at, u64_at};

/// The first bytes of every stream manifest.
pub const MANIFEST_MAGIC: [u8; 4] = *b"MKSM";
/// The version this module writes and reads.
pub const MANIFEST_VERSION: u8 = 1;
/// The longest label a manifest holds.
pub const MAX_LABEL_LEN: usize = 4096;
/// Bytes before the label.
const HEADER_LEN: usize = 18;

/// A stream and its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamManifest {
    /// The stream.
    pub stream_id: u64,
    /// What the stream is for, in the words of whoever created it.
    pub label: Bytes,
}

/// Why a stream manifest could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestFormatError {
    /// The bytes ended inside a field.
    #[error("stream manifest {0}")]
    Truncated(#[from] Truncated),
    /// Not a stream manifest.
    #[error("not a stream manifest: magic {found:02x?}, expected {MANIFEST_MAGIC:02x?}")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// Written by a version this build does not read.
    #[error(
        "stream manifest version {found} is not supported (this build reads version {MANIFEST_VERSION})"
    )]
    UnsupportedVersion {
        /// The version found.
        found: u8,
    },
    /// The checksum did not match, or a length or reserved byte is wrong.
    #[error("damaged stream manifest: {0}")]
    Damaged(String),
}

impl StreamManifest {
    /// The manifest's bytes. Labels longer than [`MAX_LABEL_LEN`] are refused by the engine
    /// before this is called.
    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::with_capacity(HEADER_LEN + self.label.len() + 4);
        buf.put_slice(&MANIFEST_MAGIC);
        buf.put_u8(MANIFEST_VERSION);
        buf.put_u8(0);
        buf.put_u64_le(self.stream_id);
        buf.put_u32_le(u32::try_from(self.label.len()).unwrap_or(u32::MAX));
        buf.put_slice(&self.label);
        let crc = crc32c::crc32c(&buf);
        buf.put_u32_le(crc);
        buf.freeze()
    }

    /// Decodes a manifest, checking magic, version, lengths and checksum.
    pub fn decode(bytes: &[u8]) -> Result<Self, ManifestFormatError> {
        let header = take(bytes, 0, HEADER_LEN, "header")?;
        let magic: [u8; 4] = [header[0], header[1], header[2], header[3]];
        if magic != MANIFEST_MAGIC {
            return Err(ManifestFormatError::BadMagic { found: magic });
        }
        if header[4] != MANIFEST_VERSION {
            return Err(ManifestFormatError::UnsupportedVersion { found: header[4] });
        }
        if header[5] != 0 {
            return Err(ManifestFormatError::Damaged(
                "the reserved byte is not zero".to_owned(),
            ));
        }
        let stream_id = u64_at(header, 6);
        let label_len = u32_at(header, 14) as usize;
        if label_len > MAX_LABEL_LEN {
            return Err(ManifestFormatError::Damaged(format!(
                "a label of {label_len} bytes is over the limit of {MAX_LABEL_LEN}"
            )));
        }
        let label = take(bytes, HEADER_LEN, label_len, "label")?;
        let crc_at = HEADER_LEN + label_len;
        let stored = u32_at(take(bytes, crc_at, 4, "checksum")?, 0);
        let computed = crc32c::crc32c(&bytes[..crc_at]);
        if stored != computed {
            return Err(ManifestFormatError::Damaged(format!(
                "checksum stored {stored:#010x}, computed {computed:#010x}"
            )));
        }
        if bytes.len() != crc_at + 4 {
            return Err(ManifestFormatError::Damaged(format!(
                "{} bytes after the checksum",
                bytes.len() - crc_at - 4
            )));
        }
        Ok(StreamManifest {
            stream_id,
            label: Bytes::copy_from_slice(label),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_round_trips() {
        let m = StreamManifest {
            stream_id: 42,
            label: Bytes::from_static(br#"{"table":"t","bucket":3}"#),
        };
        assert_eq!(StreamManifest::decode(&m.encode()), Ok(m));
    }

    #[test]
    fn every_damage_is_refused_and_nothing_panics() {
        let good = StreamManifest {
            stream_id: 7,
            label: Bytes::from_static(b"label"),
        }
        .encode();
        for cut in 0..good.len() {
            assert!(
                StreamManifest::decode(&good[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        for at in 0..good.len() {
            let mut bad = good.to_vec();
            bad[at] ^= 0x40;
            assert!(StreamManifest::decode(&bad).is_err(), "flip at {at}");
        }
        let mut long = good.to_vec();
        long.push(0);
        assert!(StreamManifest::decode(&long).is_err());
        let mut newer = good.to_vec();
        newer[4] = 2;
        assert!(matches!(
            StreamManifest::decode(&newer),
            Err(ManifestFormatError::UnsupportedVersion { found: 2 })
        ));
    }
}
