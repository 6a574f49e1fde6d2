//! Shared helpers for Mink's integration tests (the tests themselves live in `tests/tests/`).
//!
//! The suites run against real services: an etcd server and an S3-compatible server (moto) on
//! 127.0.0.1, which `cargo xtask test` starts on free ports before it runs the tests and stops
//! afterwards. It tells the tests where they are through environment variables, read here. A test
//! that needs a service and finds no address fails with a message saying how to run it; it is
//! never skipped.

use std::env;

pub mod node;

/// Environment variable holding the etcd client endpoints, comma-separated (`http://127.0.0.1:port`).
pub const ETCD_ENDPOINTS_ENV: &str = "MINK_TEST_ETCD_ENDPOINTS";
/// Environment variable holding the S3 server's endpoint URL (`http://127.0.0.1:port`).
pub const S3_ENDPOINT_ENV: &str = "MINK_TEST_S3_ENDPOINT";
/// Environment variable holding the name of a bucket that exists on the S3 server.
pub const S3_BUCKET_ENV: &str = "MINK_TEST_S3_BUCKET";

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
