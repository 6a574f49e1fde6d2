//! The tablet itself: open/create, append, read, timestamp lookup, lifecycle and writer snapshots.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use mink_codec::{Header, Projection};
use mink_metadata::{
    CasOutcome, Compare, MetaKvExt, Metadata, Op, StreamRecord, StreamState, Txn, WriterSnapshot,
};
use mink_s3stream::engine::Engine;
use mink_s3stream::error::StreamError;
use mink_s3stream::stream::{AppendPermit, Build, PendingAppend, ReadBound};
use tokio::sync::watch;

use crate::clock::{Clock, SystemClock};
use crate::error::{Result, TabletError};
use crate::registry::{self, TabletId};
use crate::schemas::Schemas;
use crate::settings::TabletSettings;
use crate::stream::{LogStream, StreamLayer};
use crate::writers::{
    Ack, AckCell, AckState, Batches, Entry, Verdict, Windows, WriterState, snapshot,
};

/// Which offset bounds a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Only durable rows, below the high watermark (the default, and all clients see).
    #[default]
    HighWatermark,
    /// Also rows submitted but not yet durable, below the log end (recovery of derived state).
    LogEnd,
}

/// The three offsets of a tablet at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TabletOffsets {
    /// Oldest retained offset; moves forward on trim.
    pub log_start: u64,
    /// Everything below is durable; the default read bound.
    pub high_watermark: u64,
    /// The next offset to assign.
    pub log_end: u64,
}

/// The outcome of one batch of an append request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendedBatch {
    /// Offset of its first row.
    pub base_offset: u64,
    /// Its rows.
    pub record_count: u32,
    /// The commit timestamp it was stamped with.
    pub commit_timestamp: i64,
    /// Whether it was a retry of a batch already appended (nothing was appended for it; the offsets
    /// are those it got the first time).
    pub duplicate: bool,
}

impl AppendedBatch {
    /// The offset after the batch.
    pub fn next_offset(&self) -> u64 {
        self.base_offset + u64::from(self.record_count)
    }
}

/// The outcome of an append request: one entry per batch, in request order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendResult {
    /// Per batch.
    pub batches: Vec<AppendedBatch>,
    /// The high watermark when the append returned (at least past every batch).
    pub high_watermark: u64,
}

impl AppendResult {
    /// Offset of the request's first row.
    pub fn base_offset(&self) -> u64 {
        self.batches.first().map_or(0, |b| b.base_offset)
    }

    /// The offset after the request's last row.
    pub fn next_offset(&self) -> u64 {
        self.batches.last().map_or(0, AppendedBatch::next_offset)
    }

    /// Whether every batch was a duplicate (the request appended nothing).
    pub fn is_duplicate(&self) -> bool {
        self.batches.iter().all(|b| b.duplicate)
    }
}

/// The columns a read keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Columns {
    /// By name, in this order (stable across schema versions).
    Names(Vec<String>),
    /// By index in each batch's schema, in this order.
    Indices(Vec<usize>),
}

/// One batch as a read returns it: the header and the batch bytes (projected, if asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadBatch {
    /// The header fields.
    pub header: Header,
    /// The whole batch, header included, in the codec's format.
    pub bytes: Bytes,
}

impl ReadBatch {
    /// Offset of the first row.
    pub fn base_offset(&self) -> u64 {
        u64::try_from(self.header.base_offset).unwrap_or(0)
    }

    /// The offset after the batch.
    pub fn next_offset(&self) -> u64 {
        self.base_offset() + u64::try_from(self.header.record_count).unwrap_or(0)
    }
}

/// The outcome of a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    /// Batches in offset order; the first holds `from`.
    pub batches: Vec<ReadBatch>,
    /// Where the next read continues: after the last batch, or `from` if none.
    pub next_offset: u64,
    /// The high watermark when the read was served.
    pub high_watermark: u64,
    /// The log start when the read was served.
    pub log_start: u64,
}

impl ReadResult {
    /// Every batch back to back, as one buffer (the codec's format, as appended).
    pub fn concat(&self) -> Bytes {
        match self.batches.as_slice() {
            [one] => one.bytes.clone(),
            many => {
                let mut out = Vec::with_capacity(many.iter().map(|b| b.bytes.len()).sum());
                for b in many {
                    out.extend_from_slice(&b.bytes);
                }
                Bytes::from(out)
            }
        }
    }
}

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

/// The state changed under the sequencing lock.
struct Sequencing {
    windows: Windows,
    /// The newest commit timestamp assigned; the next is never lower.
    last_timestamp: i64,
    appends_since_snapshot: u64,
    last_snapshot_ms: i64,
    closed: bool,
}

struct Inner {
    id: TabletId,
    name: String,
    stream: Arc<dyn LogStream>,
    metadata: Arc<Metadata>,
    schemas: Arc<dyn Schemas>,
    clock: Arc<dyn Clock>,
    settings: TabletSettings,
    ttl_ms: i64,
    epoch: i32,
    sequencing: Mutex<Sequencing>,
    /// Serialises snapshot writes; holds the offset of the newest snapshot written.
    snapshot: tokio::sync::Mutex<u64>,
    closed: AtomicBool,
}

/// One bucket's log. Cheap to clone; every clone is the same tablet.
#[derive(Clone)]
pub struct Tablet {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Tablet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tablet")
            .field("id", &self.inner.id)
            .field("stream", &self.inner.stream.id())
            .field("offsets", &self.offsets())
            .finish()
    }
}

/// One batch of an append request after the header checks.
/// What the locked part of an append decided.
enum Sequenced {
    /// Some batches retry batches still in flight: wait for those, then classify again.
    WaitFor(Vec<Ack>),
    /// Every batch is a duplicate; nothing was appended.
    AllDuplicates(AppendResult),
    /// The new batches were submitted to the stream.
    Submitted(Submitted),
}

/// What the builder of an append decided under the stream's lock.
enum Decided {
    /// Wait for these in-flight batches, then classify again.
    WaitFor(Vec<Ack>),
    /// Every batch is a duplicate; nothing to append.
    AllDuplicates(AppendResult),
    /// The new batches are handed to the stream.
    Append {
        ack: Option<Ack>,
        result: Vec<AppendedBatch>,
        next: u64,
        snapshot_due: bool,
    },
}

struct Submitted {
    pending: PendingAppend,
    ack: Option<Ack>,
    result: Vec<AppendedBatch>,
    next: u64,
    snapshot_due: bool,
}

struct Parsed {
    range: Range<usize>,
    record_count: u32,
    writer_id: i64,
    sequence: i32,
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

    /// The tablet's identity.
    pub fn id(&self) -> &TabletId {
        &self.inner.id
    }

    /// The id of the stream holding the log.
    pub fn stream_id(&self) -> u64 {
        self.inner.stream.id()
    }

    /// The leader epoch written into appended batches (the stream epoch, saturated to `i32`).
    pub fn leader_epoch(&self) -> i32 {
        self.inner.epoch
    }

    /// The settings.
    pub fn settings(&self) -> &TabletSettings {
        &self.inner.settings
    }

    /// log_start, high_watermark and log_end now.
    pub fn offsets(&self) -> TabletOffsets {
        let o = self.inner.stream.offsets();
        TabletOffsets {
            log_start: o.start,
            high_watermark: o.confirm,
            log_end: o.next,
        }
    }

    /// The high watermark now.
    pub fn high_watermark(&self) -> u64 {
        self.inner.stream.confirm_offset()
    }

    /// A receiver of the high watermark, woken each time it advances (the moment an append becomes
    /// durable, even if the appending request was cancelled).
    pub fn watch_high_watermark(&self) -> watch::Receiver<u64> {
        self.inner.stream.watch_confirm()
    }

    /// Waits until the high watermark passes `offset` (returns it), or `timeout` lapses (returns
    /// the high watermark then, which may still be at or below `offset`).
    pub async fn wait_past(&self, offset: u64, timeout: Duration) -> u64 {
        let mut hw = self.watch_high_watermark();
        let wait = hw.wait_for(|c| *c > offset);
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(value)) => *value,
            _ => self.high_watermark(),
        }
    }

    /// The idempotent writers' windows now, by writer id.
    pub async fn writers(&self) -> Vec<WriterState> {
        let hw = self.high_watermark();
        lock(&self.inner.sequencing).windows.states(hw)
    }

    fn closed_error(&self) -> TabletError {
        TabletError::Closed {
            tablet: self.inner.name.clone(),
        }
    }

    fn stream_error(&self, operation: &'static str, error: StreamError) -> TabletError {
        TabletError::stream(&self.inner.name, operation, error)
    }

    /// Checks every batch of an append request (framing, magic, CRC, counts, schema, writer fields).
    fn parse(&self, request: &[u8]) -> Result<Batches<Parsed>> {
        let settings = &self.inner.settings;
        if request.len() as u64 > settings.max_request_bytes {
            return Err(TabletError::TooLarge {
                what: "request bytes",
                value: request.len() as u64,
                limit: settings.max_request_bytes,
            });
        }
        let mut parsed = Batches::new();
        let mut total: u32 = 0;
        for (index, view) in mink_codec::batches(request).enumerate() {
            let invalid = |e: mink_codec::Error| TabletError::InvalidBatch {
                index,
                source: Arc::new(e),
            };
            let view = view.map_err(invalid)?;
            view.check_header().map_err(invalid)?;
            if parsed.len() as u64 >= settings.max_request_batches {
                return Err(TabletError::TooLarge {
                    what: "batches in the request",
                    value: parsed.len() as u64 + 1,
                    limit: settings.max_request_batches,
                });
            }
            let record_count = u32::try_from(view.record_count()).unwrap_or(0);
            if record_count == 0 {
                return Err(TabletError::InvalidRequest {
                    reason: format!(
                        "batch {index} has no rows; every appended batch must hold at least one row"
                    ),
                });
            }
            if !self.inner.schemas.contains(view.schema_id()) {
                return Err(TabletError::UnknownSchema {
                    index,
                    schema_id: view.schema_id(),
                });
            }
            let (writer_id, sequence) = (view.writer_id(), view.batch_sequence());
            if writer_id < mink_codec::NO_WRITER_ID || (writer_id >= 0 && sequence < 0) {
                return Err(TabletError::InvalidRequest {
                    reason: format!(
                        "batch {index} has writer id {writer_id} and sequence {sequence}; a writer id \
                         is -1 (none) or non-negative with a non-negative sequence"
                    ),
                });
            }
            total = total
                .checked_add(record_count)
                .ok_or(TabletError::TooLarge {
                    what: "rows in the request",
                    value: u64::from(total) + u64::from(record_count),
                    limit: u64::from(u32::MAX),
                })?;
            let start = view.position();
            parsed.push(Parsed {
                range: start..start + view.len(),
                record_count,
                writer_id,
                sequence,
            });
        }
        if parsed.is_empty() {
            return Err(TabletError::InvalidRequest {
                reason: "the request holds no batch".to_owned(),
            });
        }
        Ok(parsed)
    }

    /// Appends the batches in `request` (back to back, in the codec's format) as one unit: all of
    /// them or none. Batches that retry an idempotent writer's retained batch are duplicates: they
    /// are not appended again and report the offsets they got the first time. Returns once the
    /// appended batches are durable.
    ///
    /// A retry of a batch whose first append is still in flight waits for that append's outcome:
    /// a duplicate if it became durable, evaluated afresh if it failed.
    pub async fn append(&self, request: Bytes) -> Result<AppendResult> {
        let parsed = self.parse(&request)?;
        // Room under the node's budget is reserved before the sequencing lock, so nothing awaits
        // while the lock is held.
        let stream = &self.inner.stream;
        let reserved = match stream.try_reserve(request.len()) {
            Some(now) => now,
            None => stream.reserve(request.len()).await,
        };
        let mut permit = Some(reserved.map_err(|e| self.stream_error("append", e))?);
        // The request is stamped in place when this handle is its only owner.
        let mut bytes = Some(
            request
                .try_into_mut()
                .unwrap_or_else(|shared| BytesMut::from(shared.as_ref())),
        );
        loop {
            let submitted = match self.sequence(&parsed, &mut permit, &mut bytes)? {
                Sequenced::WaitFor(pending) => {
                    for ack in pending {
                        ack.wait_settled().await;
                    }
                    continue;
                }
                Sequenced::AllDuplicates(result) => return Ok(result),
                Sequenced::Submitted(submitted) => submitted,
            };
            let Submitted {
                pending,
                ack,
                result,
                next,
                snapshot_due,
            } = submitted;
            let outcome = match ack {
                None => pending.await,
                Some(ack) => {
                    Resolve {
                        durable: Some(pending),
                        ack,
                    }
                    .wait()
                    .await
                }
            };
            outcome.map_err(|e| self.stream_error("append (durable acknowledgement)", e))?;
            if snapshot_due {
                let tablet = self.clone();
                tokio::spawn(async move {
                    if let Err(error) = tablet.snapshot_if_idle().await {
                        tracing::warn!(tablet = tablet.inner.name, %error, "writer snapshot failed");
                    }
                });
            }
            return Ok(AppendResult {
                batches: result,
                high_watermark: self.high_watermark().max(next),
            });
        }
    }

    /// Submits an append: the batches are classified, stamped and recorded by a builder the stream
    /// runs under its own sequencing lock, given the next offset ([`LogStream::submit_with`]), so
    /// offsets, writer windows and the stream advance together with no lock of the tablet's around
    /// the submission. Never awaits.
    fn sequence(
        &self,
        parsed: &[Parsed],
        permit: &mut Option<AppendPermit>,
        bytes: &mut Option<BytesMut>,
    ) -> Result<Sequenced> {
        let inner = &*self.inner;
        // Read before the stream's lock: a stale (lower) value only keeps the acknowledgements of
        // durable batches in the windows a little longer.
        let confirm = inner.stream.confirm_offset();
        let mut decided: Option<Result<Decided>> = None;
        let submitted = inner.stream.submit_with(permit, &mut |next| {
            let (build, outcome) = self.decide(parsed, bytes, next, confirm);
            decided = Some(outcome);
            build
        });
        match (submitted, decided) {
            (Err(error), decided) => {
                // Recorded in the windows but not appended: the entries fail, so a retry is
                // evaluated afresh.
                if let Some(Ok(Decided::Append { ack: Some(ack), .. })) = decided {
                    ack.settle(AckState::Failed);
                }
                Err(self.stream_error("append", error))
            }
            (Ok(_), Some(Err(error))) => Err(error),
            (Ok(None), Some(Ok(Decided::WaitFor(pending)))) => Ok(Sequenced::WaitFor(pending)),
            (Ok(None), Some(Ok(Decided::AllDuplicates(result)))) => {
                Ok(Sequenced::AllDuplicates(result))
            }
            (
                Ok(Some(pending)),
                Some(Ok(Decided::Append {
                    ack,
                    result,
                    next,
                    snapshot_due,
                })),
            ) => Ok(Sequenced::Submitted(Submitted {
                pending,
                ack,
                result,
                next,
                snapshot_due,
            })),
            _ => Err(TabletError::Inconsistent {
                tablet: inner.name.clone(),
                message: "the stream and the tablet disagree on whether a batch was appended"
                    .to_owned(),
            }),
        }
    }

    /// The builder of [`Tablet::sequence`], run under the stream's sequencing lock with the next
    /// offset: classifies the batches against the writer windows, assigns offsets and the commit
    /// timestamp, stamps them into the batches (taking `bytes`) and records the new ones in the
    /// windows.
    fn decide(
        &self,
        parsed: &[Parsed],
        bytes: &mut Option<BytesMut>,
        base: u64,
        confirm: u64,
    ) -> (Build, Result<Decided>) {
        let inner = &*self.inner;
        let mut seq = lock(&inner.sequencing);
        if seq.closed {
            return (Build::Nothing, Err(self.closed_error()));
        }
        let now = inner.clock.now_ms();
        let verdicts = match seq.windows.classify(
            parsed.iter().map(|p| (p.writer_id, p.sequence)),
            now,
            inner.ttl_ms,
            confirm,
        ) {
            Ok(verdicts) => verdicts,
            Err(e) => {
                return (
                    Build::Nothing,
                    Err(TabletError::OutOfOrderSequence {
                        index: e.index,
                        writer_id: e.writer_id,
                        expected: e.expected,
                        received: e.received,
                    }),
                );
            }
        };
        let pending: Vec<Ack> = verdicts
            .iter()
            .filter_map(|v| match v {
                Verdict::Duplicate(Entry { ack: Some(ack), .. })
                    if ack.state() == AckState::Pending =>
                {
                    Some(ack.clone())
                }
                _ => None,
            })
            .collect();
        if !pending.is_empty() {
            return (Build::Nothing, Ok(Decided::WaitFor(pending)));
        }
        let duplicates = verdicts
            .iter()
            .filter(|v| matches!(v, Verdict::Duplicate(_)))
            .count();
        let timestamp = now.max(seq.last_timestamp);
        let mut result = Vec::with_capacity(parsed.len());
        let mut next = base;
        let mut count: u32 = 0;
        for (p, v) in parsed.iter().zip(&verdicts) {
            match v {
                Verdict::Duplicate(e) => result.push(AppendedBatch {
                    base_offset: e.base_offset,
                    record_count: u32::try_from(e.offset_delta).unwrap_or(0) + 1,
                    commit_timestamp: e.timestamp,
                    duplicate: true,
                }),
                _ => {
                    result.push(AppendedBatch {
                        base_offset: next,
                        record_count: p.record_count,
                        commit_timestamp: timestamp,
                        duplicate: false,
                    });
                    next += u64::from(p.record_count);
                    count += p.record_count;
                }
            }
        }
        if duplicates == parsed.len() {
            return (
                Build::Nothing,
                Ok(Decided::AllDuplicates(AppendResult {
                    batches: result,
                    high_watermark: confirm,
                })),
            );
        }
        let Some(mut bytes) = bytes.take() else {
            return (
                Build::Nothing,
                Err(TabletError::Inconsistent {
                    tablet: inner.name.clone(),
                    message: "an append request was submitted twice".to_owned(),
                }),
            );
        };
        // Stamp offsets, timestamp and epoch (outside the CRC) and keep only the new batches.
        let stamped = if duplicates == 0 {
            parsed
                .iter()
                .zip(&result)
                .try_for_each(|(p, r)| stamp(&mut bytes[p.range.clone()], r, inner.epoch))
                .map(|()| bytes.freeze())
        } else {
            let mut out = Vec::with_capacity(bytes.len());
            parsed
                .iter()
                .zip(&result)
                .filter(|(_, r)| !r.duplicate)
                .try_for_each(|(p, r)| {
                    let start = out.len();
                    out.extend_from_slice(&bytes[p.range.clone()]);
                    stamp(&mut out[start..], r, inner.epoch)
                })
                .map(|()| Bytes::from(out))
        };
        let payload = match stamped {
            Ok(payload) => payload,
            Err(error) => return (Build::Nothing, Err(error)),
        };
        let idempotent = verdicts.iter().any(|v| matches!(v, Verdict::New { .. }));
        let ack: Option<Ack> = idempotent.then(AckCell::pending);
        for ((p, v), r) in parsed.iter().zip(&verdicts).zip(&result) {
            if let Verdict::New { restart } = v {
                seq.windows.record(
                    p.writer_id,
                    Entry {
                        sequence: p.sequence,
                        base_offset: r.base_offset,
                        offset_delta: i32::try_from(p.record_count - 1).unwrap_or(i32::MAX),
                        timestamp,
                        ack: ack.clone(),
                    },
                    *restart,
                );
            }
        }
        seq.last_timestamp = timestamp;
        seq.appends_since_snapshot += 1;
        let snapshot_due = seq.appends_since_snapshot >= inner.settings.snapshot_every_appends
            || now.saturating_sub(seq.last_snapshot_ms)
                >= i64::try_from(inner.settings.snapshot_interval.as_millis()).unwrap_or(i64::MAX);
        if snapshot_due {
            seq.appends_since_snapshot = 0;
            seq.last_snapshot_ms = now;
        }
        (
            Build::Append { count, payload },
            Ok(Decided::Append {
                ack,
                result,
                next,
                snapshot_due,
            }),
        )
    }

    /// Reads `[from, to)` (`to` is clipped to the isolation bound): whole batches, the first holding
    /// `from`, about `max_bytes` in all but at least one batch when any is below the bound. With
    /// `columns`, each batch is rewritten to those columns.
    pub async fn read(
        &self,
        from: u64,
        to: u64,
        columns: Option<&Columns>,
        isolation: Isolation,
        max_bytes: usize,
    ) -> Result<ReadResult> {
        if to < from {
            return Err(TabletError::InvalidRange { from, to });
        }
        let offsets = self.inner.stream.offsets();
        let (bound, stream_bound) = match isolation {
            Isolation::HighWatermark => (offsets.confirm, ReadBound::Confirmed),
            Isolation::LogEnd => (offsets.next, ReadBound::NextOffset),
        };
        if from < offsets.start {
            return Err(TabletError::BelowLogStart {
                offset: from,
                log_start: offsets.start,
            });
        }
        if from > bound {
            return Err(TabletError::OffsetOutOfRange {
                offset: from,
                bound,
                isolation,
            });
        }
        let mut out = ReadResult {
            batches: Vec::new(),
            next_offset: from,
            high_watermark: offsets.confirm,
            log_start: offsets.start,
        };
        let to = to.min(bound);
        if from >= to {
            return Ok(out);
        }
        let fetched = self
            .inner
            .stream
            .fetch(from, to, max_bytes, stream_bound)
            .await
            .map_err(|e| match e {
                StreamError::BeyondBound { offset, bound, .. } => TabletError::OffsetOutOfRange {
                    offset,
                    bound,
                    isolation,
                },
                other => self.stream_error("fetch", other),
            })?;
        let mut projections: HashMap<i16, Projection> = HashMap::new();
        let mut bytes_out = 0usize;
        'outer: for stream_batch in fetched {
            for view in mink_codec::batches(stream_batch.payload.clone()) {
                let view = view.map_err(|e| TabletError::Corrupt {
                    offset: stream_batch.base_offset,
                    reason: e.to_string(),
                })?;
                let base = u64::try_from(view.base_offset()).unwrap_or(0);
                let next = u64::try_from(view.next_offset()).unwrap_or(0);
                if next <= from {
                    continue;
                }
                if base >= to || (bytes_out >= max_bytes && !out.batches.is_empty()) {
                    break 'outer;
                }
                let bytes = match columns {
                    None => view.buf().clone(),
                    Some(columns) => {
                        let schema_id = view.schema_id();
                        let projection = match projections.entry(schema_id) {
                            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                            std::collections::hash_map::Entry::Vacant(v) => {
                                v.insert(self.projection(schema_id, base, columns)?)
                            }
                        };
                        Bytes::from(projection.project(&view).map_err(|e| {
                            TabletError::Corrupt {
                                offset: base,
                                reason: format!("projecting the batch failed: {e}"),
                            }
                        })?)
                    }
                };
                bytes_out += bytes.len();
                out.next_offset = next;
                out.batches.push(ReadBatch {
                    header: *view.header(),
                    bytes,
                });
            }
        }
        Ok(out)
    }

    fn projection(&self, schema_id: i16, offset: u64, columns: &Columns) -> Result<Projection> {
        let schema = self
            .inner
            .schemas
            .schema(schema_id)
            .ok_or_else(|| TabletError::Corrupt {
                offset,
                reason: format!(
                    "the stored batch has schema id {schema_id}, which the table does not know"
                ),
            })?;
        let projection = match columns {
            Columns::Names(names) => Projection::by_names(schema, names),
            Columns::Indices(indices) => Projection::new(schema, indices),
        };
        projection.map_err(|e| TabletError::InvalidProjection {
            schema_id,
            source: Arc::new(e),
        })
    }

    /// The first offset whose batch has a commit timestamp at or after `timestamp` (ms); the high
    /// watermark when every batch is older. A timestamp in the future is refused.
    ///
    /// A binary search over the batch headers, with no index: each probe fetches the one stream batch
    /// holding the middle offset and reads its first header, so with batches of similar sizes it
    /// costs at most `ceil(log2(batches)) + 1` fetches (with very uneven sizes, `log2(offsets)`).
    pub async fn offset_for_timestamp(&self, timestamp: i64) -> Result<u64> {
        let now = self.inner.clock.now_ms();
        if timestamp > now {
            return Err(TabletError::FutureTimestamp { timestamp, now });
        }
        let offsets = self.inner.stream.offsets();
        let (mut lo, mut hi) = (offsets.start, offsets.confirm);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let batches = self
                .inner
                .stream
                .fetch(mid, mid + 1, 1, ReadBound::Confirmed)
                .await
                .map_err(|e| self.stream_error("fetch", e))?;
            let Some(batch) = batches.into_iter().next() else {
                return Err(TabletError::Inconsistent {
                    tablet: self.inner.name.clone(),
                    message: format!("no batch holds offset {mid} below the high watermark {hi}"),
                });
            };
            let header = first_header(&batch.payload, batch.base_offset)?;
            if header.commit_timestamp >= timestamp {
                hi = batch.base_offset.max(lo);
            } else {
                lo = batch.end_offset();
            }
        }
        Ok(lo.min(offsets.confirm))
    }

    /// Moves the log start to `offset` (not beyond the high watermark). Data below it becomes
    /// garbage.
    pub async fn trim(&self, offset: u64) -> Result<()> {
        self.inner.stream.trim(offset).await.map_err(|e| match e {
            StreamError::TrimBeyondConfirm {
                offset, confirm, ..
            } => TabletError::OffsetOutOfRange {
                offset,
                bound: confirm,
                isolation: Isolation::HighWatermark,
            },
            other => self.stream_error("trim", other),
        })
    }

    /// Writes a writer-window snapshot at the high watermark now.
    pub async fn snapshot(&self) -> Result<()> {
        let mut written = self.inner.snapshot.lock().await;
        self.snapshot_locked(&mut written).await
    }

    /// A periodic snapshot: skipped when another is being written.
    async fn snapshot_if_idle(&self) -> Result<()> {
        match self.inner.snapshot.try_lock() {
            Ok(mut written) => self.snapshot_locked(&mut written).await,
            Err(_) => Ok(()),
        }
    }

    async fn snapshot_locked(&self, written: &mut u64) -> Result<()> {
        let inner = &*self.inner;
        let (at, data) = {
            // Never the stream's sequencing lock under the tablet's: appends take them the other
            // way round.
            let at = inner.stream.confirm_offset();
            let mut seq = lock(&inner.sequencing);
            seq.windows.expire(inner.clock.now_ms(), inner.ttl_ms);
            (at, snapshot::encode(&seq.windows, at, seq.last_timestamp))
        };
        if at < *written {
            return Ok(());
        }
        put_snapshot_fenced(
            &inner.metadata,
            &inner.id,
            &inner.name,
            inner.stream.id(),
            inner.stream.epoch(),
            &WriterSnapshot {
                offset: at,
                data: Bytes::from(data),
            },
        )
        .await?;
        *written = at;
        Ok(())
    }

    /// Closes the tablet so another node can open it: refuses new appends, waits (up to 30 s) for
    /// the ones in flight, snapshots the writer windows and closes the stream. Closing a closed
    /// tablet does nothing.
    pub async fn close(&self) -> Result<()> {
        let inner = &*self.inner;
        {
            let mut seq = lock(&inner.sequencing);
            if seq.closed {
                return Ok(());
            }
            seq.closed = true;
        }
        // Read after the flag is set (and outside the tablet's lock: appends take the stream's
        // lock first): an append that saw the tablet open has taken its offsets by now.
        let next = inner.stream.offsets().next;
        inner.closed.store(true, Ordering::Release);
        let mut hw = inner.stream.watch_confirm();
        let _ = tokio::time::timeout(Duration::from_secs(30), hw.wait_for(|c| *c >= next)).await;
        self.snapshot().await?;
        inner
            .stream
            .close()
            .await
            .map_err(|e| self.stream_error("close", e))
    }

    /// Destroys the tablet (table or partition drop): deletes the stream, the writer snapshot and
    /// the registry entry.
    pub async fn destroy(&self) -> Result<()> {
        let inner = &*self.inner;
        {
            let mut seq = lock(&inner.sequencing);
            seq.closed = true;
        }
        inner.closed.store(true, Ordering::Release);
        inner
            .stream
            .destroy()
            .await
            .map_err(|e| self.stream_error("destroy", e))?;
        let id = &inner.id;
        inner
            .metadata
            .delete_writer_snapshot(&id.table, &id.partition, id.bucket)
            .await
            .map_err(|e| TabletError::metadata(&inner.name, "delete the writer snapshot", e))?;
        inner
            .metadata
            .kv()
            .delete(&id.registry_key())
            .await
            .map_err(|e| TabletError::metadata(&inner.name, "delete the registry entry", e))?;
        Ok(())
    }

    /// Whether the tablet was closed or destroyed through this handle.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }
}

/// Writes a writer snapshot only while `epoch` still owns the stream: the put is one transaction with
/// a compare on the stream record, so an owner fenced by another node's open can never overwrite the
/// new owner's snapshot with windows holding batches the log does not have.
async fn put_snapshot_fenced(
    metadata: &Metadata,
    id: &TabletId,
    name: &str,
    stream_id: u64,
    epoch: u64,
    snapshot: &WriterSnapshot,
) -> Result<()> {
    let stream_key = mink_metadata::keys::stream(stream_id);
    let writer_key = mink_metadata::keys::writer(&id.table, &id.partition, id.bucket);
    let value = mink_metadata::value::encode(snapshot);
    let meta = |e| TabletError::metadata(name, "write the writer snapshot", e);
    for _ in 0..16 {
        let current = metadata.kv().get(&stream_key).await.map_err(meta)?;
        let Some(current) = current else {
            return Err(TabletError::Fenced {
                tablet: name.to_owned(),
            });
        };
        let record: StreamRecord =
            mink_metadata::value::decode(&current.key, &current.value).map_err(meta)?;
        if record.epoch != epoch || record.state != StreamState::Open {
            return Err(TabletError::Fenced {
                tablet: name.to_owned(),
            });
        }
        let outcome = metadata
            .kv()
            .txn(Txn {
                compares: vec![Compare::version(&stream_key, current.version)],
                on_success: vec![Op::put(&writer_key, value.clone())],
            })
            .await
            .map_err(meta)?;
        if outcome.succeeded {
            return Ok(());
        }
    }
    Err(TabletError::Metadata {
        tablet: name.to_owned(),
        operation: "write the writer snapshot",
        source: Arc::new(mink_metadata::MetaError::Contended {
            operation: "write the writer snapshot",
            key: writer_key,
            attempts: 16,
        }),
    })
}

/// Writes base offset, commit timestamp and leader epoch into one batch.
fn stamp(batch: &mut [u8], r: &AppendedBatch, epoch: i32) -> Result<()> {
    mink_codec::write_append_fields(
        batch,
        i64::try_from(r.base_offset).unwrap_or(i64::MAX),
        r.commit_timestamp,
        epoch,
    )
    .map_err(|e| TabletError::InvalidBatch {
        index: 0,
        source: Arc::new(e),
    })
}

/// Resolves an idempotent append's acknowledgement even if the appending request is cancelled:
/// dropped before the outcome is known, it hands the wait to a task.
struct Resolve {
    durable: Option<PendingAppend>,
    ack: Ack,
}

fn settle(ack: &Ack, outcome: &Result<u64, StreamError>) {
    ack.settle(if outcome.is_ok() {
        AckState::Durable
    } else {
        AckState::Failed
    });
}

impl Resolve {
    async fn wait(mut self) -> Result<u64, StreamError> {
        let Some(durable) = self.durable.as_mut() else {
            return Err(StreamError::ShutDown);
        };
        let outcome = durable.await;
        self.durable = None;
        settle(&self.ack, &outcome);
        outcome
    }
}

impl Drop for Resolve {
    fn drop(&mut self) {
        let Some(durable) = self.durable.take() else {
            return;
        };
        let ack = self.ack.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    let outcome = durable.await;
                    settle(&ack, &outcome);
                });
            }
            // No runtime to finish the wait: forget the entry rather than keep it pending forever.
            Err(_) => {
                ack.settle(AckState::Failed);
            }
        }
    }
}

/// The first header of a stream batch.
fn first_header(payload: &Bytes, offset: u64) -> Result<Header> {
    match mink_codec::batches(payload.as_ref()).next() {
        Some(Ok(view)) => Ok(*view.header()),
        Some(Err(e)) => Err(TabletError::Corrupt {
            offset,
            reason: e.to_string(),
        }),
        None => Err(TabletError::Corrupt {
            offset,
            reason: "empty stream batch".to_owned(),
        }),
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

/// Locks `mutex`; a panic while it was held cannot leave the writer windows half-updated in a way
/// that matters more than losing the process, so a poisoned lock is entered anyway.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
