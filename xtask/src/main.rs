//! `cargo xtask`: the developer's one entry point (alias `cargo x`).
//!
//! ```text
//! cargo xtask test [ARGS]     install what the build and tests need, start etcd and an S3 server
//!                             (moto) on free ports, run every test in the workspace, stop them
//! cargo xtask serve [ARGS]    install what the build needs, run the node (release) on the embedded default
//! cargo xtask lint            cargo fmt --check, clippy -D warnings, unused dependencies (cargo
//!                             machete) and module cycles inside each crate (see lint.rs)
//! cargo xtask bench [--quick] micro and end-to-end benchmarks, report in bench/results/ (see bench.rs)
//! cargo xtask bench --scale   the scale curves (open tablets, the object index), bench/results/scale/
//! cargo xtask fuzz TARGET|--all [--seconds N]   cargo-fuzz targets of every decoder of network
//!                             and storage bytes, for a bounded time each (see fuzz.rs); --list
//! cargo xtask services        start etcd and moto, print their addresses, wait for Ctrl-C
//! cargo xtask chaos [ARGS]    kill -9 the node at random moments under load, check nothing
//!                             acknowledged is lost or duplicated (see chaos.rs)
//! ```
//!
//! The crate has no dependencies so that it builds in seconds on a fresh machine: everything it
//! needs (processes, free ports, a readiness probe over plain HTTP) is done with the standard library.

mod bench;
mod chaos;
mod fuzz;
mod install;
mod lint;
mod services;

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// A failed step, with a message for the developer.
type Result<T = ()> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let mut args = env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    let outcome = match command.as_str() {
        "test" => test(&rest),
        "serve" => serve(&rest),
        "lint" => lint::lint(),
        "cycles" => lint::cycles(&rest),
        "bench" => bench::bench(&rest),
        "fuzz" => fuzz::fuzz(&rest),
        "services" => services_only(),
        "chaos" => chaos::chaos(&rest),
        "" | "help" | "-h" | "--help" => {
            eprintln!("{}", USAGE);
            Ok(())
        }
        other => Err(format!("unknown command `{other}`\n\n{USAGE}")),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: cargo xtask <command>

commands:
  test [ARGS]       install what is missing, start etcd and moto, run every test (ARGS go to nextest)
  serve [ARGS]      install what is missing, run the node in release mode (ARGS go to `mink serve`)
  lint              cargo fmt --check, cargo clippy --all-targets -D warnings, unused
                    dependencies (cargo machete), module cycles inside each crate
  cycles [DIR]      only the module-cycle check of lint (of the workspace at DIR)
  bench [--quick]   benchmarks: codec micro-benchmarks, the stream engine, and the release node
                    over HTTP on local files, moto and the S3 Standard latency model, each
                    beside a raw baseline; report and charts in bench/results/{quick,full}/
  bench --scale [--quick]
                    the scale curves: open tablets at 1k/10k/100k buckets and the object
                    index at 10k/100k/1M objects; report and scale.png in bench/results/scale/
  fuzz TARGET|--all [--seconds N] | --list
                    run cargo-fuzz targets (decoders of batches, WAL and committed objects,
                    metadata values, writer snapshots, registry values, NDJSON, Arrow IPC and
                    schema bodies) for N seconds each (default 60); print executions and
                    findings per target; fail on any finding
  services          start etcd and moto for manual testing and wait for Ctrl-C
  chaos [--backend embedded|s3-etcd|cluster|both|all] [--kills N] [--seconds S] [--seed N] [--debug]
                    crash-safety run: kill -9 the node under load (some lives with injected
                    PUT failures and delays), check every acknowledged row is there exactly once";

/// The workspace root (the parent of this crate's folder).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Cargo's target directory: `CARGO_TARGET_DIR` when set (relative to the root), else `target/`.
fn target_dir() -> PathBuf {
    match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root().join(dir),
        _ => root().join("target"),
    }
}

/// Builds `mink` with the `chaos` feature (fault injection, latency models) and the `driver`
/// binary of the tests crate that runs it as a process.
fn build_node_and_driver(release: bool, driver: &str) -> Result {
    let mut build = cargo();
    build.arg("build");
    if release {
        build.arg("--release");
    }
    build.args([
        "--package",
        "mink-server",
        "--package",
        "mink-tests",
        "--features",
        "mink-server/chaos",
        "--bin",
        "mink",
        "--bin",
        driver,
    ]);
    run(build)
}

fn cargo() -> Command {
    let mut command = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(root());
    command
}

/// Runs a command to completion, failing with its name when it fails.
fn run(mut command: Command) -> Result {
    let shown = format!("{command:?}");
    eprintln!("xtask: running {shown}");
    let status = command
        .status()
        .map_err(|e| format!("could not start {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

/// Free space (GiB) below which `cargo xtask test` warns before it builds: a clean build of every
/// test, the doctests and the chaos binaries takes about this much.
const TEST_DISK_GIB: u64 = 20;

/// Warns when the filesystem of the target folder has less than `gib` GiB free (a build that runs
/// out of space fails late, with an error that does not say why).
fn warn_if_disk_low(gib: u64) {
    let dir = target_dir();
    let probe = if dir.exists() { dir } else { root() };
    let Ok(out) = Command::new("df").arg("-Pk").arg(&probe).output() else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let free_kib = text
        .lines()
        .nth(1)
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|field| field.parse::<u64>().ok());
    if let Some(free) = free_kib
        && free < gib << 20
    {
        eprintln!(
            "xtask: warning: only {} GiB free under {}; a full test build needs about {gib} GiB (remove old target folders)",
            free >> 20,
            probe.display()
        );
    }
}

fn test(args: &[String]) -> Result {
    warn_if_disk_low(TEST_DISK_GIB);
    install::build_tools()?;
    let python = install::python_clients()?;
    let chromium = install::chromium()?;
    let chromedriver = install::chromedriver()?;
    let kcat = install::kcat()?;
    let ds_suite = install::ds_suite()?;
    let services = services::Services::start()?;
    let mut outcome = Ok(());
    // Build everything first so a compile error is reported once, not per test binary.
    let mut nextest = cargo();
    if install::has_nextest() {
        nextest.args([
            "nextest",
            "run",
            "--workspace",
            "--no-fail-fast",
            "--no-tests=warn",
        ]);
    } else {
        nextest.args(["test", "--workspace", "--no-fail-fast"]);
    }
    nextest.args(args);
    services.export(&mut nextest);
    nextest.env("MINK_TEST_PYTHON", &python);
    nextest.env("MINK_TEST_CHROMIUM", &chromium);
    nextest.env("MINK_TEST_CHROMEDRIVER", &chromedriver);
    nextest.env("MINK_TEST_KCAT", &kcat);
    nextest.env("MINK_TEST_DS_SUITE", &ds_suite);
    if let Err(e) = run(nextest) {
        outcome = Err(e);
    }
    if args.is_empty() {
        // nextest does not run doctests; cargo test does.
        let mut doc = cargo();
        doc.args(["test", "--workspace", "--doc"]);
        services.export(&mut doc);
        if let Err(e) = run(doc) {
            outcome = outcome.and(Err(e));
        }
        // The short crash-safety run (issue 8): a few kills on each backend, about a minute.
        if let Err(e) = chaos::short(&services) {
            outcome = outcome.and(Err(e));
        }
    }
    drop(services);
    outcome
}

fn serve(args: &[String]) -> Result {
    install::build_tools()?;
    let mut command = cargo();
    command.args([
        "run",
        "--release",
        "--package",
        "mink-server",
        "--bin",
        "mink",
        "--",
        "serve",
    ]);
    command.args(args);
    run(command)
}

#[expect(
    clippy::print_stdout,
    reason = "the exports are the command's output, for a shell to eval"
)]
fn services_only() -> Result {
    let services = services::Services::start()?;
    for (key, value) in services.variables() {
        println!("export {key}={value}");
    }
    eprintln!("xtask: services are running; press Ctrl-C to stop them");
    loop {
        std::thread::park();
    }
}
