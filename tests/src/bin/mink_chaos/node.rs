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
    /// The etcd prefix: `prefix`, until the metadata is lost ([`Self::lose_metadata`]).
    pub(crate) metadata_prefix: String,
    pub(crate) node_id: String,
    pub(crate) lives: u32,
}

impl NodeProcess {
    /// Node `index` of the run, keeping its data and log in `dir` (a folder of its own per
    /// node), its objects and metadata under `prefix`.
    pub(crate) fn new(
        options: &Options,
        dir: &Path,
        index: usize,
        prefix: &str,
    ) -> Result<Self, Error> {
        Ok(NodeProcess {
            options: options.clone(),
            process: mink_tests::node::NodeProcess::new(&options.node, dir)?,
            prefix: prefix.to_owned(),
            metadata_prefix: format!("{prefix}/"),
            node_id: format!("chaos-{}", index + 1),
            lives: 0,
        })
    }

    pub(crate) fn url(&self) -> String {
        self.process.url()
    }

    pub(crate) fn config(&self, faults: Option<Faults>) -> String {
        let mut c = self.process.base_config(&self.node_id);
        let mut metadata = String::new();
        if matches!(self.options.backend, Backend::S3Etcd | Backend::Cluster) {
            let etcd = mink_tests::etcd_endpoints();
            c += &mink_tests::node::s3_storage_config(&self.prefix);
            let _ = writeln!(
                metadata,
                "backend = \"etcd\"\netcd_endpoints = {etcd:?}\netcd_prefix = {:?}",
                self.metadata_prefix
            );
        }
        if self.options.lose_metadata {
            metadata += "snapshot_interval_ms = 1000\n";
        }
        if !metadata.is_empty() {
            let _ = writeln!(c, "[metadata]\n{metadata}");
        }
        if self.options.backend == Backend::Cluster {
            // A short lease, so a pause past it fits a short run.
            let _ = writeln!(c, "[cluster]\nlease_ttl_ms = 3000\nlease_margin_ms = 400");
        }
        // Compact often, so kills also land between uploads, commits and WAL deletes; adopt WAL
        // objects of a few appends and rewrite smaller ones; merge and regroup every second.
        // Every other life's recovery commits the WAL objects it replays as they are.
        let _ = writeln!(
            c,
            "[engine.compaction]\ninterval = 300\nadopt_wal_object_bytes = 1024\n\
             maintenance_interval = 1000\nmerge_min_objects = 3\ndelete_grace = 500\n\
             adopt_at_recovery = {}",
            self.lives % 2 == 1
        );
        if let Some(bytes) = self.options.retention_bytes {
            let _ = writeln!(c, "[retention]\nbytes = {bytes}\ninterval_ms = 300");
        }
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
            "===== chaos: life {} of node {}, faults {faults:?} =====",
            self.lives, self.node_id
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

    /// Sends `signal` (`-STOP`, `-CONT`) to the running process.
    pub(crate) fn signal(&self, signal: &str) -> Result<(), Error> {
        let pid = self.process.pid().ok_or("the node is not running")?;
        let ok = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            Ok(())
        } else {
            Err(format!("kill {signal} {pid} failed"))
        }
    }

    /// Loses the node's metadata (it must not be running): deletes `meta.redb`, or moves to a
    /// new, empty etcd prefix.
    pub(crate) fn lose_metadata(&mut self) -> Result<(), Error> {
        if self.options.backend == Backend::Embedded {
            let path = self.process.dir().join("data").join("meta.redb");
            std::fs::remove_file(&path).map_err(|e| format!("remove {}: {e}", path.display()))
        } else {
            self.metadata_prefix = format!("{}/restored/", self.prefix);
            Ok(())
        }
    }

    /// The node's working directory.
    pub(crate) fn dir(&self) -> &std::path::Path {
        self.process.dir()
    }

    /// Runs `mink admin {command}` on the node's stores (with its configuration, no faults) and
    /// returns what it printed as JSON; an exit status other than 0 is an error.
    pub(crate) fn admin(&self, command: &[&str]) -> Result<serde_json::Value, Error> {
        let path = self.process.dir().join("admin.toml");
        std::fs::write(&path, self.config(None))
            .map_err(|e| format!("write {}: {e}", path.display()))?;
        let out = std::process::Command::new(&self.options.node)
            .arg("admin")
            .args(command)
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("mink admin {command:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mink admin {command:?}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "mink admin {command:?} printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// SIGTERM, then waits up to `timeout` for a clean exit; true if it exited with status 0.
    pub(crate) fn stop(&mut self, timeout: Duration) -> bool {
        self.process.stop(timeout).is_ok()
    }
}
