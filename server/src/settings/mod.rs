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
//! snapshot_interval_ms = 600000  # metadata snapshots to the object store; 0: off
//! snapshots_kept = 24
//!
//! [http]
//! max_connections = 10000
//! ...
//! [http.body]
//! max_append_bytes = 8388608
//! ...
//!
//! [limits]
//! max_columns = 1000
//! ...
//!
//! [tablet]                 # every tablet of the node
//! max_rows_per_batch = 1048576
//! max_rows_per_request = 1048576
//! max_writers = 10000
//! ...
//!
//! [node]
//! probe_timeout_ms = 10000
//! exit_delay_on_wal_failure_ms = 2000
//! drop_cleanup_interval_ms = 10000
//! ready_timeout_ms = 2000
//! max_concurrent_opens = 256
//!
//! [cluster]                # used when the metadata store has leases (etcd)
//! lease_ttl_ms = 5000
//! lease_margin_ms = 500
//! # advertise_http = "http://10.0.0.5:6465"
//! max_concurrent_moves = 16
//! drain_timeout_ms = 20000
//! # advertise_flight = "grpc://10.0.0.5:8815"
//!
//! [retention]              # defaults for tables without a policy of their own
//! # age_ms = 604800000     # unset: keep everything
//! # bytes = 1073741824     # per bucket; unset: keep everything
//! interval_ms = 60000
//! max_concurrent = 16
//!
//! [flight]                 # the Arrow Flight front end; listen = "none" turns it off
//! listen = "127.0.0.1:8815"
//! max_message_bytes = 16777216
//! ...
//!
//! [kafka]                  # the Kafka front end (docs/kafka.md); listen = "none" turns it off
//! listen = "127.0.0.1:9092"
//! # advertise = "broker.example:9092"
//! ...
//! ```

mod auth;
mod body_limits;
mod chaos;
mod cluster;
mod cors;
mod ds;
mod flight;
mod http;
mod kafka;
mod limits;
pub mod listen;
mod node;
mod retention;
mod storage;
mod tablet;
mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;

use mink_s3stream::engine::EngineSettings;
use serde::{Deserialize, Serialize};

pub use auth::{AuthSettings, Scope, Secret, TokenSettings};
pub(crate) use auth::{check_tables, check_token};
pub use body_limits::BodyLimits;
pub use chaos::ChaosSettings;
pub use cluster::ClusterSettings;
pub use cors::CorsSettings;
pub use ds::DsSettings;
pub use flight::{DEFAULT_FLIGHT_PORT, FlightSettings};
pub use http::HttpSettings;
pub use kafka::{DEFAULT_KAFKA_PORT, KafkaSettings};
pub use limits::LimitsSettings;
pub use node::NodeSettings;
pub use retention::{
    MIN_RETENTION_AGE_MS, MIN_RETENTION_BYTES, RetentionSettings, check_policy as check_retention,
};
pub use storage::{MetadataBackend, MetadataSettings, StorageBackend, StorageSettings};
pub use tablet::TabletSettings;
pub use tls::TlsSettings;

/// The port `mink serve` listens on by default ("MINK" on a phone keypad).
pub const DEFAULT_PORT: u16 = 6465;

/// Every setting of a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// This node's id: names its registration and, with its incarnation, its WAL objects.
    /// Default `mink-1`.
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
    /// What a request can make the node store: schema shape, tables, buckets, partitions.
    pub limits: LimitsSettings,
    /// Bearer tokens and their scopes; none: no access control.
    pub auth: AuthSettings,
    /// The node's lifecycle: start-up probes, exit after a WAL failure, dropped-table cleanup.
    pub node: NodeSettings,
    /// Cluster membership: the node's lease and advertised address.
    pub cluster: ClusterSettings,
    /// The Arrow Flight front end: where it listens, its limits.
    pub flight: FlightSettings,
    /// The Kafka front end: where it listens, its limits.
    pub kafka: KafkaSettings,
    /// The Durable Streams front end under `/ds`: on or off, its limits.
    pub ds: DsSettings,
    /// The node's default retention policy and the retention task's cadence.
    pub retention: RetentionSettings,
    /// The stream engine (WAL group commit, compaction, back-pressure).
    pub engine: EngineSettings,
    /// Every tablet's limits and cadences (rows, writers, request size, snapshots).
    pub tablet: TabletSettings,
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
            limits: LimitsSettings::default(),
            auth: AuthSettings::default(),
            node: NodeSettings::default(),
            cluster: ClusterSettings::default(),
            flight: FlightSettings::default(),
            kafka: KafkaSettings::default(),
            ds: DsSettings::default(),
            retention: RetentionSettings::default(),
            engine: EngineSettings::default(),
            tablet: TabletSettings::default(),
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

    /// Checks every section: a zero or absurd value is refused with a message naming the
    /// setting, before anything is opened. Each section checks its own fields.
    pub fn validate(&self) -> Result<(), String> {
        if self.node_id.is_empty()
            || self.node_id.len() > 128
            || !self
                .node_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(format!(
                "node_id `{}` must be 1-128 characters of letters, digits, `-`, `_` or `.`",
                self.node_id
            ));
        }
        self.http.validate()?;
        self.limits.validate()?;
        self.auth.validate()?;
        tablet::validate(&self.tablet)?;
        self.node.validate()?;
        self.cluster.validate()?;
        self.flight.validate()?;
        self.kafka.validate()?;
        self.ds.validate()?;
        self.retention.validate()?;
        self.metadata.validate()?;
        // A longer hold would be a stall, not a trade of latency for request cost.
        if self.engine.wal.min_put_interval > std::time::Duration::from_secs(10) {
            return Err("engine.wal.min_put_interval must be at most 10000 ms".to_owned());
        }
        self.engine.wal.validate()?;
        if let Some(chaos) = &self.chaos {
            chaos.validate()?;
        }
        Ok(())
    }

    /// The redb file: `metadata.redb_path`, else `{data_dir}/meta.redb`.
    pub fn redb_path(&self) -> PathBuf {
        self.metadata
            .redb_path
            .clone()
            .unwrap_or_else(|| self.data_dir.join("meta.redb"))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
    fn absurd_values_are_refused_naming_the_setting() {
        assert_eq!(Settings::default().validate(), Ok(()));
        let cases: [(&str, &str); 14] = [
            ("node_id = \"\"", "node_id"),
            (
                "[http.body]\nmax_ndjson_bytes = 0",
                "http.body.max_ndjson_bytes",
            ),
            ("[http]\ndefault_read_bytes = 0", "http.default_read_bytes"),
            ("[http]\nsse_recycle_ms = 0", "http.sse_recycle_ms"),
            (
                "[http]\nsse_heartbeat_ms = 18446744073709551615",
                "http.sse_heartbeat_ms",
            ),
            ("[chaos]\nput_failure_rate = 1.5", "chaos.put_failure_rate"),
            ("[limits]\nmax_columns = 0", "limits.max_columns"),
            (
                "[limits]\nmax_schema_versions = 40000",
                "limits.max_schema_versions",
            ),
            ("[auth]\ntoken = \"short\"", "auth.token"),
            (
                "[engine.wal]\nmin_put_interval = 60000",
                "engine.wal.min_put_interval",
            ),
            (
                "[engine.wal]\nput_hedge_quantile = 1.5",
                "engine.wal.put_hedge_quantile",
            ),
            (
                "[engine.wal]\nput_hedge_budget = -0.5",
                "engine.wal.put_hedge_budget",
            ),
            (
                "[engine.wal]\nmax_inflight_puts = 0",
                "engine.wal.max_inflight_puts",
            ),
            (
                "[engine.wal]\nmax_inflight_puts = 33",
                "engine.wal.max_inflight_puts",
            ),
        ];
        for (toml, setting) in cases {
            let error = Settings::from_toml(toml).unwrap().validate().unwrap_err();
            assert!(error.contains(setting), "{toml}: {error}");
        }
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
