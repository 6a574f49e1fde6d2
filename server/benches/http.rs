//! End-to-end figures of the HTTP node (`cargo xtask bench`, or `cargo bench -p mink-server
//! --bench http`), each against a baseline measured in the same run on the same store:
//!
//! - append latency over HTTP (one request, acknowledged once durable) as a ratio of the raw
//!   object-store PUT latency of a WAL-sized object;
//! - delivery latency: from an append's acknowledgement (the writer has its response) to a parked
//!   long-poll reader, and an SSE reader, holding the rows. The goal is p99 < 1 ms beyond the ack.
//!
//! Stores: the local file system (the embedded default) always; a real S3 server too when
//! `MINK_TEST_S3_ENDPOINT` and `MINK_TEST_S3_BUCKET` are set (as `cargo xtask services` prints).
//! `--quick` runs fewer iterations; `--out FILE` also writes the figures as a Markdown table.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use mink_metadata::MemoryKv;
use mink_s3stream::storage::{ObjectStorage, ObjectStoreBackend, S3Config};
use mink_server::{Node, Settings};

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index.min(samples.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Figures {
    p50: Duration,
    p99: Duration,
}

fn figures(mut samples: Vec<Duration>) -> Figures {
    Figures {
        p50: percentile(&mut samples, 0.50),
        p99: percentile(&mut samples, 0.99),
    }
}

async fn raw_puts(store: &dyn ObjectStorage, n: usize) -> Figures {
    let payload = Bytes::from(vec![7u8; 1024]);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        store
            .put(&format!("bench-baseline/{i:08}"), payload.clone())
            .await
            .expect("baseline PUT");
        samples.push(started.elapsed());
    }
    figures(samples)
}

fn row(i: usize) -> String {
    format!("{{\"id\":{i},\"msg\":\"{}\"}}\n", "x".repeat(900))
}

/// Appends row `i` and returns when the writer has its acknowledgement (the whole response).
async fn append(http: &reqwest::Client, records: &str, i: usize) -> Instant {
    let r = http
        .post(records)
        .header("content-type", "application/x-ndjson")
        .body(row(i))
        .send()
        .await
        .expect("append");
    assert!(r.status().is_success());
    r.bytes().await.expect("body");
    Instant::now()
}

async fn run(name: &str, store: Arc<dyn ObjectStorage>, n: usize, report: &mut String) {
    let baseline = raw_puts(store.as_ref(), n).await;
    let settings = Settings {
        listen: "127.0.0.1:0".parse().expect("address"),
        flight: mink_server::settings::FlightSettings {
            listen: None,
            ..Default::default()
        },
        kafka: mink_server::settings::KafkaSettings {
            listen: None,
            ..Default::default()
        },
        ..Settings::default()
    };
    let node = Node::builder()
        .settings(settings)
        .object_store(store)
        .metadata(Arc::new(MemoryKv::new()))
        .start()
        .await
        .expect("node starts");
    let http = reqwest::Client::new();
    let url = node.url();
    http.post(format!("{url}/v1/tables"))
        .json(&serde_json::json!({"name": "bench", "schema": {"fields": [
            {"name": "id", "type": "int64"}, {"name": "msg", "type": "utf8"}]}}))
        .send()
        .await
        .expect("create table");
    let records = format!("{url}/v1/tables/bench/buckets/0/records");

    // Append latency.
    let mut appends = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        appends.push(append(&http, &records, i).await - started);
    }
    let appends = figures(appends);

    // Delivery to a parked long-poll.
    let mut next = n as u64;
    let mut long_poll = Vec::with_capacity(n);
    for i in 0..n {
        let reader = {
            let http = http.clone();
            let url = format!("{records}?offset={next}&live=long-poll");
            tokio::spawn(async move {
                let r = http.get(url).send().await.expect("long-poll");
                r.bytes().await.expect("body");
                Instant::now()
            })
        };
        // Let the reader park before the append (a parked reader is what is measured).
        tokio::time::sleep(Duration::from_millis(2)).await;
        let acked = append(&http, &records, i).await;
        let received = reader.await.expect("reader");
        long_poll.push(received.saturating_duration_since(acked));
        next += 1;
    }
    let long_poll = figures(long_poll);

    // Delivery to an SSE reader.
    let response = http
        .get(format!("{records}?offset={next}"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("SSE");
    let mut events = response.bytes_stream().eventsource();
    let mut sse = Vec::with_capacity(n);
    for i in 0..n {
        tokio::time::sleep(Duration::from_millis(2)).await;
        let acked = append(&http, &records, i).await;
        let event = events.next().await.expect("event").expect("well-formed");
        sse.push(Instant::now().saturating_duration_since(acked));
        assert_eq!(event.id, (next + 1).to_string());
        next += 1;
    }
    let sse = figures(sse);
    node.shutdown().await.expect("shutdown");

    let line = |what: &str, f: &Figures, note: String| {
        format!(
            "| {what} | {:.3} | {:.3} | {note} |\n",
            ms(f.p50),
            ms(f.p99)
        )
    };
    let mut table = format!(
        "\n### {name} ({n} iterations)\n\n| measure | p50 ms | p99 ms | note |\n|---|---|---|---|\n"
    );
    table += &line("raw PUT, 1 KiB object", &baseline, "baseline".to_owned());
    table += &line(
        "HTTP append, acknowledged durable",
        &appends,
        format!(
            "{:.2}x PUT at p50, {:.2}x at p99",
            ms(appends.p50) / ms(baseline.p50).max(1e-9),
            ms(appends.p99) / ms(baseline.p99).max(1e-9)
        ),
    );
    table += &line(
        "parked long-poll, after the ack",
        &long_poll,
        "goal: p99 < 1 ms".to_owned(),
    );
    table += &line(
        "SSE event, after the ack",
        &sse,
        "goal: p99 < 1 ms".to_owned(),
    );
    eprint!("{table}");
    report.push_str(&table);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let mut report = String::from("# HTTP node benchmarks\n");
    let n = if quick { 50 } else { 300 };
    let dir = tempfile::tempdir().expect("temporary folder");
    let local = Arc::new(ObjectStoreBackend::local(dir.path()).expect("local store"));
    run(
        "local file system (embedded default)",
        local,
        n,
        &mut report,
    )
    .await;
    if let (Ok(endpoint), Ok(bucket)) = (
        std::env::var("MINK_TEST_S3_ENDPOINT"),
        std::env::var("MINK_TEST_S3_BUCKET"),
    ) {
        let prefix = format!("bench-{}", std::process::id());
        let config = S3Config::local_server(
            endpoint,
            bucket,
            "us-east-1",
            "mink-test",
            "mink-test-secret",
        )
        .with_prefix(prefix);
        let s3 = Arc::new(ObjectStoreBackend::s3(&config).expect("S3 store"));
        run("S3 server", s3, n, &mut report).await;
    } else {
        eprintln!(
            "\n(MINK_TEST_S3_ENDPOINT / MINK_TEST_S3_BUCKET not set: S3 figures skipped; \
             `cargo xtask services` starts one)"
        );
    }
    if let Some(out) = out {
        std::fs::write(&out, &report).expect("write the report");
        eprintln!("report written to {out}");
    }
}
