//! Stream manifests on the data store (`format/manifest.rs`; docs/metadata-recovery.md,
//! "Manifests"): written once when a labelled stream is created, deleted when it is destroyed.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::shared::EngineShared;
use crate::error::{Result, StreamError};
use crate::format::manifest::StreamManifest;

/// The key of stream `id`'s manifest under `prefix`.
fn key(prefix: &str, id: u64) -> String {
    format!("{prefix}{id:016x}")
}

/// Writes `manifest`; a failure is logged and counted, never returned (the stream works without
/// its manifest).
pub(super) async fn write(shared: &EngineShared, manifest: &StreamManifest) {
    let key = key(&shared.settings.manifest_prefix, manifest.stream_id);
    if let Err(e) = shared.data_storage.put(&key, manifest.encode()).await {
        shared
            .metrics
            .manifest_failures
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(stream = manifest.stream_id, error = %e, "the stream's manifest could not be written");
    }
}

/// Deletes stream `id`'s manifest; one that is not there is no error.
pub(super) async fn delete(shared: &EngineShared, id: u64) -> Result<()> {
    match shared
        .data_storage
        .delete(&key(&shared.settings.manifest_prefix, id))
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(StreamError::Storage(Arc::new(e))),
    }
}
