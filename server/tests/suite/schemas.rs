//! Schemas and table shapes over HTTP: every type a table may hold goes in and out unchanged
//! through NDJSON and Arrow IPC; the issue's hostile schemas (a huge fixed-size binary, a type
//! nested 100 000 levels deep) and every other refused one answer 400 `invalid_schema` naming
//! the field, create nothing and leave the node serving; the `[limits]` on tables, buckets,
//! partitions, columns and schema versions answer 400 naming their setting.

use arrow_array::RecordBatch;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::data::arrow_reader;
use super::harness::{ARROW, Backend, Harness, NDJSON, expect_error};

/// Every type of the allowlist (`format/schema.rs`) with a value in NDJSON.
const TYPES: &[(&str, &str)] = &[
    ("Boolean", "true"),
    ("Int8", "-5"),
    ("Int16", "-300"),
    ("Int32", "70000"),
    ("Int64", "-9000000000"),
    ("UInt8", "255"),
    ("UInt16", "65535"),
    ("UInt32", "4294967295"),
    ("UInt64", "18446744073709551615"),
    ("Float16", "1.5"),
    ("Float32", "1.5"),
    ("Float64", "2.25"),
    ("Decimal32(9, 2)", "12.34"),
    ("Decimal64(18, -3)", "12000"),
    ("Decimal128(38, 10)", "-12.5"),
    ("Decimal256(76, 76)", "0.5"),
    ("Utf8", "\"h\u{e9}llo\""),
    ("LargeUtf8", "\"x\""),
    ("Utf8View", "\"a string longer than twelve bytes\""),
    ("Binary", "\"deadbeef\""),
    ("LargeBinary", "\"00ff\""),
    ("BinaryView", "\"0102030405060708090a0b0c0d0e0f\""),
    ("FixedSizeBinary(4)", "\"deadbeef\""),
    ("Date32", "\"2024-01-02\""),
    ("Date64", "\"2024-01-02T03:04:05\""),
    ("Time32(s)", "\"12:34:56\""),
    ("Time32(ms)", "\"12:34:56.789\""),
    ("Time64(us)", "\"12:34:56.789012\""),
    ("Time64(ns)", "\"12:34:56.789012345\""),
    ("Timestamp(s)", "\"2024-01-02T03:04:05\""),
    ("Timestamp(ms)", "1700000000000"),
    ("Timestamp(us)", "\"2024-01-02T03:04:05.123456\""),
    (
        "Timestamp(ns, \"+01:00\")",
        "\"2024-01-02T03:04:05.123456789+01:00\"",
    ),
    (
        "Timestamp(ms, Some(\"-05:30\"))",
        "\"2024-01-02T03:04:05Z\"",
    ),
    ("List(Int32)", "[1, null, 3]"),
    ("LargeList(Utf8)", "[\"a\", \"b\"]"),
    ("ListView(Int64)", "[1, 2]"),
    ("LargeListView(Boolean)", "[true, false]"),
    ("FixedSizeList(3, Float32)", "[1.5, 2.5, null]"),
    ("FixedSizeList(2 x non-null Int16, field: 'x')", "[1, 2]"),
    (
        "Struct(\"a\": Int32, \"b\": Utf8)",
        "{\"a\": 1, \"b\": \"x\"}",
    ),
    (
        "Map(\"entries\": non-null Struct(\"key\": non-null Utf8, \"value\": Int32), unsorted)",
        "{\"k\": 1, \"j\": 2}",
    ),
    (
        "Map(\"e\": non-null Struct(\"k\": non-null Utf8View, \"v\": List(Int8)), unsorted)",
        "{\"k\": [1, 2]}",
    ),
    (
        "List(Struct(\"a\": List(Utf8View), \"b(\": Float64))",
        "[{\"a\": [\"x\"], \"b(\": 1.5}]",
    ),
];

async fn create(h: &Harness, name: &str, ty: &str) -> reqwest::Response {
    h.post_json(
        h.v1("tables"),
        &json!({"name": name, "schema": {"fields": [
            {"name": "id", "type": "int64", "nullable": false},
            {"name": "c", "type": ty}
        ]}}),
    )
    .await
}

async fn ndjson_text(h: &Harness, table: &str, query: &str) -> Vec<String> {
    let r = h.read(table, query, NDJSON).await;
    assert_eq!(r.status(), StatusCode::OK, "{table}");
    r.text().await.unwrap().lines().map(str::to_owned).collect()
}

async fn arrow_batches(h: &Harness, table: &str, query: &str) -> Vec<RecordBatch> {
    let r = h.read(table, query, ARROW).await;
    assert_eq!(r.status(), StatusCode::OK, "{table}");
    arrow_reader(r).await.map(|b| b.unwrap()).collect()
}

/// The rows of `batches`, a batch each, to compare rows however they were batched.
fn one_per_row(batches: &[RecordBatch]) -> Vec<RecordBatch> {
    batches
        .iter()
        .flat_map(|b| (0..b.num_rows()).map(|i| b.slice(i, 1)))
        .collect()
}

/// Each allowed type: rows in as NDJSON, out as NDJSON and in again, out as Arrow and in again;
/// every second pass reads exactly what the first did.
pub async fn every_allowed_type_round_trips(backend: Backend) {
    let h = Harness::start(backend).await;
    for (i, (ty, value)) in TYPES.iter().enumerate() {
        let table = format!("t{i}");
        let r = create(&h, &table, ty).await;
        assert_eq!(
            r.status(),
            StatusCode::CREATED,
            "{ty}: {}",
            r.text().await.unwrap()
        );
        // A value and a null.
        h.append_ndjson(
            &table,
            &format!("{{\"id\":0,\"c\":{value}}}\n{{\"id\":1}}\n"),
        )
        .await;
        let first = ndjson_text(&h, &table, "offset=0").await;
        assert_eq!(first.len(), 2, "{ty}: {first:?}");
        let row: Value = serde_json::from_str(&first[0]).unwrap();
        assert!(!row["c"].is_null(), "{ty}: the value was kept: {first:?}");

        h.append_ndjson(&table, &(first.join("\n") + "\n")).await;
        let arrow = arrow_batches(&h, &table, "offset=0").await;
        assert_eq!(
            arrow.iter().map(RecordBatch::num_rows).sum::<usize>(),
            4,
            "{ty}"
        );
        let schema = arrow[0].schema();
        let mut ipc = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &schema).unwrap();
        for batch in &arrow {
            ipc.write(batch).unwrap();
        }
        h.append_ok(&table, ARROW, ipc.into_inner().unwrap()).await;

        let all = ndjson_text(&h, &table, "offset=0").await;
        assert_eq!(all[2..4], first[..], "{ty}: NDJSON read back as it went in");
        assert_eq!(all[4..8], all[..4], "{ty}: Arrow read back as it went in");
        let again = arrow_batches(&h, &table, "offset=4").await;
        assert_eq!(
            one_per_row(&again),
            one_per_row(&arrow),
            "{ty}: Arrow rows identical"
        );
    }
}

/// Asserts a 400 `invalid_schema` whose message names each of `names`.
async fn expect_invalid_schema(response: reqwest::Response, names: &[&str]) {
    let body = expect_error(response, StatusCode::BAD_REQUEST, "invalid_schema").await;
    let message = body["message"].as_str().unwrap();
    for name in names {
        assert!(message.contains(name), "`{name}` missing from: {message}");
    }
}

async fn expect_absent(h: &Harness, table: &str) {
    let r = h
        .http
        .get(h.v1(&format!("tables/{table}")))
        .send()
        .await
        .unwrap();
    expect_error(r, StatusCode::NOT_FOUND, "table_not_found").await;
}

async fn table_names(h: &Harness) -> Vec<String> {
    let list = h.get_json(h.v1("tables")).await;
    let mut names: Vec<String> = list["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

async fn assert_alive(h: &Harness) {
    let health = h.get_json(format!("{}/healthz", h.url)).await;
    assert_eq!(health["status"], "ok");
}

/// The issue's two hostile schemas, and the other refusals, at create and at a new version.
pub async fn hostile_schemas_are_refused(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("kept").await;
    h.append_ndjson("kept", "{\"id\":1,\"msg\":\"m\"}\n").await;

    // A huge fixed-size binary, then an append of null rows: refused at create.
    let r = create(&h, "huge", "FixedSizeBinary(2147483647)").await;
    expect_invalid_schema(r, &["`c`", "limits.max_fixed_size_bytes"]).await;
    let r = h
        .append("huge", NDJSON, "{\"id\":1}\n".repeat(10_000))
        .await;
    expect_error(r, StatusCode::NOT_FOUND, "table_not_found").await;
    // Sizes each within their limit whose product is not.
    let r = create(&h, "huge", "FixedSizeList(65536, FixedSizeBinary(65536))").await;
    expect_invalid_schema(r, &["`c`", "limits.max_row_bytes"]).await;
    expect_absent(&h, "huge").await;

    // A type nested 100 000 levels deep is refused before it is parsed for its length; one
    // nested 10 000 levels, short enough, for its depth.
    let nested = |levels| format!("{}Int32{}", "List(".repeat(levels), ")".repeat(levels));
    let r = create(&h, "deep", &nested(100_000)).await;
    expect_invalid_schema(r, &["`c`", "limits.max_type_text_bytes"]).await;
    let deep = nested(10_000);
    let r = create(&h, "deep", &deep).await;
    expect_invalid_schema(r, &["`c`", "limits.max_nesting_depth"]).await;
    expect_absent(&h, "deep").await;

    for (ty, names) in [
        ("Null", &["`c`", "nulls"][..]),
        ("Duration(ms)", &["`c`", "durations"]),
        ("Dictionary(Int32, Utf8)", &["`c`", "dictionaries"]),
        (
            "Struct(\"a\": List(Interval(DayTime)))",
            &["`c.a.item`", "intervals"],
        ),
        ("Timestamp(ms, \"UTC\")", &["`c`", "fixed offset"]),
    ] {
        let r = create(&h, "bad", ty).await;
        expect_invalid_schema(r, names).await;
    }
    expect_absent(&h, "bad").await;

    // A new schema version is checked the same way, and a refused one adds nothing.
    let r = h
        .post_json(
            h.v1("tables/kept/schemas"),
            &json!({"schema": {"fields": [
                {"name": "id", "type": "int64", "nullable": false},
                {"name": "n", "type": "Null"}
            ]}}),
        )
        .await;
    expect_invalid_schema(r, &["`n`"]).await;
    let r = h
        .post_json(
            h.v1("tables/kept/schemas"),
            &json!({"schema": {"fields": [{"name": "x", "type": deep}]}}),
        )
        .await;
    expect_invalid_schema(r, &["`x`", "limits.max_nesting_depth"]).await;
    let kept = h.get_json(h.v1("tables/kept")).await;
    assert_eq!(kept["latest_schema_id"], 1, "{kept}");

    assert_eq!(table_names(&h).await, ["kept"]);
    assert_alive(&h).await;
    let (rows, _) = h.read_ndjson("kept", "offset=0").await;
    assert_eq!(rows, [json!({"id": 1, "msg": "m"})]);
}

/// Asserts a 400 `limit_exceeded` naming `setting` with its `limit`.
async fn expect_limit(response: reqwest::Response, setting: &str, limit: u64) {
    let body = expect_error(response, StatusCode::BAD_REQUEST, "limit_exceeded").await;
    assert_eq!(
        (body["setting"].as_str(), body["limit"].as_u64()),
        (Some(setting), Some(limit)),
        "{body}"
    );
    assert!(
        body["message"].as_str().unwrap().contains(setting),
        "{body}"
    );
}

/// `[limits]` on the shape of tables, set small.
pub async fn table_shape_limits(backend: Backend) {
    let h = Harness::start_with(backend, |s| {
        s.limits.max_tables = 2;
        s.limits.max_buckets_per_table = 4;
        s.limits.max_partitions = 2;
        s.limits.max_schema_versions = 2;
        s.limits.max_columns = 3;
    })
    .await;
    let create = |name: &str, extra: Value| {
        let mut body =
            json!({"name": name, "schema": {"fields": [{"name": "id", "type": "int64"}]}});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let request = h.http.post(h.v1("tables")).json(&body);
        async move { request.send().await.unwrap() }
    };
    expect_limit(
        create("a", json!({"buckets": 5})).await,
        "limits.max_buckets_per_table",
        4,
    )
    .await;
    expect_limit(
        create("a", json!({"partitions": ["p", "q", "r"]})).await,
        "limits.max_partitions",
        2,
    )
    .await;
    let wide = json!({"name": "a", "schema": {"fields": [
        {"name": "x", "type": "int8"},
        {"name": "y", "type": "Struct(\"p\": Int8, \"q\": Int8)"}
    ]}});
    expect_invalid_schema(
        h.post_json(h.v1("tables"), &wide).await,
        &["limits.max_columns"],
    )
    .await;
    expect_absent(&h, "a").await;

    let r = create("a", json!({"buckets": 4, "partitions": ["p", "q"]})).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = create("b", json!({})).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    expect_limit(create("c", json!({})).await, "limits.max_tables", 2).await;
    expect_absent(&h, "c").await;
    // At the cap, a name taken is still reported as taken.
    expect_error(
        create("b", json!({})).await,
        StatusCode::CONFLICT,
        "table_exists",
    )
    .await;
    assert_eq!(table_names(&h).await, ["a", "b"]);
    h.drop_table("b").await;
    assert_eq!(create("c", json!({})).await.status(), StatusCode::CREATED);

    let version = |n: usize| {
        let fields: Vec<Value> = (0..n)
            .map(|i| json!({"name": format!("f{i}"), "type": "int64"}))
            .collect();
        let request = h
            .http
            .post(h.v1("tables/a/schemas"))
            .json(&json!({"schema": {"fields": fields}}));
        async move { request.send().await.unwrap() }
    };
    let second: Value = version(2).await.json().await.unwrap();
    assert_eq!(second["schema_id"], 2, "{second}");
    expect_limit(version(3).await, "limits.max_schema_versions", 2).await;
    // The newest schema again is not a new version.
    let same: Value = version(2).await.json().await.unwrap();
    assert_eq!(same["schema_id"], 2, "{same}");
    let a = h.get_json(h.v1("tables/a")).await;
    assert_eq!(a["schemas"].as_array().unwrap().len(), 2, "{a}");
    assert_alive(&h).await;
}
