//! Bounds-checked little-endian reads shared by the decoders of the WAL and committed objects.

/// A checked read that came up short: what was asked at `position` and what was left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Short {
    pub(crate) position: usize,
    pub(crate) needed: usize,
    pub(crate) available: usize,
}

/// `len` bytes at `position`, or how far short the buffer is.
pub(crate) fn take(bytes: &[u8], position: usize, len: usize) -> Result<&[u8], Short> {
    bytes
        .get(position..)
        .and_then(|rest| rest.get(..len))
        .ok_or(Short {
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
