//! The built-in dashboard in headless Chromium, driven through ChromeDriver's WebDriver API:
//! the tables with their schemas, retention and every bucket's offsets, the chart of the node's
//! counters, and a live tail that shows rows appended while it watches. A screenshot is left in
//! the test's output folder.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use mink_server::Node;
use mink_tests::ProcessGroup;
use serde_json::{Value, json};

/// A ChromeDriver process and one browser session of it.
struct Browser {
    _driver: ProcessGroup,
    url: String,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start() -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        // With the browser it starts in a process group of its own, killed as a whole when
        // dropped: no browser outlives the test.
        let driver = ProcessGroup::spawn(
            Command::new(mink_tests::chromedriver())
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = http.get(format!("{url}/status")).send().await;
            if let Ok(r) = ready
                && let Ok(body) = r.json::<Value>().await
                && body["value"]["ready"] == true
            {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver never became ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().expect("profile folder");
        let created: Value = http
            .post(format!("{url}/session"))
            .json(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": which(&mink_tests::chromium()),
                    "args": [
                        "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        "--window-size=1400,900",
                        format!("--user-data-dir={}", profile.path().display()),
                    ],
                },
            }}}))
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .expect("json");
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        Browser {
            _driver: driver,
            url,
            session,
            http,
            _profile: profile,
        }
    }

    async fn command(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}/{path}", self.url, self.session);
        let mut request = self.http.request(method, url);
        if !body.is_null() {
            request = request.json(&body);
        }
        let answer: Value = request
            .send()
            .await
            .expect("webdriver request")
            .json()
            .await
            .expect("json");
        answer["value"].clone()
    }

    async fn open(&self, page: &str) {
        self.command(reqwest::Method::POST, "url", json!({ "url": page }))
            .await;
    }

    /// The value of a script run in the page.
    async fn eval(&self, script: &str) -> Value {
        self.command(
            reqwest::Method::POST,
            "execute/sync",
            json!({"script": script, "args": []}),
        )
        .await
    }

    /// Polls `script` until `done` holds of its value (at most 30 s); returns the value.
    async fn until(&self, script: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let value = self.eval(script).await;
            if done(&value) {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "the page never got there: {value}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn screenshot(&self) -> Vec<u8> {
        let png = self
            .command(reqwest::Method::GET, "screenshot", Value::Null)
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(
                png.as_str()
                    .unwrap_or_else(|| panic!("no screenshot: {png}")),
            )
            .expect("PNG")
    }
}

/// The full path of `program` on the PATH (ChromeDriver wants a path).
fn which(program: &str) -> String {
    if program.contains('/') {
        return program.to_owned();
    }
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|dir| std::path::Path::new(dir).join(program))
        .find(|p| p.exists())
        .map_or_else(|| program.to_owned(), |p| p.display().to_string())
}

async fn append(http: &reqwest::Client, node: &Node, table: &str, bucket: u32, body: String) {
    let r = http
        .post(format!(
            "{}/v1/tables/{table}/buckets/{bucket}/records",
            node.url()
        ))
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .expect("append");
    assert_eq!(r.status(), 200);
}

/// The table rows of the dashboard as (table, partition/bucket, log start, high watermark,
/// owner), and the tail's rows and status.
const STATE: &str = r##"
const rows = [...document.querySelectorAll("#tables tbody tr")].map((tr) => [...tr.children].map((td) => td.textContent));
const tail = [...document.querySelectorAll("#tail-rows .row")].map((d) => d.textContent);
const series = [...document.querySelectorAll("#legend .series")].map((s) => s.dataset.metric);
const appendsPerSecond = Number((document.querySelector('#legend [data-metric="mink_appends_total"]') || {textContent: "0"}).textContent.split(" ").pop());
return { rows, tail, status: document.getElementById("tail-status").textContent, series, appendsPerSecond,
         health: document.getElementById("health").textContent };
"##;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_tables_offsets_a_chart_and_a_live_tail() {
    let node = super::memory_node(|_| {}).await;
    let http = reqwest::Client::new();
    for (name, buckets, retention) in [
        ("events", 2, Value::Null),
        ("audit", 1, json!({"age_ms": 3_600_000})),
    ] {
        let mut body = json!({"name": name, "buckets": buckets, "schema": {"fields": [
            {"name": "id", "type": "int64", "nullable": false}, {"name": "msg", "type": "utf8"}]}});
        if !retention.is_null() {
            body["retention"] = retention;
        }
        let r = http
            .post(format!("{}/v1/tables", node.url()))
            .json(&body)
            .send()
            .await
            .expect("create");
        assert_eq!(r.status(), 201);
    }
    let rows = |ids: std::ops::Range<i64>| -> String {
        ids.map(|i| format!("{{\"id\":{i},\"msg\":\"m{i}\"}}\n"))
            .collect()
    };
    append(&http, &node, "events", 0, rows(0..5)).await;
    append(&http, &node, "events", 1, rows(0..3)).await;

    let browser = Browser::start().await;
    browser
        .open(&format!("{}/dashboard#tail=events/0&from=0", node.url()))
        .await;
    let state = browser
        .until(STATE, |v| {
            v["rows"].as_array().is_some_and(|r| r.len() == 3)
                && v["tail"].as_array().is_some_and(|t| t.len() == 5)
        })
        .await;
    let table_rows = state["rows"].as_array().expect("rows");
    let find = |table: &str, bucket: &str| {
        table_rows
            .iter()
            .find(|r| r[0] == table && r[3] == bucket)
            .unwrap_or_else(|| panic!("no row for {table} {bucket}: {state}"))
    };
    let e0 = find("events", "default / 0");
    assert_eq!((&e0[4], &e0[5]), (&json!("0"), &json!("5")), "{state}");
    assert!(
        e0[1].as_str().is_some_and(|s| s.contains("id: int64")),
        "{state}"
    );
    assert_eq!(e0[7], "mink-1", "the owner: {state}");
    let e1 = find("events", "default / 1");
    assert_eq!(e1[5], "3", "{state}");
    let audit = find("audit", "default / 0");
    assert_eq!(audit[2], "age 1h", "{state}");
    assert_eq!(state["health"], "health: ok");

    // The tail shows rows appended while it watches.
    browser
        .until(STATE, |v| {
            v["status"]
                .as_str()
                .is_some_and(|s| s.starts_with("following"))
        })
        .await;
    append(&http, &node, "events", 0, rows(5..8)).await;
    let state = browser
        .until(STATE, |v| {
            v["tail"].as_array().is_some_and(|t| t.len() == 8)
        })
        .await;
    let tail: Vec<i64> = state["tail"]
        .as_array()
        .expect("tail")
        .iter()
        .map(|r| {
            serde_json::from_str::<Value>(r.as_str().expect("text")).expect("row")["id"]
                .as_i64()
                .expect("id")
        })
        .collect();
    assert_eq!(tail, (0..8).collect::<Vec<_>>());
    assert!(
        state["status"]
            .as_str()
            .is_some_and(|s| s.contains("next offset 8")),
        "{state}"
    );
    // The chart draws the node's counters as rates (it samples /metrics every 2 s): the append
    // above shows between two samples.
    let state = browser
        .until(STATE, |v| {
            v["series"].as_array().is_some_and(|s| s.len() == 4)
                && v["appendsPerSecond"].as_f64().is_some_and(|r| r > 0.0)
        })
        .await;
    assert!(
        state["series"]
            .as_array()
            .expect("series")
            .contains(&json!("mink_appends_total")),
        "{state}"
    );
    let png = browser.screenshot().await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    std::fs::write(&out, &png).expect("write the screenshot");
    eprintln!("dashboard screenshot: {}", out.display());
    drop(browser);
    node.shutdown().await.expect("shutdown");
}
