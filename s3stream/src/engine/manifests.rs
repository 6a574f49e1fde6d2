//! Stream manifests on the data store (`format/manifest.rs`; docs/metadata-recovery.md,
//! "Manifests"; docs/manifest-batches.md): written once when a labelled stream is created,
//! deleted when it is destroyed.
//!
//! Manifests are written like the WAL: at most four PUTs at once, and the manifests that arrive
//! while those are out go together in the next one (`manifest_queue.rs`). A creation alone is
//! one stream's manifest (version 1, at `{prefix}{id:016x}`) as soon as it comes; a burst of
//! first opens (a new table's buckets, a restart) is a few batches (version 2, at
//! `{prefix}batch-{lowest id:016x}-{highest id:016x}`) instead of one PUT per stream.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::shared::EngineShared;
use crate::error::{Result, StreamError};
use crate::format::manifest::StreamManifest;

/// The first characters of a batch's name under the prefix.
const BATCH_NAME: &str = "batch-";

/// The key of stream `id`'s own manifest under `prefix`.
fn key(prefix: &str, id: u64) -> String {
    format!("{prefix}{id:016x}")
}

/// The key of a batch holding streams `lowest..=highest` (and maybe not all between).
fn batch_key(prefix: &str, lowest: u64, highest: u64) -> String {
    format!("{prefix}{BATCH_NAME}{lowest:016x}-{highest:016x}")
}

/// The lowest and highest stream of a batch's name (the part after the prefix), or `None` for
/// any other name.
pub(crate) fn batch_range(name: &str) -> Option<(u64, u64)> {
    let (lowest, highest) = name.strip_prefix(BATCH_NAME)?.split_once('-')?;
    let parse = |s: &str| (s.len() == 16).then(|| u64::from_str_radix(s, 16).ok())?;
    Some((parse(lowest)?, parse(highest)?))
}

/// Writes `manifest`, alone or in a batch, and returns when the PUT that holds it has ended; a
/// failure is logged and counted, never returned (the stream works without its manifest).
pub(super) async fn write(shared: &Arc<EngineShared>, manifest: StreamManifest) {
    let (wait, start) = shared.manifests.push(manifest);
    if start {
        tokio::spawn(put_waiting(shared.clone()));
    }
    // The sender is dropped without a send only if the putting task died; either way the PUT
    // is over.
    let _ = wait.await;
}

/// Puts what waits, a batch at a time, until nothing does.
async fn put_waiting(shared: Arc<EngineShared>) {
    while let Some(batch) = shared.manifests.next_batch() {
        let (manifests, done): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        put(&shared, &manifests).await;
        for done in done {
            let _ = done.send(());
        }
    }
}

/// One PUT of `manifests`: one stream's manifest, or a batch.
async fn put(shared: &EngineShared, manifests: &[StreamManifest]) {
    let prefix = &shared.settings.manifest_prefix;
    let (key, bytes) = match manifests {
        [one] => (key(prefix, one.stream_id), one.encode()),
        _ => {
            let ids = manifests.iter().map(|m| m.stream_id);
            let (lowest, highest) = (ids.clone().min(), ids.max());
            let key = batch_key(prefix, lowest.unwrap_or(0), highest.unwrap_or(0));
            (key, StreamManifest::encode_batch(manifests))
        }
    };
    if let Err(e) = shared.data_storage.put(&key, bytes).await {
        shared
            .metrics
            .manifest_failures
            .fetch_add(manifests.len() as u64, Ordering::Relaxed);
        tracing::warn!(
            streams = manifests.len(),
            first = manifests.first().map(|m| m.stream_id),
            error = %e,
            "stream manifests could not be written"
        );
    }
}

/// Deletes stream `id`'s own manifest; one that is not there is no error. A batch that holds
/// the stream stays until no stream of its range is left ([`sweep_batches`]).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_names_round_trip_and_nothing_else_is_one() {
        let name = batch_key("", 0x10, 0x2ff);
        assert_eq!(name, "batch-0000000000000010-00000000000002ff");
        assert_eq!(batch_range(&name), Some((0x10, 0x2ff)));
        assert_eq!(batch_range("0000000000000010"), None);
        assert_eq!(batch_range("batch-10-2ff"), None);
        assert_eq!(batch_range("batch-0000000000000010-00000000000002fg"), None);
    }
}
