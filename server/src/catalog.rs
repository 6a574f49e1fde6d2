//! The catalog of tables: the metadata's [`TableRecord`] of each table plus the decoded Arrow
//! schema of every schema version, cached in memory.
//!
//! Schema ids start at 1 and grow by one per added version. A table's [`TableSchemas`] is shared
//! with its open logs, so a version added while they run is visible to them at once.
//!
//! The catalog enforces the table-shape limits of `[limits]` (400 `limit_exceeded` naming the
//! setting): tables of the cluster, buckets and partitions of a table, schema versions of a
//! table; and checks each schema against the schema limits before anything is written. The
//! table count is read before a create, so creates racing on several nodes may pass it together
//! by at most their number.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow_schema::SchemaRef;
use mink_metadata::{Metadata, RetentionPolicy, TableCompression, TableRecord};
use parking_lot::RwLock;

use crate::cluster::OwnershipView;
use crate::error::{ApiError, ApiResult};
use crate::format::schema::JsonSchema;
use crate::manifests::TableManifests;
use crate::settings::LimitsSettings;

/// The first schema id of a table.
pub const FIRST_SCHEMA_ID: u16 = 1;

/// The decoded schemas of one table, by schema id.
#[derive(Debug, Default)]
pub struct TableSchemas {
    schemas: RwLock<BTreeMap<i16, SchemaRef>>,
}

impl TableSchemas {
    /// The schema of `schema_id`.
    pub fn get(&self, schema_id: i16) -> Option<SchemaRef> {
        self.schemas.read().get(&schema_id).cloned()
    }

    /// The newest schema id and its schema.
    pub fn latest(&self) -> Option<(i16, SchemaRef)> {
        self.schemas
            .read()
            .iter()
            .next_back()
            .map(|(id, s)| (*id, s.clone()))
    }

    /// Every schema id and its schema, oldest first.
    pub fn all(&self) -> Vec<(i16, SchemaRef)> {
        self.schemas
            .read()
            .iter()
            .map(|(id, s)| (*id, s.clone()))
            .collect()
    }

    fn insert(&self, schema_id: i16, schema: SchemaRef) {
        self.schemas.write().entry(schema_id).or_insert(schema);
    }
}

/// A table with its decoded schemas.
#[derive(Debug)]
pub struct TableInfo {
    /// The metadata record as last read.
    pub record: RwLock<TableRecord>,
    /// Decoded schemas, shared with the table's open logs.
    pub schemas: Arc<TableSchemas>,
}

impl TableInfo {
    fn from_record(record: TableRecord) -> ApiResult<Self> {
        let schemas = Arc::new(TableSchemas::default());
        for (id, text) in &record.schemas {
            schemas.insert(schema_id(*id)?, JsonSchema::parse_stored(text)?);
        }
        Ok(TableInfo {
            record: RwLock::new(record),
            schemas,
        })
    }

    /// A copy of the record.
    pub fn record(&self) -> TableRecord {
        self.record.read().clone()
    }

    /// The codec its appends are compressed with, if any.
    pub fn compression(&self) -> Option<mink_codec::Compression> {
        crate::format::codec_of(self.record.read().compression.as_ref())
    }

    /// The table's name.
    pub fn name(&self) -> String {
        self.record.read().name.clone()
    }

    /// The schema batches of `schema_id` decode with, projected to `columns` (by name; a name
    /// the version lacks is a 400 `unknown_column`).
    pub fn read_schema(&self, schema_id: i16, columns: Option<&[String]>) -> ApiResult<SchemaRef> {
        let schema = self
            .schemas
            .get(schema_id)
            .ok_or_else(|| ApiError::Internal {
                message: format!("a stored batch has schema id {schema_id}, which the table lacks"),
            })?;
        let Some(columns) = columns else {
            return Ok(schema);
        };
        let indices = columns
            .iter()
            .map(|c| {
                schema.index_of(c).map_err(|_| {
                    ApiError::invalid(
                        "unknown_column",
                        format!("column `{c}` is not in schema {schema_id}"),
                    )
                })
            })
            .collect::<ApiResult<Vec<_>>>()?;
        Ok(Arc::new(schema.project(&indices).map_err(|e| {
            ApiError::Internal {
                message: e.to_string(),
            }
        })?))
    }
}

fn schema_id(id: u16) -> ApiResult<i16> {
    i16::try_from(id).map_err(|_| ApiError::Internal {
        message: format!("schema id {id} does not fit the batch header"),
    })
}

/// What a new table may set besides its schema and shape.
#[derive(Debug, Clone, Default)]
pub struct TableOptions {
    /// Its own retention policy; `None`: the node's default.
    pub retention: Option<RetentionPolicy>,
    /// The column whose value is each row's Kafka key (docs/kafka.md, "Mapping").
    pub kafka_key: Option<String>,
    /// Set for a Durable Streams stream (docs/durable-streams.md).
    pub stream: Option<mink_metadata::StreamConfig>,
    /// How its appends are compressed (docs/compression.md); `None`: not compressed.
    pub compression: Option<TableCompression>,
}

/// The tables of the cluster, cached.
pub struct Catalog {
    metadata: Arc<Metadata>,
    limits: LimitsSettings,
    cache: RwLock<HashMap<String, Arc<TableInfo>>>,
    /// In a cluster: the live nodes a new table's buckets are spread over.
    ownership: Option<Arc<OwnershipView>>,
    /// Where each table's manifest is kept, for a rebuild from objects.
    manifests: Option<TableManifests>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog").finish_non_exhaustive()
    }
}

impl Catalog {
    /// In a cluster, the node the first bucket of a new table `name` would be placed on, as
    /// this node's view sees the live nodes now (`None` outside a cluster). A front end that
    /// must write into a table in the request that creates it sends that request there first.
    pub fn first_bucket_node(&self, name: &str) -> Option<mink_metadata::NodeRecord> {
        let nodes = placeable(self.ownership.as_ref()?);
        if nodes.is_empty() {
            return None;
        }
        let at = spread_start(name) % nodes.len() as u64;
        nodes.into_iter().nth(usize::try_from(at).unwrap_or(0))
    }

    /// A cache over `metadata` that creates tables within `limits`.
    pub fn new(metadata: Arc<Metadata>, limits: LimitsSettings) -> Self {
        Catalog {
            metadata,
            limits,
            cache: RwLock::new(HashMap::new()),
            ownership: None,
            manifests: None,
        }
    }

    /// Keeps a manifest of each table in `manifests` (docs/metadata-recovery.md, "Manifests").
    pub fn with_manifests(mut self, manifests: TableManifests) -> Self {
        self.manifests = Some(manifests);
        self
    }

    /// In a cluster, a new table's buckets are assigned over `view`'s live nodes as the table
    /// is created (docs/cluster.md, "Ownership").
    pub(crate) fn set_ownership(&mut self, view: Option<Arc<OwnershipView>>) {
        self.ownership = view;
    }

    /// The table `name`, or [`ApiError::TableNotFound`].
    pub async fn get(&self, name: &str) -> ApiResult<Arc<TableInfo>> {
        if let Some(info) = self.cache.read().get(name) {
            return Ok(Arc::clone(info));
        }
        check_name(name)?;
        let record =
            self.metadata
                .get_table(name)
                .await?
                .ok_or_else(|| ApiError::TableNotFound {
                    table: name.to_owned(),
                })?;
        let info = Arc::new(TableInfo::from_record(record)?);
        Ok(Arc::clone(
            self.cache.write().entry(name.to_owned()).or_insert(info),
        ))
    }

    /// Creates a table, with its own retention policy and the column of its Kafka keys when
    /// given.
    pub async fn create(
        &self,
        name: &str,
        schema: &JsonSchema,
        buckets: u32,
        partitions: Vec<String>,
        options: TableOptions,
    ) -> ApiResult<Arc<TableInfo>> {
        let TableOptions {
            retention,
            kafka_key,
            stream,
            compression,
        } = options;
        check_name(name)?;
        if let Some(policy) = &retention {
            check_retention(policy)?;
        }
        let limits = &self.limits;
        if buckets == 0 {
            return Err(ApiError::bad_request("a table needs at least one bucket"));
        }
        if buckets > limits.max_buckets_per_table {
            return Err(ApiError::LimitExceeded {
                setting: "limits.max_buckets_per_table",
                limit: limits.max_buckets_per_table.into(),
                message: format!("a table of {buckets} buckets is too many"),
            });
        }
        if partitions.is_empty() {
            return Err(ApiError::bad_request(
                "a table needs at least one partition",
            ));
        }
        if partitions.len() > limits.max_partitions as usize {
            return Err(ApiError::LimitExceeded {
                setting: "limits.max_partitions",
                limit: limits.max_partitions.into(),
                message: format!("a table of {} partitions is too many", partitions.len()),
            });
        }
        let mut seen = HashSet::with_capacity(partitions.len());
        for p in &partitions {
            check_segment("partition", p)?;
            if !seen.insert(p.as_str()) {
                return Err(ApiError::bad_request(format!(
                    "partition `{p}` is listed twice"
                )));
            }
        }
        let arrow = schema.check(limits)?;
        if let Some(key) = &kafka_key
            && arrow.index_of(key).is_err()
        {
            return Err(ApiError::bad_request(format!(
                "kafka_key `{key}` is not a column of the schema"
            )));
        }
        let tables = self.metadata.list_tables().await?;
        if tables.iter().any(|t| t.name == name) {
            return Err(ApiError::TableExists {
                table: name.to_owned(),
            });
        }
        if tables.len() >= limits.max_tables as usize {
            return Err(ApiError::LimitExceeded {
                setting: "limits.max_tables",
                limit: limits.max_tables.into(),
                message: format!(
                    "the cluster holds {} tables; table `{name}` would be one too many",
                    tables.len()
                ),
            });
        }
        let record = TableRecord {
            name: name.to_owned(),
            schemas: BTreeMap::from([(FIRST_SCHEMA_ID, JsonSchema::canonical(&arrow))]),
            bucket_count: buckets,
            partitions,
            incarnation: self.metadata.allocate_table_incarnation().await?,
            retention,
            kafka_key,
            stream,
            compression,
        };
        let assignments = match &self.ownership {
            Some(view) => spread(&record, view),
            None => Vec::new(),
        };
        // The manifest first: a table the metadata holds always has one.
        if let Some(manifests) = &self.manifests {
            manifests.put(&record).await?;
        }
        let created = self
            .metadata
            .create_table_assigned(&record, &assignments)
            .await;
        if let Err(e) = created {
            if let Some(manifests) = &self.manifests
                && let Err(left) = manifests.delete(&record).await
            {
                tracing::warn!(table = name, error = %left, "a failed create left its manifest");
            }
            return Err(if e.kind() == mink_metadata::ErrorKind::Conflict {
                ApiError::TableExists {
                    table: name.to_owned(),
                }
            } else {
                e.into()
            });
        }
        if let Some(view) = &self.ownership {
            // Routed at once on this node, before the watch brings the writes back.
            let segment = mink_metadata::keys::table_segment(&record.name, record.incarnation);
            view.assigned(assignments.into_iter().map(|(partition, bucket, node)| {
                (
                    mink_metadata::keys::assignment(&segment, &partition, bucket),
                    node,
                )
            }));
        }
        let info = Arc::new(TableInfo::from_record(record)?);
        self.cache
            .write()
            .insert(name.to_owned(), Arc::clone(&info));
        Ok(info)
    }

    /// Every table.
    pub async fn list(&self) -> ApiResult<Vec<TableRecord>> {
        Ok(self.metadata.list_tables().await?)
    }

    /// Adds a schema version; returns its id (an identical newest schema returns its id again).
    pub async fn add_schema(&self, name: &str, schema: &JsonSchema) -> ApiResult<u16> {
        let info = self.get(name).await?;
        let arrow = schema.check(&self.limits)?;
        let text = JsonSchema::canonical(&arrow);
        let record = info.record();
        if let Some((id, latest)) = record.schemas.iter().next_back()
            && *latest == text
        {
            // A retry after a manifest write failed: the manifest catches up here.
            if let Some(manifests) = &self.manifests {
                manifests.follow(&self.metadata, &record).await?;
            }
            return Ok(*id);
        }
        let max = self.limits.max_schema_versions;
        if record.schemas.len() >= max as usize {
            return Err(ApiError::LimitExceeded {
                setting: "limits.max_schema_versions",
                limit: max.into(),
                message: format!(
                    "table `{name}` has {} schema versions already",
                    record.schemas.len()
                ),
            });
        }
        let next = record
            .latest_schema_id()
            .map_or(FIRST_SCHEMA_ID, |id| id.saturating_add(1));
        // Ids are the batch header's i16; the setting's ceiling keeps the count below it, and
        // this keeps the ids there too.
        if i16::try_from(next).is_err() {
            return Err(ApiError::LimitExceeded {
                setting: "limits.max_schema_versions",
                limit: i16::MAX.unsigned_abs().into(),
                message: format!("table `{name}` has used every schema id"),
            });
        }
        let updated = self.metadata.add_schema(name, next, &text).await?;
        if let Some(manifests) = &self.manifests {
            manifests.follow(&self.metadata, &updated).await?;
        }
        // Another node may have added versions meanwhile: take them all.
        for (id, text) in &updated.schemas {
            let id16 = schema_id(*id)?;
            if info.schemas.get(id16).is_none() {
                info.schemas.insert(id16, JsonSchema::parse_stored(text)?);
            }
        }
        *info.record.write() = updated;
        Ok(next)
    }

    /// Sets the table's own retention policy (`None`: follow the node's default); returns the
    /// record written.
    pub async fn set_retention(
        &self,
        name: &str,
        retention: Option<RetentionPolicy>,
    ) -> ApiResult<TableRecord> {
        let info = self.get(name).await?;
        if let Some(policy) = &retention {
            check_retention(policy)?;
        }
        let updated = self.metadata.set_table_retention(name, retention).await?;
        self.updated(&info, &updated).await?;
        Ok(updated)
    }

    /// Sets how the table's appends are compressed from now on (`None`: not compressed);
    /// returns the record written. Batches stored before stay as they are.
    pub async fn set_compression(
        &self,
        name: &str,
        compression: Option<TableCompression>,
    ) -> ApiResult<TableRecord> {
        let info = self.get(name).await?;
        let updated = self
            .metadata
            .set_table_compression(name, compression)
            .await?;
        self.updated(&info, &updated).await?;
        Ok(updated)
    }

    /// Follows a record update of `info`'s table: the manifest, then the cached copy (or, when
    /// the table was dropped and created again meanwhile, the cache forgets the old one).
    async fn updated(&self, info: &TableInfo, updated: &TableRecord) -> ApiResult<()> {
        if let Some(manifests) = &self.manifests {
            manifests.follow(&self.metadata, updated).await?;
        }
        if updated.incarnation == info.record.read().incarnation {
            *info.record.write() = updated.clone();
        } else {
            self.forget(&info.record());
        }
        Ok(())
    }

    /// Forgets the cached copy of `dropped`'s incarnation, if that is the one cached.
    pub fn forget(&self, dropped: &TableRecord) {
        let mut cache = self.cache.write();
        if cache
            .get(&dropped.name)
            .is_some_and(|info| info.record.read().incarnation == dropped.incarnation)
        {
            cache.remove(&dropped.name);
        }
    }

    /// Deletes the manifest of `dropped`'s incarnation (first of the steps that destroy a
    /// dropped table).
    pub async fn delete_manifest(&self, dropped: &TableRecord) -> ApiResult<()> {
        match &self.manifests {
            Some(manifests) => manifests.delete(dropped).await,
            None => Ok(()),
        }
    }

    /// Removes the table record (the caller destroyed its logs first).
    pub async fn delete(&self, name: &str) -> ApiResult<bool> {
        check_name(name)?;
        self.cache.write().remove(name);
        Ok(self.metadata.delete_table(name).await?)
    }
}

fn check_segment(what: &str, name: &str) -> ApiResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "{what} name `{name}` must be 1-200 characters of letters, digits, `-`, `_` or `.`"
        )))
    }
}

/// A policy under the minimums is a 400 `invalid_retention` naming the field.
fn check_retention(policy: &RetentionPolicy) -> ApiResult<()> {
    crate::settings::check_retention(policy).map_err(|(field, why)| {
        ApiError::invalid("invalid_retention", format!("retention.{field} {why}"))
    })
}

fn check_name(name: &str) -> ApiResult<()> {
    check_segment("table", name)
}

/// The buckets of a new table spread over the live nodes that are not draining, in turn,
/// starting at a node picked by the table's name, so that small tables do not all land on the
/// first node: `(partition, bucket, node)`.
fn spread(record: &TableRecord, view: &OwnershipView) -> Vec<(String, u32, String)> {
    let nodes = placeable(view);
    if nodes.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut turn = spread_start(&record.name);
    for partition in &record.partitions {
        for bucket in 0..record.bucket_count {
            let node = &nodes[usize::try_from(turn % nodes.len() as u64).unwrap_or(0)];
            out.push((partition.clone(), bucket, node.node_id.clone()));
            turn = turn.wrapping_add(1);
        }
    }
    out
}

/// The live nodes that are not draining, by node id: those new buckets are spread over.
fn placeable(view: &OwnershipView) -> Vec<mink_metadata::NodeRecord> {
    view.live_nodes()
        .into_iter()
        .filter(|n| !n.draining)
        .collect()
}

/// Where the spread of table `name` starts (FNV-1a of the name: the same on every node and
/// every build).
fn spread_start(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
