//! Targets `ndjson_rows`, `arrow_rows` and `table_schema`: the bodies a client sends the HTTP API,
//! decoded with the node's own functions, then taken where the node takes them (encoded into a
//! mink batch, decoded back as a read does, rendered in every read format).

use std::io::Cursor;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use mink_codec::BatchMeta;
use mink_server::format::schema::{JsonField, JsonSchema};
use mink_server::format::{
    RowBounds, arrow_to_rows, decode_batch, encode_rows, ndjson_to_rows, rows_to_arrow,
    rows_to_json_array, rows_to_ndjson,
};

/// Rows per batch the node accepts (the default of `limits.max_rows_per_batch`); a body over it is
/// refused before it is encoded, so the harness stops there too.
const MAX_ROWS: usize = 1 << 20;

/// A table schema with a column of most kinds a user types, as the node stores it (its canonical
/// JSON parsed back).
pub fn rows_schema() -> SchemaRef {
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("msg", DataType::Utf8, true),
        Field::new("x", DataType::Float64, true),
        Field::new("ok", DataType::Boolean, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("d", DataType::Decimal128(10, 2), true),
        Field::new("raw", DataType::Binary, true),
        Field::new("tags", DataType::new_list(DataType::Utf8, true), true),
        Field::new(
            "pos",
            DataType::Struct(Fields::from(vec![
                Field::new("lat", DataType::Float64, false),
                Field::new("n", DataType::UInt32, true),
            ])),
            true,
        ),
    ]);
    JsonSchema::parse_stored(&JsonSchema::canonical(&schema)).unwrap_or_else(|_| Arc::new(schema))
}

/// An NDJSON append body.
pub fn run_ndjson(data: &[u8]) {
    let schema = rows_schema();
    if let Ok(rows) = ndjson_to_rows(&schema, data, RowBounds::default()) {
        appended(&schema, &rows);
    }
}

/// An Arrow IPC append body: on the fixed table schema, and on a table whose schema is the
/// stream's own (when that schema is one a table can have).
pub fn run_arrow(data: &[u8]) {
    let schema = rows_schema();
    if let Ok(rows) = arrow_to_rows(&schema, data, RowBounds::default()) {
        appended(&schema, &rows);
    }
    let Ok(reader) = arrow_ipc::reader::StreamReader::try_new(Cursor::new(data), None) else {
        return;
    };
    let Ok(own) = JsonSchema::parse_stored(&JsonSchema::canonical(&reader.schema())) else {
        return;
    };
    if let Ok(rows) = arrow_to_rows(&own, data, RowBounds::default()) {
        appended(&own, &rows);
    }
}

/// A schema in a create-table or add-schema body; text that is no JSON object is taken as the
/// type of one column.
pub fn run_schema(data: &[u8]) {
    let parsed = if data.first() == Some(&b'{') {
        serde_json::from_slice::<JsonSchema>(data).ok()
    } else {
        std::str::from_utf8(data).ok().map(|text| JsonSchema {
            fields: vec![JsonField {
                name: "c".to_owned(),
                data_type: text.to_owned(),
                nullable: true,
            }],
        })
    };
    let Some(schema) = parsed.and_then(|s| s.to_arrow().ok()) else {
        return;
    };
    // The node stores the canonical text and parses it at every open: it must give the same schema.
    let stored = JsonSchema::canonical(&schema);
    let back = JsonSchema::parse_stored(&stored).expect("a stored schema parses back");
    assert_eq!(back, schema, "stored as {stored}");
    // The first thing a user does with a new table: append rows of nulls.
    if let Ok(rows) = ndjson_to_rows(&schema, b"{}\n{}\n", RowBounds::default()) {
        appended(&schema, &rows);
    }
}

/// What the node does with rows it accepted: encode them into a mink batch, which every read
/// must decode back to the same rows, and render them in each read format.
fn appended(schema: &SchemaRef, rows: &RecordBatch) {
    assert!(rows.num_rows() > 0, "an accepted body holds rows");
    assert_eq!(rows.schema(), *schema);
    if rows.num_rows() > MAX_ROWS {
        return;
    }
    let Ok(batch) = encode_rows(rows, BatchMeta::new(1), None) else {
        return;
    };
    let decoded = decode_batch(&batch, schema)
        .expect("an encoded batch decodes")
        .expect("an encoded batch holds rows");
    // Debug text, not ==: floats may be NaN.
    assert_eq!(format!("{decoded:?}"), format!("{rows:?}"));
    // A table with compression stores the same rows compressed.
    let zstd = Some(mink_codec::Compression::ZSTD);
    if let Ok(compressed) = encode_rows(rows, BatchMeta::new(1), zstd) {
        let back = decode_batch(&compressed, schema)
            .expect("a compressed batch decodes")
            .expect("a compressed batch holds rows");
        assert_eq!(format!("{back:?}"), format!("{rows:?}"));
    }
    let mut ndjson = Vec::new();
    let _ = rows_to_ndjson(&decoded, &mut ndjson);
    let _ = rows_to_json_array(&decoded);
    if let Ok(ipc) = rows_to_arrow(schema, std::slice::from_ref(&decoded)) {
        let back =
            arrow_to_rows(schema, &ipc, RowBounds::default()).expect("an Arrow read appends back");
        assert_eq!(format!("{back:?}"), format!("{rows:?}"));
    }
}

/// NDJSON bodies: rows with every column, nulls, nested values, and a bad row.
pub fn ndjson_seeds() -> Vec<Vec<u8>> {
    [
        &b"{\"id\":1,\"msg\":\"hello\"}\n{\"id\":2,\"msg\":\"world\"}\n"[..],
        b"{\"id\":-9,\"msg\":null,\"x\":1.5e300,\"ok\":true,\"ts\":1700000000000,\"d\":\"12.34\",\
          \"raw\":\"AAEC\",\"tags\":[\"a\",null,\"c\"],\"pos\":{\"lat\":-0.0,\"n\":4294967295}}\n",
        b"{\"id\":9223372036854775807,\"tags\":[]}\r\n\n{\"id\":0,\"pos\":null}",
        b"{\"id\":1,\"x\":\"NaN\"}\n{\"id\":[2]}\n",
    ]
    .iter()
    .map(|s| s.to_vec())
    .collect()
}

/// Arrow IPC bodies: the NDJSON seeds' rows as streams, one of two batches.
pub fn arrow_seeds() -> Vec<Vec<u8>> {
    let schema = rows_schema();
    let rows: Vec<RecordBatch> = ndjson_seeds()
        .iter()
        .filter_map(|body| ndjson_to_rows(&schema, body, RowBounds::default()).ok())
        .collect();
    let mut out: Vec<Vec<u8>> = rows
        .iter()
        .filter_map(|r| rows_to_arrow(&schema, std::slice::from_ref(r)).ok())
        .collect();
    out.extend(rows_to_arrow(&schema, &rows).ok());
    out
}

/// Schemas as users write them, and bare type texts.
pub fn schema_seeds() -> Vec<Vec<u8>> {
    [
        r#"{"fields":[{"name":"id","type":"int64","nullable":false},{"name":"msg","type":"utf8"}]}"#,
        r#"{"fields":[{"name":"ts","type":"Timestamp(ms)"},{"name":"d","type":"Decimal128(10, 2)"},{"name":"l","type":"List(Int32)"}]}"#,
        r#"{"fields":[{"name":"f","type":"FixedSizeBinary(16)"},{"name":"s","type":"Struct(\"a\": Int32, \"b\": Utf8)"}]}"#,
        "Map(\"entries\": Struct(\"key\": Utf8, \"value\": Int64), false)",
        "Dictionary(Int32, Utf8)",
        "FixedSizeList(4 x Float32)",
        "Timestamp(Nanosecond, Some(\"+02:00\"))",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_accepted() {
        let schema = rows_schema();
        for body in &ndjson_seeds()[..3] {
            ndjson_to_rows(&schema, body, RowBounds::default()).unwrap();
        }
        assert!(ndjson_to_rows(&schema, &ndjson_seeds()[3], RowBounds::default()).is_err());
        // One stream per NDJSON seed that parses, and one of all of them.
        assert_eq!(arrow_seeds().len(), 4);
        for seed in arrow_seeds() {
            arrow_to_rows(&schema, &seed, RowBounds::default()).unwrap();
        }
        for seed in schema_seeds() {
            run_schema(&seed);
        }
    }
}
