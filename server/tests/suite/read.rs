//! Reads beyond the plain range read: projection in each format, reads at the tail (empty with
//! the up-to-date marker, long-polls woken by an append, timed out, or released by a drop), and
//! offsets by timestamp.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mink_codec::batches;
use reqwest::StatusCode;
use serde_json::json;

use super::data::{arrow_reader, chrono_ms, ndjson, schema};
use super::harness::{ARROW, Backend, Harness, MINK_BATCHES, NDJSON, expect_error, header};

pub async fn projection(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("p").await;
    h.append_ndjson("p", &ndjson(&[1, 2])).await;
    let (rows_, _) = h.read_ndjson("p", "offset=0&columns=msg").await;
    assert_eq!(rows_, vec![json!({"msg": "m1"}), json!({"msg": "m2"})]);

    let r = h.read("p", "offset=0&columns=msg,id", ARROW).await;
    let names: Vec<String> = arrow_reader(r)
        .await
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, vec!["msg", "id"]);

    let r = h.read("p", "offset=0&columns=msg", MINK_BATCHES).await;
    let bytes = r.bytes().await.unwrap();
    let batch = batches(bytes).next().unwrap().unwrap();
    let projected = Arc::new(schema().project(&[1]).unwrap());
    let (rb, _) = batch.decode(&projected).unwrap();
    assert_eq!(rb.num_columns(), 1);
    assert_eq!(batch.base_offset(), 0);

    expect_error(
        h.read("p", "offset=0&columns=nope", NDJSON).await,
        StatusCode::BAD_REQUEST,
        "unknown_column",
    )
    .await;
}

/// Asserts the headers of an answer at the tail: up to date, next offset `next`.
fn assert_at_tail(r: &reqwest::Response, next: &str) {
    assert_eq!(
        header(r.headers(), "mink-up-to-date").as_deref(),
        Some("true")
    );
    assert_eq!(
        header(r.headers(), "mink-next-offset").as_deref(),
        Some(next)
    );
}

pub async fn tail_reads_and_long_poll(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("lp").await;
    h.append_ndjson("lp", &ndjson(&[1])).await;

    // A read at the high watermark returns at once, empty, with the marker.
    let started = Instant::now();
    let r = h.read("lp", "offset=1", NDJSON).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_at_tail(&r, "1");
    assert!(r.bytes().await.unwrap().is_empty());
    assert!(started.elapsed() < Duration::from_secs(2));

    // A long-poll parks until an append is durable, then returns it.
    let poll = h
        .park_long_poll(format!("{}?offset=1&live=long-poll", h.records("lp")))
        .await;
    h.append_ndjson("lp", &ndjson(&[2])).await;
    let r = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("the long-poll was woken by the append")
        .unwrap()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(r.headers(), "mink-next-offset").as_deref(),
        Some("2")
    );
    assert_eq!(r.text().await.unwrap(), "{\"id\":2,\"msg\":\"m2\"}\n");

    // Nothing arrives: 204 after the timeout, with the marker.
    let started = Instant::now();
    let r = h
        .read("lp", "offset=2&live=long-poll&timeout_ms=300", NDJSON)
        .await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_at_tail(&r, "2");
    assert_eq!(h.metric("mink_waiters").await, 0.0);

    // The log closing (its table dropped) releases a parked long-poll at once.
    let poll = h
        .park_long_poll(format!(
            "{}?offset=2&live=long-poll&timeout_ms=20000",
            h.records("lp")
        ))
        .await;
    let started = Instant::now();
    h.drop_table("lp").await;
    let r = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("the drop released the long-poll")
        .unwrap()
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(started.elapsed() < Duration::from_secs(5));
}

pub async fn offsets_and_timestamps(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("o").await;
    let before = chrono_ms() - 1;
    let a = h.append_ndjson("o", &ndjson(&[1, 2])).await;
    let b = h.append_ndjson("o", &ndjson(&[3])).await;
    let at = |ts: i64| {
        let h = &h;
        async move {
            h.offsets("o", &format!("?timestamp={ts}")).await["offset"]
                .as_u64()
                .unwrap()
        }
    };
    assert_eq!(at(before).await, 0);
    assert_eq!(at(a["commit_timestamp"].as_i64().unwrap()).await, 0);
    let tb = b["commit_timestamp"].as_i64().unwrap();
    let expected_b = if tb == a["commit_timestamp"].as_i64().unwrap() {
        0
    } else {
        2
    };
    assert_eq!(at(tb).await, expected_b);
    let now = chrono_ms();
    let latest = at(now).await;
    if now > tb {
        assert_eq!(latest, 3, "after the newest batch: the high watermark");
    } else {
        assert_eq!(latest, expected_b);
    }
    let offsets = h.offsets("o", "").await;
    assert_eq!(
        (&offsets["log_start"], &offsets["high_watermark"]),
        (&json!(0), &json!(3)),
        "{offsets}"
    );
    // Three rows kept: their batches take bytes on the store (or in the log cache, before
    // compaction), and the count says so.
    assert!(
        offsets["retained_bytes"].as_u64().is_some_and(|b| b > 0),
        "{offsets}"
    );
}

/// Long-polls parked at one offset are answered from one rendering of the batches that wake
/// them (`http/shared_renders.rs`): each still gets its own columns and `until`, and a bucket of
/// another table whose batches sit at the same offsets gets its own rows.
pub async fn long_polls_share_rendered_bodies(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("a").await;
    h.create_table("b").await;
    h.append_ndjson("a", &ndjson(&[1])).await;
    h.append_ndjson("b", &ndjson(&[10])).await;
    let park = |table: &str, query: &str| {
        let url = format!(
            "{}?offset=1&live=long-poll&timeout_ms=20000{query}",
            h.records(table)
        );
        let client = h.http.clone();
        tokio::spawn(async move {
            let r = client
                .get(url)
                .header("accept", NDJSON)
                .send()
                .await
                .expect("long-poll");
            assert_eq!(r.status(), StatusCode::OK);
            let next = header(r.headers(), "mink-next-offset").expect("next offset");
            (next, r.text().await.expect("body"))
        })
    };
    let whole: Vec<_> = (0..10).map(|_| park("a", "")).collect();
    let projected: Vec<_> = (0..5).map(|_| park("a", "&columns=msg")).collect();
    let cut: Vec<_> = (0..3).map(|_| park("a", "&until=2")).collect();
    let other: Vec<_> = (0..5).map(|_| park("b", "")).collect();
    h.wait_metric("mink_waiters", 23.0).await;

    // Table a's readers are answered (and leave their renders) before table b's append.
    h.append_ndjson("a", &ndjson(&[2, 3])).await;
    let rows_a = "{\"id\":2,\"msg\":\"m2\"}\n{\"id\":3,\"msg\":\"m3\"}\n";
    for poll in whole {
        assert_eq!(poll.await.unwrap(), ("3".to_owned(), rows_a.to_owned()));
    }
    for poll in projected {
        let msg = "{\"msg\":\"m2\"}\n{\"msg\":\"m3\"}\n".to_owned();
        assert_eq!(poll.await.unwrap(), ("3".to_owned(), msg));
    }
    for poll in cut {
        let first = "{\"id\":2,\"msg\":\"m2\"}\n".to_owned();
        assert_eq!(poll.await.unwrap(), ("2".to_owned(), first));
    }
    // A long-poll woken after another rendered the same range answers with that body without
    // reading the log: most of 18 long-polls of three kinds (those woken at once on the two
    // workers before the first render of their kind was kept read for themselves).
    let shared = h.metric("mink_read_tier_total{tier=\"shared\"}").await;
    assert!(
        shared >= 9.0,
        "{shared} of 18 long-polls answered from another's render"
    );
    h.append_ndjson("b", &ndjson(&[20, 30])).await;
    let rows_b = "{\"id\":20,\"msg\":\"m20\"}\n{\"id\":30,\"msg\":\"m30\"}\n";
    for poll in other {
        assert_eq!(poll.await.unwrap(), ("3".to_owned(), rows_b.to_owned()));
    }
}
