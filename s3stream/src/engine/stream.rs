//! A stream: an ordered log of opaque batches with three offsets.
//!
//! - *start offset* (`log_start`): the oldest offset kept; moves forward on trim.
//! - *confirm offset* (`high_watermark`): everything below it is durable in the WAL. Reads are
//!   bounded by it by default; it only moves when the WAL acknowledges, in submission order.
//! - *next offset* (`log_end`): the offset the next append gets.
//!
//! An append assigns offsets synchronously under the stream's sequencing lock, puts the batch in
//! the log cache and hands it to the node's WAL, and returns a [`PendingAppend`] that resolves
//! when the batch is durable. Reads come from the log cache for data not yet compacted and from
//! committed objects (located through the metadata's object index) for the rest.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, oneshot, watch};

use super::compaction;
use super::footprint::{self, Footprint};
use super::lock::lock;
use super::open_stream::OpenStream;
use super::shared::{EngineShared, units};
use crate::batch::StreamBatch;
use crate::error::{Result, StreamError};
use crate::stages::{AppendStage, StageObserver};
use crate::wal::{WalError, WalRecord};

/// Which offset bounds a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadBound {
    /// The confirm offset: only durable data (the default, and all that clients see).
    #[default]
    Confirmed,
    /// The next offset: also data whose WAL upload has not completed (recovery of derived state).
    NextOffset,
}

/// The three offsets of a stream at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    /// Oldest offset kept.
    pub start: u64,
    /// Everything below is durable.
    pub confirm: u64,
    /// The next offset to assign.
    pub next: u64,
}

/// A handle on an open stream; cheap to clone.
#[derive(Clone)]
pub struct Stream {
    pub(crate) state: Arc<OpenStream>,
    pub(crate) engine: Arc<EngineShared>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.state.id)
            .field("epoch", &self.state.epoch)
            .field("offsets", &self.offsets())
            .finish()
    }
}

/// An append whose offsets are assigned; [`durable`](Self::durable) waits for the WAL.
#[derive(Debug)]
#[must_use = "an append is only acknowledged once durable() resolves"]
pub struct PendingAppend {
    /// Offset of the batch's first record.
    pub base_offset: u64,
    /// The offset after the batch.
    pub end_offset: u64,
    /// The outcome, and when the WAL released it.
    ack: oneshot::Receiver<(Result<()>, Instant)>,
    /// Told how long the awaiting task took to pick the outcome up.
    stages: Option<Arc<dyn StageObserver>>,
}

impl PendingAppend {
    /// Resolves when the batch is durable (and readable at the confirm offset), or failed.
    /// Awaiting the `PendingAppend` itself does the same without consuming it.
    pub async fn durable(self) -> Result<u64> {
        self.await
    }
}

impl std::future::Future for PendingAppend {
    type Output = Result<u64>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let base_offset = self.base_offset;
        let polled = std::pin::Pin::new(&mut self.ack).poll(cx);
        polled.map(|outcome| match outcome {
            Ok((outcome, released)) => {
                if let Some(stages) = &self.stages {
                    stages.observe(AppendStage::Wake, released.elapsed(), 1);
                }
                outcome.map(|()| base_offset)
            }
            Err(_) => Err(StreamError::ShutDown),
        })
    }
}

/// What the builder given to [`Stream::submit_with`] decided.
#[derive(Debug)]
pub enum Build {
    /// Append `payload`, a batch covering `count` offsets from the offset the builder was given.
    Append {
        /// Offsets the batch covers (at least one).
        count: u32,
        /// The batch.
        payload: Bytes,
        /// The CRC32C of `payload` when the builder knows it (computed or checked over these
        /// very bytes), so that the WAL need not read a large payload to cover it with its
        /// block's CRC; `None` to have it computed.
        crc: Option<u32>,
    },
    /// Append nothing.
    Nothing,
}

/// Room reserved for one append under the node's budget of uncompacted data
/// ([`Stream::reserve`]). Spent by [`Stream::submit_at`]; dropped unused, it gives the room back.
#[derive(Debug)]
pub struct AppendPermit {
    permit: Option<OwnedSemaphorePermit>,
    len: usize,
}

impl AppendPermit {
    /// The bytes reserved.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no byte is reserved.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Stream {
    /// The stream's id.
    pub fn id(&self) -> u64 {
        self.state.id
    }

    /// The epoch this handle holds.
    pub fn epoch(&self) -> u64 {
        self.state.epoch
    }

    /// The stream's offsets now.
    pub fn offsets(&self) -> Offsets {
        let next = self.state.next();
        Offsets {
            start: self.state.offsets_start(),
            confirm: self.state.confirm(),
            next,
        }
    }

    /// The confirm offset now (cheaper than [`Stream::offsets`], which also reads the next
    /// offset under the sequencing lock).
    pub fn confirm_offset(&self) -> u64 {
        self.state.confirm()
    }

    /// A receiver of the confirm offset, woken each time it advances (for tail readers).
    pub fn watch_confirm(&self) -> watch::Receiver<u64> {
        self.state.confirm.subscribe()
    }

    /// Appends a batch covering `count` offsets at the next offset.
    pub async fn append(&self, count: u32, payload: Bytes) -> Result<PendingAppend> {
        self.append_inner(None, count, payload).await
    }

    /// Appends a batch whose first offset the caller already wrote into it: fails with
    /// [`StreamError::OffsetMismatch`] (appending nothing) unless `base_offset` is the next offset.
    pub async fn append_at(
        &self,
        base_offset: u64,
        count: u32,
        payload: Bytes,
    ) -> Result<PendingAppend> {
        self.append_inner(Some(base_offset), count, payload).await
    }

    /// Reserves room for a batch of `len` bytes under the node's budget of uncompacted data,
    /// waiting (bounded by the back-pressure timeout) while the budget is full. The permit is
    /// spent by [`Stream::submit_at`]; dropped unused, it gives the room back.
    ///
    /// Reserving first lets a caller that must sequence appends under its own lock (the tablet)
    /// wait for room before taking the lock, and submit without awaiting while holding it.
    pub async fn reserve(&self, len: usize) -> Result<AppendPermit> {
        let state = &self.state;
        self.check_appendable(1)?;
        let started = Instant::now();
        let permit = self.engine.admit(state.id, len).await?;
        self.engine
            .observe(AppendStage::Admission, started.elapsed());
        Ok(AppendPermit { permit, len })
    }

    /// [`Stream::reserve`] without waiting: `None` when the budget is full and the caller must
    /// wait with `reserve`; errors as `reserve`.
    pub fn try_reserve(&self, len: usize) -> Option<Result<AppendPermit>> {
        if let Err(error) = self.check_appendable(1) {
            return Some(Err(error));
        }
        let admitted = self.engine.try_admit(len)?;
        if admitted.is_ok() {
            self.engine.observe(AppendStage::Admission, Duration::ZERO);
        }
        Some(admitted.map(|permit| AppendPermit { permit, len }))
    }

    /// Appends a batch whose first offset the caller already wrote into it, with room reserved by
    /// [`Stream::reserve`]; does not wait. Fails (appending nothing) with
    /// [`StreamError::OffsetMismatch`] unless `base_offset` is the next offset, and with
    /// [`StreamError::PermitTooSmall`] if the permit reserved fewer bytes than `payload` holds
    /// (room reserved beyond the payload is given back).
    pub fn submit_at(
        &self,
        base_offset: u64,
        count: u32,
        payload: Bytes,
        permit: AppendPermit,
    ) -> Result<PendingAppend> {
        self.submit(Some(base_offset), count, payload, permit)
    }

    async fn append_inner(
        &self,
        expected: Option<u64>,
        count: u32,
        payload: Bytes,
    ) -> Result<PendingAppend> {
        self.check_appendable(count)?;
        let permit = self.reserve(payload.len()).await?;
        self.submit(expected, count, payload, permit)
    }

    fn check_appendable(&self, count: u32) -> Result<()> {
        let state = &self.state;
        if count == 0 {
            return Err(StreamError::EmptyBatch {
                stream_id: state.id,
            });
        }
        if state.fenced.load(Ordering::Acquire) {
            return Err(StreamError::Fenced {
                stream_id: state.id,
                epoch: state.epoch,
            });
        }
        Ok(())
    }

    fn submit(
        &self,
        expected: Option<u64>,
        count: u32,
        payload: Bytes,
        permit: AppendPermit,
    ) -> Result<PendingAppend> {
        let mut permit = Some(permit);
        let mut payload = Some(payload);
        let mut mismatch = None;
        let pending = self.submit_with(&mut permit, &mut |next| {
            if let Some(expected) = expected.filter(|expected| *expected != next) {
                mismatch = Some((expected, next));
                return Build::Nothing;
            }
            payload
                .take()
                .map_or(Build::Nothing, |payload| Build::Append {
                    count,
                    payload,
                    crc: None,
                })
        })?;
        match (pending, mismatch) {
            (Some(pending), _) => Ok(pending),
            (None, Some((expected, next))) => Err(StreamError::OffsetMismatch {
                stream_id: self.state.id,
                expected,
                next,
            }),
            // The builder runs once, so it always had the payload.
            (None, None) => Err(StreamError::Closed {
                stream_id: self.state.id,
            }),
        }
    }

    /// Appends what `build` decides, given the next offset, with room reserved by
    /// [`Stream::reserve`] (taken from `permit` only if something is appended); does not wait.
    ///
    /// `build` runs under the stream's sequencing lock, so a caller that assigns offsets, stamps
    /// them into the batch and keeps its own state about them (the tablet's writer windows) needs no
    /// lock of its own around the submission: nothing can be appended between `build` seeing the
    /// next offset and the batch taking it. `build` must be quick and must not call back into this
    /// stream. Returns `None` when `build` decided [`Build::Nothing`]; fails (appending nothing)
    /// when the stream is closed or fenced, when the batch is empty or larger than the permit
    /// ([`StreamError::PermitTooSmall`]), or when the WAL refuses it.
    pub fn submit_with(
        &self,
        permit: &mut Option<AppendPermit>,
        build: &mut dyn FnMut(u64) -> Build,
    ) -> Result<Option<PendingAppend>> {
        self.check_appendable(1)?;
        let state = &self.state;
        let mut sequencer = lock(&state.sequencer);
        if sequencer.closed {
            return Err(StreamError::Closed {
                stream_id: state.id,
            });
        }
        let base_offset = sequencer.next;
        let (count, payload, payload_crc) = match build(base_offset) {
            Build::Nothing => return Ok(None),
            Build::Append {
                count,
                payload,
                crc,
            } => (count, payload, crc),
        };
        if count == 0 {
            return Err(StreamError::EmptyBatch {
                stream_id: state.id,
            });
        }
        let reserved = permit.as_ref().map_or(0, |p| p.len);
        if payload.len() > reserved {
            return Err(StreamError::PermitTooSmall {
                len: payload.len(),
                reserved,
            });
        }
        let mut held = permit.take().and_then(|p| p.permit);
        if let Some(held) = held.as_mut() {
            let need = usize::try_from(units(payload.len() as u64)).unwrap_or(usize::MAX);
            if held.num_permits() > need {
                drop(held.split(held.num_permits() - need));
            }
        }
        let payload_len = payload.len() as u64;
        let end_offset = base_offset + u64::from(count);
        let tail_copy = payload.clone();
        lock(&state.log).push(
            StreamBatch {
                base_offset,
                count,
                payload: payload.clone(),
            },
            payload_crc,
            held,
        );
        let (tx, rx) = oneshot::channel();
        let on_durable = Arc::clone(state);
        let submitted = self.engine.wal.submit(
            WalRecord {
                stream_id: state.id,
                epoch: state.epoch,
                base_offset,
                count,
                payload,
                payload_crc,
            },
            Box::new(move |outcome| {
                let outcome = match outcome {
                    Ok(()) => {
                        on_durable.confirm.send_if_modified(|confirm| {
                            let advanced = end_offset > *confirm;
                            *confirm = (*confirm).max(end_offset);
                            advanced
                        });
                        Ok(())
                    }
                    Err(error) => Err(StreamError::Wal(error)),
                };
                let _ = tx.send((outcome, Instant::now()));
            }),
        );
        if let Err(error) = submitted {
            lock(&state.log).remove_from(base_offset);
            return Err(StreamError::Wal(error));
        }
        sequencer.next = end_offset;
        drop(sequencer);
        // The tail cache is filled by the write path only, outside the sequencing lock (it takes
        // batches in any order); reads are bounded by the confirm offset, so holding a batch
        // before it is durable shows nothing early.
        if let Err(error) =
            self.engine
                .caches
                .tail
                .append(state.id, base_offset, end_offset, tail_copy)
        {
            tracing::debug!(%error, stream_id = state.id, "tail cache refused a batch");
        }
        self.engine.note_append(payload_len);
        Ok(Some(PendingAppend {
            base_offset,
            end_offset,
            ack: rx,
            stages: self.engine.stages.clone(),
        }))
    }

    /// Whole batches from the one holding `from`, up to `to` (exclusive, clipped to the bound),
    /// about `max_bytes` of payload but at least one batch when any is available. An empty
    /// answer means `from` is at the bound.
    pub async fn fetch(
        &self,
        from: u64,
        to: u64,
        max_bytes: usize,
        bound: ReadBound,
    ) -> Result<Vec<StreamBatch>> {
        let state = &self.state;
        let start = state.offsets_start();
        if from < start {
            return Err(StreamError::BelowStart {
                stream_id: state.id,
                offset: from,
                start,
            });
        }
        let limit = match bound {
            ReadBound::Confirmed => state.confirm(),
            ReadBound::NextOffset => state.next(),
        };
        if from > limit {
            return Err(StreamError::BeyondBound {
                stream_id: state.id,
                offset: from,
                bound: limit,
            });
        }
        let to = to.min(limit);
        if from >= to {
            return Ok(Vec::new());
        }
        // A reader keeping up with the writer is served by the tail cache alone.
        if let Some(read) = self.engine.caches.tail.get(state.id, from, max_bytes) {
            let batches: Vec<StreamBatch> = read
                .batches
                .into_iter()
                .take_while(|b| b.base_offset < to && b.end_offset <= limit)
                .map(|b| StreamBatch {
                    base_offset: b.base_offset,
                    count: u32::try_from(b.end_offset - b.base_offset).unwrap_or(u32::MAX),
                    payload: b.bytes,
                })
                .collect();
            if !batches.is_empty() {
                return Ok(batches);
            }
        }
        // Data moves from the log cache to objects under our feet; a miss in the cache means the
        // committed end moved past `from`, so look again.
        for _ in 0..16 {
            let committed_end = state.committed_end.load(Ordering::Acquire);
            if from >= committed_end {
                if let Some(batches) = lock(&state.log).read(from, to, max_bytes) {
                    return Ok(batches);
                }
                continue;
            }
            return self
                .engine
                .read_committed(state, from, to.min(committed_end), max_bytes)
                .await;
        }
        Err(StreamError::Inconsistent {
            stream_id: state.id,
            message: format!("offset {from} is neither in the log cache nor committed"),
        })
    }

    /// What the stream keeps from its start offset: its committed object ranges (from the object
    /// index, no request) and its batches not yet compacted, with their sizes.
    pub fn footprint(&self) -> Footprint {
        let state = &self.state;
        let start = state.offsets_start();
        let confirm = state.confirm();
        let committed_end = state.committed_end.load(Ordering::Acquire);
        let ranges = self
            .engine
            .metadata
            .index()
            .covering(state.id, start, usize::MAX);
        let committed = ranges
            .iter()
            .map(|c| (c.range.start_offset, c.range.end_offset, c.range.len))
            .filter(|(s, _, _)| *s < committed_end);
        let tail = lock(&state.log).extent();
        Footprint {
            start,
            confirm,
            pieces: footprint::pieces(committed, tail),
        }
    }

    /// Waits until the confirm offset passes `offset` (returns the confirm offset), or the
    /// timeout lapses (returns the confirm offset then, which may still be at or below `offset`).
    pub async fn wait_past(&self, offset: u64, timeout: Duration) -> u64 {
        let mut confirm = self.watch_confirm();
        let deadline = Instant::now() + timeout;
        let wait = confirm.wait_for(|c| *c > offset);
        match tokio::time::timeout_at(deadline.into(), wait).await {
            Ok(Ok(value)) => *value,
            _ => self.state.confirm(),
        }
    }

    /// Moves the start offset forward to `offset` (not beyond the confirm offset). Objects wholly
    /// below it become garbage.
    pub async fn trim(&self, offset: u64) -> Result<()> {
        let state = &self.state;
        let confirm = state.confirm();
        if offset > confirm {
            return Err(StreamError::TrimBeyondConfirm {
                stream_id: state.id,
                offset,
                confirm,
            });
        }
        if offset > state.committed_end.load(Ordering::Acquire) {
            // Acknowledged records may sit in WAL objects past the durable point (another
            // stream's PUT still in flight before them): wait for it to pass them first.
            self.engine.wal.settle().await;
            compaction::compact(&self.engine).await?;
        }
        let record = self
            .engine
            .metadata
            .trim_stream(state.id, state.epoch, offset)
            .await?;
        state.set_start(record.start_offset);
        self.engine.caches.tail.trim(state.id, record.start_offset);
        Ok(())
    }

    /// Closes the stream so another node can open it: refuses new appends, waits for the ones
    /// in flight, commits everything into objects and marks the stream closed in the metadata.
    pub async fn close(&self) -> Result<()> {
        let (state, engine) = (&self.state, &self.engine);
        let next = state.close_appends();
        self.drain(next).await?;
        // A round commits every stream's durable data, so when many streams close together (a
        // node's shutdown, a drain) the first round leaves the others nothing to wait for. The
        // stream's last records may sit past the durable point (another stream's PUT still in
        // flight before them): compaction takes them once it has passed them.
        if state.committed_end.load(Ordering::Acquire) < next {
            engine.wal.settle().await;
            compaction::compact(engine).await?;
        }
        engine.metadata.close_stream(state.id, state.epoch).await?;
        engine.forget(state.id);
        engine.caches.tail.remove_stream(state.id);
        Ok(())
    }

    /// Deletes the stream: refuses new appends and removes it from the metadata. Its objects
    /// become garbage.
    pub async fn destroy(&self) -> Result<()> {
        let (state, engine) = (&self.state, &self.engine);
        state.close_appends();
        engine.metadata.delete_stream(state.id, state.epoch).await?;
        if let Err(e) = super::manifests::delete(engine, state.id).await {
            // A manifest of a deleted stream is skipped by a rebuild.
            tracing::warn!(stream = state.id, error = %e, "could not delete the stream's manifest");
        }
        engine.forget(state.id);
        lock(&state.log).remove_below(u64::MAX);
        engine.caches.tail.remove_stream(state.id);
        Ok(())
    }

    /// Waits until every append accepted before `next` is durable (or the WAL failed).
    ///
    /// Every offset below `next` was taken by a record the WAL accepted, so the confirm offset
    /// reaches `next` unless the writer fails. This waits for this stream's records only: under
    /// load from other streams the WAL is never idle, and a close must not wait for it to be.
    async fn drain(&self, next: u64) -> Result<()> {
        let mut confirm = self.watch_confirm();
        let writer = &self.engine.wal;
        tokio::select! {
            biased;
            reached = confirm.wait_for(|c| *c >= next) => match reached {
                Ok(_) => Ok(()),
                // The sender lives in the stream's state, which `self` holds.
                Err(_) => Err(StreamError::Closed { stream_id: self.state.id }),
            },
            cause = writer.failed() => Err(StreamError::Wal(WalError::Failed { cause })),
        }
    }
}
