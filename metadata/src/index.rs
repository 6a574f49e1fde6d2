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

#[derive(Debug, Default)]
struct State {
    objects: HashMap<u64, Arc<ObjectRecord>>,
    streams: HashMap<u64, BTreeMap<(u64, u64), StreamRange>>,
    removed: HashSet<u64>,
}

impl State {
    fn insert(&mut self, object: Arc<ObjectRecord>) {
        if self.removed.contains(&object.id) || self.objects.contains_key(&object.id) {
            return;
        }
        for range in &object.ranges {
            self.streams
                .entry(range.stream_id)
                .or_default()
                .insert((range.start_offset, object.id), *range);
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
            Some((key, range)) if range.end_offset > from => Bound::Included(*key),
            _ => Bound::Excluded((from, u64::MAX)),
        };
        map.range((start, Bound::Unbounded))
            .take(limit)
            .filter_map(|((_, id), range)| {
                state.objects.get(id).map(|object| CoveringRange {
                    object: Arc::clone(object),
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
