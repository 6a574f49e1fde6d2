//! Bounds-checked little-endian reads shared by the decoders of the WAL and committed objects, and
//! the check of the tag that ends their footer and trailer.

/// A read that came up short: the field being read, where, and how many bytes it needed and
/// found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("truncated in {field} at byte {position}: needed {needed} bytes, {available} left")]
pub struct Truncated {
    /// The field being read.
    pub field: &'static str,
    /// Byte position in the bytes being decoded.
    pub position: usize,
    /// Bytes needed.
    pub needed: usize,
    /// Bytes left.
    pub available: usize,
}

/// `len` bytes at `position`, or how far short the buffer is for `field`.
pub(crate) fn take<'a>(
    bytes: &'a [u8],
    position: usize,
    len: usize,
    field: &'static str,
) -> Result<&'a [u8], Truncated> {
    bytes
        .get(position..)
        .and_then(|rest| rest.get(..len))
        .ok_or(Truncated {
            field,
            position,
            needed: len,
            available: bytes.len().saturating_sub(position),
        })
}

/// The `u32` at `at`. Callers pass slices whose length [`take`] has checked.
pub(crate) fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

/// The `u64` at `at`. Callers pass slices whose length [`take`] has checked.
pub(crate) fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// What is wrong with a tag (see [`check_tag`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TagFault {
    /// Not the expected magic: not this format.
    Magic([u8; 4]),
    /// The expected magic with a version this build does not read.
    Version(u16),
    /// The reserved bytes are not zero.
    Reserved,
}

/// Checks the 8-byte tag at `at` of `bytes` (a slice whose length [`take`] has checked): the
/// version (`u16`), two reserved zero bytes, then the magic. The magic is checked first, so bytes
/// of another format are reported as such rather than as an unknown version.
pub(crate) fn check_tag(
    bytes: &[u8],
    at: usize,
    magic: [u8; 4],
    version: u16,
) -> Result<(), TagFault> {
    let found = [bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]];
    if found != magic {
        return Err(TagFault::Magic(found));
    }
    let found = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    if found != version {
        return Err(TagFault::Version(found));
    }
    if bytes[at + 2..at + 4] != [0, 0] {
        return Err(TagFault::Reserved);
    }
    Ok(())
}
