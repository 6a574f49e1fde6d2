//! Tables: their schema versions, bucket count and partitions.
//!
//! | Key | Value |
//! |---|---|
//! | `mink/tables/{name}` | [`TableRecord`]: name, schema text by schema id, bucket count, partitions, incarnation |
//! | `mink/dropped/{name}@{incarnation}` | the [`TableRecord`] of a dropped table, until its tablets are destroyed |
//! | `mink/ids/table` | the allocator of incarnations |
//!
//! The name is one key segment (no `/`). Schema ids are never reused for a different schema.
//!
//! A drop is one transaction: the record is deleted and its tombstone put, so the name is free at
//! once while the tombstone remembers what must still be destroyed; whoever destroys the tablets
//! (the node's cleanup pass, at any time and as often as needed) deletes the tombstone last.

use super::Metadata;
use super::read::{SCAN_PAGE, decode_all, get_record};
use crate::alloc::{IdKind, reserve_block};
use crate::error::{InvalidRequest, MetaError, Result};
use crate::keys;
use crate::kv::{CasOutcome, Compare, MetaKvExt, Op, Txn};
use crate::records::{BucketAssignment, RetentionPolicy, TableCompression, TableRecord};
use crate::value::{decode, encode};

/// One decision of the leader: the assignment at `key`, read at `version`, goes to `to` (or is
/// deleted, with `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignmentMove {
    /// The assignment key.
    pub key: String,
    /// Its version as read.
    pub version: u64,
    /// The node it goes to; `None` deletes it.
    pub to: Option<String>,
}

impl Metadata {
    /// A fresh incarnation for a table about to be created: never 0 (the incarnation of tables
    /// created before incarnations) and never handed out twice on this store.
    pub async fn allocate_table_incarnation(&self) -> Result<u64> {
        // Tables are created rarely: one id per round trip, none lost to unused blocks.
        let ids = reserve_block(self.kv.as_ref(), IdKind::Table, 1).await?;
        Ok(ids.start + 1)
    }

    /// Drops the table `name`: deletes its record and puts its tombstone
    /// `mink/dropped/{name}@{incarnation}` in one transaction. Returns the record as it was, or
    /// `None` when there was no such table.
    pub async fn drop_table(&self, name: &str) -> Result<Option<TableRecord>> {
        keys::check_segment("table", name)?;
        let key = keys::table(name);
        self.retry("drop table", &key, |_| {
            let key = key.clone();
            async move {
                let Some((record, version)) = get_record::<TableRecord>(&self.kv.get(&key).await?)?
                else {
                    return Ok(Some(None));
                };
                let tombstone = keys::dropped(name, record.incarnation);
                let outcome = self
                    .kv
                    .txn(Txn {
                        compares: vec![Compare::version(&key, version)],
                        on_success: vec![Op::delete(&key), Op::put(tombstone, encode(&record))],
                    })
                    .await?;
                Ok(outcome.succeeded.then_some(Some(record)))
            }
        })
        .await
    }

    /// The tombstones of dropped tables whose tablets may not all be destroyed yet.
    pub async fn list_dropped_tables(&self) -> Result<Vec<TableRecord>> {
        decode_all(&self.kv.scan_all(keys::DROPPED, SCAN_PAGE).await?)
    }

    /// Deletes the tombstone of `table` (its tablets are destroyed); returns whether it existed.
    pub async fn delete_tombstone(&self, table: &TableRecord) -> Result<bool> {
        keys::check_segment("table", &table.name)?;
        self.kv
            .delete(&keys::dropped(&table.name, table.incarnation))
            .await
    }

    /// Creates a table; fails with [`MetaError::AlreadyExists`] if the name is taken.
    pub async fn create_table(&self, table: &TableRecord) -> Result<()> {
        self.create_table_assigned(table, &[]).await
    }

    /// Creates a table with the assignment of each of its buckets, in one transaction: the
    /// buckets of a new table have owners from the start (docs/cluster.md, "Ownership").
    /// `assignments` holds `(partition, bucket, node)`.
    pub async fn create_table_assigned(
        &self,
        table: &TableRecord,
        assignments: &[(String, u32, String)],
    ) -> Result<()> {
        keys::check_segment("table", &table.name)?;
        let key = keys::table(&table.name);
        if assignments.is_empty() {
            return self
                .create_record(&key, table, "table", table.name.clone())
                .await;
        }
        let segment = keys::table_segment(&table.name, table.incarnation);
        let mut puts = Vec::with_capacity(assignments.len());
        for (partition, bucket, node) in assignments {
            keys::check_segment("partition", partition)?;
            keys::check_segment("node", node)?;
            let record = BucketAssignment {
                node: node.clone(),
                leader: 0,
            };
            puts.push(Op::put(
                keys::assignment(&segment, partition, *bucket),
                encode(&record),
            ));
        }
        // The table and as many assignments as one transaction takes; the rest right after,
        // within the backend's limit (a bucket whose assignment is not written yet is served
        // by whichever node it reaches, and moves once it is).
        let per_txn = self.kv.max_txn_ops().unwrap_or(usize::MAX).max(2);
        let rest = puts.split_off(puts.len().min(per_txn - 1));
        let mut ops = vec![Op::put(key.clone(), encode(table))];
        ops.extend(puts);
        let outcome = self
            .kv
            .txn(Txn {
                compares: vec![Compare::absent(key)],
                on_success: ops,
            })
            .await?;
        if !outcome.succeeded {
            return Err(MetaError::AlreadyExists {
                what: "table",
                id: table.name.clone(),
            });
        }
        for chunk in rest.chunks(per_txn) {
            self.kv
                .txn(Txn {
                    compares: Vec::new(),
                    on_success: chunk.to_vec(),
                })
                .await?;
        }
        Ok(())
    }

    /// The assignment at `key` (a key of [`keys::assignment`]), if the bucket has one.
    pub async fn assignment(&self, key: &str) -> Result<Option<BucketAssignment>> {
        Ok(get_record::<BucketAssignment>(&self.kv.get(key).await?)?.map(|(a, _)| a))
    }

    /// Assigns the bucket at `key` to `node` (a transfer), compared on the assignment as read, so
    /// two moves racing on one bucket do not both win: the loser re-reads and tries again.
    /// Returns the node it was assigned to before, if any.
    pub async fn reassign(&self, key: &str, node: &str) -> Result<Option<String>> {
        keys::check_segment("node", node)?;
        self.retry("reassign a bucket", key, |_| async move {
            let current = get_record::<BucketAssignment>(&self.kv.get(key).await?)?;
            let (before, version) = match current {
                Some((a, version)) => (Some(a.node), version),
                None => (None, 0),
            };
            let record = BucketAssignment {
                node: node.to_owned(),
                leader: 0,
            };
            match self
                .kv
                .compare_and_swap(key, version, Some(encode(&record)))
                .await?
            {
                CasOutcome::Swapped { .. } => Ok(Some(before)),
                CasOutcome::Conflict { .. } => Ok(None),
            }
        })
        .await
    }

    /// The assignments of every bucket with their versions, for the leader's fenced rewrites.
    pub async fn assignments_versioned(&self) -> Result<Vec<(String, BucketAssignment, u64)>> {
        let all = self.kv.scan_all(keys::ASSIGNMENTS, SCAN_PAGE).await?;
        all.iter()
            .map(|kv| {
                Ok((
                    kv.key.clone(),
                    decode::<BucketAssignment>(&kv.key, &kv.value)?,
                    kv.version,
                ))
            })
            .collect()
    }

    /// The leader's decisions, in one transaction: each move compares its assignment's version
    /// as the leader read it, and all compare `fence` (the leader's candidacy, [`crate::Election::fence`]),
    /// so a deposed leader or a concurrent transfer makes the whole batch fail (returns `false`,
    /// nothing written). A move to `None` deletes the assignment (a dropped table's). Callers
    /// keep a batch within the store's limits (etcd: 128 operations).
    pub async fn assign_as_leader(
        &self,
        moves: &[AssignmentMove],
        fence: crate::kv::Compare,
        revision: u64,
    ) -> Result<bool> {
        let mut compares = vec![fence];
        let mut ops = Vec::with_capacity(moves.len());
        for m in moves {
            compares.push(Compare::version(m.key.clone(), m.version));
            ops.push(match &m.to {
                Some(node) => {
                    keys::check_segment("node", node)?;
                    Op::put(
                        m.key.clone(),
                        encode(&BucketAssignment {
                            node: node.clone(),
                            leader: revision,
                        }),
                    )
                }
                None => Op::delete(m.key.clone()),
            });
        }
        let outcome = self
            .kv
            .txn(Txn {
                compares,
                on_success: ops,
            })
            .await?;
        Ok(outcome.succeeded)
    }

    /// The assignments of every bucket, as `(key, node)`: what the routing view starts from.
    pub async fn assignments(&self) -> Result<Vec<(String, BucketAssignment)>> {
        Ok(self
            .assignments_versioned()
            .await?
            .into_iter()
            .map(|(key, a, _)| (key, a))
            .collect())
    }

    /// Reads a table.
    pub async fn get_table(&self, name: &str) -> Result<Option<TableRecord>> {
        keys::check_segment("table", name)?;
        Ok(get_record::<TableRecord>(&self.kv.get(&keys::table(name)).await?)?.map(|(r, _)| r))
    }

    /// Every table, by name.
    pub async fn list_tables(&self) -> Result<Vec<TableRecord>> {
        decode_all(&self.kv.scan_all(keys::TABLES, SCAN_PAGE).await?)
    }

    /// Adds schema version `schema_id` to a table. Adding the same schema again is a no-op; a
    /// different schema under an existing id is invalid.
    pub async fn add_schema(
        &self,
        name: &str,
        schema_id: u16,
        schema: &str,
    ) -> Result<TableRecord> {
        keys::check_segment("table", name)?;
        let key = keys::table(name);
        self.update_record(
            &key,
            "add schema",
            ("table", name),
            |table: &mut TableRecord| {
                match table.schemas.get(&schema_id) {
                    Some(existing) if existing == schema => {}
                    Some(_) => {
                        return Err(MetaError::Invalid(InvalidRequest::SchemaIdTaken {
                            table: name.to_owned(),
                            schema_id,
                        }));
                    }
                    None => {
                        table.schemas.insert(schema_id, schema.to_owned());
                    }
                }
                Ok(())
            },
        )
        .await
    }

    /// Sets (or, with `None`, removes) the compression of the table's appends, as a
    /// compare-and-set on its record; returns the record written.
    pub async fn set_table_compression(
        &self,
        name: &str,
        compression: Option<TableCompression>,
    ) -> Result<TableRecord> {
        keys::check_segment("table", name)?;
        let key = keys::table(name);
        self.update_record(
            &key,
            "set compression",
            ("table", name),
            |table: &mut TableRecord| {
                table.compression = compression;
                Ok(())
            },
        )
        .await
    }

    /// Sets (or, with `None`, removes) the table's own retention policy, as a compare-and-set
    /// on its record; returns the record written.
    pub async fn set_table_retention(
        &self,
        name: &str,
        retention: Option<RetentionPolicy>,
    ) -> Result<TableRecord> {
        keys::check_segment("table", name)?;
        let key = keys::table(name);
        self.update_record(
            &key,
            "set retention",
            ("table", name),
            |table: &mut TableRecord| {
                table.retention = retention;
                Ok(())
            },
        )
        .await
    }

    /// Deletes a table record without a tombstone; returns whether it existed. A table with
    /// tablets is dropped with [`Metadata::drop_table`] instead.
    pub async fn delete_table(&self, name: &str) -> Result<bool> {
        keys::check_segment("table", name)?;
        self.kv.delete(&keys::table(name)).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::kv::MemoryKv;
    use crate::log::MetadataOptions;

    fn table(incarnation: u64) -> TableRecord {
        TableRecord {
            name: "t".to_owned(),
            schemas: [(1u16, "s".to_owned())].into(),
            bucket_count: 1,
            partitions: vec!["default".to_owned()],
            incarnation,
            retention: None,
            kafka_key: None,
            stream: None,
            compression: None,
        }
    }

    #[tokio::test]
    async fn a_drop_racing_a_schema_addition_keeps_the_record_it_deleted_in_the_tombstone() {
        let meta = Metadata::open(Arc::new(MemoryKv::new()), MetadataOptions::default())
            .await
            .unwrap();
        let incarnation = meta.allocate_table_incarnation().await.unwrap();
        assert!(incarnation > 0);
        meta.create_table(&table(incarnation)).await.unwrap();
        meta.add_schema("t", 2, "s2").await.unwrap();
        let dropped = meta.drop_table("t").await.unwrap().unwrap();
        assert_eq!(dropped.latest_schema_id(), Some(2));
        let tombstone = meta
            .kv
            .get(&keys::dropped("t", incarnation))
            .await
            .unwrap()
            .unwrap();
        let stored: TableRecord = crate::value::decode(&tombstone.key, &tombstone.value).unwrap();
        assert_eq!(stored, dropped);
        assert!(meta.get_table("t").await.unwrap().is_none());
        assert!(meta.drop_table("t").await.unwrap().is_none());
    }
}
