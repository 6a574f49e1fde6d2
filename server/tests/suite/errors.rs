//! Error answers, table-driven: each row is a request, the status and error kind it must get,
//! and what else its body must say; the rows run in one loop and name themselves when they fail.
//! Afterwards the log must be as the setup left it. Also the rate limit's 429.

use mink_codec::BatchMeta;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::data::{chrono_ms, mink_batch, ndjson};
use super::harness::{Backend, Harness, MINK_BATCHES, NDJSON, error_of, header};

/// One error case of [`error_cases`].
struct Case {
    name: &'static str,
    request: reqwest::RequestBuilder,
    status: StatusCode,
    kind: &'static str,
    /// What else the error body must hold (`|_| true` when nothing).
    body: fn(&Value) -> bool,
}

fn case(
    name: &'static str,
    request: reqwest::RequestBuilder,
    status: StatusCode,
    kind: &'static str,
) -> Case {
    Case {
        name,
        request,
        status,
        kind,
        body: |_| true,
    }
}

impl Case {
    fn and_body(self, body: fn(&Value) -> bool) -> Case {
        Case { body, ..self }
    }
}

pub async fn error_cases(backend: Backend) {
    // A body over its format's limit is answered 413 before it is read; the node drains the rest
    // in the background, so a client still sending sees the answer, not a reset.
    let h = Harness::start_with(backend, |s| s.http.body.max_ndjson_bytes = 64 << 10).await;
    h.create_table("e").await;
    h.append_ndjson("e", &ndjson(&[1, 2, 3])).await;
    // A trim, so that offsets below the log start can be asked for.
    let r = h
        .post_json(h.v1("tables/e/buckets/0/trim"), &json!({"offset": 2}))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let trimmed: Value = r.json().await.unwrap();
    assert_eq!(trimmed["log_start"], 2);

    let mut bad_crc = mink_batch(&[9], BatchMeta::new(1));
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 0xff;
    let big = ndjson(&(0..10_000).collect::<Vec<_>>());
    assert!(big.len() > 64 << 10);
    let future = chrono_ms() + 3_600_000;
    let post = |content_type: &str| {
        h.http
            .post(h.records("e"))
            .header("content-type", content_type)
    };
    let get = |path: &str| h.http.get(h.v1(path));
    let read = |query: &str| {
        h.http
            .get(format!("{}?{query}", h.records("e")))
            .header("accept", NDJSON)
    };
    use StatusCode as S;
    let cases = [
        case(
            "a batch with a bad CRC",
            post(MINK_BATCHES).body(bad_crc),
            S::BAD_REQUEST,
            "invalid_batch",
        )
        .and_body(|b| {
            let message = b["message"].as_str().unwrap_or_default();
            message.contains("CRC") || message.contains("crc")
        }),
        case(
            "an unknown table",
            get("tables/nope/buckets/0/records"),
            S::NOT_FOUND,
            "table_not_found",
        ),
        case(
            "an unknown bucket",
            get("tables/e/buckets/7/records"),
            S::NOT_FOUND,
            "bucket_not_found",
        ),
        case(
            "an unknown partition",
            get("tables/e/buckets/0/records?partition=p9"),
            S::NOT_FOUND,
            "bucket_not_found",
        ),
        case(
            "an offset past the high watermark",
            read("offset=99"),
            S::RANGE_NOT_SATISFIABLE,
            "offset_out_of_range",
        ),
        case(
            "an offset below the log start",
            read("offset=0"),
            S::GONE,
            "offset_trimmed",
        )
        .and_body(|b| b["log_start"] == 2),
        case(
            "a timestamp in the future",
            get(&format!("tables/e/buckets/0/offsets?timestamp={future}")),
            S::BAD_REQUEST,
            "future_timestamp",
        ),
        case(
            "a body over http.body.max_ndjson_bytes",
            post(NDJSON).body(big),
            S::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        case(
            "rows that do not fit the schema",
            post(NDJSON).body("{\"id\":\"x\"}"),
            S::BAD_REQUEST,
            "invalid_rows",
        ),
        case(
            "an unknown media type",
            post("text/html").body("<p>"),
            S::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
        case(
            "bad JSON",
            h.http
                .post(h.v1("tables"))
                .header("content-type", "application/json")
                .body("{"),
            S::BAD_REQUEST,
            "bad_request",
        ),
        case(
            "a bad query",
            h.http.get(format!("{}?offset=abc", h.records("e"))),
            S::BAD_REQUEST,
            "bad_request",
        ),
        case(
            "a writer id without sequence",
            post(NDJSON)
                .header("mink-writer-id", "5")
                .body(ndjson(&[1])),
            S::BAD_REQUEST,
            "bad_request",
        ),
    ];
    for case in cases {
        let (status, body, _) = error_of(case.request.send().await.unwrap()).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (case.status, Some(case.kind)),
            "{}: {body}",
            case.name
        );
        assert!((case.body)(&body), "{}: {body}", case.name);
    }

    let (rows_, _) = h.read_ndjson("e", "").await;
    assert!(!rows_.is_empty(), "no offset: from the log start");
    // Nothing above changed the log.
    let offsets = h.offsets("e", "").await;
    assert_eq!(
        (&offsets["log_start"], &offsets["high_watermark"]),
        (&json!(2), &json!(3)),
        "{offsets}"
    );
}

pub async fn rate_limit(backend: Backend) {
    let h = Harness::start_with(backend, |s| {
        s.http.rate_limit_per_sec = 1;
        s.http.rate_limit_burst = 2;
    })
    .await;
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..4 {
        let r = h.http.get(h.v1("tables")).send().await.unwrap();
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            retry_after = header(r.headers(), "retry-after");
        }
        statuses.push(r.status());
    }
    assert_eq!(&statuses[..2], &[StatusCode::OK, StatusCode::OK]);
    assert!(
        statuses[2..].contains(&StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
    assert_eq!(retry_after.as_deref(), Some("1"));
}
