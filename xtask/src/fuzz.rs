//! `cargo xtask fuzz`: the cargo-fuzz targets of every decoder that reads bytes from the network
//! or from storage, run for a bounded time each.
//!
//! ```text
//! cargo xtask fuzz --list                    the targets, and what each decodes
//! cargo xtask fuzz TARGET [--seconds N]      one target for N seconds (default 60)
//! cargo xtask fuzz --all [--seconds N]       every target for N seconds in turn
//! ```
//!
//! Targets live in two crates outside the workspace (cargo-fuzz needs nightly flags, set here
//! with `RUSTC_BOOTSTRAP=1` on the one stable toolchain): `codec/fuzz` (the batch decoder, built
//! with the codec alone) and `fuzz/` (the decoders of s3stream, metadata, tablet and the server's
//! HTTP bodies). Each crate's `seed_corpus` binary fills `corpus/{target}/` the first time. A run
//! is libFuzzer's with AddressSanitizer, debug assertions and overflow checks on, and with
//! `-malloc_limit_mb` and `-rss_limit_mb`, so an allocation sized by an untrusted count is a
//! finding like a panic. Findings are the files libFuzzer writes to `artifacts/{target}/`; the
//! command fails when a run leaves new ones, after running every target asked for.

use std::collections::BTreeSet;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::{Result, cargo, install, root, run, target_dir};

/// A fuzz target: its name, the crate folder that holds it, and what it decodes.
struct Target {
    name: &'static str,
    krate: &'static str,
    about: &'static str,
}

const CODEC: &str = "codec/fuzz";
const DECODERS: &str = "fuzz";

const TARGETS: &[Target] = &[
    Target {
        name: "decode",
        krate: CODEC,
        about: "mink batches: view, validate, decode, project (codec)",
    },
    Target {
        name: "wal_object",
        krate: DECODERS,
        about: "a WAL object, decoded whole as recovery does (s3stream)",
    },
    Target {
        name: "committed_object",
        krate: DECODERS,
        about: "a committed object: footer, index and blocks as reads and compaction do (s3stream)",
    },
    Target {
        name: "stream_manifest",
        krate: DECODERS,
        about: "a stream manifest or a batch of them, as a rebuild reads them (s3stream)",
    },
    Target {
        name: "metadata_value",
        krate: DECODERS,
        about: "a metadata value decoded as every record kind (metadata)",
    },
    Target {
        name: "writer_snapshot",
        krate: DECODERS,
        about: "a tablet's writer snapshot (tablet)",
    },
    Target {
        name: "tablet_registry",
        krate: DECODERS,
        about: "a tablet registry value (tablet)",
    },
    Target {
        name: "ndjson_rows",
        krate: DECODERS,
        about: "an NDJSON append body, then encoded, decoded and rendered (server)",
    },
    Target {
        name: "arrow_rows",
        krate: DECODERS,
        about: "an Arrow IPC append body, then encoded, decoded and rendered (server)",
    },
    Target {
        name: "table_schema",
        krate: DECODERS,
        about: "a table schema as JSON or a type text, stored and parsed back (server)",
    },
];

/// libFuzzer's options for every run: a per-input timeout and the memory bounds that turn an
/// allocation sized by an untrusted count into a finding.
const LIBFUZZER_OPTIONS: &[&str] = &[
    "-malloc_limit_mb=512",
    "-rss_limit_mb=2048",
    "-timeout=10",
    "-print_final_stats=1",
];

/// cargo-fuzz's build options, the same for `build` and `run` so that `run` rebuilds nothing.
const BUILD_OPTIONS: &[&str] = &["--debug-assertions", "--codegen-units", "16"];

/// What one run did.
#[derive(Debug, Default, PartialEq, Eq)]
struct Outcome {
    executions: Option<u64>,
    peak_rss_mb: Option<u64>,
    findings: Vec<PathBuf>,
}

pub(crate) fn fuzz(args: &[String]) -> Result {
    let mut chosen: Vec<&Target> = Vec::new();
    let mut all = false;
    let mut seconds = 60u64;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--seconds" => {
                seconds = iter
                    .next()
                    .and_then(|s| s.parse().ok())
                    .filter(|&s| s > 0)
                    .ok_or("--seconds needs a positive number")?;
            }
            "--all" => all = true,
            "--list" => {
                list();
                return Ok(());
            }
            // `codec` named the codec's one target before there were others.
            "codec" => chosen.push(find("decode")?),
            other if !other.starts_with('-') => chosen.push(find(other)?),
            other => return Err(format!("unknown fuzz option `{other}`")),
        }
    }
    if all {
        chosen = TARGETS.iter().collect();
    }
    if chosen.is_empty() {
        return Err(format!(
            "name a target or --all (cargo xtask fuzz --list):\n{}",
            names()
        ));
    }
    install::build_tools()?;
    install::cargo_fuzz()?;
    let crates: BTreeSet<&str> = chosen.iter().map(|t| t.krate).collect();
    for krate in &crates {
        build(krate)?;
    }
    let mut outcomes = Vec::new();
    for target in &chosen {
        outcomes.push((target.name, run_one(target, seconds, chosen.len() > 1)?));
    }
    report(&outcomes, seconds)
}

fn find(name: &str) -> Result<&'static Target> {
    TARGETS
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| format!("no fuzz target `{name}`; the targets are:\n{}", names()))
}

fn names() -> String {
    TARGETS
        .iter()
        .map(|t| format!("  {:<18} {}", t.name, t.about))
        .collect::<Vec<_>>()
        .join("\n")
}

#[expect(clippy::print_stdout, reason = "the list is the command's output")]
fn list() {
    for target in TARGETS {
        println!("{:<18} {:<11} {}", target.name, target.krate, target.about);
    }
}

/// A cargo command in a fuzz crate's folder with the flags cargo-fuzz needs.
fn fuzz_cargo(krate: &str) -> Command {
    let mut command = cargo();
    command
        .current_dir(root().join(krate))
        // cargo-fuzz needs nightly-only compiler flags; this machine has one stable toolchain.
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_TARGET_DIR", target_dir().join("fuzz"));
    command
}

/// Builds every binary of a fuzz crate (its targets and `seed_corpus`) with the fuzzing flags.
fn build(krate: &str) -> Result {
    let mut command = fuzz_cargo(krate);
    command.args(["fuzz", "build"]).args(BUILD_OPTIONS);
    run(command)
}

/// Writes the crate's seed inputs unless the target's corpus already holds some.
fn seed(target: &Target) -> Result {
    let corpus = root().join(target.krate).join("corpus").join(target.name);
    if fs::read_dir(&corpus).is_ok_and(|mut d| d.next().is_some()) {
        return Ok(());
    }
    let binary = target_dir()
        .join("fuzz")
        .join(host_triple()?)
        .join("release")
        .join("seed_corpus");
    run(Command::new(binary))
}

fn host_triple() -> Result<String> {
    let output = Command::new("rustc")
        .arg("-vV")
        .output()
        .map_err(|e| format!("could not run rustc -vV: {e}"))?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_owned)
        .ok_or_else(|| "rustc -vV names no host".to_owned())
}

/// The files in a target's artifact folder.
fn artifacts(target: &Target) -> BTreeSet<PathBuf> {
    let dir = root()
        .join(target.krate)
        .join("artifacts")
        .join(target.name);
    fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default()
}

/// Runs one target for `seconds`. libFuzzer's output goes to stderr as it comes; with `quiet`,
/// its progress lines (`#N ...`) are left out.
fn run_one(target: &Target, seconds: u64, quiet: bool) -> Result<Outcome> {
    seed(target)?;
    let before = artifacts(target);
    let mut command = fuzz_cargo(target.krate);
    command
        .args(["fuzz", "run"])
        .args(BUILD_OPTIONS)
        .arg(target.name)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .args(LIBFUZZER_OPTIONS)
        .stderr(Stdio::piped());
    eprintln!("xtask: fuzzing {} for {seconds} s", target.name);
    let mut child = command
        .spawn()
        .map_err(|e| format!("could not start cargo fuzz run {}: {e}", target.name))?;
    let mut outcome = Outcome::default();
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr)
            .lines()
            .map_while(std::result::Result::ok)
        {
            parse_line(&line, &mut outcome);
            if !(quiet && line.starts_with('#')) {
                eprintln!("{line}");
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("cargo fuzz run {}: {e}", target.name))?;
    outcome.findings = artifacts(target).difference(&before).cloned().collect();
    if !status.success() && outcome.findings.is_empty() {
        return Err(format!(
            "cargo fuzz run {} failed ({status}) without a finding",
            target.name
        ));
    }
    Ok(outcome)
}

/// Takes the executions and peak memory from libFuzzer's lines: its final stats, or the count of
/// its last progress line when it stopped on a finding before printing them.
fn parse_line(line: &str, outcome: &mut Outcome) {
    let number = |text: &str| text.trim().parse::<u64>().ok();
    if let Some(n) = line.strip_prefix("stat::number_of_executed_units:") {
        outcome.executions = number(n).or(outcome.executions);
    } else if let Some(n) = line.strip_prefix("stat::peak_rss_mb:") {
        outcome.peak_rss_mb = number(n).or(outcome.peak_rss_mb);
    } else if let Some(rest) = line.strip_prefix('#') {
        let count = rest.split_whitespace().next().and_then(number);
        outcome.executions = count.or(outcome.executions);
    }
}

fn report(outcomes: &[(&str, Outcome)], seconds: u64) -> Result {
    eprintln!("\nxtask: fuzz summary ({seconds} s per target)");
    eprintln!(
        "  {:<18} {:>12} {:>8} {:>9}",
        "target", "executions", "rss MB", "findings"
    );
    let mut findings = Vec::new();
    for (name, outcome) in outcomes {
        let shown = |n: Option<u64>| n.map_or("?".to_owned(), |n| n.to_string());
        eprintln!(
            "  {name:<18} {:>12} {:>8} {:>9}",
            shown(outcome.executions),
            shown(outcome.peak_rss_mb),
            outcome.findings.len()
        );
        findings.extend(outcome.findings.iter().map(|f| f.display().to_string()));
    }
    if findings.is_empty() {
        return Ok(());
    }
    for file in &findings {
        eprintln!("  finding: {file}");
    }
    Err(format!(
        "{} finding(s); reproduce one with `cargo fuzz run TARGET FILE` in its crate",
        findings.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every binary under a fuzz crate's `fuzz_targets/` is in the table, and the other way round.
    #[test]
    fn the_table_names_every_target_of_both_crates() {
        let mut on_disk = BTreeSet::new();
        for krate in [CODEC, DECODERS] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join(krate)
                .join("fuzz_targets");
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                on_disk.insert((krate, name));
            }
        }
        let listed: BTreeSet<(&str, String)> = TARGETS
            .iter()
            .map(|t| (t.krate, t.name.to_owned()))
            .collect();
        assert_eq!(listed, on_disk);
    }

    #[test]
    fn libfuzzer_lines_give_executions_and_memory() {
        let mut outcome = Outcome::default();
        for line in [
            "INFO: Seed: 123",
            "#2\tINITED cov: 10 ft: 10 corp: 1/1b exec/s: 0 rss: 30Mb",
            "#4096\tpulse  cov: 90 ft: 120 corp: 9/80b lim: 43 exec/s: 2048 rss: 41Mb",
            "#5000\tNEW    cov: 91 ft: 121 corp: 10/88b",
        ] {
            parse_line(line, &mut outcome);
        }
        assert_eq!(outcome.executions, Some(5000));
        parse_line("stat::number_of_executed_units: 5123", &mut outcome);
        parse_line("stat::peak_rss_mb: 57", &mut outcome);
        parse_line("Done 5123 runs in 1 second(s)", &mut outcome);
        assert_eq!(outcome.executions, Some(5123));
        assert_eq!(outcome.peak_rss_mb, Some(57));
    }
}
