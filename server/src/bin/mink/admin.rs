//! `mink admin backup|restore`: metadata snapshots (docs/metadata-recovery.md), worked on the
//! node's stores directly, with the same settings as `mink serve` (`--config`, `--storage`,
//! `--metadata`, ...). Backup reads the metadata consistently while nodes run; restore writes a
//! snapshot into an empty metadata store (or, forced, over one) while no node runs on it.

use std::path::PathBuf;

use bytes::Bytes;
use clap::{Args, Subcommand};
use mink_metadata::snapshot::MetaSnapshot;
use mink_server::NodeBuilder;
use serde_json::json;

use crate::client::CliResult;
use crate::flags::ServeArgs;
use crate::output::{Output, bytes};

/// Where snapshots go in the object store.
const PREFIX: &str = "meta-snapshots/";

#[derive(Debug, Subcommand)]
pub(crate) enum AdminCommand {
    /// Writes a snapshot of the metadata to the object store (or a file).
    Backup(BackupArgs),
    /// Writes a snapshot into an empty metadata store (the newest in the object store, or a file).
    Restore(RestoreArgs),
}

#[derive(Debug, Args)]
pub(crate) struct BackupArgs {
    /// Write the snapshot to this file instead of the object store.
    #[arg(long)]
    file: Option<PathBuf>,
    #[command(flatten)]
    node: ServeArgs,
}

#[derive(Debug, Args)]
pub(crate) struct RestoreArgs {
    /// Read the snapshot from this file instead of the newest in the object store.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Replace what the metadata store holds (every key under mink/).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    node: ServeArgs,
}

/// The node's components, from the same settings `mink serve` takes.
async fn components(node: &ServeArgs) -> CliResult<NodeBuilder> {
    let settings = node.settings()?;
    NodeBuilder::from_settings(settings)
        .await
        .map_err(|e| e.to_string())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub(crate) async fn run(out: Output, command: AdminCommand) -> CliResult<()> {
    match command {
        AdminCommand::Backup(args) => backup(out, args).await,
        AdminCommand::Restore(args) => restore(out, args).await,
    }
}

async fn backup(out: Output, args: BackupArgs) -> CliResult<()> {
    let parts = components(&args.node).await?;
    let kv = parts.metadata_kv().ok_or("no metadata store")?;
    let snapshot = MetaSnapshot::take(kv.as_ref(), now_ms())
        .await
        .map_err(|e| format!("taking the snapshot: {e}"))?;
    let encoded = snapshot.encode();
    let size = encoded.len() as u64;
    let place = match &args.file {
        Some(path) => {
            std::fs::write(path, &encoded)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            path.display().to_string()
        }
        None => {
            let store = parts.data_objects().ok_or("no object store")?;
            let key = format!("{PREFIX}{:020}.snap", snapshot.taken_at_ms);
            store
                .put(&key, encoded)
                .await
                .map_err(|e| format!("writing {key}: {e}"))?;
            format!("{} {key}", store.name())
        }
    };
    out.say(
        || {
            format!(
                "metadata snapshot of {} keys ({}) written to {place}",
                snapshot.entries.len(),
                bytes(size)
            )
        },
        &json!({"keys": snapshot.entries.len(), "bytes": size, "taken_at_ms": snapshot.taken_at_ms, "written_to": place}),
    )
}

async fn restore(out: Output, args: RestoreArgs) -> CliResult<()> {
    let parts = components(&args.node).await?;
    let kv = parts.metadata_kv().ok_or("no metadata store")?;
    let (name, raw): (String, Bytes) = match &args.file {
        Some(path) => (
            path.display().to_string(),
            Bytes::from(
                std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?,
            ),
        ),
        None => {
            let store = parts.data_objects().ok_or("no object store")?;
            let listed = store
                .list(PREFIX)
                .await
                .map_err(|e| format!("listing {PREFIX}: {e}"))?;
            let newest = listed
                .iter()
                .map(|m| m.key.clone())
                .filter(|k| k.ends_with(".snap"))
                .max()
                .ok_or_else(|| {
                    format!(
                        "no snapshot under {PREFIX} in {} (mink admin backup writes one)",
                        store.name()
                    )
                })?;
            let raw = store
                .get(&newest)
                .await
                .map_err(|e| format!("reading {newest}: {e}"))?;
            (newest, raw)
        }
    };
    let snapshot = MetaSnapshot::decode(&name, &raw).map_err(|e| e.to_string())?;
    let report = snapshot
        .restore(kv.as_ref(), args.force)
        .await
        .map_err(|e| e.to_string())?;
    out.say(
        || {
            format!(
                "restored {} keys from {name} (taken at {} ms){}; {} id counters moved past every id handed out",
                report.keys,
                snapshot.taken_at_ms,
                if report.replaced > 0 {
                    format!(", replacing {} keys", report.replaced)
                } else {
                    String::new()
                },
                report.counters_raised
            )
        },
        &json!({"keys": report.keys, "replaced": report.replaced, "counters_raised": report.counters_raised, "from": name, "taken_at_ms": snapshot.taken_at_ms}),
    )
}
