//! The engine's settings: where objects go, the WAL, compaction, caches and back-pressure.

use std::time::Duration;

use mink_cache::CacheSettings;
use serde::{Deserialize, Serialize};

use super::compaction::settings::CompactionSettings;
use crate::wal::WalSettings;

/// Settings of the stream engine (serialisable; every field has a default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineSettings {
    /// The WAL writer.
    pub wal: WalSettings,
    /// Compaction of the log cache into committed objects.
    pub compaction: CompactionSettings,
    /// The tail cache, the block cache and readahead.
    pub cache: CacheSettings,
    /// Key prefix of WAL objects in the WAL store. Default `wal/`.
    pub wal_prefix: String,
    /// Key prefix of committed objects in the data store. Default `data/`.
    pub data_prefix: String,
    /// Key prefix of stream manifests in the data store (one per stream created with a label,
    /// for a rebuild from objects). Default `manifests/streams/`.
    pub manifest_prefix: String,
    /// WAL ids reserved per metadata round trip. Default 4096.
    pub wal_id_block: u64,
    /// Bytes appended on this node but not yet compacted, beyond which appends wait
    /// (back-pressure). Default 512 MiB.
    pub max_uncompacted_bytes: u64,
    /// How long an append waits under back-pressure before failing. Default 30 s.
    #[serde(with = "mink_runtime::duration_ms")]
    pub backpressure_timeout: Duration,
}

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            wal: WalSettings::default(),
            compaction: CompactionSettings::default(),
            cache: CacheSettings::default(),
            wal_prefix: "wal/".to_owned(),
            data_prefix: "data/".to_owned(),
            manifest_prefix: "manifests/streams/".to_owned(),
            wal_id_block: 4096,
            max_uncompacted_bytes: 512 << 20,
            backpressure_timeout: Duration::from_secs(30),
        }
    }
}
