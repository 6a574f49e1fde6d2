//! The settings of compaction and of its second pass (merging, regrouping, garbage).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Settings of compaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionSettings {
    /// A round runs at least this often when there is data. Default 2 s.
    #[serde(with = "mink_runtime::duration_ms")]
    pub interval: Duration,
    /// A round starts early when this many bytes await compaction. Default 32 MiB.
    pub trigger_bytes: u64,
    /// A round takes the oldest WAL objects up to about this many bytes (at least one object)
    /// and the next round starts at once after it. Room under `max_uncompacted_bytes` is
    /// given back at the end of a round, so smaller rounds give it back sooner and in smaller
    /// steps: appends that wait under back-pressure wait for one round of this size, not for
    /// everything that piled up. Each round is one metadata commit, and a stream with at least
    /// `stream_object_bytes` in it gets an object of up to this size. Default 16 MiB.
    pub max_round_bytes: u64,
    /// A stream with at least this many bytes in a round gets its own stream object; smaller
    /// ones share a stream-set object. Default 8 MiB.
    pub stream_object_bytes: u64,
    /// Data blocks in committed objects are cut at about this size. Default 1 MiB.
    pub block_bytes: usize,
    /// Objects that compaction, merges and regrouping write are cut at about this size (a
    /// stream's batches continue in the next object), which bounds a PUT and the memory that
    /// builds it. Default 64 MiB.
    pub max_object_bytes: usize,
    /// A WAL object of at least this many bytes is committed as a stream-set object as it is
    /// (its bytes are not written a second time) when the WAL and data stores are the same;
    /// smaller ones are rewritten. Under load, group commits reach `wal.max_object_bytes` and are
    /// adopted; a quiet node's small WAL objects are gathered into larger objects. Default 4 MiB.
    pub adopt_wal_object_bytes: u64,
    /// Recovery commits each replayed WAL object as a stream-set object as it is, whatever its
    /// size, when the WAL and data stores are the same and what the object holds for open
    /// streams is kept whole, so that a restart does not wait for the WAL's bytes to be written
    /// a second time. Reads meet the small objects until regrouping gathers them, which on a
    /// store with a latency per request (S3) costs more than it saves
    /// (docs/recovery-adoption.md). Off, recovery writes all it keeps into new objects. Default
    /// off.
    pub adopt_at_recovery: bool,
    /// Wait after a failed round. Default 1 s.
    #[serde(with = "mink_runtime::duration_ms")]
    pub retry_backoff: Duration,
    /// How often the second pass runs (merging small stream objects, regrouping stream-set
    /// objects by stream, collecting garbage). Default 60 s.
    #[serde(with = "mink_runtime::duration_ms")]
    pub maintenance_interval: Duration,
    /// A run of at least this many consecutive small stream objects of one stream is merged into
    /// one; stream-set objects are regrouped by stream once at least this many exist. Default 4.
    pub merge_min_objects: usize,
    /// Bytes of stream-set objects (oldest first, each smaller than half of this and of
    /// `max_object_bytes`) the second pass
    /// reads and writes again, grouped by stream, per run; it holds them in memory meanwhile.
    /// 0 turns regrouping off. Default 256 MiB.
    pub set_compaction_bytes: u64,
    /// Objects removed from the metadata (merged or garbage) are deleted from the store after
    /// this, so reads that looked them up just before still find them. Default 30 s.
    #[serde(with = "mink_runtime::duration_ms")]
    pub delete_grace: Duration,
    /// How often the second pass lists the data prefix for committed objects no record names
    /// (left by a crash or a failed commit) and deletes those older than `orphan_grace`; also
    /// once at the first pass of each life. 0 turns the sweep off. Default 1 h.
    #[serde(with = "mink_runtime::duration_ms")]
    pub orphan_sweep_interval: Duration,
    /// How old an object no record names must be before the sweep deletes it: far past the
    /// time from an object's PUT to the commit that names it. Default 1 h.
    #[serde(with = "mink_runtime::duration_ms")]
    pub orphan_grace: Duration,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        CompactionSettings {
            interval: Duration::from_secs(2),
            trigger_bytes: 32 << 20,
            max_round_bytes: 16 << 20,
            stream_object_bytes: 8 << 20,
            block_bytes: 1 << 20,
            max_object_bytes: 64 << 20,
            adopt_wal_object_bytes: 4 << 20,
            adopt_at_recovery: false,
            retry_backoff: Duration::from_secs(1),
            maintenance_interval: Duration::from_secs(60),
            merge_min_objects: 4,
            set_compaction_bytes: 256 << 20,
            delete_grace: Duration::from_secs(30),
            orphan_sweep_interval: Duration::from_secs(3600),
            orphan_grace: Duration::from_secs(3600),
        }
    }
}
