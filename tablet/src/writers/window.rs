//! The windows themselves: the last five batches of every writer and the sequence rules of
//! [`super`] that judge a request's batches against them.

use std::collections::{HashMap, HashSet, VecDeque};

use super::ack::{Ack, AckState};

/// Batches retained per writer.
pub const WINDOW: usize = 5;

/// The sequence after `sequence`: wraps from `i32::MAX` to 0.
pub fn next_sequence(sequence: i32) -> i32 {
    if sequence == i32::MAX {
        0
    } else {
        sequence + 1
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
    /// `None` once known durable (replayed, or below the high watermark when last looked at).
    pub(crate) ack: Option<Ack>,
}

impl Entry {
    pub(super) fn end_offset(&self) -> u64 {
        self.base_offset + u64::try_from(self.offset_delta).unwrap_or(0) + 1
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
            ack: None,
        }
    }
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
    /// The batch is from a writer the tablet does not know, and it tracks `limit` writers already.
    TooManyWriters {
        index: usize,
        writer_id: i64,
        limit: usize,
    },
}

impl Refusal {
    /// `Ok` if batch `index` carries the `expected` sequence, its rejection otherwise.
    fn check(index: usize, writer_id: i64, expected: i32, received: i32) -> Result<(), Refusal> {
        if received == expected {
            Ok(())
        } else {
            Err(Refusal::OutOfOrder {
                index,
                writer_id,
                expected,
                received,
            })
        }
    }
}

/// The windows of every writer of one tablet.
#[derive(Debug)]
pub(crate) struct Windows {
    writers: HashMap<i64, VecDeque<Entry>>,
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
    fn live(
        &mut self,
        writer_id: i64,
        now: i64,
        ttl_ms: i64,
        confirm: u64,
    ) -> Option<&VecDeque<Entry>> {
        let window = self.writers.get_mut(&writer_id)?;
        if let Some(failed) = window.iter().position(Entry::failed) {
            window.truncate(failed);
        }
        for entry in window.iter_mut() {
            if entry.ack.is_some() && entry.end_offset() <= confirm {
                entry.ack = None;
            }
        }
        let last = window.back()?;
        if now.saturating_sub(last.timestamp) > ttl_ms {
            return None;
        }
        Some(window)
    }

    /// Classifies the batches of one request, given as `(writer_id, sequence)` with `writer_id < 0`
    /// for batches without a writer. A writer appearing several times must continue its own
    /// sequence within the request. A writer with no window is refused while `max_writers`
    /// writers have one (counting those the request itself adds), unless idle ones can be
    /// forgotten to make room: known writers are never evicted, so their deduplication stays
    /// exact.
    pub(crate) fn classify(
        &mut self,
        batches: impl ExactSizeIterator<Item = (i64, i32)> + Clone,
        now: i64,
        ttl_ms: i64,
        confirm: u64,
        max_writers: usize,
    ) -> Result<Batches<Verdict>, Refusal> {
        self.make_room(batches.clone(), now, ttl_ms, max_writers)?;
        let mut planned: HashMap<i64, i32> = HashMap::new();
        let total = batches.len();
        let mut out = Batches::with_capacity(total);
        for (index, (writer_id, sequence)) in batches.enumerate() {
            if writer_id < 0 {
                out.push(Verdict::Plain);
                continue;
            }
            if let Some(last) = planned.get_mut(&writer_id) {
                Refusal::check(index, writer_id, next_sequence(*last), sequence)?;
                *last = sequence;
                out.push(Verdict::New { restart: false });
                continue;
            }
            let verdict = match self.live(writer_id, now, ttl_ms, confirm) {
                None => Verdict::New { restart: true },
                Some(window) => {
                    if let Some(entry) = window.iter().find(|e| e.sequence == sequence) {
                        Verdict::Duplicate(entry.clone())
                    } else {
                        let expected = window
                            .back()
                            .map_or(sequence, |last| next_sequence(last.sequence));
                        Refusal::check(index, writer_id, expected, sequence)?;
                        Verdict::New { restart: false }
                    }
                }
            };
            // Only a later batch of the same request looks the plan up (none after the last).
            if matches!(verdict, Verdict::New { .. }) && index + 1 < total {
                planned.insert(writer_id, sequence);
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
        batches: impl Iterator<Item = (i64, i32)> + Clone,
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
        batches: impl Iterator<Item = (i64, i32)>,
        max_writers: usize,
    ) -> Option<(usize, i64)> {
        let mut new: HashSet<i64> = HashSet::new();
        batches
            .enumerate()
            .filter(|(_, (writer_id, _))| *writer_id >= 0 && !self.writers.contains_key(writer_id))
            .find(|(_, (writer_id, _))| {
                new.insert(*writer_id) && self.writers.len() + new.len() > max_writers
            })
            .map(|(index, (writer_id, _))| (index, writer_id))
    }

    /// Adds a submitted batch to its writer's window.
    pub(crate) fn record(&mut self, writer_id: i64, entry: Entry, restart: bool) {
        let window = self.writers.entry(writer_id).or_default();
        if restart {
            window.clear();
        }
        window.push_back(entry);
        while window.len() > WINDOW {
            window.pop_front();
        }
    }

    /// Adds a batch read back from the log at open. The log is the truth: a sequence that does not
    /// continue the window (or comes after the TTL) means the window restarted there.
    pub(crate) fn replay(&mut self, writer_id: i64, entry: Entry, ttl_ms: i64) {
        let restart = self
            .writers
            .get(&writer_id)
            .and_then(|w| w.back())
            .is_none_or(|last| {
                entry.sequence != next_sequence(last.sequence)
                    || entry.timestamp.saturating_sub(last.timestamp) > ttl_ms
            });
        self.record(writer_id, entry, restart);
    }

    /// Forgets writers idle past the TTL (and windows left empty by failed appends).
    pub(crate) fn expire(&mut self, now: i64, ttl_ms: i64) {
        let mut oldest = i64::MAX;
        self.writers.retain(|_, window| {
            let live = window
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
    pub(super) fn iter(&self) -> impl Iterator<Item = (i64, &VecDeque<Entry>)> {
        self.writers
            .iter()
            .map(|(writer_id, window)| (*writer_id, window))
    }

    /// Adds a decoded window; `false` if the writer already has one.
    pub(super) fn insert(&mut self, writer_id: i64, window: VecDeque<Entry>) -> bool {
        self.writers.insert(writer_id, window).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: i64 = 1000;

    fn one(w: &mut Windows, writer: i64, seq: i32, now: i64) -> Result<Verdict, Refusal> {
        w.classify([(writer, seq)].into_iter(), now, TTL, u64::MAX, usize::MAX)
            .map(|mut v| v.remove(0))
    }

    fn expected(refusal: Refusal) -> (i32, i32) {
        match refusal {
            Refusal::OutOfOrder {
                expected, received, ..
            } => (expected, received),
            other => panic!("{other:?}"),
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
            w.record(7, Entry::one_row(seq, i as u64, 0), false);
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
    fn replay_restarts_windows_where_the_log_did() {
        let mut w = Windows::default();
        w.replay(1, Entry::one_row(5, 0, 0), TTL);
        w.replay(1, Entry::one_row(6, 1, 0), TTL);
        w.replay(1, Entry::one_row(0, 2, 0), TTL);
        let states = w.states(u64::MAX);
        assert_eq!(states[0].batches.len(), 1);
        assert_eq!(states[0].next_sequence(), Some(1));
    }
}
