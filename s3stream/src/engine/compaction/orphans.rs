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

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use super::state::CompactorState;
use crate::engine::shared::EngineShared;
use crate::error::{Result, StreamError};
use crate::format::is_object_name;

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
