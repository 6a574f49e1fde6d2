//! Item 10: the Kafka front end with a real librdkafka client (confluent-kafka,
//! tests/clients/kafka_bench.py), acks=all, to one partition: idempotent producers as fast as
//! they go with 1 KiB and 16 KiB values and paced at 2000 messages a second, and plain ones with
//! 5 and with 1 request in flight (pipelining); throughput against raw sequential PUTs of 8 MiB objects for as
//! long, produce-to-acknowledgement latency beside raw PUTs of 1 MiB objects, the node's CPU
//! per GB; then a replay of the first run by one consumer after a restart (cold caches),
//! against item 4's raw sequential GET when item 4 ran.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};

use super::Bench;
use crate::Error;
use crate::node::cpu_seconds;
use crate::raw::raw_put_throughput;
use crate::report::{ms, pct};

/// Bytes of each produced value.
const VALUE_BYTES: usize = 1024;

/// One producer run: its figures and the node's CPU seconds during it.
struct Run {
    answer: Value,
    cpu_seconds: f64,
}

impl Run {
    fn number(&self, key: &str) -> f64 {
        self.answer[key].as_f64().unwrap_or(0.0)
    }

    fn mbps(&self) -> f64 {
        self.number("bytes") / self.number("seconds").max(1e-9) / 1e6
    }

    /// Node CPU seconds per GB produced.
    fn cpu_per_gb(&self) -> f64 {
        self.cpu_seconds / (self.number("bytes") / 1e9).max(1e-9)
    }
}

impl Bench {
    /// Item 10: Kafka produce and replay.
    pub(crate) async fn kafka(&mut self) -> Result<(), Error> {
        let headers = r#"List(non-null Struct("key": non-null Utf8, "value": Binary))"#;
        let fields = json!([
            {"name": "key", "type": "binary"},
            {"name": "value", "type": "binary"},
            {"name": "headers", "type": headers, "nullable": false},
            {"name": "timestamp", "type": "timestamp_ms", "nullable": false},
        ]);
        for topic in [
            "kbench",
            "kbench_big",
            "kbench_paced",
            "kbench_five",
            "kbench_one",
        ] {
            self.client.create_table(topic, fields.clone(), 1).await?;
        }
        let seconds = if self.options.quick { 3.0 } else { 10.0 };
        // Idempotent: as fast as it goes with 1 KiB and 16 KiB values, and 1 KiB at a steady
        // 2000 messages a second (latency without a queue). librdkafka's idempotent producer
        // keeps one request in flight, so pipelining shows with a plain producer: 5 requests in
        // flight against 1.
        let full = self
            .produce("kbench", seconds, VALUE_BYTES, 0, 5, true)
            .await?;
        let big = self
            .produce("kbench_big", seconds, 16 * VALUE_BYTES, 0, 5, true)
            .await?;
        let paced = self
            .produce("kbench_paced", seconds, VALUE_BYTES, 2000, 5, true)
            .await?;
        let five = self
            .produce("kbench_five", seconds, VALUE_BYTES, 0, 5, false)
            .await?;
        let one = self
            .produce("kbench_one", seconds, VALUE_BYTES, 0, 1, false)
            .await?;
        let raw_put = raw_put_throughput(
            self.raw.as_ref(),
            Duration::from_secs_f64(full.number("seconds").max(5.0)),
        )
        .await?;
        let raw_latency = raw_put_latency(self.raw.as_ref(), 50).await?;

        self.restart().await?;
        let broker = self.node.kafka_address();
        let messages = full.number("messages");
        let replayed =
            client(&["consume", &broker, "kbench", &(messages as u64).to_string()]).await?;
        let replay_mbps = replayed["bytes"].as_f64().unwrap_or(0.0)
            / replayed["seconds"].as_f64().unwrap_or(1.0)
            / 1e6;
        let raw_get = self.replay_raw_mbps;
        let raw_get_row = if raw_get > 0.0 {
            format!(
                "| raw sequential GET (item 4) | {raw_get:.1} | 1.00x |\n\
                 | Kafka consumer, cold | {replay_mbps:.1} | **{:.2}x** |\n",
                replay_mbps / raw_get
            )
        } else {
            format!("| Kafka consumer, cold | {replay_mbps:.1} | (item 4 not run) |\n")
        };
        let failed: usize = [&full, &big, &paced, &five, &one]
            .iter()
            .map(|r| r.answer["failed"].as_array().map_or(0, Vec::len))
            .sum();
        let row = |name: &str, r: &Run| {
            format!(
                "| {name} | {:.0} | {:.1} | **{:.2}x** | {:.1} | {:.1} | {:.1} |\n",
                r.number("messages"),
                r.mbps(),
                r.mbps() / raw_put,
                r.number("p50_ms"),
                r.number("p99_ms"),
                r.cpu_per_gb()
            )
        };
        let _ = write!(
            self.report.md,
            "### 10. Kafka (librdkafka)\n\n\
             One confluent-kafka producer (librdkafka {lib}) at a time, acks=all, \
             linger.ms=5, to one partition for {seconds:.0} s each, against raw sequential PUTs \
             of 8 MiB objects for as long ({raw_put:.1} MB/s) and raw PUTs of 1 MiB objects one \
             at a time (p50 {:.1} ms, p99 {:.1} ms). Latency is librdkafka's own, from \
             `produce()` to the acknowledgement: queueing in the client included, so a producer \
             that goes as fast as it can measures its queue; the paced run measures the \
             path.{failures}\n\n\
             | producer | messages | MB/s | ratio to raw PUT | p50 ms | p99 ms | node CPU-s/GB |\n\
             |---|---|---|---|---|---|---|\n{}{}{}{}{}\n\
             Pipelining (docs/produce-pipelining.md), plain producers: 5 requests in flight give \
             **{:.2}x** the throughput of 1 (librdkafka's idempotent producer sends one request \
             at a time, so it does not pipeline).\n\n\
             Replay of the first run's {:.0} messages from offset 0 by one consumer after a \
             restart (cold caches):\n\n\
             | | MB/s | ratio |\n|---|---|---|\n{raw_get_row}\n",
            raw_latency.p50,
            raw_latency.p99,
            row("idempotent, 1 KiB, as fast as it goes", &full),
            row("idempotent, 16 KiB, as fast as it goes", &big),
            row("idempotent, 1 KiB, 2000 messages/s", &paced),
            row("plain, 1 KiB, 5 requests in flight", &five),
            row("plain, 1 KiB, 1 request in flight", &one),
            five.mbps() / one.mbps().max(1e-9),
            replayed["messages"].as_f64().unwrap_or(0.0),
            lib = full.answer["librdkafka"].as_str().unwrap_or("?"),
            failures = if failed > 0 {
                format!(" {failed} deliveries failed.")
            } else {
                String::new()
            },
        );
        Ok(())
    }

    /// One producer run of `seconds` to `topic`.
    async fn produce(
        &self,
        topic: &str,
        seconds: f64,
        size: usize,
        rate: u32,
        inflight: u32,
        idempotent: bool,
    ) -> Result<Run, Error> {
        let pid = self.node.pid().ok_or("the node is not running")?;
        let cpu_before = cpu_seconds(pid).unwrap_or(0.0);
        let answer = client(&[
            "produce",
            &self.node.kafka_address(),
            topic,
            &seconds.to_string(),
            &size.to_string(),
            &rate.to_string(),
            &inflight.to_string(),
            if idempotent { "1" } else { "0" },
        ])
        .await?;
        let cpu_seconds = cpu_seconds(pid).unwrap_or(0.0) - cpu_before;
        Ok(Run {
            answer,
            cpu_seconds,
        })
    }
}

/// Runs a phase of the Python driver; its JSON answer.
async fn client(args: &[&str]) -> Result<Value, Error> {
    let script = mink_tests::client_script("kafka_bench.py");
    let mut all = vec![script.display().to_string()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    let run = tokio::task::spawn_blocking(move || {
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        mink_tests::run_client(&mink_tests::python(), &all, Duration::from_secs(600))
    })
    .await
    .map_err(|e| format!("kafka_bench.py: {e}"))?
    .map_err(|e| format!("kafka_bench.py: {e}"))?;
    if !run.success {
        return Err(format!(
            "kafka_bench.py {args:?} failed:\n{}\n{}",
            run.stdout, run.stderr
        ));
    }
    serde_json::from_str(run.stdout.trim())
        .map_err(|e| format!("kafka_bench.py {args:?}: {e}: {}", run.stdout))
}

/// Latency of `n` raw PUTs of 1 MiB objects, one at a time (deleted afterwards).
async fn raw_put_latency(
    raw: &dyn mink_s3stream::storage::ObjectStorage,
    n: usize,
) -> Result<crate::report::Pct, Error> {
    let object = Bytes::from(vec![0x2au8; 1 << 20]);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        raw.put(&format!("raw/kafka-{i}"), object.clone())
            .await
            .map_err(|e| format!("raw PUT: {e}"))?;
        samples.push(ms(started.elapsed()));
    }
    for i in 0..n {
        raw.delete(&format!("raw/kafka-{i}"))
            .await
            .map_err(|e| format!("raw DELETE: {e}"))?;
    }
    Ok(pct(&mut samples))
}
