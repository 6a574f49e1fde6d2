//! `cargo xtask chaos`: the crash-safety run of issue 8. Builds the node with the `chaos` feature
//! (fault injection) and the driver `mink_chaos` (tests/src/bin/mink_chaos/), starts etcd and
//! moto when S3 + etcd is asked for, and runs the driver once per backend. The driver kills the
//! node with SIGKILL at random moments, restarts it, and checks that every acknowledged row is
//! in the log exactly once; it prints `N kills, M acknowledged, 0 lost, 0 duplicated` and exits
//! non-zero on any violation. `cluster` runs three nodes on S3 + etcd and kills or pauses (past
//! the lease) a random one at each event (`N kills, P pauses, ...`); `both` is embedded and
//! s3-etcd, `all` adds cluster.
//!
//! ```text
//! cargo xtask chaos [--backend embedded|s3-etcd|cluster|both|all] [--debug] [DRIVER OPTIONS]
//! ```
//!
//! `--debug` builds the dev profile instead of release. Driver options go to `mink_chaos`
//! unchanged: `--kills N` (default 20), `--seconds S` (length of the kill phase, default 2 s per
//! kill), `--seed N` (default from the clock, printed), `--buckets N`, `--writers N` (per
//! bucket), `--faults SHARE` (share of node lives with injected PUT failures and delays),
//! `--retention-bytes N` (retention on: every acknowledged row at or above each bucket's final
//! log start must be there, and the log starts must have moved) with `--pad-bytes N` (bigger
//! rows, so a short run passes the limit), `--lose-metadata` (after the last kill the metadata is
//! deleted, the newest snapshot restored and the rest rebuilt from the objects; embedded and
//! s3-etcd). The short runs of `cargo xtask test` lose the metadata on both.

use std::path::PathBuf;
use std::process::Command;

use crate::services::Services;
use crate::{Result, run, target_dir};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    Embedded,
    S3Etcd,
    Cluster,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Embedded => "embedded",
            Backend::S3Etcd => "s3-etcd",
            Backend::Cluster => "cluster",
        }
    }
}

/// `cargo xtask chaos [ARGS]`.
pub(crate) fn chaos(args: &[String]) -> Result {
    let mut backends = vec![Backend::Embedded, Backend::S3Etcd];
    let mut release = true;
    let mut driver = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--backend" => {
                backends = match iter.next().map(String::as_str) {
                    Some("embedded") => vec![Backend::Embedded],
                    Some("s3-etcd") => vec![Backend::S3Etcd],
                    Some("cluster") => vec![Backend::Cluster],
                    Some("both") => vec![Backend::Embedded, Backend::S3Etcd],
                    Some("all") => vec![Backend::Embedded, Backend::S3Etcd, Backend::Cluster],
                    other => {
                        return Err(format!(
                            "--backend takes embedded, s3-etcd, cluster, both or all, not {other:?}"
                        ));
                    }
                }
            }
            "--debug" => release = false,
            other => driver.push(other.to_owned()),
        }
    }
    crate::install::build_tools()?;
    let bin = build(release)?;
    let services = if backends.iter().any(|b| *b != Backend::Embedded) {
        Some(Services::start()?)
    } else {
        None
    };
    let mut outcome = Ok(());
    for backend in backends {
        if let Err(e) = drive(&bin, backend, &driver, services.as_ref()) {
            outcome = outcome.and(Err(e));
        }
    }
    outcome
}

/// The short run inside `cargo xtask test`: 5 kills on the embedded default (retention on), 3 on
/// S3 + etcd,
/// 4 kills and pauses of the nodes of a three-node cluster, about two minutes on two cores. The dev profile, which the test run has mostly built already.
pub(crate) fn short(services: &Services) -> Result {
    let bin = build(false)?;
    let embedded = drive(
        &bin,
        Backend::Embedded,
        // With retention, whose task trims while the node is killed: the checks then hold from
        // each bucket's final log start (padded rows pass the 1 MiB limit in a short run). The
        // metadata is lost after the last kill, restored and rebuilt from the objects.
        &[
            "--kills",
            "5",
            "--seconds",
            "12",
            "--retention-bytes",
            "1048576",
            "--pad-bytes",
            "2000",
            "--lose-metadata",
        ]
        .map(String::from),
        Some(services),
    );
    let s3 = drive(
        &bin,
        Backend::S3Etcd,
        &["--kills", "3", "--seconds", "10", "--lose-metadata"].map(String::from),
        Some(services),
    );
    let cluster = drive(
        &bin,
        Backend::Cluster,
        &["--kills", "4", "--seconds", "12"].map(String::from),
        Some(services),
    );
    embedded.and(s3).and(cluster)
}

/// Builds `mink` (with fault injection) and `mink_chaos`; returns the folder holding them.
fn build(release: bool) -> Result<PathBuf> {
    crate::build_node_and_driver(release, "mink_chaos")?;
    Ok(target_dir().join(if release { "release" } else { "debug" }))
}

fn drive(
    bin: &std::path::Path,
    backend: Backend,
    args: &[String],
    services: Option<&Services>,
) -> Result {
    let mut command = Command::new(bin.join("mink_chaos"));
    command
        .arg("--node")
        .arg(bin.join("mink"))
        .args(["--backend", backend.name()])
        .args(args);
    if let Some(services) = services {
        services.export(&mut command);
    }
    run(command).map_err(|e| format!("chaos run on {} failed: {e}", backend.name()))
}
