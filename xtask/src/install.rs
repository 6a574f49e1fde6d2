//! Installs what the build and the tests need on a fresh machine, and nothing when it is present.
//!
//! - `protoc` (Debian `protobuf-compiler`): etcd-client generates its gRPC code at build time.
//! - `etcd` (Debian `etcd-server`): the metadata tests run against a real etcd.
//! - `moto_server` (PyPI `moto[server]`, in a virtual environment under `.tools/venv`): the
//!   S3-compatible server the object-storage tests run against.
//! - the real clients the tests drive, from PyPI into the same virtual environment: `pyarrow`
//!   (its Flight client), `openapi-spec-validator` (checks the API's OpenAPI document),
//!   `confluent-kafka` (librdkafka inside) and `kafka-python` (Kafka clients); and
//!   Debian's `chromium`, the headless browser of the CORS and
//!   dashboard tests, with `chromium-driver` (ChromeDriver) that drives the dashboard's; and
//!   Debian's `kcat` (librdkafka), the Kafka client of the Kafka front end's tests.
//! - the Durable Streams conformance suite (npm `@durable-streams/server-conformance-tests`, a
//!   pinned version, into `.tools/ds` with the Node.js of the machine), which the `/ds` front
//!   end's test runs.
//! - `cargo-fuzz` (crates.io), only for `cargo xtask fuzz`.
//! - `cargo-machete` (crates.io), only for `cargo xtask lint`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Once;

use crate::{Result, root, run};

/// Whether `program` can be started from the PATH.
pub(crate) fn on_path(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Everything a build of the workspace needs.
pub(crate) fn build_tools() -> Result {
    if !on_path("protoc") {
        apt_install("protobuf-compiler")?;
    }
    Ok(())
}

/// The etcd server binary.
pub(crate) fn etcd() -> Result<PathBuf> {
    if !on_path("etcd") {
        apt_install("etcd-server")?;
    }
    Ok(PathBuf::from("etcd"))
}

/// The moto S3 server: the one on the PATH, else one installed into `.tools/venv`.
pub(crate) fn moto_server() -> Result<PathBuf> {
    if Command::new("moto_server")
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        return Ok(PathBuf::from("moto_server"));
    }
    let venv = root().join(".tools").join("venv");
    let installed = venv.join("bin").join("moto_server");
    if installed.exists() {
        return Ok(installed);
    }
    let mut create = Command::new("python3");
    create.args(["-m", "venv"]).arg(&venv);
    run(create)?;
    let mut pip = Command::new(venv.join("bin").join("pip"));
    pip.args(["install", "--quiet", "moto[server]"]);
    run(pip)?;
    Ok(installed)
}

/// Headless Chromium (Debian `chromium`), for the browser test.
pub(crate) fn chromium() -> Result<PathBuf> {
    if !on_path("chromium") {
        apt_install("chromium")?;
    }
    Ok(PathBuf::from("chromium"))
}

/// kcat (Debian `kcat`, librdkafka inside), the Kafka client of the Kafka front end's tests.
pub(crate) fn kcat() -> Result<PathBuf> {
    if !on_path("kcat") {
        apt_install("kcat")?;
    }
    Ok(PathBuf::from("kcat"))
}

/// ChromeDriver (Debian `chromium-driver`), which drives Chromium for the dashboard test.
pub(crate) fn chromedriver() -> Result<PathBuf> {
    if !on_path("chromedriver") {
        apt_install("chromium-driver")?;
    }
    Ok(PathBuf::from("chromedriver"))
}

/// The Python of `.tools/venv` with the client libraries the tests drive, installed when one
/// does not import.
pub(crate) fn python_clients() -> Result<PathBuf> {
    let venv = root().join(".tools").join("venv");
    let python = venv.join("bin").join("python");
    if !python.exists() {
        let mut create = Command::new("python3");
        create.args(["-m", "venv"]).arg(&venv);
        run(create)?;
    }
    let imports = Command::new(&python)
        .args([
            "-c",
            "import pyarrow.flight, openapi_spec_validator, confluent_kafka, kafka",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !imports {
        let mut pip = Command::new(venv.join("bin").join("pip"));
        pip.args([
            "install",
            "--quiet",
            "pyarrow",
            "openapi-spec-validator",
            "confluent-kafka",
            "kafka-python",
        ]);
        run(pip)?;
    }
    Ok(python)
}

/// The version of the Durable Streams conformance suite the tests run.
const DS_SUITE_VERSION: &str = "0.3.6";

/// The folder holding the Durable Streams conformance suite (its `node_modules`), installed
/// with npm when the pinned version is not there.
pub(crate) fn ds_suite() -> Result<PathBuf> {
    let dir = root().join(".tools").join("ds");
    let package = dir
        .join("node_modules")
        .join("@durable-streams")
        .join("server-conformance-tests")
        .join("package.json");
    let installed = std::fs::read_to_string(&package)
        .is_ok_and(|p| p.contains(&format!("\"version\": \"{DS_SUITE_VERSION}\"")));
    if installed {
        return Ok(dir);
    }
    if !on_path("npm") {
        return Err("npm is not on the PATH: install Node.js (Debian `nodejs`, `npm`)".into());
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut npm = Command::new("npm");
    npm.current_dir(&dir).args([
        "install",
        "--no-audit",
        "--no-fund",
        "--silent",
        &format!("@durable-streams/server-conformance-tests@{DS_SUITE_VERSION}"),
    ]);
    run(npm)?;
    Ok(dir)
}

pub(crate) fn has_nextest() -> bool {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["nextest", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn cargo_fuzz() -> Result {
    cargo_subcommand("fuzz", "cargo-fuzz")
}

/// `cargo-machete` (crates.io), for `cargo xtask lint`: dependencies no source file uses. Run as its
/// own binary: started through a toolchain's `cargo machete` it takes `machete` for a path.
pub(crate) fn cargo_machete() -> Result<PathBuf> {
    let binary = PathBuf::from("cargo-machete");
    if on_path("cargo-machete") {
        return Ok(binary);
    }
    let mut install = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    install.args(["install", "--locked", "cargo-machete"]);
    run(install)?;
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    Ok(match home {
        Some(home) if !on_path("cargo-machete") => home.join("bin").join("cargo-machete"),
        _ => binary,
    })
}

/// Installs the crate that provides `cargo {subcommand}` unless it answers `--version`.
fn cargo_subcommand(subcommand: &str, package: &str) -> Result {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let present = Command::new(&cargo)
        .args([subcommand, "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if present {
        return Ok(());
    }
    let mut install = Command::new(&cargo);
    install.args(["install", "--locked", package]);
    run(install)
}

/// Installs a Debian package, refreshing the package lists once per run.
fn apt_install(package: &str) -> Result {
    static UPDATE: Once = Once::new();
    let sudo = !is_root();
    let apt = |args: &[&str]| {
        let mut command = if sudo {
            let mut c = Command::new("sudo");
            c.arg("apt-get");
            c
        } else {
            Command::new("apt-get")
        };
        command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        command
    };
    let mut updated = Ok(());
    UPDATE.call_once(|| updated = run(apt(&["update", "-q"])));
    updated.map_err(|e| format!("{e}; install {package} by hand"))?;
    run(apt(&["install", "-y", "-q", package]))
        .map_err(|e| format!("{e}; install the Debian package {package} by hand"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
