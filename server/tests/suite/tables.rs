//! Tables over HTTP: create, get, list, a second create of the same name, schema evolution with
//! reads across schema versions, drop, and a new table of a dropped one's name.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::data::{arrow_reader, ndjson};
use super::harness::{ARROW, Backend, Harness, expect_error, header};

pub async fn tables_lifecycle(backend: Backend) {
    let h = Harness::start(backend).await;
    let created = h.create_table("orders").await;
    assert_eq!(created["latest_schema_id"], 1);
    assert_eq!(created["buckets"], 2);
    assert_eq!(created["partitions"], json!(["default"]));

    let got = h.get_json(h.v1("tables/orders")).await;
    assert_eq!(got["schemas"][0]["schema"]["fields"][0]["name"], "id");
    let list = h.get_json(h.v1("tables")).await;
    assert_eq!(list["tables"].as_array().unwrap().len(), 1);

    let again = h
        .post_json(
            h.v1("tables"),
            &json!({"name": "orders", "schema": {"fields": [{"name": "a", "type": "int8"}]}}),
        )
        .await;
    expect_error(again, StatusCode::CONFLICT, "table_exists").await;

    h.append_ndjson("orders", &ndjson(&[1])).await;
    let evolved: Value = h
        .post_json(
            h.v1("tables/orders/schemas"),
            &json!({"schema": {"fields": [
                {"name": "id", "type": "int64", "nullable": false},
                {"name": "msg", "type": "utf8"},
                {"name": "extra", "type": "float64"}
            ]}}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        evolved["schema_id"], 2,
        "a new schema version gets a new id"
    );

    // Rows in the new schema (the newest is the default), then a read across both versions.
    h.append_ndjson("orders", "{\"id\":2,\"msg\":\"m2\",\"extra\":0.5}\n")
        .await;
    let (both, _) = h.read_ndjson("orders", "offset=0").await;
    assert_eq!(
        both,
        vec![
            json!({"id":1,"msg":"m1"}),
            json!({"id":2,"msg":"m2","extra":0.5})
        ]
    );
    // Arrow answers hold one schema: the read stops before the batch of the next version.
    let r = h.read("orders", "offset=0", ARROW).await;
    assert_eq!(
        header(r.headers(), "mink-next-offset").as_deref(),
        Some("1")
    );
    assert_eq!(arrow_reader(r).await.schema().fields().len(), 2);
    let r = h.read("orders", "offset=1", ARROW).await;
    assert_eq!(arrow_reader(r).await.schema().fields().len(), 3);
    h.drop_table("orders").await;
    let r = h.http.get(h.v1("tables/orders")).send().await.unwrap();
    expect_error(r, StatusCode::NOT_FOUND, "table_not_found").await;

    // Dropping destroyed the streams: a new table of the same name starts empty.
    h.create_table("orders").await;
    let (rows, headers) = h.read_ndjson("orders", "offset=0").await;
    assert!(rows.is_empty());
    assert_eq!(
        header(&headers, "mink-high-watermark").as_deref(),
        Some("0")
    );
}
