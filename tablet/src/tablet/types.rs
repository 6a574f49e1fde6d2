//! The public values a tablet hands out: its offsets, the outcome of an append and of a read, the
//! read's isolation and column selection.

use bytes::Bytes;
use mink_codec::Header;

/// Which offset bounds a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Only durable rows, below the high watermark (the default, and all clients see).
    #[default]
    HighWatermark,
    /// Also rows submitted but not yet durable, below the log end (recovery of derived state).
    LogEnd,
}

/// The three offsets of a tablet at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TabletOffsets {
    /// Oldest retained offset; moves forward on trim.
    pub log_start: u64,
    /// Everything below is durable; the default read bound.
    pub high_watermark: u64,
    /// The next offset to assign.
    pub log_end: u64,
}

/// The outcome of one batch of an append request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendedBatch {
    /// Offset of its first row.
    pub base_offset: u64,
    /// Its rows.
    pub record_count: u32,
    /// The commit timestamp it was stamped with.
    pub commit_timestamp: i64,
    /// Whether it was a retry of a batch already appended (nothing was appended for it; the offsets
    /// are those it got the first time).
    pub duplicate: bool,
}

impl AppendedBatch {
    /// The offset after the batch.
    pub fn next_offset(&self) -> u64 {
        self.base_offset + u64::from(self.record_count)
    }
}

/// The outcome of an append request: one entry per batch, in request order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendResult {
    /// Per batch.
    pub batches: Vec<AppendedBatch>,
    /// The high watermark when the append returned (at least past every batch).
    pub high_watermark: u64,
}

impl AppendResult {
    /// Offset of the request's first row.
    pub fn base_offset(&self) -> u64 {
        self.batches.first().map_or(0, |b| b.base_offset)
    }

    /// The offset after the request's last row.
    pub fn next_offset(&self) -> u64 {
        self.batches.last().map_or(0, AppendedBatch::next_offset)
    }

    /// Whether every batch was a duplicate (the request appended nothing).
    pub fn is_duplicate(&self) -> bool {
        self.batches.iter().all(|b| b.duplicate)
    }
}

/// The columns a read keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Columns {
    /// By name, in this order (stable across schema versions).
    Names(Vec<String>),
    /// By index in each batch's schema, in this order.
    Indices(Vec<usize>),
}

/// One batch as a read returns it: the header and the batch bytes (projected, if asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadBatch {
    /// The header fields.
    pub header: Header,
    /// The whole batch, header included, in the codec's format.
    pub bytes: Bytes,
}

impl ReadBatch {
    /// Offset of the first row.
    pub fn base_offset(&self) -> u64 {
        u64::try_from(self.header.base_offset).unwrap_or(0)
    }

    /// The offset after the batch.
    pub fn next_offset(&self) -> u64 {
        self.base_offset() + u64::try_from(self.header.record_count).unwrap_or(0)
    }
}

/// The outcome of a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    /// Batches in offset order; the first holds `from`.
    pub batches: Vec<ReadBatch>,
    /// Where the next read continues: after the last batch, or `from` if none.
    pub next_offset: u64,
    /// The high watermark when the read was served.
    pub high_watermark: u64,
    /// The log start when the read was served.
    pub log_start: u64,
}

impl ReadResult {
    /// Every batch back to back, as one buffer (the codec's format, as appended).
    pub fn concat(&self) -> Bytes {
        match self.batches.as_slice() {
            [one] => one.bytes.clone(),
            many => {
                let mut out = Vec::with_capacity(many.iter().map(|b| b.bytes.len()).sum());
                for b in many {
                    out.extend_from_slice(&b.bytes);
                }
                Bytes::from(out)
            }
        }
    }
}
