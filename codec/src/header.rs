//! The 52-byte batch header: field positions, parsing, and the in-place writes the tablet makes on append.
//!
//! The byte table is in the crate documentation. `base_offset`, `length`, `magic`, `commit_timestamp`,
//! `leader_epoch` and `crc` precede the CRC-covered region (which starts at `schema_id`, byte 29), so
//! [`write_base_offset`], [`write_commit_timestamp`] and [`write_leader_epoch`] never invalidate the CRC.

/// The field names errors use, also reachable here where they were first defined.
pub use crate::error::field;
use crate::error::{Error, Result};

/// Size of the header in bytes.
pub const HEADER_LEN: usize = 52;
/// The format version this codec writes and reads, stored in the `magic` byte.
pub const MAGIC: u8 = 1;
/// Bytes before and including the `length` field; a batch is `LENGTH_PREFIX + length` bytes long.
pub const LENGTH_PREFIX: usize = 12;
/// First byte covered by the CRC (the `schema_id` field).
pub const CRC_START: usize = 29;
/// Attribute bit 0: the batch is append-only and has no change-type vector.
pub const ATTR_APPEND_ONLY: u8 = 0b0000_0001;
/// Attribute bit 1: the batch's `batch_sequence` is its first record's and the writer's next
/// batch starts at `batch_sequence + record_count` (mod 2^31), as Kafka counts; without it the
/// sequence counts batches. Allowed only on a batch with a writer.
pub const ATTR_RECORD_SEQUENCE: u8 = 0b0000_0010;
/// `writer_id` and `batch_sequence` value meaning "no idempotent writer".
pub const NO_WRITER_ID: i64 = -1;
/// The `writer_id` field's bits 0-47 are the allocated writer id, 48-62 the writer epoch.
pub const WRITER_EPOCH_SHIFT: u32 = 48;
/// The largest writer id the field can carry beside an epoch: 2^48 - 1.
pub const MAX_WRITER_ID: i64 = (1 << WRITER_EPOCH_SHIFT) - 1;
/// The largest writer epoch: 32767 (Kafka's non-negative i16).
pub const MAX_WRITER_EPOCH: i16 = i16::MAX;

/// Splits a `writer_id` field into the allocated writer id and the writer epoch; `None` for a
/// negative field (no idempotent writer).
pub fn writer_parts(field: i64) -> Option<(i64, i16)> {
    if field < 0 {
        return None;
    }
    let epoch = i16::try_from(field >> WRITER_EPOCH_SHIFT).unwrap_or(MAX_WRITER_EPOCH);
    Some((field & MAX_WRITER_ID, epoch))
}

/// The `writer_id` field of writer `id` (0..=[`MAX_WRITER_ID`]) at `epoch`
/// (0..=[`MAX_WRITER_EPOCH`]); `None` when either is out of its range.
pub fn writer_field(id: i64, epoch: i16) -> Option<i64> {
    ((0..=MAX_WRITER_ID).contains(&id) && epoch >= 0)
        .then(|| (i64::from(epoch) << WRITER_EPOCH_SHIFT) | id)
}
/// `batch_sequence` value meaning "no idempotent writer".
pub const NO_SEQUENCE: i32 = -1;

/// Byte positions of the header fields, relative to the batch start.
pub mod pos {
    /// `base_offset`, i64.
    pub const BASE_OFFSET: usize = 0;
    /// `length`, i32.
    pub const LENGTH: usize = 8;
    /// `magic`, u8.
    pub const MAGIC: usize = 12;
    /// `commit_timestamp`, i64.
    pub const COMMIT_TIMESTAMP: usize = 13;
    /// `leader_epoch`, i32.
    pub const LEADER_EPOCH: usize = 21;
    /// `crc`, u32.
    pub const CRC: usize = 25;
    /// `schema_id`, i16.
    pub const SCHEMA_ID: usize = 29;
    /// `attributes`, u8.
    pub const ATTRIBUTES: usize = 31;
    /// `last_offset_delta`, i32.
    pub const LAST_OFFSET_DELTA: usize = 32;
    /// `writer_id`, i64.
    pub const WRITER_ID: usize = 36;
    /// `batch_sequence`, i32.
    pub const BATCH_SEQUENCE: usize = 44;
    /// `record_count`, i32.
    pub const RECORD_COUNT: usize = 48;
}

/// The decoded header fields of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// Offset of the first row; 0 until the tablet assigns it.
    pub base_offset: i64,
    /// Bytes after the `length` field.
    pub length: i32,
    /// Format version.
    pub magic: u8,
    /// Commit time in milliseconds; 0 until the tablet assigns it.
    pub commit_timestamp: i64,
    /// Bucket leader epoch; 0 until the tablet writes it.
    pub leader_epoch: i32,
    /// CRC32C over bytes 29 to the end of the batch.
    pub crc: u32,
    /// Schema version the rows were encoded with.
    pub schema_id: i16,
    /// Attribute bits ([`ATTR_APPEND_ONLY`], [`ATTR_RECORD_SEQUENCE`]).
    pub attributes: u8,
    /// `record_count - 1`.
    pub last_offset_delta: i32,
    /// Idempotent writer identity (id and epoch, [`writer_parts`]), or [`NO_WRITER_ID`].
    pub writer_id: i64,
    /// Idempotent writer sequence, or [`NO_SEQUENCE`].
    pub batch_sequence: i32,
    /// Rows in the batch.
    pub record_count: i32,
}

fn array<const N: usize>(bytes: &[u8; HEADER_LEN], at: usize) -> [u8; N] {
    bytes
        .get(at..at + N)
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .unwrap_or([0; N])
}

impl Header {
    /// Reads the fields of a 52-byte header. Performs no checks.
    pub fn from_bytes(bytes: &[u8; HEADER_LEN]) -> Self {
        Header {
            base_offset: i64::from_le_bytes(array(bytes, pos::BASE_OFFSET)),
            length: i32::from_le_bytes(array(bytes, pos::LENGTH)),
            magic: u8::from_le_bytes(array(bytes, pos::MAGIC)),
            commit_timestamp: i64::from_le_bytes(array(bytes, pos::COMMIT_TIMESTAMP)),
            leader_epoch: i32::from_le_bytes(array(bytes, pos::LEADER_EPOCH)),
            crc: u32::from_le_bytes(array(bytes, pos::CRC)),
            schema_id: i16::from_le_bytes(array(bytes, pos::SCHEMA_ID)),
            attributes: u8::from_le_bytes(array(bytes, pos::ATTRIBUTES)),
            last_offset_delta: i32::from_le_bytes(array(bytes, pos::LAST_OFFSET_DELTA)),
            writer_id: i64::from_le_bytes(array(bytes, pos::WRITER_ID)),
            batch_sequence: i32::from_le_bytes(array(bytes, pos::BATCH_SEQUENCE)),
            record_count: i32::from_le_bytes(array(bytes, pos::RECORD_COUNT)),
        }
    }

    /// Writes the fields into a 52-byte array (the `crc` field as stored in `self`).
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        put(&mut out, pos::BASE_OFFSET, &self.base_offset.to_le_bytes());
        put(&mut out, pos::LENGTH, &self.length.to_le_bytes());
        put(&mut out, pos::MAGIC, &[self.magic]);
        put(
            &mut out,
            pos::COMMIT_TIMESTAMP,
            &self.commit_timestamp.to_le_bytes(),
        );
        put(
            &mut out,
            pos::LEADER_EPOCH,
            &self.leader_epoch.to_le_bytes(),
        );
        put(&mut out, pos::CRC, &self.crc.to_le_bytes());
        put(&mut out, pos::SCHEMA_ID, &self.schema_id.to_le_bytes());
        put(&mut out, pos::ATTRIBUTES, &[self.attributes]);
        put(
            &mut out,
            pos::LAST_OFFSET_DELTA,
            &self.last_offset_delta.to_le_bytes(),
        );
        put(&mut out, pos::WRITER_ID, &self.writer_id.to_le_bytes());
        put(
            &mut out,
            pos::BATCH_SEQUENCE,
            &self.batch_sequence.to_le_bytes(),
        );
        put(
            &mut out,
            pos::RECORD_COUNT,
            &self.record_count.to_le_bytes(),
        );
        out
    }

    /// Whether attribute bit 0 (append-only, no change-type vector) is set.
    pub fn is_append_only(&self) -> bool {
        self.attributes & ATTR_APPEND_ONLY != 0
    }

    /// Whether attribute bit 1 (the sequence counts records) is set.
    pub fn counts_records(&self) -> bool {
        self.attributes & ATTR_RECORD_SEQUENCE != 0
    }

    /// Total size of the batch in bytes, `12 + length` (0 if `length` is negative).
    pub fn batch_len(&self) -> usize {
        usize::try_from(self.length).map_or(0, |l| l + LENGTH_PREFIX)
    }

    /// The offset after this batch: `base_offset + record_count`.
    pub fn next_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.record_count))
    }
}

/// Copies `value` into `buf` at `at`; returns false (and writes nothing) if it does not fit.
pub(crate) fn put(buf: &mut [u8], at: usize, value: &[u8]) -> bool {
    match buf.get_mut(at..at + value.len()) {
        Some(dst) => {
            dst.copy_from_slice(value);
            true
        }
        None => false,
    }
}

fn write_field(batch: &mut [u8], at: usize, value: &[u8]) -> Result<()> {
    if batch.len() < HEADER_LEN || !put(batch, at, value) {
        return Err(Error::Truncated {
            field: field::HEADER,
            position: 0,
            needed: HEADER_LEN,
            available: batch.len(),
        });
    }
    Ok(())
}

/// Writes `base_offset` into the header of the batch starting at `batch[0]`. The CRC stays valid.
pub fn write_base_offset(batch: &mut [u8], base_offset: i64) -> Result<()> {
    write_field(batch, pos::BASE_OFFSET, &base_offset.to_le_bytes())
}

/// Writes `commit_timestamp` (milliseconds) into the header of the batch starting at `batch[0]`.
/// The CRC stays valid.
pub fn write_commit_timestamp(batch: &mut [u8], commit_timestamp: i64) -> Result<()> {
    write_field(
        batch,
        pos::COMMIT_TIMESTAMP,
        &commit_timestamp.to_le_bytes(),
    )
}

/// Writes `leader_epoch` into the header of the batch starting at `batch[0]`. The CRC stays valid.
pub fn write_leader_epoch(batch: &mut [u8], leader_epoch: i32) -> Result<()> {
    write_field(batch, pos::LEADER_EPOCH, &leader_epoch.to_le_bytes())
}

/// Writes the three fields the tablet assigns on append, in one call. The CRC stays valid.
pub fn write_append_fields(
    batch: &mut [u8],
    base_offset: i64,
    commit_timestamp: i64,
    leader_epoch: i32,
) -> Result<()> {
    write_base_offset(batch, base_offset)?;
    write_commit_timestamp(batch, commit_timestamp)?;
    write_leader_epoch(batch, leader_epoch)
}

/// Computes the CRC32C of a batch's covered region (byte 29 to the end) and stores it in the `crc` field.
/// Used by writers after building or rewriting a batch.
pub(crate) fn seal_crc(batch: &mut [u8]) {
    let crc = crc32c::crc32c(batch.get(CRC_START..).unwrap_or(&[]));
    put(batch, pos::CRC, &crc.to_le_bytes());
}
