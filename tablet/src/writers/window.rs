//! The windows themselves: the last five batches of every writer and the sequence rules of
//! [`super`] that judge a request's batches against them.

use std::collections::{HashMap, HashSet, VecDeque};

use super::ack::{Ack, AckState};

/// Batches retained per writer.
pub const WINDOW: usize = 5;

/// The sequence after `sequence`: wraps from `i32::MAX` to 0.
pub fn next_sequence(sequence: i32) -> i32 {
    add_sequence(sequence, 1)
}

/// `sequence + count` modulo 2^31: the sequence after a record-counting batch of `count` rows
/// (Kafka's rule; `count` 1 is [`next_sequence`]).
pub fn add_sequence(sequence: i32, count: u32) -> i32 {
    let sum = (i64::from(sequence.max(0)) + i64::from(count)) % (1i64 << 31);
    i32::try_from(sum).unwrap_or(0)
}

/// What one batch of a request claims about its writer: `writer` is the allocated id (bits 0-47
/// of the header's field), negative for a batch without a writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    pub(crate) writer: i64,
    pub(crate) epoch: i16,
    pub(crate) sequence: i32,
    pub(crate) rows: u32,
    /// The sequence counts records (attribute bit 1).
    pub(crate) records: bool,
}

impl Claim {
    /// The sequence the writer's next batch must carry after this one.
    fn next(&self) -> i32 {
        if self.records {
            add_sequence(self.sequence, self.rows)
        } else {
            next_sequence(self.sequence)
        }
    }
}

/// Per-batch state of one request, inline for the common request of one or two batches.
pub(crate) type Batches<T> = smallvec::SmallVec<[T; 2]>;

/// One retained batch of a writer.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) sequence: i32,
    pub(crate) base_offset: u64,
    pub(crate) offset_delta: i32,
    pub(crate) timestamp: i64,
    /// Its sequence counts records.
    pub(crate) records: bool,
    /// `None` once known durable (replayed, or below the high watermark when last looked at).
    pub(crate) ack: Option<Ack>,
}

impl Entry {
    pub(super) fn end_offset(&self) -> u64 {
        self.base_offset + u64::try_from(self.offset_delta).unwrap_or(0) + 1
    }

    pub(super) fn rows(&self) -> u32 {
        u32::try_from(self.offset_delta).unwrap_or(0) + 1
    }

    /// The sequence the writer's next batch must carry after this one, by this batch's rule.
    pub(super) fn next(&self) -> i32 {
        if self.records {
            add_sequence(self.sequence, self.rows())
        } else {
            next_sequence(self.sequence)
        }
    }

    pub(super) fn failed(&self) -> bool {
        self.ack
            .as_ref()
            .is_some_and(|a| a.state() == AckState::Failed)
    }
}

#[cfg(test)]
impl Entry {
    /// A durable one-row entry.
    pub(super) fn one_row(sequence: i32, base_offset: u64, timestamp: i64) -> Entry {
        Entry {
            sequence,
            base_offset,
            offset_delta: 0,
            timestamp,
            records: false,
            ack: None,
        }
    }
}

/// One writer's window: its epoch and its retained batches, oldest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct Window {
    pub(crate) epoch: i16,
    pub(crate) entries: VecDeque<Entry>,
}

/// What to do with one batch of a request.
#[derive(Debug, Clone)]
pub(crate) enum Verdict {
    /// Not an idempotent batch.
    Plain,
    /// Append it; `restart` clears the writer's window first.
    New { restart: bool },
    /// Already appended: this entry.
    Duplicate(Entry),
}

/// Why a request was rejected, at batch `index`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Refusal {
    /// The batch is neither the writer's next sequence nor a retained duplicate.
    OutOfOrder {
        index: usize,
        writer_id: i64,
        expected: i32,
        received: i32,
    },
    /// The batch's writer epoch is older than the writer's current one: a fenced incarnation.
    StaleEpoch {
        index: usize,
        writer_id: i64,
        epoch: i16,
        current: i16,
    },
    /// The batch is from a writer the tablet does not know, and it tracks `limit` writers already.
    TooManyWriters {
        index: usize,
        writer_id: i64,
        limit: usize,
    },
}

impl Refusal {
    /// Judges batch `index` against its writer's tip (the epoch and the sequence expected next):
    /// an older epoch is stale, a newer one restarts the window at sequence 0, the same one
    /// must carry the expected sequence. `Ok(restart)` when it may be appended.
    fn judge(index: usize, claim: &Claim, epoch: i16, expected: i32) -> Result<bool, Refusal> {
        let (restart, expected) = match claim.epoch.cmp(&epoch) {
            std::cmp::Ordering::Less => {
                return Err(Refusal::StaleEpoch {
                    index,
                    writer_id: claim.writer,
                    epoch: claim.epoch,
                    current: epoch,
                });
            }
            std::cmp::Ordering::Greater => (true, 0),
            std::cmp::Ordering::Equal => (false, expected),
        };
        if claim.sequence == expected {
            Ok(restart)
        } else {
            Err(Refusal::OutOfOrder {
                index,
                writer_id: claim.writer,
                expected,
                received: claim.sequence,
            })
        }
    }
}

/// The windows of every writer of one tablet.
#[derive(Debug)]
pub(crate) struct Windows {
    writers: HashMap<i64, Window>,
    /// No writer can be idle past the TTL before this time (ms): the oldest newest-entry time
    /// at the last [`Windows::expire`], plus the TTL. Entries only get newer, so a new writer
    /// at the cap is refused without a scan until then. (An entry dropped because its append
    /// failed can make a window older; that only delays freeing its place.)
    no_expiry_before: i64,
}

impl Default for Windows {
    fn default() -> Self {
        Windows {
            writers: HashMap::new(),
            no_expiry_before: i64::MIN,
        }
    }
}

impl Windows {
    /// Drops failed entries (and all later ones of the writer) and forgets acks of entries below
    /// `confirm`; returns the live window of `writer_id`, `None` if unknown or idle past `ttl_ms`.
    fn live(&mut self, writer_id: i64, now: i64, ttl_ms: i64, confirm: u64) -> Option<&Window> {
        let window = self.writers.get_mut(&writer_id)?;
        let entries = &mut window.entries;
        if let Some(failed) = entries.iter().position(Entry::failed) {
            entries.truncate(failed);
        }
        for entry in entries.iter_mut() {
            if entry.ack.is_some() && entry.end_offset() <= confirm {
                entry.ack = None;
            }
        }
        let last = entries.back()?;
        if now.saturating_sub(last.timestamp) > ttl_ms {
            return None;
        }
        Some(window)
    }

    /// Classifies the batches of one request (their [`Claim`]s, `writer < 0` for batches without
    /// a writer). A writer appearing several times must continue its own sequence within the
    /// request. A writer with no window is refused while `max_writers` writers have one
    /// (counting those the request itself adds), unless idle ones can be forgotten to make room:
    /// known writers are never evicted, so their deduplication stays exact.
    pub(crate) fn classify(
        &mut self,
        claims: impl ExactSizeIterator<Item = Claim> + Clone,
        now: i64,
        ttl_ms: i64,
        confirm: u64,
        max_writers: usize,
    ) -> Result<Batches<Verdict>, Refusal> {
        self.make_room(claims.clone().map(|c| c.writer), now, ttl_ms, max_writers)?;
        // The tip each writer's earlier batches in this request leave: (epoch, next sequence).
        let mut planned: HashMap<i64, (i16, i32)> = HashMap::new();
        let total = claims.len();
        let mut out = Batches::with_capacity(total);
        for (index, claim) in claims.enumerate() {
            if claim.writer < 0 {
                out.push(Verdict::Plain);
                continue;
            }
            let verdict = if let Some(&(epoch, expected)) = planned.get(&claim.writer) {
                let restart = Refusal::judge(index, &claim, epoch, expected)?;
                Verdict::New { restart }
            } else {
                match self.live(claim.writer, now, ttl_ms, confirm) {
                    None => Verdict::New { restart: true },
                    Some(window) => {
                        let duplicate = (claim.epoch == window.epoch)
                            .then(|| {
                                window.entries.iter().find(|e| {
                                    e.sequence == claim.sequence
                                        && (!claim.records || e.rows() == claim.rows)
                                })
                            })
                            .flatten();
                        if let Some(entry) = duplicate {
                            Verdict::Duplicate(entry.clone())
                        } else {
                            let expected =
                                window.entries.back().map_or(claim.sequence, Entry::next);
                            let restart = Refusal::judge(index, &claim, window.epoch, expected)?;
                            Verdict::New { restart }
                        }
                    }
                }
            };
            // Only a later batch of the same request looks the plan up (none after the last).
            if matches!(verdict, Verdict::New { .. }) && index + 1 < total {
                planned.insert(claim.writer, (claim.epoch, claim.next()));
            }
            out.push(verdict);
        }
        Ok(out)
    }

    /// Checks that the writers of a request with no window yet fit beside the ones that have
    /// one. If they do not, idle writers are forgotten (when any can be idle by now) and the
    /// request is judged again: a writer of the request forgotten that way counts as new.
    fn make_room(
        &mut self,
        batches: impl Iterator<Item = i64> + Clone,
        now: i64,
        ttl_ms: i64,
        max_writers: usize,
    ) -> Result<(), Refusal> {
        let mut over = self.first_over(batches.clone(), max_writers);
        if over.is_some() && now >= self.no_expiry_before {
            self.expire(now, ttl_ms);
            over = self.first_over(batches, max_writers);
        }
        match over {
            None => Ok(()),
            Some((index, writer_id)) => Err(Refusal::TooManyWriters {
                index,
                writer_id,
                limit: max_writers,
            }),
        }
    }

    /// The first batch whose writer, new to the windows, would take them past `max_writers`.
    fn first_over(
        &self,
        batches: impl Iterator<Item = i64>,
        max_writers: usize,
    ) -> Option<(usize, i64)> {
        let mut new: HashSet<i64> = HashSet::new();
        batches
            .enumerate()
            .filter(|(_, writer_id)| *writer_id >= 0 && !self.writers.contains_key(writer_id))
            .find(|(_, writer_id)| {
                new.insert(*writer_id) && self.writers.len() + new.len() > max_writers
            })
    }

    /// Adds a submitted batch of writer `writer_id` at `epoch` to its window.
    pub(crate) fn record(&mut self, writer_id: i64, epoch: i16, entry: Entry, restart: bool) {
        let window = self.writers.entry(writer_id).or_default();
        if restart {
            window.entries.clear();
        }
        window.epoch = epoch;
        window.entries.push_back(entry);
        while window.entries.len() > WINDOW {
            window.entries.pop_front();
        }
    }

    /// Adds a batch read back from the log at open. The log is the truth: another epoch, or a
    /// sequence that does not continue the window (or comes after the TTL), means the window
    /// restarted there.
    pub(crate) fn replay(&mut self, writer_id: i64, epoch: i16, entry: Entry, ttl_ms: i64) {
        let restart = self.writers.get(&writer_id).is_none_or(|w| {
            w.epoch != epoch
                || w.entries.back().is_none_or(|last| {
                    entry.sequence != last.next()
                        || entry.timestamp.saturating_sub(last.timestamp) > ttl_ms
                })
        });
        self.record(writer_id, epoch, entry, restart);
    }

    /// Forgets writers idle past the TTL (and windows left empty by failed appends).
    pub(crate) fn expire(&mut self, now: i64, ttl_ms: i64) {
        let mut oldest = i64::MAX;
        self.writers.retain(|_, window| {
            let live = window
                .entries
                .back()
                .filter(|last| now.saturating_sub(last.timestamp) <= ttl_ms);
            if let Some(last) = live {
                oldest = oldest.min(last.timestamp);
            }
            live.is_some()
        });
        self.no_expiry_before = oldest.saturating_add(ttl_ms).saturating_add(1);
    }

    /// The number of writers with a window.
    pub(super) fn len(&self) -> usize {
        self.writers.len()
    }

    /// Every writer's window, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (i64, &Window)> {
        self.writers
            .iter()
            .map(|(writer_id, window)| (*writer_id, window))
    }

    /// Adds a decoded window; `false` if the writer already has one.
    pub(super) fn insert(&mut self, writer_id: i64, window: Window) -> bool {
        self.writers.insert(writer_id, window).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: i64 = 1000;

    fn claim(writer: i64, epoch: i16, sequence: i32, rows: u32, records: bool) -> Claim {
        Claim {
            writer,
            epoch,
            sequence,
            rows,
            records,
        }
    }

    fn judge(w: &mut Windows, claims: &[Claim], now: i64) -> Result<Batches<Verdict>, Refusal> {
        w.classify(claims.iter().copied(), now, TTL, u64::MAX, usize::MAX)
    }

    fn one(w: &mut Windows, writer: i64, seq: i32, now: i64) -> Result<Verdict, Refusal> {
        judge(w, &[claim(writer, 0, seq, 1, false)], now).map(|mut v| v.remove(0))
    }

    fn expected(refusal: Refusal) -> (i32, i32) {
        match refusal {
            Refusal::OutOfOrder {
                expected, received, ..
            } => (expected, received),
            other => panic!("{other:?}"),
        }
    }

    /// A durable entry of `rows` rows.
    fn entry(sequence: i32, base_offset: u64, rows: u32, records: bool) -> Entry {
        Entry {
            offset_delta: i32::try_from(rows).unwrap() - 1,
            records,
            ..Entry::one_row(sequence, base_offset, 0)
        }
    }

    #[test]
    fn sequences_follow_the_spec_table() {
        let mut w = Windows::default();
        assert!(matches!(
            one(&mut w, 7, 42, 0),
            Ok(Verdict::New { restart: true })
        ));
        for (i, seq) in (42..50).enumerate() {
            w.record(7, 0, Entry::one_row(seq, i as u64, 0), false);
        }
        assert!(matches!(
            one(&mut w, 7, 50, 0),
            Ok(Verdict::New { restart: false })
        ));
        // The last five are duplicates with their offsets; older ones are out of order.
        for seq in 45..50 {
            match one(&mut w, 7, seq, 0) {
                Ok(Verdict::Duplicate(e)) => assert_eq!(e.base_offset, (seq - 42) as u64),
                other => panic!("{seq}: {other:?}"),
            }
        }
        assert_eq!(expected(one(&mut w, 7, 44, 0).unwrap_err()), (50, 44));
        assert_eq!(expected(one(&mut w, 7, 52, 0).unwrap_err()), (50, 52));
        assert!(matches!(
            one(&mut w, 8, 3, 0),
            Ok(Verdict::New { restart: true })
        ));
    }

    #[test]
    fn record_counting_sequences_advance_by_rows_and_wrap_at_i32_max() {
        assert_eq!(add_sequence(10, 5), 15);
        assert_eq!(add_sequence(i32::MAX, 1), 0);
        assert_eq!(add_sequence(i32::MAX - 2, 5), 2);
        assert_eq!(next_sequence(i32::MAX), 0);
        let mut w = Windows::default();
        w.record(3, 0, entry(0, 0, 10, true), true);
        w.record(3, 0, entry(10, 10, 4, true), false);
        // The next batch starts at 14: 11 (batch counting) is out of order.
        let v = judge(&mut w, &[claim(3, 0, 14, 2, true)], 0).unwrap();
        assert!(matches!(v[0], Verdict::New { restart: false }));
        let refused = judge(&mut w, &[claim(3, 0, 11, 2, true)], 0).unwrap_err();
        assert_eq!(expected(refused), (14, 11));
        // A retry is a duplicate only with the same first sequence and row count.
        let v = judge(&mut w, &[claim(3, 0, 10, 4, true)], 0).unwrap();
        assert!(matches!(&v[0], Verdict::Duplicate(e) if e.base_offset == 10));
        assert!(judge(&mut w, &[claim(3, 0, 10, 3, true)], 0).is_err());
        // Within one request the batches continue each other by rows.
        let v = judge(
            &mut w,
            &[
                claim(3, 0, 14, 2, true),
                claim(3, 0, 16, 7, true),
                claim(3, 0, 23, 1, true),
            ],
            0,
        )
        .unwrap();
        assert!(
            v.iter()
                .all(|v| matches!(v, Verdict::New { restart: false }))
        );
        let refused = judge(
            &mut w,
            &[claim(3, 0, 14, 2, true), claim(3, 0, 15, 1, true)],
            0,
        );
        assert_eq!(expected(refused.unwrap_err()), (16, 15));
    }

    #[test]
    fn epochs_fence_older_incarnations_and_restart_the_window() {
        let mut w = Windows::default();
        w.record(5, 2, entry(7, 0, 1, false), true);
        // An older epoch is stale, even for a sequence the window holds.
        for seq in [7, 8, 0] {
            match judge(&mut w, &[claim(5, 1, seq, 1, false)], 0) {
                Err(Refusal::StaleEpoch {
                    writer_id: 5,
                    epoch: 1,
                    current: 2,
                    ..
                }) => {}
                other => panic!("{seq}: {other:?}"),
            }
        }
        // A newer epoch restarts at sequence 0 and only there.
        let refused = judge(&mut w, &[claim(5, 3, 8, 1, false)], 0).unwrap_err();
        assert_eq!(expected(refused), (0, 8));
        let v = judge(&mut w, &[claim(5, 3, 0, 1, false)], 0).unwrap();
        assert!(matches!(v[0], Verdict::New { restart: true }));
        w.record(5, 3, entry(0, 1, 1, false), true);
        assert!(matches!(
            judge(&mut w, &[claim(5, 2, 8, 1, false)], 0),
            Err(Refusal::StaleEpoch { current: 3, .. })
        ));
        assert!(matches!(
            judge(&mut w, &[claim(5, 3, 0, 1, false)], 0).unwrap()[0],
            Verdict::Duplicate(_)
        ));
        // Within one request: a bump continues from 0, and an older epoch after it is stale.
        let v = judge(
            &mut w,
            &[claim(5, 3, 1, 1, false), claim(5, 4, 0, 1, false)],
            0,
        )
        .unwrap();
        assert!(matches!(v[1], Verdict::New { restart: true }));
        assert!(matches!(
            judge(
                &mut w,
                &[claim(5, 4, 0, 1, false), claim(5, 3, 1, 1, false)],
                0
            ),
            Err(Refusal::StaleEpoch { index: 1, .. })
        ));
        // An idle writer starts afresh at any epoch and sequence.
        let v = judge(&mut w, &[claim(5, 0, 99, 1, false)], TTL + 1).unwrap();
        assert!(matches!(v[0], Verdict::New { restart: true }));
    }

    #[test]
    fn replay_restarts_windows_where_the_log_did() {
        let mut w = Windows::default();
        w.replay(1, 0, Entry::one_row(5, 0, 0), TTL);
        w.replay(1, 0, Entry::one_row(6, 1, 0), TTL);
        w.replay(1, 0, Entry::one_row(0, 2, 0), TTL);
        let states = w.states(u64::MAX);
        assert_eq!(states[0].batches.len(), 1);
        assert_eq!(states[0].next_sequence(), Some(1));
        // A new epoch restarts the window even where the sequence would continue it.
        w.replay(1, 1, Entry::one_row(1, 3, 0), TTL);
        let states = w.states(u64::MAX);
        assert_eq!((states[0].epoch, states[0].batches.len()), (1, 1));
        // Record-counting batches continue by rows.
        w.replay(2, 0, entry(0, 4, 3, true), TTL);
        w.replay(2, 0, entry(3, 7, 2, true), TTL);
        let states = w.states(u64::MAX);
        assert_eq!(states[1].batches.len(), 2);
        assert_eq!(states[1].next_sequence(), Some(5));
    }
}
