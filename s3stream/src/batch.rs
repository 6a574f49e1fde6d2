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

/// A batch on its way into a committed object, with its payload's CRC32C when the write path
/// already knows it (the log cache keeps the one the appender derived from the checks it made
/// on arrival), so that the object's block CRC is extended over the payload without reading it
/// again; `None` when it must be computed (batches recovered or read back from objects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KnownBatch {
    pub(crate) batch: StreamBatch,
    pub(crate) payload_crc: Option<u32>,
}

impl KnownBatch {
    /// A batch whose payload's CRC is not known.
    pub(crate) fn unknown(batch: StreamBatch) -> Self {
        Self {
            batch,
            payload_crc: None,
        }
    }
}
