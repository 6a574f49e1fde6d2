//! Table manifests, and what a rebuild from objects does with the manifests
//! (docs/metadata-recovery.md, "Manifests").
//!
//! A table manifest is the table record's metadata value as stored, at
//! `manifests/tables/{name}/{incarnation:020}` on the store of committed objects: written before a
//! table is created (deleted again when the create fails), rewritten after each schema version
//! or retention change until it holds what the metadata holds, deleted when the table is
//! dropped. A rebuild recreates from them the tables the restored metadata lacks
//! ([`restore_tables`]), and after the stream engine's rebuild writes back the tablet registry
//! entries that stream manifests name ([`adopt_tablets`]).

use std::sync::Arc;

use mink_metadata::value::{decode, encode};
use mink_metadata::{Compare, Metadata, Op, TableRecord, Txn, keys};
use mink_s3stream::format::manifest::StreamManifest;
use mink_s3stream::storage::ObjectStorage;
use mink_tablet::TabletId;
use mink_tablet::registry::{Adopted, adopt};
use serde::Serialize;

use crate::error::{ApiError, ApiResult};

/// Where table manifests are kept on the store of committed objects.
pub const TABLE_MANIFESTS: &str = "manifests/tables/";

/// Rewrites of a manifest while the table record keeps changing under it, before giving up.
const ATTEMPTS: usize = 8;

/// The table manifests of one store.
#[derive(Debug, Clone)]
pub struct TableManifests {
    store: Arc<dyn ObjectStorage>,
}

fn key(record: &TableRecord) -> String {
    format!(
        "{TABLE_MANIFESTS}{}/{:020}",
        record.name, record.incarnation
    )
}

fn storage(what: &str) -> impl Fn(mink_s3stream::storage::StorageError) -> ApiError + '_ {
    move |e| ApiError::Unavailable {
        message: format!("writing the table manifest of {what}: {e}"),
    }
}

impl TableManifests {
    /// Manifests on `store`.
    pub fn new(store: Arc<dyn ObjectStorage>) -> Self {
        TableManifests { store }
    }

    /// Writes the manifest of `record` as it is (before the table is created).
    pub async fn put(&self, record: &TableRecord) -> ApiResult<()> {
        self.store
            .put(&key(record), encode(record))
            .await
            .map_err(storage(&record.name))?;
        Ok(())
    }

    /// Writes the manifest of `record` (just written to the metadata), then again with what
    /// the metadata holds until the two agree: another node's change racing this one's leaves
    /// the manifest at least as new as the record.
    pub async fn follow(&self, metadata: &Metadata, record: &TableRecord) -> ApiResult<()> {
        let mut record = record.clone();
        for _ in 0..ATTEMPTS {
            self.put(&record).await?;
            match metadata.get_table(&record.name).await? {
                Some(current) if current.incarnation == record.incarnation => {
                    if current == record {
                        return Ok(());
                    }
                    record = current;
                }
                // Dropped (or dropped and created again) meanwhile: its manifest is not ours.
                _ => return Ok(()),
            }
        }
        Err(ApiError::Unavailable {
            message: format!(
                "table `{}` kept changing while its manifest was written; try again",
                record.name
            ),
        })
    }

    /// Deletes the manifest of `record`'s incarnation (a dropped table's, or a create that
    /// failed).
    pub async fn delete(&self, record: &TableRecord) -> ApiResult<()> {
        match self.store.delete(&key(record)).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(storage(&record.name)(e)),
        }
    }
}

/// What [`restore_tables`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TablesRestored {
    /// Table manifests read.
    pub manifests: usize,
    /// Tables recreated (the metadata had no record of the name).
    pub created: Vec<String>,
    /// Tables whose record the manifest brought up to date (schema versions or retention
    /// changed after the snapshot).
    pub updated: Vec<String>,
    /// Tables replaced by a later incarnation (dropped and created again after the snapshot);
    /// the earlier one is left a tombstone, so its tablets are destroyed as after any drop.
    pub replaced: Vec<String>,
    /// Manifests that did not decode: key and why.
    pub corrupt: Vec<(String, String)>,
}

/// Recreates from the table manifests on `store` what the metadata lacks: a table whose name
/// it does not hold (unless that incarnation was dropped), a newer state of the same
/// incarnation, a later incarnation of a name. Run while no node runs.
pub async fn restore_tables(
    metadata: &Metadata,
    store: &Arc<dyn ObjectStorage>,
) -> Result<TablesRestored, String> {
    let kv = metadata.kv();
    let listed = store
        .list(TABLE_MANIFESTS)
        .await
        .map_err(|e| format!("listing {TABLE_MANIFESTS}: {e}"))?;
    let mut done = TablesRestored {
        manifests: listed.len(),
        ..TablesRestored::default()
    };
    for meta in listed {
        let raw = match store.get(&meta.key).await {
            Ok(raw) => raw,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(format!("reading {}: {e}", meta.key)),
        };
        let record: TableRecord = match decode(&meta.key, &raw) {
            Ok(record) => record,
            Err(e) => {
                done.corrupt.push((meta.key, e.to_string()));
                continue;
            }
        };
        let dropped = keys::dropped(&record.name, record.incarnation);
        let meta_err = |e: mink_metadata::MetaError| format!("table `{}`: {e}", record.name);
        if kv.get(&dropped).await.map_err(meta_err)?.is_some() {
            continue;
        }
        let table_key = keys::table(&record.name);
        let current = kv.get(&table_key).await.map_err(meta_err)?;
        let mut ops = vec![Op::put(&table_key, encode(&record))];
        let compare = match &current {
            None => {
                done.created.push(record.name.clone());
                Compare::absent(&table_key)
            }
            Some(kv_now) => {
                let now: TableRecord = decode(&kv_now.key, &kv_now.value).map_err(meta_err)?;
                if now.incarnation > record.incarnation || now == record {
                    continue;
                }
                if now.incarnation == record.incarnation {
                    // Schema versions only grow: never lose one the metadata holds.
                    if now.schemas.len() > record.schemas.len() {
                        continue;
                    }
                    done.updated.push(record.name.clone());
                } else {
                    ops.push(Op::put(
                        keys::dropped(&now.name, now.incarnation),
                        encode(&now),
                    ));
                    done.replaced.push(record.name.clone());
                }
                Compare::version(&table_key, kv_now.version)
            }
        };
        let outcome = kv
            .txn(Txn {
                compares: vec![compare],
                on_success: ops,
            })
            .await
            .map_err(meta_err)?;
        if !outcome.succeeded {
            return Err(format!(
                "table `{}` changed during the rebuild: is a node running?",
                record.name
            ));
        }
    }
    Ok(done)
}

/// What [`adopt_tablets`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TabletsAdopted {
    /// Registry entries written (streams the rebuild recreated, or entries the metadata lost).
    pub registered: usize,
    /// Entries that already named the manifest's stream.
    pub already: usize,
    /// Manifests of streams whose tablet names another stream (streams that lost a creation
    /// race, empty), or whose table or stream is gone: left alone.
    pub skipped: usize,
}

/// Writes the tablet registry entry each stream manifest names, where the metadata has the
/// stream (not deleted) and that incarnation of its table, and the tablet has no entry yet.
pub async fn adopt_tablets(
    metadata: &Metadata,
    manifests: &[StreamManifest],
) -> Result<TabletsAdopted, String> {
    let mut done = TabletsAdopted::default();
    for manifest in manifests {
        let Some(tablet) = TabletId::from_label(&manifest.label) else {
            done.skipped += 1;
            continue;
        };
        let stream = metadata
            .get_stream(manifest.stream_id)
            .await
            .map_err(|e| format!("stream {}: {e}", manifest.stream_id))?;
        let table = metadata
            .get_table(&tablet.table)
            .await
            .map_err(|e| format!("table `{}`: {e}", tablet.table))?;
        let live = stream.is_some_and(|s| s.state != mink_metadata::StreamState::Deleted)
            && table.is_some_and(|t| t.incarnation == tablet.incarnation);
        if !live {
            done.skipped += 1;
            continue;
        }
        match adopt(metadata.kv().as_ref(), &tablet, manifest.stream_id)
            .await
            .map_err(|e| e.to_string())?
        {
            Adopted::Registered => done.registered += 1,
            Adopted::Already => done.already += 1,
            Adopted::Other(_) => done.skipped += 1,
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_are_keyed_by_name_and_incarnation() {
        let record = TableRecord {
            name: "t".into(),
            schemas: Default::default(),
            bucket_count: 1,
            partitions: vec!["default".into()],
            incarnation: 9,
            retention: None,
            kafka_key: None,
            stream: None,
            compression: None,
        };
        assert_eq!(key(&record), "manifests/tables/t/00000000000000000009");
    }
}
