//! The windows themselves: the last five batches of every writer and the sequence rules of
//! [`super`] that judge a request's batches against them.

use std::collections::{HashMap, VecDeque};

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

/// The request was rejected at batch `index`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutOfOrder {
    pub(crate) index: usize,
    pub(crate) writer_id: i64,
    pub(crate) expected: i32,
    pub(crate) received: i32,
}

impl OutOfOrder {
    /// `Ok` if batch `index` carries the `expected` sequence, its rejection otherwise.
    fn check(index: usize, writer_id: i64, expected: i32, received: i32) -> Result<(), OutOfOrder> {
        if received == expected {
            Ok(())
        } else {
            Err(OutOfOrder {
                index,
                writer_id,
                expected,
                received,
            })
        }
    }
}

/// The windows of every writer of one tablet.
#[derive(Debug, Default)]
pub(crate) struct Windows {
    writers: HashMap<i64, VecDeque<Entry>>,
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
    /// sequence within the request.
    pub(crate) fn classify(
        &mut self,
        batches: impl ExactSizeIterator<Item = (i64, i32)>,
        now: i64,
        ttl_ms: i64,
        confirm: u64,
    ) -> Result<Batches<Verdict>, OutOfOrder> {
        let mut planned: HashMap<i64, i32> = HashMap::new();
        let total = batches.len();
        let mut out = Batches::with_capacity(total);
        for (index, (writer_id, sequence)) in batches.enumerate() {
            if writer_id < 0 {
                out.push(Verdict::Plain);
                continue;
            }
            if let Some(last) = planned.get_mut(&writer_id) {
                OutOfOrder::check(index, writer_id, next_sequence(*last), sequence)?;
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
                        OutOfOrder::check(index, writer_id, expected, sequence)?;
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

    /// Forgets writers idle past the TTL.
    pub(crate) fn expire(&mut self, now: i64, ttl_ms: i64) {
        self.writers.retain(|_, window| {
            window
                .back()
                .is_some_and(|last| now.saturating_sub(last.timestamp) <= ttl_ms)
        });
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

    fn one(w: &mut Windows, writer: i64, seq: i32, now: i64) -> Result<Verdict, OutOfOrder> {
        w.classify([(writer, seq)].into_iter(), now, TTL, u64::MAX)
            .map(|mut v| v.remove(0))
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
        let err = one(&mut w, 7, 44, 0).unwrap_err();
        assert_eq!((err.expected, err.received), (50, 44));
        assert_eq!(one(&mut w, 7, 52, 0).unwrap_err().expected, 50);
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
