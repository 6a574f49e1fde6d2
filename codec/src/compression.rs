//! Arrow IPC body compression: which codecs a message may use, and the checks of its compressed
//! buffers before Arrow's decompressor reads them.
//!
//! A compressed record-batch message names one codec in its `BodyCompression` (LZ4_FRAME or
//! ZSTD, method BUFFER). Each non-empty buffer then starts with an 8-byte little-endian length:
//! the buffer's length once decompressed, or -1 when the bytes after it are stored raw (a buffer
//! that did not shrink). Arrow's decompressors allocate that declared length up front, so the
//! lengths are checked here first, and their sum is bounded by [`MAX_UNCOMPRESSED_BODY`]: a few
//! bytes claiming gigabytes are refused before anything is allocated.

use arrow_ipc::{BodyCompressionMethod, CompressionType};

use crate::error::{Error, Result, field};

/// The most bytes the buffers of one compressed message may come to once decompressed: the
/// size of the largest uncompressed append request a tablet takes by default, so a compressed
/// batch never costs the node more memory than an uncompressed one could.
pub const MAX_UNCOMPRESSED_BODY: usize = 64 << 20;

/// Bytes before each compressed buffer's data: its uncompressed length.
const PREFIX: usize = 8;

/// The uncompressed-length prefix of a buffer stored raw.
const RAW: i64 = -1;

/// A codec of the Arrow IPC format's body compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// LZ4 frame format.
    Lz4Frame,
    /// Zstandard at `level` (1 to 22; Arrow's default is 3).
    Zstd {
        /// Compression level; only the writer uses it.
        level: i32,
    },
}

impl Compression {
    /// Arrow's default zstd level.
    pub const ZSTD_DEFAULT_LEVEL: i32 = 3;

    /// Zstandard at Arrow's default level.
    pub const ZSTD: Compression = Compression::Zstd {
        level: Self::ZSTD_DEFAULT_LEVEL,
    };

    /// The codec's name in the Arrow IPC format.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Lz4Frame => "LZ4_FRAME",
            Compression::Zstd { .. } => "ZSTD",
        }
    }

    pub(crate) fn arrow_type(self) -> CompressionType {
        match self {
            Compression::Lz4Frame => CompressionType::LZ4_FRAME,
            Compression::Zstd { .. } => CompressionType::ZSTD,
        }
    }

    /// The codec a message names (a ZSTD message reads with any level; the default is given).
    pub(crate) fn of_arrow(codec: CompressionType) -> Option<Self> {
        match codec {
            CompressionType::LZ4_FRAME => Some(Compression::Lz4Frame),
            CompressionType::ZSTD => Some(Compression::ZSTD),
            _ => None,
        }
    }
}

/// The codec of `rb`'s body, `None` when it is not compressed; an unknown codec or method is an
/// error.
pub(crate) fn of_batch(
    rb: &arrow_ipc::RecordBatch<'_>,
    invalid: &impl Fn(String) -> Error,
) -> Result<Option<Compression>> {
    let Some(body) = rb.compression() else {
        return Ok(None);
    };
    if body.method() != BodyCompressionMethod::BUFFER {
        return Err(invalid(format!(
            "body compression method {:?} is not supported (BUFFER)",
            body.method()
        )));
    }
    Compression::of_arrow(body.codec())
        .map(Some)
        .ok_or_else(|| {
            invalid(format!(
                "body compression codec {:?} is not supported (LZ4_FRAME or ZSTD)",
                body.codec()
            ))
        })
}

/// The length of the buffer at `offset..offset + length` of `body` once decompressed. The range
/// lies in the body (checked before); an empty buffer is empty either way.
/// `body_pos` is the body's position in the caller's buffer, for errors.
pub(crate) fn uncompressed_len(
    body: &[u8],
    body_pos: usize,
    offset: usize,
    length: usize,
) -> Result<usize> {
    if length == 0 {
        return Ok(0);
    }
    let prefix = body
        .get(offset..)
        .and_then(|b| b.get(..PREFIX))
        .filter(|_| length >= PREFIX)
        .and_then(|p| <[u8; PREFIX]>::try_from(p).ok())
        .ok_or(Error::Truncated {
            field: field::ARROW_BODY,
            position: body_pos + offset,
            needed: PREFIX,
            available: length,
        })?;
    match i64::from_le_bytes(prefix) {
        RAW => Ok(length - PREFIX),
        declared => usize::try_from(declared).map_err(|_| Error::BadLength {
            field: field::ARROW_BODY,
            position: body_pos + offset,
            value: declared,
            reason: "a compressed buffer's uncompressed length is negative (only -1, raw, may be)",
        }),
    }
}

/// Checks every buffer of a compressed message's `body` (ranges already checked against it):
/// each holds its prefix, and the uncompressed lengths add up to at most
/// [`MAX_UNCOMPRESSED_BODY`]. Returns that sum. `body_pos` places the body for errors.
pub(crate) fn check_buffers(
    rb: &arrow_ipc::RecordBatch<'_>,
    body: &[u8],
    body_pos: usize,
) -> Result<usize> {
    let mut total = 0usize;
    for buffer in rb.buffers().iter().flatten() {
        let (Ok(offset), Ok(length)) = (
            usize::try_from(buffer.offset()),
            usize::try_from(buffer.length()),
        ) else {
            return Err(Error::BadLength {
                field: field::ARROW_BODY,
                position: body_pos,
                value: buffer.offset().min(buffer.length()),
                reason: "negative buffer offset or length",
            });
        };
        total = total.saturating_add(uncompressed_len(body, body_pos, offset, length)?);
        if total > MAX_UNCOMPRESSED_BODY {
            return Err(Error::Decompression {
                position: body_pos,
                declared: total,
                max: MAX_UNCOMPRESSED_BODY,
            });
        }
    }
    Ok(total)
}

/// Whether the compressed message `meta` with `body`, as Arrow's writer made it, stays within
/// [`MAX_UNCOMPRESSED_BODY`] once decompressed.
pub(crate) fn within_bound(meta: &[u8], body: &[u8]) -> bool {
    arrow_ipc::root_as_message(meta)
        .ok()
        .and_then(|m| m.header_as_record_batch())
        .is_some_and(|rb| check_buffers(&rb, body, 0).is_ok())
}
