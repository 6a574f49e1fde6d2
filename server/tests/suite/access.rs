//! Who may do what: bearer tokens and their scopes (in the header and in `access_token`, for
//! reads, SSE and `/metrics`; `/healthz` stays open), a node without tokens open as before, the
//! writer-id rule (an id the allocator never handed out is refused), and appends that need an
//! explicit, known Content-Type. Each refusal leaves the log as it was.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use mink_codec::BatchMeta;
use mink_server::settings::{Scope, Secret, TokenSettings};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::data::{ids_of, mink_batch, ndjson};
use super::harness::{Backend, Harness, MINK_BATCHES, NDJSON, error_of, expect_error, header};

const WRITER: &str = "writer-token-0123456789";
const READER: &str = "reader-token-0123456789";
/// Read-write, on table `a` only.
const SCOPED: &str = "scoped-token-0123456789";

fn token(token: &str, scope: Scope, tables: Option<&[&str]>) -> TokenSettings {
    TokenSettings {
        token: Secret::new(token),
        scope,
        tables: tables.map(|t| t.iter().map(|s| (*s).to_owned()).collect()),
    }
}

/// A client that sends `Authorization: Bearer {token}` with every request.
fn client_with(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    let value = format!("Bearer {token}").parse().expect("header value");
    headers.insert(reqwest::header::AUTHORIZATION, value);
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("client")
}

pub async fn access_control(backend: Backend) {
    let mut h = Harness::start_with(backend, |s| {
        s.auth.token = Some(Secret::new(WRITER));
        s.auth.tokens = vec![
            token(READER, Scope::Read, None),
            token(SCOPED, Scope::Write, Some(&["a"])),
        ];
    })
    .await;
    let anonymous = h.http.clone();
    let (writer, reader, scoped) = (
        client_with(WRITER),
        client_with(READER),
        client_with(SCOPED),
    );

    // `/healthz` needs nothing; everything else needs a valid token.
    let health = anonymous
        .get(format!("{}/healthz", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    for request in [
        anonymous.get(h.v1("tables")),
        anonymous.get(format!("{}/metrics", h.url)),
        anonymous.post(h.v1("writers")),
        anonymous.get(h.v1("nope")),
        client_with("not-a-configured-token").get(h.v1("tables")),
        anonymous
            .get(h.v1("tables"))
            .header("authorization", format!("Basic {WRITER}")),
        anonymous.get(format!("{}?access_token=wrong", h.v1("tables"))),
    ] {
        let (status, body, headers) = error_of(request.send().await.unwrap()).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("unauthorized")),
            "{body}"
        );
        assert_eq!(
            header(&headers, "www-authenticate").as_deref(),
            Some("Bearer")
        );
        assert!(!body.to_string().contains(WRITER), "{body}");
    }

    // The write token does everything (the harness's calls go through it from here on).
    h.http = writer.clone();
    h.create_table("a").await;
    h.create_table("b").await;
    h.append_ndjson("a", &ndjson(&[1, 2])).await;
    h.append_ndjson("b", &ndjson(&[10])).await;

    // The read token reads but never writes.
    h.http = reader.clone();
    let (rows, _) = h.read_ndjson("a", "offset=0").await;
    assert_eq!(ids_of(&rows), vec![1, 2]);
    assert_eq!(h.offsets("b", "").await["high_watermark"], 1);
    let r = reader
        .get(format!("{}/metrics", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    for request in [
        reader
            .post(h.records("a"))
            .header("content-type", NDJSON)
            .body(ndjson(&[3])),
        reader
            .post(h.v1("tables/a/buckets/0/trim"))
            .json(&json!({"offset": 1})),
        reader.post(h.v1("writers")),
        reader.delete(h.v1("tables/a")),
        reader
            .post(h.v1("tables/a/schemas"))
            .json(&json!({"schema": {"fields": []}})),
        reader
            .post(h.v1("tables"))
            .json(&json!({"name": "c", "schema": {"fields": []}})),
    ] {
        expect_error(
            request.send().await.unwrap(),
            StatusCode::FORBIDDEN,
            "forbidden",
        )
        .await;
    }

    // The table-scoped token works on its table only, and sees only it.
    h.http = scoped.clone();
    h.append_ndjson("a", &ndjson(&[3])).await;
    // A writer id needs no table (`writer_id` asserts the 200).
    h.writer_id().await;
    let listed = h.get_json(h.v1("tables")).await;
    let names: Vec<&str> = listed["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["a"]);
    for request in [
        scoped
            .post(h.records("b"))
            .header("content-type", NDJSON)
            .body(ndjson(&[11])),
        scoped.get(format!("{}?offset=0", h.records("b"))),
        scoped.get(h.v1("tables/b")),
        scoped.get(h.v1("tables/b/buckets/0/offsets")),
        scoped.delete(h.v1("tables/b")),
        // A name the router decodes is checked decoded: `%62` is `b`.
        scoped.get(h.v1("tables/%62/buckets/0/offsets")),
        scoped.post(h.v1("tables")).json(&json!({
            "name": "c", "schema": {"fields": [{"name": "id", "type": "int64"}]}
        })),
        scoped.get(format!("{}/metrics", h.url)),
    ] {
        expect_error(
            request.send().await.unwrap(),
            StatusCode::FORBIDDEN,
            "forbidden",
        )
        .await;
    }

    // `access_token` in the query works where a header cannot be sent (reads, offsets, SSE),
    // and never reaches the handlers' strict query parsers.
    let r = anonymous
        .get(format!("{}?offset=0&access_token={READER}", h.records("a")))
        .header("accept", NDJSON)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.text().await.unwrap().lines().count(), 3);
    let offsets: Value = anonymous
        .get(format!(
            "{}?access_token={SCOPED}",
            h.v1("tables/a/buckets/0/offsets")
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(offsets["high_watermark"], 3, "{offsets}");
    let response = anonymous
        .get(format!(
            "{}?offset=0&live=sse&access_token={READER}",
            h.records("a")
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = response.bytes_stream().eventsource();
    let first = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("an event")
        .expect("the stream is open")
        .expect("well-formed event");
    let rows: Vec<Value> = serde_json::from_str(&first.data).unwrap();
    assert_eq!(ids_of(&rows), vec![1, 2]);
    drop(events);
    let r = anonymous
        .get(format!("{}/metrics?access_token={WRITER}", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let both = reader
        .get(format!("{}?access_token={READER}", h.v1("tables")))
        .send()
        .await
        .unwrap();
    expect_error(both, StatusCode::BAD_REQUEST, "bad_request").await;

    // Nothing refused above changed a log.
    h.http = writer;
    let (rows, _) = h.read_ndjson("a", "offset=0").await;
    assert_eq!(ids_of(&rows), vec![1, 2, 3]);
    let (rows, _) = h.read_ndjson("b", "offset=0").await;
    assert_eq!(ids_of(&rows), vec![10]);
    assert!(h.get_json(h.v1("tables/b")).await["name"] == "b");
}

/// Without tokens the node is open as before, and an `access_token` a client sends anyway is
/// ignored rather than refused by the strict query parsers.
pub async fn open_without_tokens(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("o").await;
    h.append_ndjson("o", &ndjson(&[1])).await;
    let (rows, _) = h.read_ndjson("o", "offset=0&access_token=anything").await;
    assert_eq!(ids_of(&rows), vec![1]);
    let r = h
        .http
        .get(format!("{}/metrics", h.url))
        .header("authorization", "Basic dXNlcjpwYXNz")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

/// A batch must name a writer id the allocator handed out, in every format; appends need an
/// explicit, known Content-Type.
pub async fn writer_ids_and_content_types(backend: Backend) {
    let h = Harness::start(backend).await;
    h.create_table("w").await;
    let writer = h.writer_id().await;
    let ok = h.append_as("w", writer, 0, &[1]).await;
    assert_eq!(ok.status(), StatusCode::OK);

    let never = writer + 1_000_000;
    let refused = [
        h.append_as("w", never, 0, &[2]).await,
        h.append(
            "w",
            MINK_BATCHES,
            mink_batch(&[2], BatchMeta::new(1).with_writer(never as i64, 0)),
        )
        .await,
        // One batch of a request with an unknown writer refuses the whole request.
        h.append("w", MINK_BATCHES, {
            let mut two = mink_batch(&[2], BatchMeta::new(1).with_writer(writer as i64, 1));
            two.extend(mink_batch(
                &[3],
                BatchMeta::new(1).with_writer(never as i64, 0),
            ));
            two
        })
        .await,
    ];
    for response in refused {
        let body = expect_error(response, StatusCode::BAD_REQUEST, "unknown_writer").await;
        assert!(body["high_mark"].as_u64().unwrap() <= never, "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("POST /v1/writers"),
            "{body}"
        );
    }
    // The allocated writer goes on where it was: the refused requests consumed no sequence.
    let next = h.append_as("w", writer, 1, &[2]).await;
    assert_eq!(next.status(), StatusCode::OK);
    // A batch without a writer id needs none.
    h.append_ok("w", MINK_BATCHES, mink_batch(&[3], BatchMeta::new(1)))
        .await;

    let post = |content_type: Option<&str>| {
        let request = h.http.post(h.records("w")).body(ndjson(&[9]));
        match content_type {
            Some(ct) => request.header("content-type", ct),
            None => request,
        }
    };
    for content_type in [
        None,
        Some("application/x-www-form-urlencoded"),
        Some("text/plain"),
        Some("multipart/form-data; boundary=x"),
    ] {
        let response = post(content_type).send().await.unwrap();
        expect_error(
            response,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        )
        .await;
    }
    let (rows, _) = h.read_ndjson("w", "offset=0").await;
    assert_eq!(
        ids_of(&rows),
        vec![1, 2, 3],
        "refused appends appended nothing"
    );
}
