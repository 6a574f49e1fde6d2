//! Idempotent-writer windows: the last five batches of every writer, the sequence rules, and the
//! snapshot format the windows are saved in.
//!
//! # Rules (spec, "Idempotent writers")
//!
//! | Case | Result |
//! |---|---|
//! | sequence is last + 1, or wraps from `i32::MAX` to 0 | appended |
//! | sequence matches one of the retained five | duplicate: the first offsets are returned |
//! | otherwise | rejected, the error names the expected sequence |
//! | writer unknown, or idle (newest batch older than the TTL) | any sequence accepted, window restarts |
//!
//! Entries are added when a batch is *submitted* (in submission order, under the tablet's sequencing
//! lock), each with the acknowledgement of its append. An entry whose append failed is dropped, with
//! every later entry of the same writer (the WAL acknowledges in order, so those failed too), the next
//! time the writer is looked at; a snapshot only holds entries below the high watermark.
//!
//! # Snapshot format (version 1)
//!
//! Stored as the opaque bytes of a [`mink_metadata::WriterSnapshot`] (which adds the offset it was taken
//! at) under `mink/writers/{table}/{partition}/{bucket}`. Little-endian.
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 4 | magic `MKWW` (0x4D 0x4B 0x57 0x57) |
//! | 4 | 1 | format version, 1 |
//! | 5 | 4 | CRC32C of every byte from offset 9 to the end, u32 |
//! | 9 | 8 | newest commit timestamp in the log below the snapshot offset, i64 ms (`i64::MIN` if none) |
//! | 13 | 4 | writer count `n`, u32 |
//! | 17 | ... | `n` writers: writer id i64 (8), entry count `k` u8 (1..=5), then `k` entries oldest first |
//!
//! Entry (24 bytes): sequence i32 (4), base offset u64 (8), offset delta i32 (4, record count - 1),
//! commit timestamp i64 (8).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use tokio::sync::Notify;

/// Batches retained per writer.
pub const WINDOW: usize = 5;

const MAGIC: [u8; 4] = *b"MKWW";
const VERSION: u8 = 1;
const ENTRY: usize = 24;

/// The sequence after `sequence`: wraps from `i32::MAX` to 0.
pub fn next_sequence(sequence: i32) -> i32 {
    if sequence == i32::MAX {
        0
    } else {
        sequence + 1
    }
}

/// Where an append stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AckState {
    /// Submitted, not yet durable.
    Pending,
    /// Durable.
    Durable,
    /// Failed: not in the log.
    Failed,
}

/// The acknowledgement of one append request, shared by the window entries it created.
pub(crate) type Ack = Arc<AckCell>;

/// Where one append request stands, and a way to wait until it is settled. Cheap to create, to
/// settle and to drop when nobody waits (the common case: a retry of an in-flight batch is rare).
#[derive(Debug)]
pub(crate) struct AckCell {
    state: AtomicU8,
    settled: Notify,
}

impl AckCell {
    /// A new, pending acknowledgement.
    pub(crate) fn pending() -> Ack {
        Arc::new(AckCell {
            state: AtomicU8::new(AckState::Pending as u8),
            settled: Notify::new(),
        })
    }

    /// The state now.
    pub(crate) fn state(&self) -> AckState {
        match self.state.load(Ordering::Acquire) {
            s if s == AckState::Durable as u8 => AckState::Durable,
            s if s == AckState::Failed as u8 => AckState::Failed,
            _ => AckState::Pending,
        }
    }

    /// Records the outcome and wakes every waiter.
    pub(crate) fn settle(&self, state: AckState) {
        self.state.store(state as u8, Ordering::Release);
        self.settled.notify_waiters();
    }

    /// Waits until the outcome is known.
    pub(crate) async fn wait_settled(&self) {
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            // Registered before the state is read, so a settle in between is not missed.
            notified.as_mut().enable();
            if self.state() != AckState::Pending {
                return;
            }
            notified.await;
        }
    }
}

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
    fn end_offset(&self) -> u64 {
        self.base_offset + u64::try_from(self.offset_delta).unwrap_or(0) + 1
    }

    fn failed(&self) -> bool {
        self.ack
            .as_ref()
            .is_some_and(|a| a.state() == AckState::Failed)
    }

    fn public(&self, high_watermark: u64) -> WriterBatch {
        WriterBatch {
            sequence: self.sequence,
            base_offset: self.base_offset,
            record_count: u32::try_from(self.offset_delta).unwrap_or(0) + 1,
            commit_timestamp: self.timestamp,
            durable: self.end_offset() <= high_watermark,
        }
    }
}

/// A retained batch, as [`Tablet::writers`](crate::Tablet::writers) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterBatch {
    /// The batch's sequence.
    pub sequence: i32,
    /// Its first offset.
    pub base_offset: u64,
    /// Its rows.
    pub record_count: u32,
    /// Its commit timestamp.
    pub commit_timestamp: i64,
    /// Whether it is below the high watermark.
    pub durable: bool,
}

/// One writer's window, as [`Tablet::writers`](crate::Tablet::writers) reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterState {
    /// The writer id.
    pub writer_id: i64,
    /// Its retained batches, oldest first (at most five).
    pub batches: Vec<WriterBatch>,
}

impl WriterState {
    /// The sequence the writer must send next.
    pub fn next_sequence(&self) -> Option<i32> {
        self.batches.last().map(|b| next_sequence(b.sequence))
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
    ) -> Result<crate::tablet::Batches<Verdict>, OutOfOrder> {
        let mut planned: HashMap<i64, i32> = HashMap::new();
        let total = batches.len();
        let mut out = crate::tablet::Batches::with_capacity(total);
        for (index, (writer_id, sequence)) in batches.enumerate() {
            if writer_id < 0 {
                out.push(Verdict::Plain);
                continue;
            }
            if let Some(last) = planned.get_mut(&writer_id) {
                let expected = next_sequence(*last);
                if sequence != expected {
                    return Err(OutOfOrder {
                        index,
                        writer_id,
                        expected,
                        received: sequence,
                    });
                }
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
                        if sequence != expected {
                            return Err(OutOfOrder {
                                index,
                                writer_id,
                                expected,
                                received: sequence,
                            });
                        }
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

    /// The public view of every writer (entries of failed appends left out), sorted by writer id.
    pub(crate) fn states(&self, high_watermark: u64) -> Vec<WriterState> {
        let mut out: Vec<WriterState> = self
            .writers
            .iter()
            .map(|(writer_id, window)| WriterState {
                writer_id: *writer_id,
                batches: window
                    .iter()
                    .take_while(|e| !e.failed())
                    .map(|e| e.public(high_watermark))
                    .collect(),
            })
            .filter(|w| !w.batches.is_empty())
            .collect();
        out.sort_by_key(|w| w.writer_id);
        out
    }

    /// Encodes the windows as they stand at offset `at`: only entries wholly below it.
    pub(crate) fn encode_snapshot(&self, at: u64, last_timestamp: i64) -> Vec<u8> {
        let mut body = Vec::with_capacity(8 + 4 + self.writers.len() * (9 + WINDOW * ENTRY));
        body.extend_from_slice(&last_timestamp.to_le_bytes());
        body.extend_from_slice(&[0; 4]);
        let mut count: u32 = 0;
        let mut ids: Vec<&i64> = self.writers.keys().collect();
        ids.sort();
        for writer_id in ids {
            let Some(window) = self.writers.get(writer_id) else {
                continue;
            };
            let entries: Vec<&Entry> = window
                .iter()
                .take_while(|e| !e.failed() && e.end_offset() <= at)
                .collect();
            if entries.is_empty() {
                continue;
            }
            count += 1;
            body.extend_from_slice(&writer_id.to_le_bytes());
            body.push(u8::try_from(entries.len()).unwrap_or(u8::MAX));
            for e in entries {
                body.extend_from_slice(&e.sequence.to_le_bytes());
                body.extend_from_slice(&e.base_offset.to_le_bytes());
                body.extend_from_slice(&e.offset_delta.to_le_bytes());
                body.extend_from_slice(&e.timestamp.to_le_bytes());
            }
        }
        body[8..12].copy_from_slice(&count.to_le_bytes());
        let mut out = Vec::with_capacity(9 + body.len());
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Decodes a snapshot into windows and the newest commit timestamp; never panics.
    pub(crate) fn decode_snapshot(raw: &[u8]) -> Result<(Windows, i64), String> {
        let mut r = Reader { raw, pos: 0 };
        if r.take(4)? != MAGIC {
            return Err("bad magic, not a writer snapshot".to_owned());
        }
        let version = r.u8()?;
        if version != VERSION {
            return Err(format!(
                "format version {version} is not {VERSION}; written by a newer Mink?"
            ));
        }
        let crc = u32::from_le_bytes(r.array()?);
        let actual = crc32c::crc32c(raw.get(9..).unwrap_or_default());
        if crc != actual {
            return Err(format!(
                "CRC32C is {actual:08x}, the snapshot says {crc:08x}"
            ));
        }
        debug_assert_eq!(r.pos, 9);
        let last_timestamp = i64::from_le_bytes(r.array()?);
        let count = u32::from_le_bytes(r.array()?);
        let mut windows = Windows::default();
        for _ in 0..count {
            let writer_id = i64::from_le_bytes(r.array()?);
            let entries = usize::from(r.u8()?);
            if entries == 0 || entries > WINDOW {
                return Err(format!(
                    "writer {writer_id} has {entries} entries, expected 1..=5"
                ));
            }
            let mut window = VecDeque::with_capacity(entries);
            for _ in 0..entries {
                window.push_back(Entry {
                    sequence: i32::from_le_bytes(r.array()?),
                    base_offset: u64::from_le_bytes(r.array()?),
                    offset_delta: i32::from_le_bytes(r.array()?),
                    timestamp: i64::from_le_bytes(r.array()?),
                    ack: None,
                });
            }
            if windows.writers.insert(writer_id, window).is_some() {
                return Err(format!("writer {writer_id} appears twice"));
            }
        }
        if r.pos != raw.len() {
            return Err(format!("{} trailing bytes", raw.len() - r.pos));
        }
        Ok((windows, last_timestamp))
    }
}

struct Reader<'a> {
    raw: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let got = self
            .raw
            .get(self.pos..self.pos.saturating_add(n))
            .ok_or_else(|| format!("truncated at byte {} (needs {n} more)", self.pos))?;
        self.pos += n;
        Ok(got)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?.first().copied().unwrap_or(0))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let bytes = self.take(N)?;
        <[u8; N]>::try_from(bytes).map_err(|_| "internal length error".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: i64 = 1000;

    fn entry(sequence: i32, base_offset: u64, timestamp: i64) -> Entry {
        Entry {
            sequence,
            base_offset,
            offset_delta: 0,
            timestamp,
            ack: None,
        }
    }

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
            w.record(7, entry(seq, i as u64, 0), false);
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
    fn snapshots_round_trip_and_corruption_is_an_error() {
        let mut w = Windows::default();
        for seq in 0..8 {
            w.record(1, entry(seq, seq as u64 * 2, 10), false);
        }
        w.record(2, entry(i32::MAX, 100, 20), true);
        let raw = w.encode_snapshot(u64::MAX, 20);
        let (back, ts) = Windows::decode_snapshot(&raw).unwrap();
        assert_eq!(ts, 20);
        assert_eq!(back.states(u64::MAX), w.states(u64::MAX));
        for i in 0..raw.len() {
            let mut bad = raw.clone();
            bad[i] ^= 1;
            assert!(Windows::decode_snapshot(&bad).is_err(), "byte {i}");
        }
        for len in 0..raw.len() {
            assert!(Windows::decode_snapshot(&raw[..len]).is_err());
        }
        // Entries at or above the snapshot offset are left out.
        let raw = w.encode_snapshot(7, 20);
        let (back, _) = Windows::decode_snapshot(&raw).unwrap();
        let states = back.states(u64::MAX);
        assert_eq!(states.len(), 1);
        assert_eq!(
            states[0]
                .batches
                .iter()
                .map(|b| b.sequence)
                .collect::<Vec<_>>(),
            vec![3]
        );
    }

    #[test]
    fn replay_restarts_windows_where_the_log_did() {
        let mut w = Windows::default();
        w.replay(1, entry(5, 0, 0), TTL);
        w.replay(1, entry(6, 1, 0), TTL);
        w.replay(1, entry(0, 2, 0), TTL);
        let states = w.states(u64::MAX);
        assert_eq!(states[0].batches.len(), 1);
        assert_eq!(states[0].next_sequence(), Some(1));
    }
}
