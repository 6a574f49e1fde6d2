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

use std::collections::HashSet;
use std::str::FromStr;
use std::sync::Arc;

use arrow_array::timezone::Tz;
use arrow_schema::{
    DECIMAL32_MAX_PRECISION, DECIMAL64_MAX_PRECISION, DECIMAL128_MAX_PRECISION,
    DECIMAL256_MAX_PRECISION, DataType, Field, Schema, SchemaRef, TimeUnit,
};
use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ApiResult};
use crate::settings::LimitsSettings;

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

/// Arrow's text form of a type, or a short name; no checks.
fn parse_type_text(text: &str) -> Result<DataType, String> {
    let lower = text.trim().to_ascii_lowercase();
    if let Some((_, make)) = SHORT_NAMES.iter().find(|(name, _)| *name == lower) {
        return Ok(make());
    }
    DataType::from_str(text.trim()).map_err(|e| clip(&e.to_string(), 300))
}

fn type_name(data_type: &DataType) -> String {
    SHORT_NAMES
        .iter()
        .find(|(_, make)| make() == *data_type)
        .map(|(name, _)| (*name).to_owned())
        .unwrap_or_else(|| data_type.to_string())
}

fn invalid(message: String) -> ApiError {
    ApiError::invalid("invalid_schema", message)
}

/// At most `max` bytes of `text` (on a char boundary), for echoing input in messages.
fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// Checks a type's text before it is parsed: its length, and how deep its brackets nest.
///
/// Arrow's parser recurses once per open bracket, so the depth bounds its stack. Brackets inside
/// quoted names are not counted, the way the parser's tokenizer skips them; a quote inside a
/// word makes that word an unknown type, where the parser stops, so the two never disagree on
/// what the parser reaches. Backslashes are refused: the tokenizer's escapes are its own.
fn guard_type_text(path: &str, text: &str, max_bytes: u32, max_depth: u32) -> ApiResult<()> {
    if text.len() > max_bytes as usize {
        return Err(invalid(format!(
            "field `{}`: the type text is {} bytes; at most {max_bytes} are allowed (setting `limits.max_type_text_bytes`)",
            clip(path, 64),
            text.len()
        )));
    }
    // A leaf's own brackets (`Timestamp(ms, Some("+01:00"))`) add at most two to the levels of
    // the types around it, which add one each.
    let max_brackets = max_depth.saturating_add(1);
    let mut depth = 0u32;
    let mut quote = None;
    for c in text.chars() {
        if c == '\\' {
            return Err(invalid(format!(
                "field `{}`: a type may not contain `\\`",
                clip(path, 64)
            )));
        }
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '"' | '\'' => quote = Some(c),
                '(' => {
                    depth += 1;
                    if depth > max_brackets {
                        return Err(too_deep(path, max_depth));
                    }
                }
                ')' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    Ok(())
}

fn too_deep(path: &str, max_depth: u32) -> ApiError {
    invalid(format!(
        "field `{}`: the type is nested more than {max_depth} levels deep (setting `limits.max_nesting_depth`)",
        clip(path, 64)
    ))
}

fn check_name(path: &str, name: &str, max_bytes: u32) -> ApiResult<()> {
    if name.is_empty() {
        return Err(invalid(format!("field `{path}` has an empty name")));
    }
    if name.len() > max_bytes as usize {
        return Err(invalid(format!(
            "field `{}`: the name is {} bytes; at most {max_bytes} are allowed (setting `limits.max_name_bytes`)",
            clip(path, 64),
            name.len()
        )));
    }
    Ok(())
}

/// The fixed bytes one row of `schema` takes even when all its columns are null: what a row of
/// nulls costs once decoded (validity bits aside). Variable-width data adds to it only as the
/// input supplies it, so a decoder can bound its memory by `rows * row_bytes` plus the input.
pub fn row_bytes(schema: &Schema) -> u64 {
    schema
        .fields()
        .iter()
        .fold(0, |sum, f| sum.saturating_add(type_bytes(f.data_type())))
}

fn type_bytes(data_type: &DataType) -> u64 {
    match data_type {
        DataType::Null => 0,
        DataType::Boolean => 1,
        DataType::FixedSizeBinary(n) => u64::try_from(*n).unwrap_or(0),
        DataType::FixedSizeList(item, n) => {
            type_bytes(item.data_type()).saturating_mul(u64::try_from(*n).unwrap_or(0))
        }
        DataType::Struct(fields) => fields
            .iter()
            .fold(0, |sum, f| sum.saturating_add(type_bytes(f.data_type()))),
        // Offsets (and sizes, for views of lists); their items come from the input.
        DataType::Utf8 | DataType::Binary | DataType::List(_) | DataType::Map(..) => 4,
        DataType::LargeUtf8
        | DataType::LargeBinary
        | DataType::LargeList(_)
        | DataType::ListView(_) => 8,
        DataType::Utf8View | DataType::BinaryView | DataType::LargeListView(_) => 16,
        other => other
            .primitive_width()
            .and_then(|w| u64::try_from(w).ok())
            .unwrap_or(0),
    }
}

/// The checks of one schema's fields against the limits.
struct Walk<'a> {
    limits: &'a LimitsSettings,
    /// Fields seen so far, nested ones included.
    fields: u32,
}

impl Walk<'_> {
    /// Counts a field and checks its name.
    fn field(&mut self, path: &str, name: &str) -> ApiResult<()> {
        self.fields += 1;
        if self.fields > self.limits.max_columns {
            return Err(invalid(format!(
                "the schema has more than {} fields counting nested ones (setting `limits.max_columns`)",
                self.limits.max_columns
            )));
        }
        check_name(path, name, self.limits.max_name_bytes)
    }

    /// Checks a nested field and its type.
    fn child(&mut self, parent: &str, child: &Field, depth: u32) -> ApiResult<()> {
        let path = format!("{parent}.{}", child.name());
        self.field(&path, child.name())?;
        self.data_type(&path, child.data_type(), depth + 1)
    }

    /// Checks a type at nesting level `depth` (a column's own type is level 1).
    fn data_type(&mut self, path: &str, data_type: &DataType, depth: u32) -> ApiResult<()> {
        let limits = self.limits;
        if depth > limits.max_nesting_depth {
            return Err(too_deep(path, limits.max_nesting_depth));
        }
        let refuse = |why: &str| {
            Err(invalid(format!(
                "field `{}`: type {} is not supported: {why}",
                clip(path, 64),
                clip(&data_type.to_string(), 64)
            )))
        };
        match data_type {
            DataType::Boolean
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Float16
            | DataType::Float32
            | DataType::Float64
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::Date32
            | DataType::Date64
            | DataType::Time32(TimeUnit::Second | TimeUnit::Millisecond)
            | DataType::Time64(TimeUnit::Microsecond | TimeUnit::Nanosecond)
            | DataType::Timestamp(_, None) => Ok(()),
            DataType::Timestamp(_, Some(tz)) => match Tz::from_str(tz) {
                Ok(_) => Ok(()),
                Err(_) => refuse("the time zone must be a fixed offset such as \"+01:00\""),
            },
            DataType::Decimal32(p, s) => decimal(path, *p, *s, DECIMAL32_MAX_PRECISION),
            DataType::Decimal64(p, s) => decimal(path, *p, *s, DECIMAL64_MAX_PRECISION),
            DataType::Decimal128(p, s) => decimal(path, *p, *s, DECIMAL128_MAX_PRECISION),
            DataType::Decimal256(p, s) => decimal(path, *p, *s, DECIMAL256_MAX_PRECISION),
            DataType::FixedSizeBinary(n) => {
                let max = limits.max_fixed_size_bytes;
                if *n < 1 || n.unsigned_abs() > max {
                    return Err(invalid(format!(
                        "field `{}`: FixedSizeBinary({n}) must be 1 to {max} bytes (setting `limits.max_fixed_size_bytes`)",
                        clip(path, 64)
                    )));
                }
                Ok(())
            }
            DataType::List(item)
            | DataType::LargeList(item)
            | DataType::ListView(item)
            | DataType::LargeListView(item) => self.child(path, item, depth),
            DataType::FixedSizeList(item, n) => {
                let max = limits.max_fixed_list_len;
                if *n < 1 || n.unsigned_abs() > max {
                    return Err(invalid(format!(
                        "field `{}`: a FixedSizeList of {n} items must have 1 to {max} (setting `limits.max_fixed_list_len`)",
                        clip(path, 64)
                    )));
                }
                self.child(path, item, depth)
            }
            DataType::Struct(fields) => {
                if fields.is_empty() {
                    return refuse("a struct needs at least one field");
                }
                let mut names = HashSet::with_capacity(fields.len());
                for f in fields {
                    if !names.insert(f.name().as_str()) {
                        return Err(invalid(format!(
                            "field `{}`: the name `{}` appears twice",
                            clip(path, 64),
                            clip(f.name(), 64)
                        )));
                    }
                    self.child(path, f, depth)?;
                }
                Ok(())
            }
            DataType::Map(entries, sorted) => {
                if *sorted {
                    return refuse("NDJSON appends cannot decode sorted maps; use `unsorted`");
                }
                let key = match entries.data_type() {
                    DataType::Struct(kv) if kv.len() == 2 => kv[0].data_type(),
                    _ => return refuse("a map's entries are a struct of a key and a value"),
                };
                if !matches!(
                    key,
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                ) {
                    return refuse(
                        "map keys must be Utf8, LargeUtf8 or Utf8View (JSON object keys)",
                    );
                }
                self.child(path, entries, depth)
            }
            DataType::Null => refuse(
                "a column of nulls costs nothing to send and everything to read; make a column of a real type nullable",
            ),
            DataType::Duration(_) => refuse(
                "NDJSON reads render durations as ISO 8601 text that appends do not parse; store an Int64",
            ),
            DataType::Interval(_) => refuse("NDJSON appends cannot parse intervals"),
            DataType::Dictionary(..) => refuse("mink batches carry no dictionaries"),
            DataType::Union(..) => refuse("unions cannot be written as NDJSON rows"),
            DataType::RunEndEncoded(..) => refuse("mink batches cannot hold run-end encoding"),
            _ => refuse("not in the list of types a table can hold"),
        }
    }
}

fn decimal(path: &str, precision: u8, scale: i8, max_precision: u8) -> ApiResult<()> {
    let max_scale = i16::from(max_precision);
    let scale16 = i16::from(scale);
    if precision == 0
        || precision > max_precision
        || scale16 > i16::from(precision)
        || scale16 < -max_scale
    {
        return Err(invalid(format!(
            "field `{}`: a decimal needs a precision of 1 to {max_precision} and a scale from -{max_scale} to the precision, not ({precision}, {scale})",
            clip(path, 64)
        )));
    }
    Ok(())
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

    /// The error message of a one-column schema of type `ty`, checked with `limits`.
    fn refusal(ty: &str, limits: &LimitsSettings) -> String {
        let s = JsonSchema {
            fields: vec![JsonField {
                name: "c".to_owned(),
                data_type: ty.to_owned(),
                nullable: true,
            }],
        };
        let error = s.check(limits).expect_err(ty);
        assert_eq!(error.kind(), "invalid_schema", "{ty}: {error}");
        error.to_string()
    }

    fn accepts(ty: &str) -> DataType {
        let s = JsonSchema {
            fields: vec![JsonField {
                name: "c".to_owned(),
                data_type: ty.to_owned(),
                nullable: true,
            }],
        };
        let schema = s.to_arrow().unwrap_or_else(|e| panic!("{ty}: {e}"));
        assert_eq!(
            JsonSchema::parse_stored(&JsonSchema::canonical(&schema)).unwrap(),
            schema,
            "{ty} reads back from its stored form"
        );
        schema.field(0).data_type().clone()
    }

    /// Every type the module doc lists, in the spellings a user would type.
    pub(crate) const ALLOWED: &[&str] = &[
        "Boolean",
        "Int8",
        "Int16",
        "Int32",
        "Int64",
        "UInt8",
        "UInt16",
        "UInt32",
        "UInt64",
        "Float16",
        "Float32",
        "Float64",
        "Decimal32(9, 2)",
        "Decimal64(18, -3)",
        "Decimal128(38, 10)",
        "Decimal256(76, 76)",
        "Utf8",
        "LargeUtf8",
        "Utf8View",
        "Binary",
        "LargeBinary",
        "BinaryView",
        "FixedSizeBinary(16)",
        "Date32",
        "Date64",
        "Time32(s)",
        "Time32(ms)",
        "Time64(us)",
        "Time64(ns)",
        "Timestamp(s)",
        "Timestamp(ms)",
        "Timestamp(us)",
        "Timestamp(ns, \"+01:00\")",
        "Timestamp(ms, Some(\"-05:30\"))",
        "List(Int32)",
        "LargeList(Utf8)",
        "ListView(Int64)",
        "LargeListView(Boolean)",
        "FixedSizeList(3, Float32)",
        "FixedSizeList(2 x non-null Int16, field: 'x')",
        "Struct(\"a\": Int32, \"b\": non-null Utf8)",
        "Map(\"entries\": non-null Struct(\"key\": non-null Utf8, \"value\": Int32), unsorted)",
        "Map(\"e\": non-null Struct(\"k\": non-null Utf8View, \"v\": List(Int8)), unsorted)",
        "List(Struct(\"a\": List(Utf8View), \"b(\": Float64))",
    ];

    #[test]
    fn the_allowed_types_are_accepted_and_read_back_from_their_stored_form() {
        for ty in ALLOWED {
            accepts(ty);
        }
        assert_eq!(
            accepts("timestamp_ms"),
            DataType::Timestamp(TimeUnit::Millisecond, None)
        );
    }

    #[test]
    fn other_types_are_refused_naming_the_field_and_why() {
        let limits = LimitsSettings::default();
        for (ty, says) in [
            ("Null", "column of nulls"),
            ("Duration(s)", "durations"),
            ("Interval(MonthDayNano)", "intervals"),
            ("Dictionary(Int32, Utf8)", "dictionaries"),
            ("Union(Sparse, 0: (\"a\": Int32))", "unions"),
            ("RunEndEncoded(non-null Int32, Utf8)", "run-end"),
            ("Timestamp(ms, \"UTC\")", "fixed offset"),
            ("Timestamp(ms, \"Europe/Paris\")", "fixed offset"),
            (
                "Map(\"e\": non-null Struct(\"k\": non-null Utf8, \"v\": Int32), sorted)",
                "sorted",
            ),
            (
                "Map(\"e\": non-null Struct(\"k\": non-null Int32, \"v\": Int32), unsorted)",
                "keys",
            ),
            ("Struct()", "at least one field"),
            ("Struct(\"a\": Int8, \"a\": Int8)", "appears twice"),
            ("Decimal128(5, -40)", "precision"),
            ("FixedSizeBinary(0)", "limits.max_fixed_size_bytes"),
            ("FixedSizeList(0, Int32)", "limits.max_fixed_list_len"),
            ("Struct(\"a\\\"b\": Int32)", "`\\`"),
            ("nope", "unknown type"),
        ] {
            let message = refusal(ty, &limits);
            assert!(message.contains("field `c"), "{ty}: {message}");
            assert!(message.contains(says), "{ty}: {message}");
        }
    }

    #[test]
    fn a_nested_refusal_names_the_nested_path() {
        let limits = LimitsSettings::default();
        let message = refusal("Struct(\"a\": List(Struct(\"b\": Duration(s))))", &limits);
        assert!(message.contains("field `c.a.item.b`"), "{message}");
        let message = refusal(
            "Map(\"entries\": non-null Struct(\"key\": non-null Utf8, \"value\": Null), unsorted)",
            &limits,
        );
        assert!(message.contains("field `c.entries.value`"), "{message}");
    }

    fn nested(levels: usize, leaf: &str) -> String {
        format!("{}{leaf}{}", "List(".repeat(levels), ")".repeat(levels))
    }

    #[test]
    fn nesting_is_bounded_before_the_type_is_parsed() {
        let limits = LimitsSettings::default();
        // 16 levels: 15 lists around a leaf, even one with brackets of its own.
        assert!(matches!(
            accepts(&nested(15, "Timestamp(ms, Some(\"+01:00\"))")),
            DataType::List(_)
        ));
        for ty in [
            nested(16, "Int32"),
            nested(16, "Timestamp(ms)"),
            nested(17, "Int8"),
        ] {
            let message = refusal(&ty, &limits);
            assert!(message.contains("limits.max_nesting_depth"), "{message}");
        }
        // Deep enough to overflow the parser's stack if it ever saw it.
        let message = refusal(&nested(100_000, "Int32"), &LimitsSettings::CEILING);
        assert!(message.contains("limits.max_nesting_depth"), "{message}");
        // Closing brackets inside quoted names do not hide depth: counted naively, each unit
        // below nets zero, while the parser would recurse 110 000 levels.
        let unit = format!("{}Struct(\"{}\": ", "List(".repeat(10), ")".repeat(11));
        let hidden = format!("{}Int8{}", unit.repeat(10_000), ")".repeat(110_000));
        let message = refusal(&hidden, &LimitsSettings::CEILING);
        assert!(message.contains("limits.max_nesting_depth"), "{message}");
        let stored = format!(
            r#"{{"fields":[{{"name":"c","type":"{}"}}]}}"#,
            nested(100_000, "Int32")
        );
        assert_eq!(
            JsonSchema::parse_stored(&stored).unwrap_err().kind(),
            "internal"
        );
        let limits = LimitsSettings {
            max_nesting_depth: 2,
            ..LimitsSettings::default()
        };
        assert!(refusal("List(List(Int8))", &limits).contains("limits.max_nesting_depth"));
    }

    #[test]
    fn sizes_and_text_length_are_bounded_naming_the_setting() {
        let limits = LimitsSettings::default();
        for (ty, setting) in [
            ("FixedSizeBinary(2147483647)", "limits.max_fixed_size_bytes"),
            ("FixedSizeBinary(65537)", "limits.max_fixed_size_bytes"),
            ("FixedSizeList(65537, Int8)", "limits.max_fixed_list_len"),
            // Each size within its limit, their product not.
            (
                "FixedSizeList(65536, FixedSizeBinary(65536))",
                "limits.max_row_bytes",
            ),
            ("FixedSizeList(8193, Int64)", "limits.max_row_bytes"),
        ] {
            let message = refusal(ty, &limits);
            assert!(message.contains(setting), "{ty}: {message}");
        }
        accepts("FixedSizeBinary(65536)");
        accepts("FixedSizeList(8192, Int64)");
        let long = format!("Struct({})", vec!["\"a\": Int8"; 7000].join(", "));
        assert!(long.len() > 64 << 10);
        let message = refusal(&long, &limits);
        assert!(message.contains("limits.max_type_text_bytes"), "{message}");
        assert!(
            message.len() < 300,
            "the message does not echo the text: {message}"
        );
    }

    fn columns(n: usize, ty: &str) -> JsonSchema {
        JsonSchema {
            fields: (0..n)
                .map(|i| JsonField {
                    name: format!("c{i}"),
                    data_type: ty.to_owned(),
                    nullable: true,
                })
                .collect(),
        }
    }

    #[test]
    fn columns_names_and_row_width_are_bounded() {
        let limits = LimitsSettings::default();
        let wide = columns(1000, "int64").to_arrow().unwrap();
        assert_eq!(row_bytes(&wide), 8000);
        let error = columns(1001, "int8").check(&limits).unwrap_err();
        assert!(error.to_string().contains("limits.max_columns"), "{error}");
        // Nested fields count: 500 columns of a two-field struct are 1500 fields.
        let error = columns(500, "Struct(\"a\": Int8, \"b\": Int8)")
            .check(&limits)
            .unwrap_err();
        assert!(error.to_string().contains("limits.max_columns"), "{error}");
        // Each column within the row bound, all of them together not.
        let error = columns(2, "FixedSizeBinary(40000)")
            .check(&limits)
            .unwrap_err();
        assert!(
            error.to_string().contains("limits.max_row_bytes"),
            "{error}"
        );

        let mut long = columns(1, "int8");
        long.fields[0].name = "n".repeat(256);
        let error = long.check(&limits).unwrap_err();
        assert!(
            error.to_string().contains("limits.max_name_bytes"),
            "{error}"
        );
        let nested_long = format!("Struct(\"{}\": Int8)", "n".repeat(256));
        assert!(refusal(&nested_long, &limits).contains("limits.max_name_bytes"));
        long.fields[0].name = "n".repeat(255);
        assert!(long.check(&limits).is_ok());
    }

    #[test]
    fn row_bytes_is_what_a_row_of_nulls_costs() {
        for (ty, bytes) in [
            ("Boolean", 1),
            ("Decimal256(10, 2)", 32),
            ("Utf8", 4),
            ("LargeBinary", 8),
            ("Utf8View", 16),
            ("List(FixedSizeBinary(1000))", 4),
            ("FixedSizeList(3, FixedSizeList(2, Int32))", 24),
            ("Struct(\"a\": Int16, \"b\": FixedSizeBinary(5))", 7),
        ] {
            let schema = Schema::new(vec![Field::new("c", accepts(ty), true)]);
            assert_eq!(row_bytes(&schema), bytes, "{ty}");
        }
    }

    #[test]
    fn stored_schemas_are_reread_leniently() {
        // Created before these checks (or under higher limits): still readable.
        let wide = JsonSchema::canonical(
            &columns(2000, "int8")
                .check(&LimitsSettings::CEILING)
                .unwrap(),
        );
        assert_eq!(
            JsonSchema::parse_stored(&wide).unwrap().fields().len(),
            2000
        );
        let old = r#"{"fields":[{"name":"d","type":"Duration(s)"}]}"#;
        assert_eq!(
            JsonSchema::parse_stored(old).unwrap().field(0).data_type(),
            &DataType::Duration(TimeUnit::Second)
        );
        for bad in ["not json", r#"{"fields":[{"name":"d","type":"List("}]}"#] {
            assert_eq!(
                JsonSchema::parse_stored(bad).unwrap_err().kind(),
                "internal"
            );
        }
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
