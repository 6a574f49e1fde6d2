//! The walk of a parsed type against the allowlist and the limits (the list is in the module doc
//! of `format::schema`).

use std::collections::HashSet;
use std::str::FromStr;

use arrow_array::timezone::Tz;
use arrow_schema::{
    DECIMAL32_MAX_PRECISION, DECIMAL64_MAX_PRECISION, DECIMAL128_MAX_PRECISION,
    DECIMAL256_MAX_PRECISION, DataType, Field, TimeUnit,
};

use super::text::{check_name, clip, invalid, too_deep};
use crate::error::ApiResult;
use crate::settings::LimitsSettings;

/// The checks of one schema's fields against the limits.
pub(super) struct Walk<'a> {
    pub(super) limits: &'a LimitsSettings,
    /// Fields seen so far, nested ones included.
    pub(super) fields: u32,
}

impl Walk<'_> {
    /// Counts a field and checks its name.
    pub(super) fn field(&mut self, path: &str, name: &str) -> ApiResult<()> {
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
    pub(super) fn data_type(
        &mut self,
        path: &str,
        data_type: &DataType,
        depth: u32,
    ) -> ApiResult<()> {
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
            // Arrow's parser reads a prefix of the text and ignores the rest, so the characters
            // are checked first: an offset's, nothing a stored form would mangle.
            DataType::Timestamp(_, Some(tz)) => match Tz::from_str(tz) {
                Ok(_) if offset_text(tz) => Ok(()),
                _ => refuse("the time zone must be a fixed offset such as \"+01:00\""),
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

/// Whether a time zone's text is made of what a fixed offset is (`+01:00`, `-0530`, `+01`): a
/// sign, then at most five digits and colons.
fn offset_text(tz: &str) -> bool {
    let mut bytes = tz.bytes();
    matches!(bytes.next(), Some(b'+' | b'-'))
        && tz.len() <= 6
        && bytes.all(|b| b.is_ascii_digit() || b == b':')
}
