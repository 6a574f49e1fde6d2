//! The Durable Streams conformance suite (npm `@durable-streams/server-conformance-tests`, the
//! version `cargo xtask test` installs into `.tools/ds`) against `/ds` of a node, with the
//! node's and the suite's long-poll timeouts at 2 s so the run takes about a minute. Every test
//! must pass except those of the fork groups ("Fork - ..."), which may fail: forks are not served
//! (docs/durable-streams.md, "What is not served"). The suite skips its reserved subscription
//! tests itself; nothing else may be skipped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// The suite's tests of a feature Mink does not offer: any test under a top-level group with
/// this prefix may fail.
const NOT_SERVED_GROUP: &str = "Fork - ";
/// The group the suite itself skips (optional subscription APIs).
const SKIPPED_BY_THE_SUITE: &str = "Reserved subscription APIs";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_passes_except_forks() {
    let node = super::memory_node(|s| s.ds.long_poll_timeout = Duration::from_secs(2)).await;
    let suite = PathBuf::from(mink_tests::ds_suite());
    let base = format!("{}/ds", node.url());
    let report = tokio::task::spawn_blocking(move || run_suite(&suite, &base))
        .await
        .unwrap();

    let mut passed = 0;
    let mut not_served = 0;
    let mut unexpected = Vec::new();
    for file in report["testResults"].as_array().expect("testResults") {
        for test in file["assertionResults"]
            .as_array()
            .expect("assertionResults")
        {
            let group = test["ancestorTitles"][0].as_str().unwrap_or("");
            let title = test["title"].as_str().unwrap_or("");
            let status = test["status"].as_str().unwrap_or("");
            match status {
                "passed" => passed += 1,
                _ if group.starts_with(NOT_SERVED_GROUP) => not_served += 1,
                "skipped" | "pending" if group == SKIPPED_BY_THE_SUITE => {}
                _ => {
                    let why = test["failureMessages"][0].as_str().unwrap_or("");
                    let why: String = why.lines().next().unwrap_or("").chars().take(300).collect();
                    unexpected.push(format!("[{status}] {group} :: {title}: {why}"));
                }
            }
        }
    }
    eprintln!(
        "durable streams conformance: {passed} passed, {not_served} fork tests not passed, {} \
         unexpected",
        unexpected.len()
    );
    assert!(
        unexpected.is_empty(),
        "{} tests failed outside the fork groups:\n{}",
        unexpected.len(),
        unexpected.join("\n")
    );
    // The suite ran whole: its create, append, read, long-poll, SSE, caching, producer and
    // close groups are more than 250 tests.
    assert!(passed >= 250, "only {passed} tests passed");
    node.shutdown().await.unwrap();
}

/// Runs the suite against `base` (`http://host:port/ds`); its JSON report.
fn run_suite(suite: &Path, base: &str) -> Value {
    let id = std::process::id();
    let runner = suite.join(format!("mink-{id}.test.mjs"));
    let report = suite.join(format!("mink-{id}.json"));
    std::fs::write(
        &runner,
        format!(
            "import {{ runConformanceTests }} from \"@durable-streams/server-conformance-tests\";\n\
             runConformanceTests({{ baseUrl: {base:?}, longPollTimeoutMs: 2000 }});\n"
        ),
    )
    .expect("writing the suite's runner");
    let vitest = suite.join("node_modules").join(".bin").join("vitest");
    let run = mink_tests::run_client(
        vitest.to_str().unwrap(),
        &[
            "run",
            runner.file_name().unwrap().to_str().unwrap(),
            "--root",
            suite.to_str().unwrap(),
            "--no-coverage",
            "--reporter=json",
            &format!("--outputFile={}", report.display()),
        ],
        Duration::from_secs(600),
    )
    .expect("the suite starts");
    let _ = std::fs::remove_file(&runner);
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| {
        panic!(
            "the suite wrote no report ({e}); it said:\n{}\n{}",
            run.stdout, run.stderr
        )
    });
    let _ = std::fs::remove_file(&report);
    serde_json::from_str(&text).expect("the suite's report is JSON")
}

/// A stream's messages are its table's rows: read as NDJSON and Arrow over `/v1`, and a row
/// appended over `/v1` is a message over `/ds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_messages_are_its_tables_rows() {
    let node = super::memory_node(|_| {}).await;
    let http = reqwest::Client::new();
    let stream = format!("{}/ds/v1/stream/events/2026", node.url());
    let created = http
        .put(&stream)
        .header("content-type", "application/json")
        .body(r#"[{"a":1}, {"a":2}]"#)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    assert_eq!(
        created.headers()["stream-next-offset"],
        "00000000000000000002"
    );
    // The name maps to a table name that keeps `/` apart from every other byte.
    let records = format!(
        "{}/v1/tables/ds.events_2F2026/buckets/0/records",
        node.url()
    );
    let ndjson = http
        .get(format!("{records}?offset=0"))
        .header("accept", "application/x-ndjson")
        .send()
        .await
        .unwrap();
    assert_eq!(ndjson.status(), 200);
    let rows: Vec<Value> = ndjson
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let data: Vec<&str> = rows.iter().map(|r| r["data"].as_str().unwrap()).collect();
    // Each message is kept as the exact text the client sent.
    assert_eq!(data, [r#"{"a":1}"#, r#"{"a":2}"#]);

    let arrow = http
        .get(format!("{records}?offset=0"))
        .header("accept", "application/vnd.apache.arrow.stream")
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(arrow), None)
        .expect("an Arrow IPC stream");
    let mut from_arrow = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let column = batch
            .column_by_name("data")
            .expect("a data column")
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .expect("utf8 data for a JSON stream")
            .clone();
        from_arrow.extend((0..batch.num_rows()).map(|i| column.value(i).to_owned()));
    }
    assert_eq!(from_arrow, [r#"{"a":1}"#, r#"{"a":2}"#]);

    let appended = http
        .post(&records)
        .header("content-type", "application/x-ndjson")
        .body("{\"data\":\"{\\\"b\\\":3}\"}\n")
        .send()
        .await
        .unwrap();
    assert_eq!(appended.status(), 200, "{:?}", appended.text().await);
    let read = http
        .get(format!("{stream}?offset=-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    assert_eq!(read.headers()["stream-next-offset"], "00000000000000000003");
    let messages: Value = read.json().await.unwrap();
    assert_eq!(messages, serde_json::json!([{"a": 1}, {"a": 2}, {"b": 3}]));
    node.shutdown().await.unwrap();
}

/// A stream on local files through kill -9 and restarts: every acknowledged message is there,
/// a producer's retry of an acknowledged append is a duplicate (204, nothing appended twice),
/// the next sequence appends, a lower `Stream-Seq` is still refused, and a close holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_survives_kill_9_and_a_producer_retry_after_it_is_deduplicated() {
    let dir = tempfile::tempdir().unwrap();
    let mut process =
        mink_tests::node::NodeProcess::new(&mink_tests::node::binary(), dir.path()).unwrap();
    let config = process.base_config("ds-restart");
    let http = reqwest::Client::new();
    process.start(&config, None).unwrap();
    process.wait_ready(&http).await.unwrap();
    let stream = format!("{}/ds/v1/stream/orders", process.url());
    assert_eq!(create_text(&http, &stream).await, 201);
    let append = |seq: u32, body: &'static str| {
        let seq = seq.to_string();
        let (http, stream) = (&http, &stream);
        async move {
            let producer = [
                ("producer-id", "checkout"),
                ("producer-epoch", "0"),
                ("producer-seq", seq.as_str()),
            ];
            post_text(http, stream, body, &producer).await
        }
    };
    for (seq, body) in [(0, "a"), (1, "b")] {
        let answer = append(seq, body).await;
        assert_eq!(answer.status(), 200, "seq {seq}");
    }
    let sequenced = post_text(&http, &stream, "c", &[("stream-seq", "0005")]).await;
    assert_eq!(sequenced.status(), 204);

    process.kill().unwrap();
    process.start(&config, None).unwrap();
    process.wait_ready(&http).await.unwrap();
    let read = |http: reqwest::Client, url: String| async move {
        http.get(format!("{url}?offset=-1"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    assert_eq!(read(http.clone(), stream.clone()).await, "abc");
    let retried = append(1, "b").await;
    assert_eq!(
        retried.status(),
        204,
        "a retry after the restart is a duplicate"
    );
    assert_eq!(retried.headers()["producer-seq"], "1");
    let lower = post_text(&http, &stream, "x", &[("stream-seq", "0004")]).await;
    assert_eq!(lower.status(), 409, "Stream-Seq survives the restart");
    let next = append(2, "d").await;
    assert_eq!(next.status(), 200);
    let closed = http
        .post(&stream)
        .header("stream-closed", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), 204);
    assert_eq!(read(http.clone(), stream.clone()).await, "abcd");

    process.kill().unwrap();
    process.start(&config, None).unwrap();
    process.wait_ready(&http).await.unwrap();
    let after = post_text(&http, &stream, "e", &[]).await;
    assert_eq!(after.status(), 409, "the close survives the restart");
    assert_eq!(after.headers()["stream-closed"], "true");
    let head = http.head(&stream).send().await.unwrap();
    assert_eq!(head.headers()["stream-closed"], "true");
    assert_eq!(head.headers()["stream-next-offset"], "00000000000000000005");
    assert_eq!(read(http.clone(), stream.clone()).await, "abcd");
    process.stop(Duration::from_secs(30)).unwrap();
}

/// `/ds` is behind the same tokens as `/v1` (a stream is its table `ds.{name}` in a token's
/// table list), and the same browser rules: preflights allow the protocol's request headers,
/// answers expose its `Stream-*` and `Producer-*` headers, and a write from an origin that may
/// not write changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_browser_rules_hold_for_streams() {
    use mink_server::settings::{Scope, Secret, TokenSettings};
    const WRITER: &str = "ds-writer-token-0123456789";
    const READER: &str = "ds-reader-token-0123456789";
    const SCOPED: &str = "ds-scoped-token-0123456789";
    let node = super::memory_node(|s| {
        s.auth.token = Some(Secret::new(WRITER));
        s.auth.tokens = vec![
            TokenSettings {
                token: Secret::new(READER),
                scope: Scope::Read,
                tables: None,
            },
            TokenSettings {
                token: Secret::new(SCOPED),
                scope: Scope::Write,
                tables: Some(vec!["ds.mine".to_owned()]),
            },
        ];
    })
    .await;
    let http = reqwest::Client::new();
    let url = |name: &str| format!("{}/ds/v1/stream/{name}", node.url());
    let send = |request: reqwest::RequestBuilder, token: Option<&str>| {
        let request = match token {
            Some(t) => request.bearer_auth(t),
            None => request,
        };
        async move { request.send().await.unwrap() }
    };
    let put = |name: &str| http.put(url(name)).header("content-type", "text/plain");
    let post = |name: &str, body: &'static str| {
        http.post(url(name))
            .header("content-type", "text/plain")
            .body(body)
    };
    assert_eq!(send(put("mine"), None).await.status(), 401);
    assert_eq!(send(put("mine"), Some(READER)).await.status(), 403);
    assert_eq!(
        send(http.head(url("mine")), Some(READER)).await.status(),
        404,
        "nothing was created"
    );
    assert_eq!(send(put("mine"), Some(SCOPED)).await.status(), 201);
    assert_eq!(send(put("theirs"), Some(SCOPED)).await.status(), 403);
    assert_eq!(send(put("theirs"), Some(WRITER)).await.status(), 201);
    assert_eq!(send(post("mine", "a"), Some(SCOPED)).await.status(), 204);
    assert_eq!(send(post("theirs", "x"), Some(SCOPED)).await.status(), 403);
    assert_eq!(send(post("mine", "x"), Some(READER)).await.status(), 403);
    assert_eq!(
        send(http.delete(url("mine")), Some(READER)).await.status(),
        403
    );
    // Reads take a read token, in the header or (for EventSource) in `access_token`.
    let read = send(http.get(format!("{}?offset=-1", url("mine"))), Some(READER)).await;
    assert_eq!(read.status(), 200);
    assert_eq!(read.text().await.unwrap(), "a");
    let by_query = send(
        http.get(format!("{}?offset=-1&access_token={READER}", url("mine"))),
        None,
    )
    .await;
    assert_eq!(by_query.status(), 200);
    assert_eq!(by_query.text().await.unwrap(), "a");
    assert_eq!(send(http.get(url("theirs")), None).await.status(), 401);

    // A page on another origin: the preflight of a producer's append allows its headers, and
    // an answer exposes the protocol's.
    let origin = "http://page.example";
    let preflight = http
        .request(reqwest::Method::OPTIONS, url("mine"))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type,producer-id,producer-epoch,producer-seq,stream-closed,stream-seq",
        )
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let allowed = preflight.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for h in [
        "producer-id",
        "producer-epoch",
        "producer-seq",
        "stream-closed",
        "stream-seq",
    ] {
        assert!(allowed.contains(h), "{h} not in {allowed}");
    }
    let read = send(
        http.get(format!("{}?offset=-1", url("mine")))
            .header("origin", origin),
        Some(READER),
    )
    .await;
    let exposed = read.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for h in [
        "stream-next-offset",
        "stream-up-to-date",
        "stream-cursor",
        "stream-closed",
        "producer-seq",
        "etag",
    ] {
        assert!(exposed.contains(h), "{h} not in {exposed}");
    }
    node.shutdown().await.unwrap();

    // Without tokens, a write from an origin that may not write is refused and changes nothing.
    let open = super::memory_node(|_| {}).await;
    let stream = format!("{}/ds/v1/stream/s", open.url());
    assert_eq!(create_text(&http, &stream).await, 201);
    let foreign = post_text(&http, &stream, "x", &[("origin", origin)]).await;
    assert_eq!(foreign.status(), 403);
    let after = http
        .get(format!("{stream}?offset=-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        after.headers()["stream-next-offset"],
        "00000000000000000000"
    );
    open.shutdown().await.unwrap();
}

/// Creates a `text/plain` stream at `url`; the status.
async fn create_text(http: &reqwest::Client, url: &str) -> reqwest::StatusCode {
    let created = http.put(url).header("content-type", "text/plain");
    created.send().await.unwrap().status()
}

/// POSTs `body` as `text/plain` to `url`, with `headers`.
async fn post_text(
    http: &reqwest::Client,
    url: &str,
    body: &'static str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = http
        .post(url)
        .header("content-type", "text/plain")
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// A stream's producer names are bounded (`ds.max_producers_per_stream`): a new one past the
/// limit is a 429 that appends nothing, and the names it has keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_names_per_stream_are_bounded() {
    let node = super::memory_node(|s| s.ds.max_producers_per_stream = 2).await;
    let http = reqwest::Client::new();
    let stream = format!("{}/ds/v1/stream/bounded", node.url());
    assert_eq!(create_text(&http, &stream).await, 201);
    let produce = |name: &'static str, seq: &'static str| {
        let (http, stream) = (&http, &stream);
        async move {
            let producer = [
                ("producer-id", name),
                ("producer-epoch", "0"),
                ("producer-seq", seq),
            ];
            post_text(http, stream, "m", &producer).await.status()
        }
    };
    assert_eq!(produce("p1", "0").await, 200);
    assert_eq!(produce("p2", "0").await, 200);
    assert_eq!(produce("p3", "0").await, 429);
    assert_eq!(produce("p1", "1").await, 200);
    let head = http.head(&stream).send().await.unwrap();
    assert_eq!(head.headers()["stream-next-offset"], "00000000000000000003");
    node.shutdown().await.unwrap();
}

/// `[ds] enabled = false`: no `/ds` route, and nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_end_can_be_turned_off() {
    let node = super::memory_node(|s| s.ds.enabled = false).await;
    let http = reqwest::Client::new();
    let stream = format!("{}/ds/v1/stream/off", node.url());
    assert_eq!(create_text(&http, &stream).await, 404);
    let tables: Value = http
        .get(format!("{}/v1/tables", node.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(!tables.to_string().contains("ds.off"), "{tables}");
    node.shutdown().await.unwrap();
}
