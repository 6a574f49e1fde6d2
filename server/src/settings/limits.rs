//! `[limits]`: what a request can make the node store — the shape of a table's schema (columns,
//! nesting, names, fixed sizes, row width) and of the catalog (tables, buckets, partitions,
//! schema versions).
//!
//! The schema limits are enforced when a table or a schema version is created
//! (`format/schema.rs`, 400 `invalid_schema`); the catalog limits by the catalog (`catalog.rs`,
//! 400 `limit_exceeded`). Each setting has a ceiling ([`LimitsSettings::CEILING`]): a larger value
//! is refused at start, and stored schemas are re-read within the ceilings, so a limit lowered
//! later never makes an existing table unreadable.

use serde::{Deserialize, Serialize};

/// Table-shape limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsSettings {
    /// Fields of one schema, nested ones included (a list's item, a map's entries, key and
    /// value, a struct's children). Default 1000.
    pub max_columns: u32,
    /// Levels of a column's type: `Int64` is 1, `List(Int64)` 2. Default 16.
    pub max_nesting_depth: u32,
    /// Bytes of a column or nested field name. Default 255.
    pub max_name_bytes: u32,
    /// Bytes of one column's type text (Arrow's text form), checked before it is parsed.
    /// Default 64 KiB.
    pub max_type_text_bytes: u32,
    /// Size of a `FixedSizeBinary`. Default 64 KiB.
    pub max_fixed_size_bytes: u32,
    /// Length of a `FixedSizeList`. Default 65 536.
    pub max_fixed_list_len: u32,
    /// Bytes one row takes even when every column is null: the sum of the fixed-width parts of
    /// its columns (a `FixedSizeList` multiplies its item's), which is what a row of nulls costs
    /// when it is decoded. Default 64 KiB, so that the rows of one request (at most 1 Mi) stay
    /// within 64 GiB however they are spelled; the decoders bound memory further.
    pub max_row_bytes: u32,
    /// Tables of the cluster. Default 10 000.
    pub max_tables: u32,
    /// Buckets of each partition of a table (the `buckets` of a create). Default 1024.
    pub max_buckets_per_table: u32,
    /// Partitions of a table. Default 1024.
    pub max_partitions: u32,
    /// Schema versions of a table (schema ids end at 32 767, the batch header's `i16`).
    /// Default 1000.
    pub max_schema_versions: u32,
}

impl Default for LimitsSettings {
    fn default() -> Self {
        LimitsSettings {
            max_columns: 1000,
            max_nesting_depth: 16,
            max_name_bytes: 255,
            max_type_text_bytes: 64 << 10,
            max_fixed_size_bytes: 64 << 10,
            max_fixed_list_len: 65_536,
            max_row_bytes: 64 << 10,
            max_tables: 10_000,
            max_buckets_per_table: 1024,
            max_partitions: 1024,
            max_schema_versions: 1000,
        }
    }
}

impl LimitsSettings {
    /// The largest value each setting may take. Stored schemas are re-read within these, so
    /// nothing stored can make a parse run deeper or longer than they allow.
    pub const CEILING: LimitsSettings = LimitsSettings {
        max_columns: 100_000,
        max_nesting_depth: 64,
        max_name_bytes: 64 << 10,
        max_type_text_bytes: 16 << 20,
        max_fixed_size_bytes: 16 << 20,
        max_fixed_list_len: 16 << 20,
        max_row_bytes: 16 << 20,
        max_tables: 1_000_000,
        max_buckets_per_table: 65_536,
        max_partitions: 65_536,
        // Schema ids are the batch header's i16.
        max_schema_versions: i16::MAX as u32,
    };

    fn named(&self) -> [(&'static str, u32); 11] {
        [
            ("limits.max_columns", self.max_columns),
            ("limits.max_nesting_depth", self.max_nesting_depth),
            ("limits.max_name_bytes", self.max_name_bytes),
            ("limits.max_type_text_bytes", self.max_type_text_bytes),
            ("limits.max_fixed_size_bytes", self.max_fixed_size_bytes),
            ("limits.max_fixed_list_len", self.max_fixed_list_len),
            ("limits.max_row_bytes", self.max_row_bytes),
            ("limits.max_tables", self.max_tables),
            ("limits.max_buckets_per_table", self.max_buckets_per_table),
            ("limits.max_partitions", self.max_partitions),
            ("limits.max_schema_versions", self.max_schema_versions),
        ]
    }

    /// Refuses zero and values above the ceilings, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        for ((name, value), (_, ceiling)) in self.named().into_iter().zip(Self::CEILING.named()) {
            if value == 0 {
                return Err(format!("{name} must be at least 1"));
            }
            if value > ceiling {
                return Err(format!("{name} is {value}; it must be at most {ceiling}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_ceilings_are_valid() {
        assert_eq!(LimitsSettings::default().validate(), Ok(()));
        assert_eq!(LimitsSettings::CEILING.validate(), Ok(()));
    }

    #[test]
    fn zero_and_values_past_the_ceiling_are_refused_naming_the_setting() {
        let n = LimitsSettings::default().named().len();
        for i in 0..n {
            for (value, says) in [(0, "at least 1"), (u32::MAX, "at most")] {
                let mut values = LimitsSettings::default().named().map(|(_, v)| v);
                values[i] = value;
                let limits = from_values(values);
                let (name, _) = limits.named()[i];
                let error = limits.validate().unwrap_err();
                assert!(error.starts_with(name) && error.contains(says), "{error}");
            }
        }
    }

    fn from_values(v: [u32; 11]) -> LimitsSettings {
        LimitsSettings {
            max_columns: v[0],
            max_nesting_depth: v[1],
            max_name_bytes: v[2],
            max_type_text_bytes: v[3],
            max_fixed_size_bytes: v[4],
            max_fixed_list_len: v[5],
            max_row_bytes: v[6],
            max_tables: v[7],
            max_buckets_per_table: v[8],
            max_partitions: v[9],
            max_schema_versions: v[10],
        }
    }
}
