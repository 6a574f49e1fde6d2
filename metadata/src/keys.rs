//! Where each record lives in the metadata KV. Every key starts with `mink/`; numeric ids are
//! zero-padded to 20 digits so that key order is id order in prefix scans.
//!
//! | Key | Record |
//! |---|---|
//! | `mink/ids/{writer,stream,object,table}` | id allocator counter |
//! | `mink/tables/{name}` | [`crate::TableRecord`] |
//! | `mink/dropped/{name}@{incarnation}` | [`crate::TableRecord`] of a dropped table (a tombstone) |
//! | `mink/streams/{id:020}` | [`crate::StreamRecord`] |
//! | `mink/objects/{id:020}` | [`crate::ObjectRecord`] |
//! | `mink/wal/{node}/{first_id:020}` | [`crate::WalReservation`] |
//! | `mink/nodes/{node}` | [`crate::NodeRecord`] (held by the node's lease) |
//! | `mink/leader/{member}` | a candidacy in the leader election ([`crate::Election`]), held by the member's lease |
//! | `mink/incarnations/{node}` | the node's last incarnation (an id counter) |
//! | `mink/broker-ids/{node}` | the node's Kafka broker id, for good (an id counter's value) |
//! | `mink/writers/{table}/{partition}/{bucket}` | [`crate::WriterSnapshot`] |
//! | `mink/assign/{table}/{partition}/{bucket}` | [`crate::BucketAssignment`] (`{table}` as in the writer keys) |
//! | `mink/recovery/{member}` | [`crate::RecoveryClaim`] on a dead member's WAL |
//! | `mink/kafka-offsets/{group}/{table}/{partition}` | [`crate::GroupOffset`]: a Kafka consumer group's committed offset (`{group}` as [`group_segment`], `{table}` as in the writer keys) |
//! | `mink/ds-producers/{table}/{name}` | [`crate::ProducerName`]: the writer id of a Durable Streams producer name in one stream's table (`{name}` escaped as [`group_segment`], `{table}` as in the writer keys) |
//!
//! `{table}` in tablet keys (the writer snapshots here, the tablet registry of `mink-tablet`) is
//! [`table_segment`]: the name for incarnation 0, `{name}@{n}` after, so a table created again
//! under a dropped one's name reaches none of its keys (`@` is not allowed in table names).

use crate::error::{InvalidRequest, MetaError, Result};

/// Root of every key.
pub const ROOT: &str = "mink/";
/// Prefix of the id counters.
pub const IDS: &str = "mink/ids/";
/// Prefix of table records.
pub const TABLES: &str = "mink/tables/";
/// Prefix of stream records.
pub const STREAMS: &str = "mink/streams/";
/// Prefix of object records.
pub const OBJECTS: &str = "mink/objects/";
/// Prefix of WAL reservations.
pub const WAL: &str = "mink/wal/";
/// Prefix of node registrations.
pub const NODES: &str = "mink/nodes/";
/// Prefix of the leader election's candidacies.
pub const LEADER: &str = "mink/leader/";
/// Prefix of bucket assignments.
pub const ASSIGNMENTS: &str = "mink/assign/";
/// Prefix of recovery claims.
pub const RECOVERY: &str = "mink/recovery/";
/// Prefix of node incarnation counters.
pub const INCARNATIONS: &str = "mink/incarnations/";
/// Prefix of node broker ids.
pub const BROKER_IDS: &str = "mink/broker-ids/";
/// Prefix of writer snapshots.
pub const WRITERS: &str = "mink/writers/";
/// Prefix of Kafka consumer groups' committed offsets.
pub const GROUP_OFFSETS: &str = "mink/kafka-offsets/";
/// Prefix of Durable Streams producer names.
pub const DS_PRODUCERS: &str = "mink/ds-producers/";
/// Prefix of dropped tables' tombstones.
pub const DROPPED: &str = "mink/dropped/";

/// Key of a stream record.
pub fn stream(id: u64) -> String {
    format!("{STREAMS}{id:020}")
}

/// Key of an object record.
pub fn object(id: u64) -> String {
    format!("{OBJECTS}{id:020}")
}

/// Parses the id out of an object key.
pub fn object_id(key: &str) -> Option<u64> {
    key.strip_prefix(OBJECTS)?.parse().ok()
}

/// Key of a table record.
pub fn table(name: &str) -> String {
    format!("{TABLES}{name}")
}

/// Key of a dropped table's tombstone.
pub fn dropped(name: &str, incarnation: u64) -> String {
    format!("{DROPPED}{name}@{incarnation}")
}

/// A table's key segment in tablet keys: `{name}` for incarnation 0, else `{name}@{incarnation}`.
pub fn table_segment(name: &str, incarnation: u64) -> String {
    if incarnation == 0 {
        name.to_owned()
    } else {
        format!("{name}@{incarnation}")
    }
}

/// Key of a node's incarnation counter.
pub fn incarnation(node: &str) -> String {
    format!("{INCARNATIONS}{node}")
}

/// Key of a node's broker id.
pub fn broker_id(node: &str) -> String {
    format!("{BROKER_IDS}{node}")
}

/// Prefix of one node's WAL reservations.
pub fn wal_node(node: &str) -> String {
    format!("{WAL}{node}/")
}

/// Key of one WAL reservation.
pub fn wal(node: &str, first_id: u64) -> String {
    format!("{WAL}{node}/{first_id:020}")
}

/// Key of a node registration.
pub fn node(node: &str) -> String {
    format!("{NODES}{node}")
}

/// Key of a bucket's assignment (`table` is the table's key segment, [`table_segment`]).
pub fn assignment(table: &str, partition: &str, bucket: u32) -> String {
    format!("{ASSIGNMENTS}{table}/{partition}/{bucket}")
}

/// Key of the recovery claim on a member.
pub fn recovery(member: &str) -> String {
    format!("{RECOVERY}{member}")
}

/// Key of a writer snapshot.
pub fn writer(table: &str, partition: &str, bucket: u32) -> String {
    format!("{WRITERS}{table}/{partition}/{bucket}")
}

/// A Kafka group id as one key segment: ASCII letters, digits, `.`, `_` and `-` as they are,
/// every other byte as `%XX` (group ids are any string a client picks).
pub fn group_segment(group: &str) -> String {
    let mut out = String::with_capacity(group.len());
    for b in group.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The group id of a [`group_segment`].
pub fn group_of_segment(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Prefix of one Kafka group's committed offsets.
pub fn group_offsets(group: &str) -> String {
    format!("{GROUP_OFFSETS}{}/", group_segment(group))
}

/// Key of a Kafka group's committed offset of one partition (`table` as [`table_segment`]).
pub fn group_offset(group: &str, table: &str, partition: u32) -> String {
    format!("{}{table}/{partition:010}", group_offsets(group))
}

/// Prefix of the producer names of one table (`table` as [`table_segment`]).
pub fn producer_names(table: &str) -> String {
    format!("{DS_PRODUCERS}{table}/")
}

/// Key of a Durable Streams producer name of one table (`table` as [`table_segment`]).
pub fn producer_name(table: &str, name: &str) -> String {
    format!("{}{}", producer_names(table), group_segment(name))
}

/// Checks a name used as one key segment (table, partition, node): non-empty, no `/`.
pub(crate) fn check_segment(what: &'static str, name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') {
        return Err(MetaError::Invalid(InvalidRequest::BadName {
            what,
            name: name.to_owned(),
        }));
    }
    Ok(())
}
