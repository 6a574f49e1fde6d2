//! The part of an append that runs under the stream's sequencing lock: the request's batches are
//! judged against the writer windows, given offsets and a commit timestamp, stamped and recorded.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use mink_s3stream::stream::{AppendPermit, Build, PendingAppend};

use super::parse::Parsed;
use super::types::{AppendResult, AppendedBatch};
use super::{Tablet, lock};
use crate::error::{Result, TabletError};
use crate::writers::{Ack, AckCell, AckState, Entry, Verdict};

/// What the locked part of an append decided.
pub(super) enum Sequenced {
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
