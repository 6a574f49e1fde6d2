//! The plan of a compaction round: WAL object by WAL object (oldest first), whether it is
//! adopted as it is or rewritten, and where each open stream's committed end moves.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use mink_metadata::StreamRange;

use crate::engine::open_stream::OpenStream;
use crate::error::{Result, StreamError};
use crate::wal::WrittenObject;

/// What one round commits.
#[derive(Debug, Default)]
pub(super) struct RoundPlan {
    /// Each stream's new committed end.
    pub(super) ends: BTreeMap<u64, u64>,
    /// WAL objects committed as they are, with the ranges they hold for open streams.
    pub(super) adopt: Vec<(Arc<WrittenObject>, Vec<StreamRange>)>,
    /// Runs of consecutive WAL objects to rewrite: each stream's offsets in the run.
    pub(super) rewrite: Vec<BTreeMap<u64, Range<u64>>>,
}

/// Decides, WAL object by WAL object (oldest first), what a round commits.
pub(super) fn plan_round(
    written: &[Arc<WrittenObject>],
    streams: &HashMap<u64, Arc<OpenStream>>,
    adopt_from: u64,
) -> Result<RoundPlan> {
    let mut plan = RoundPlan::default();
    let mut reached: HashMap<u64, u64> = HashMap::new();
    let mut in_rewrite = false;
    for object in written {
        let mut live = Vec::new();
        let mut whole = true;
        for span in &object.spans {
            let range = &span.range;
            let Some(stream) = streams.get(&range.stream_id) else {
                continue;
            };
            if span.epoch != stream.epoch {
                continue;
            }
            let at = *reached
                .entry(range.stream_id)
                .or_insert_with(|| stream.committed_end.load(Ordering::Acquire));
            if range.end_offset <= at {
                continue;
            }
            if range.start_offset > at {
                return Err(StreamError::Inconsistent {
                    stream_id: range.stream_id,
                    message: format!(
                        "WAL object {} holds offsets from {} but the stream is committed up to {at}",
                        object.key, range.start_offset
                    ),
                });
            }
            whole &= range.start_offset == at;
            live.push((range, at));
            reached.insert(range.stream_id, range.end_offset);
            plan.ends.insert(range.stream_id, range.end_offset);
        }
        if live.is_empty() {
            continue;
        }
        if whole && object.size >= adopt_from {
            plan.adopt.push((
                object.clone(),
                live.into_iter().map(|(range, _)| *range).collect(),
            ));
            in_rewrite = false;
            continue;
        }
        if !in_rewrite {
            plan.rewrite.push(BTreeMap::new());
            in_rewrite = true;
        }
        if let Some(group) = plan.rewrite.last_mut() {
            for (range, from) in live {
                group
                    .entry(range.stream_id)
                    .and_modify(|r| r.end = range.end_offset)
                    .or_insert(from..range.end_offset);
            }
        }
    }
    Ok(plan)
}
