//! The node under test: one `mink` child process per run, restarted on the same data and port for
//! each life, with the `[chaos]` faults of that life written into its configuration.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use crate::Error;
use crate::args::{Backend, Options};

/// Faults for one life of the node (`[chaos]` settings).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Faults {
    pub(crate) put_failure_rate: f64,
    pub(crate) put_delay_ms: u64,
    /// Failed PUTs land first (a PUT whose answer was lost).
    pub(crate) fail_after_write: bool,
    /// A short WAL retry deadline, so the WAL gives up and appends get 503 until the next life.
    pub(crate) wal_deadline_ms: Option<u64>,
    pub(crate) seed: u64,
}

pub(crate) struct NodeProcess {
    pub(crate) options: Options,
    pub(crate) process: mink_tests::node::NodeProcess,
    /// Key prefix in S3 and etcd, unique to this run.
    pub(crate) prefix: String,
    pub(crate) lives: u32,
}

impl NodeProcess {
    pub(crate) fn new(options: &Options, dir: &Path) -> Result<Self, Error> {
        Ok(NodeProcess {
            options: options.clone(),
            process: mink_tests::node::NodeProcess::new(&options.node, dir)?,
            prefix: mink_tests::unique_prefix("chaos"),
            lives: 0,
        })
    }

    pub(crate) fn url(&self) -> String {
        self.process.url()
    }

    pub(crate) fn config(&self, faults: Option<Faults>) -> String {
        let mut c = self.process.base_config("chaos-1");
        if self.options.backend == Backend::S3Etcd {
            let etcd = mink_tests::etcd_endpoints();
            c += &mink_tests::node::s3_storage_config(&self.prefix);
            let _ = writeln!(
                c,
                "[metadata]\nbackend = \"etcd\"\netcd_endpoints = {etcd:?}\netcd_prefix = \"{}/\"",
                self.prefix
            );
        }
        // Compact often, so kills also land between uploads, commits and WAL deletes; adopt WAL
        // objects of a few appends and rewrite smaller ones; merge and regroup every second.
        let _ = writeln!(
            c,
            "[engine.compaction]\ninterval = 300\nadopt_wal_object_bytes = 1024\n\
             maintenance_interval = 1000\nmerge_min_objects = 3\ndelete_grace = 500"
        );
        if let Some(f) = faults {
            if let Some(ms) = f.wal_deadline_ms {
                let _ = writeln!(c, "[engine.wal]\nretry_deadline = {ms}");
            }
            let _ = writeln!(
                c,
                "[chaos]\nput_failure_rate = {}\nput_delay_ms = {}\nput_fail_after_write = {}\n\
                 seed = {}",
                f.put_failure_rate, f.put_delay_ms, f.fail_after_write, f.seed
            );
        }
        c
    }

    /// Starts a new life of the node (not waiting for it to serve).
    pub(crate) fn start(&mut self, faults: Option<Faults>) -> Result<(), Error> {
        self.lives += 1;
        let banner = format!(
            "===== chaos: life {} of the node, faults {faults:?} =====",
            self.lives
        );
        let config = self.config(faults);
        self.process.start(&config, Some(&banner))
    }

    /// Waits until `/healthz` answers 200; fails if the process exits or takes too long.
    pub(crate) async fn wait_ready(&mut self, http: &reqwest::Client) -> Result<(), Error> {
        self.process.wait_ready(http).await
    }

    /// SIGKILL, and reap the process.
    pub(crate) fn kill(&mut self) -> Result<(), Error> {
        self.process.kill()
    }

    /// SIGTERM, then waits up to `timeout` for a clean exit; true if it exited with status 0.
    pub(crate) fn stop(&mut self, timeout: Duration) -> bool {
        self.process.stop(timeout).is_ok()
    }
}
