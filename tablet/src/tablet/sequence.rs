//! The part of an append that runs under the stream's sequencing lock: the request's batches are
//! judged against the writer windows, given offsets and a commit timestamp, stamped and recorded.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use mink_codec::header::CRC_START;
use mink_s3stream::format::crc::combine;
use mink_s3stream::format::object::COMBINE_FROM;
use mink_s3stream::{AppendPermit, Build, PendingAppend};

use super::parse::Parsed;
use super::types::{AppendResult, AppendedBatch};
use super::{Sequencing, Tablet, lock};
use crate::error::{Result, TabletError};
use crate::settings::TabletSettings;
use crate::writers::{Ack, AckCell, AckState, Batches, Entry, Refusal, Verdict, Windows};

/// What the locked part of an append decided.
pub(super) enum Sequenced {
    /// Some batches retry batches still in flight: wait for those, then classify again.
    WaitFor(Vec<Ack>),
    /// Every batch is a duplicate; nothing was appended.
    AllDuplicates(AppendResult),
    /// The new batches were submitted to the stream.
    Submitted(Submitted),
}

/// What the builder of an append decided under the stream's lock (the batch it hands the stream
/// goes beside it, in a [`Build`]).
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

/// An append handed to the stream, with what its caller needs once it is durable.
pub(super) struct Submitted {
    pub(super) pending: PendingAppend,
    pub(super) ack: Option<Ack>,
    pub(super) result: Vec<AppendedBatch>,
    pub(super) next: u64,
    pub(super) snapshot_due: bool,
}

impl Tablet {
    /// Submits an append: the batches are classified, stamped and recorded by a builder the stream
    /// runs under its own sequencing lock, given the next offset ([`LogStream::submit_with`]), so
    /// offsets, writer windows and the stream advance together with no lock of the tablet's around
    /// the submission. Never awaits.
    pub(super) fn sequence(
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
            let (outcome, build) = match self.decide(parsed, bytes, next, confirm) {
                Ok((decided, build)) => (Ok(decided), build),
                Err(error) => (Err(error), Build::Nothing),
            };
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
    /// offset `base`: classifies the batches against the writer windows, assigns offsets and the
    /// commit timestamp, stamps them into the batches (taking `bytes`) and records the new ones in
    /// the windows. The [`Build`] it returns is what the stream appends: nothing unless some batch
    /// is new.
    fn decide(
        &self,
        parsed: &[Parsed],
        bytes: &mut Option<BytesMut>,
        base: u64,
        confirm: u64,
    ) -> Result<(Decided, Build)> {
        let inner = &*self.inner;
        let mut seq = lock(&inner.sequencing);
        if seq.closed {
            return Err(self.closed_error());
        }
        let now = inner.clock.now_ms();
        let verdicts = classify(
            &mut seq.windows,
            parsed,
            now,
            inner.ttl_ms,
            confirm,
            inner.settings.max_writers,
        )?;
        let pending = in_flight(&verdicts);
        if !pending.is_empty() {
            return Ok((Decided::WaitFor(pending), Build::Nothing));
        }
        let timestamp = now.max(seq.last_timestamp);
        let Assigned {
            batches,
            next,
            count,
        } = assign(parsed, &verdicts, base, timestamp);
        if batches.iter().all(|b| b.duplicate) {
            let result = AppendResult {
                batches,
                high_watermark: confirm,
            };
            return Ok((Decided::AllDuplicates(result), Build::Nothing));
        }
        let bytes = bytes.take().ok_or_else(|| TabletError::Inconsistent {
            tablet: inner.name.clone(),
            message: "an append request was submitted twice".to_owned(),
        })?;
        let payload = stamp(bytes, parsed, &batches, inner.epoch)?;
        let crc = payload_crc(&payload, parsed, &batches);
        let ack = record(&mut seq.windows, parsed, &verdicts, &batches, timestamp);
        seq.last_timestamp = timestamp;
        let snapshot_due = snapshot_due(&mut seq, now, &inner.settings);
        let decided = Decided::Append {
            ack,
            result: batches,
            next,
            snapshot_due,
        };
        Ok((
            decided,
            Build::Append {
                count,
                payload,
                crc,
            },
        ))
    }
}

/// Judges each batch of the request against its writer's window (see [`Windows::classify`]).
fn classify(
    windows: &mut Windows,
    parsed: &[Parsed],
    now: i64,
    ttl_ms: i64,
    confirm: u64,
    max_writers: u64,
) -> Result<Batches<Verdict>> {
    windows
        .classify(
            parsed.iter().map(Parsed::claim),
            now,
            ttl_ms,
            confirm,
            usize::try_from(max_writers).unwrap_or(usize::MAX),
        )
        .map_err(|refusal| match refusal {
            Refusal::OutOfOrder {
                index,
                writer_id,
                expected,
                received,
            } => TabletError::OutOfOrderSequence {
                index,
                writer_id,
                expected,
                received,
            },
            Refusal::StaleEpoch {
                index,
                writer_id,
                epoch,
                current,
            } => TabletError::StaleWriterEpoch {
                index,
                writer_id,
                epoch,
                current,
            },
            Refusal::TooManyWriters {
                index,
                writer_id,
                limit,
            } => TabletError::TooManyWriters {
                index,
                writer_id,
                limit: limit as u64,
            },
        })
}

/// The acknowledgements of the duplicates whose first append is still in flight.
fn in_flight(verdicts: &[Verdict]) -> Vec<Ack> {
    verdicts
        .iter()
        .filter_map(|v| match v {
            Verdict::Duplicate(Entry { ack: Some(ack), .. })
                if ack.state() == AckState::Pending =>
            {
                Some(ack.clone())
            }
            _ => None,
        })
        .collect()
}

/// The outcome of every batch of a request, before anything is written.
struct Assigned {
    /// Per batch, in request order: duplicates with their first offsets, new batches with
    /// consecutive offsets from the next offset.
    batches: Vec<AppendedBatch>,
    /// The offset after the new batches.
    next: u64,
    /// The rows of the new batches.
    count: u32,
}

/// Gives the new batches consecutive offsets from `base` and the commit timestamp `timestamp`;
/// duplicates keep what they got the first time.
fn assign(parsed: &[Parsed], verdicts: &[Verdict], base: u64, timestamp: i64) -> Assigned {
    let mut batches = Vec::with_capacity(parsed.len());
    let mut next = base;
    let mut count: u32 = 0;
    for (p, v) in parsed.iter().zip(verdicts) {
        match v {
            Verdict::Duplicate(e) => batches.push(AppendedBatch {
                base_offset: e.base_offset,
                record_count: u32::try_from(e.offset_delta).unwrap_or(0) + 1,
                commit_timestamp: e.timestamp,
                duplicate: true,
            }),
            _ => {
                batches.push(AppendedBatch {
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
    Assigned {
        batches,
        next,
        count,
    }
}

/// Writes the assigned offsets, timestamp and `epoch` into the new batches (outside the CRC) and
/// returns them back to back: the request itself, stamped in place, when none is a duplicate.
fn stamp(
    mut bytes: BytesMut,
    parsed: &[Parsed],
    batches: &[AppendedBatch],
    epoch: i32,
) -> Result<Bytes> {
    if !batches.iter().any(|b| b.duplicate) {
        parsed
            .iter()
            .zip(batches)
            .try_for_each(|(p, r)| stamp_batch(&mut bytes[p.range.clone()], r, epoch))
            .map(|()| bytes.freeze())
    } else {
        let mut out = Vec::with_capacity(bytes.len());
        parsed
            .iter()
            .zip(batches)
            .filter(|(_, r)| !r.duplicate)
            .try_for_each(|(p, r)| {
                let start = out.len();
                out.extend_from_slice(&bytes[p.range.clone()]);
                stamp_batch(&mut out[start..], r, epoch)
            })
            .map(|()| Bytes::from(out))
    }
}

/// The CRC32C of a stamped payload of large batches (see [`Build::Append`]), from the CRC each
/// batch's header holds, which `parse` checked over the bytes it covers and stamping leaves
/// alone: only each batch's stamped prefix is read, so this costs a few combines under the
/// sequencing lock. `None` when a kept batch is below [`COMBINE_FROM`] (the WAL hashes the
/// payload as before), or when the payload is not exactly the kept batches one after another.
fn payload_crc(payload: &[u8], parsed: &[Parsed], batches: &[AppendedBatch]) -> Option<u32> {
    let mut crc = 0;
    let mut at = 0;
    for (p, _) in parsed.iter().zip(batches).filter(|(_, r)| !r.duplicate) {
        let len = p.range.len();
        if len < COMBINE_FROM {
            return None;
        }
        let (prefix, covered) = payload.get(at..at + len)?.split_at_checked(CRC_START)?;
        crc = combine(
            crc32c::crc32c_append(crc, prefix),
            p.crc,
            covered.len() as u64,
        );
        at += len;
    }
    (at == payload.len()).then_some(crc)
}

/// Adds the new idempotent batches to their writers' windows, all with one acknowledgement (the
/// request is one stream batch); `None` when the request has no idempotent batch.
fn record(
    windows: &mut Windows,
    parsed: &[Parsed],
    verdicts: &[Verdict],
    batches: &[AppendedBatch],
    timestamp: i64,
) -> Option<Ack> {
    let idempotent = verdicts.iter().any(|v| matches!(v, Verdict::New { .. }));
    let ack: Option<Ack> = idempotent.then(AckCell::pending);
    for ((p, v), r) in parsed.iter().zip(verdicts).zip(batches) {
        if let Verdict::New { restart } = v {
            windows.record(
                p.writer_id,
                p.epoch,
                Entry {
                    sequence: p.sequence,
                    base_offset: r.base_offset,
                    offset_delta: i32::try_from(p.record_count - 1).unwrap_or(i32::MAX),
                    timestamp,
                    records: p.counts_records,
                    ack: ack.clone(),
                },
                *restart,
            );
        }
    }
    ack
}

/// Counts an append towards the next periodic snapshot: whether one is due (after
/// `snapshot_every_appends` appends or `snapshot_interval`), in which case both restart.
fn snapshot_due(seq: &mut Sequencing, now: i64, settings: &TabletSettings) -> bool {
    seq.appends_since_snapshot += 1;
    let due = seq.appends_since_snapshot >= settings.snapshot_every_appends
        || now.saturating_sub(seq.last_snapshot_ms)
            >= i64::try_from(settings.snapshot_interval.as_millis()).unwrap_or(i64::MAX);
    if due {
        seq.appends_since_snapshot = 0;
        seq.last_snapshot_ms = now;
    }
    due
}

/// Writes base offset, commit timestamp and leader epoch into one batch.
fn stamp_batch(batch: &mut [u8], r: &AppendedBatch, epoch: i32) -> Result<()> {
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
