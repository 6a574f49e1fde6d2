//! The object index: this node's view of which objects hold which offsets of each stream.
//!
//! For each stream, a `BTreeMap` keyed by (range start offset, object id) answers "objects covering
//! stream S from offset a" with one O(log n) search and an in-order walk, never a listing. The
//! index is rebuilt from the object records when [`crate::Metadata`] opens, updated by every commit
//! made through that `Metadata`, and follows other writers' commits through a watch of the objects
//! prefix (etcd across nodes; in-process for memory and redb).
//!
//! Object records are immutable and ids are never reused, so applying a change twice is harmless.
//! A removed id is remembered (a tombstone of 8 bytes) so a late watch event cannot bring it back.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::records::{ObjectRecord, StreamRange};

/// One object range returned by [`ObjectIndex::covering`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoveringRange {
    /// The object holding the range.
    pub object: Arc<ObjectRecord>,
    /// The range of the requested stream inside it.
    pub range: StreamRange,
}

/// One range of a stream's map: the object, and which of its ranges (16 bytes, where a copy of
/// the range took 40 and a lookup of the object by id another probe per answer).
#[derive(Debug)]
struct Entry {
    object: Arc<ObjectRecord>,
    index: u32,
}

impl Entry {
    fn range(&self) -> Option<&StreamRange> {
        self.object.ranges.get(self.index as usize)
    }
}

#[derive(Debug, Default)]
struct State {
    objects: HashMap<u64, Arc<ObjectRecord>>,
    /// Each stream's ranges by (start offset, object id).
    streams: HashMap<u64, BTreeMap<(u64, u64), Entry>>,
    removed: HashSet<u64>,
}

impl State {
    fn insert(&mut self, object: Arc<ObjectRecord>) {
        if self.removed.contains(&object.id) || self.objects.contains_key(&object.id) {
            return;
        }
        for (index, range) in object.ranges.iter().enumerate() {
            let Ok(index) = u32::try_from(index) else {
                break;
            };
            self.streams.entry(range.stream_id).or_default().insert(
                (range.start_offset, object.id),
                Entry {
                    object: Arc::clone(&object),
                    index,
                },
            );
        }
        self.objects.insert(object.id, object);
    }

    fn remove(&mut self, id: u64) {
        self.removed.insert(id);
        let Some(object) = self.objects.remove(&id) else {
            return;
        };
        for range in &object.ranges {
            if let Some(map) = self.streams.get_mut(&range.stream_id) {
                map.remove(&(range.start_offset, id));
                if map.is_empty() {
                    self.streams.remove(&range.stream_id);
                }
            }
        }
    }
}

/// The node-local object index. Cheap to share behind an `Arc`; reads take a shared lock.
#[derive(Debug, Default)]
pub struct ObjectIndex {
    state: RwLock<State>,
}

impl ObjectIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an object (ignored if it was removed before or is already present).
    pub fn insert(&self, object: ObjectRecord) {
        self.state.write().insert(Arc::new(object));
    }

    /// Removes an object and remembers that it is gone.
    pub fn remove(&self, id: u64) {
        self.state.write().remove(id);
    }

    /// Applies one commit: adds then removes.
    pub(crate) fn apply(&self, added: &[ObjectRecord], removed: &[u64]) {
        let mut state = self.state.write();
        for object in added {
            state.insert(Arc::new(object.clone()));
        }
        for id in removed {
            state.remove(*id);
        }
    }

    /// Replaces the contents with `objects` (a fresh read of the store); tombstones are kept.
    pub(crate) fn rebuild(&self, objects: Vec<ObjectRecord>) {
        let mut state = self.state.write();
        let removed = std::mem::take(&mut state.removed);
        *state = State {
            removed,
            ..State::default()
        };
        for object in objects {
            state.insert(Arc::new(object));
        }
    }

    /// Up to `limit` ranges of `stream` in offset order, starting with the one containing `from`
    /// (or, if no range contains it, the first one after it).
    pub fn covering(&self, stream: u64, from: u64, limit: usize) -> Vec<CoveringRange> {
        let state = self.state.read();
        let Some(map) = state.streams.get(&stream) else {
            return Vec::new();
        };
        // The last range starting at or before `from`, if it still contains `from`.
        let start = match map.range(..=(from, u64::MAX)).next_back() {
            Some((key, entry)) if entry.range().is_some_and(|r| r.end_offset > from) => {
                Bound::Included(*key)
            }
            _ => Bound::Excluded((from, u64::MAX)),
        };
        map.range((start, Bound::Unbounded))
            .take(limit)
            .filter_map(|(_, entry)| {
                entry.range().map(|range| CoveringRange {
                    object: Arc::clone(&entry.object),
                    range: *range,
                })
            })
            .collect()
    }

    /// The object with this id, if indexed.
    pub fn object(&self, id: u64) -> Option<Arc<ObjectRecord>> {
        self.state.read().objects.get(&id).cloned()
    }

    /// How many objects are indexed.
    pub fn len(&self) -> usize {
        self.state.read().objects.len()
    }

    /// Whether no object is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::ObjectKind;

    fn object(id: u64, ranges: &[(u64, u64, u64)]) -> ObjectRecord {
        ObjectRecord {
            id,
            kind: ObjectKind::StreamSet,
            key: format!("o/{id}"),
            size: 1 << 20,
            ranges: ranges
                .iter()
                .enumerate()
                .map(|(i, &(stream_id, start_offset, end_offset))| StreamRange {
                    stream_id,
                    start_offset,
                    end_offset,
                    position: i as u64 * 100,
                    len: 100,
                })
                .collect(),
        }
    }

    /// (object id, start, end, position) of each answer.
    fn answer(
        index: &ObjectIndex,
        stream: u64,
        from: u64,
        limit: usize,
    ) -> Vec<(u64, u64, u64, u64)> {
        index
            .covering(stream, from, limit)
            .iter()
            .map(|c| {
                (
                    c.object.id,
                    c.range.start_offset,
                    c.range.end_offset,
                    c.range.position,
                )
            })
            .collect()
    }

    #[test]
    fn covering_names_each_streams_own_range_of_shared_objects() {
        let index = ObjectIndex::new();
        // Stream 1 at 0..10 and 10..20, stream 2 at 0..5 and 5..30, sharing objects 7 and 8.
        index.insert(object(7, &[(1, 0, 10), (2, 0, 5)]));
        index.insert(object(8, &[(2, 5, 30), (1, 10, 20)]));
        assert_eq!(answer(&index, 1, 0, 10), [(7, 0, 10, 0), (8, 10, 20, 100)]);
        assert_eq!(answer(&index, 1, 12, 10), [(8, 10, 20, 100)]);
        assert_eq!(answer(&index, 2, 4, 1), [(7, 0, 5, 100)]);
        assert_eq!(answer(&index, 2, 5, 10), [(8, 5, 30, 0)]);
        // Past the end: nothing; in a gap: the next range.
        assert!(answer(&index, 1, 20, 10).is_empty());
        index.insert(object(9, &[(1, 25, 40)]));
        assert_eq!(answer(&index, 1, 21, 10), [(9, 25, 40, 0)]);
        // A removed object leaves every stream it held, and does not come back.
        index.remove(8);
        assert_eq!(answer(&index, 1, 0, 10), [(7, 0, 10, 0), (9, 25, 40, 0)]);
        assert!(answer(&index, 2, 5, 10).is_empty());
        index.insert(object(8, &[(2, 5, 30), (1, 10, 20)]));
        assert!(answer(&index, 2, 5, 10).is_empty());
        assert_eq!(index.len(), 2);
        assert!(answer(&index, 3, 0, 10).is_empty());
    }
}
