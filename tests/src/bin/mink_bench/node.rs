//! The node under test: the release `mink` binary as a child process on the store of the run
//! (started and stopped as the chaos driver does), and its memory figures from `/proc`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::Error;
use crate::args::Store;

pub(crate) struct NodeProcess {
    pub(crate) process: mink_tests::node::NodeProcess,
    pub(crate) store: Store,
    pub(crate) prefix: String,
    /// Settings an item runs the node with (appended to its configuration at the next start).
    pub(crate) extra_config: String,
    flight_port: u16,
    kafka_port: u16,
}

impl NodeProcess {
    pub(crate) fn new(binary: &Path, store: Store, dir: &Path) -> Result<Self, Error> {
        let mut process = mink_tests::node::NodeProcess::new(binary, dir)?;
        let flight_port = process.with_flight()?;
        let kafka_port = process.with_kafka()?;
        Ok(NodeProcess {
            process,
            store,
            prefix: mink_tests::unique_prefix("bench"),
            extra_config: String::new(),
            flight_port,
            kafka_port,
        })
    }

    /// Where its Flight front end listens (`host:port`).
    pub(crate) fn flight_address(&self) -> String {
        format!("127.0.0.1:{}", self.flight_port)
    }

    /// Where its Kafka front end listens (`host:port`).
    pub(crate) fn kafka_address(&self) -> String {
        format!("127.0.0.1:{}", self.kafka_port)
    }

    pub(crate) fn url(&self) -> String {
        self.process.url()
    }

    pub(crate) fn objects_dir(&self) -> PathBuf {
        self.process.dir().join("data").join("objects")
    }

    pub(crate) fn config(&self) -> String {
        let mut c = self.process.base_config("bench-1");
        if self.store == Store::Moto {
            c += &mink_tests::node::s3_storage_config(&self.prefix);
        }
        if self.store == Store::S3Standard {
            let _ = writeln!(c, "[chaos]\nlatency_profile = \"s3-standard\"");
        }
        // Every writer of the run connects from this one address; item 2 runs 1000 at once.
        let _ = writeln!(c, "[http]\nmax_connections_per_client = 10000");
        // Settings to try without a rebuild (e.g. `[engine.cache.readahead]` tables), appended last.
        if let Ok(extra) = std::env::var("MINK_BENCH_EXTRA_CONFIG") {
            let _ = writeln!(c, "{extra}");
        }
        c += &self.extra_config;
        c
    }

    /// Starts the node and waits until it serves; returns the driver's client of it.
    pub(crate) async fn serve(&mut self) -> Result<crate::client::Client, Error> {
        // Idle connections are dropped well before the node closes them (`http.idle_timeout_ms`,
        // 60 s): a request sent on a connection the node is closing at that moment fails, and a
        // full run failed that way once, in item 15 after item 2's thousand connections sat idle.
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(2048)
            .pool_idle_timeout(std::time::Duration::from_secs(20))
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        self.start()?;
        self.wait_ready(&http).await?;
        Ok(crate::client::Client {
            http,
            url: self.url(),
        })
    }

    pub(crate) fn start(&mut self) -> Result<(), Error> {
        let config = self.config();
        self.process.start(&config, None)
    }

    pub(crate) async fn wait_ready(&mut self, http: &reqwest::Client) -> Result<(), Error> {
        self.process.wait_ready(http).await
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// SIGTERM, and waits for a clean exit (the engine flushes).
    pub(crate) fn stop(&mut self) -> Result<(), Error> {
        self.process.stop(Duration::from_secs(60))
    }
}

/// A `/proc/PID/status` field in KiB (VmRSS, VmHWM).
pub(crate) fn proc_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU seconds (user + system) process `pid` has used, from `/proc/PID/stat`; `None` when the
/// process is gone. The driver's own are `cpu_seconds(std::process::id())`.
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let (user, system) = (ticks(11)?, ticks(12)?);
    // Ticks of USER_HZ, which is 100 on every Linux this runs on.
    Some((user + system) / 100.0)
}
