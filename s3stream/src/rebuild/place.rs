//! Placing what a listing found: for each stream, the chain of ranges from its log start to
//! its end, made of the ranges the metadata knows and blocks of objects it does not
//! (docs/metadata-recovery.md, "Rebuild"). Pure: no I/O, so every rule is tested here.
//!
//! Per stream, from the lowest offset any piece holds above the stream's log start:
//! - a known range starting at the chain's end is taken (known records are never changed);
//! - else a found block starting exactly there, ending at or before the next known range,
//!   continuing its object's run for the stream (one range per stream per object, so a run
//!   goes on only from the block just placed): a block of a
//!   committed object before a WAL block, then the higher epoch, then the same object as the
//!   block before, then the one reaching further;
//! - a WAL block of an epoch lower than one whose blocks start at or before it is a fenced
//!   owner's leftover and never placed.
//!
//! The chain stops where nothing admissible starts at its end; what lies at or beyond it is
//! reported as a [`Hole`].

use std::collections::BTreeMap;

use mink_metadata::{ObjectKind, ObjectRecord, StreamRange, StreamRecord, StreamState};

use crate::format::object::BlockEntry;

/// An object on the store that the metadata does not know, with its index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FoundObject {
    /// Its key.
    pub(crate) key: String,
    /// Its size in bytes.
    pub(crate) size: u64,
    /// Whether it is a WAL object.
    pub(crate) wal: bool,
    /// Its index entries in object order, each with its epoch for WAL objects.
    pub(crate) blocks: Vec<(BlockEntry, Option<u64>)>,
}

impl FoundObject {
    /// The kind of record it gets: a stream object when a committed object holds one stream.
    pub(crate) fn kind(&self) -> ObjectKind {
        let mut streams = self.blocks.iter().map(|(b, _)| b.stream_id);
        let first = streams.next();
        if !self.wal && streams.all(|s| Some(s) == first) {
            ObjectKind::Stream
        } else {
            ObjectKind::StreamSet
        }
    }
}

/// Offsets of one stream that could not be placed: no object holds `from`, or the objects
/// that hold it cannot be recorded (see the module's rules). The stream is placed up to `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Hole {
    /// The stream.
    pub stream_id: u64,
    /// The first offset not placed.
    pub from: u64,
    /// The end of what was found past it, or the stream's recorded end if that is further.
    pub to: u64,
}

/// What placing decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Placement {
    /// Per found object (by index), the ranges to record, in stream order.
    pub(crate) ranges: BTreeMap<usize, Vec<StreamRange>>,
    /// Stream records whose start, end or epoch moved.
    pub(crate) streams: Vec<StreamRecord>,
    /// Blocks of streams with no record (created after the snapshot), per stream: blocks, bytes.
    pub(crate) unknown_streams: BTreeMap<u64, (u64, u64)>,
    /// Offsets that no object holds, between what was placed and what lies beyond.
    pub(crate) holes: Vec<Hole>,
    /// Streams whose log start moved up to the lowest offset found: `(stream, from, to)`.
    pub(crate) starts_moved: Vec<(u64, u64, u64)>,
}

/// A found block that may extend a stream's chain.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    object: usize,
    block: usize,
    entry: BlockEntry,
    epoch: Option<u64>,
}

impl Candidate {
    /// The order of preference at one offset (greatest first): committed, epoch, same object,
    /// reach, and last the object's position for a stable choice.
    fn rank(&self, previous: Option<usize>) -> (bool, u64, bool, u64, usize) {
        (
            self.epoch.is_none(),
            self.epoch.unwrap_or(0),
            previous == Some(self.object),
            self.entry.end_offset,
            usize::MAX - self.object,
        )
    }
}

/// Places `found` against the streams and the known records whose objects are present.
pub(crate) fn place(
    streams: &BTreeMap<u64, StreamRecord>,
    known: &[ObjectRecord],
    found: &[FoundObject],
) -> Placement {
    let mut placement = Placement::default();
    let mut known_by_stream: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for record in known {
        for r in &record.ranges {
            known_by_stream
                .entry(r.stream_id)
                .or_default()
                .push((r.start_offset, r.end_offset));
        }
    }
    let mut candidates: BTreeMap<u64, Vec<Candidate>> = BTreeMap::new();
    for (object, f) in found.iter().enumerate() {
        for (block, (entry, epoch)) in f.blocks.iter().enumerate() {
            if streams.contains_key(&entry.stream_id) {
                candidates
                    .entry(entry.stream_id)
                    .or_default()
                    .push(Candidate {
                        object,
                        block,
                        entry: *entry,
                        epoch: *epoch,
                    });
            } else {
                let unknown = placement
                    .unknown_streams
                    .entry(entry.stream_id)
                    .or_default();
                unknown.0 += 1;
                unknown.1 += u64::from(entry.len);
            }
        }
    }
    let mut runs: BTreeMap<(usize, u64), (usize, usize)> = BTreeMap::new();
    for (id, record) in streams {
        if record.state == StreamState::Deleted {
            continue;
        }
        let mut known = known_by_stream.remove(id).unwrap_or_default();
        known.sort_unstable();
        let found = unfenced(candidates.remove(id).unwrap_or_default());
        place_stream(record, &known, &found, &mut runs, &mut placement);
    }
    for ((object, stream_id), (first, last)) in runs {
        let f = &found[object];
        let (first, last) = (f.blocks[first].0, f.blocks[last].0);
        placement
            .ranges
            .entry(object)
            .or_default()
            .push(StreamRange {
                stream_id,
                start_offset: first.start_offset,
                end_offset: last.end_offset,
                position: first.position,
                len: last.range().end - first.position,
            });
    }
    placement
}

/// Drops WAL blocks of an epoch lower than one whose blocks start at or before them.
fn unfenced(candidates: Vec<Candidate>) -> Vec<Candidate> {
    let mut first_start: BTreeMap<u64, u64> = BTreeMap::new();
    for c in &candidates {
        if let Some(epoch) = c.epoch {
            let start = first_start.entry(epoch).or_insert(u64::MAX);
            *start = (*start).min(c.entry.start_offset);
        }
    }
    candidates
        .into_iter()
        .filter(|c| {
            c.epoch.is_none_or(|epoch| {
                !first_start
                    .range(epoch + 1..)
                    .any(|(_, start)| *start <= c.entry.start_offset)
            })
        })
        .collect()
}

/// The chain of one stream: which found blocks extend it (into `runs`, keyed by object and
/// stream, as first and last block), its moved record and its holes (into `placement`).
fn place_stream(
    record: &StreamRecord,
    known: &[(u64, u64)],
    found: &[Candidate],
    runs: &mut BTreeMap<(usize, u64), (usize, usize)>,
    placement: &mut Placement,
) {
    let id = record.id;
    let max_epoch = found.iter().filter_map(|c| c.epoch).max().unwrap_or(0);
    let lowest = known
        .iter()
        .map(|(start, end)| (*start, *end))
        .chain(
            found
                .iter()
                .map(|c| (c.entry.start_offset, c.entry.end_offset)),
        )
        .filter(|(_, end)| *end > record.start_offset)
        .map(|(start, _)| start)
        .min();
    let mut moved = record.clone();
    moved.epoch = moved.epoch.max(max_epoch);
    if let Some(lowest) = lowest {
        let mut at = lowest;
        let mut previous: Option<usize> = None;
        loop {
            if let Some((_, end)) = known.iter().find(|(start, _)| *start == at) {
                at = *end;
                previous = None;
                continue;
            }
            let limit = known
                .iter()
                .map(|(start, _)| *start)
                .filter(|start| *start > at)
                .min()
                .unwrap_or(u64::MAX);
            let best = found
                .iter()
                .filter(|c| c.entry.start_offset == at && c.entry.end_offset <= limit)
                .filter(|c| {
                    // An object's run for the stream continues only from the block just placed.
                    runs.get(&(c.object, id))
                        .is_none_or(|(_, last)| previous == Some(c.object) && *last + 1 == c.block)
                })
                .max_by_key(|c| c.rank(previous));
            let Some(best) = best else { break };
            runs.entry((best.object, id))
                .and_modify(|(_, last)| *last = best.block)
                .or_insert((best.block, best.block));
            previous = Some(best.object);
            at = best.entry.end_offset;
        }
        // Whatever lies at or past the chain's end could not be placed.
        let rest = known
            .iter()
            .filter(|(start, _)| *start >= at)
            .map(|(_, end)| *end)
            .chain(found.iter().map(|c| c.entry.end_offset))
            .chain([record.end_offset])
            .max()
            .unwrap_or(at);
        if rest > at {
            placement.holes.push(Hole {
                stream_id: id,
                from: at,
                to: rest,
            });
        }
        if lowest > record.start_offset {
            placement
                .starts_moved
                .push((id, record.start_offset, lowest));
            moved.start_offset = lowest;
        }
        moved.end_offset = moved.end_offset.max(at);
    } else if record.end_offset > record.start_offset {
        placement.holes.push(Hole {
            stream_id: id,
            from: record.start_offset,
            to: record.end_offset,
        });
    }
    moved.start_offset = moved.start_offset.min(moved.end_offset);
    if moved != *record {
        placement.streams.push(moved);
    }
}

/// Records for the found objects that hold placed ranges, with ids from `ids` (one per object,
/// in object order).
pub(crate) fn records(
    found: &[FoundObject],
    placement: &Placement,
    ids: &mut impl Iterator<Item = u64>,
) -> Vec<ObjectRecord> {
    let mut out = Vec::new();
    for (object, ranges) in &placement.ranges {
        let Some(id) = ids.next() else { break };
        let f = &found[*object];
        out.push(ObjectRecord {
            id,
            kind: f.kind(),
            key: f.key.clone(),
            size: f.size,
            ranges: ranges.clone(),
        });
    }
    out
}

/// The found objects that hold no placed range (superseded, fenced or of unknown streams).
pub(crate) fn unplaced<'a>(
    found: &'a [FoundObject],
    placement: &'a Placement,
) -> impl Iterator<Item = &'a FoundObject> {
    found
        .iter()
        .enumerate()
        .filter(|(i, _)| !placement.ranges.contains_key(i))
        .map(|(_, f)| f)
}

#[cfg(test)]
#[path = "place_tests.rs"]
mod tests;
