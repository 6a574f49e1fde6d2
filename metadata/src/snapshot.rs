//! Metadata snapshots (docs/metadata-recovery.md): every durable key and value under `mink/`,
//! read consistently, as one versioned, checksummed blob; and its restore into an empty store,
//! with the id counters moved far above what the snapshot says.
//!
//! Format, version 1 (little-endian): `MINKMSNP`, version `u8` = 1, reserved `u8` = 0, flags
//! `u16` = 0, taken-at `i64` (ms), entry count `u64`, then per entry in key order `u32` key length,
//! key, `u32` value length, value; last, CRC32C `u32` of everything before it.

use bytes::Bytes;

use crate::error::{InvalidRequest, MetaError, Result};
use crate::keys;
use crate::kv::{KeyValue, MetaKv, MetaKvExt, Op, apply_unconditional};
use crate::records::RecoveryClaim;
use crate::value::decode;

const MAGIC: &[u8; 8] = b"MINKMSNP";
/// The snapshot format this build writes and the newest it reads.
pub const SNAPSHOT_VERSION: u8 = 1;
const HEADER_LEN: usize = 8 + 1 + 1 + 2 + 8 + 8;
const MAX_KEY_LEN: usize = 4096;
/// How far restore moves every id counter past the snapshot's value.
pub const COUNTER_GAP: u64 = 1 << 32;
/// Full scans tried before a snapshot gives up on a store that keeps changing.
const MAX_SCANS: usize = 8;
const SCAN_PAGE: usize = 512;

/// A consistent copy of the durable metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaSnapshot {
    /// When it was taken, ms since the Unix epoch.
    pub taken_at_ms: i64,
    /// Every key and value, in key order.
    pub entries: Vec<(String, Bytes)>,
}

/// What a restore wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Keys written.
    pub keys: usize,
    /// Keys deleted first (a forced restore over a store that held some).
    pub replaced: usize,
    /// Id counters moved past the snapshot's values.
    pub counters_raised: usize,
}

/// Whether `kv` belongs in a snapshot: not what a live process holds under its lease.
fn durable(kv: &KeyValue) -> bool {
    if kv.key.starts_with(keys::NODES) || kv.key.starts_with(keys::LEADER) {
        return false;
    }
    if kv.key.starts_with(keys::RECOVERY) {
        // A claim in progress is held by its claimer's lease; a finished one is kept for good.
        return decode::<RecoveryClaim>(&kv.key, &kv.value).is_ok_and(|c| c.done);
    }
    true
}

impl MetaSnapshot {
    /// Reads every durable key of `kv` at one moment, `now_ms` being the time to record: in one
    /// read where the backend can ([`MetaKv::scan_all_at_one_revision`]), else by scanning until
    /// two full scans agree key for key and version for version.
    pub async fn take(kv: &dyn MetaKv, now_ms: i64) -> Result<Self> {
        if let Some(all) = kv.scan_all_at_one_revision(keys::ROOT).await? {
            return Ok(Self::of_durable(all, now_ms));
        }
        let mut previous = kv.scan_all(keys::ROOT, SCAN_PAGE).await?;
        for _ in 1..MAX_SCANS {
            let again = kv.scan_all(keys::ROOT, SCAN_PAGE).await?;
            if again == previous {
                return Ok(Self::of_durable(again, now_ms));
            }
            previous = again;
        }
        Err(MetaError::Unavailable {
            backend: kv.backend(),
            operation: "snapshot",
            source: format!(
                "the metadata kept changing during {MAX_SCANS} full scans; try again when it is quieter"
            )
            .into(),
        })
    }

    /// The snapshot of the durable keys of `all` (a read at one moment), taken at `now_ms`.
    fn of_durable(all: Vec<KeyValue>, now_ms: i64) -> Self {
        MetaSnapshot {
            taken_at_ms: now_ms,
            entries: all
                .into_iter()
                .filter(durable)
                .map(|kv| (kv.key, kv.value))
                .collect(),
        }
    }

    /// The snapshot's bytes.
    pub fn encode(&self) -> Bytes {
        let body: usize = self
            .entries
            .iter()
            .map(|(k, v)| 8 + k.len() + v.len())
            .sum();
        let mut out = Vec::with_capacity(HEADER_LEN + body + 4);
        out.extend_from_slice(MAGIC);
        out.push(SNAPSHOT_VERSION);
        out.push(0);
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.taken_at_ms.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for (key, value) in &self.entries {
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Bytes::from(out)
    }

    /// Decodes the snapshot `name` (for errors); never panics, never allocates by an unchecked
    /// length.
    pub fn decode(name: &str, raw: &[u8]) -> Result<Self> {
        let corrupt = |reason: String| MetaError::Corrupt {
            key: name.to_owned(),
            reason,
        };
        if raw.len() < HEADER_LEN + 4 {
            return Err(corrupt(format!(
                "{} bytes, shorter than a snapshot's header and checksum",
                raw.len()
            )));
        }
        if &raw[..8] != MAGIC {
            return Err(corrupt("not a metadata snapshot (bad magic)".to_owned()));
        }
        let version = raw[8];
        if version == 0 || version > SNAPSHOT_VERSION {
            return Err(MetaError::UnknownVersion {
                key: name.to_owned(),
                version,
                supported: SNAPSHOT_VERSION,
            });
        }
        let (body, crc) = raw.split_at(raw.len() - 4);
        let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        let computed = crc32c::crc32c(body);
        if stored != computed {
            return Err(corrupt(format!(
                "checksum {stored:08x} does not match the content's {computed:08x}"
            )));
        }
        let mut cursor = Cursor {
            bytes: body,
            at: 12,
        };
        let taken_at_ms = i64::from_le_bytes(
            cursor
                .array()
                .ok_or_else(|| corrupt("truncated header".to_owned()))?,
        );
        let count = u64::from_le_bytes(
            cursor
                .array()
                .ok_or_else(|| corrupt("truncated header".to_owned()))?,
        );
        // Each entry takes at least 8 bytes: a count past that is a lie, refused before anything
        // is allocated for it.
        let remaining = (body.len() - cursor.at) as u64;
        if count > remaining / 8 {
            return Err(corrupt(format!(
                "{count} entries cannot fit in {remaining} bytes"
            )));
        }
        let mut entries: Vec<(String, Bytes)> = Vec::with_capacity(count as usize);
        for i in 0..count {
            let key_len = cursor
                .len()
                .ok_or_else(|| corrupt(format!("entry {i}: truncated")))?;
            if key_len == 0 || key_len > MAX_KEY_LEN {
                return Err(corrupt(format!("entry {i}: a key of {key_len} bytes")));
            }
            let key = cursor
                .take(key_len)
                .ok_or_else(|| corrupt(format!("entry {i}: truncated key")))?;
            let key = std::str::from_utf8(key)
                .map_err(|_| corrupt(format!("entry {i}: the key is not UTF-8")))?
                .to_owned();
            if let Some((previous, _)) = entries.last()
                && *previous >= key
            {
                return Err(corrupt(format!("entry {i}: key {key} is out of order")));
            }
            let value_len = cursor
                .len()
                .ok_or_else(|| corrupt(format!("entry {i} ({key}): truncated")))?;
            let value = cursor
                .take(value_len)
                .ok_or_else(|| corrupt(format!("entry {i} ({key}): truncated value")))?;
            entries.push((key, Bytes::copy_from_slice(value)));
        }
        if cursor.at != body.len() {
            return Err(corrupt(format!(
                "{} bytes after the last entry",
                body.len() - cursor.at
            )));
        }
        Ok(MetaSnapshot {
            taken_at_ms,
            entries,
        })
    }

    /// Writes the snapshot into `kv`: refused when `kv` holds any key under `mink/` unless
    /// `force`, which deletes them first. Then every id counter is raised by [`COUNTER_GAP`], so
    /// ids handed out after the snapshot was taken are not handed out again.
    pub async fn restore(&self, kv: &dyn MetaKv, force: bool) -> Result<RestoreReport> {
        let existing = kv.scan_all(keys::ROOT, SCAN_PAGE).await?;
        if !existing.is_empty() && !force {
            return Err(MetaError::Invalid(InvalidRequest::StoreNotEmpty {
                keys: existing.len(),
            }));
        }
        let mut report = RestoreReport {
            replaced: existing.len(),
            keys: self.entries.len(),
            ..RestoreReport::default()
        };
        let deletes = existing.iter().map(|e| Op::delete(e.key.clone())).collect();
        apply_unconditional(kv, deletes, "restore").await?;
        let puts = self
            .entries
            .iter()
            .map(|(k, v)| Op::put(k.clone(), v.clone()))
            .collect();
        apply_unconditional(kv, puts, "restore").await?;
        for (key, _) in &self.entries {
            let counter = key.starts_with(keys::INCARNATIONS)
                || (key.starts_with(keys::IDS) && *key != crate::IdKind::Broker.key());
            if counter {
                crate::alloc::reserve_at(kv, key.clone(), COUNTER_GAP, u64::MAX).await?;
                report.counters_raised += 1;
            }
        }
        Ok(report)
    }
}

/// Reads a snapshot's fields in order.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let out = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(out)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn len(&mut self) -> Option<usize> {
        Some(u32::from_le_bytes(self.array()?) as usize)
    }
}

#[cfg(test)]
mod tests;
