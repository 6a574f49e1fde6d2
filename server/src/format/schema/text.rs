//! Type text: the short names, parsing and printing a type, the guards a type's text passes
//! before Arrow's recursive parser sees it, and the `invalid_schema` messages every check uses.

use std::str::FromStr;

use arrow_schema::{DataType, TimeUnit};

use crate::error::{ApiError, ApiResult};

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
pub(super) fn parse_type_text(text: &str) -> Result<DataType, String> {
    let lower = text.trim().to_ascii_lowercase();
    if let Some((_, make)) = SHORT_NAMES.iter().find(|(name, _)| *name == lower) {
        return Ok(make());
    }
    DataType::from_str(text.trim()).map_err(|e| clip(&e.to_string(), 300))
}

pub(super) fn type_name(data_type: &DataType) -> String {
    SHORT_NAMES
        .iter()
        .find(|(_, make)| make() == *data_type)
        .map(|(name, _)| (*name).to_owned())
        .unwrap_or_else(|| data_type.to_string())
}

pub(super) fn invalid(message: String) -> ApiError {
    ApiError::invalid("invalid_schema", message)
}

/// At most `max` bytes of `text` (on a char boundary), for echoing input in messages.
pub(super) fn clip(text: &str, max: usize) -> String {
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
pub(super) fn guard_type_text(
    path: &str,
    text: &str,
    max_bytes: u32,
    max_depth: u32,
) -> ApiResult<()> {
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

pub(super) fn too_deep(path: &str, max_depth: u32) -> ApiError {
    invalid(format!(
        "field `{}`: the type is nested more than {max_depth} levels deep (setting `limits.max_nesting_depth`)",
        clip(path, 64)
    ))
}

pub(super) fn check_name(path: &str, name: &str, max_bytes: u32) -> ApiResult<()> {
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
