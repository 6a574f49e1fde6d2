//! The orphan sweep: committed objects that no object record names and that are older than
//! `orphan_grace` are deleted. They are left behind when a crash cuts short what was on its
//! way out (the queue of objects waiting out `delete_grace` lives in memory) or when a commit
//! fails after its objects were written (fenced). The one place besides a rebuild that lists the
//! store: once per `orphan_sweep_interval`, the data prefix only (adopted WAL objects live under
//! the WAL prefix and are never swept).
//!
//! Safe beside writers on other nodes: an object is written before the commit that names it, and
//! a commit lands within seconds or fails, so an object older than the grace with no record is
//! one no commit will ever name. The records are read after the listing, so an object committed
//! meanwhile is seen as named.
//!
//! The same pass deletes batches of stream manifests whose streams are all destroyed
//! (docs/manifest-batches.md).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use super::state::CompactorState;
use crate::engine::manifests::batch_range;
use crate::engine::shared::EngineShared;
use crate::error::{Result, StreamError};
use crate::format::is_object_name;
use mink_metadata::StreamState;

/// Sweeps when the last sweep is `orphan_sweep_interval` old (or there was none in this life).
pub(super) async fn sweep_if_due(engine: &EngineShared, state: &mut CompactorState) -> Result<()> {
    let settings = &engine.settings.compaction;
    if settings.orphan_sweep_interval.is_zero()
        || state
            .last_orphan_sweep
            .is_some_and(|at| at.elapsed() < settings.orphan_sweep_interval)
    {
        return Ok(());
    }
    state.last_orphan_sweep = Some(Instant::now());
    sweep_manifest_batches(engine).await?;
    let storage = |e| StreamError::Storage(Arc::new(e));
    let listed = engine
        .data_storage
        .list(&engine.settings.data_prefix)
        .await
        .map_err(storage)?;
    let named: HashSet<String> = engine
        .metadata
        .list_objects()
        .await?
        .into_iter()
        .map(|o| o.key)
        .collect();
    let now = SystemTime::now();
    let prefix = &engine.settings.data_prefix;
    let orphans: Vec<String> = listed
        .into_iter()
        // Only keys named as committed objects are: never anything else under the prefix.
        .filter(|m| {
            m.key
                .strip_prefix(prefix.as_str())
                .is_some_and(is_object_name)
        })
        .filter(|m| !named.contains(&m.key))
        .filter(|m| {
            m.last_modified
                .and_then(|at| now.duration_since(at).ok())
                .is_some_and(|age| age >= settings.orphan_grace)
        })
        .map(|m| m.key)
        .collect();
    if orphans.is_empty() {
        return Ok(());
    }
    engine
        .data_storage
        .delete_many(&orphans)
        .await
        .map_err(storage)?;
    engine
        .metrics
        .orphans_deleted
        .fetch_add(orphans.len() as u64, Ordering::Relaxed);
    tracing::info!(
        objects = orphans.len(),
        "deleted committed objects that no record names"
    );
    Ok(())
}

/// Deletes batches of stream manifests (docs/manifest-batches.md) older than `orphan_grace` of
/// which no stream whose id is in the batch's range is left: every stream the batch names was
/// destroyed (a destroy deletes only a stream's own manifest). Judged from the batch's name
/// alone, without reading it, so a batch whose range also spans a live stream of another
/// batch waits for that one too.
async fn sweep_manifest_batches(engine: &EngineShared) -> Result<()> {
    let storage = |e| StreamError::Storage(Arc::new(e));
    let prefix = &engine.settings.manifest_prefix;
    let listed = engine.data_storage.list(prefix).await.map_err(storage)?;
    let now = SystemTime::now();
    let grace = engine.settings.compaction.orphan_grace;
    let batches: Vec<(String, (u64, u64))> = listed
        .into_iter()
        .filter(|m| {
            m.last_modified
                .and_then(|at| now.duration_since(at).ok())
                .is_some_and(|age| age >= grace)
        })
        .filter_map(|m| {
            let range = batch_range(m.key.strip_prefix(prefix.as_str())?)?;
            Some((m.key, range))
        })
        .collect();
    if batches.is_empty() {
        return Ok(());
    }
    // Listed after the batches: a stream created meanwhile is in a newer batch.
    let mut live: Vec<u64> = engine
        .metadata
        .list_streams()
        .await?
        .into_iter()
        .filter(|s| s.state != StreamState::Deleted)
        .map(|s| s.id)
        .collect();
    live.sort_unstable();
    let emptied: Vec<String> = batches
        .into_iter()
        .filter(|(_, (lowest, highest))| {
            let from = live.partition_point(|id| id < lowest);
            live.get(from).is_none_or(|id| id > highest)
        })
        .map(|(key, _)| key)
        .collect();
    if emptied.is_empty() {
        return Ok(());
    }
    engine
        .data_storage
        .delete_many(&emptied)
        .await
        .map_err(storage)?;
    tracing::info!(
        batches = emptied.len(),
        "deleted batches of stream manifests whose streams are all destroyed"
    );
    Ok(())
}
