//! Building batches from Arrow record batches.
//!
//! The writer fills in everything but the three fields the tablet assigns on append (`base_offset`,
//! `commit_timestamp`, `leader_epoch`, left at zero), computes the CRC, and emits a zero-row batch as a
//! bare 52-byte header.

use arrow_array::RecordBatch;
use arrow_ipc::MetadataVersion;
use arrow_ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow_schema::SchemaRef;

use crate::change::ChangeType;
use crate::compression::{self, Compression};
use crate::error::{Error, Result};
use crate::header::{
    ATTR_APPEND_ONLY, ATTR_RECORD_SEQUENCE, HEADER_LEN, Header, LENGTH_PREFIX, MAGIC, NO_SEQUENCE,
    NO_WRITER_ID, put, seal_crc,
};
use crate::ipc;
use crate::view::{BatchBuf, BatchView};

/// The header fields a writer chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchMeta {
    /// Schema version the rows are encoded with.
    pub schema_id: i16,
    /// Idempotent writer identity (id and epoch, [`crate::writer_field`]), or [`NO_WRITER_ID`].
    pub writer_id: i64,
    /// Idempotent writer sequence, or [`NO_SEQUENCE`].
    pub batch_sequence: i32,
    /// Whether the sequence counts records (attribute bit 1; only with a writer).
    pub counts_records: bool,
}

impl BatchMeta {
    /// Fields for a writer without idempotence (writer id and sequence -1).
    pub fn new(schema_id: i16) -> Self {
        BatchMeta {
            schema_id,
            writer_id: NO_WRITER_ID,
            batch_sequence: NO_SEQUENCE,
            counts_records: false,
        }
    }

    /// Sets the idempotent writer id and sequence.
    pub fn with_writer(mut self, writer_id: i64, batch_sequence: i32) -> Self {
        self.writer_id = writer_id;
        self.batch_sequence = batch_sequence;
        self
    }

    /// Marks the sequence as counting records: the writer's next batch starts at this one's
    /// sequence plus its row count (attribute bit 1, as Kafka counts).
    pub fn counting_records(mut self) -> Self {
        self.counts_records = true;
        self
    }
}

/// Encodes batches, reusing Arrow's flatbuffer builder between calls. Create one per writer thread.
pub struct Encoder {
    generator: IpcDataGenerator,
    tracker: DictionaryTracker,
    /// The options of uncompressed messages.
    plain: IpcWriteOptions,
    /// The options of compressed messages, when the encoder compresses.
    compressed: Option<(Compression, IpcWriteOptions)>,
    context: IpcWriteContext,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder").finish_non_exhaustive()
    }
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    /// A new encoder: Arrow metadata V5, 8-byte buffer alignment, no compression.
    pub fn new() -> Self {
        let options = IpcWriteOptions::try_new(8, false, MetadataVersion::V5).unwrap_or_default();
        Encoder {
            generator: IpcDataGenerator::default(),
            tracker: DictionaryTracker::new(false),
            plain: options,
            compressed: None,
            context: IpcWriteContext::default(),
        }
    }

    /// Compresses the Arrow bodies of the batches it encodes with `compression` (`None`: no
    /// compression). A batch whose body would pass [`crate::MAX_UNCOMPRESSED_BODY`] once
    /// decompressed is written uncompressed, so every batch written reads back.
    ///
    /// # Errors
    /// [`Error::Encode`] for a zstd level outside 1 to 22.
    pub fn with_compression(mut self, compression: Option<Compression>) -> Result<Self> {
        self.compressed = match compression {
            None => None,
            Some(codec) => {
                let level = match codec {
                    Compression::Zstd { level } => Some(level),
                    Compression::Lz4Frame => None,
                };
                let options = self
                    .plain
                    .clone()
                    .try_with_compression(Some(codec.arrow_type()))
                    .and_then(|o| o.try_with_compression_level(level))
                    .map_err(|source| Error::Encode { source })?;
                Some((codec, options))
            }
        };
        Ok(self)
    }

    /// The codec batches are compressed with, if any.
    pub fn compression(&self) -> Option<Compression> {
        self.compressed.as_ref().map(|(codec, _)| *codec)
    }

    /// `batch` (rows of `schema`) encoded again with its Arrow body compressed by this encoder's
    /// codec, its header fields (schema id, writer id and sequence, attributes) and change types
    /// kept; the fields the tablet stamps are zero, as in every batch a writer makes. The batch
    /// is decoded first, so it is validated in full (CRC included). `None` when there is
    /// nothing to do: the encoder does not compress, the batch has no rows, or its body is
    /// compressed already (kept as it is, whatever its codec).
    pub fn compress_batch<B: BatchBuf>(
        &mut self,
        batch: &BatchView<B>,
        schema: &SchemaRef,
    ) -> Result<Option<Vec<u8>>> {
        if self.compressed.is_none() || batch.record_count() <= 0 {
            return Ok(None);
        }
        batch.check_header()?;
        if batch.compression()?.is_some() {
            return Ok(None);
        }
        let (rows, changes) = batch.decode(schema)?;
        let header = batch.header();
        let meta = BatchMeta {
            schema_id: header.schema_id,
            writer_id: header.writer_id,
            batch_sequence: header.batch_sequence,
            counts_records: batch.counts_records(),
        };
        self.encode(&rows, changes.as_deref(), meta).map(Some)
    }

    /// Encodes `rows` as one batch. `change_types` gives one change type per row, or `None` for an
    /// append-only batch (no change-type vector).
    pub fn encode(
        &mut self,
        rows: &RecordBatch,
        change_types: Option<&[ChangeType]>,
        meta: BatchMeta,
    ) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.encode_into(rows, change_types, meta, &mut out)?;
        Ok(out)
    }

    /// Like [`encode`](Self::encode), appending the batch to `out`. On error `out` is left as it was.
    pub fn encode_into(
        &mut self,
        rows: &RecordBatch,
        change_types: Option<&[ChangeType]>,
        meta: BatchMeta,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        if let Some(ct) = change_types
            && ct.len() != rows.num_rows()
        {
            return Err(Error::ChangeTypeCount {
                rows: rows.num_rows(),
                change_types: ct.len(),
            });
        }
        ipc::check_schema_fields(rows.schema_ref().fields().iter())?;
        let start = out.len();
        let result = self.write(rows, change_types, meta, out, start);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    /// Writes header, change vector and message for `rows`.
    fn write(
        &mut self,
        rows: &RecordBatch,
        change_types: Option<&[ChangeType]>,
        meta: BatchMeta,
        out: &mut Vec<u8>,
        start: usize,
    ) -> Result<()> {
        let count = rows.num_rows();
        let record_count = i32::try_from(count).map_err(|_| Error::TooLarge {
            what: "row count",
            value: count,
            max: i32::MAX as usize,
        })?;
        out.resize(start + HEADER_LEN, 0);
        if let Some(ct) = change_types {
            out.extend(ct.iter().map(|c| c.to_byte()));
        }
        if count > 0 {
            let Encoder {
                generator,
                tracker,
                plain,
                compressed,
                context,
            } = self;
            let mut encode = |options: &IpcWriteOptions| {
                generator
                    .encode(rows, tracker, options, context)
                    .map(|(_dictionaries, encoded)| encoded)
                    .map_err(|source| Error::Encode { source })
            };
            let encoded = match compressed {
                Some((_, options)) => {
                    let message = encode(options)?;
                    if compression::within_bound(&message.ipc_message, &message.arrow_data) {
                        message
                    } else {
                        encode(plain)?
                    }
                }
                None => encode(plain)?,
            };
            ipc::write_message(out, start, &encoded.ipc_message, &encoded.arrow_data)?;
        }
        seal(out, start, record_count, meta, change_types.is_none())
    }
}

/// Writes the header of the batch that starts at `start` in `out` (its change vector and Arrow
/// message already follow the header's room) and seals its CRC.
/// The header's `length` field of a batch of `total` bytes (the bytes after the field).
pub(crate) fn length_field(total: usize) -> Result<i32> {
    i32::try_from(total - LENGTH_PREFIX).map_err(|_| Error::TooLarge {
        what: "batch size in bytes",
        value: total,
        max: i32::MAX as usize + LENGTH_PREFIX,
    })
}

pub(crate) fn seal(
    out: &mut [u8],
    start: usize,
    record_count: i32,
    meta: BatchMeta,
    append_only: bool,
) -> Result<()> {
    let length = length_field(out.len() - start)?;
    let header = Header {
        base_offset: 0,
        length,
        magic: MAGIC,
        commit_timestamp: 0,
        leader_epoch: 0,
        crc: 0,
        schema_id: meta.schema_id,
        attributes: if append_only { ATTR_APPEND_ONLY } else { 0 }
            | if meta.counts_records {
                ATTR_RECORD_SEQUENCE
            } else {
                0
            },
        last_offset_delta: record_count - 1,
        writer_id: meta.writer_id,
        batch_sequence: meta.batch_sequence,
        record_count,
    };
    let batch = out.get_mut(start..).unwrap_or_default();
    put(batch, 0, &header.to_bytes());
    seal_crc(batch);
    Ok(())
}

/// Encodes `rows` as one batch with a fresh [`Encoder`]; see [`Encoder::encode`].
pub fn encode_batch(
    rows: &RecordBatch,
    change_types: Option<&[ChangeType]>,
    meta: BatchMeta,
) -> Result<Vec<u8>> {
    Encoder::new().encode(rows, change_types, meta)
}
