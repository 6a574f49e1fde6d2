//! Compaction: everything that turns durable WAL data into committed objects and keeps those
//! objects few, large and live.
//!
//! Two background tasks share the engine's compaction lock:
//!
//! - the **compactor** runs a [round](round) every `interval`, or sooner when appends pile up:
//!   each acknowledged WAL object is adopted as it is or rewritten ([plan]), and one commit
//!   advances the committed ends; a round takes at most `max_round_bytes` of WAL objects and the
//!   next one starts at once, so room under back-pressure comes back in steps;
//! - the **second pass** runs every `maintenance_interval`: it [merges](merge) runs of small
//!   stream objects, collects [garbage](gc), sweeps [orphaned objects](orphans) every
//!   `orphan_sweep_interval`, and [regroups](regroup) stream-set objects by stream (outside the
//!   lock), then deletes what waited out its grace period.
//!
//! Rounds, merges, regrouping and recovery all write and commit through [writer]; what the
//! rounds remember between them is in [state]; the knobs are in [settings].

mod gc;
mod merge;
mod orphans;
mod plan;
mod regroup;
mod round;
pub(crate) mod settings;
pub(crate) mod state;
pub(crate) mod writer;

use std::sync::Weak;
use std::sync::atomic::Ordering;

pub use settings::CompactionSettings;

use super::shared::EngineShared;
use crate::error::{Result, StreamError};

pub(crate) use round::{compact, compact_round};

/// The compactor's loop: a round every `interval`, or sooner when woken.
pub(crate) async fn run_compactor(engine: Weak<EngineShared>) {
    let Some(wake) = engine.upgrade().map(|e| e.wake_compactor.clone()) else {
        return;
    };
    loop {
        let Some(interval) = engine.upgrade().map(|e| e.settings.compaction.interval) else {
            return;
        };
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = wake.notified() => {}
        }
        let Some(shared) = engine.upgrade() else {
            return;
        };
        match compact_round(&shared, shared.settings.compaction.max_round_bytes).await {
            // What the round left is taken at once.
            Ok(true) => shared.wake_compactor.notify_one(),
            Ok(false) => {}
            Err(StreamError::Failpoint(name)) => {
                tracing::warn!(failpoint = name, "compactor stops at a failpoint");
                return;
            }
            Err(error) => {
                tracing::warn!(%error, "compaction round failed; retrying");
                let backoff = shared.settings.compaction.retry_backoff;
                drop(shared);
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

/// Deletes every object waiting for deletion, grace period or not (at shutdown).
pub(crate) async fn delete_pending(engine: &EngineShared) {
    round::finish_wal_deletes(engine).await;
    let mut state = engine.compaction_lock.lock().await;
    gc::delete_expired(engine, &mut state, true).await;
}

/// The second pass's loop: a run every `maintenance_interval`, beside the compactor (whose rounds
/// it never holds up for long: regrouping, the slow part, runs outside the compaction lock).
pub(crate) async fn run_second_pass(engine: Weak<EngineShared>) {
    loop {
        let Some(interval) = engine
            .upgrade()
            .map(|e| e.settings.compaction.maintenance_interval)
        else {
            return;
        };
        tokio::time::sleep(interval).await;
        let Some(shared) = engine.upgrade() else {
            return;
        };
        match second_pass(&shared).await {
            Ok(()) => {}
            Err(StreamError::ShutDown) => return,
            Err(StreamError::Failpoint(name)) => {
                tracing::warn!(failpoint = name, "maintenance stops at a failpoint");
                return;
            }
            Err(error) => tracing::warn!(%error, "maintenance failed; retrying next time"),
        }
    }
}

/// One run of the second pass: merge small stream objects and collect garbage (under the compaction
/// lock), regroup stream-set objects (outside it: its commit is guarded by the version compares
/// on the objects it replaces), then delete what waited out its grace period.
pub(crate) async fn second_pass(engine: &EngineShared) -> Result<()> {
    {
        let mut state = engine.compaction_lock.lock().await;
        if engine.halted() {
            return Err(StreamError::ShutDown);
        }
        for stream in engine.open_streams() {
            if !stream.fenced.load(Ordering::Acquire) {
                merge::merge_stream_objects(engine, &stream, &mut state).await?;
            }
        }
        gc::collect_garbage(engine, &mut state).await?;
        orphans::sweep_if_due(engine, &mut state).await?;
    }
    let replaced = regroup::regroup(engine).await?;
    let mut state = engine.compaction_lock.lock().await;
    state.pending.push(replaced);
    gc::delete_expired(engine, &mut state, false).await;
    Ok(())
}
