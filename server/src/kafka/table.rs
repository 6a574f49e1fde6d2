//! Tables as Kafka topics: the Kafka schema, which tables have it, and rows to records and back
//! (docs/kafka.md, "Mapping").

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, ListBuilder, StringBuilder, StructBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMillisecondType;
use arrow_array::{Array, ArrayRef, RecordBatch, TimestampMillisecondArray, new_null_array};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;

use super::records::Record;

/// The fields of a header.
fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Binary, true),
    ])
}

/// The schema of a table created through Kafka (CreateTopics, the next step, creates with it).
pub(crate) fn kafka_schema() -> Schema {
    let header = Field::new("item", DataType::Struct(header_fields()), false);
    Schema::new(vec![
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new("headers", DataType::List(Arc::new(header)), false),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ])
}

/// Where a Kafka table keeps each part of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KafkaColumns {
    key: usize,
    value: usize,
    headers: usize,
    timestamp: usize,
}

impl KafkaColumns {
    /// The columns of `schema` if it is a Kafka table: the four columns with their types, and
    /// any other column nullable (a produced record fills it with null).
    pub(crate) fn of(schema: &Schema) -> Option<KafkaColumns> {
        let find = |name: &str, fits: &dyn Fn(&DataType) -> bool| {
            schema
                .index_of(name)
                .ok()
                .filter(|i| fits(schema.field(*i).data_type()))
        };
        let columns = KafkaColumns {
            key: find("key", &|t| *t == DataType::Binary)?,
            value: find("value", &|t| *t == DataType::Binary)?,
            headers: find("headers", &|t| match t {
                DataType::List(item) => match item.data_type() {
                    DataType::Struct(fields) => {
                        fields.len() == 2
                            && fields[0].name() == "key"
                            && *fields[0].data_type() == DataType::Utf8
                            && fields[1].name() == "value"
                            && *fields[1].data_type() == DataType::Binary
                    }
                    _ => false,
                },
                _ => false,
            })?,
            timestamp: find("timestamp", &|t| {
                *t == DataType::Timestamp(TimeUnit::Millisecond, None)
            })?,
        };
        let ours = [
            columns.key,
            columns.value,
            columns.headers,
            columns.timestamp,
        ];
        let others_nullable = schema
            .fields()
            .iter()
            .enumerate()
            .all(|(i, f)| ours.contains(&i) || f.is_nullable());
        others_nullable.then_some(columns)
    }

    /// Records as rows of `schema` (whose columns these are).
    pub(crate) fn rows(
        &self,
        schema: &SchemaRef,
        records: &[Record],
    ) -> Result<RecordBatch, String> {
        let mut key = BinaryBuilder::new();
        let mut value = BinaryBuilder::new();
        let Some(DataType::List(item)) = schema.fields().get(self.headers).map(|f| f.data_type())
        else {
            return Err("the headers column is not a list".to_owned());
        };
        let header = StructBuilder::from_fields(header_fields(), 0);
        let mut headers = ListBuilder::new(header).with_field(item.clone());
        let mut timestamps = Vec::with_capacity(records.len());
        for r in records {
            key.append_option(r.key.as_deref());
            value.append_option(r.value.as_deref());
            let entries = headers.values();
            for (k, v) in &r.headers {
                entries
                    .field_builder::<StringBuilder>(0)
                    .expect("header key builder")
                    .append_value(k);
                entries
                    .field_builder::<BinaryBuilder>(1)
                    .expect("header value builder")
                    .append_option(v.as_deref());
                entries.append(true);
            }
            headers.append(true);
            timestamps.push(r.timestamp);
        }
        let mut columns: Vec<ArrayRef> = schema
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), records.len()))
            .collect();
        columns[self.key] = Arc::new(key.finish());
        columns[self.value] = Arc::new(value.finish());
        columns[self.headers] = Arc::new(headers.finish());
        columns[self.timestamp] = Arc::new(TimestampMillisecondArray::from(timestamps));
        RecordBatch::try_new(schema.clone(), columns).map_err(|e| e.to_string())
    }

    /// Rows of this table as records.
    pub(crate) fn records(&self, rows: &RecordBatch) -> Vec<Record> {
        let key = rows.column(self.key).as_binary::<i32>();
        let value = rows.column(self.value).as_binary::<i32>();
        let headers = rows.column(self.headers).as_list::<i32>();
        let timestamps = rows
            .column(self.timestamp)
            .as_primitive::<TimestampMillisecondType>();
        let bytes = |a: &arrow_array::BinaryArray, i: usize| {
            a.is_valid(i).then(|| Bytes::copy_from_slice(a.value(i)))
        };
        (0..rows.num_rows())
            .map(|i| {
                let mut pairs = Vec::new();
                if headers.is_valid(i) {
                    let entries = headers.value(i);
                    let entries = entries.as_struct();
                    let k = entries.column(0).as_string::<i32>();
                    let v = entries.column(1).as_binary::<i32>();
                    for j in 0..entries.len() {
                        pairs.push((k.value(j).to_owned(), bytes(v, j)));
                    }
                }
                Record {
                    timestamp: if timestamps.is_valid(i) {
                        timestamps.value(i)
                    } else {
                        0
                    },
                    key: bytes(key, i),
                    value: bytes(value, i),
                    headers: pairs,
                }
            })
            .collect()
    }
}

/// Rows of any other table as records: the value is the row as JSON, stamped `timestamp`; the
/// key is column `key` of the row when the table names one (`kafka_key`): its bytes for binary
/// and string columns, its JSON text for any other type, null when the value is null.
pub(crate) fn json_records(
    rows: &RecordBatch,
    timestamp: i64,
    key: Option<usize>,
) -> Result<Vec<Record>, String> {
    let mut writer = arrow_json::LineDelimitedWriter::new(Vec::new());
    writer.write(rows).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    let text = Bytes::from(writer.into_inner());
    let keys = key.map(|k| {
        (
            k,
            rows.column(k).clone(),
            rows.schema().field(k).name().clone(),
        )
    });
    let mut records = Vec::with_capacity(rows.num_rows());
    let mut start = 0;
    for (i, byte) in text.iter().enumerate() {
        if *byte == b'\n' {
            let value = text.slice(start..i);
            let row = records.len();
            let key = match &keys {
                None => None,
                Some((_, column, name)) => key_of(column, row, name, &value),
            };
            records.push(Record {
                timestamp,
                key,
                value: Some(value),
                headers: Vec::new(),
            });
            start = i + 1;
        }
    }
    Ok(records)
}

/// The key of `row` from `column` (named `name` in the row's JSON text `json`).
fn key_of(column: &ArrayRef, row: usize, name: &str, json: &[u8]) -> Option<Bytes> {
    if column.is_null(row) {
        return None;
    }
    match column.data_type() {
        DataType::Utf8 => Some(Bytes::copy_from_slice(
            column.as_string::<i32>().value(row).as_bytes(),
        )),
        DataType::LargeUtf8 => Some(Bytes::copy_from_slice(
            column.as_string::<i64>().value(row).as_bytes(),
        )),
        DataType::Binary => Some(Bytes::copy_from_slice(column.as_binary::<i32>().value(row))),
        DataType::LargeBinary => Some(Bytes::copy_from_slice(column.as_binary::<i64>().value(row))),
        _ => {
            let parsed: serde_json::Value = serde_json::from_slice(json).ok()?;
            Some(Bytes::from(parsed.get(name)?.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record {
                timestamp: 5,
                key: Some(Bytes::from_static(b"k")),
                value: None,
                headers: vec![
                    ("a".into(), Some(Bytes::from_static(b"1"))),
                    ("a".into(), None),
                ],
            },
            Record {
                timestamp: 6,
                key: None,
                value: Some(Bytes::from_static(b"v")),
                headers: vec![],
            },
        ]
    }

    #[test]
    fn records_become_rows_and_come_back_the_same() {
        let schema = Arc::new(kafka_schema());
        let columns = KafkaColumns::of(&schema).expect("the Kafka schema is a Kafka table");
        let rows = columns.rows(&schema, &sample()).unwrap();
        assert_eq!(rows.num_rows(), 2);
        assert_eq!(columns.records(&rows), sample());
    }

    #[test]
    fn a_table_with_extra_nullable_columns_is_a_kafka_table_and_others_are_not() {
        let mut fields: Vec<Field> = kafka_schema()
            .fields()
            .iter()
            .map(|f| (**f).clone())
            .collect();
        fields.insert(0, Field::new("extra", DataType::Int64, true));
        let wider = Arc::new(Schema::new(fields.clone()));
        let columns = KafkaColumns::of(&wider).unwrap();
        let rows = columns.rows(&wider, &sample()).unwrap();
        assert_eq!(rows.column(0).null_count(), 2);
        fields[0] = Field::new("extra", DataType::Int64, false);
        assert!(KafkaColumns::of(&Schema::new(fields)).is_none());
        let plain = Schema::new(vec![Field::new("value", DataType::Utf8, true)]);
        assert!(KafkaColumns::of(&plain).is_none());
    }

    #[test]
    fn other_rows_are_json_values() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let rows = RecordBatch::try_new(
            schema,
            vec![Arc::new(arrow_array::Int64Array::from(vec![1, 2]))],
        )
        .unwrap();
        let records = json_records(&rows, 77, None).unwrap();
        let values: Vec<_> = records.iter().map(|r| r.value.clone().unwrap()).collect();
        assert_eq!(
            values,
            vec![Bytes::from("{\"n\":1}"), Bytes::from("{\"n\":2}")]
        );
        assert!(records.iter().all(|r| r.timestamp == 77 && r.key.is_none()));
    }

    #[test]
    fn a_named_key_column_gives_each_record_its_key() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, true),
            Field::new("n", DataType::Int64, false),
        ]));
        let rows = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(arrow_array::StringArray::from(vec![Some("a"), None])),
                Arc::new(arrow_array::Int64Array::from(vec![1, 2])),
            ],
        )
        .unwrap();
        let by_string = json_records(&rows, 0, Some(0)).unwrap();
        let keys: Vec<_> = by_string.iter().map(|r| r.key.clone()).collect();
        assert_eq!(keys, vec![Some(Bytes::from("a")), None]);
        let by_number = json_records(&rows, 0, Some(1)).unwrap();
        let keys: Vec<_> = by_number.iter().map(|r| r.key.clone()).collect();
        assert_eq!(keys, vec![Some(Bytes::from("1")), Some(Bytes::from("2"))]);
    }
}
