//! Page keys and page values of the block cache, and their encoding in the disk tier.
//!
//! When a disk directory is configured, foyer writes every page through [`foyer::Code`]. The key is
//! 16 bytes: object id (u64 LE) then page index (u64 LE). The value is:
//!
//! | offset | size | field                                                        |
//! |-------:|-----:|--------------------------------------------------------------|
//! | 0      | 4    | magic `b"MKPG"`                                              |
//! | 4      | 1    | format version, `1`                                          |
//! | 5      | 8    | loaded_at: Unix milliseconds when the page was loaded (LE)   |
//! | 13     | 4    | data length `n` (u32 LE), at most [`MAX_PAGE_BYTES`]         |
//! | 17     | 4    | CRC32C of the data (u32 LE)                                  |
//! | 21     | n    | the page's bytes                                             |
//!
//! Decoding checks magic, version, length bound and checksum and returns an error (the disk tier then
//! treats the page as absent) instead of panicking on any input.

use std::io::{Read, Write};

use bytes::Bytes;
use foyer::{Code, Error, ErrorKind};

const MAGIC: [u8; 4] = *b"MKPG";
const VERSION: u8 = 1;
const HEADER_LEN: usize = 21;

/// Largest page the disk format accepts (64 MiB); bounds the allocation made for a corrupt length.
pub(crate) const MAX_PAGE_BYTES: u32 = 64 * 1024 * 1024;

/// Identifies one page: the `page_index`-th `page_size` bytes of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct PageKey {
    pub(crate) object_id: u64,
    pub(crate) page_index: u64,
}

impl Code for PageKey {
    fn encode(&self, writer: &mut impl Write) -> foyer::Result<()> {
        writer
            .write_all(&self.object_id.to_le_bytes())
            .map_err(Error::io_error)?;
        writer
            .write_all(&self.page_index.to_le_bytes())
            .map_err(Error::io_error)
    }

    fn decode(reader: &mut impl Read) -> foyer::Result<Self> {
        let mut buf = [0u8; 16];
        reader.read_exact(&mut buf).map_err(Error::io_error)?;
        let (id, index) = buf.split_at(8);
        Ok(Self {
            object_id: u64::from_le_bytes(id.try_into().map_err(|_| parse_error("key"))?),
            page_index: u64::from_le_bytes(index.try_into().map_err(|_| parse_error("key"))?),
        })
    }

    fn estimated_size(&self) -> usize {
        16
    }
}

/// A cached page and the time it was loaded (for the TTL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Page {
    pub(crate) data: Bytes,
    pub(crate) loaded_at_ms: u64,
}

fn parse_error(what: &'static str) -> Error {
    Error::new(ErrorKind::Parse, "corrupt block cache page").with_context("field", what)
}

impl Code for Page {
    fn encode(&self, writer: &mut impl Write) -> foyer::Result<()> {
        let len = u32::try_from(self.data.len())
            .ok()
            .filter(|len| *len <= MAX_PAGE_BYTES)
            .ok_or_else(|| parse_error("page too large for the disk format"))?;
        let mut header = [0u8; HEADER_LEN];
        header[0..4].copy_from_slice(&MAGIC);
        header[4] = VERSION;
        header[5..13].copy_from_slice(&self.loaded_at_ms.to_le_bytes());
        header[13..17].copy_from_slice(&len.to_le_bytes());
        header[17..21].copy_from_slice(&crc32c::crc32c(&self.data).to_le_bytes());
        writer.write_all(&header).map_err(Error::io_error)?;
        writer.write_all(&self.data).map_err(Error::io_error)
    }

    fn decode(reader: &mut impl Read) -> foyer::Result<Self> {
        let mut header = [0u8; HEADER_LEN];
        reader.read_exact(&mut header).map_err(Error::io_error)?;
        let field =
            |range: std::ops::Range<usize>| header.get(range).ok_or_else(|| parse_error("header"));
        if field(0..4)? != MAGIC {
            return Err(parse_error("magic"));
        }
        if header[4] != VERSION {
            return Err(parse_error("version"));
        }
        let loaded_at_ms = u64::from_le_bytes(
            field(5..13)?
                .try_into()
                .map_err(|_| parse_error("loaded_at"))?,
        );
        let len = u32::from_le_bytes(
            field(13..17)?
                .try_into()
                .map_err(|_| parse_error("length"))?,
        );
        let crc = u32::from_le_bytes(field(17..21)?.try_into().map_err(|_| parse_error("crc"))?);
        if len > MAX_PAGE_BYTES {
            return Err(parse_error("length"));
        }
        let mut data = Vec::with_capacity(len as usize);
        reader
            .take(u64::from(len))
            .read_to_end(&mut data)
            .map_err(Error::io_error)?;
        if data.len() != len as usize {
            return Err(parse_error("truncated data"));
        }
        if crc32c::crc32c(&data) != crc {
            return Err(parse_error("checksum"));
        }
        Ok(Self {
            data: Bytes::from(data),
            loaded_at_ms,
        })
    }

    fn estimated_size(&self) -> usize {
        HEADER_LEN + self.data.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(page: &Page) -> Vec<u8> {
        let mut buf = Vec::new();
        page.encode(&mut buf).expect("encode");
        buf
    }

    #[test]
    fn page_round_trips_and_rejects_every_corruption_without_panicking() {
        let page = Page {
            data: Bytes::from_static(b"hello pages"),
            loaded_at_ms: 42,
        };
        let buf = encoded(&page);
        assert_eq!(Page::decode(&mut buf.as_slice()).expect("decode"), page);

        for cut in 0..buf.len() {
            assert!(
                Page::decode(&mut &buf[..cut]).is_err(),
                "truncated at {cut} accepted"
            );
        }
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x01;
            // Flipping a bit of loaded_at changes the value but is not detectable; all else must fail.
            if (5..13).contains(&i) {
                continue;
            }
            assert!(
                Page::decode(&mut bad.as_slice()).is_err(),
                "bit flip at byte {i} accepted"
            );
        }
        let mut huge = buf.clone();
        huge[13..17].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Page::decode(&mut huge.as_slice()).is_err());
    }

    #[test]
    fn key_round_trips() {
        let key = PageKey {
            object_id: 7,
            page_index: u64::MAX,
        };
        let mut buf = Vec::new();
        key.encode(&mut buf).expect("encode");
        assert_eq!(buf.len(), 16);
        assert_eq!(PageKey::decode(&mut buf.as_slice()).expect("decode"), key);
        assert!(PageKey::decode(&mut &buf[..15]).is_err());
    }
}
