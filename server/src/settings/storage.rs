//! `[storage]` and `[metadata]`: where objects and metadata are kept.

use std::path::PathBuf;

use mink_s3stream::storage::S3Config;
use serde::{Deserialize, Serialize};

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
    /// How often a snapshot of the metadata is written to the object store, by the single node
    /// or the cluster's leader (`snapshot_interval_ms`; docs/metadata-recovery.md). `0` turns
    /// periodic snapshots off. Default 10 minutes.
    #[serde(rename = "snapshot_interval_ms", with = "mink_runtime::duration_ms")]
    pub snapshot_interval: std::time::Duration,
    /// How many snapshots are kept in the object store; older ones are deleted
    /// (`snapshots_kept`). Default 24.
    pub snapshots_kept: usize,
}

impl Default for MetadataSettings {
    fn default() -> Self {
        MetadataSettings {
            backend: MetadataBackend::Redb,
            redb_path: None,
            etcd_endpoints: Vec::new(),
            etcd_prefix: "mink/".to_owned(),
            snapshot_interval: std::time::Duration::from_secs(600),
            snapshots_kept: 24,
        }
    }
}

impl MetadataSettings {
    /// Refuses a snapshot count of zero, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.snapshots_kept == 0 {
            return Err("metadata.snapshots_kept must be at least 1".to_owned());
        }
        Ok(())
    }
}
