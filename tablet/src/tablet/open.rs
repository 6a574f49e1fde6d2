//! Opening a tablet: the builder, the registry lookup or creation (guarded, for a table's tablets,
//! by the table record's incarnation), the replay of the log into the writer windows from the
//! snapshot's offset, and the destruction of a tablet that is not open (a dropped table's).

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use mink_metadata::{Compare, KeyValue, Metadata, Op, StreamState, TableRecord, Txn};
use mink_s3stream::ReadBound;
use mink_s3stream::engine::stream::Stream;
use mink_s3stream::engine::{Engine, ManifestWrite};

use super::{Inner, ManifestGate, Sequencing, Tablet};
use crate::error::{Result, TabletError};
use crate::registry::{self, TabletId};
use crate::schemas::Schemas;
use crate::settings::TabletSettings;
use crate::stream::{LogStream, StreamLayer};
use crate::writers::{Entry, Windows, snapshot};
use mink_runtime::{Clock, SystemClock};

/// Opens or creates a [`Tablet`]; see the crate documentation.
pub struct TabletBuilder {
    id: TabletId,
    engine: Option<Engine>,
    schemas: Option<Arc<dyn Schemas>>,
    clock: Arc<dyn Clock>,
    settings: TabletSettings,
    layer: Option<StreamLayer>,
    require_table: bool,
}

impl std::fmt::Debug for TabletBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TabletBuilder")
            .field("id", &self.id)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl TabletBuilder {
    /// The node's stream engine (required). Its metadata is where the registry and snapshots live.
    pub fn engine(mut self, engine: Engine) -> Self {
        self.engine = Some(engine);
        self
    }

    /// The table's schemas (required).
    pub fn schemas(mut self, schemas: Arc<dyn Schemas>) -> Self {
        self.schemas = Some(schemas);
        self
    }

    /// The clock (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Settings (default: [`TabletSettings::default`]).
    pub fn settings(mut self, settings: TabletSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Opens (and creates) the tablet only while the table record `mink/tables/{table}` exists
    /// and names this id's incarnation; otherwise fails with [`TabletError::NotFound`]. A new
    /// registry entry is written in one transaction with a compare on that record, so an open
    /// racing a table drop can never register a tablet of the dropped incarnation.
    pub fn require_table(mut self) -> Self {
        self.require_table = true;
        self
    }

    /// Wraps the opened stream (tests and instrumentation).
    pub fn stream_layer(mut self, layer: StreamLayer) -> Self {
        self.layer = Some(layer);
        self
    }

    /// Creates the tablet (a new stream, registered under the tablet id) and opens it. Fails with
    /// [`TabletError::AlreadyExists`] if the tablet exists.
    pub async fn create(self) -> Result<Tablet> {
        self.open_mode(Mode::Create).await
    }

    /// Opens an existing tablet. Fails with [`TabletError::NotFound`] if it was never created.
    pub async fn open(self) -> Result<Tablet> {
        self.open_mode(Mode::Open).await
    }

    /// Opens the tablet, creating it first if it does not exist.
    pub async fn open_or_create(self) -> Result<Tablet> {
        self.open_mode(Mode::OpenOrCreate).await
    }

    /// Destroys the tablet without opening it (no replay, no schemas needed): its stream is
    /// opened, which fences any other owner, and deleted; then its writer snapshot and its
    /// registry entry go, the entry last so that a run stopped half-way is finished by the next
    /// (a stream already deleted is skipped). Returns whether the tablet existed.
    pub async fn destroy(self) -> Result<bool> {
        self.id.check()?;
        let name = self.id.to_string();
        let engine = self.engine.ok_or_else(|| TabletError::InvalidRequest {
            reason: "the tablet builder needs an engine".to_owned(),
        })?;
        let metadata = engine.metadata().clone();
        let key = self.id.registry_key();
        let name = name.as_str();
        let meta = |operation| move |e| TabletError::metadata(name, operation, e);
        let existing = metadata
            .kv()
            .get(&key)
            .await
            .map_err(meta("read the tablet registry"))?;
        if let Some(existing) = &existing {
            let stream_id = registry::decode(&key, &existing.value)?;
            let record = metadata
                .get_stream(stream_id)
                .await
                .map_err(meta("read the stream record"))?;
            if record.is_some_and(|r| r.state != StreamState::Deleted) {
                let stream = engine
                    .open_stream(stream_id)
                    .await
                    .map_err(|e| TabletError::stream(name, "open", e))?;
                // Destroying the stream deletes its manifest too.
                stream
                    .destroy()
                    .await
                    .map_err(|e| TabletError::stream(name, "destroy", e))?;
            } else if let Err(e) = engine.delete_manifest(stream_id).await {
                // An earlier destroy stopped after the stream was deleted. A manifest of a
                // deleted stream is skipped by a rebuild.
                tracing::warn!(tablet = name, stream = stream_id, error = %e, "could not delete the stream's manifest");
            }
        }
        metadata
            .delete_writer_snapshot(&self.id.table_segment(), &self.id.partition, self.id.bucket)
            .await
            .map_err(meta("delete the writer snapshot"))?;
        if existing.is_some() {
            metadata
                .kv()
                .delete(&key)
                .await
                .map_err(meta("delete the registry entry"))?;
        }
        Ok(existing.is_some())
    }

    async fn open_mode(self, mode: Mode) -> Result<Tablet> {
        self.id.check()?;
        let name = self.id.to_string();
        let missing = |what: &str| TabletError::InvalidRequest {
            reason: format!("the tablet builder needs {what}"),
        };
        let engine = self.engine.ok_or_else(|| missing("an engine"))?;
        let schemas = self.schemas.ok_or_else(|| missing("schemas"))?;
        let metadata = engine.metadata().clone();
        let key = self.id.registry_key();
        // The registry entry and (when the open is guarded by it) the table record, in one read.
        let table_key = self
            .require_table
            .then(|| mink_metadata::keys::table(&self.id.table));
        let keys: Vec<String> = std::iter::once(key.clone())
            .chain(table_key.clone())
            .collect();
        let mut found = metadata
            .kv()
            .get_many(&keys)
            .await
            .map_err(|e| TabletError::metadata(&name, "read the tablet registry", e))?
            .into_iter();
        let existing = found.next().flatten();
        let guard = match table_key {
            Some(_) => Some(guard_version(found.next().flatten(), &self.id, &name)?),
            None => None,
        };
        let opened = match (existing, mode) {
            (Some(_), Mode::Create) => return Err(TabletError::AlreadyExists { tablet: name }),
            (Some(kv), _) => Opened::Registered(registry::decode(&key, &kv.value)?),
            (None, Mode::Open) => return Err(TabletError::NotFound { tablet: name }),
            (None, _) => register(&engine, &self.id, &key, &name, mode, guard).await?,
        };
        let (stream, manifest) = match opened {
            Opened::Created(stream, manifest) => (stream, Some(manifest)),
            Opened::Registered(stream_id) => {
                let stream = engine
                    .open_stream(stream_id)
                    .await
                    .map_err(|e| TabletError::stream(&name, "open", e))?;
                (stream, None)
            }
        };
        let mut stream: Arc<dyn LogStream> = Arc::new(stream);
        if let Some(layer) = &self.layer {
            stream = layer(stream);
        }
        // A new stream's manifest is written while the tablet starts and while its first
        // appends go to the WAL; none is acknowledged before the PUT has ended.
        let manifest = manifest.map_or_else(ManifestGate::written, ManifestGate::spawn);
        Tablet::start_gated(
            self.id,
            stream,
            metadata,
            schemas,
            self.clock,
            self.settings,
            manifest,
        )
        .await
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Create,
    Open,
    OpenOrCreate,
}

/// How often a registration re-reads the table record after it changed under it (a schema
/// version added) before giving up.
const GUARD_ATTEMPTS: u32 = 16;

/// The version of the table record when it still names `id`'s incarnation; `NotFound` when the
/// table is gone or is another incarnation now (dropped, perhaps created again).
async fn table_guard(metadata: &Metadata, id: &TabletId, name: &str) -> Result<u64> {
    let table_key = mink_metadata::keys::table(&id.table);
    let current = metadata
        .kv()
        .get(&table_key)
        .await
        .map_err(|e| TabletError::metadata(name, "read the table record", e))?;
    guard_version(current, id, name)
}

/// [`table_guard`] of a table record already read.
fn guard_version(current: Option<KeyValue>, id: &TabletId, name: &str) -> Result<u64> {
    let not_found = || TabletError::NotFound {
        tablet: name.to_owned(),
    };
    let Some(current) = current else {
        return Err(not_found());
    };
    let record: TableRecord = mink_metadata::value::decode(&current.key, &current.value)
        .map_err(|e| TabletError::metadata(name, "read the table record", e))?;
    if record.incarnation != id.incarnation {
        return Err(not_found());
    }
    Ok(current.version)
}

/// A tablet's stream, as the open found it.
enum Opened {
    /// Created and opened here, with its manifest's PUT to await before it takes data.
    Created(Stream, ManifestWrite),
    /// Registered already (by another open, perhaps one that won a race): to be opened.
    Registered(u64),
}

/// Creates a stream, opened here, and registers it under `key`, in one metadata transaction; on
/// a lost race, uses (or refuses) the winner's. With a `guard` (the table record's version), the
/// registry entry is written only while the table record is still at a version naming this
/// incarnation.
async fn register(
    engine: &Engine,
    id: &TabletId,
    key: &str,
    name: &str,
    mode: Mode,
    mut guard: Option<u64>,
) -> Result<Opened> {
    let kv = engine.metadata().kv();
    let table_key = mink_metadata::keys::table(&id.table);
    for _ in 0..GUARD_ATTEMPTS {
        let entry = |stream_id| {
            let mut compares = vec![Compare::absent(key)];
            if let Some(version) = guard {
                compares.push(Compare::version(&table_key, version));
            }
            Txn {
                compares,
                on_success: vec![Op::put(key, Bytes::from(registry::encode(stream_id)))],
            }
        };
        // With a manifest naming the tablet, for a rebuild from objects: its PUT runs while
        // the tablet starts.
        let created = engine
            .create_open_stream(id.label(), entry)
            .await
            .map_err(|e| TabletError::stream(name, "create", e))?;
        if let Some((stream, manifest)) = created {
            return Ok(Opened::Created(stream, manifest));
        }
        let current = kv
            .get(key)
            .await
            .map_err(|e| TabletError::metadata(name, "read the tablet registry", e))?;
        if let Some(current) = current {
            // Nothing of the stream this attempt would have created was written.
            tracing::debug!(tablet = name, "lost a tablet creation race");
            return match mode {
                Mode::OpenOrCreate => {
                    Ok(Opened::Registered(registry::decode(key, &current.value)?))
                }
                Mode::Create | Mode::Open => Err(TabletError::AlreadyExists {
                    tablet: name.to_owned(),
                }),
            };
        }
        // The table record changed: still this incarnation (a schema added) or dropped.
        guard = Some(table_guard(engine.metadata(), id, name).await?);
    }
    Err(TabletError::Metadata {
        tablet: name.to_owned(),
        operation: "register the tablet",
        source: Arc::new(mink_metadata::MetaError::Contended {
            operation: "register the tablet",
            key: key.to_owned(),
            attempts: GUARD_ATTEMPTS,
        }),
    })
}

impl Tablet {
    /// A builder for the tablet `id`.
    pub fn builder(id: TabletId) -> TabletBuilder {
        TabletBuilder {
            id,
            engine: None,
            schemas: None,
            clock: Arc::new(SystemClock),
            settings: TabletSettings::default(),
            layer: None,
            require_table: false,
        }
    }

    /// A tablet over an already opened stream (no registry lookup): loads the writer snapshot of
    /// `id` and replays the stream from its offset.
    pub async fn start(
        id: TabletId,
        stream: Arc<dyn LogStream>,
        metadata: Arc<Metadata>,
        schemas: Arc<dyn Schemas>,
        clock: Arc<dyn Clock>,
        settings: TabletSettings,
    ) -> Result<Tablet> {
        Self::start_gated(
            id,
            stream,
            metadata,
            schemas,
            clock,
            settings,
            ManifestGate::written(),
        )
        .await
    }

    /// [`Tablet::start`] with the stream's manifest PUT, if it is still on its way, to await
    /// before acknowledging an append.
    async fn start_gated(
        id: TabletId,
        stream: Arc<dyn LogStream>,
        metadata: Arc<Metadata>,
        schemas: Arc<dyn Schemas>,
        clock: Arc<dyn Clock>,
        settings: TabletSettings,
        manifest: ManifestGate,
    ) -> Result<Tablet> {
        id.check()?;
        let name = id.to_string();
        let ttl_ms = i64::try_from(settings.writer_ttl.as_millis()).unwrap_or(i64::MAX);
        let snapshot = metadata
            .get_writer_snapshot(&id.table_segment(), &id.partition, id.bucket)
            .await
            .map_err(|e| TabletError::metadata(&name, "read the writer snapshot", e))?;
        let offsets = stream.offsets();
        let mut stale = false;
        let (mut windows, mut last_timestamp, from) = match snapshot {
            Some(s) if s.offset <= offsets.confirm => {
                let (windows, ts) =
                    snapshot::decode(&s.data).map_err(|reason| TabletError::CorruptMetadata {
                        key: id.writer_key(),
                        reason,
                    })?;
                (windows, ts, s.offset.max(offsets.start))
            }
            Some(s) => {
                tracing::warn!(
                    tablet = name,
                    snapshot = s.offset,
                    high_watermark = offsets.confirm,
                    "writer snapshot is ahead of the log; ignoring it and replaying the whole log"
                );
                stale = true;
                (Windows::default(), i64::MIN, offsets.start)
            }
            None => (Windows::default(), i64::MIN, offsets.start),
        };
        let replayed = replay(
            &*stream,
            &name,
            from,
            offsets.confirm,
            &settings,
            ttl_ms,
            &mut windows,
        )
        .await?;
        last_timestamp = last_timestamp.max(replayed.last_timestamp);
        if replayed.batches == 0 && last_timestamp == i64::MIN && offsets.confirm > offsets.start {
            // No snapshot and nothing replayed: take the newest timestamp from the last batch.
            last_timestamp = last_batch_timestamp(&*stream, &name, offsets.confirm).await?;
        }
        tracing::debug!(
            tablet = name,
            from,
            to = offsets.confirm,
            batches = replayed.batches,
            "replayed the log into the writer windows"
        );
        let epoch = i32::try_from(stream.epoch()).unwrap_or(i32::MAX);
        let now = clock.now_ms();
        let tablet = Tablet {
            inner: Arc::new(Inner {
                id,
                name,
                stream,
                metadata,
                schemas,
                settings,
                ttl_ms,
                epoch,
                sequencing: Mutex::new(Sequencing {
                    windows,
                    last_timestamp,
                    appends_since_snapshot: replayed.batches,
                    last_snapshot_ms: now,
                    closed: false,
                }),
                snapshot: tokio::sync::Mutex::new(from),
                manifest,
                clock,
                closed: AtomicBool::new(false),
            }),
        };
        if stale {
            // Replace the stale snapshot before anyone else can trust it.
            tablet.snapshot().await?;
        }
        Ok(tablet)
    }
}

struct Replayed {
    batches: u64,
    last_timestamp: i64,
}

/// Reads `[from, to)` and adds every idempotent batch to the windows.
async fn replay(
    stream: &dyn LogStream,
    name: &str,
    from: u64,
    to: u64,
    settings: &TabletSettings,
    ttl_ms: i64,
    windows: &mut Windows,
) -> Result<Replayed> {
    let mut out = Replayed {
        batches: 0,
        last_timestamp: i64::MIN,
    };
    let mut cursor = from;
    while cursor < to {
        let batches = stream
            .fetch(
                cursor,
                to,
                settings.replay_fetch_bytes,
                ReadBound::Confirmed,
            )
            .await
            .map_err(|e| TabletError::stream(name, "replay", e))?;
        if batches.is_empty() {
            break;
        }
        for batch in batches {
            for view in mink_codec::batches(batch.payload.as_ref()) {
                let view = view.map_err(|e| TabletError::Corrupt {
                    offset: batch.base_offset,
                    reason: e.to_string(),
                })?;
                if view.base_offset() < i64::try_from(from).unwrap_or(i64::MAX) {
                    continue;
                }
                out.batches += 1;
                out.last_timestamp = out.last_timestamp.max(view.commit_timestamp());
                if let Some((writer_id, epoch)) = mink_codec::writer_parts(view.writer_id()) {
                    windows.replay(
                        writer_id,
                        epoch,
                        Entry {
                            sequence: view.batch_sequence(),
                            base_offset: u64::try_from(view.base_offset()).unwrap_or(0),
                            offset_delta: view.last_offset_delta(),
                            timestamp: view.commit_timestamp(),
                            records: view.counts_records(),
                            ack: None,
                        },
                        ttl_ms,
                    );
                }
            }
            cursor = cursor.max(batch.end_offset());
        }
    }
    Ok(out)
}

/// The commit timestamp of the batch just below `end`.
async fn last_batch_timestamp(stream: &dyn LogStream, name: &str, end: u64) -> Result<i64> {
    let batches = stream
        .fetch(end - 1, end, 1, ReadBound::Confirmed)
        .await
        .map_err(|e| TabletError::stream(name, "fetch", e))?;
    let mut last = i64::MIN;
    for batch in batches {
        for view in mink_codec::batches(batch.payload.as_ref()).flatten() {
            last = last.max(view.commit_timestamp());
        }
    }
    Ok(last)
}
