//! The public view of the writer windows, as [`Tablet::writers`](crate::Tablet::writers) reports
//! them.

use super::window::{Entry, Windows, add_sequence, next_sequence};

/// A retained batch, as [`Tablet::writers`](crate::Tablet::writers) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterBatch {
    /// The batch's sequence.
    pub sequence: i32,
    /// Its first offset.
    pub base_offset: u64,
    /// Its rows.
    pub record_count: u32,
    /// Its commit timestamp.
    pub commit_timestamp: i64,
    /// Whether it is below the high watermark.
    pub durable: bool,
}

/// One writer's window, as [`Tablet::writers`](crate::Tablet::writers) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterState {
    /// The writer id (the allocated id, without the epoch).
    pub writer_id: i64,
    /// Its current epoch.
    pub epoch: i16,
    /// Whether its newest batch's sequence counts records.
    pub counts_records: bool,
    /// Its retained batches, oldest first (at most five).
    pub batches: Vec<WriterBatch>,
}

impl WriterState {
    /// The sequence the writer must send next.
    pub fn next_sequence(&self) -> Option<i32> {
        self.batches.last().map(|b| {
            if self.counts_records {
                add_sequence(b.sequence, b.record_count)
            } else {
                next_sequence(b.sequence)
            }
        })
    }
}

impl WriterBatch {
    fn of(entry: &Entry, high_watermark: u64) -> WriterBatch {
        WriterBatch {
            sequence: entry.sequence,
            base_offset: entry.base_offset,
            record_count: u32::try_from(entry.offset_delta).unwrap_or(0) + 1,
            commit_timestamp: entry.timestamp,
            durable: entry.end_offset() <= high_watermark,
        }
    }
}

impl Windows {
    /// The public view of every writer (entries of failed appends left out), sorted by writer id.
    pub(crate) fn states(&self, high_watermark: u64) -> Vec<WriterState> {
        let mut out: Vec<WriterState> = self
            .iter()
            .map(|(writer_id, window)| WriterState {
                writer_id,
                epoch: window.epoch,
                counts_records: window.entries.back().is_some_and(|e| e.records),
                batches: window
                    .entries
                    .iter()
                    .take_while(|e| !e.failed())
                    .map(|e| WriterBatch::of(e, high_watermark))
                    .collect(),
            })
            .filter(|w| !w.batches.is_empty())
            .collect();
        out.sort_by_key(|w| w.writer_id);
        out
    }
}
