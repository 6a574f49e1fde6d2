//! The schema checks: short names and Arrow names, the allowlist, the limits, stored schemas.

use arrow_schema::{DataType, TimeUnit};

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

/// A fuzz finding: a time zone with control characters in it was accepted, and its stored text
/// did not parse back. A time zone is refused unless it is a fixed offset's text.
#[test]
fn a_time_zone_with_control_characters_is_refused() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fuzz/regressions/table_schema-timezone-does-not-round-trip"
    ))
    .unwrap();
    for refused in [
        text.as_str(),
        r#"Timestamp(Microsecond, Some("Europe/Paris"))"#,
        r#"Timestamp(Microsecond, Some("+02:00 "))"#,
    ] {
        let message = refusal(refused, &LimitsSettings::default());
        assert!(message.contains("fixed offset"), "{message}");
    }
    for ok in [
        r#"Timestamp(Millisecond, Some("+02:00"))"#,
        r#"Timestamp(Microsecond, Some("-0530"))"#,
    ] {
        let s = JsonSchema {
            fields: vec![JsonField {
                name: "t".to_owned(),
                data_type: ok.to_owned(),
                nullable: true,
            }],
        };
        let arrow = s.to_arrow().unwrap();
        assert_eq!(
            JsonSchema::parse_stored(&JsonSchema::canonical(&arrow)).unwrap(),
            arrow
        );
    }
}
