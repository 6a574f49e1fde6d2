//! The rows the items write: a two-column table of about 1 KiB per row, as NDJSON or as mink
//! batches.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use mink_codec::{BatchMeta, encode_batch};

use crate::{Error, SCHEMA_ID};

pub(crate) fn kv_fields() -> serde_json::Value {
    serde_json::json!([{"name": "id", "type": "int64"}, {"name": "msg", "type": "utf8"}])
}

/// One NDJSON row of about 1 KiB.
pub(crate) fn ndjson_row(i: u64) -> Bytes {
    Bytes::from(format!("{{\"id\":{i},\"msg\":\"{}\"}}\n", "x".repeat(1000)))
}

pub(crate) fn kv_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, true),
    ]))
}

/// A mink batch of `rows` rows of about 1 KiB each (no writer id).
pub(crate) fn mink_batch(rows: usize) -> Result<Bytes, Error> {
    let ids: Vec<i64> = (0..rows as i64).collect();
    let msgs: Vec<String> = ids
        .iter()
        .map(|i| format!("{i:08}{}", "m".repeat(1000)))
        .collect();
    let batch = RecordBatch::try_new(
        kv_schema(),
        vec![
            Arc::new(Int64Array::from(ids)) as ArrayRef,
            Arc::new(StringArray::from(msgs)),
        ],
    )
    .map_err(|e| format!("build rows: {e}"))?;
    encode_batch(&batch, None, BatchMeta::new(SCHEMA_ID))
        .map(Bytes::from)
        .map_err(|e| format!("encode rows: {e}"))
}
