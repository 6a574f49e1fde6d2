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
//! A batch of manifests, version 2, holds the streams one node created together, in one
//! object instead of one each (docs/manifest-batches.md):
//!
//! | position | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 4 | magic | `MKSM` |
//! | 4 | 1 | version | 2 |
//! | 5 | 1 | reserved | 0 |
//! | 6 | 4 | count | manifests that follow, at least 1 |
//! | 10 | ... | manifests | each: stream_id `u64`, label_len `u32`, label |
//! | end - 4 | 4 | crc | CRC32C of every byte before it |
//!
//! Decoding never panics: every length is checked against the bytes at hand.

use bytes::{BufMut, Bytes, BytesMut};

use super::le::{Truncated, take, u32_at, u64_at};

/// The first bytes of every stream manifest.
pub const MANIFEST_MAGIC: [u8; 4] = *b"MKSM";
/// The version of one stream's manifest.
pub const MANIFEST_VERSION: u8 = 1;
/// The version of a batch of manifests.
pub const MANIFEST_BATCH_VERSION: u8 = 2;
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

    /// The bytes of a batch (version 2) holding `manifests`.
    pub fn encode_batch(manifests: &[StreamManifest]) -> Bytes {
        let len: usize = manifests.iter().map(|m| 12 + m.label.len()).sum();
        let mut buf = BytesMut::with_capacity(10 + len + 4);
        buf.put_slice(&MANIFEST_MAGIC);
        buf.put_u8(MANIFEST_BATCH_VERSION);
        buf.put_u8(0);
        buf.put_u32_le(u32::try_from(manifests.len()).unwrap_or(u32::MAX));
        for m in manifests {
            buf.put_u64_le(m.stream_id);
            buf.put_u32_le(u32::try_from(m.label.len()).unwrap_or(u32::MAX));
            buf.put_slice(&m.label);
        }
        let crc = crc32c::crc32c(&buf);
        buf.put_u32_le(crc);
        buf.freeze()
    }

    /// Decodes a manifest object of either version: one stream's (1) or a batch (2).
    pub fn decode_any(bytes: &[u8]) -> Result<Vec<Self>, ManifestFormatError> {
        let head = take(bytes, 0, 6, "header")?;
        if head[..4] != MANIFEST_MAGIC || head[4] != MANIFEST_BATCH_VERSION {
            return Self::decode(bytes).map(|m| vec![m]);
        }
        if head[5] != 0 {
            return Err(ManifestFormatError::Damaged(
                "the reserved byte is not zero".to_owned(),
            ));
        }
        let crc_at = bytes.len().checked_sub(4).filter(|at| *at >= 10).ok_or(
            ManifestFormatError::Damaged("a batch too short for its checksum".to_owned()),
        )?;
        let stored = u32_at(&bytes[crc_at..], 0);
        let computed = crc32c::crc32c(&bytes[..crc_at]);
        if stored != computed {
            return Err(ManifestFormatError::Damaged(format!(
                "checksum stored {stored:#010x}, computed {computed:#010x}"
            )));
        }
        let body = &bytes[..crc_at];
        let count = u32_at(take(body, 6, 4, "count")?, 0) as usize;
        if count == 0 {
            return Err(ManifestFormatError::Damaged("an empty batch".to_owned()));
        }
        // Each manifest takes at least 12 bytes: a count past that is damage, not an
        // allocation to make.
        if count > (body.len() - 10) / 12 {
            return Err(ManifestFormatError::Damaged(format!(
                "a count of {count} in {} bytes",
                body.len()
            )));
        }
        let mut at = 10;
        let mut manifests = Vec::with_capacity(count);
        for _ in 0..count {
            let head = take(body, at, 12, "manifest")?;
            let label_len = u32_at(head, 8) as usize;
            if label_len > MAX_LABEL_LEN {
                return Err(ManifestFormatError::Damaged(format!(
                    "a label of {label_len} bytes is over the limit of {MAX_LABEL_LEN}"
                )));
            }
            let label = take(body, at + 12, label_len, "label")?;
            manifests.push(StreamManifest {
                stream_id: u64_at(head, 0),
                label: Bytes::copy_from_slice(label),
            });
            at += 12 + label_len;
        }
        if at != body.len() {
            return Err(ManifestFormatError::Damaged(format!(
                "{} bytes after the last manifest",
                body.len() - at
            )));
        }
        Ok(manifests)
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
        newer[4] = 3;
        assert!(matches!(
            StreamManifest::decode_any(&newer),
            Err(ManifestFormatError::UnsupportedVersion { found: 3 })
        ));
    }

    fn batch() -> Vec<StreamManifest> {
        (0..3)
            .map(|i| StreamManifest {
                stream_id: 100 + i,
                label: Bytes::from(format!("label {i}").repeat(i as usize)),
            })
            .collect()
    }

    #[test]
    fn a_batch_round_trips_and_a_single_manifest_reads_as_one() {
        let b = batch();
        assert_eq!(
            StreamManifest::decode_any(&StreamManifest::encode_batch(&b)),
            Ok(b.clone())
        );
        assert_eq!(
            StreamManifest::decode_any(&b[1].encode()),
            Ok(vec![b[1].clone()])
        );
    }

    #[test]
    fn every_damage_to_a_batch_is_refused_and_nothing_panics() {
        let good = StreamManifest::encode_batch(&batch());
        for cut in 0..good.len() {
            assert!(
                StreamManifest::decode_any(&good[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        for at in 0..good.len() {
            let mut bad = good.to_vec();
            bad[at] ^= 0x40;
            assert!(StreamManifest::decode_any(&bad).is_err(), "flip at {at}");
        }
        // A count that promises more than the bytes hold, with a good checksum.
        let mut huge = good[..good.len() - 4].to_vec();
        huge[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
        let crc = crc32c::crc32c(&huge);
        huge.extend_from_slice(&crc.to_le_bytes());
        assert!(StreamManifest::decode_any(&huge).is_err());
        let empty = StreamManifest::encode_batch(&[]);
        assert!(StreamManifest::decode_any(&empty).is_err());
    }
}
