//! The writer snapshot: the windows as they stand at an offset, saved so that opening a tablet
//! replays only the log after it.
//!
//! # Format (version 2)
//!
//! Stored as the opaque bytes of a [`mink_metadata::WriterSnapshot`] (which adds the offset it was taken
//! at) under `mink/writers/{table}/{partition}/{bucket}`. Little-endian.
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 4 | magic `MKWW` (0x4D 0x4B 0x57 0x57) |
//! | 4 | 1 | format version, 2 |
//! | 5 | 4 | CRC32C of every byte from offset 9 to the end, u32 |
//! | 9 | 8 | newest commit timestamp in the log below the snapshot offset, i64 ms (`i64::MIN` if none) |
//! | 17 | 4 | writer count `n`, u32 |
//! | 21 | ... | `n` writers: writer id i64 (8), epoch i16 (2, 0..=32767), mode u8 (1: 0 the sequence counts batches, 1 records), entry count `k` u8 (1..=5), then `k` entries oldest first |
//!
//! Entry (24 bytes): sequence i32 (4), base offset u64 (8), offset delta i32 (4, record count - 1),
//! commit timestamp i64 (8).
//!
//! Version 1 is the same without a writer's epoch and mode; it reads as epoch 0, counting batches,
//! which is what every writer of a version-1 snapshot was (docs/writer-identity.md).

use std::collections::VecDeque;

use super::WriterState;
use super::window::{Entry, WINDOW, Window, Windows};

const MAGIC: [u8; 4] = *b"MKWW";
const VERSION: u8 = 2;
const ENTRY: usize = 24;
/// Bytes before the first writer: magic, version, CRC, timestamp, writer count.
pub const HEADER_BYTES: usize = 21;

/// The most one writer takes in a snapshot: its id (8), epoch (2), mode (1), entry count (1)
/// and five entries of 24 bytes: 132.
pub const MAX_BYTES_PER_WRITER: usize = 8 + 2 + 1 + 1 + WINDOW * ENTRY;

/// The metadata store's limit on one request: etcd's default `--max-request-bytes`, 1.5 MiB.
pub const METADATA_REQUEST_LIMIT: usize = 1_572_864;

/// Room kept in that request for what is not the snapshot: the metadata value's own framing (14
/// bytes) and the snapshot offset (8), the key, and the transaction's compare and gRPC framing,
/// with margin: 64 KiB.
pub const METADATA_RESERVED: usize = 64 << 10;

/// The most writers a tablet may track so that a full snapshot fits one metadata request:
/// (1 572 864 - 65 536 - 21) / 132 = 11 418. The default `max_writers`, 10 000, takes at most
/// 21 + 10 000 x 132 = 1 320 021 bytes, 84 % of the limit.
pub const MAX_WRITERS: u64 =
    ((METADATA_REQUEST_LIMIT - METADATA_RESERVED - HEADER_BYTES) / MAX_BYTES_PER_WRITER) as u64;

/// Encodes the windows as they stand at offset `at`: only entries wholly below it.
pub(crate) fn encode(windows: &Windows, at: u64, last_timestamp: i64) -> Vec<u8> {
    let mut body = Vec::with_capacity(8 + 4 + windows.len() * MAX_BYTES_PER_WRITER);
    body.extend_from_slice(&last_timestamp.to_le_bytes());
    body.extend_from_slice(&[0; 4]);
    let mut count: u32 = 0;
    let mut writers: Vec<(i64, &Window)> = windows.iter().collect();
    writers.sort_by_key(|(writer_id, _)| *writer_id);
    for (writer_id, window) in writers {
        let entries: Vec<&Entry> = window
            .entries
            .iter()
            .take_while(|e| !e.failed() && e.end_offset() <= at)
            .collect();
        let Some(newest) = entries.last() else {
            continue;
        };
        count += 1;
        body.extend_from_slice(&writer_id.to_le_bytes());
        body.extend_from_slice(&window.epoch.to_le_bytes());
        body.push(u8::from(newest.records));
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
pub(crate) fn decode(raw: &[u8]) -> Result<(Windows, i64), String> {
    let mut r = Reader { raw, pos: 0 };
    if r.take(4)? != MAGIC {
        return Err("bad magic, not a writer snapshot".to_owned());
    }
    let version = r.u8()?;
    if version != VERSION && version != 1 {
        return Err(format!(
            "format version {version} is not 1 or {VERSION}; written by a newer Mink?"
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
        let (epoch, records) = if version == 1 {
            (0, false)
        } else {
            let epoch = i16::from_le_bytes(r.array()?);
            let mode = r.u8()?;
            if epoch < 0 || mode > 1 {
                return Err(format!(
                    "writer {writer_id} has epoch {epoch} and mode {mode}, expected 0..=32767 and 0 or 1"
                ));
            }
            (epoch, mode == 1)
        };
        if !(0..=mink_codec::MAX_WRITER_ID).contains(&writer_id) {
            return Err(format!("writer id {writer_id} is out of range"));
        }
        let entries = usize::from(r.u8()?);
        if entries == 0 || entries > WINDOW {
            return Err(format!(
                "writer {writer_id} has {entries} entries, expected 1..=5"
            ));
        }
        let mut window = VecDeque::with_capacity(entries);
        for _ in 0..entries {
            let entry = Entry {
                sequence: i32::from_le_bytes(r.array()?),
                base_offset: u64::from_le_bytes(r.array()?),
                offset_delta: i32::from_le_bytes(r.array()?),
                timestamp: i64::from_le_bytes(r.array()?),
                records,
                ack: None,
            };
            // The windows add the delta to the offset: a stored entry must not overflow it.
            let fits = u64::try_from(entry.offset_delta)
                .ok()
                .and_then(|delta| entry.base_offset.checked_add(delta)?.checked_add(1));
            if fits.is_none() {
                return Err(format!(
                    "writer {writer_id} has an entry at offset {} with offset delta {}",
                    entry.base_offset, entry.offset_delta
                ));
            }
            window.push_back(entry);
        }
        if !windows.insert(
            writer_id,
            Window {
                epoch,
                entries: window,
            },
        ) {
            return Err(format!("writer {writer_id} appears twice"));
        }
    }
    if r.pos != raw.len() {
        return Err(format!("{} trailing bytes", raw.len() - r.pos));
    }
    Ok((windows, last_timestamp))
}

/// Decodes a snapshot into the public view of its windows (every entry counted durable) and its
/// newest commit timestamp. The tablet keeps the windows themselves; this entry point lets the
/// fuzz targets reach the decoder and what the tablet derives from its entries.
#[doc(hidden)]
pub fn decode_states(raw: &[u8]) -> Result<(Vec<WriterState>, i64), String> {
    let (windows, last_timestamp) = decode(raw)?;
    Ok((windows.states(u64::MAX), last_timestamp))
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

    /// Found by the `writer_snapshot` fuzz target: an entry at the top of the offset range (its
    /// CRC right) overflowed the end offset the windows compute from it.
    #[test]
    fn entries_past_the_largest_offset_are_errors() {
        let mut w = Windows::default();
        w.record(3, 0, Entry::one_row(0, 10, 5), false);
        let good = encode(&w, u64::MAX, 5);
        assert!(decode(&good).is_ok());
        // The entry of the only writer: sequence, base offset, delta, timestamp.
        let at = 9 + 8 + 4 + 8 + 2 + 1 + 1;
        for (base_offset, delta) in [(u64::MAX, 0i32), (u64::MAX - 5, 9), (10, -1)] {
            let mut bad = good.clone();
            bad[at + 4..at + 12].copy_from_slice(&base_offset.to_le_bytes());
            bad[at + 12..at + 16].copy_from_slice(&delta.to_le_bytes());
            let crc = crc32c::crc32c(&bad[9..]);
            bad[5..9].copy_from_slice(&crc.to_le_bytes());
            assert!(decode(&bad).is_err(), "offset {base_offset} delta {delta}");
        }
    }

    #[test]
    fn a_full_snapshot_of_the_most_writers_fits_a_metadata_request() {
        // The largest snapshot: every writer with five entries (fields are fixed-width).
        let max_writers = crate::TabletSettings::default().max_writers;
        assert!(max_writers <= MAX_WRITERS);
        let mut w = Windows::default();
        for writer in 0..MAX_WRITERS as i64 {
            for seq in 0..WINDOW as i32 {
                let mut entry = Entry::one_row(i32::MAX - seq, 1 << 62, i64::MAX);
                entry.offset_delta = i32::MAX - 1;
                w.record(mink_codec::MAX_WRITER_ID - writer, i16::MAX, entry, false);
            }
        }
        let raw = encode(&w, u64::MAX, i64::MAX);
        assert_eq!(
            raw.len(),
            HEADER_BYTES + MAX_WRITERS as usize * MAX_BYTES_PER_WRITER
        );
        let value = mink_metadata::value::encode(&mink_metadata::WriterSnapshot {
            offset: u64::MAX,
            data: raw.into(),
        });
        assert!(
            value.len() + METADATA_RESERVED <= METADATA_REQUEST_LIMIT,
            "{} bytes",
            value.len()
        );
        let default = HEADER_BYTES + max_writers as usize * MAX_BYTES_PER_WRITER;
        assert!(
            default * 100 / METADATA_REQUEST_LIMIT <= 85,
            "{default} bytes"
        );
    }

    #[test]
    fn snapshots_round_trip_and_corruption_is_an_error() {
        let mut w = Windows::default();
        for seq in 0..8 {
            w.record(1, 0, Entry::one_row(seq, seq as u64 * 2, 10), false);
        }
        w.record(2, 0, Entry::one_row(i32::MAX, 100, 20), true);
        let mut counting = Entry::one_row(40, 200, 30);
        counting.records = true;
        counting.offset_delta = 9;
        w.record(3, 17, counting, true);
        let raw = encode(&w, u64::MAX, 20);
        let (back, ts) = decode(&raw).unwrap();
        assert_eq!(ts, 20);
        assert_eq!(back.states(u64::MAX), w.states(u64::MAX));
        for i in 0..raw.len() {
            let mut bad = raw.clone();
            bad[i] ^= 1;
            assert!(decode(&bad).is_err(), "byte {i}");
        }
        for len in 0..raw.len() {
            assert!(decode(&raw[..len]).is_err());
        }
        let states = back.states(u64::MAX);
        assert_eq!(
            (
                states[2].epoch,
                states[2].counts_records,
                states[2].next_sequence()
            ),
            (17, true, Some(50))
        );
        // Entries at or above the snapshot offset are left out.
        let raw = encode(&w, 7, 20);
        let (back, _) = decode(&raw).unwrap();
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

    /// A version-1 snapshot (no epoch or mode per writer) still reads: epoch 0, counting batches.
    #[test]
    fn version_1_snapshots_read_as_epoch_0_counting_batches() {
        let mut body = Vec::new();
        body.extend_from_slice(&20i64.to_le_bytes());
        body.extend_from_slice(&1u32.to_le_bytes());
        body.extend_from_slice(&9i64.to_le_bytes());
        body.push(2);
        for (seq, offset) in [(4i32, 10u64), (5, 11)] {
            body.extend_from_slice(&seq.to_le_bytes());
            body.extend_from_slice(&offset.to_le_bytes());
            body.extend_from_slice(&0i32.to_le_bytes());
            body.extend_from_slice(&20i64.to_le_bytes());
        }
        let mut raw = MAGIC.to_vec();
        raw.push(1);
        raw.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        raw.extend_from_slice(&body);
        let (windows, ts) = decode(&raw).unwrap();
        assert_eq!(ts, 20);
        let states = windows.states(u64::MAX);
        assert_eq!(states.len(), 1);
        assert_eq!(
            (
                states[0].writer_id,
                states[0].epoch,
                states[0].counts_records
            ),
            (9, 0, false)
        );
        assert_eq!(states[0].next_sequence(), Some(6));
        for len in 0..raw.len() {
            assert!(decode(&raw[..len]).is_err());
        }
    }
}
