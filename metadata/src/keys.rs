//! Where each record lives in the metadata KV. Every key starts with `mink/`; numeric ids are
//! zero-padded to 20 digits so that key order is id order in prefix scans.
//!
//! | Key | Record |
//! |---|---|
//! | `mink/ids/{writer,stream,object}` | id allocator counter |
//! | `mink/tables/{name}` | [`crate::TableRecord`] |
//! | `mink/streams/{id:020}` | [`crate::StreamRecord`] |
//! | `mink/objects/{id:020}` | [`crate::ObjectRecord`] |
//! | `mink/wal/{node}/{first_id:020}` | [`crate::WalReservation`] |
//! | `mink/nodes/{node}` | [`crate::NodeRecord`] |
//! | `mink/writers/{table}/{partition}/{bucket}` | [`crate::WriterSnapshot`] |

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
/// Prefix of writer snapshots.
pub const WRITERS: &str = "mink/writers/";

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

/// Key of a writer snapshot.
pub fn writer(table: &str, partition: &str, bucket: u32) -> String {
    format!("{WRITERS}{table}/{partition}/{bucket}")
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
