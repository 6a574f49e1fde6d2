//! The metadata log: the typed operations Mink performs on the metadata KV, each one atomic.
//!
//! - Streams: create, open (bumps the epoch, fencing every older owner), close, delete, trim.
//! - [`Metadata::commit`]: one KV transaction that adds objects, removes compacted ones, advances
//!   stream end offsets and retires compacted WAL ids, with a compare on every named stream's
//!   record, so a commit from a stale epoch fails with [`MetaError::Fenced`](crate::MetaError::Fenced) and changes nothing.
//! - The WAL registry: WAL object ids are reserved per block and registered per node, so recovery
//!   finds every uncompacted WAL object without listing the bucket.
//! - Tables, node registrations, writer snapshots and id allocation.
//!
//! The [`ObjectIndex`] is kept current by every commit made here and by a background watch of the
//! objects prefix (other nodes' commits on etcd); the task stops when the `Metadata` is dropped.
//!
//! One file per key family, each with its key layout: `streams.rs`, `commit.rs` (objects and the
//! commit), `wal_registry.rs`, `tables.rs`, `nodes.rs`, `recovery.rs` (claims on
//! dead members' WALs), `writer_snapshots.rs`, `rebuild.rs` (what a rebuild from the object
//! store writes back);
//! `index_follower.rs` keeps the index current, and `cas.rs` holds the typed reads and the
//! compare-and-swap retry loop they all use.

mod cas;
mod commit;
mod group_offsets;
mod index_follower;
mod nodes;
mod producer_names;
mod read;
mod rebuild;
mod recovery;
mod streams;
mod tables;
mod wal_registry;
mod writer_snapshots;

use std::sync::Arc;

use mink_runtime::{Clock, SystemClock};
use tokio::task::JoinHandle;

use crate::alloc::{IdAllocator, IdKind};
use crate::error::Result;
use crate::index::ObjectIndex;
use crate::kv::MetaKv;

pub use commit::{CommitOutcome, CommitRequest};
pub use group_offsets::CommittedOffset;
pub use rebuild::{RebuildChanges, RebuildWritten};
pub use recovery::ClaimOutcome;
pub use tables::AssignmentMove;
pub use wal_registry::WalCompacted;

/// Settings of a [`Metadata`].
#[derive(Debug, Clone)]
pub struct MetadataOptions {
    /// Ids taken per round trip by each allocator (doubling, up to 64 times this, while a burst
    /// uses blocks up within a second of each other). Default 100.
    pub id_block_size: u64,
    /// Attempts of a commit or update that loses a race to an unrelated change. Default 32.
    pub max_attempts: u32,
    /// Follow other writers' object commits with a watch (where the backend has watches). Default on.
    pub watch_objects: bool,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        MetadataOptions {
            id_block_size: 100,
            max_attempts: 32,
            watch_objects: true,
        }
    }
}

/// The metadata log over a [`MetaKv`].
pub struct Metadata {
    kv: Arc<dyn MetaKv>,
    options: MetadataOptions,
    writer_ids: IdAllocator,
    stream_ids: IdAllocator,
    object_ids: IdAllocator,
    index: Arc<ObjectIndex>,
    follower: Option<JoinHandle<()>>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metadata")
            .field("backend", &self.kv.backend())
            .field("options", &self.options)
            .field("indexed_objects", &self.index.len())
            .finish()
    }
}

impl Drop for Metadata {
    fn drop(&mut self) {
        if let Some(task) = self.follower.take() {
            task.abort();
        }
    }
}

impl Metadata {
    /// Opens the metadata log: reads every object record into the index and, if the backend can
    /// watch, follows later object commits in the background.
    pub async fn open(kv: Arc<dyn MetaKv>, options: MetadataOptions) -> Result<Self> {
        Self::open_with_clock(kv, options, Arc::new(SystemClock)).await
    }

    /// [`Metadata::open`], with `clock` for what measures time against the metadata (the lease
    /// sessions of the nodes it serves: [`Metadata::clock`]).
    pub async fn open_with_clock(
        kv: Arc<dyn MetaKv>,
        options: MetadataOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        let index = Arc::new(ObjectIndex::new());
        let follower = index_follower::start(&kv, &index, options.watch_objects).await?;
        let block = options.id_block_size;
        Ok(Metadata {
            writer_ids: IdAllocator::new(Arc::clone(&kv), IdKind::Writer, block),
            stream_ids: IdAllocator::new(Arc::clone(&kv), IdKind::Stream, block),
            object_ids: IdAllocator::new(Arc::clone(&kv), IdKind::Object, block),
            kv,
            options,
            index,
            follower,
            clock,
        })
    }

    /// How many streams one commit may advance within the backend's transaction limit
    /// ([`MetaKv::max_txn_ops`]): each takes a compare and a write, and may add an object of
    /// its own; unlimited where the backend is.
    pub fn streams_per_commit(&self) -> usize {
        self.kv
            .max_txn_ops()
            .map_or(usize::MAX, |ops| (ops.saturating_sub(8) / 3).max(1))
    }

    /// The underlying KV.
    pub fn kv(&self) -> &Arc<dyn MetaKv> {
        &self.kv
    }

    /// The clock it was opened with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The node-local object index.
    pub fn index(&self) -> &Arc<ObjectIndex> {
        &self.index
    }

    /// Re-reads every object record into the index (after a lost watch, or on demand).
    pub async fn rebuild_index(&self) -> Result<()> {
        index_follower::rebuild_index(self.kv.as_ref(), &self.index).await
    }

    // ---- ids ----

    /// A fresh idempotent-writer id (shared by Flight `init_writer` and Kafka `InitProducerId`).
    pub async fn allocate_writer_id(&self) -> Result<u64> {
        self.writer_ids.next().await
    }

    /// The writer-id allocator's high mark: every writer id ever handed out, by any node, is
    /// below it (see [`crate::alloc::high_mark`]).
    pub async fn writer_id_high_mark(&self) -> Result<u64> {
        crate::alloc::high_mark(self.kv.as_ref(), IdKind::Writer).await
    }

    /// A fresh object id.
    pub async fn allocate_object_id(&self) -> Result<u64> {
        self.object_ids.next().await
    }
}
