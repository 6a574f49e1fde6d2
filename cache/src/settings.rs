//! Settings of the read caches: serialisable, every field with a documented default.
//!
//! A node reads these from its configuration file; tests build them with struct update syntax
//! (`CacheSettings { tail: TailCacheSettings { capacity_bytes: 1024, ..Default::default() }, ..Default::default() }`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// All cache settings of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct CacheSettings {
    /// The tail cache (recent records per stream, filled by the write path).
    pub tail: TailCacheSettings,
    /// The block cache (pages of committed objects) and the object index cache.
    pub block: BlockCacheSettings,
    /// Readahead for sequential readers of the block cache.
    pub readahead: ReadaheadSettings,
}

/// Settings of the tail cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TailCacheSettings {
    /// Byte budget of the tail cache, summed over all streams. Default: 256 MiB.
    pub capacity_bytes: u64,
}

impl Default for TailCacheSettings {
    fn default() -> Self {
        Self {
            capacity_bytes: 256 * MIB,
        }
    }
}

/// Settings of the block cache and of the object index cache beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlockCacheSettings {
    /// Byte budget of the in-memory page tier. Default: 512 MiB.
    pub memory_bytes: u64,
    /// Size of one page; objects are cached in pages of this size (the last page of an object may be
    /// shorter). Default: 1 MiB.
    pub page_size: u64,
    /// A page older than this (counted from when it was loaded) is treated as absent and loaded again.
    /// Default: 3 600 000 ms (one hour).
    pub ttl_ms: u64,
    /// Largest single ranged load: adjacent missing pages are fetched with one load up to this many
    /// bytes. Default: 8 MiB.
    pub max_load_bytes: u64,
    /// Directory of the disk tier. `None` (the default) keeps the block cache in memory only.
    pub disk_dir: Option<PathBuf>,
    /// Byte budget of the disk tier, used only when `disk_dir` is set. Default: 4 GiB.
    pub disk_bytes: u64,
    /// Byte budget of the object index cache (parsed footers and indexes of committed objects).
    /// Default: 32 MiB.
    pub index_capacity_bytes: u64,
    /// Byte budget of the blocks kept decoded: a block of a committed object read a second
    /// time is kept as its batches in one buffer, so later reads of it neither check its CRC
    /// nor copy batches that cross pages. 0 keeps none. Default: 64 MiB.
    pub decoded_bytes: u64,
}

impl Default for BlockCacheSettings {
    fn default() -> Self {
        Self {
            memory_bytes: 512 * MIB,
            page_size: MIB,
            ttl_ms: 3_600_000,
            max_load_bytes: 8 * MIB,
            disk_dir: None,
            disk_bytes: 4 * 1024 * MIB,
            index_capacity_bytes: 32 * MIB,
            decoded_bytes: 64 * MIB,
        }
    }
}

/// Settings of the readahead of sequential readers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReadaheadSettings {
    /// Window of a reader the first time it is seen reading sequentially. Default: 512 KiB.
    pub start_bytes: u64,
    /// Least growth of the window each time a sequential reader still had to wait for a load (it
    /// doubles, growing by at least this). Default: 512 KiB.
    pub growth_bytes: u64,
    /// Largest window. Default: 32 MiB.
    pub max_bytes: u64,
    /// Share of the memory tier, in percent, that readahead loads in flight may occupy together; above it
    /// readahead is skipped so that it never pushes out pages readers are about to use. Default: 25.
    pub max_inflight_percent: u8,
}

impl Default for ReadaheadSettings {
    fn default() -> Self {
        Self {
            start_bytes: 512 * KIB,
            growth_bytes: 512 * KIB,
            max_bytes: 32 * MIB,
            max_inflight_percent: 25,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_through_json_and_fill_defaults() {
        let settings = CacheSettings {
            block: BlockCacheSettings {
                disk_dir: Some("/var/cache/mink".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let json = serde_json::to_string(&settings).expect("serialise");
        let back: CacheSettings = serde_json::from_str(&json).expect("deserialise");
        assert_eq!(back, settings);

        let partial: CacheSettings =
            serde_json::from_str(r#"{"block":{"page_size":65536}}"#).expect("partial settings");
        assert_eq!(partial.block.page_size, 65536);
        assert_eq!(partial.block.memory_bytes, 512 * MIB);
        assert_eq!(partial.tail.capacity_bytes, 256 * MIB);
        assert_eq!(partial.readahead.max_bytes, 32 * MIB);

        assert!(serde_json::from_str::<CacheSettings>(r#"{"tail":{"capacity":1}}"#).is_err());
    }
}
