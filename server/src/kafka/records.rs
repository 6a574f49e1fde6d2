//! Kafka record batches (magic 2), decoded from a Produce and encoded for a Fetch.
//!
//! Layout (big-endian): base offset i64, batch length i32 (bytes after it), partition leader
//! epoch i32, magic i8, CRC-32C u32 (of everything after it), attributes i16 (bits 0-2
//! compression, bit 3 LogAppendTime, bit 4 transactional, bit 5 control), last offset delta i32,
//! base timestamp i64, max timestamp i64, producer id i64, producer epoch i16, base sequence i32,
//! record count i32, then the records (possibly compressed), each: length varint, attributes i8,
//! timestamp delta varlong, offset delta varint, key, value (varint length, -1 null), header
//! count varint and headers (key, value). Nothing is reserved by a declared count, and what a
//! compressed batch inflates to is bounded by the caller's budget.

use std::io::Read;

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Bytes of a batch before its records.
pub(crate) const BATCH_HEADER_BYTES: usize = 61;
/// Offset of the CRC's first covered byte (the attributes).
const CRC_COVERED_FROM: usize = 21;

/// Why a batch did not decode: Kafka's CORRUPT_MESSAGE, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct CorruptBatch(pub(crate) String);

fn corrupt(message: impl Into<String>) -> CorruptBatch {
    CorruptBatch(message.into())
}

/// One record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// Its timestamp, ms (CreateTime, or the batch's LogAppendTime).
    pub(crate) timestamp: i64,
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    /// In order, duplicates kept.
    pub(crate) headers: Vec<(String, Option<Bytes>)>,
}

/// One decoded batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Batch {
    pub(crate) producer_id: i64,
    pub(crate) producer_epoch: i16,
    pub(crate) base_sequence: i32,
    pub(crate) transactional: bool,
    pub(crate) control: bool,
    pub(crate) records: Vec<Record>,
}

/// Decodes the batches of one partition's `records` of a Produce. `budget` is what the
/// compressed ones may inflate to, in all; it shrinks by what they took.
pub(crate) fn decode_batches(
    mut bytes: Bytes,
    budget: &mut usize,
) -> Result<Vec<Batch>, CorruptBatch> {
    let mut batches = Vec::new();
    while bytes.has_remaining() {
        if bytes.len() < 12 {
            return Err(corrupt("the records end inside a batch header"));
        }
        let length = i32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
        let total = usize::try_from(length)
            .ok()
            .and_then(|l| l.checked_add(12))
            .filter(|t| *t >= BATCH_HEADER_BYTES)
            .ok_or_else(|| corrupt(format!("a batch declares the length {length}")))?;
        if total > bytes.len() {
            return Err(corrupt(format!(
                "a batch declares {total} bytes but {} are left",
                bytes.len()
            )));
        }
        let batch = bytes.split_to(total);
        batches.push(decode_batch(batch, budget)?);
    }
    Ok(batches)
}

fn decode_batch(batch: Bytes, budget: &mut usize) -> Result<Batch, CorruptBatch> {
    let magic = batch[16] as i8;
    if magic != 2 {
        return Err(corrupt(format!(
            "message format {magic} is not served: only record batches (magic 2)"
        )));
    }
    let stated = u32::from_be_bytes(batch[17..21].try_into().expect("4 bytes"));
    let actual = crc32c::crc32c(&batch[CRC_COVERED_FROM..]);
    if stated != actual {
        return Err(corrupt(format!(
            "the batch's CRC is {stated:#010x} but its bytes give {actual:#010x}"
        )));
    }
    let mut h = batch.slice(CRC_COVERED_FROM..BATCH_HEADER_BYTES);
    let attributes = h.get_i16();
    let _last_offset_delta = h.get_i32();
    let base_timestamp = h.get_i64();
    let max_timestamp = h.get_i64();
    let producer_id = h.get_i64();
    let producer_epoch = h.get_i16();
    let base_sequence = h.get_i32();
    let count = h.get_i32();
    let count =
        usize::try_from(count).map_err(|_| corrupt(format!("a batch declares {count} records")))?;
    let log_append_time = attributes & 0x08 != 0;
    let body = batch.slice(BATCH_HEADER_BYTES..);
    let body = match attributes & 0x07 {
        0 => body,
        codec => inflate(codec, &body, budget)?,
    };
    // A record is at least 7 bytes: a count above that is a lie, refused before reserving.
    if count > body.len() / 7 + 1 {
        return Err(corrupt(format!(
            "a batch declares {count} records in {} bytes",
            body.len()
        )));
    }
    let mut reader = body;
    let mut records = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let mut record = decode_record(&mut reader, base_timestamp)?;
        if log_append_time {
            record.timestamp = max_timestamp;
        }
        records.push(record);
    }
    if reader.has_remaining() {
        return Err(corrupt(format!(
            "{} bytes follow the batch's {count} records",
            reader.remaining()
        )));
    }
    Ok(Batch {
        producer_id,
        producer_epoch,
        base_sequence,
        transactional: attributes & 0x10 != 0,
        control: attributes & 0x20 != 0,
        records,
    })
}

fn decode_record(body: &mut Bytes, base_timestamp: i64) -> Result<Record, CorruptBatch> {
    let length = varlong(body)?;
    let length = usize::try_from(length)
        .ok()
        .filter(|l| *l <= body.remaining())
        .ok_or_else(|| corrupt(format!("a record declares the length {length}")))?;
    let mut r = body.split_to(length);
    if !r.has_remaining() {
        return Err(corrupt("an empty record"));
    }
    let _attributes = r.get_i8();
    let timestamp = base_timestamp.wrapping_add(varlong(&mut r)?);
    let _offset_delta = varlong(&mut r)?;
    let key = nullable(&mut r)?;
    let value = nullable(&mut r)?;
    let count = varlong(&mut r)?;
    let count = usize::try_from(count)
        .ok()
        .filter(|c| *c <= r.remaining())
        .ok_or_else(|| corrupt(format!("a record declares {count} headers")))?;
    let mut headers = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let key = nullable(&mut r)?.ok_or_else(|| corrupt("a header has a null key"))?;
        let key =
            String::from_utf8(key.to_vec()).map_err(|_| corrupt("a header key is not UTF-8"))?;
        headers.push((key, nullable(&mut r)?));
    }
    if r.has_remaining() {
        return Err(corrupt("bytes follow a record's headers"));
    }
    Ok(Record {
        timestamp,
        key,
        value,
        headers,
    })
}

/// A zigzag varlong.
fn varlong(buf: &mut Bytes) -> Result<i64, CorruptBatch> {
    let mut raw: u64 = 0;
    for i in 0..10 {
        if !buf.has_remaining() {
            return Err(corrupt("a record ends inside a varint"));
        }
        let byte = buf.get_u8();
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    Err(corrupt("a varint longer than 10 bytes"))
}

fn nullable(buf: &mut Bytes) -> Result<Option<Bytes>, CorruptBatch> {
    let length = varlong(buf)?;
    if length == -1 {
        return Ok(None);
    }
    let length = usize::try_from(length)
        .ok()
        .filter(|l| *l <= buf.remaining())
        .ok_or_else(|| corrupt(format!("a field declares the length {length}")))?;
    Ok(Some(buf.split_to(length)))
}

/// Inflates a compressed records section into at most `budget` bytes.
fn inflate(codec: i16, body: &[u8], budget: &mut usize) -> Result<Bytes, CorruptBatch> {
    let limit = *budget;
    let out = match codec {
        1 => read_bounded(flate2::read::GzDecoder::new(body), limit, "gzip")?,
        2 => snappy(body, limit)?,
        3 => {
            let decoder = lz4::Decoder::new(body).map_err(|e| corrupt(format!("lz4: {e}")))?;
            read_bounded(decoder, limit, "lz4")?
        }
        4 => {
            let decoder = zstd::stream::read::Decoder::new(body)
                .map_err(|e| corrupt(format!("zstd: {e}")))?;
            read_bounded(decoder, limit, "zstd")?
        }
        other => return Err(corrupt(format!("unknown compression codec {other}"))),
    };
    *budget -= out.len();
    Ok(Bytes::from(out))
}

fn too_large(limit: usize) -> CorruptBatch {
    corrupt(format!(
        "the request's compressed batches inflate to more than {limit} bytes (setting `kafka.max_decompressed_bytes`)"
    ))
}

fn read_bounded(reader: impl Read, limit: usize, codec: &str) -> Result<Vec<u8>, CorruptBatch> {
    let mut out = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| corrupt(format!("{codec}: {e}")))?;
    if out.len() > limit {
        return Err(too_large(limit));
    }
    Ok(out)
}

/// Snappy, raw or in the xerial framing the Java client writes.
fn snappy(body: &[u8], limit: usize) -> Result<Vec<u8>, CorruptBatch> {
    const XERIAL: &[u8] = b"\x82SNAPPY\x00";
    let raw = |block: &[u8], left: usize| -> Result<Vec<u8>, CorruptBatch> {
        let len = snap::raw::decompress_len(block).map_err(|e| corrupt(format!("snappy: {e}")))?;
        if len > left {
            return Err(too_large(limit));
        }
        snap::raw::Decoder::new()
            .decompress_vec(block)
            .map_err(|e| corrupt(format!("snappy: {e}")))
    };
    if !body.starts_with(XERIAL) {
        return raw(body, limit);
    }
    if body.len() < 16 {
        return Err(corrupt("snappy: a truncated xerial header"));
    }
    let mut chunks = &body[16..];
    let mut out = Vec::new();
    while !chunks.is_empty() {
        if chunks.len() < 4 {
            return Err(corrupt("snappy: a truncated xerial chunk length"));
        }
        let n = u32::from_be_bytes(chunks[..4].try_into().expect("4 bytes")) as usize;
        chunks = &chunks[4..];
        if n > chunks.len() {
            return Err(corrupt("snappy: a xerial chunk longer than the batch"));
        }
        let block = raw(&chunks[..n], limit - out.len())?;
        out.extend_from_slice(&block);
        chunks = &chunks[n..];
    }
    Ok(out)
}

/// How a fetched batch's records are timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timestamps {
    /// Each record's own (a Kafka table's `timestamp` column).
    CreateTime,
    /// The batch's commit time for every record.
    LogAppendTime(i64),
}

/// Encodes records as one uncompressed batch starting at `base_offset`.
pub(crate) fn encode_batch(
    base_offset: i64,
    records: &[Record],
    timing: Timestamps,
    out: &mut BytesMut,
) {
    let base_timestamp = records.first().map_or(0, |r| r.timestamp);
    let max_timestamp = match timing {
        Timestamps::CreateTime => records.iter().map(|r| r.timestamp).max().unwrap_or(0),
        Timestamps::LogAppendTime(at) => at,
    };
    let start = out.len();
    out.put_i64(base_offset);
    out.put_i32(0); // length, patched below
    out.put_i32(-1); // partition leader epoch
    out.put_i8(2);
    out.put_u32(0); // CRC, patched below
    let attributes: i16 = match timing {
        Timestamps::CreateTime => 0,
        Timestamps::LogAppendTime(_) => 0x08,
    };
    out.put_i16(attributes);
    out.put_i32(records.len().saturating_sub(1) as i32);
    out.put_i64(base_timestamp);
    out.put_i64(max_timestamp);
    out.put_i64(-1); // producer id
    out.put_i16(-1); // producer epoch
    out.put_i32(-1); // base sequence
    out.put_i32(records.len() as i32);
    let mut record = Vec::new();
    for (delta, r) in records.iter().enumerate() {
        record.clear();
        record.push(0); // attributes
        put_varlong(&mut record, r.timestamp.wrapping_sub(base_timestamp));
        put_varlong(&mut record, delta as i64);
        put_nullable(&mut record, r.key.as_deref());
        put_nullable(&mut record, r.value.as_deref());
        put_varlong(&mut record, r.headers.len() as i64);
        for (key, value) in &r.headers {
            put_nullable(&mut record, Some(key.as_bytes()));
            put_nullable(&mut record, value.as_deref());
        }
        let mut length = Vec::with_capacity(5);
        put_varlong(&mut length, record.len() as i64);
        out.put_slice(&length);
        out.put_slice(&record);
    }
    let length = (out.len() - start - 12) as i32;
    out[start + 8..start + 12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&out[start + CRC_COVERED_FROM..]);
    out[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
}

fn put_varlong(out: &mut Vec<u8>, value: i64) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

fn put_nullable(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varlong(out, -1),
        Some(b) => {
            put_varlong(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
