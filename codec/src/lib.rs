//! Mink's record-batch format: the unit a log tablet appends, stores and serves.
//!
//! Data enters as an Arrow [`RecordBatch`](arrow_array::RecordBatch) plus change types and leaves as
//! bytes ([`Encoder`], [`encode_batch`]); bytes from the network or storage enter through [`batches`] /
//! [`BatchView`], which check them ([`BatchView::check_header`] on the append path, [`BatchView::validate`],
//! [`BatchView::decode`]) and never panic on any input. The tablet stamps offsets, timestamps and epochs
//! in place ([`write_append_fields`]) and rewrites batches to projected columns ([`Projection`]). Arrow
//! IPC streams from a client pass the same checks ([`ipc_stream_schema`], [`decode_ipc_stream`]), and so do
//! record batches that arrive as a flatbuffer message and a body apart (Arrow Flight:
//! [`batch_from_message`], [`BatchView::message_parts`]). The
//! codec does no I/O.
//!
//! # Batch layout (format version 1)
//!
//! A batch is a 52-byte header, then (unless append-only) the change-type vector, then one Arrow IPC
//! message holding the rows. All integers are little-endian.
//!
//! | Field | Position | Size | Meaning |
//! |---|---|---|---|
//! | base_offset | 0 | 8 (i64) | Offset of the first row, assigned by the tablet (0 until then) |
//! | length | 8 | 4 (i32) | Bytes after this field: the batch is `12 + length` bytes |
//! | magic | 12 | 1 (u8) | Format version, [`MAGIC`] = 1 |
//! | commit_timestamp | 13 | 8 (i64) | Milliseconds, assigned by the tablet on append |
//! | leader_epoch | 21 | 4 (i32) | Bucket leader epoch, written by the tablet |
//! | crc | 25 | 4 (u32) | CRC32C (Castagnoli) over bytes 29 to the end of the batch |
//! | schema_id | 29 | 2 (i16) | Schema version the rows were encoded with |
//! | attributes | 31 | 1 (u8) | Bit 0: append-only, no change-type vector. Bit 1 (only with a writer): the sequence counts records. Other bits must be 0 |
//! | last_offset_delta | 32 | 4 (i32) | `record_count - 1` |
//! | writer_id | 36 | 8 (i64) | Idempotent writer identity, -1 when unused: bits 0-47 the allocated id, 48-62 the writer epoch ([`writer_parts`]) |
//! | batch_sequence | 44 | 4 (i32) | Idempotent writer sequence, -1 when unused |
//! | record_count | 48 | 4 (i32) | Rows in the batch |
//! | change types | 52 | record_count | One byte per row, absent when append-only: 0 `+A` append-only, 1 `+I` insert, 2 `-U` update-before, 3 `+U` update-after, 4 `-D` delete |
//! | Arrow message | 52 (+ record_count) | rest | Arrow IPC encapsulated RecordBatch message: `ff ff ff ff`, i32 metadata length, flatbuffer `Message` (metadata V5), body. No schema message: the reader supplies the schema for `schema_id` |
//!
//! base_offset, commit_timestamp and leader_epoch lie before the CRC-covered region so the tablet can
//! set them without re-hashing. A batch with zero rows (`record_count` 0, `last_offset_delta` -1) may be
//! header-only, 52 bytes with no Arrow message; the writer always emits it that way. The offset after a
//! batch is `base_offset + record_count`.
//!
//! Writer conventions, not checked by readers: the Arrow body starts at a multiple of 8 bytes from the
//! batch start (the metadata is padded), so it decodes without copying when the batch is 8-aligned in a
//! `bytes::Bytes` buffer; Arrow buffers are padded to 8 bytes. Dictionary, union and run-end-encoded
//! columns are not supported.
//!
//! # Compressed bodies
//!
//! The Arrow message may use the IPC format's own body compression (`BodyCompression`, LZ4_FRAME
//! or ZSTD, method BUFFER): each non-empty buffer is an 8-byte little-endian uncompressed length
//! (-1: the bytes that follow are raw) and the compressed bytes. The CRC covers the bytes as
//! stored. Readers check every length before decompressing and refuse a message that would pass
//! [`MAX_UNCOMPRESSED_BODY`] once decompressed; [`Encoder::with_compression`] writes such
//! messages, [`Projection`] copies compressed buffers as they are (docs/compression.md).

#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]

mod change;
mod compression;
mod encode;
mod error;
pub mod header;
mod ipc;
mod ipc_stream;
mod message;
mod projection;
mod view;

pub use change::ChangeType;
pub use compression::{Compression, MAX_UNCOMPRESSED_BODY};
pub use encode::{BatchMeta, Encoder, encode_batch};
pub use error::{Error, Result};
pub use header::{
    HEADER_LEN, Header, MAGIC, MAX_WRITER_EPOCH, MAX_WRITER_ID, NO_SEQUENCE, NO_WRITER_ID,
    write_append_fields, write_base_offset, write_commit_timestamp, write_leader_epoch,
    writer_field, writer_parts,
};
pub use ipc_stream::{decode_ipc_stream, ipc_stream_schema};
pub use message::{batch_from_message, schema_from_message};
pub use projection::Projection;
pub use view::{BatchBuf, BatchView, Batches, batches};
