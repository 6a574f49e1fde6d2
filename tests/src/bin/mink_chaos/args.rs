//! The flags of `mink_chaos`, parsed by clap. Names and defaults are the ones `cargo xtask chaos`
//! passes and documents: `--node`, `--backend`, `--kills`, `--seconds`, `--seed`, `--buckets`,
//! `--writers`, `--faults`, `--retention-bytes`, `--pad-bytes`, `--lose-metadata`, `--dir`.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// Where the node keeps its objects and metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Backend {
    /// Local files and redb, the embedded default.
    Embedded,
    /// The S3 server and etcd named by `MINK_TEST_S3_ENDPOINT`, `MINK_TEST_S3_BUCKET` and
    /// `MINK_TEST_ETCD_ENDPOINTS`.
    S3Etcd,
    /// Three nodes on that S3 server and etcd: each event kills (SIGKILL, then a restart) or
    /// pauses (SIGSTOP past the lease, then SIGCONT) a random node; no injected faults.
    Cluster,
}

/// Kills a real `mink` node with SIGKILL at random moments while idempotent writers and tailing
/// readers work against it, then checks that every acknowledged row is in the log exactly once.
/// Exit status 0 when every check passed, 1 on any violation, 2 when the harness could not run.
#[derive(Debug, Clone, Parser)]
#[command(name = "mink_chaos", args_override_self = true)]
pub(crate) struct Options {
    /// The `mink` binary to run (built with the `chaos` feature, for injected faults).
    #[arg(long, value_name = "PATH", value_parser = non_empty_path)]
    pub(crate) node: PathBuf,
    /// Where the node keeps its data.
    #[arg(long, value_enum, default_value_t = Backend::Embedded)]
    pub(crate) backend: Backend,
    /// How many times the node is killed.
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = count, allow_negative_numbers = true)]
    pub(crate) kills: u32,
    /// Length of the kill phase; the mean time between kills is seconds/kills [default: 2 per
    /// kill].
    #[arg(long, value_name = "S", default_value_t = 0.0, hide_default_value = true, value_parser = number, allow_negative_numbers = true)]
    pub(crate) seconds: f64,
    /// Seed of every random choice of the run [default: from the clock; printed, so that a
    /// failed run can be replayed].
    #[arg(long, value_name = "N", default_value_t = seed_from_clock(), hide_default_value = true)]
    pub(crate) seed: u64,
    /// Buckets of the table.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = at_least_one, allow_negative_numbers = true)]
    pub(crate) buckets: u32,
    /// Writers per bucket.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = at_least_one, allow_negative_numbers = true)]
    pub(crate) writers: u32,
    /// Share of node lives run with injected PUT failures and slow PUTs (0 to 1).
    #[arg(long, value_name = "SHARE", default_value_t = 0.5, value_parser = share, allow_negative_numbers = true)]
    pub(crate) faults: f64,
    /// Run retention: keep about this many bytes per bucket (at least 1048576), trimmed by the
    /// node's own task every 300 ms; the checks then hold from each bucket's final log start,
    /// which must have moved [default: no retention, and nothing may be trimmed].
    #[arg(long, value_name = "BYTES")]
    pub(crate) retention_bytes: Option<u64>,
    /// Bytes of padding in every row's message, so that a short run passes a retention limit.
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub(crate) pad_bytes: usize,
    /// Lose the metadata after the last kill (embedded: delete `meta.redb`; s3-etcd: a new,
    /// empty etcd prefix), then `mink admin restore` the newest snapshot (the node writes one
    /// every second) and `mink admin rebuild` from the objects before the last life: the checks
    /// hold as before, and the rebuild must report nothing it could not place. Not for a
    /// cluster.
    #[arg(long)]
    pub(crate) lose_metadata: bool,
    /// Folder for the node's data and log [default: a new folder in the temporary folder,
    /// removed after a clean run].
    #[arg(long, value_name = "PATH")]
    pub(crate) dir: Option<PathBuf>,
}

impl Options {
    /// Parses a command line (`args[0]` is the program's name) and fills in what depends on
    /// other flags.
    pub(crate) fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Self, clap::Error> {
        let mut o = Self::try_parse_from(args)?;
        if o.seconds <= 0.0 {
            o.seconds = 2.0 * f64::from(o.kills.max(1));
        }
        if o.lose_metadata && o.backend == Backend::Cluster {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::ArgumentConflict,
                "--lose-metadata is for the embedded and s3-etcd backends, not a cluster\n",
            ));
        }
        Ok(o)
    }
}

fn non_empty_path(v: &str) -> Result<PathBuf, String> {
    if v.is_empty() {
        return Err("the path is empty".to_owned());
    }
    Ok(PathBuf::from(v))
}

fn number(v: &str) -> Result<f64, String> {
    v.parse().map_err(|_| format!("`{v}` is not a number"))
}

/// Counts are read as numbers and truncated (`--kills 2.5` kills twice), as they always were.
fn count(v: &str) -> Result<u32, String> {
    Ok(number(v)? as u32)
}

fn at_least_one(v: &str) -> Result<u32, String> {
    Ok(count(v)?.max(1))
}

fn share(v: &str) -> Result<f64, String> {
    Ok(number(v)?.clamp(0.0, 1.0))
}

fn seed_from_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command line: the program's name, then `s` split at spaces.
    fn args(s: &str) -> Vec<String> {
        std::iter::once("mink_chaos")
            .chain(s.split(' '))
            .map(String::from)
            .collect()
    }

    #[test]
    fn options_parse_and_reject_unknown_flags() {
        let o = Options::parse_args(args(
            "--node /bin/mink --kills 7 --backend s3-etcd --seed 3",
        ))
        .unwrap();
        assert_eq!((o.kills, o.backend, o.seed), (7, Backend::S3Etcd, 3));
        assert_eq!(o.seconds, 14.0);
        let cluster = Options::parse_args(args("--node /bin/mink --backend cluster")).unwrap();
        assert_eq!(cluster.backend, Backend::Cluster);
        assert!(Options::parse_args(args("--node x --kill 3")).is_err());
        assert!(Options::parse_args(args("--kills 3")).is_err());
        assert!(
            Options::parse_args(args("--node m --lose-metadata"))
                .unwrap()
                .lose_metadata
        );
        assert!(Options::parse_args(args("--node m --backend cluster --lose-metadata")).is_err());
    }

    #[test]
    fn numbers_keep_their_old_reading() {
        let o = Options::parse_args(args(
            "--node m --kills 2.5 --buckets 0 --writers -1 --faults 3 --seconds -1",
        ))
        .unwrap();
        assert_eq!((o.kills, o.buckets, o.writers), (2, 1, 1));
        assert_eq!((o.faults, o.seconds), (1.0, 4.0));
        let o = Options::parse_args(args("--node m --kills 3 --kills 5")).unwrap();
        assert_eq!(
            (o.kills, o.backend, o.buckets, o.writers),
            (5, Backend::Embedded, 3, 2)
        );
        assert_eq!((o.faults, o.dir), (0.5, None));
    }
}
