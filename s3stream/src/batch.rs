//! The unit a stream stores: a batch of opaque bytes covering a run of offsets.
//!
//! Appends hand one in, reads hand them out, and every layer between (the log cache, the WAL
//! and committed objects) keeps it whole: a batch is never split or parsed.

use bytes::Bytes;

/// A batch as streams hand it out: its offsets and its opaque bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamBatch {
    /// Offset of the batch's first record.
    pub base_offset: u64,
    /// Offsets the batch covers.
    pub count: u32,
    /// The batch bytes.
    pub payload: Bytes,
}

impl StreamBatch {
    /// The offset after the batch.
    pub fn end_offset(&self) -> u64 {
        self.base_offset + u64::from(self.count)
    }
}
