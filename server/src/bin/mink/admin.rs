//! `mink admin backup|restore|rebuild`: metadata snapshots and the rebuild from objects
//! (docs/metadata-recovery.md), worked on the
//! node's stores directly, with the same settings as `mink serve` (`--config`, `--storage`,
//! `--metadata`, ...). Backup reads the metadata consistently while nodes run; restore writes a
//! snapshot into an empty metadata store (or, forced, over one) while no node runs on it; rebuild
//! lists the object store and places what the metadata lacks, also while no node runs.

use std::path::PathBuf;

use bytes::Bytes;
use clap::{Args, Subcommand};
use mink_metadata::snapshot::MetaSnapshot;
use mink_metadata::{MetaKvExt, Metadata, MetadataOptions};
use mink_s3stream::rebuild::{RebuildReport, RebuildSettings};
use mink_server::NodeBuilder;
use mink_server::manifests::{TablesRestored, TabletsAdopted, adopt_tablets, restore_tables};
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
    /// Lists the object store and puts back the object records and stream ends the metadata
    /// lacks (after a restore), reporting what it could not place. Run with every node stopped.
    Rebuild(RebuildArgs),
}

#[derive(Debug, Args)]
pub(crate) struct RebuildArgs {
    /// Work out and report the changes without writing them.
    #[arg(long)]
    dry_run: bool,
    /// Objects read at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Run although nodes are registered in the metadata store (they must not be running).
    #[arg(long)]
    force: bool,
    /// After a complete rebuild, delete the objects that hold nothing placed (superseded or
    /// fenced; nothing refers to them).
    #[arg(long)]
    delete_unplaced: bool,
    #[command(flatten)]
    node: ServeArgs,
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
        AdminCommand::Rebuild(args) => rebuild(out, args).await,
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

async fn rebuild(out: Output, args: RebuildArgs) -> CliResult<()> {
    let parts = components(&args.node).await?;
    let kv = parts.metadata_kv().ok_or("no metadata store")?;
    // Registrations are leased on etcd, so one there is a node alive (or dead within its
    // lease); redb's file lock already keeps a running node out.
    let nodes = if kv.backend() == "etcd" {
        kv.scan_all(mink_metadata::keys::NODES, 512)
            .await
            .map_err(|e| format!("reading the node registrations: {e}"))?
    } else {
        Vec::new()
    };
    if !nodes.is_empty() && !args.force {
        let names: Vec<&str> = nodes
            .iter()
            .filter_map(|kv| kv.key.strip_prefix(mink_metadata::keys::NODES))
            .collect();
        return Err(format!(
            "nodes are registered ({}): stop every node before a rebuild (--force if they are stopped and their registrations not yet expired)",
            names.join(", ")
        ));
    }
    let wal = parts.wal_objects().ok_or("no object store")?;
    let data = parts.data_objects().ok_or("no object store")?;
    let engine = &parts.node_settings().engine;
    let settings = RebuildSettings {
        wal_prefix: engine.wal_prefix.clone(),
        data_prefix: engine.data_prefix.clone(),
        manifest_prefix: engine.manifest_prefix.clone(),
        concurrency: args.concurrency,
        dry_run: args.dry_run,
        delete_unplaced: args.delete_unplaced,
    };
    let options = MetadataOptions {
        watch_objects: false,
        ..MetadataOptions::default()
    };
    let metadata = Metadata::open(kv.clone(), options)
        .await
        .map_err(|e| format!("opening the metadata: {e}"))?;
    let started = std::time::Instant::now();
    // Tables first (a table created or changed after the snapshot), then the streams and
    // objects, then the tablets the recreated streams belong to.
    let tables = if args.dry_run {
        TablesRestored::default()
    } else {
        restore_tables(&metadata, data).await?
    };
    let report = mink_s3stream::rebuild::rebuild(&metadata, wal, data, &settings)
        .await
        .map_err(|e| format!("rebuild: {e}"))?;
    let tablets = if args.dry_run {
        TabletsAdopted::default()
    } else {
        adopt_tablets(&metadata, &report.manifests).await?
    };
    let seconds = started.elapsed().as_secs_f64();
    let mut value = serde_json::to_value(&report).map_err(|e| e.to_string())?;
    value["seconds"] = json!(seconds);
    value["complete"] = json!(report.complete() && tables.corrupt.is_empty());
    value["tables"] = serde_json::to_value(&tables).map_err(|e| e.to_string())?;
    value["tablets"] = serde_json::to_value(&tablets).map_err(|e| e.to_string())?;
    out.say(
        || {
            format!(
                "{}\ntables from manifests: {} created, {} updated, {} replaced by a later incarnation; tablets registered from stream manifests: {}",
                rebuild_text(&report, seconds),
                tables.created.len(),
                tables.updated.len(),
                tables.replaced.len(),
                tablets.registered
            )
        },
        &value,
    )
}

fn rebuild_text(report: &RebuildReport, seconds: f64) -> String {
    let mut text = format!(
        "{}listed {} objects ({} known, {} records gone), read {} indexes, placed {} objects ({} ranges), moved {} streams ({} offsets recovered), removed {} WAL reservations in {seconds:.1} s",
        if report.dry_run { "dry run: " } else { "" },
        report.objects_listed,
        report.records_present,
        report.records_gone,
        report.objects_read,
        report.objects_placed,
        report.ranges_placed,
        report.streams_moved,
        report.offsets_recovered,
        report.wal_reservations_removed,
    );
    if report.objects_unplaced > 0 {
        text.push_str(&format!(
            "\n{} objects ({}) hold nothing placed (superseded, fenced or of unknown streams){}",
            report.objects_unplaced,
            bytes(report.bytes_unplaced),
            if report.objects_deleted > 0 {
                format!("; {} deleted", report.objects_deleted)
            } else {
                " and are left on the store".to_owned()
            }
        ));
    }
    for s in &report.recreated_streams {
        text.push_str(&format!(
            "\nstream {} recreated from its manifest ({})",
            s.stream_id, s.label
        ));
    }
    for s in &report.unknown_streams {
        text.push_str(&format!(
            "\nnot placed: stream {} has neither a record nor a manifest: {} blocks, {}",
            s.stream_id,
            s.blocks,
            bytes(s.bytes)
        ));
    }
    for h in &report.holes {
        text.push_str(&format!(
            "\nnot placed: stream {} offsets {}..{}",
            h.stream_id, h.from, h.to
        ));
    }
    for (stream, from, to) in &report.starts_moved {
        text.push_str(&format!(
            "\nstream {stream}: log start moved from {from} to {to} (trimmed after the snapshot, or lost)"
        ));
    }
    for (key, why) in &report.corrupt {
        text.push_str(&format!("\ncorrupt: {key}: {why}"));
    }
    text
}
