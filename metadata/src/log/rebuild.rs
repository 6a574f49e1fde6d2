//! Rebuild: writing back what a listing of the object store found (docs/metadata-recovery.md,
//! "Rebuild"). The object store is read and the changes worked out by the stream engine's
//! rebuild; this writes them, while no node runs on the store.
//!
//! Writes go in the order that keeps an interrupted rebuild safe to run again: object records
//! first (a record the next run finds is known to it), then stream records, then the removal of
//! records whose objects are gone and of the WAL registry.

use super::Metadata;
use super::read::SCAN_PAGE;
use crate::error::Result;
use crate::keys;
use crate::kv::{MetaKvExt, Op, apply_unconditional};
use crate::records::{ObjectRecord, StreamRecord};
use crate::value::encode;

/// What a rebuild writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebuildChanges {
    /// Object records to write (new ones, and known ones whose ranges changed).
    pub put_objects: Vec<ObjectRecord>,
    /// Object records to delete (their objects are gone, or every range they held is
    /// superseded).
    pub remove_objects: Vec<u64>,
    /// Stream records to write as given (ends, starts and epochs moved).
    pub streams: Vec<StreamRecord>,
    /// Delete every WAL reservation: what the WALs hold is placed by the rebuild itself, and a
    /// recovery that replayed a WAL object the rebuild committed would delete it.
    pub clear_wal_registry: bool,
}

/// What [`Metadata::apply_rebuild`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RebuildWritten {
    /// Object records written.
    pub objects_put: usize,
    /// Object records deleted.
    pub objects_removed: usize,
    /// Stream records written.
    pub streams: usize,
    /// WAL reservations deleted.
    pub wal_reservations_removed: usize,
}

impl Metadata {
    /// Writes `changes` (see the module's notes on order), then reads the object index afresh. Every object record is validated before anything is written.
    pub async fn apply_rebuild(&self, changes: &RebuildChanges) -> Result<RebuildWritten> {
        for object in &changes.put_objects {
            object.validate()?;
        }
        let reservations = if changes.clear_wal_registry {
            self.kv.scan_all(keys::WAL, SCAN_PAGE).await?
        } else {
            Vec::new()
        };
        let mut ops = Vec::new();
        ops.extend(
            changes
                .put_objects
                .iter()
                .map(|o| Op::put(keys::object(o.id), encode(o))),
        );
        ops.extend(
            changes
                .streams
                .iter()
                .map(|s| Op::put(keys::stream(s.id), encode(s))),
        );
        ops.extend(
            changes
                .remove_objects
                .iter()
                .map(|id| Op::delete(keys::object(*id))),
        );
        ops.extend(reservations.iter().map(|kv| Op::delete(kv.key.clone())));
        apply_unconditional(self.kv.as_ref(), ops, "rebuild").await?;
        // Known records may have been rewritten in place: read the index afresh.
        self.rebuild_index().await?;
        Ok(RebuildWritten {
            objects_put: changes.put_objects.len(),
            objects_removed: changes.remove_objects.len(),
            streams: changes.streams.len(),
            wal_reservations_removed: reservations.len(),
        })
    }
}
