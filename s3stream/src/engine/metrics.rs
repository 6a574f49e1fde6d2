//! The engine's counters: appends, compaction, the second pass, reads of committed objects and
//! recovery.

use std::sync::atomic::AtomicU64;

/// Counters of the engine (the WAL writer has its own, see [`Engine::wal_metrics`](crate::Engine::wal_metrics)).
#[derive(Debug, Default)]
pub struct EngineMetrics {
    /// Appends accepted.
    pub appends: AtomicU64,
    /// Payload bytes appended.
    pub append_bytes: AtomicU64,
    /// Compactions that committed something.
    pub compactions: AtomicU64,
    /// Committed objects written.
    pub objects_written: AtomicU64,
    /// Bytes of committed objects written.
    pub object_bytes_written: AtomicU64,
    /// WAL objects deleted after compaction (their data rewritten).
    pub wal_objects_deleted: AtomicU64,
    /// WAL objects committed as stream-set objects as they are (their data written once).
    pub wal_objects_adopted: AtomicU64,
    /// Bytes of the WAL objects committed as they are.
    pub wal_bytes_adopted: AtomicU64,
    /// Committed objects deleted (merged away or garbage).
    pub objects_deleted: AtomicU64,
    /// Runs of small stream objects merged into one.
    pub merges: AtomicU64,
    /// Passes that regrouped stream-set objects by stream.
    pub set_compactions: AtomicU64,
    /// GETs of committed objects.
    pub object_gets: AtomicU64,
    /// Bytes read from committed objects.
    pub object_bytes_read: AtomicU64,
    /// Blocks of committed objects read from those kept decoded (no CRC, no copy).
    pub decoded_block_hits: AtomicU64,
    /// Batches replayed from the WAL at recovery.
    pub recovered_batches: AtomicU64,
    /// Stream manifests that could not be written (the stream was created without one).
    pub manifest_failures: AtomicU64,
    /// Committed objects no record named, deleted by the orphan sweep.
    pub orphans_deleted: AtomicU64,
}
