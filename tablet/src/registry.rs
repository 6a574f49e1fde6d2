//! Which stream holds a tablet's log: a small registry in the metadata KV, owned by this crate.
//!
//! Key: `mink/tablets/{table}/{partition}/{bucket}`, where `{table}` is the table name for
//! incarnation 0 and `{name}@{incarnation}` after (a table dropped and created again under the
//! same name is a new incarnation that reaches none of the old one's keys). Value (little-endian,
//! 17 bytes):
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 4 | magic `MKTR` (0x4D 0x4B 0x54 0x52) |
//! | 4 | 1 | format version, 1 |
//! | 5 | 8 | stream id, u64 |
//! | 13 | 4 | CRC32C of bytes 0..13, u32 |
//!
//! The entry is created with a compare-on-absent, so two nodes creating the same tablet at once agree
//! on one stream; the loser deletes the stream it created.
//!
//! Each tablet's stream is created with a manifest on the object store whose label is the
//! tablet's identity ([`TabletId::label`], JSON `{"tablet": {"table", "incarnation",
//! "partition", "bucket"}}`), so a rebuild from objects after the metadata was lost can write
//! the entry back ([`adopt`]; docs/metadata-recovery.md, "Manifests").

use std::fmt;

use mink_metadata::{Compare, MetaKv, Op, Txn};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TabletError};

/// Prefix of the tablet registry.
pub const TABLETS: &str = "mink/tablets/";

const MAGIC: [u8; 4] = *b"MKTR";
const VERSION: u8 = 1;
const LEN: usize = 17;

/// One bucket of one partition of one table: the identity of a tablet.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TabletId {
    /// Table name (one key segment: non-empty, no `/`).
    pub table: String,
    /// Partition name (one key segment; an unpartitioned table uses `default`).
    pub partition: String,
    /// Bucket number.
    pub bucket: u32,
    /// The table's incarnation (its record's `incarnation`); 0 for tables created before
    /// incarnations, whose keys carry no suffix.
    pub incarnation: u64,
}

impl TabletId {
    /// A tablet id of incarnation 0. Names are checked when the tablet is opened.
    pub fn new(table: impl Into<String>, partition: impl Into<String>, bucket: u32) -> Self {
        TabletId {
            table: table.into(),
            partition: partition.into(),
            bucket,
            incarnation: 0,
        }
    }

    /// The same tablet of the table's incarnation `incarnation`.
    pub fn with_incarnation(mut self, incarnation: u64) -> Self {
        self.incarnation = incarnation;
        self
    }

    /// The table as one segment of this tablet's keys (registry entry, writer snapshot):
    /// `{table}` for incarnation 0, else `{table}@{incarnation}`.
    pub fn table_segment(&self) -> String {
        mink_metadata::keys::table_segment(&self.table, self.incarnation)
    }

    /// The key of this tablet's writer snapshot.
    pub fn writer_key(&self) -> String {
        mink_metadata::keys::writer(&self.table_segment(), &self.partition, self.bucket)
    }

    /// Checks that table and partition are usable key segments.
    pub fn check(&self) -> Result<()> {
        for (what, name) in [("table", &self.table), ("partition", &self.partition)] {
            // `@` would make `{table}@{n}` ambiguous between two tables.
            if name.is_empty() || name.contains('/') || (what == "table" && name.contains('@')) {
                return Err(TabletError::InvalidRequest {
                    reason: format!(
                        "{what} name {name:?} must be non-empty and must not contain '/' (nor                          '@' in a table name)"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The registry key of this tablet.
    pub fn registry_key(&self) -> String {
        format!(
            "{TABLETS}{}/{}/{}",
            self.table_segment(),
            self.partition,
            self.bucket
        )
    }
}

impl fmt::Display for TabletId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.table_segment(),
            self.partition,
            self.bucket
        )
    }
}

/// A tablet's identity as a stream manifest's label holds it.
#[derive(Serialize, Deserialize)]
struct Label {
    tablet: LabelId,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LabelId {
    table: String,
    incarnation: u64,
    partition: String,
    bucket: u32,
}

impl TabletId {
    /// The label of this tablet's stream manifest.
    pub fn label(&self) -> bytes::Bytes {
        let label = Label {
            tablet: LabelId {
                table: self.table.clone(),
                incarnation: self.incarnation,
                partition: self.partition.clone(),
                bucket: self.bucket,
            },
        };
        bytes::Bytes::from(serde_json::to_vec(&label).unwrap_or_default())
    }

    /// The tablet a stream manifest's label names, if it names one.
    pub fn from_label(label: &[u8]) -> Option<TabletId> {
        let Label { tablet } = serde_json::from_slice(label).ok()?;
        let id = TabletId::new(tablet.table, tablet.partition, tablet.bucket)
            .with_incarnation(tablet.incarnation);
        id.check().ok().map(|()| id)
    }
}

/// What [`adopt`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopted {
    /// The entry was written.
    Registered,
    /// The entry already named this stream.
    Already,
    /// The entry names another stream (left as it is).
    Other(u64),
}

/// Writes `id`'s registry entry naming `stream_id` unless it has one: what a rebuild from
/// objects does for a stream it recreated from its manifest.
pub async fn adopt(kv: &dyn MetaKv, id: &TabletId, stream_id: u64) -> Result<Adopted> {
    id.check()?;
    let key = id.registry_key();
    let name = id.to_string();
    let meta = |e| TabletError::metadata(&name, "adopt a stream into the tablet registry", e);
    let outcome = kv
        .txn(Txn {
            compares: vec![Compare::absent(&key)],
            on_success: vec![Op::put(&key, encode(stream_id))],
        })
        .await
        .map_err(meta)?;
    if outcome.succeeded {
        return Ok(Adopted::Registered);
    }
    let Some(current) = kv.get(&key).await.map_err(meta)? else {
        return Err(TabletError::metadata(
            &name,
            "adopt a stream into the tablet registry",
            mink_metadata::MetaError::Contended {
                operation: "adopt a stream",
                key,
                attempts: 1,
            },
        ));
    };
    let current = decode(&key, &current.value)?;
    Ok(if current == stream_id {
        Adopted::Already
    } else {
        Adopted::Other(current)
    })
}

/// Encodes a registry value. Public for tests that stage a registry entry, as `decode` is for
/// the fuzz targets.
#[doc(hidden)]
pub fn encode(stream_id: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(LEN);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&stream_id.to_le_bytes());
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a registry value; never panics. Public for the fuzz targets and the chaos harness
/// only.
#[doc(hidden)]
pub fn decode(key: &str, raw: &[u8]) -> Result<u64> {
    let corrupt = |reason: String| TabletError::CorruptMetadata {
        key: key.to_owned(),
        reason,
    };
    let raw: &[u8; LEN] = raw.try_into().map_err(|_| {
        corrupt(format!(
            "registry value is {} bytes, expected {LEN}",
            raw.len()
        ))
    })?;
    let (body, crc) = raw.split_at(13);
    if body[0..4] != MAGIC {
        return Err(corrupt(format!("bad magic {:02x?}", &body[0..4])));
    }
    if body[4] != VERSION {
        return Err(corrupt(format!(
            "format version {} is not {VERSION}; written by a newer Mink?",
            body[4]
        )));
    }
    let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let actual = crc32c::crc32c(body);
    if stored != actual {
        return Err(corrupt(format!(
            "CRC32C is {actual:08x}, the value says {stored:08x}"
        )));
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&body[5..13]);
    Ok(u64::from_le_bytes(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_others_name_no_tablet() {
        let id = TabletId::new("t", "p=1", 7).with_incarnation(3);
        assert_eq!(TabletId::from_label(&id.label()), Some(id));
        for other in [
            &b"{}"[..],
            b"not json",
            br#"{"tablet":{"table":"a/b","incarnation":0,"partition":"p","bucket":0}}"#,
        ] {
            assert_eq!(TabletId::from_label(other), None);
        }
    }

    #[test]
    fn registry_values_round_trip_and_corruption_is_an_error() {
        let value = encode(42);
        assert_eq!(decode("k", &value).unwrap(), 42);
        for i in 0..value.len() {
            let mut bad = value.clone();
            bad[i] ^= 0x40;
            assert!(
                decode("k", &bad).is_err(),
                "flip at byte {i} went unnoticed"
            );
        }
        for len in 0..value.len() {
            assert!(decode("k", &value[..len]).is_err());
        }
    }

    #[test]
    fn ids_with_slashes_are_refused() {
        assert!(TabletId::new("a/b", "default", 0).check().is_err());
        assert!(TabletId::new("t", "", 0).check().is_err());
        assert!(TabletId::new("t@2", "default", 0).check().is_err());
        assert_eq!(
            TabletId::new("t", "p", 3).registry_key(),
            "mink/tablets/t/p/3"
        );
    }

    #[test]
    fn keys_of_incarnation_zero_are_unchanged_and_later_ones_carry_it() {
        let old = TabletId::new("t", "p", 3);
        assert_eq!(old.writer_key(), "mink/writers/t/p/3");
        let new = old.clone().with_incarnation(7);
        assert_eq!(new.registry_key(), "mink/tablets/t@7/p/3");
        assert_eq!(new.writer_key(), "mink/writers/t@7/p/3");
        assert_eq!(new.to_string(), "t@7/p/3");
        assert_ne!(old, new);
    }
}
