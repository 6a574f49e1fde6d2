//! The `mink` node as a child process, for the drivers that start, stop and kill it (the chaos
//! harness and the benchmark): a free port on 127.0.0.1, a TOML config the driver writes, the
//! node's log appended to one file across lives.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a starting node may take to answer `/healthz`.
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The `mink` binary of this build: `MINK_TEST_NODE_BIN`, else the one the workspace build
/// (`cargo xtask test`) puts next to the test binaries ({target}/debug/mink beside
/// {target}/debug/deps/). Panics with instructions when it is missing.
pub fn binary() -> PathBuf {
    if let Ok(path) = std::env::var("MINK_TEST_NODE_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test's own path");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("mink"))
        .expect("the target folder");
    assert!(
        path.exists(),
        "no node binary at {}: build it with `cargo build -p mink-server --bin mink` (cargo xtask \
         test does) or set MINK_TEST_NODE_BIN",
        path.display()
    );
    path
}

/// One node process at a time, its port, directory and log kept across lives.
#[derive(Debug)]
pub struct NodeProcess {
    binary: PathBuf,
    /// The address it listens on (127.0.0.1 unless [`NodeProcess::in_netns`]).
    host: String,
    /// Run under this command (`ip netns exec NS`), if any.
    wrapper: Vec<String>,
    port: u16,
    dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    /// `flight.listen` of every life (`none` unless [`NodeProcess::with_flight`]).
    flight_listen: String,
    /// `kafka.listen` of every life (`none` unless [`NodeProcess::with_kafka`]).
    kafka_listen: String,
    /// Environment variables of every life ([`NodeProcess::with_env`]).
    env: Vec<(String, String)>,
}

impl NodeProcess {
    /// A node run from `binary` with its config, data and log in `dir`, on a free port.
    pub fn new(binary: &Path, dir: &Path) -> Result<Self, String> {
        let port = free_port()?;
        Ok(NodeProcess {
            binary: binary.to_path_buf(),
            host: "127.0.0.1".to_owned(),
            wrapper: Vec::new(),
            port,
            dir: dir.to_path_buf(),
            log: dir.join("node.log"),
            child: None,
            flight_listen: "none".to_owned(),
            kafka_listen: "none".to_owned(),
            env: Vec::new(),
        })
    }

    /// Sets an environment variable of every life from the next start on.
    pub fn with_env(&mut self, key: &str, value: &str) {
        self.env.push((key.to_owned(), value.to_owned()));
    }

    /// Serves Arrow Flight too, on a free port of its host; returns that port.
    pub fn with_flight(&mut self) -> Result<u16, String> {
        let port = free_port()?;
        self.flight_listen = format!("{}:{port}", self.host);
        Ok(port)
    }

    /// Serves the Kafka protocol too, on a free port of its host; returns that port.
    pub fn with_kafka(&mut self) -> Result<u16, String> {
        let port = free_port()?;
        self.kafka_listen = format!("{}:{port}", self.host);
        Ok(port)
    }

    /// Runs the node inside the Linux network namespace `netns` (`ip netns exec`), listening on
    /// `host`, its address there.
    pub fn in_netns(mut self, netns: &str, host: &str) -> Self {
        self.wrapper = ["ip", "netns", "exec", netns]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        self.host = host.to_owned();
        self
    }

    /// The node's base URL.
    pub fn url(&self) -> String {
        format!("http://{}:{}", self.host, self.port)
    }

    /// The node's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The node's log (every life appends to it).
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The start of a config: node id, listen address and data directory.
    pub fn base_config(&self, node_id: &str) -> String {
        let mut c = String::new();
        let _ = writeln!(c, "node_id = {node_id:?}");
        let _ = writeln!(c, "listen = \"{}:{}\"", self.host, self.port);
        let _ = writeln!(
            c,
            "data_dir = {:?}",
            self.dir.join("data").display().to_string()
        );
        c
    }

    /// Starts a life of the node with `config` (not waiting for it to serve); `banner`, when
    /// given, is written to the log first.
    pub fn start(&mut self, config: &str, banner: Option<&str>) -> Result<(), String> {
        let path = self.dir.join("mink.toml");
        std::fs::write(&path, config).map_err(|e| format!("write {}: {e}", path.display()))?;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("open {}: {e}", self.log.display()))?;
        if let Some(banner) = banner {
            use std::io::Write as _;
            let _ = writeln!(log, "{banner}");
        }
        let err = log
            .try_clone()
            .map_err(|e| format!("open {}: {e}", self.log.display()))?;
        let mut command = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&self.binary);
                command
            }
            None => Command::new(&self.binary),
        };
        let child = command
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "warn")
            .env("MINK_FLIGHT_LISTEN", &self.flight_listen)
            .env("MINK_KAFKA_LISTEN", &self.kafka_listen)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("could not start {}: {e}", self.binary.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits until `/healthz` answers 200; fails if the process exits or takes too long.
    pub async fn wait_ready(&mut self, http: &reqwest::Client) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!(
                    "the node exited during start ({status}); see {}",
                    self.log.display()
                ));
            }
            let probe = http
                .get(format!("{}/healthz", self.url()))
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if probe.is_ok_and(|r| r.status() == reqwest::StatusCode::OK) {
                return Ok(());
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(format!(
                    "the node did not serve within {START_TIMEOUT:?}; see {}",
                    self.log.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The exit status, once the process has exited by itself (reaped then).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }

    /// The running process's id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, and reap the process.
    pub fn kill(&mut self) -> Result<(), String> {
        if let Some(mut child) = self.child.take() {
            child
                .kill()
                .map_err(|e| format!("could not kill the node: {e}"))?;
            child
                .wait()
                .map_err(|e| format!("could not reap the node: {e}"))?;
        }
        Ok(())
    }

    /// SIGTERM, then waits up to `timeout` for a clean exit; kills it if it does not come. Fails
    /// unless the node exited with status 0.
    pub fn stop(&mut self, timeout: Duration) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let signalled = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        let started = Instant::now();
        while signalled && started.elapsed() < timeout {
            if let Ok(Some(status)) = child.try_wait() {
                return if status.success() {
                    Ok(())
                } else {
                    Err(format!("the node exited with {status} on SIGTERM"))
                };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(format!(
            "the node did not stop within {timeout:?} of SIGTERM"
        ))
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// The `[storage]` section of a node config pointing at the test S3 server under `prefix`.
pub fn s3_storage_config(prefix: &str) -> String {
    s3_storage_config_at(prefix, &crate::s3_server().endpoint)
}

/// [`s3_storage_config`], reaching the test S3 server's bucket at `endpoint` (a proxy, say).
pub fn s3_storage_config_at(prefix: &str, endpoint: &str) -> String {
    let s3 = crate::S3Server {
        endpoint: endpoint.to_owned(),
        ..crate::s3_server()
    };
    format!(
        "[storage]\nbackend = \"s3\"\n[storage.s3]\nbucket = {:?}\nendpoint = {:?}\n\
         allow_http = true\nregion = {:?}\naccess_key = {:?}\nsecret_key = {:?}\nprefix = {:?}\n",
        s3.bucket,
        s3.endpoint,
        crate::S3_REGION,
        crate::S3_ACCESS_KEY_ID,
        crate::S3_SECRET_ACCESS_KEY,
        prefix
    )
}

/// A port free on 127.0.0.1 now.
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))
}
