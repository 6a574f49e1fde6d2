//! The node's settings: a serde struct with a default for every field, read from an optional TOML
//! file and overridden by command-line flags and environment variables (see `main.rs`).
//!
//! Settings say *what* to build; the components themselves (object stores, the metadata KV) are
//! built from them by [`crate::NodeBuilder::from_settings`] or injected directly by tests.
//!
//! A complete file with every default is printed by `mink default-config`:
//!
//! ```toml
//! node_id = "mink-1"
//! listen = "127.0.0.1:6465"
//! data_dir = "./mink-data"
//!
//! [storage]
//! backend = "local"        # "local" | "s3" | "memory"
//! # local_dir = "./mink-data/objects"
//! # data_bucket = "mink-data"   # S3 bucket for committed objects; default: the WAL bucket
//! [storage.s3]             # used when backend = "s3" (the WAL bucket and connection)
//! bucket = ""
//!
//! [metadata]
//! backend = "redb"         # "redb" | "etcd" | "memory"
//! # redb_path = "./mink-data/meta.redb"
//! etcd_endpoints = []
//! etcd_prefix = "mink/"
//!
//! [http]
//! max_body_bytes = 8388608
//! ...
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use mink_s3stream::engine::EngineSettings;
use mink_s3stream::storage::S3Config;
use serde::{Deserialize, Serialize};

/// The port `mink serve` listens on by default ("MINK" on a phone keypad).
pub const DEFAULT_PORT: u16 = 6465;

/// Every setting of a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// This node's id: names its WAL objects and its registration. Default `mink-1`.
    pub node_id: String,
    /// Address the HTTP API listens on. Default `127.0.0.1:6465`.
    pub listen: SocketAddr,
    /// Folder of the embedded default's files (objects and metadata). Default `./mink-data`.
    pub data_dir: PathBuf,
    /// Where objects (WAL and committed data) are kept.
    pub storage: StorageSettings,
    /// Where metadata is kept.
    pub metadata: MetadataSettings,
    /// HTTP limits and timings.
    pub http: HttpSettings,
    /// The stream engine (WAL group commit, compaction, back-pressure).
    pub engine: EngineSettings,
    /// Fault injection into the object store, for crash-safety runs (`cargo xtask chaos`) only.
    /// Honoured only by a `mink` built with the cargo feature `chaos`; any other build refuses
    /// to start when the section is present. Absent by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chaos: Option<ChaosSettings>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            node_id: "mink-1".to_owned(),
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            data_dir: PathBuf::from("./mink-data"),
            storage: StorageSettings::default(),
            metadata: MetadataSettings::default(),
            http: HttpSettings::default(),
            engine: EngineSettings::default(),
            chaos: None,
        }
    }
}

impl Settings {
    /// Reads settings from TOML text; missing fields take their defaults, unknown fields fail.
    pub fn from_toml(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }

    /// The settings as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// The folder of local objects: `storage.local_dir`, else `{data_dir}/objects`.
    pub fn local_objects_dir(&self) -> PathBuf {
        self.storage
            .local_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("objects"))
    }

    /// The redb file: `metadata.redb_path`, else `{data_dir}/meta.redb`.
    pub fn redb_path(&self) -> PathBuf {
        self.metadata
            .redb_path
            .clone()
            .unwrap_or_else(|| self.data_dir.join("meta.redb"))
    }
}

/// Faults injected into every object store of the node (the `[chaos]` section): each PUT is
/// first delayed by `put_delay_ms`, then fails as "unavailable" (a retryable error) with
/// probability `put_failure_rate` (after reaching the store when `put_fail_after_write`). The
/// WAL and the compactor retry such failures, so the node keeps going unless a PUT fails for
/// longer than `engine.wal.retry_deadline`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChaosSettings {
    /// Probability (0.0 to 1.0) that a PUT fails. Default 0.
    pub put_failure_rate: f64,
    /// Delay added to every PUT (`put_delay_ms`). Default 0.
    #[serde(rename = "put_delay_ms", with = "mink_runtime::duration_ms")]
    pub put_delay: Duration,
    /// When true, a PUT chosen to fail first reaches the store and only then reports the
    /// failure, as a PUT whose answer was lost. Default false.
    pub put_fail_after_write: bool,
    /// Seed of the fault RNG, so a run can be replayed. Default 0.
    pub seed: u64,
    /// Latency model the object stores wear, for benchmarks (`cargo xtask bench`): `s3-standard`
    /// or `s3-express` (see `mink_s3stream::storage::LatencyProfile`). Default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_profile: Option<String>,
}

/// Which object store backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum StorageBackend {
    /// object_store's local file system under `local_dir`.
    #[default]
    Local,
    /// An S3 or S3-compatible server (`storage.s3`).
    S3,
    /// In memory; everything is lost on exit (tests, demos).
    Memory,
}

/// Where objects are kept.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageSettings {
    /// The backend. Default `local`.
    pub backend: StorageBackend,
    /// Folder for the local backend. Default `{data_dir}/objects`.
    pub local_dir: Option<PathBuf>,
    /// The S3 connection and the WAL bucket (backend `s3`).
    pub s3: S3Config,
    /// The bucket for committed (compacted) objects; default the WAL bucket.
    pub data_bucket: Option<String>,
}

/// Which metadata backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum MetadataBackend {
    /// The embedded redb file at `redb_path`.
    #[default]
    Redb,
    /// An etcd cluster at `etcd_endpoints`.
    Etcd,
    /// In memory; lost on exit.
    Memory,
}

/// Where metadata is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetadataSettings {
    /// The backend. Default `redb`.
    pub backend: MetadataBackend,
    /// The redb file. Default `{data_dir}/meta.redb`.
    pub redb_path: Option<PathBuf>,
    /// etcd client endpoints (`http://host:2379`).
    pub etcd_endpoints: Vec<String>,
    /// Prefix of every key Mink writes in etcd. Default `mink/`.
    pub etcd_prefix: String,
}

impl Default for MetadataSettings {
    fn default() -> Self {
        MetadataSettings {
            backend: MetadataBackend::Redb,
            redb_path: None,
            etcd_endpoints: Vec::new(),
            etcd_prefix: "mink/".to_owned(),
        }
    }
}

/// HTTP limits and timings. Durations are whole milliseconds in files (the `_ms` keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSettings {
    /// Largest request body accepted (413 above). Default 8 MiB.
    pub max_body_bytes: usize,
    /// Default `max_bytes` of a read. Default 1 MiB.
    pub default_read_bytes: usize,
    /// Largest `max_bytes` a read may ask for. Default 16 MiB.
    pub max_read_bytes: usize,
    /// How long a long-poll read parks at the tail (`long_poll_timeout_ms`). Default 25 s.
    #[serde(rename = "long_poll_timeout_ms", with = "mink_runtime::duration_ms")]
    pub long_poll_timeout: Duration,
    /// Longest `timeout_ms` a long-poll may ask for (`max_long_poll_timeout_ms`). Default 60 s.
    #[serde(
        rename = "max_long_poll_timeout_ms",
        with = "mink_runtime::duration_ms"
    )]
    pub max_long_poll_timeout: Duration,
    /// An SSE response is closed after this long so proxies never see an idle connection; the
    /// client reconnects from its last event id (`sse_recycle_ms`). Default 55 s.
    #[serde(rename = "sse_recycle_ms", with = "mink_runtime::duration_ms")]
    pub sse_recycle: Duration,
    /// Interval of SSE heartbeat comments (`sse_heartbeat_ms`; at least 1 ms). Default 10 s.
    #[serde(rename = "sse_heartbeat_ms", with = "mink_runtime::duration_ms")]
    pub sse_heartbeat: Duration,
    /// Requests per second the node admits (token bucket); 0 = unlimited. Default 0.
    pub rate_limit_per_sec: u32,
    /// Burst of the rate limit. Default 1000.
    pub rate_limit_burst: u32,
    /// Seconds a client is told to wait (`Retry-After`) after a 503 or 429. Default 1. Whole
    /// seconds, not a duration, because that is what the header carries.
    pub retry_after_secs: u32,
    /// Longest wait for in-flight requests at shutdown (`shutdown_grace_ms`). Default 30 s.
    #[serde(rename = "shutdown_grace_ms", with = "mink_runtime::duration_ms")]
    pub shutdown_grace: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            max_body_bytes: 8 << 20,
            default_read_bytes: 1 << 20,
            max_read_bytes: 16 << 20,
            long_poll_timeout: Duration::from_secs(25),
            max_long_poll_timeout: Duration::from_secs(60),
            sse_recycle: Duration::from_secs(55),
            sse_heartbeat: Duration::from_secs(10),
            rate_limit_per_sec: 0,
            rate_limit_burst: 1000,
            retry_after_secs: 1,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

impl HttpSettings {
    /// The SSE heartbeat interval (at least 1 ms: a zero interval would spin).
    pub fn sse_heartbeat_interval(&self) -> Duration {
        self.sse_heartbeat.max(Duration::from_millis(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_round_trip_through_toml() {
        let defaults = Settings::default();
        let text = defaults.to_toml();
        assert_eq!(Settings::from_toml(&text).unwrap(), defaults);
        assert_eq!(Settings::from_toml("").unwrap(), defaults);
    }

    #[test]
    fn file_selects_s3_and_etcd_and_rejects_typos() {
        let s = Settings::from_toml(
            r#"
            listen = "0.0.0.0:8080"
            [storage]
            backend = "s3"
            data_bucket = "mink-data"
            [storage.s3]
            bucket = "mink-wal"
            endpoint = "http://127.0.0.1:9000"
            allow_http = true
            [metadata]
            backend = "etcd"
            etcd_endpoints = ["http://127.0.0.1:2379"]
            "#,
        )
        .unwrap();
        assert_eq!(s.storage.backend, StorageBackend::S3);
        assert_eq!(s.storage.s3.bucket, "mink-wal");
        assert_eq!(s.metadata.backend, MetadataBackend::Etcd);
        assert_eq!(s.listen.port(), 8080);
        assert_eq!(s.http.long_poll_timeout, Duration::from_secs(25));
        assert!(Settings::from_toml("[http]\nlong_pol_timeout_ms = 3").is_err());
    }

    #[test]
    fn chaos_section_is_absent_by_default_and_parses_when_given() {
        assert!(!Settings::default().to_toml().contains("[chaos]"));
        let s = Settings::from_toml(
            "[chaos]\nput_failure_rate = 0.25\nput_delay_ms = 40\nput_fail_after_write = true\nseed = 7",
        )
        .unwrap();
        assert_eq!(
            s.chaos,
            Some(ChaosSettings {
                put_failure_rate: 0.25,
                put_delay: Duration::from_millis(40),
                put_fail_after_write: true,
                seed: 7,
                latency_profile: None,
            })
        );
        assert!(Settings::from_toml(&s.to_toml()).unwrap() == s);
        assert!(Settings::from_toml("[chaos]\nput_failure = 1").is_err());
        let s = Settings::from_toml("[chaos]\nlatency_profile = \"s3-standard\"").unwrap();
        assert_eq!(
            s.chaos.and_then(|c| c.latency_profile).as_deref(),
            Some("s3-standard")
        );
    }
}
