//! Every byte layout s3stream writes to storage, each a byte table in its module's doc.
//!
//! - [`object`]: committed objects (`MKOB`, version 1): blocks of one stream's batches, each with
//!   a CRC32C, then an index and a footer. Stream-set and stream objects share it.
//! - [`wal`]: WAL objects (version 2): the committed-object layout with a WAL section of
//!   per-block epochs ending in `MKWL`, so a WAL object can be committed as it is.
//! - [`manifest`]: stream manifests (`MKSM`, version 1): which stream a label names, written
//!   once per stream, for a rebuild from objects.
//! - [`crc`]: the CRC32C of a concatenation from its pieces' CRCs, for block CRCs over payloads
//!   whose CRC is known.
//! - `le`: the bounds-checked little-endian reads both decoders use; `parts`: bytes held as
//!   slices of cache pages, read in place.
//!
//! Decoders take untrusted bytes: they check every length and never panic.

pub mod crc;
mod le;
pub mod manifest;
pub mod object;
mod parts;
pub mod wal;

pub use le::Truncated;

/// Whether `name` (a key with its prefix taken off) names an object as the WAL and the
/// compactor name them: its id as 16 hex digits.
pub(crate) fn is_object_name(name: &str) -> bool {
    name.len() == 16 && name.bytes().all(|b| b.is_ascii_hexdigit())
}
