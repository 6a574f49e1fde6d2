//! `cargo xtask bench [--quick]`: the benchmark of issue 8, one command, a report a skeptical user
//! can check. Every end-to-end figure stands beside a baseline measured in the same run against
//! the same store.
//!
//! 1. The codec's criterion micro-benchmarks (validate vs memcpy, projection vs decode-all).
//! 2. The stream engine in process (`s3stream/examples/stream_bench.rs`) on local files, moto and
//!    the S3 Standard latency model: idle append vs raw PUT, group commit, tail reader, replay.
//! 3. The node's in-process HTTP bench (`server/benches/http.rs`), and metadata recovery in
//!    process (`s3stream/examples/recovery_bench.rs`: snapshot time and size for 10k buckets and
//!    100k objects on redb and etcd, rebuild of 10k objects on moto, beside a plain scan and a
//!    plain LIST + tail GETs).
//! 4. The release node as a real process (`tests/src/bin/mink_bench/`, built with the `chaos`
//!    feature so that it can wear the S3 Standard latency model) on the same three stores: the
//!    seven items of the issue; then item 8, three nodes on moto and etcd (throughput 3 vs 1,
//!    transfer and failover times).
//! 5. Charts (PNG) drawn with matplotlib from the driver's CSV files, in a Python virtual
//!    environment under `.tools/venv` (created on first use, as for moto).
//!
//! Everything lands in `bench/results/quick/` or `bench/results/full/`: `report.md` (machine,
//! date, commit, duration, then one table per item), the per-part Markdown and CSV files, and
//! `latency.png`, `replay.png`, `cost.png`. `--quick` runs fewer samples and smaller volumes and skips parts 2
//! and 3 (under 5 minutes on a 2-core machine once built). A full run takes about an hour on such
//! a machine; the items that make one request after another take half their samples on the S3
//! Standard model, whose every request waits tens of milliseconds.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::services::Services;
use crate::{Result, cargo, install, root, run, target_dir};

/// The stores every end-to-end part runs against.
const STORES: [&str; 3] = ["local", "moto", "s3-standard"];

/// `cargo xtask bench [--quick] [--scale]`.
pub(crate) fn bench(args: &[String]) -> Result {
    let quick = args.iter().any(|a| a == "--quick");
    if let Some(other) = args.iter().find(|a| *a != "--quick" && *a != "--scale") {
        return Err(format!(
            "unknown bench option `{other}` (only --quick and --scale)"
        ));
    }
    install::build_tools()?;
    if args.iter().any(|a| a == "--scale") {
        return scale(quick);
    }
    let mode = if quick { "quick" } else { "full" };
    let results = root().join("bench").join("results").join(mode);
    std::fs::create_dir_all(&results).map_err(|e| format!("create {}: {e}", results.display()))?;
    let python = matplotlib()?;
    // Item 10's Kafka client (confluent-kafka), in the same environment.
    let clients = install::python_clients()?;

    // Build everything first, so the time measured below is the benchmark's.
    let mut build = cargo();
    build.args([
        "build",
        "--release",
        "--package",
        "mink-s3stream",
        "--features",
        "test-util",
        "--example",
        "stream_bench",
        "--example",
        "recovery_bench",
    ]);
    run(build)?;
    crate::build_node_and_driver(true, "mink_bench")?;
    // A private copy of the node: `cargo bench -p mink-server` below rebuilds target/release/mink
    // without the `chaos` feature (the bench profile shares the release folder).
    let release = target_dir().join("release");
    let node = target_dir().join("xtask").join("mink-bench-node");
    std::fs::create_dir_all(target_dir().join("xtask"))
        .map_err(|e| format!("create target/xtask: {e}"))?;
    std::fs::copy(release.join("mink"), &node)
        .map_err(|e| format!("copy the node binary to {}: {e}", node.display()))?;
    // Each bench target on its own, with the packages of the command that runs it below: built
    // together, the two unify their dependencies' features differently, and the timed run of the
    // HTTP bench then rebuilt half the tree (7 minutes of a full run).
    for (package, target) in [("mink-codec", "codec"), ("mink-server", "http")] {
        let mut build = cargo();
        build.args(["bench", "--no-run", "--package", package, "--bench", target]);
        run(build)?;
    }

    let started = Instant::now();
    let mut criterion = cargo();
    criterion.args(["bench", "--package", "mink-codec", "--bench", "codec", "--"]);
    if quick {
        criterion.args(["--warm-up-time", "1", "--measurement-time", "2"]);
    }
    run(criterion)?;

    let services = Services::start()?;

    // The release node as a real process, on each store.
    for store in STORES {
        let mut command = Command::new(release.join("mink_bench"));
        command
            .arg("--node")
            .arg(&node)
            .args(["--store", store, "--out"])
            .arg(&results);
        if quick {
            command.arg("--quick");
        }
        command.env("MINK_TEST_PYTHON", &clients);
        services.export(&mut command);
        run(command)?;
    }

    // Several nodes on moto and etcd (item 8).
    let mut command = Command::new(release.join("mink_bench"));
    command
        .arg("--node")
        .arg(&node)
        .args(["--cluster", "--out"])
        .arg(&results);
    if quick {
        command.arg("--quick");
    }
    services.export(&mut command);
    run(command)?;

    // The stream engine in process, on each store (full runs only: the node's figures above
    // answer the same questions, and `--quick` must stay under 5 minutes on two cores).
    let mut engine = String::new();
    for store in STORES.iter().filter(|_| !quick) {
        let out = results.join(format!("stream-{store}.md"));
        let mut command = Command::new(release.join("examples").join("stream_bench"));
        command.args(["--store", store, "--out"]).arg(&out);
        if quick {
            command.arg("--quick");
        }
        services.export(&mut command);
        run(command)?;
        engine += &read(&out)?;
    }
    // Metadata recovery in process (full runs only): snapshot time and size for 10k buckets and
    // 100k objects (redb, etcd), rebuild time for 10k objects on moto.
    if !quick {
        let out = results.join("recovery.md");
        let mut command = Command::new(release.join("examples").join("recovery_bench"));
        command.args(["--store", "moto", "--out"]).arg(&out);
        services.export(&mut command);
        run(command)?;
        engine += "## Metadata recovery (`recovery_bench`)\n\n";
        engine += &read(&out)?;
    }
    // The node in process: HTTP append vs raw PUT, delivery after the ack (full runs only).
    let http_out = results.join("http.md");
    let mut http = cargo();
    if quick {
        drop(services);
        return finish(&python, &results, mode, started, "", None);
    }
    http.args([
        "bench",
        "--package",
        "mink-server",
        "--bench",
        "http",
        "--",
        "--out",
    ])
    .arg(&http_out);
    if quick {
        http.arg("--quick");
    }
    services.export(&mut http);
    run(http)?;
    drop(services);
    finish(&python, &results, mode, started, &engine, Some(&http_out))
}

/// `cargo xtask bench --scale [--quick]`: the curves of the costs as the work grows, on local
/// files and in process, apart from the other runs because their large points take long: open
/// tablets at 1k / 10k / 100k buckets (`mink_bench --scale`: first-open latency, memory per
/// open tablet, graceful stop) and the object index at 10k / 100k / 1M committed objects
/// (`metadata/examples/index_scale.rs`: memory per object, open time, lookup latency). `--quick`
/// leaves out the largest point of each. Writes `bench/results/scale/` (`scale-quick/`):
/// `report.md`, the CSV files and `scale.png`.
fn scale(quick: bool) -> Result {
    let results =
        root()
            .join("bench")
            .join("results")
            .join(if quick { "scale-quick" } else { "scale" });
    std::fs::create_dir_all(&results).map_err(|e| format!("create {}: {e}", results.display()))?;
    let python = matplotlib()?;
    let mut build = cargo();
    build.args([
        "build",
        "--release",
        "--package",
        "mink-metadata",
        "--example",
        "index_scale",
    ]);
    run(build)?;
    crate::build_node_and_driver(true, "mink_bench")?;
    let release = target_dir().join("release");
    let started = Instant::now();
    let mut command = Command::new(release.join("mink_bench"));
    command
        .arg("--node")
        .arg(release.join("mink"))
        .arg("--scale")
        .arg("--out")
        .arg(&results);
    if quick {
        command.arg("--quick");
    }
    run(command)?;
    let mut command = Command::new(release.join("examples").join("index_scale"));
    command.arg("--out").arg(&results);
    if quick {
        command.args(["--objects", "10000,100000"]);
    }
    run(command)?;
    let script = results.join("charts.py");
    std::fs::write(&script, SCALE_CHARTS)
        .map_err(|e| format!("write {}: {e}", script.display()))?;
    let mut command = Command::new(&python);
    command.arg(&script).arg(&results);
    let drawn = run(command);
    let _ = std::fs::remove_file(&script);
    drawn?;
    let seconds = started.elapsed().as_secs();
    let mut report = header(if quick { "scale-quick" } else { "scale" }, seconds);
    report += &read(&results.join("scale-buckets.md"))?;
    report += &read(&results.join("scale-objects.md"))?;
    report += "![Scale curves](scale.png)\n";
    let path = results.join("report.md");
    std::fs::write(&path, report).map_err(|e| format!("write {}: {e}", path.display()))?;
    eprintln!(
        "xtask: bench (scale) took {seconds} s after the build; report in {}",
        path.display()
    );
    Ok(())
}

/// Draws the charts and writes `report.md`.
fn finish(
    python: &Path,
    results: &Path,
    mode: &str,
    started: Instant,
    engine: &str,
    http_out: Option<&Path>,
) -> Result {
    charts(python, results)?;
    let seconds = started.elapsed().as_secs();
    let mut report = header(mode, seconds);
    for store in STORES {
        report += &read(&results.join(format!("node-{store}.md")))?;
    }
    report += &read(&results.join("cluster.md"))?;
    report += "## Charts\n\n![Latency percentiles](latency.png)\n\n![Replay](replay.png)\n\n![Request cost](cost.png)\n\n";
    if let Some(http_out) = http_out {
        report += "## In-process figures\n\nThe engine without HTTP, and the node in the bench \
                   process: the same questions one layer down, to tell the engine's cost from \
                   the node's.\n\n";
        // One level down: the engine's `## store` / `### item` become `### ` / `#### `.
        let nested = format!("\n{engine}")
            .replace("\n### ", "\n#### ")
            .replace("\n## ", "\n### ");
        report += &nested;
        report += &read(http_out)?.replacen("# HTTP", "### HTTP", 1);
    } else {
        report += "The in-process engine and HTTP benches (`stream_bench`, `server/benches/http.rs`) \
                   run in the full mode only.\n";
    }
    let path = results.join("report.md");
    std::fs::write(&path, report).map_err(|e| format!("write {}: {e}", path.display()))?;
    eprintln!(
        "xtask: bench ({mode}) took {seconds} s after the build; report in {}",
        path.display()
    );
    Ok(())
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))
}

/// The report's head: what ran, where, when.
fn header(mode: &str, seconds: u64) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown", |(_, v)| v.trim())
        .to_owned();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or("unknown".to_owned(), |kib| {
            format!("{:.1} GiB", kib as f64 / 1048576.0)
        });
    let output = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .current_dir(root())
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    };
    let cores = output("nproc", &[]);
    let date = output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let commit = output("git", &["rev-parse", "--short", "HEAD"]);
    let kernel = output("uname", &["-r"]);
    let (flags, ran) = match mode {
        "quick" => (
            " --quick",
            "codec micro-benchmarks, the node on three stores",
        ),
        "full" => (
            "",
            "codec micro-benchmarks, the node on three stores, the in-process engine and HTTP benches",
        ),
        "scale" => (" --scale", "open tablets and the object index as they grow"),
        _ => (
            " --scale --quick",
            "open tablets and the object index as they grow",
        ),
    };
    let mut head = format!(
        "# Mink benchmark report ({mode})\n\n\
         | | |\n|---|---|\n\
         | command | `cargo xtask bench{flags}` |\n\
         | date | {date} |\n| commit | {commit} |\n\
         | machine | {cores} cores ({cpu}), {memory} memory, Linux {kernel} |\n\
         | duration | {seconds} s after the build ({ran}) |\n\n"
    );
    if mode.starts_with("scale") {
        return head;
    }
    head += "How to read it: every figure stands beside a baseline measured in the same run against \
         the same store (a raw PUT or GET of the same bytes, or the same read without the \
         feature), because these machines are shared and noisy; the ratio is what to compare. \
         Goals are from issue 8; a missed goal says **missed**. On `local` and `moto` the store \
         shares the machine's cores and disk with the node (moto is a Python process), and \
         compaction writes the bytes of small WAL objects a second time (large ones are \
         committed as they are); `s3-standard` adds S3 Standard's modelled \
         latency and per-request bandwidth to local files, on both the node and the baseline.\n\n";
    head
}

/// A Python with matplotlib: the virtual environment under `.tools/venv`, created on first use.
fn matplotlib() -> Result<PathBuf> {
    let venv = root().join(".tools").join("venv");
    let python = venv.join("bin").join("python");
    let has = |python: &Path| {
        Command::new(python)
            .args(["-c", "import matplotlib"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if has(&python) {
        return Ok(python);
    }
    if !python.exists() {
        let mut create = Command::new("python3");
        create.args(["-m", "venv"]).arg(&venv);
        run(create)?;
    }
    let mut pip = Command::new(venv.join("bin").join("pip"));
    pip.args(["install", "--quiet", "matplotlib"]);
    run(pip)?;
    Ok(python)
}

/// Draws `latency.png` and `replay.png` from the driver's CSV files.
fn charts(python: &Path, results: &Path) -> Result {
    let script = results.join("charts.py");
    std::fs::write(&script, CHARTS).map_err(|e| format!("write {}: {e}", script.display()))?;
    let mut command = Command::new(python);
    command.arg(&script).arg(results);
    let outcome = run(command);
    let _ = std::fs::remove_file(&script);
    outcome
}

const CHARTS: &str = r##"
import csv, sys, os
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

out = sys.argv[1]
stores = ["local", "moto", "s3-standard"]
colors = {"local": "#1f77b4", "moto": "#ff7f0e", "s3-standard": "#2ca02c"}

def rows(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))

# Latency percentiles: item 1 (raw PUT vs append) and item 3 (delivery after the ack).
panels = [
    ("1. Idle append vs raw PUT (ms, log scale)", ["1. raw PUT", "1. HTTP append (durable)"], True),
    ("3. Delivery after the ack (ms; goal: p99 < 1 ms)", ["3. long-poll after ack", "3. SSE after ack"], False),
]
fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
for ax, (title, series, log) in zip(axes, panels):
    labels, values = [], []
    for store in stores:
        data = {r["series"]: r for r in rows(f"latency-{store}.csv")}
        for s in series:
            if s in data:
                labels.append(f"{store}\n{s.split('. ', 1)[1]}")
                values.append([float(data[s][k]) for k in ("p50_ms", "p99_ms", "p999_ms")])
    width = 0.27
    for i, (pname, shade) in enumerate([("p50", 1.0), ("p99", 0.65), ("p99.9", 0.35)]):
        xs = [j + (i - 1) * width for j in range(len(labels))]
        ys = [max(v[i], 1e-3) for v in values]
        bars = ax.bar(xs, ys, width, label=pname, alpha=shade,
                      color=[colors[l.split("\n")[0]] for l in labels])
        for x, y in zip(xs, ys):
            ax.annotate(f"{y:.2f}", (x, y), ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=7)
    if log:
        ax.set_yscale("log")
    else:
        ax.axhline(1.0, color="red", linestyle="--", linewidth=1, label="goal (p99)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
fig.suptitle("Latency percentiles per store: bars are p50 (dark), p99, p99.9 (light)")
fig.tight_layout()
fig.savefig(os.path.join(out, "latency.png"), dpi=110)

# Replay progress over time: cold and warm per store.
fig, ax = plt.subplots(figsize=(9, 5.5))
for store in stores:
    data = rows(f"replay-{store}.csv")
    for phase, style in (("cold", "-"), ("warm", "--")):
        pts = [(float(r["seconds"]), float(r["mb"])) for r in data if r["phase"] == phase]
        if pts:
            t, mb = zip(*pts)
            rate = mb[-1] / t[-1] if t[-1] > 0 else 0
            ax.plot(t, mb, style, color=colors[store], label=f"{store}, {phase} ({rate:.0f} MB/s)")
ax.set_xlabel("seconds since the replay started")
ax.set_ylabel("MB replayed")
ax.set_title("4. Catch-up replay from committed objects over HTTP")
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(os.path.join(out, "replay.png"), dpi=110)

# Item 15: append p99 against WAL PUTs per second, one line per min_put_interval, per store.
cost = [(store, rows(f"cost-{store}.csv")) for store in stores]
cost = [(store, data) for store, data in cost if data]
if cost:
    fig, axes = plt.subplots(1, len(cost), figsize=(7 * len(cost), 5.5), squeeze=False)
    for ax, (store, data) in zip(axes[0], cost):
        for interval in sorted({int(r["interval_ms"]) for r in data}):
            pts = sorted((float(r["load_mbps"]), float(r["puts_per_s"]), float(r["p99_ms"]))
                         for r in data if int(r["interval_ms"]) == interval)
            ax.plot([p[1] for p in pts], [p[2] for p in pts], "o-",
                    label=f"min_put_interval {interval} ms")
            for load, puts, p99 in pts:
                ax.annotate(f"{load:g} MB/s", (puts, p99), fontsize=7,
                            textcoords="offset points", xytext=(4, 4))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("WAL PUTs per second")
        ax.set_ylabel("append p99 (ms)")
        ax.set_title(f"15. Request cost on {store}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "cost.png"), dpi=110)
"##;

/// `scale.png`: the open-tablet and object-index curves of `--scale`.
const SCALE_CHARTS: &str = r##"
import csv, sys, os
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

out = sys.argv[1]

def rows(name):
    with open(os.path.join(out, name)) as f:
        return list(csv.DictReader(f))

buckets = rows("scale-buckets.csv")
objects = rows("scale-objects.csv")
fig, axes = plt.subplots(1, 3, figsize=(18, 5.5))

ax = axes[0]
n = [int(r["tablets"]) for r in buckets]
ax.plot(n, [float(r["kib_per_tablet"]) for r in buckets], "o-", label="KiB per open tablet (RSS)")
ax.plot(n, [float(r["p99_ms"]) for r in buckets], "s-", label="first append p99 (ms)")
ax.plot(n, [float(r["p50_ms"]) for r in buckets], "^-", label="first append p50 (ms)")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("open tablets")
ax.set_title("Open tablets: memory and first-open latency")
ax.grid(alpha=0.3)
ax.legend(fontsize=8)

ax = axes[1]
ax.plot(n, [float(r["stop_s"]) for r in buckets], "o-", label="graceful stop (s)")
ax.axhline(5.0, color="red", linestyle="--", linewidth=1, label="goal at 10k: 5 s")
ax.set_xscale("log")
ax.set_xlabel("open tablets")
ax.set_ylabel("seconds")
ax.set_title("Open tablets: SIGTERM to exit")
ax.grid(alpha=0.3)
ax.legend(fontsize=8)

ax = axes[2]
m = [int(r["objects"]) for r in objects]
ax.plot(m, [float(r["index_bytes_per_object"]) for r in objects], "o-", label="index bytes per object")
ax.plot(m, [float(r["encoded_bytes_per_object"]) for r in objects], "o--", label="encoded record bytes")
ax.plot(m, [float(r["lookup_p50_ns"]) for r in objects], "s-", label="lookup p50 (ns)")
ax.plot(m, [float(r["lookup_p99_ns"]) for r in objects], "^-", label="lookup p99 (ns)")
ax.plot(m, [float(r["open_ms"]) for r in objects], "d-", label="open, index rebuild (ms)")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("committed objects")
ax.set_title("Object index: memory, lookup, open")
ax.grid(alpha=0.3)
ax.legend(fontsize=8)

fig.tight_layout()
fig.savefig(os.path.join(out, "scale.png"), dpi=110)
"##;
