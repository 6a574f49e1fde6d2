//! A stream's messages: a request body split into messages, messages made rows (one per
//! message, the newest `Stream-Seq` on the last row, a null-data row to close), and stored
//! rows read back as messages (docs/durable-streams.md, "A stream is a table").

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch, StringArray};
use bytes::Bytes;
use serde_json::value::RawValue;

use super::config::{self, Mode};
use crate::error::{ApiError, ApiResult};
use crate::format;

/// The messages of a request body: JSON values (an array flattened one level), UTF-8 text, or
/// bytes. An empty body has none; so has a JSON `[]`.
pub(crate) fn split(mode: Mode, body: &Bytes) -> ApiResult<Vec<Bytes>> {
    if body.is_empty() {
        return Ok(Vec::new());
    }
    match mode {
        Mode::Binary => Ok(vec![body.clone()]),
        Mode::Text => {
            std::str::from_utf8(body).map_err(|e| {
                ApiError::bad_request(format!("the body of a text stream is not UTF-8: {e}"))
            })?;
            Ok(vec![body.clone()])
        }
        Mode::Json => {
            let text = std::str::from_utf8(body)
                .map_err(|e| ApiError::bad_request(format!("the body is not UTF-8 JSON: {e}")))?;
            let invalid =
                |e: serde_json::Error| ApiError::bad_request(format!("invalid JSON: {e}"));
            if text.trim_start().starts_with('[') {
                let values: Vec<&RawValue> = serde_json::from_str(text).map_err(invalid)?;
                Ok(values
                    .into_iter()
                    .map(|v| body.slice_ref(v.get().as_bytes()))
                    .collect())
            } else {
                let value: &RawValue = serde_json::from_str(text).map_err(invalid)?;
                Ok(vec![body.slice_ref(value.get().as_bytes())])
            }
        }
    }
}

/// The rows of one append: a row per message, `stream_seq` (the newest the stream accepted,
/// this request's if it brought one) on the last row, and the close marker (null data) last
/// when `close`.
pub(crate) fn rows(
    mode: Mode,
    messages: &[Bytes],
    stream_seq: Option<&str>,
    close: bool,
) -> ApiResult<RecordBatch> {
    let count = messages.len() + usize::from(close);
    let mut data: Vec<Option<&[u8]>> = messages.iter().map(|m| Some(m.as_ref())).collect();
    if close {
        data.push(None);
    }
    let data: ArrayRef = match mode {
        Mode::Binary => Arc::new(BinaryArray::from_iter(data)),
        Mode::Json | Mode::Text => {
            // Checked UTF-8 by `split`.
            let text = data
                .into_iter()
                .map(|d| d.map(|b| std::str::from_utf8(b).unwrap_or_default()));
            Arc::new(StringArray::from_iter(text))
        }
    };
    let seqs: ArrayRef = Arc::new(StringArray::from_iter(
        (0..count).map(|i| if i + 1 == count { stream_seq } else { None }),
    ));
    RecordBatch::try_new(config::schema(mode), vec![data, seqs]).map_err(|e| ApiError::Internal {
        message: format!("stream rows: {e}"),
    })
}

/// The rows of one stored batch of a stream, as messages.
pub(crate) struct Stored {
    /// The offset of the first row.
    pub(crate) base_offset: u64,
    data: ArrayRef,
    seqs: Option<StringArray>,
}

impl Stored {
    /// Decodes a stored batch of a stream's table (`None`: a batch without rows).
    pub(crate) fn decode(batch: &Bytes, mode: Mode) -> ApiResult<Option<Stored>> {
        let schema = config::schema(mode);
        let Some(rows) = format::decode_batch(batch, &schema)? else {
            return Ok(None);
        };
        let seqs = rows
            .column_by_name(config::STREAM_SEQ)
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .cloned();
        let data =
            rows.column_by_name(config::DATA)
                .cloned()
                .ok_or_else(|| ApiError::Internal {
                    message: "a stream's batch has no data column".to_owned(),
                })?;
        Ok(Some(Stored {
            base_offset: format::base_offset_of(batch)?,
            data,
            seqs,
        }))
    }

    /// Rows in the batch.
    pub(crate) fn len(&self) -> usize {
        self.data.len()
    }

    /// The offset after the batch.
    pub(crate) fn end(&self) -> u64 {
        self.base_offset + self.len() as u64
    }

    /// The bytes of row `i`; `None` for the close marker.
    pub(crate) fn message(&self, i: usize) -> Option<&[u8]> {
        if self.data.is_null(i) {
            return None;
        }
        if let Some(b) = self.data.as_any().downcast_ref::<BinaryArray>() {
            return Some(b.value(i));
        }
        self.data
            .as_any()
            .downcast_ref::<StringArray>()
            .map(|s| s.value(i).as_bytes())
    }

    /// Whether the batch ends with the close marker.
    pub(crate) fn closes(&self) -> bool {
        self.len() > 0 && self.message(self.len() - 1).is_none()
    }

    /// The `Stream-Seq` on the batch's last row, if any.
    pub(crate) fn last_seq(&self) -> Option<String> {
        let seqs = self.seqs.as_ref()?;
        let last = seqs.len().checked_sub(1)?;
        (!seqs.is_null(last)).then(|| seqs.value(last).to_owned())
    }
}

/// A read's messages gathered into one body.
pub(crate) struct Body {
    mode: Mode,
    out: Vec<u8>,
    count: usize,
}

impl Body {
    pub(crate) fn new(mode: Mode) -> Body {
        Body {
            mode,
            out: Vec::new(),
            count: 0,
        }
    }

    /// Adds a message.
    pub(crate) fn push(&mut self, message: &[u8]) {
        if self.mode == Mode::Json {
            self.out.push(if self.count == 0 { b'[' } else { b',' });
        }
        self.out.extend_from_slice(message);
        self.count += 1;
    }

    /// Whether no message was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The body: the messages concatenated, or a JSON array of them.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        if self.mode == Mode::Json {
            if self.count == 0 {
                self.out.push(b'[');
            }
            self.out.push(b']');
        }
        self.out
    }
}

/// Messages read from `from`, and the offset after them.
pub(crate) struct Read {
    pub(crate) body: Body,
    pub(crate) next: u64,
}

/// Reads about `max_bytes` of stored batches from `from` and gathers their messages: one read
/// of the log after another (a read may stop early, at the end of what one tier holds) until
/// the bytes are read or the tail is reached.
pub(crate) async fn read_messages(
    core: &crate::core::NodeCore,
    log: &dyn crate::bucket_log::BucketLog,
    mode: Mode,
    from: u64,
    max_bytes: usize,
) -> ApiResult<Read> {
    let mut body = Body::new(mode);
    let mut next = from;
    let mut bytes = 0;
    loop {
        let at = next;
        let chunk = core
            .read(log, at, None, None, max_bytes.saturating_sub(bytes).max(1))
            .await?;
        for batch in &chunk.batches {
            bytes += batch.len();
            let Some(stored) = Stored::decode(batch, mode)? else {
                next = next.max(crate::format::next_offset_of(batch)?);
                continue;
            };
            for_each_message(&stored, from, |m| body.push(m));
            next = next.max(stored.end());
        }
        next = next.max(chunk.next_offset);
        if chunk.batches.is_empty()
            || next <= at
            || bytes >= max_bytes
            || next >= log.offsets().high_watermark
        {
            return Ok(Read { body, next });
        }
    }
}

/// Calls `f` with each message of `stored` at or after `from` (the close marker is none).
fn for_each_message(stored: &Stored, from: u64, mut f: impl FnMut(&[u8])) {
    let skip = usize::try_from(from.saturating_sub(stored.base_offset)).unwrap_or(usize::MAX);
    for i in skip..stored.len() {
        if let Some(m) = stored.message(i) {
            f(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(messages: &[Bytes]) -> Vec<&str> {
        messages
            .iter()
            .map(|m| std::str::from_utf8(m).unwrap())
            .collect()
    }

    #[test]
    fn json_bodies_flatten_one_level_and_keep_the_text() {
        let split =
            |s: &'static str| split(Mode::Json, &Bytes::from(s)).map(|m| texts(&m).join("|"));
        assert_eq!(split(r#"{"a": 1.0}"#).unwrap(), r#"{"a": 1.0}"#);
        assert_eq!(
            split(r#" [ {"a":1} , {"b":2} ] "#).unwrap(),
            r#"{"a":1}|{"b":2}"#
        );
        assert_eq!(split("[[1,2],[3,4]]").unwrap(), "[1,2]|[3,4]");
        assert_eq!(split("[[[1,2,3]]]").unwrap(), "[[1,2,3]]");
        assert_eq!(split("[]").unwrap(), "");
        assert_eq!(split("\"x\"").unwrap(), "\"x\"");
        assert!(split("{").is_err());
        assert!(split("[1,]").is_err());
        assert!(split("1 2").is_err());
    }

    #[test]
    fn rows_round_trip_with_the_seq_and_the_close_marker() {
        let messages = vec![Bytes::from_static(b"\x00\xff"), Bytes::from_static(b"x")];
        let rows = rows(Mode::Binary, &messages, Some("007"), true).unwrap();
        let batch = format::encode_rows(&rows, mink_codec::BatchMeta::new(1), None).unwrap();
        let stored = Stored::decode(&batch, Mode::Binary).unwrap().unwrap();
        assert_eq!(stored.len(), 3);
        assert_eq!(stored.message(0), Some(&b"\x00\xff"[..]));
        assert_eq!(stored.message(1), Some(&b"x"[..]));
        assert!(stored.closes());
        assert_eq!(stored.last_seq().as_deref(), Some("007"));
        let open = rows_of(Mode::Text, &[Bytes::from_static(b"hi")], None);
        assert!(!open.closes());
        assert_eq!(open.last_seq(), None);
        assert!(split(Mode::Text, &Bytes::from_static(b"\xff")).is_err());
    }

    fn rows_of(mode: Mode, messages: &[Bytes], seq: Option<&str>) -> Stored {
        let rows = rows(mode, messages, seq, false).unwrap();
        let batch = format::encode_rows(&rows, mink_codec::BatchMeta::new(1), None).unwrap();
        Stored::decode(&batch, mode).unwrap().unwrap()
    }

    #[test]
    fn bodies_concatenate_or_make_a_json_array() {
        let mut json = Body::new(Mode::Json);
        assert_eq!(Body::new(Mode::Json).finish(), b"[]");
        json.push(b"{\"a\":1}");
        json.push(b"2");
        assert_eq!(json.finish(), b"[{\"a\":1},2]");
        let mut text = Body::new(Mode::Text);
        text.push(b"ab");
        text.push(b"c");
        assert_eq!(text.finish(), b"abc");
    }
}
