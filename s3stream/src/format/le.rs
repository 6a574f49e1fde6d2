//! Bounds-checked little-endian reads shared by the decoders of the WAL and committed objects.

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
