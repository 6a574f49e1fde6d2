//! Table schemas as JSON, the way a user types them with curl:
//!
//! ```json
//! {"fields": [
//!   {"name": "id",   "type": "int64", "nullable": false},
//!   {"name": "msg",  "type": "utf8"},
//!   {"name": "ts",   "type": "Timestamp(ms)"}
//! ]}
//! ```
//!
//! `type` is a short name (`bool`, `int8`..`int64`, `uint8`..`uint64`, `float32`, `float64`,
//! `utf8`/`string`, `large_utf8`, `binary`, `large_binary`, `date32`, `date64`, `timestamp_ms`,
//! `timestamp_us`, `timestamp_ns`) or any Arrow data type in Arrow's own text form (`Int64`,
//! `Decimal128(10, 2)`, `List(Int32)`...). `nullable` defaults to true. The canonical form of
//! this JSON is what the metadata stores as a table's schema version.

use std::str::FromStr;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

/// A schema as the API spells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonSchema {
    /// The columns, in order.
    pub fields: Vec<JsonField>,
}

/// One column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonField {
    /// Column name.
    pub name: String,
    /// Arrow data type (short name or Arrow's text form).
    #[serde(rename = "type")]
    pub data_type: String,
    /// Whether the column may hold nulls. Default true.
    #[serde(default = "yes")]
    pub nullable: bool,
}

fn yes() -> bool {
    true
}

/// A short type name and how to make its type.
type ShortName = (&'static str, fn() -> DataType);

const SHORT_NAMES: &[ShortName] = &[
    ("bool", || DataType::Boolean),
    ("boolean", || DataType::Boolean),
    ("int8", || DataType::Int8),
    ("int16", || DataType::Int16),
    ("int32", || DataType::Int32),
    ("int64", || DataType::Int64),
    ("uint8", || DataType::UInt8),
    ("uint16", || DataType::UInt16),
    ("uint32", || DataType::UInt32),
    ("uint64", || DataType::UInt64),
    ("float32", || DataType::Float32),
    ("float64", || DataType::Float64),
    ("utf8", || DataType::Utf8),
    ("string", || DataType::Utf8),
    ("large_utf8", || DataType::LargeUtf8),
    ("binary", || DataType::Binary),
    ("large_binary", || DataType::LargeBinary),
    ("date32", || DataType::Date32),
    ("date64", || DataType::Date64),
    ("timestamp_ms", || {
        DataType::Timestamp(TimeUnit::Millisecond, None)
    }),
    ("timestamp_us", || {
        DataType::Timestamp(TimeUnit::Microsecond, None)
    }),
    ("timestamp_ns", || {
        DataType::Timestamp(TimeUnit::Nanosecond, None)
    }),
];

fn parse_type(text: &str) -> Result<DataType, ApiError> {
    let lower = text.trim().to_ascii_lowercase();
    if let Some((_, make)) = SHORT_NAMES.iter().find(|(name, _)| *name == lower) {
        return Ok(make());
    }
    DataType::from_str(text.trim()).map_err(|e| {
        ApiError::invalid(
            "invalid_schema",
            format!("unknown column type `{text}`: {e}"),
        )
    })
}

fn type_name(data_type: &DataType) -> String {
    SHORT_NAMES
        .iter()
        .find(|(_, make)| make() == *data_type)
        .map(|(name, _)| (*name).to_owned())
        .unwrap_or_else(|| data_type.to_string())
}

impl JsonSchema {
    /// Parses and checks the schema: at least one column, unique names, known types.
    pub fn to_arrow(&self) -> Result<SchemaRef, ApiError> {
        if self.fields.is_empty() {
            return Err(ApiError::invalid(
                "invalid_schema",
                "a schema needs at least one field",
            ));
        }
        let mut fields = Vec::with_capacity(self.fields.len());
        for (i, f) in self.fields.iter().enumerate() {
            if f.name.is_empty() {
                return Err(ApiError::invalid(
                    "invalid_schema",
                    format!("field {i} has an empty name"),
                ));
            }
            if self.fields[..i].iter().any(|g| g.name == f.name) {
                return Err(ApiError::invalid(
                    "invalid_schema",
                    format!("field name `{}` appears twice", f.name),
                ));
            }
            fields.push(Field::new(&f.name, parse_type(&f.data_type)?, f.nullable));
        }
        Ok(Arc::new(Schema::new(fields)))
    }

    /// The canonical JSON form of an Arrow schema.
    pub fn from_arrow(schema: &Schema) -> Self {
        JsonSchema {
            fields: schema
                .fields()
                .iter()
                .map(|f| JsonField {
                    name: f.name().clone(),
                    data_type: type_name(f.data_type()),
                    nullable: f.is_nullable(),
                })
                .collect(),
        }
    }

    /// Parses stored schema text (the canonical JSON).
    pub fn parse_stored(text: &str) -> Result<SchemaRef, ApiError> {
        let schema: JsonSchema = serde_json::from_str(text).map_err(|e| ApiError::Internal {
            message: format!("stored schema is not valid JSON: {e}"),
        })?;
        schema.to_arrow()
    }

    /// Canonical text for storage.
    pub fn canonical(schema: &Schema) -> String {
        serde_json::to_string(&Self::from_arrow(schema)).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_and_arrow_names_parse_and_round_trip() {
        let s: JsonSchema = serde_json::from_str(
            r#"{"fields":[{"name":"id","type":"int64","nullable":false},
                          {"name":"msg","type":"Utf8"},
                          {"name":"d","type":"Decimal128(10, 2)"}]}"#,
        )
        .unwrap();
        let arrow = s.to_arrow().unwrap();
        assert_eq!(arrow.field(0).data_type(), &DataType::Int64);
        assert!(!arrow.field(0).is_nullable());
        assert_eq!(arrow.field(1).data_type(), &DataType::Utf8);
        assert_eq!(arrow.field(2).data_type(), &DataType::Decimal128(10, 2));
        let stored = JsonSchema::canonical(&arrow);
        assert_eq!(JsonSchema::parse_stored(&stored).unwrap(), arrow);
    }

    #[test]
    fn bad_schemas_are_rejected() {
        for text in [
            r#"{"fields":[]}"#,
            r#"{"fields":[{"name":"a","type":"nope"}]}"#,
            r#"{"fields":[{"name":"a","type":"int8"},{"name":"a","type":"int8"}]}"#,
        ] {
            let s: JsonSchema = serde_json::from_str(text).unwrap();
            assert_eq!(s.to_arrow().unwrap_err().kind(), "invalid_schema", "{text}");
        }
    }
}
