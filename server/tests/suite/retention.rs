//! Retention: a table's policy set at create and changed later, shown with its source; a bucket
//! trimmed by size by the node's own background task, with the objects below the new log start
//! gone from the store afterwards; and (embedded only, on an injected clock) by age.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mink_runtime::ManualClock;
use mink_server::NodeBuilder;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::data::ids_of;
use super::harness::{Backend, Harness, expect_error, store_of};

/// Rows `first..first + count` of about 1 KiB each, of text that does not repeat.
fn wide_rows(first: i64, count: i64) -> String {
    let mut state = first as u64 ^ 0x9e37_79b9_7f4a_7c15;
    (first..first + count)
        .map(|id| {
            let msg: String = (0..64)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    format!("{:016x}", state)
                })
                .collect();
            format!("{{\"id\":{id},\"msg\":\"{msg}\"}}\n")
        })
        .collect()
}

async fn create(h: &Harness, name: &str, retention: Value) -> reqwest::Response {
    h.post_json(
        h.v1("tables"),
        &json!({
            "name": name,
            "schema": {"fields": [
                {"name": "id", "type": "int64", "nullable": false},
                {"name": "msg", "type": "utf8"}
            ]},
            "retention": retention,
        }),
    )
    .await
}

/// The policy at create, in `GET /v1/tables/{t}`, changed with PATCH, refused when too small.
pub async fn retention_policy_api(backend: Backend) {
    let h = Harness::start_with(backend, |s| {
        s.retention.bytes = Some(1 << 30);
    })
    .await;
    let created = create(&h, "p", json!({"age_ms": 3_600_000})).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let table: Value = created.json().await.expect("json");
    assert_eq!(
        table["retention"]["policy"],
        json!({"age_ms": 3_600_000}),
        "{table}"
    );
    assert_eq!(
        table["retention"]["effective"],
        json!({
            "age_ms": {"value": 3_600_000, "source": "table"},
            "bytes": {"value": 1u64 << 30, "source": "node"},
        }),
        "{table}"
    );
    let patch = |body: Value| h.http.patch(h.v1("tables/p")).json(&body).send();
    let changed: Value = patch(json!({"retention": {"bytes": 2_097_152}}))
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(
        changed["retention"]["policy"],
        json!({"bytes": 2_097_152}),
        "{changed}"
    );
    assert_eq!(
        changed["retention"]["effective"]["age_ms"],
        Value::Null,
        "{changed}"
    );
    let got = h.get_json(h.v1("tables/p")).await;
    assert_eq!(got["retention"], changed["retention"]);
    // Back to the node's default.
    let reset: Value = patch(json!({"retention": null}))
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(reset["retention"]["policy"], Value::Null);
    assert_eq!(reset["retention"]["effective"]["bytes"]["source"], "node");

    // Too small, or not a policy: refused, and nothing changed.
    let small_age = expect_error(
        patch(json!({"retention": {"age_ms": 1000}}))
            .await
            .expect("request"),
        StatusCode::BAD_REQUEST,
        "invalid_retention",
    )
    .await;
    assert!(
        small_age["message"]
            .as_str()
            .is_some_and(|m| m.contains("retention.age_ms")),
        "{small_age}"
    );
    expect_error(
        create(&h, "q", json!({"bytes": 10})).await,
        StatusCode::BAD_REQUEST,
        "invalid_retention",
    )
    .await;
    let typo = patch(json!({"retention": {"age": 600_000}}))
        .await
        .expect("request");
    assert_eq!(typo.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        h.get_json(h.v1("tables/p")).await["retention"],
        reset["retention"]
    );
    assert_eq!(
        h.get_json(h.v1("tables/q")).await["error"],
        "table_not_found"
    );
}

/// The background task trims a bucket over its byte limit at an object-range boundary; garbage
/// collection then deletes the objects wholly below the new log start.
pub async fn retention_by_size(backend: Backend) {
    let h = Harness::start_with(backend, |s| {
        s.engine.compaction.delete_grace = Duration::ZERO;
        s.retention.interval = Duration::from_millis(100);
    })
    .await;
    let created = create(&h, "s", json!({"bytes": 1_048_576})).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    let node = h.node.as_ref().expect("node");
    // Four appends of about 620 KiB, each compacted into its own object range.
    const ROWS: i64 = 600;
    for chunk in 0..4 {
        h.append_ndjson("s", &wide_rows(chunk * ROWS, ROWS)).await;
        node.engine().compact_now().await.expect("compaction");
    }
    let objects_before = node
        .core()
        .metadata()
        .list_objects()
        .await
        .expect("objects");
    // Two chunks are over 1 MiB, one is under: the task keeps the newest only.
    let deadline = Instant::now() + Duration::from_secs(20);
    let offsets = loop {
        let offsets = h.offsets("s", "").await;
        if offsets["log_start"] == 3 * ROWS {
            break offsets;
        }
        assert!(
            Instant::now() < deadline,
            "retention never trimmed to {}: {offsets}",
            3 * ROWS
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(offsets["high_watermark"], 4 * ROWS, "{offsets}");
    let retained = offsets["retained_bytes"].as_u64().expect("retained bytes");
    assert!(retained > 500_000 && retained <= 1_048_576, "{offsets}");
    assert!(h.metric("mink_retention_trimmed_offsets_total").await >= (3 * ROWS) as f64);

    // Below the log start: 410; from it: the newest chunk, whole.
    expect_error(
        h.read("s", "offset=0", super::harness::NDJSON).await,
        StatusCode::GONE,
        "offset_trimmed",
    )
    .await;
    let (rows, _) = h.read_ndjson("s", &format!("offset={}", 3 * ROWS)).await;
    assert_eq!(ids_of(&rows), (3 * ROWS..4 * ROWS).collect::<Vec<_>>());

    // Garbage collection removes the objects wholly below the log start, from the metadata and
    // from the store.
    node.engine().maintain_now().await.expect("second pass");
    node.engine().maintain_now().await.expect("second pass");
    let objects_after = node
        .core()
        .metadata()
        .list_objects()
        .await
        .expect("objects");
    let removed: Vec<_> = objects_before
        .iter()
        .filter(|o| !objects_after.iter().any(|a| a.id == o.id))
        .collect();
    assert!(removed.len() >= 3, "removed {} objects", removed.len());
    let store = store_of(&h.backend.settings);
    for object in removed {
        assert!(
            object
                .ranges
                .iter()
                .all(|r| r.end_offset <= (3 * ROWS) as u64),
            "an object holding kept offsets was removed: {object:?}"
        );
        let gone = store.head(&object.key).await;
        assert!(
            gone.as_ref().is_err_and(|e| e.is_not_found()),
            "{} is still on the store: {gone:?}",
            object.key
        );
    }
    // The kept chunk is still read back after the collection.
    let (rows, _) = h.read_ndjson("s", &format!("offset={}", 3 * ROWS)).await;
    assert_eq!(rows.len(), ROWS as usize);
}

/// By age, on the node's injected clock: batches committed before `now - age_ms` go, the newer
/// ones stay; a run with nothing old trims nothing.
pub async fn retention_by_age(backend: Backend) {
    let mut settings = backend.settings.clone();
    settings.listen = "127.0.0.1:0".parse().expect("address");
    settings.flight.listen = None;
    settings.kafka.listen = None;
    settings.engine.compaction.delete_grace = Duration::ZERO;
    let start = super::data::chrono_ms();
    let clock = Arc::new(ManualClock::new(start));
    let node = NodeBuilder::from_settings(settings)
        .await
        .expect("components")
        .clock(clock.clone())
        .start()
        .await
        .expect("node starts");
    let h = Harness::attach(backend, node);
    let created = create(&h, "a", json!({"age_ms": 60_000})).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    h.append_ndjson("a", &super::data::ndjson(&[1, 2])).await;
    clock.advance(40_000);
    h.append_ndjson("a", &super::data::ndjson(&[3])).await;
    let core = h.node.as_ref().expect("node").core().clone();
    let report = mink_server::retention::run_once(&core).await.expect("run");
    assert_eq!((report.buckets, report.trimmed), (1, 0), "{report:?}");
    // 70 s after the first append and 30 s after the second: the first batch is too old.
    clock.advance(30_000);
    let report = mink_server::retention::run_once(&core).await.expect("run");
    assert_eq!(
        (report.trimmed, report.trimmed_offsets),
        (1, 2),
        "{report:?}"
    );
    let offsets = h.offsets("a", "").await;
    assert_eq!(
        (&offsets["log_start"], &offsets["high_watermark"]),
        (&json!(2), &json!(3)),
        "{offsets}"
    );
    let (rows, _) = h.read_ndjson("a", "offset=2").await;
    assert_eq!(ids_of(&rows), [3]);
    // Once everything is older than the limit, the log is empty at its high watermark, and
    // garbage collection deletes its objects from the store.
    let engine = h.node.as_ref().expect("node").engine().clone();
    engine.compact_now().await.expect("compaction");
    let before = core.metadata().list_objects().await.expect("objects");
    assert!(!before.is_empty(), "the rows are in committed objects");
    clock.advance(60_000);
    let report = mink_server::retention::run_once(&core).await.expect("run");
    assert_eq!(report.trimmed_offsets, 1, "{report:?}");
    assert_eq!(h.offsets("a", "").await["log_start"], 3);
    engine.maintain_now().await.expect("second pass");
    engine.maintain_now().await.expect("second pass");
    let after = core.metadata().list_objects().await.expect("objects");
    assert!(
        after.is_empty(),
        "every object was wholly below the log start: {after:?}"
    );
    let store = store_of(&h.backend.settings);
    for object in &before {
        let gone = store.head(&object.key).await;
        assert!(
            gone.as_ref().is_err_and(|e| e.is_not_found()),
            "{} is still on the store: {gone:?}",
            object.key
        );
    }
    // Appends go on at the high watermark.
    let ack = h.append_ndjson("a", &super::data::ndjson(&[4])).await;
    assert_eq!(ack["base_offset"], 3, "{ack}");
}
