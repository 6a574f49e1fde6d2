//! Table schemas as JSON, the way a user types them with curl, and the checks a schema passes
//! before a table or a schema version is created.
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
//!
//! # What a schema may hold
//!
//! Only types that mink batches store and that both NDJSON and Arrow IPC carry in and out
//! unchanged (every one is round-tripped through both formats by the tests):
//!
//! | Types | Conditions |
//! |---|---|
//! | `Boolean`, `Int8`..`Int64`, `UInt8`..`UInt64`, `Float16`, `Float32`, `Float64` | |
//! | `Decimal32/64/128/256(p, s)` | `1 <= p <=` the type's maximum, `-max scale <= s <= p` |
//! | `Utf8`, `LargeUtf8`, `Utf8View`, `Binary`, `LargeBinary`, `BinaryView` | |
//! | `FixedSizeBinary(n)` | `1 <= n <= limits.max_fixed_size_bytes` |
//! | `Date32`, `Date64`, `Time32(s/ms)`, `Time64(us/ns)` | |
//! | `Timestamp(unit)`, `Timestamp(unit, "+hh:mm")` | a fixed offset: named zones do not parse in this build |
//! | `List`, `LargeList`, `ListView`, `LargeListView` | |
//! | `FixedSizeList(n, T)` | `1 <= n <= limits.max_fixed_list_len` |
//! | `Struct(...)` | at least one field, names unique |
//! | `Map(..., unsorted)` | keys `Utf8`, `LargeUtf8` or `Utf8View` (JSON object keys) |
//!
//! Refused: `Null` (rows that cost nothing to send and everything to read), `Duration` (NDJSON
//! reads render ISO 8601 text that appends do not parse), `Interval` (NDJSON appends cannot parse
//! it), `Dictionary` (mink batches carry no dictionaries), `Union`, `RunEndEncoded`, sorted maps.
//!
//! Limits (`[limits]`, each refusal names its setting):
//! - at most `max_columns` fields, nested ones included;
//! - types at most `max_nesting_depth` levels deep (`Int64` is 1, `List(Int64)` 2). The depth is
//!   measured on the type text, brackets counted outside quotes, before Arrow's recursive parser
//!   sees it, and the text is at most `max_type_text_bytes` long, so no type string can exhaust
//!   the stack; `\` is refused in type text, because Arrow's parser reads escapes its own way;
//! - names non-empty, unique among their siblings, at most `max_name_bytes` bytes;
//! - a row at most `max_row_bytes` fixed bytes ([`row_bytes`]: what a row of nulls costs once
//!   decoded, a `FixedSizeList` multiplying its item), so a small body of null rows cannot make
//!   the node allocate without bound.
//!
//! A type must also read back as itself from the canonical text. Stored schemas were checked
//! when they were created and are re-read leniently ([`JsonSchema::parse_stored`]: only the
//! text guards, at [`LimitsSettings::CEILING`]), so lowering a limit never strands a table.
//!
//! Files: `text.rs` (short names, parsing and printing type text, the guards run before Arrow
//! parses it, the `invalid_schema` messages), `allowlist.rs` (the walk of a parsed type against
//! the list and the limits), `width.rs` ([`row_bytes`]), and the tests in `tests.rs`.

mod allowlist;
mod text;
mod width;

use std::collections::HashSet;
use std::sync::Arc;

use arrow_schema::{Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};

use self::allowlist::Walk;
use self::text::{clip, guard_type_text, invalid, parse_type_text, type_name};
use self::width::type_bytes;
use crate::error::ApiError;
use crate::settings::LimitsSettings;

pub use self::width::row_bytes;

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

impl JsonSchema {
    /// Parses the schema and checks it within the default limits (see [`JsonSchema::check`]).
    pub fn to_arrow(&self) -> Result<SchemaRef, ApiError> {
        self.check(&LimitsSettings::default())
    }

    /// Parses the schema and checks it within `limits`: at least one column, unique names, the
    /// types of the module doc's list, and every limit. A refusal is `invalid_schema` naming the
    /// field (its path, `a.b`, when nested) and the setting it exceeds.
    pub fn check(&self, limits: &LimitsSettings) -> Result<SchemaRef, ApiError> {
        if self.fields.is_empty() {
            return Err(invalid("a schema needs at least one field".to_owned()));
        }
        if self.fields.len() > limits.max_columns as usize {
            return Err(invalid(format!(
                "the schema has {} columns; at most {} are allowed (setting `limits.max_columns`)",
                self.fields.len(),
                limits.max_columns
            )));
        }
        let mut walk = Walk { limits, fields: 0 };
        let mut names = HashSet::with_capacity(self.fields.len());
        let mut fields = Vec::with_capacity(self.fields.len());
        let mut row = 0u64;
        let mut widest = (0u64, "");
        for (i, f) in self.fields.iter().enumerate() {
            if f.name.is_empty() {
                return Err(invalid(format!("field {i} has an empty name")));
            }
            let path = clip(&f.name, 64);
            walk.field(&path, &f.name)?;
            if !names.insert(f.name.as_str()) {
                return Err(invalid(format!("field name `{path}` appears twice")));
            }
            guard_type_text(
                &path,
                &f.data_type,
                limits.max_type_text_bytes,
                limits.max_nesting_depth,
            )?;
            let data_type = parse_type_text(&f.data_type).map_err(|e| {
                invalid(format!(
                    "field `{path}`: unknown type `{}`: {e}",
                    clip(&f.data_type, 64)
                ))
            })?;
            walk.data_type(&path, &data_type, 1)?;
            let canonical = type_name(&data_type);
            let ceiling = LimitsSettings::CEILING;
            let same = guard_type_text(
                &path,
                &canonical,
                ceiling.max_type_text_bytes,
                ceiling.max_nesting_depth,
            )
            .is_ok()
                && parse_type_text(&canonical).as_ref() == Ok(&data_type);
            if !same {
                return Err(invalid(format!(
                    "field `{path}`: type `{}` would not read back as itself from its stored form; check its nested names",
                    clip(&canonical, 64)
                )));
            }
            let bytes = type_bytes(&data_type);
            row = row.saturating_add(bytes);
            if bytes > widest.0 {
                widest = (bytes, f.name.as_str());
            }
            fields.push(Field::new(&f.name, data_type, f.nullable));
        }
        if row > u64::from(limits.max_row_bytes) {
            return Err(invalid(format!(
                "a row of this schema takes {row} bytes even when null (field `{}` {} of them); at most {} are allowed (setting `limits.max_row_bytes`)",
                clip(widest.1, 64),
                widest.0,
                limits.max_row_bytes
            )));
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

    /// Parses stored schema text (the canonical JSON). It was checked when it was created, so
    /// only the guards that keep the parse itself bounded apply, at the settings' ceilings: a
    /// limit lowered since never makes a table unreadable.
    pub fn parse_stored(text: &str) -> Result<SchemaRef, ApiError> {
        let corrupt = |message: String| ApiError::Internal {
            message: format!("stored schema: {message}"),
        };
        let schema: JsonSchema =
            serde_json::from_str(text).map_err(|e| corrupt(format!("not valid JSON: {e}")))?;
        let ceiling = LimitsSettings::CEILING;
        let mut fields = Vec::with_capacity(schema.fields.len());
        for f in &schema.fields {
            guard_type_text(
                &f.name,
                &f.data_type,
                ceiling.max_type_text_bytes,
                ceiling.max_nesting_depth,
            )
            .map_err(|e| corrupt(e.to_string()))?;
            let data_type = parse_type_text(&f.data_type)
                .map_err(|e| corrupt(format!("field `{}`: {e}", clip(&f.name, 64))))?;
            fields.push(Field::new(&f.name, data_type, f.nullable));
        }
        Ok(Arc::new(Schema::new(fields)))
    }

    /// Canonical text for storage.
    pub fn canonical(schema: &Schema) -> String {
        serde_json::to_string(&Self::from_arrow(schema)).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
