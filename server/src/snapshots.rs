//! Metadata snapshots written by the node (docs/metadata-recovery.md): every
//! `metadata.snapshot_interval_ms` on the single node or the cluster's leader, and on demand
//! (`POST /v1/admin/snapshot`), to `meta-snapshots/{taken_at_ms:020}.snap` in the store of
//! committed objects; the newest `metadata.snapshots_kept` are kept.

use std::sync::Arc;
use std::time::Duration;

use mink_metadata::snapshot::MetaSnapshot;
use mink_metadata::{MetaError, Metadata};
use mink_s3stream::storage::ObjectStorage;
use serde::Serialize;

/// Where snapshots go, in the store of committed objects.
pub const PREFIX: &str = "meta-snapshots/";

/// The key of a snapshot taken at `taken_at_ms`: keys sort as the times do.
pub fn key(taken_at_ms: i64) -> String {
    format!("{PREFIX}{:020}.snap", taken_at_ms.max(0))
}

/// What a snapshot written holds.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Written {
    /// Its key in the object store.
    pub key: String,
    /// Keys of metadata it holds.
    pub keys: usize,
    /// Its size.
    pub bytes: u64,
    /// When it was taken, ms since the epoch.
    pub taken_at_ms: i64,
    /// Older snapshots deleted to keep `metadata.snapshots_kept`.
    pub deleted: usize,
}

/// The node's snapshot writer.
pub struct Snapshots {
    store: Arc<dyn ObjectStorage>,
    kept: usize,
    /// One snapshot at a time.
    writing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Snapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshots")
            .field("kept", &self.kept)
            .finish_non_exhaustive()
    }
}

impl Snapshots {
    /// Snapshots into `store`, keeping the newest `kept`.
    pub fn new(store: Arc<dyn ObjectStorage>, kept: usize) -> Self {
        Snapshots {
            store,
            kept: kept.max(1),
            writing: tokio::sync::Mutex::new(()),
        }
    }

    /// Takes a snapshot of `metadata` now, writes it, and deletes the ones past `kept`.
    pub async fn write(&self, metadata: &Metadata) -> Result<Written, String> {
        let _one = self.writing.lock().await;
        let now = metadata.clock().now_ms();
        let snapshot = MetaSnapshot::take(metadata.kv().as_ref(), now)
            .await
            .map_err(|e: MetaError| format!("reading the metadata: {e}"))?;
        let encoded = snapshot.encode();
        let bytes = encoded.len() as u64;
        let key = key(snapshot.taken_at_ms);
        self.store
            .put(&key, encoded)
            .await
            .map_err(|e| format!("writing {key}: {e}"))?;
        let mut listed: Vec<String> = self
            .store
            .list(PREFIX)
            .await
            .map_err(|e| format!("listing {PREFIX}: {e}"))?
            .into_iter()
            .map(|m| m.key)
            .filter(|k| k.ends_with(".snap"))
            .collect();
        listed.sort();
        let old: Vec<String> = listed
            .iter()
            .take(listed.len().saturating_sub(self.kept))
            .cloned()
            .collect();
        if !old.is_empty() {
            self.store
                .delete_many(&old)
                .await
                .map_err(|e| format!("deleting old snapshots: {e}"))?;
        }
        Ok(Written {
            key,
            keys: snapshot.entries.len(),
            bytes,
            taken_at_ms: snapshot.taken_at_ms,
            deleted: old.len(),
        })
    }
}

/// Writes a snapshot every `interval` while `due()` says this node should (the single node, or
/// the leader), until `shutdown`.
pub async fn run(
    snapshots: Arc<Snapshots>,
    metadata: Arc<Metadata>,
    interval: Duration,
    due: impl Fn() -> bool,
    shutdown: tokio_util::sync::CancellationToken,
    metrics: Arc<crate::metrics::Metrics>,
) {
    if interval.is_zero() {
        return;
    }
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        if !due() {
            continue;
        }
        match snapshots.write(&metadata).await {
            Ok(written) => {
                metrics.metadata_snapshots.inc();
                metrics
                    .metadata_snapshot_bytes
                    .set(i64::try_from(written.bytes).unwrap_or(i64::MAX));
                tracing::info!(
                    key = written.key,
                    keys = written.keys,
                    bytes = written.bytes,
                    "metadata snapshot written"
                );
            }
            Err(e) => {
                metrics.metadata_snapshot_errors.inc();
                tracing::warn!(error = %e, "a metadata snapshot failed; the next one retries");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn keys_sort_as_times() {
        assert_eq!(super::key(42), "meta-snapshots/00000000000000000042.snap");
        assert!(super::key(999) < super::key(1000));
    }
}
