//! Shared helpers for Mink's integration tests (the tests themselves live in `tests/tests/`).
//!
//! The suites run against real services: an etcd server and an S3-compatible server (moto) on
//! 127.0.0.1, which `cargo xtask test` starts on free ports before it runs the tests and stops
//! afterwards. It tells the tests where they are through environment variables, read here. A test
//! that needs a service and finds no address fails with a message saying how to run it; it is
//! never skipped.

use std::env;

pub mod fixtures;
pub mod node;

/// Environment variable holding the etcd client endpoints, comma-separated (`http://127.0.0.1:port`).
pub const ETCD_ENDPOINTS_ENV: &str = "MINK_TEST_ETCD_ENDPOINTS";
/// Environment variable holding the S3 server's endpoint URL (`http://127.0.0.1:port`).
pub const S3_ENDPOINT_ENV: &str = "MINK_TEST_S3_ENDPOINT";
/// Environment variable holding the name of a bucket that exists on the S3 server.
pub const S3_BUCKET_ENV: &str = "MINK_TEST_S3_BUCKET";

/// Environment variable holding the Python that has the real clients the tests drive
/// (`pyarrow`), installed by `cargo xtask test`.
pub const PYTHON_ENV: &str = "MINK_TEST_PYTHON";

/// The Python with the client libraries. Panics with instructions when unset.
pub fn python() -> String {
    required(PYTHON_ENV, "a Python with pyarrow")
}

/// Environment variable holding the headless browser the tests drive (Debian's `chromium`),
/// installed by `cargo xtask test`.
pub const CHROMIUM_ENV: &str = "MINK_TEST_CHROMIUM";

/// The Chromium binary. Panics with instructions when unset.
pub fn chromium() -> String {
    required(CHROMIUM_ENV, "a Chromium browser")
}

/// Environment variable holding ChromeDriver (Debian's `chromium-driver`), which drives the
/// browser through the WebDriver API; installed by `cargo xtask test`.
pub const CHROMEDRIVER_ENV: &str = "MINK_TEST_CHROMEDRIVER";

/// The ChromeDriver binary. Panics with instructions when unset.
pub fn chromedriver() -> String {
    required(CHROMEDRIVER_ENV, "ChromeDriver")
}

/// A child process in a process group of its own, killed with everything it started (a
/// browser's helpers, ChromeDriver's browser) when dropped, even by a failing test.
#[derive(Debug)]
pub struct ProcessGroup {
    child: std::process::Child,
}

impl ProcessGroup {
    /// Spawns `command` as the leader of a new process group.
    pub fn spawn(command: &mut std::process::Command) -> std::io::Result<ProcessGroup> {
        use std::os::unix::process::CommandExt;
        let child = command.process_group(0).spawn()?;
        Ok(ProcessGroup { child })
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Environment variable holding `kcat` (Debian's `kcat`, librdkafka inside), installed by
/// `cargo xtask test`.
pub const KCAT_ENV: &str = "MINK_TEST_KCAT";

/// The kcat binary. Panics with instructions when unset.
pub fn kcat() -> String {
    required(KCAT_ENV, "kcat")
}

/// Environment variable holding the folder where the Durable Streams conformance suite is
/// installed (its `node_modules`), by `cargo xtask test`.
pub const DS_SUITE_ENV: &str = "MINK_TEST_DS_SUITE";

/// The Durable Streams conformance suite's folder. Panics with instructions when unset.
pub fn ds_suite() -> String {
    required(DS_SUITE_ENV, "the Durable Streams conformance suite (npm)")
}

/// A client script of `tests/clients/`.
pub fn client_script(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("clients")
        .join(name)
}

/// What a client process printed and how it ended.
#[derive(Debug)]
pub struct ClientRun {
    /// Whether it exited with status 0.
    pub success: bool,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

/// Runs a client process to its end, killing it past `limit` (then `success` is false and
/// `stderr` says so). Blocking: call it from `spawn_blocking` in async tests.
pub fn run_client(
    program: &str,
    args: &[&str],
    limit: std::time::Duration,
) -> std::io::Result<ClientRun> {
    use std::io::Read as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = std::time::Instant::now() + limit;
    let (success, timed_out) = loop {
        if let Some(status) = child.try_wait()? {
            break (status.success(), false);
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break (false, true);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stderr = stderr.join().unwrap_or_default();
    if timed_out {
        stderr.push_str(&format!("\n(killed after {limit:?})"));
    }
    Ok(ClientRun {
        success,
        stdout: stdout.join().unwrap_or_default(),
        stderr,
    })
}

/// Credentials and region for the test S3 server (moto accepts any credentials).
pub const S3_ACCESS_KEY_ID: &str = "mink-test";
/// See [`S3_ACCESS_KEY_ID`].
pub const S3_SECRET_ACCESS_KEY: &str = "mink-test-secret";
/// See [`S3_ACCESS_KEY_ID`].
pub const S3_REGION: &str = "us-east-1";

fn required(var: &str, what: &str) -> String {
    match env::var(var) {
        Ok(value) if !value.trim().is_empty() => value,
        _ => panic!(
            "{var} is not set: this test needs {what}. Run the tests with `cargo xtask test`, which \
             starts the real services and sets {var}."
        ),
    }
}

/// The etcd endpoints that `cargo xtask test` started. Panics with instructions when unset.
pub fn etcd_endpoints() -> Vec<String> {
    required(ETCD_ENDPOINTS_ENV, "a running etcd server")
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The test S3 server: endpoint URL and an existing bucket. Panics with instructions when unset.
#[derive(Debug, Clone)]
pub struct S3Server {
    /// Endpoint URL, `http://127.0.0.1:port`.
    pub endpoint: String,
    /// A bucket that exists on the server. Tests share it and keep apart by key prefix.
    pub bucket: String,
}

/// The S3 server that `cargo xtask test` started. Panics with instructions when unset.
pub fn s3_server() -> S3Server {
    S3Server {
        endpoint: required(S3_ENDPOINT_ENV, "a running S3-compatible server"),
        bucket: required(S3_BUCKET_ENV, "a bucket on the S3-compatible server"),
    }
}

/// A key prefix unique to this call, so tests sharing a bucket or an etcd never see each other's data.
pub fn unique_prefix(test: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{test}-{}-{nanos:x}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}
