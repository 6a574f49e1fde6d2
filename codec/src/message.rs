//! Batches and Arrow IPC messages in parts: Arrow Flight carries a record batch as its flatbuffer
//! `Message` and its body in two fields, so a batch is assembled from those parts
//! ([`batch_from_message`]) and a stored batch hands them out again ([`BatchView::message_parts`]),
//! without decoding or re-encoding the rows either way.
//!
//! The parts come from the network: the flatbuffer is verified and its buffer ranges, field
//! nodes and variadic counts are checked against the body before anything else reads them, as
//! for every other batch. The rows themselves are decoded against the table's schema by whoever
//! appends the batch (the tablet does, before it accepts an append).

use std::ops::Range;

use arrow_ipc::MetadataVersion;
use arrow_schema::Schema;

use crate::encode::{BatchMeta, seal};
use crate::error::{Error, Result, field};
use crate::header::HEADER_LEN;
use crate::ipc;
use crate::view::{BatchBuf, BatchView};

/// Builds one append-only batch holding the record batch whose flatbuffer `Message` is
/// `message` and whose body is `body`. A body longer than the message declares is cut to the
/// declared length (senders may pad it); a shorter one is refused, as is a message that is not
/// a verified V4/V5 `RecordBatch` with every buffer inside the body, or one with no rows. A
/// compressed message (LZ4_FRAME or ZSTD) is kept as it is, its buffers' uncompressed lengths
/// checked.
pub fn batch_from_message(meta: BatchMeta, message: &[u8], body: &[u8]) -> Result<Vec<u8>> {
    let invalid = |reason: String| Error::InvalidArrowMessage {
        field: field::ARROW_METADATA,
        position: 0,
        reason,
    };
    let parsed = arrow_ipc::root_as_message(message)
        .map_err(|e| invalid(format!("flatbuffer does not verify: {e}")))?;
    let version = parsed.version();
    if version != MetadataVersion::V4 && version != MetadataVersion::V5 {
        return Err(invalid(format!(
            "metadata version {version:?} is not supported (V4 or V5)"
        )));
    }
    let rb = parsed.header_as_record_batch().ok_or_else(|| {
        invalid(format!(
            "expected a RecordBatch message, found header type {:?}",
            parsed.header_type()
        ))
    })?;
    let declared = parsed.bodyLength();
    let body_len = usize::try_from(declared).map_err(|_| Error::BadLength {
        field: field::ARROW_METADATA,
        position: 0,
        value: declared,
        reason: "negative Arrow body length",
    })?;
    let body = body.get(..body_len).ok_or(Error::Truncated {
        field: field::ARROW_BODY,
        position: 0,
        needed: body_len,
        available: body.len(),
    })?;
    let record_count = i32::try_from(rb.length())
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| invalid(format!("a record batch of {} rows", rb.length())))?;
    ipc::check_record_batch(&rb, body, 0, invalid)?;
    let mut out = Vec::with_capacity(HEADER_LEN + ipc::PREFIX_LEN + message.len() + 8 + body_len);
    out.resize(HEADER_LEN, 0);
    ipc::write_message(&mut out, 0, message, body)?;
    seal(&mut out, 0, record_count, meta, true)?;
    Ok(out)
}

/// The schema a flatbuffer `Message` holding a `Schema` carries (the first message of an Arrow
/// Flight stream), or [`Error::InvalidArrowMessage`] for anything else.
pub fn schema_from_message(message: &[u8]) -> Result<Schema> {
    crate::ipc_stream::schema_of(message, 0, "expected a schema, found")
}

impl<B: BatchBuf> BatchView<B> {
    /// Where the Arrow message's flatbuffer (padding included) and body lie in the batch, or
    /// `None` for a header-only zero-row batch. Only the framing is checked (every range lies in
    /// the batch): this is for sending a stored batch on, which was validated when it was
    /// appended and whose block the reader checked; run [`BatchView::validate`] first on bytes
    /// from anywhere else. The flatbuffer carries the rows' own schema version (the reader
    /// supplies the schema).
    pub fn message_parts(&self) -> Result<Option<(Range<usize>, Range<usize>)>> {
        Ok(self.message()?.map(|layout| {
            (
                layout.meta_start..layout.meta_start + layout.meta_len,
                layout.body_start..layout.body_start + layout.body_len,
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;
    use crate::encode::encode_batch;

    fn rows() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("msg", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("ccc")])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_batch_split_into_its_message_parts_and_assembled_again_is_the_same_batch() {
        let rows = rows();
        let meta = BatchMeta::new(3).with_writer(7, 11);
        let stored = encode_batch(&rows, None, meta).unwrap();
        let view = BatchView::new(&stored[..]).unwrap();
        let (message, body) = view.message_parts().unwrap().unwrap();
        let rebuilt = batch_from_message(meta, &stored[message], &stored[body]).unwrap();
        assert_eq!(rebuilt, stored);
        let view = BatchView::new(&rebuilt[..]).unwrap();
        assert_eq!(view.record_count(), 3);
        assert_eq!((view.writer_id(), view.batch_sequence()), (7, 11));
        let (decoded, _) = view.decode(&rows.schema()).unwrap();
        assert_eq!(decoded, rows);
    }

    #[test]
    fn a_padded_body_is_cut_and_a_short_one_or_a_forged_message_refused() {
        let stored = encode_batch(&rows(), None, BatchMeta::new(0)).unwrap();
        let view = BatchView::new(&stored[..]).unwrap();
        let (message, body) = view.message_parts().unwrap().unwrap();
        let (message, body) = (&stored[message], &stored[body]);
        let mut padded = body.to_vec();
        padded.extend_from_slice(&[0; 8]);
        assert_eq!(
            batch_from_message(BatchMeta::new(0), message, &padded).unwrap(),
            stored
        );
        let short = batch_from_message(BatchMeta::new(0), message, &body[..body.len() - 1]);
        assert!(matches!(short, Err(Error::Truncated { .. })), "{short:?}");
        for garbage in [&b""[..], &[0xff; 64][..], &message[..message.len() / 2]] {
            let e = batch_from_message(BatchMeta::new(0), garbage, body).unwrap_err();
            assert!(
                matches!(e, Error::InvalidArrowMessage { .. }),
                "{garbage:?}: {e}"
            );
        }
    }

    #[test]
    fn a_schema_message_gives_its_schema_and_a_batch_message_is_refused() {
        let rows = rows();
        let options = arrow_ipc::writer::IpcWriteOptions::default();
        let encoded = arrow_ipc::writer::IpcDataGenerator::default()
            .schema_to_bytes_with_dictionary_tracker(
                &rows.schema(),
                &mut arrow_ipc::writer::DictionaryTracker::new(false),
                &options,
            );
        assert_eq!(
            schema_from_message(&encoded.ipc_message).unwrap(),
            *rows.schema()
        );
        let stored = encode_batch(&rows, None, BatchMeta::new(0)).unwrap();
        let view = BatchView::new(&stored[..]).unwrap();
        let (message, _) = view.message_parts().unwrap().unwrap();
        let e = schema_from_message(&stored[message]).unwrap_err();
        assert!(e.to_string().contains("RecordBatch"), "{e}");
        assert!(schema_from_message(b"junk").is_err());
    }

    #[test]
    fn a_header_only_batch_has_no_message_parts() {
        let empty = RecordBatch::new_empty(rows().schema());
        let stored = encode_batch(&empty, None, BatchMeta::new(0)).unwrap();
        let view = BatchView::new(&stored[..]).unwrap();
        assert_eq!(view.message_parts().unwrap(), None);
    }
}
