//! The codec's error type.
//!
//! Every error raised while reading a batch names the header field (or region) where the problem was found
//! and its byte position, counted from the start of the buffer handed to the view, so a corrupt log segment
//! can be located with a hex dump.

use arrow_schema::{ArrowError, DataType};

/// Names of the header fields and batch regions that errors point at ([`Error::field`]).
pub mod field {
    /// The `base_offset` field.
    pub const BASE_OFFSET: &str = "base_offset";
    /// The `length` field.
    pub const LENGTH: &str = "length";
    /// The `magic` field.
    pub const MAGIC: &str = "magic";
    /// The `crc` field.
    pub const CRC: &str = "crc";
    /// The whole header.
    pub const HEADER: &str = "header";
    /// The `attributes` field.
    pub const ATTRIBUTES: &str = "attributes";
    /// The `last_offset_delta` field.
    pub const LAST_OFFSET_DELTA: &str = "last_offset_delta";
    /// The `record_count` field.
    pub const RECORD_COUNT: &str = "record_count";
    /// The change-type vector.
    pub const CHANGE_TYPES: &str = "change_types";
    /// The Arrow IPC message prefix (continuation marker and metadata length).
    pub const ARROW_PREFIX: &str = "arrow.prefix";
    /// The Arrow IPC flatbuffer metadata.
    pub const ARROW_METADATA: &str = "arrow.metadata";
    /// The Arrow IPC body.
    pub const ARROW_BODY: &str = "arrow.body";
    /// The row count declared in the Arrow metadata.
    pub const ARROW_LENGTH: &str = "arrow.length";
}

/// Everything that can go wrong while building, reading or projecting a batch.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The buffer ends before the named field or region does.
    #[error(
        "batch truncated: `{field}` at byte {position} needs {needed} bytes but only {available} remain; \
         the buffer was cut short or the length field is corrupt"
    )]
    Truncated {
        /// Field or region that does not fit.
        field: &'static str,
        /// Byte position of that field in the buffer.
        position: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the buffer from `position`.
        available: usize,
    },

    /// The `length` field (or a length derived from it) is impossible.
    #[error("bad length in `{field}` at byte {position}: {value} ({reason})")]
    BadLength {
        /// Field holding the bad length.
        field: &'static str,
        /// Byte position of that field.
        position: usize,
        /// The value found.
        value: i64,
        /// Why it cannot be right.
        reason: &'static str,
    },

    /// The magic byte is not a format version this codec reads.
    #[error(
        "bad magic at byte {position}: found {found}, expected {expected}; not a mink batch or a newer format"
    )]
    BadMagic {
        /// Byte position of the magic byte.
        position: usize,
        /// Value found.
        found: u8,
        /// Value this codec writes and reads.
        expected: u8,
    },

    /// The stored CRC does not match the bytes it covers.
    #[error(
        "CRC mismatch in `crc` at byte {position}: header says {expected:#010x}, bytes hash to {actual:#010x}; \
         the batch is corrupt"
    )]
    CrcMismatch {
        /// Byte position of the crc field.
        position: usize,
        /// CRC stored in the header.
        expected: u32,
        /// CRC computed over the batch.
        actual: u32,
    },

    /// Reserved attribute bits are set (bit 1 is reserved on a batch without a writer).
    #[error(
        "unknown attribute bits in `attributes` at byte {position}: {value:#04x} (bit 0 is \
         append-only, bit 1 a record-counting sequence, allowed only with a writer id)"
    )]
    BadAttributes {
        /// Byte position of the attributes field.
        position: usize,
        /// The attributes byte.
        value: u8,
    },

    /// Two counts that must agree do not.
    #[error("count mismatch in `{field}` at byte {position}: expected {expected}, found {actual}")]
    CountMismatch {
        /// Field (or region) whose count is wrong.
        field: &'static str,
        /// Byte position of that field.
        position: usize,
        /// Count implied by `record_count`.
        expected: i64,
        /// Count found.
        actual: i64,
    },

    /// A change-type byte is not one of the five known kinds.
    #[error("bad change type in `change_types` at byte {position}: {value} is not 0..=4")]
    BadChangeType {
        /// Byte position of the bad change type.
        position: usize,
        /// Value found.
        value: u8,
    },

    /// The Arrow IPC message is malformed (checked by the codec before Arrow sees it).
    #[error("invalid Arrow IPC message in `{field}` at byte {position}: {reason}")]
    InvalidArrowMessage {
        /// Part of the message that is wrong.
        field: &'static str,
        /// Byte position of the message part.
        position: usize,
        /// What is wrong.
        reason: String,
    },

    /// Arrow rejected the message or its arrays.
    #[error("Arrow could not decode the rows in `{field}` at byte {position}: {source}")]
    Arrow {
        /// Part of the message being decoded.
        field: &'static str,
        /// Byte position of the message part.
        position: usize,
        /// Arrow's error.
        #[source]
        source: ArrowError,
    },

    /// Building a batch: the change-type list does not have one entry per row.
    #[error(
        "{change_types} change types given for a batch of {rows} rows; give exactly one per row"
    )]
    ChangeTypeCount {
        /// Rows in the Arrow batch.
        rows: usize,
        /// Change types given.
        change_types: usize,
    },

    /// Building a batch: the encoded batch would not fit the 32-bit length and count fields.
    #[error("batch too large: {what} is {value}, the format allows at most {max}")]
    TooLarge {
        /// What overflows.
        what: &'static str,
        /// Its value.
        value: usize,
        /// The largest allowed value.
        max: usize,
    },

    /// Arrow failed to encode the rows.
    #[error("Arrow could not encode the rows: {source}")]
    Encode {
        /// Arrow's error.
        #[source]
        source: ArrowError,
    },

    /// A column type the batch format does not carry (it has no dictionary messages, and unions and
    /// run-end encoding are not supported).
    #[error("column `{column}` has type {data_type}, which mink batches do not support")]
    UnsupportedType {
        /// Column (or nested field) name.
        column: String,
        /// Its type.
        data_type: DataType,
    },

    /// A compressed Arrow body declares more bytes once decompressed than one message may hold
    /// ([`crate::MAX_UNCOMPRESSED_BODY`]); nothing was decompressed.
    #[error(
        "the compressed Arrow body at byte {position} declares at least {declared} bytes once \
         decompressed, more than the {max} one batch may hold; send smaller batches"
    )]
    Decompression {
        /// Byte position of the body.
        position: usize,
        /// Uncompressed bytes declared so far when the bound was passed.
        declared: usize,
        /// The bound.
        max: usize,
    },

    /// A projection must keep at least one column.
    #[error("empty projection: name at least one column")]
    EmptyProjection,

    /// A projection names a column the schema does not have.
    #[error("unknown column `{name}` in projection; the schema has {available:?}")]
    UnknownColumn {
        /// Name asked for.
        name: String,
        /// Columns the schema has.
        available: Vec<String>,
    },

    /// A projection names a column index past the end of the schema.
    #[error("column index {index} out of range in projection; the schema has {columns} columns")]
    ColumnOutOfRange {
        /// Index asked for.
        index: usize,
        /// Columns in the schema.
        columns: usize,
    },

    /// A projection names the same column twice.
    #[error("column index {index} appears twice in the projection")]
    DuplicateColumn {
        /// The repeated index.
        index: usize,
    },
}

impl Error {
    /// The header field or region the error was found in, for decode errors.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Error::Truncated { field, .. }
            | Error::BadLength { field, .. }
            | Error::CountMismatch { field, .. }
            | Error::InvalidArrowMessage { field, .. }
            | Error::Arrow { field, .. } => Some(field),
            Error::BadMagic { .. } => Some(field::MAGIC),
            Error::CrcMismatch { .. } => Some(field::CRC),
            Error::BadAttributes { .. } => Some(field::ATTRIBUTES),
            Error::BadChangeType { .. } => Some(field::CHANGE_TYPES),
            Error::Decompression { .. } => Some(field::ARROW_BODY),
            _ => None,
        }
    }

    /// The byte position (from the start of the buffer) where the error was found, for decode errors.
    pub fn position(&self) -> Option<usize> {
        match self {
            Error::Truncated { position, .. }
            | Error::BadLength { position, .. }
            | Error::BadMagic { position, .. }
            | Error::CrcMismatch { position, .. }
            | Error::BadAttributes { position, .. }
            | Error::CountMismatch { position, .. }
            | Error::BadChangeType { position, .. }
            | Error::InvalidArrowMessage { position, .. }
            | Error::Decompression { position, .. }
            | Error::Arrow { position, .. } => Some(*position),
            _ => None,
        }
    }
}

/// The codec's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
