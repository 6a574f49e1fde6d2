//! What recovery keeps of a replayed WAL, and which replayed objects it commits as they are.
//!
//! [`keep`] decides, for each open stream found in the WAL, the records recovery keeps: those of
//! the stream's epoch that continue its committed end without a gap, in offset order.
//!
//! [`adopt`] then picks the replayed objects that can be committed as stream-set objects as they
//! are (a WAL object is laid out like one), so that their bytes are not written a second time
//! before the node serves: every span an object holds of an open stream in its epoch is either
//! committed already or kept whole, and it holds one run of each such stream (an object record
//! holds one range per stream). An object holding records past a stream's gap is not adopted:
//! nothing that was never acknowledged is left in an object that outlives recovery. The kept
//! records that no adopted object holds are written anew, in rounds that each hold at most one
//! run of consecutive offsets per stream. If the adopted ranges and those records do not tile
//! exactly what is kept (a record in two objects, a range starting inside a batch), nothing is
//! adopted and recovery writes everything anew, as it did before adoption.

use std::collections::BTreeMap;
use std::ops::Range;

use mink_metadata::{StreamRange, StreamRecord, StreamState};

use crate::batch::StreamBatch;
use crate::engine::compaction::writer::Part;
use crate::wal::WalRecord;
use crate::wal::replay::ReplayedObject;

/// What recovery keeps of one open stream.
pub(super) struct Kept {
    /// The stream's epoch: only its records are kept.
    pub(super) epoch: u64,
    /// The stream's committed end, where the kept records start.
    pub(super) from: u64,
    /// The kept records, at consecutive offsets from `from`.
    pub(super) batches: Vec<StreamBatch>,
}

impl Kept {
    /// Where the kept records end: the stream's committed end after recovery.
    pub(super) fn to(&self) -> u64 {
        self.batches
            .last()
            .map_or(self.from, StreamBatch::end_offset)
    }
}

/// Objects to commit as they are, and the rest of what is kept.
pub(super) struct Adoption {
    /// Replayed objects (by their place in the replay) with the ranges they hold.
    pub(super) objects: Vec<(usize, Vec<StreamRange>)>,
    /// The kept records no adopted object holds: each round at most one run per stream.
    pub(super) rounds: Vec<Vec<Part>>,
}

/// For each open stream found in `objects`, the records of its epoch that continue its committed
/// end without a gap (possibly none).
pub(super) fn keep(
    objects: &[ReplayedObject],
    streams: &BTreeMap<u64, StreamRecord>,
) -> BTreeMap<u64, Kept> {
    let mut per_stream: BTreeMap<u64, Vec<&WalRecord>> = BTreeMap::new();
    for object in objects {
        for record in &object.records {
            per_stream.entry(record.stream_id).or_default().push(record);
        }
    }
    let mut kept = BTreeMap::new();
    for (stream_id, mut records) in per_stream {
        let Some(stream) = streams.get(&stream_id) else {
            continue;
        };
        if stream.state != StreamState::Open {
            continue;
        }
        records.retain(|r| r.epoch == stream.epoch);
        records.sort_by_key(|r| r.base_offset);
        let mut end = stream.end_offset;
        let mut batches = Vec::new();
        for record in records {
            if record.base_offset < end {
                continue;
            }
            if record.base_offset > end {
                tracing::warn!(
                    stream_id,
                    expected = end,
                    found = record.base_offset,
                    "gap in the stream's WAL records; its later records were never acknowledged and are dropped"
                );
                break;
            }
            batches.push(StreamBatch {
                base_offset: record.base_offset,
                count: record.count,
                payload: record.payload.clone(),
            });
            end = record.end_offset();
        }
        kept.insert(
            stream_id,
            Kept {
                epoch: stream.epoch,
                from: stream.end_offset,
                batches,
            },
        );
    }
    kept
}

/// The objects of `objects` to commit as they are and the kept records left to write; `None`
/// when no object can be adopted, or when the two do not tile what is kept.
pub(super) fn adopt(objects: &[ReplayedObject], kept: &BTreeMap<u64, Kept>) -> Option<Adoption> {
    let mut adopted = Vec::new();
    let mut held: BTreeMap<u64, Vec<Range<u64>>> = BTreeMap::new();
    for (at, object) in objects.iter().enumerate() {
        if let Some(ranges) = whole_ranges(object, kept) {
            for range in &ranges {
                held.entry(range.stream_id)
                    .or_default()
                    .push(range.start_offset..range.end_offset);
            }
            adopted.push((at, ranges));
        }
    }
    if adopted.is_empty() {
        return None;
    }
    let mut rounds: Vec<Vec<Part>> = Vec::new();
    for (stream_id, stream) in kept {
        let mut ranges = held.remove(stream_id).unwrap_or_default();
        ranges.sort_by_key(|r| r.start);
        if ranges.windows(2).any(|w| w[0].end > w[1].start) {
            return None;
        }
        let runs = runs_outside(&stream.batches, &ranges)?;
        let in_ranges: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        let in_runs: u64 = runs.iter().flatten().map(|b| u64::from(b.count)).sum();
        if in_ranges + in_runs != stream.to() - stream.from {
            return None;
        }
        for (n, run) in runs.into_iter().enumerate() {
            if rounds.len() <= n {
                rounds.push(Vec::new());
            }
            rounds[n].push(Part::unknown(*stream_id, stream.epoch, run));
        }
    }
    Some(Adoption {
        objects: adopted,
        rounds,
    })
}

/// The ranges `object` holds of streams recovery keeps, when it can be adopted: each such span
/// is committed already, or kept whole and the only one of its stream in the object.
fn whole_ranges(object: &ReplayedObject, kept: &BTreeMap<u64, Kept>) -> Option<Vec<StreamRange>> {
    let mut ranges: Vec<StreamRange> = Vec::new();
    for span in &object.spans {
        let range = &span.range;
        let Some(stream) = kept.get(&range.stream_id) else {
            // Not open here (closed, deleted, or not known): nothing of it is committed.
            continue;
        };
        if span.epoch != stream.epoch || range.end_offset <= stream.from {
            // A fenced owner's leftover, or offsets committed already.
            continue;
        }
        // Spans are in stream order, so a second run of a stream follows its first.
        let again = ranges
            .last()
            .is_some_and(|r| r.stream_id == range.stream_id);
        if range.start_offset < stream.from || range.end_offset > stream.to() || again {
            return None;
        }
        ranges.push(*range);
    }
    (!ranges.is_empty()).then_some(ranges)
}

/// The batches outside `ranges` (sorted, disjoint), in runs of consecutive offsets; `None` when
/// a range starts or ends inside a batch.
fn runs_outside(batches: &[StreamBatch], ranges: &[Range<u64>]) -> Option<Vec<Vec<StreamBatch>>> {
    let mut runs: Vec<Vec<StreamBatch>> = Vec::new();
    let mut next = 0;
    let mut run_end = None;
    for batch in batches {
        while ranges.get(next).is_some_and(|r| r.end <= batch.base_offset) {
            next += 1;
        }
        if let Some(range) = ranges.get(next) {
            if range.start <= batch.base_offset {
                if batch.end_offset() > range.end {
                    return None;
                }
                continue;
            }
            if range.start < batch.end_offset() {
                return None;
            }
        }
        match runs.last_mut() {
            Some(run) if run_end == Some(batch.base_offset) => run.push(batch.clone()),
            _ => runs.push(vec![batch.clone()]),
        }
        run_end = Some(batch.end_offset());
    }
    Some(runs)
}

#[cfg(test)]
#[path = "adopt_tests.rs"]
mod tests;
