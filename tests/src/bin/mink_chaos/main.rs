//! `mink_chaos`: the crash-safety harness behind `cargo xtask chaos` (issue 8).
//!
//! It runs the real `mink` binary as a child process, on the embedded default (local files +
//! redb) or on S3 + etcd (or three of them as a cluster on S3 + etcd, killed and paused in turn:
//! see `run.rs`), and while idempotent writers and tailing readers work against it over
//! HTTP, it kills the node with SIGKILL at random moments and restarts it on the same data and
//! port, part of the time with PUT failures and slow PUTs injected into its object store (the
//! node's `[chaos]` settings, honoured by a build with the `chaos` feature). After the last kill
//! it restarts the node once more without faults, lets every writer finish, reads every bucket
//! from offset 0 and checks:
//!
//! - every acknowledged row is in the log exactly once, in the batch and at the offsets its
//!   acknowledgement named (a row id seen twice is a duplicate; an acknowledged row missing is lost);
//! - batch offsets are contiguous from 0 and nothing is in the log that no writer sent;
//! - the high watermark a reader saw never went backwards, across restarts too;
//! - each reader's batches followed each other with no gap or overlap, and match the final log
//!   (so no reader ever saw data that a crash took back).
//!
//! Writers: `--writers` per bucket, each with its own writer id (`POST /v1/writers`) and
//! sequence numbers, send one NDJSON batch of 1-4 rows with unique row ids at a time and retry
//! the same (writer id, sequence, body) after connection errors, timeouts and 5xx until they get
//! a 200, across restarts. Any 4xx to an append is a violation (e.g. a lost writer window gives
//! 409 out_of_order_sequence).
//!
//! Usage (normally through `cargo xtask chaos`, which builds the binaries and starts the
//! services):
//!
//! ```text
//! mink_chaos --node PATH [--backend embedded|s3-etcd|cluster] [--kills N] [--seconds S] [--seed N]
//!            [--buckets N] [--writers N] [--faults SHARE] [--dir PATH]
//! ```
//!
//! `--seconds` is the length of the kill phase (the mean time between kills is seconds/kills);
//! `--faults` the share of node lives run with injected faults (default 0.5). For `s3-etcd` the
//! services come from `MINK_TEST_S3_ENDPOINT`, `MINK_TEST_S3_BUCKET` and
//! `MINK_TEST_ETCD_ENDPOINTS` (see `mink_tests`). Exit status 0 when every check passed, 1 on any
//! violation, 2 when the harness itself could not run.
//!
//! The files, in the order of a run: `args` (the flags), `node` (the child process and its
//! faults), `journal` (what the workers record), `writer` and `reader` (the workers),
//! `final_read` and `check` (the last read of every bucket and the checks), `run` (the kill
//! phase and the last life).

mod args;
mod check;
mod final_read;
mod journal;
mod node;
mod reader;
mod run;
mod writer;

use std::io::Write as _;
use std::process::ExitCode;

use args::{Backend, Options};
use run::{Report, run};

const TABLE: &str = "chaos";
const MINK_BATCHES: &str = "application/vnd.mink.batches";

type Error = String;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    // A bad flag prints the usage and exits with status 2; `--help` prints it and exits 0.
    let options = Options::parse_args(std::env::args()).unwrap_or_else(|e| e.exit());
    let seed = options.seed;
    let backend = options.backend;
    match run(options).await {
        Ok(report) => summarize(&report, seed, backend),
        Err(message) => {
            eprintln!("mink_chaos: the run could not complete (seed {seed}): {message}");
            ExitCode::from(2)
        }
    }
}

#[expect(clippy::print_stdout, reason = "the summary is the command's output")]
fn summarize(report: &Report, seed: u64, backend: Backend) -> ExitCode {
    for p in &report.problems {
        eprintln!("mink_chaos: VIOLATION: {p}");
    }
    let t = &report.tally;
    if backend == Backend::Cluster {
        println!(
            "{} kills, {} pauses, {} acknowledged, {} lost, {} duplicated",
            report.kills, report.pauses, t.acked_rows, t.lost, t.duplicated
        );
    } else {
        println!(
            "{} kills, {} acknowledged, {} lost, {} duplicated",
            report.kills, t.acked_rows, t.lost, t.duplicated
        );
    }
    let _ = std::io::stdout().flush();
    if report.problems.is_empty() {
        eprintln!(
            "mink_chaos: OK ({backend:?}, seed {seed}, {} lives with faults)",
            report.faulty_lives
        );
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "mink_chaos: FAILED with {} violations ({backend:?}, seed {seed}; rerun with --seed \
             {seed})",
            report.problems.len()
        );
        ExitCode::FAILURE
    }
}
