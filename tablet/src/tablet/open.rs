//! Opening a tablet: the builder, the registry lookup or creation, and the replay of the log into
//! the writer windows from the snapshot's offset.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use mink_metadata::{CasOutcome, MetaKvExt, Metadata};
use mink_s3stream::ReadBound;
use mink_s3stream::engine::Engine;

use super::{Inner, Sequencing, Tablet};
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
        let existing = metadata
            .kv()
            .get(&key)
            .await
            .map_err(|e| TabletError::metadata(&name, "read the tablet registry", e))?;
        let stream_id = match (existing, mode) {
            (Some(_), Mode::Create) => return Err(TabletError::AlreadyExists { tablet: name }),
            (Some(kv), _) => registry::decode(&key, &kv.value)?,
            (None, Mode::Open) => return Err(TabletError::NotFound { tablet: name }),
            (None, _) => register(&engine, &key, &name, mode).await?,
        };
        let stream = engine
            .open_stream(stream_id)
            .await
            .map_err(|e| TabletError::stream(&name, "open", e))?;
        let mut stream: Arc<dyn LogStream> = Arc::new(stream);
        if let Some(layer) = &self.layer {
            stream = layer(stream);
        }
        Tablet::start(
            self.id,
            stream,
            metadata,
            schemas,
            self.clock,
            self.settings,
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

/// Creates a stream and registers it under `key`; on a lost race, uses (or refuses) the winner's.
async fn register(engine: &Engine, key: &str, name: &str, mode: Mode) -> Result<u64> {
    let record = engine
        .create_stream()
        .await
        .map_err(|e| TabletError::stream(name, "create", e))?;
    let outcome = engine
        .metadata()
        .kv()
        .compare_and_swap(key, 0, Some(Bytes::from(registry::encode(record.id))))
        .await
        .map_err(|e| TabletError::metadata(name, "register the tablet", e))?;
    match outcome {
        CasOutcome::Swapped { .. } => Ok(record.id),
        CasOutcome::Conflict { current } => {
            // The stream we created stays empty and closed: nothing refers to it.
            tracing::warn!(
                tablet = name,
                stream = record.id,
                "lost a tablet creation race"
            );
            match (current, mode) {
                (Some(kv), Mode::OpenOrCreate) => registry::decode(key, &kv.value),
                _ => Err(TabletError::AlreadyExists {
                    tablet: name.to_owned(),
                }),
            }
        }
    }
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
        id.check()?;
        let name = id.to_string();
        let ttl_ms = i64::try_from(settings.writer_ttl.as_millis()).unwrap_or(i64::MAX);
        let snapshot = metadata
            .get_writer_snapshot(&id.table, &id.partition, id.bucket)
            .await
            .map_err(|e| TabletError::metadata(&name, "read the writer snapshot", e))?;
        let offsets = stream.offsets();
        let mut stale = false;
        let (mut windows, mut last_timestamp, from) = match snapshot {
            Some(s) if s.offset <= offsets.confirm => {
                let (windows, ts) =
                    snapshot::decode(&s.data).map_err(|reason| TabletError::CorruptMetadata {
                        key: mink_metadata::keys::writer(&id.table, &id.partition, id.bucket),
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
                if view.writer_id() >= 0 {
                    windows.replay(
                        view.writer_id(),
                        Entry {
                            sequence: view.batch_sequence(),
                            base_offset: u64::try_from(view.base_offset()).unwrap_or(0),
                            offset_delta: view.last_offset_delta(),
                            timestamp: view.commit_timestamp(),
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
