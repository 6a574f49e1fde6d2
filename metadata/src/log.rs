//! The metadata log: the typed operations Mink performs on the metadata KV, each one atomic.
//!
//! - Streams: create, open (bumps the epoch, fencing every older owner), close, delete, trim.
//! - [`Metadata::commit`]: one KV transaction that adds objects, removes compacted ones, advances
//!   stream end offsets and retires compacted WAL ids, with a compare on every named stream's
//!   record, so a commit from a stale epoch fails with [`MetaError::Fenced`] and changes nothing.
//! - The WAL registry: WAL object ids are reserved per block and registered per node, so recovery
//!   finds every uncompacted WAL object without listing the bucket.
//! - Tables, node registrations, writer snapshots and id allocation.
//!
//! The [`ObjectIndex`] is kept current by every commit made here and by a background watch of the
//! objects prefix (other nodes' commits on etcd); the task stops when the `Metadata` is dropped.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use futures::future::try_join_all;
use tokio::task::JoinHandle;

use crate::alloc::{IdAllocator, IdKind};
use crate::error::{InvalidRequest, MetaError, Result};
use crate::index::ObjectIndex;
use crate::keys;
use crate::kv::{
    CasOutcome, Compare, KeyValue, MetaKv, MetaKvExt, Op, Txn, WatchEvent, WatchStream,
};
use crate::records::{
    NodeRecord, ObjectRecord, StreamRecord, StreamState, TableRecord, WalReservation,
    WriterSnapshot,
};
use crate::value::{MetaRecord, decode, encode};

/// Keys per page when scanning.
const SCAN_PAGE: usize = 512;

/// Settings of a [`Metadata`].
#[derive(Debug, Clone)]
pub struct MetadataOptions {
    /// Ids taken per round trip by each allocator. Default 100.
    pub id_block_size: u64,
    /// Attempts of a commit or update that loses a race to an unrelated change. Default 32.
    pub max_attempts: u32,
    /// Follow other writers' object commits with a watch (where the backend has watches). Default on.
    pub watch_objects: bool,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        MetadataOptions {
            id_block_size: 100,
            max_attempts: 32,
            watch_objects: true,
        }
    }
}

/// WAL ids of `node` below `below` have been compacted (their data is in committed objects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalCompacted {
    /// The node whose WAL it is.
    pub node: String,
    /// Every WAL object id of the node below this is compacted.
    pub below: u64,
}

/// One atomic change of the metadata log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitRequest {
    /// Every stream the commit touches, with the epoch the caller holds. All are fenced.
    pub stream_epochs: Vec<(u64, u64)>,
    /// Objects to add (their ids must be new).
    pub add_objects: Vec<ObjectRecord>,
    /// Object ids to remove (they must exist).
    pub remove_objects: Vec<u64>,
    /// New committed end offsets `(stream, end)`; each stream must be in `stream_epochs` and an end
    /// may not move backwards.
    pub advance: Vec<(u64, u64)>,
    /// WAL ids retired by this commit.
    pub remove_wal: Vec<WalCompacted>,
}

/// What a successful commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOutcome {
    /// The KV revision of the commit.
    pub revision: u64,
    /// The records of the streams in `stream_epochs` after the commit.
    pub streams: Vec<StreamRecord>,
}

/// The metadata log over a [`MetaKv`].
pub struct Metadata {
    kv: Arc<dyn MetaKv>,
    options: MetadataOptions,
    writer_ids: IdAllocator,
    stream_ids: IdAllocator,
    object_ids: IdAllocator,
    index: Arc<ObjectIndex>,
    follower: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metadata")
            .field("backend", &self.kv.backend())
            .field("options", &self.options)
            .field("indexed_objects", &self.index.len())
            .finish()
    }
}

impl Drop for Metadata {
    fn drop(&mut self) {
        if let Some(task) = self.follower.take() {
            task.abort();
        }
    }
}

fn get_record<R: MetaRecord>(kv: &Option<KeyValue>) -> Result<Option<(R, u64)>> {
    kv.as_ref()
        .map(|kv| Ok((decode::<R>(&kv.key, &kv.value)?, kv.version)))
        .transpose()
}

fn decode_all<R: MetaRecord>(kvs: &[KeyValue]) -> Result<Vec<R>> {
    kvs.iter()
        .map(|kv| decode::<R>(&kv.key, &kv.value))
        .collect()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl Metadata {
    /// Opens the metadata log: reads every object record into the index and, if the backend can
    /// watch, follows later object commits in the background.
    pub async fn open(kv: Arc<dyn MetaKv>, options: MetadataOptions) -> Result<Self> {
        let index = Arc::new(ObjectIndex::new());
        let watch = if options.watch_objects {
            match kv.watch_prefix(keys::OBJECTS).await {
                Ok(stream) => Some(stream),
                Err(MetaError::Unsupported { .. }) => None,
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        rebuild_index(kv.as_ref(), &index).await?;
        let follower = watch.map(|stream| {
            tokio::spawn(follow_objects(
                Arc::downgrade(&kv),
                Arc::clone(&index),
                stream,
            ))
        });
        let block = options.id_block_size;
        Ok(Metadata {
            writer_ids: IdAllocator::new(Arc::clone(&kv), IdKind::Writer, block),
            stream_ids: IdAllocator::new(Arc::clone(&kv), IdKind::Stream, block),
            object_ids: IdAllocator::new(Arc::clone(&kv), IdKind::Object, block),
            kv,
            options,
            index,
            follower,
        })
    }

    /// The underlying KV.
    pub fn kv(&self) -> &Arc<dyn MetaKv> {
        &self.kv
    }

    /// The node-local object index.
    pub fn index(&self) -> &Arc<ObjectIndex> {
        &self.index
    }

    /// Re-reads every object record into the index (after a lost watch, or on demand).
    pub async fn rebuild_index(&self) -> Result<()> {
        rebuild_index(self.kv.as_ref(), &self.index).await
    }

    // ---- ids ----

    /// A fresh idempotent-writer id (shared by Flight `init_writer` and Kafka `InitProducerId`).
    pub async fn allocate_writer_id(&self) -> Result<u64> {
        self.writer_ids.next().await
    }

    /// A fresh object id.
    pub async fn allocate_object_id(&self) -> Result<u64> {
        self.object_ids.next().await
    }

    // ---- streams ----

    /// Creates a new, closed stream at epoch 0 with offsets 0..0.
    pub async fn create_stream(&self) -> Result<StreamRecord> {
        let id = self.stream_ids.next().await?;
        let record = StreamRecord {
            id,
            epoch: 0,
            owner: None,
            start_offset: 0,
            end_offset: 0,
            state: StreamState::Closed,
        };
        let key = keys::stream(id);
        match self
            .kv
            .compare_and_swap(&key, 0, Some(encode(&record)))
            .await?
        {
            CasOutcome::Swapped { .. } => Ok(record),
            CasOutcome::Conflict { .. } => Err(MetaError::AlreadyExists {
                what: "stream",
                id: id.to_string(),
            }),
        }
    }

    /// Reads a stream record.
    pub async fn get_stream(&self, id: u64) -> Result<Option<StreamRecord>> {
        Ok(get_record::<StreamRecord>(&self.kv.get(&keys::stream(id)).await?)?.map(|(r, _)| r))
    }

    /// Every stream record, in id order.
    pub async fn list_streams(&self) -> Result<Vec<StreamRecord>> {
        decode_all(&self.kv.scan_all(keys::STREAMS, SCAN_PAGE).await?)
    }

    /// Opens stream `id` for `node`: bumps the epoch (fencing every older epoch), sets the owner
    /// and state Open. Returns the new record, whose epoch the owner presents from now on.
    pub async fn open_stream(&self, id: u64, node: &str) -> Result<StreamRecord> {
        self.update_stream(id, |s| {
            if s.state == StreamState::Deleted {
                return Err(MetaError::StreamNotOpen {
                    stream_id: id,
                    state: s.state.to_string(),
                });
            }
            s.epoch += 1;
            s.owner = Some(node.to_owned());
            s.state = StreamState::Open;
            Ok(())
        })
        .await
    }

    /// Closes stream `id` held at `epoch`, so another node may open it.
    pub async fn close_stream(&self, id: u64, epoch: u64) -> Result<StreamRecord> {
        self.update_stream(id, |s| {
            check_owner(s, epoch)?;
            s.state = StreamState::Closed;
            Ok(())
        })
        .await
    }

    /// Marks stream `id` held at `epoch` deleted; it can never be opened again.
    pub async fn delete_stream(&self, id: u64, epoch: u64) -> Result<StreamRecord> {
        self.update_stream(id, |s| {
            check_owner(s, epoch)?;
            s.state = StreamState::Deleted;
            Ok(())
        })
        .await
    }

    /// Moves the start offset of stream `id` (held at `epoch`) forward to `offset`. A trim below
    /// the current start changes nothing; past the committed end is invalid.
    pub async fn trim_stream(&self, id: u64, epoch: u64, offset: u64) -> Result<StreamRecord> {
        self.update_stream(id, |s| {
            check_owner(s, epoch)?;
            if offset > s.end_offset {
                return Err(MetaError::Invalid(InvalidRequest::TrimPastEnd {
                    stream_id: id,
                    offset,
                    end_offset: s.end_offset,
                }));
            }
            s.start_offset = s.start_offset.max(offset);
            Ok(())
        })
        .await
    }

    async fn update_stream(
        &self,
        id: u64,
        mut change: impl FnMut(&mut StreamRecord) -> Result<()>,
    ) -> Result<StreamRecord> {
        let key = keys::stream(id);
        for _ in 0..self.options.max_attempts {
            let current = self.kv.get(&key).await?;
            let Some((mut record, version)) = get_record::<StreamRecord>(&current)? else {
                return Err(MetaError::NotFound {
                    what: "stream",
                    id: id.to_string(),
                });
            };
            let before = record.clone();
            change(&mut record)?;
            if record == before {
                return Ok(record);
            }
            if let CasOutcome::Swapped { .. } = self
                .kv
                .compare_and_swap(&key, version, Some(encode(&record)))
                .await?
            {
                return Ok(record);
            }
        }
        Err(MetaError::Contended {
            operation: "update stream",
            key,
            attempts: self.options.max_attempts,
        })
    }

    // ---- commits ----

    /// Applies `request` atomically: either every object is added, every removal, advance and WAL
    /// retirement happens, or nothing does. Fails with [`MetaError::Fenced`] if any stream moved to
    /// another epoch, [`MetaError::StreamNotOpen`] if one is not open, [`MetaError::NotFound`] for a
    /// missing stream or removed object, [`MetaError::AlreadyExists`] for a reused object id, and
    /// [`MetaError::Invalid`] for an end offset moving backwards.
    pub async fn commit(&self, request: CommitRequest) -> Result<CommitOutcome> {
        validate_request(&request)?;
        for attempt in 0..self.options.max_attempts {
            let stream_keys: Vec<String> = request
                .stream_epochs
                .iter()
                .map(|(id, _)| keys::stream(*id))
                .collect();
            let removed_keys: Vec<String> = request
                .remove_objects
                .iter()
                .map(|id| keys::object(*id))
                .collect();
            let streams = try_join_all(stream_keys.iter().map(|k| self.kv.get(k)));
            let removed = try_join_all(removed_keys.iter().map(|k| self.kv.get(k)));
            let wal = try_join_all(
                request
                    .remove_wal
                    .iter()
                    .map(|w| self.kv.scan_all_owned(keys::wal_node(&w.node))),
            );
            let (streams, removed, wal) = futures::try_join!(streams, removed, wal)?;

            let mut compares = Vec::new();
            let mut ops = Vec::new();
            let advance: HashMap<u64, u64> = request.advance.iter().copied().collect();
            let mut after = Vec::with_capacity(streams.len());
            for ((id, epoch), kv) in request.stream_epochs.iter().zip(&streams) {
                let Some((mut record, version)) = get_record::<StreamRecord>(kv)? else {
                    return Err(MetaError::NotFound {
                        what: "stream",
                        id: id.to_string(),
                    });
                };
                check_owner(&record, *epoch)?;
                compares.push(Compare::version(keys::stream(*id), version));
                if let Some(end) = advance.get(id) {
                    if *end < record.end_offset {
                        return Err(MetaError::Invalid(InvalidRequest::EndMovesBack {
                            stream_id: *id,
                            end_offset: record.end_offset,
                            requested: *end,
                        }));
                    }
                    if *end != record.end_offset {
                        record.end_offset = *end;
                        ops.push(Op::put(keys::stream(*id), encode(&record)));
                    }
                }
                after.push(record);
            }
            for (id, kv) in request.remove_objects.iter().zip(&removed) {
                let Some(kv) = kv else {
                    return Err(MetaError::NotFound {
                        what: "object",
                        id: id.to_string(),
                    });
                };
                compares.push(Compare::version(kv.key.clone(), kv.version));
                ops.push(Op::delete(kv.key.clone()));
            }
            for object in &request.add_objects {
                let key = keys::object(object.id);
                if attempt > 0 && self.kv.get(&key).await?.is_some() {
                    return Err(MetaError::AlreadyExists {
                        what: "object",
                        id: object.id.to_string(),
                    });
                }
                compares.push(Compare::absent(key.clone()));
                ops.push(Op::put(key, encode(object)));
            }
            for (retire, reservations) in request.remove_wal.iter().zip(&wal) {
                for kv in reservations {
                    let mut reservation = decode::<WalReservation>(&kv.key, &kv.value)?;
                    if reservation.first_id >= retire.below {
                        continue;
                    }
                    compares.push(Compare::version(kv.key.clone(), kv.version));
                    if reservation.end_id <= retire.below {
                        ops.push(Op::delete(kv.key.clone()));
                    } else {
                        // Keep the key (named after the block's first id); move the live start.
                        reservation.first_id = retire.below;
                        ops.push(Op::put(kv.key.clone(), encode(&reservation)));
                    }
                }
            }
            let outcome = self
                .kv
                .txn(Txn {
                    compares,
                    on_success: ops,
                })
                .await?;
            if outcome.succeeded {
                self.index
                    .apply(&request.add_objects, &request.remove_objects);
                return Ok(CommitOutcome {
                    revision: outcome.revision,
                    streams: after,
                });
            }
            // Something changed under us: re-read; a new epoch surfaces as Fenced above.
        }
        Err(MetaError::Contended {
            operation: "commit",
            key: keys::STREAMS.to_owned(),
            attempts: self.options.max_attempts,
        })
    }

    /// Reads an object record.
    pub async fn get_object(&self, id: u64) -> Result<Option<ObjectRecord>> {
        Ok(get_record::<ObjectRecord>(&self.kv.get(&keys::object(id)).await?)?.map(|(r, _)| r))
    }

    /// Every object record, in id order.
    pub async fn list_objects(&self) -> Result<Vec<ObjectRecord>> {
        decode_all(&self.kv.scan_all(keys::OBJECTS, SCAN_PAGE).await?)
    }

    // ---- the WAL registry ----

    /// Reserves `count` object ids for `node`'s WAL objects and registers them, so recovery finds
    /// them. One call per block of WAL uploads. The ids are registered before they are returned.
    pub async fn reserve_wal_ids(&self, node: &str, count: u64) -> Result<Range<u64>> {
        keys::check_segment("node", node)?;
        let ids = self.object_ids.reserve(count).await?;
        let reservation = WalReservation {
            node: node.to_owned(),
            first_id: ids.start,
            end_id: ids.end,
        };
        self.kv
            .put(&keys::wal(node, ids.start), encode(&reservation))
            .await?;
        Ok(ids)
    }

    /// The uncompacted WAL id ranges of `node`, in id order. Recovery reads each id's object; an id
    /// whose object does not exist was reserved but never written.
    pub async fn wal_reservations(&self, node: &str) -> Result<Vec<WalReservation>> {
        keys::check_segment("node", node)?;
        decode_all(&self.kv.scan_all(&keys::wal_node(node), SCAN_PAGE).await?)
    }

    /// Nodes that have WAL reservations (alive or not), for takeover after a node dies.
    pub async fn wal_nodes(&self) -> Result<Vec<String>> {
        let all: Vec<WalReservation> = decode_all(&self.kv.scan_all(keys::WAL, SCAN_PAGE).await?)?;
        let mut nodes: Vec<String> = all.into_iter().map(|r| r.node).collect();
        nodes.dedup();
        Ok(nodes)
    }

    // ---- tables ----

    /// Creates a table; fails with [`MetaError::AlreadyExists`] if the name is taken.
    pub async fn create_table(&self, table: &TableRecord) -> Result<()> {
        keys::check_segment("table", &table.name)?;
        match self
            .kv
            .compare_and_swap(&keys::table(&table.name), 0, Some(encode(table)))
            .await?
        {
            CasOutcome::Swapped { .. } => Ok(()),
            CasOutcome::Conflict { .. } => Err(MetaError::AlreadyExists {
                what: "table",
                id: table.name.clone(),
            }),
        }
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
        for _ in 0..self.options.max_attempts {
            let Some((mut table, version)) = get_record::<TableRecord>(&self.kv.get(&key).await?)?
            else {
                return Err(MetaError::NotFound {
                    what: "table",
                    id: name.to_owned(),
                });
            };
            match table.schemas.get(&schema_id) {
                Some(existing) if existing == schema => return Ok(table),
                Some(_) => {
                    return Err(MetaError::Invalid(InvalidRequest::SchemaIdTaken {
                        table: name.to_owned(),
                        schema_id,
                    }));
                }
                None => {}
            }
            table.schemas.insert(schema_id, schema.to_owned());
            if let CasOutcome::Swapped { .. } = self
                .kv
                .compare_and_swap(&key, version, Some(encode(&table)))
                .await?
            {
                return Ok(table);
            }
        }
        Err(MetaError::Contended {
            operation: "add schema",
            key,
            attempts: self.options.max_attempts,
        })
    }

    /// Deletes a table record; returns whether it existed.
    pub async fn delete_table(&self, name: &str) -> Result<bool> {
        keys::check_segment("table", name)?;
        self.kv.delete(&keys::table(name)).await
    }

    // ---- nodes ----

    /// Registers `node` at `address` for `ttl`: on etcd with a lease (the record vanishes if the
    /// node stops heartbeating), everywhere with an expiry time in the record.
    pub async fn register_node(
        &self,
        node: &str,
        address: &str,
        ttl: Duration,
    ) -> Result<NodeRecord> {
        keys::check_segment("node", node)?;
        let lease = match self.kv.grant_lease(ttl).await {
            Ok(lease) => Some(lease),
            Err(MetaError::Unsupported { .. }) => None,
            Err(e) => return Err(e),
        };
        let record = NodeRecord {
            node_id: node.to_owned(),
            address: address.to_owned(),
            expires_at_ms: now_ms()
                .saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
            lease,
        };
        let op = Op::Put {
            key: keys::node(node),
            value: encode(&record),
            lease,
        };
        self.kv
            .txn(Txn {
                compares: vec![],
                on_success: vec![op],
            })
            .await?;
        Ok(record)
    }

    /// Extends `node`'s registration by `ttl` from now. Fails with NotFound if it expired.
    pub async fn heartbeat_node(&self, node: &str, ttl: Duration) -> Result<NodeRecord> {
        keys::check_segment("node", node)?;
        let key = keys::node(node);
        let Some((mut record, version)) = get_record::<NodeRecord>(&self.kv.get(&key).await?)?
        else {
            return Err(MetaError::NotFound {
                what: "node",
                id: node.to_owned(),
            });
        };
        if let Some(lease) = record.lease {
            self.kv.keep_alive(lease).await?;
        }
        record.expires_at_ms =
            now_ms().saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let op = Op::Put {
            key: key.clone(),
            value: encode(&record),
            lease: record.lease,
        };
        let outcome = self
            .kv
            .txn(Txn {
                compares: vec![Compare::version(key.clone(), version)],
                on_success: vec![op],
            })
            .await?;
        if !outcome.succeeded {
            return Err(MetaError::Contended {
                operation: "heartbeat",
                key,
                attempts: 1,
            });
        }
        Ok(record)
    }

    /// Nodes whose registration has not expired at `now_ms` (Unix milliseconds).
    pub async fn live_nodes(&self, now_ms: u64) -> Result<Vec<NodeRecord>> {
        let all: Vec<NodeRecord> = decode_all(&self.kv.scan_all(keys::NODES, SCAN_PAGE).await?)?;
        Ok(all
            .into_iter()
            .filter(|n| n.expires_at_ms > now_ms)
            .collect())
    }

    /// Removes `node`'s registration (and revokes its lease).
    pub async fn deregister_node(&self, node: &str) -> Result<()> {
        keys::check_segment("node", node)?;
        let key = keys::node(node);
        if let Some((
            NodeRecord {
                lease: Some(lease), ..
            },
            _,
        )) = get_record::<NodeRecord>(&self.kv.get(&key).await?)?
        {
            self.kv.revoke_lease(lease).await?;
        }
        self.kv.delete(&key).await?;
        Ok(())
    }

    // ---- writer snapshots ----

    /// Stores the writer snapshot of one bucket (replacing any older one).
    pub async fn put_writer_snapshot(
        &self,
        table: &str,
        partition: &str,
        bucket: u32,
        snapshot: &WriterSnapshot,
    ) -> Result<()> {
        keys::check_segment("table", table)?;
        keys::check_segment("partition", partition)?;
        self.kv
            .put(&keys::writer(table, partition, bucket), encode(snapshot))
            .await?;
        Ok(())
    }

    /// Reads the writer snapshot of one bucket.
    pub async fn get_writer_snapshot(
        &self,
        table: &str,
        partition: &str,
        bucket: u32,
    ) -> Result<Option<WriterSnapshot>> {
        keys::check_segment("table", table)?;
        keys::check_segment("partition", partition)?;
        Ok(get_record::<WriterSnapshot>(
            &self.kv.get(&keys::writer(table, partition, bucket)).await?,
        )?
        .map(|(r, _)| r))
    }

    /// Deletes the writer snapshot of one bucket; returns whether there was one.
    pub async fn delete_writer_snapshot(
        &self,
        table: &str,
        partition: &str,
        bucket: u32,
    ) -> Result<bool> {
        keys::check_segment("table", table)?;
        keys::check_segment("partition", partition)?;
        self.kv
            .delete(&keys::writer(table, partition, bucket))
            .await
    }
}

/// Owned-prefix scan, so futures borrowing nothing but the KV can be joined.
trait ScanOwned {
    fn scan_all_owned(
        &self,
        prefix: String,
    ) -> futures::future::BoxFuture<'_, Result<Vec<KeyValue>>>;
}

impl ScanOwned for Arc<dyn MetaKv> {
    fn scan_all_owned(
        &self,
        prefix: String,
    ) -> futures::future::BoxFuture<'_, Result<Vec<KeyValue>>> {
        Box::pin(async move { self.scan_all(&prefix, SCAN_PAGE).await })
    }
}

fn check_owner(stream: &StreamRecord, epoch: u64) -> Result<()> {
    if stream.epoch != epoch {
        return Err(MetaError::Fenced {
            stream_id: stream.id,
            epoch,
            current_epoch: stream.epoch,
        });
    }
    if stream.state != StreamState::Open {
        return Err(MetaError::StreamNotOpen {
            stream_id: stream.id,
            state: stream.state.to_string(),
        });
    }
    Ok(())
}

fn validate_request(request: &CommitRequest) -> Result<()> {
    let mut fenced = HashSet::new();
    for (id, _) in &request.stream_epochs {
        if !fenced.insert(*id) {
            return Err(MetaError::Invalid(InvalidRequest::StreamFencedTwice {
                stream_id: *id,
            }));
        }
    }
    let mut advanced = HashSet::new();
    for (id, _) in &request.advance {
        if !fenced.contains(id) {
            return Err(MetaError::Invalid(InvalidRequest::AdvanceWithoutEpoch {
                stream_id: *id,
            }));
        }
        if !advanced.insert(*id) {
            return Err(MetaError::Invalid(InvalidRequest::AdvancedTwice {
                stream_id: *id,
            }));
        }
    }
    let mut ids = HashSet::new();
    for object in &request.add_objects {
        object.validate()?;
        if !ids.insert(object.id) {
            return Err(MetaError::Invalid(InvalidRequest::ObjectAddedTwice {
                object_id: object.id,
            }));
        }
    }
    for id in &request.remove_objects {
        if !ids.insert(*id) {
            return Err(MetaError::Invalid(InvalidRequest::ObjectRemovedTwice {
                object_id: *id,
            }));
        }
    }
    for w in &request.remove_wal {
        keys::check_segment("node", &w.node)?;
    }
    Ok(())
}

async fn rebuild_index(kv: &dyn MetaKv, index: &ObjectIndex) -> Result<()> {
    let objects = decode_all::<ObjectRecord>(&kv.scan_all(keys::OBJECTS, SCAN_PAGE).await?)?;
    index.rebuild(objects);
    Ok(())
}

/// Applies object changes from `stream` to `index`; on a lost watch, watches again and re-reads.
/// Holds the KV weakly, so dropping the last `Metadata` and KV handle closes the store.
async fn follow_objects(kv: Weak<dyn MetaKv>, index: Arc<ObjectIndex>, mut stream: WatchStream) {
    let mut backoff = Duration::from_millis(50);
    loop {
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Put(kv)) => match decode::<ObjectRecord>(&kv.key, &kv.value) {
                    Ok(object) => index.insert(object),
                    Err(e) => tracing::warn!(error = %e, "ignoring an undecodable object record"),
                },
                Ok(WatchEvent::Delete { key, .. }) => {
                    if let Some(id) = keys::object_id(&key) {
                        index.remove(id);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "object watch ended; watching again");
                    break;
                }
            }
        }
        loop {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
            let Some(kv) = kv.upgrade() else { return };
            let Ok(next) = kv.watch_prefix(keys::OBJECTS).await else {
                continue;
            };
            if let Err(e) = rebuild_index(kv.as_ref(), &index).await {
                tracing::warn!(error = %e, "cannot re-read objects for the index; retrying");
                continue;
            }
            stream = next;
            backoff = Duration::from_millis(50);
            break;
        }
    }
}
