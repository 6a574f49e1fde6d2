//! Headless Chromium: a page served from another origin follows a bucket with `EventSource`
//! across forced recycles of the SSE stream with no gap and no repeat, and a cross-origin
//! `fetch` reads `Mink-Next-Offset`. The page reports what it saw to the server it came from.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::response::Html;
use axum::routing::{get, post};

use serde_json::{Value, json};
use tokio::sync::{Mutex, mpsc};

/// Rows the page must see.
const ROWS: i64 = 12;

const PAGE: &str = r#"<!doctype html><html><body><script>
const node = "NODE", want = WANT;
const seen = [];
let opens = 0;
const report = (result) => fetch("/result", {method: "POST", body: JSON.stringify(result)});
(async () => {
  const read = await fetch(node + "/v1/tables/t/buckets/0/records?offset=0");
  const nextOffset = read.headers.get("Mink-Next-Offset");
  await read.text();
  const events = new EventSource(node + "/v1/tables/t/buckets/0/records?offset=0");
  events.onopen = () => {
    opens += 1;
    if (opens === 1) fetch("/ready", {method: "POST", body: "open"});
  };
  events.onmessage = (e) => {
    for (const row of JSON.parse(e.data)) seen.push(row.id);
    if (seen.length >= want) { events.close(); report({seen, opens, nextOffset}); }
  };
})().catch((e) => report({error: String(e)}));
</script></body></html>"#;

type Results = Arc<Mutex<mpsc::Sender<String>>>;

async fn result(State(results): State<Results>, body: String) {
    let _ = results.lock().await.send(body).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_on_another_origin_follows_a_bucket_across_recycles() {
    // A recycle about every second: the page's EventSource reconnects several times.
    let node = super::memory_node(|settings| {
        settings.http.sse_recycle = Duration::from_millis(900);
    })
    .await;
    let http = reqwest::Client::new();
    let created = reqwest::Client::new()
        .post(format!("{}/v1/tables", node.url()))
        .json(&json!({"name": "t", "schema": {"fields": [{"name": "id", "type": "int64"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let records = format!("{}/v1/tables/t/buckets/0/records", node.url());
    let append = move |id: i64| {
        let http = http.clone();
        let url = records.clone();
        async move {
            let r = http
                .post(url)
                .header("content-type", "application/x-ndjson")
                .body(format!("{{\"id\":{id}}}\n"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
    };
    append(0).await;

    // The page's own origin: another port.
    let (sender, mut results) = mpsc::channel(2);
    let page = PAGE
        .replace("NODE", &node.url())
        .replace("WANT", &ROWS.to_string());
    let app = Router::new()
        .route("/page.html", get(move || async move { Html(page) }))
        .route("/result", post(result))
        .route("/ready", post(result))
        .with_state(Arc::new(Mutex::new(sender)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let page_url = format!("http://{}/page.html", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let profile = tempfile::tempdir().unwrap();
    // Killed with its helpers when dropped, also when an assertion below fails.
    let browser = mink_tests::ProcessGroup::spawn(
        std::process::Command::new(mink_tests::chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(&page_url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    )
    .unwrap();
    // Rows keep coming while the page follows, across recycles: from the moment its stream is
    // open (a browser slow to start would otherwise find every row there at once).
    let ready = tokio::time::timeout(Duration::from_secs(60), results.recv()).await;
    assert_eq!(
        ready.ok().flatten().as_deref(),
        Some("open"),
        "the page's EventSource opens"
    );
    let writer = tokio::spawn(async move {
        for id in 1..ROWS {
            tokio::time::sleep(Duration::from_millis(300)).await;
            append(id).await;
        }
    });
    let reported = tokio::time::timeout(Duration::from_secs(60), results.recv()).await;
    drop(browser);
    writer.await.unwrap();
    let reported: Value = serde_json::from_str(
        &reported
            .expect("the page reports within a minute")
            .expect("a report"),
    )
    .unwrap();
    assert_eq!(reported["error"], Value::Null, "{reported}");
    let seen: Vec<i64> = serde_json::from_value(reported["seen"].clone()).unwrap();
    assert_eq!(
        seen,
        (0..ROWS).collect::<Vec<_>>(),
        "no gap, no repeat: {reported}"
    );
    assert!(
        reported["opens"].as_u64().unwrap() >= 2,
        "the stream was recycled and reopened: {reported}"
    );
    // The fetch came once the first rows were there: the header names the offset after them.
    let next: i64 = reported["nextOffset"].as_str().unwrap().parse().unwrap();
    assert!((1..=ROWS).contains(&next), "{reported}");
    node.shutdown().await.unwrap();
}
