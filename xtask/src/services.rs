//! The real services the tests run against: an etcd server and moto's S3 server, each on free
//! loopback ports with its own temporary data, stopped (and its data removed) when dropped.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Result, install, target_dir};

/// Bucket created on the S3 server for the tests; they keep apart by key prefix.
const TEST_BUCKET: &str = "mink-test";
/// How long a service may take to answer its readiness probe.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Running services; dropping this stops them.
pub(crate) struct Services {
    children: Vec<(&'static str, Child)>,
    scratch: PathBuf,
    etcd: String,
    s3: String,
}

impl Services {
    /// Installs what is missing, then starts etcd and moto and waits until both answer.
    pub(crate) fn start() -> Result<Self> {
        let etcd_bin = install::etcd()?;
        let moto_bin = install::moto_server()?;
        let scratch = std::env::temp_dir().join(format!("mink-xtask-{}", std::process::id()));
        fs::create_dir_all(&scratch).map_err(|e| format!("create {}: {e}", scratch.display()))?;
        let logs = target_dir().join("xtask");
        fs::create_dir_all(&logs).map_err(|e| format!("create {}: {e}", logs.display()))?;
        let mut services = Services {
            children: Vec::new(),
            scratch: scratch.clone(),
            etcd: String::new(),
            s3: String::new(),
        };

        let client = free_port()?;
        let peer = free_port()?;
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut etcd = Command::new(etcd_bin);
        etcd.arg("--name")
            .arg("mink-test")
            .arg("--data-dir")
            .arg(scratch.join("etcd"))
            .arg("--listen-client-urls")
            .arg(&client_url)
            .arg("--advertise-client-urls")
            .arg(&client_url)
            .arg("--listen-peer-urls")
            .arg(&peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer_url)
            .arg("--initial-cluster")
            .arg(format!("mink-test={peer_url}"))
            .arg("--log-level")
            .arg("warn");
        services.spawn("etcd", etcd, &logs.join("etcd.log"))?;
        wait_until("etcd", &logs.join("etcd.log"), || {
            http(client, "GET", "/health")
                .is_ok_and(|(status, body)| status == 200 && body.contains("\"health\":\"true\""))
        })?;
        services.etcd = client_url;

        let port = free_port()?;
        let mut moto = Command::new(moto_bin);
        moto.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
        services.spawn("moto", moto, &logs.join("moto.log"))?;
        wait_until("moto", &logs.join("moto.log"), || {
            http(port, "PUT", &format!("/{TEST_BUCKET}")).is_ok_and(|(status, _)| status == 200)
        })?;
        services.s3 = format!("http://127.0.0.1:{port}");
        eprintln!(
            "xtask: etcd at {}, S3 (moto) at {} with bucket {TEST_BUCKET}; logs in {}",
            services.etcd,
            services.s3,
            logs.display()
        );
        Ok(services)
    }

    /// The environment variables through which tests find the services (see `mink-tests`).
    pub(crate) fn variables(&self) -> Vec<(&'static str, String)> {
        vec![
            ("MINK_TEST_ETCD_ENDPOINTS", self.etcd.clone()),
            ("MINK_TEST_S3_ENDPOINT", self.s3.clone()),
            ("MINK_TEST_S3_BUCKET", TEST_BUCKET.to_owned()),
        ]
    }

    /// Passes the services' addresses to a command.
    pub(crate) fn export(&self, command: &mut Command) {
        for (key, value) in self.variables() {
            command.env(key, value);
        }
    }

    fn spawn(&mut self, name: &'static str, mut command: Command, log: &Path) -> Result {
        let out = File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("open {}: {e}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("could not start {name}: {e}"))?;
        // If this process dies without running Drop (SIGTERM, SIGKILL), a watchdog stops the
        // service within a second, so no etcd or moto outlives the run that started it.
        let watchdog = format!(
            "while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill {pid} 2>/dev/null",
            parent = std::process::id(),
            pid = child.id()
        );
        if let Err(e) = Command::new("sh")
            .args(["-c", &watchdog])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            eprintln!("xtask: no watchdog for {name} ({e}); stop it by hand if this run is killed");
        }
        self.children.push((name, child));
        Ok(())
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        for (name, child) in &mut self.children {
            if let Err(e) = child.kill() {
                eprintln!("xtask: could not stop {name}: {e}");
            }
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.scratch);
    }
}

/// A port that was free a moment ago (the OS picks it; we release it for the service to bind).
fn free_port() -> Result<u16> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))
}

fn wait_until(name: &str, log: &Path, mut ready: impl FnMut() -> bool) -> Result {
    let start = Instant::now();
    while start.elapsed() < START_TIMEOUT {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let tail = fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = tail.lines().rev().take(20).collect();
    Err(format!(
        "{name} did not become ready within {START_TIMEOUT:?}; last lines of {}:\n{}",
        log.display(),
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    ))
}

/// A minimal HTTP/1.1 request on loopback: status code and body.
fn http(port: u16, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}
