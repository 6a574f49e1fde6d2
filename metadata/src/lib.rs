//! Mink's metadata: the one place where Mink keeps what must be agreed on across restarts and nodes.
//!
//! - [`kv`]: the [`MetaKv`] trait (get, put, delete, transactions with version compares, prefix
//!   scans, watches, leases) and its backends [`MemoryKv`], [`RedbKv`], [`EtcdKv`].
//! - [`value`]: the format of every metadata value (magic, version, kind, CRC32C, body).
//! - [`records`] and [`keys`]: the typed records and where they live.
//! - [`alloc`]: block-allocating id allocators for writer, stream and object ids.
//! - [`log`]: the metadata log ([`Metadata`]): stream lifecycle with epochs, atomic fenced commits of
//!   objects and offsets, trims, the WAL registry, tables, nodes, writer snapshots; one file per key
//!   family under `log/`, each with its key layout.
//! - [`index`]: the node-local object index answering "objects covering stream S from offset a".
//! - [`election`]: [`Election`], one leader among live members and the fence of its decisions.
//! - [`lease`]: [`LeaseSession`], one lease kept alive for a node's life, and the deadline until
//!   which the node may act on it (docs/cluster.md, the acknowledgement rule).

pub mod alloc;
pub mod election;
pub mod error;
pub mod index;
pub mod keys;
pub mod kv;
pub mod lease;
pub mod log;
pub mod records;
pub mod snapshot;
pub mod value;

pub use alloc::{IdAllocator, IdKind};
pub use election::Election;
pub use error::{ErrorKind, MetaError, Result};
pub use index::{CoveringRange, ObjectIndex};
pub use kv::{
    CasOutcome, Compare, EtcdKv, KeyValue, Lease, LeaseId, LeaseKeeper, MemoryKv, MetaKv,
    MetaKvExt, Op, RedbKv, ScanPage, Txn, TxnOutcome, WatchEvent, WatchStream,
};
pub use lease::{LeaseSession, SessionState};
pub use log::{
    AssignmentMove, ClaimOutcome, CommitOutcome, CommitRequest, CommittedOffset, Metadata,
    MetadataOptions, RebuildChanges, RebuildWritten, WalCompacted,
};
pub use records::{
    BucketAssignment, CompressionCodec, GroupOffset, NodeRecord, ObjectKind, ObjectRecord,
    ProducerName, RecoveryClaim, RetentionPolicy, StreamConfig, StreamRange, StreamRecord,
    StreamState, TableCompression, TableRecord, WalReservation, WriterSnapshot, is_life_of,
    member_id,
};
