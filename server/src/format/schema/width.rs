//! How many bytes a row of a schema takes before any input fills it.

use arrow_schema::{DataType, Schema};

/// The fixed bytes one row of `schema` takes even when all its columns are null: what a row of
/// nulls costs once decoded (validity bits aside). Variable-width data adds to it only as the
/// input supplies it, so a decoder can bound its memory by `rows * row_bytes` plus the input.
pub fn row_bytes(schema: &Schema) -> u64 {
    schema
        .fields()
        .iter()
        .fold(0, |sum, f| sum.saturating_add(type_bytes(f.data_type())))
}

pub(super) fn type_bytes(data_type: &DataType) -> u64 {
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
