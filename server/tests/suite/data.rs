//! The rows the suite writes and how it reads them back: a two-column table (`id` int64, `msg`
//! utf8) as NDJSON, Arrow record batches or mink batches, and the wall clock for timestamps.

use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use mink_codec::{BatchMeta, Encoder};
use serde_json::Value;

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, true),
    ]))
}

pub fn rows(ids: &[i64]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from(
                ids.iter().map(|i| format!("m{i}")).collect::<Vec<_>>(),
            )),
        ],
    )
    .expect("rows")
}

pub fn mink_batch(ids: &[i64], meta: BatchMeta) -> Vec<u8> {
    Encoder::new()
        .encode(&rows(ids), None, meta)
        .expect("encode")
}

pub fn ndjson(ids: &[i64]) -> String {
    ids.iter()
        .map(|i| format!("{{\"id\":{i},\"msg\":\"m{i}\"}}\n"))
        .collect()
}

pub fn ids_of(rows: &[Value]) -> Vec<i64> {
    rows.iter().map(|r| r["id"].as_i64().expect("id")).collect()
}

/// Reads an Arrow IPC stream answer.
pub async fn arrow_reader(
    response: reqwest::Response,
) -> arrow_ipc::reader::StreamReader<std::io::Cursor<impl AsRef<[u8]>>> {
    arrow_ipc::reader::StreamReader::try_new(
        std::io::Cursor::new(response.bytes().await.unwrap()),
        None,
    )
    .unwrap()
}

pub fn chrono_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
