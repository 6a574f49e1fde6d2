//! The flags of `mink_bench`, parsed by clap: the ones `cargo xtask bench` passes (`--node`,
//! `--store`, `--quick`, `--out`).

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// The object store the node runs on, and the raw baselines with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Store {
    /// Local files (object_store), the embedded default.
    Local,
    /// The S3 server named by `MINK_TEST_S3_ENDPOINT` and `MINK_TEST_S3_BUCKET`.
    Moto,
    /// Local files wearing the S3 Standard latency model (the node needs the `chaos` feature).
    S3Standard,
}

impl Store {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Store::Local => "local",
            Store::Moto => "moto",
            Store::S3Standard => "s3-standard",
        }
    }

    pub(crate) fn describe(self) -> &'static str {
        match self {
            Store::Local => "local files (object_store, the embedded default)",
            Store::Moto => "moto, the S3 server the tests use (same machine)",
            Store::S3Standard => {
                "local files wearing the S3 Standard latency model \
                                  (PUT p50 30 / p99 150 ms, GET first byte p50 15 / p99 80 ms, 90 MB/s per request)"
            }
        }
    }
}

/// Measures the `mink` node as a process over HTTP on one store, each figure beside a baseline
/// from the same run; writes `DIR/node-STORE.md`, `DIR/latency-STORE.csv` and
/// `DIR/replay-STORE.csv`.
#[derive(Debug, Parser)]
#[command(name = "mink_bench", args_override_self = true)]
pub(crate) struct Options {
    /// The `mink` binary to run.
    #[arg(long, value_name = "PATH", value_parser = non_empty_path)]
    pub(crate) node: PathBuf,
    /// The store the node and the baselines run on.
    #[arg(long, value_enum, default_value_t = Store::Local)]
    pub(crate) store: Store,
    /// Fewer samples and smaller volumes.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Runs only these items (their numbers, e.g. `--only 4,5,9`); every item when absent. Item 9
    /// reads the tables of items 4 and 5 and compares with item 4's raw GET, so it needs both.
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    pub(crate) only: Vec<u8>,
    /// Item 8 only: several nodes on moto and etcd (`MINK_TEST_ETCD_ENDPOINTS`); writes
    /// `DIR/cluster.md`. `--store` is not used.
    #[arg(long)]
    pub(crate) cluster: bool,
    /// The scale curve of open tablets only: the first append to 1k, 10k and 100k buckets (1k and
    /// 10k with `--quick`), each on a fresh node on local files; writes `DIR/scale-buckets.md`
    /// and `DIR/scale-buckets.csv`. `--store` is not used.
    #[arg(long, conflicts_with = "cluster")]
    pub(crate) scale: bool,
    /// The folder the report and the CSV files go to.
    #[arg(long, value_name = "DIR", value_parser = non_empty_path)]
    pub(crate) out: PathBuf,
}

fn non_empty_path(v: &str) -> Result<PathBuf, String> {
    if v.is_empty() {
        return Err("the path is empty".to_owned());
    }
    Ok(PathBuf::from(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command line: the program's name, then `s` split at spaces.
    fn args(s: &str) -> Vec<String> {
        std::iter::once("mink_bench")
            .chain(s.split(' '))
            .map(String::from)
            .collect()
    }

    #[test]
    fn the_flags_xtask_passes_parse() {
        let o =
            Options::try_parse_from(args("--node n --store s3-standard --out o --quick")).unwrap();
        assert_eq!((o.store, o.quick), (Store::S3Standard, true));
        assert!(o.only.is_empty());
        let o = Options::try_parse_from(args("--node n --out o --only 4,9")).unwrap();
        assert_eq!(o.only, [4, 9]);
        assert_eq!((o.node, o.out), (PathBuf::from("n"), PathBuf::from("o")));
        let o = Options::try_parse_from(args("--node n --out o")).unwrap();
        assert_eq!((o.store, o.quick), (Store::Local, false));
        assert_eq!(
            Options::try_parse_from(args("--node n --store moto --out o"))
                .unwrap()
                .store,
            Store::Moto
        );
        assert!(Options::try_parse_from(args("--node n --store s3 --out o")).is_err());
        assert!(
            Options::try_parse_from(args("--node n --out o --scale"))
                .unwrap()
                .scale
        );
        assert!(Options::try_parse_from(args("--node n --out o --scale --cluster")).is_err());
        assert!(Options::try_parse_from(args("--node n")).is_err());
        assert!(Options::try_parse_from(args("--out o")).is_err());
    }
}
