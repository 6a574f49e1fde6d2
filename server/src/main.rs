//! The `mink` binary: parses configuration and runs a node.
//!
//! Settings come from, in increasing precedence: built-in defaults, the TOML file given with
//! `--config` (or `MINK_CONFIG`), then each flag or its environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use mink_server::settings::{MetadataBackend, StorageBackend};
use mink_server::{Node, Settings};
use serde::Serialize;
use tracing_subscriber::EnvFilter;

/// Mink: table logs on object storage, over HTTP.
#[derive(Debug, Parser)]
#[command(name = "mink", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a node. With no flags: objects under ./mink-data/objects, metadata in
    /// ./mink-data/meta.redb, HTTP on 127.0.0.1:6465.
    Serve(Box<ServeArgs>),
    /// Print the complete configuration file with every default.
    DefaultConfig,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Every flag also reads the environment variable shown. The engine's \
settings (WAL group commit and retries, compaction, back-pressure) live in the config file only: \
`mink default-config` prints the whole file with every default. Precedence: flags and environment \
over the file over the defaults."
)]
struct ServeArgs {
    /// TOML configuration file (see `mink default-config`); flags override it.
    #[arg(long, env = "MINK_CONFIG")]
    config: Option<PathBuf>,
    /// Log format: text or json [default: text]. The filter is RUST_LOG [default: info].
    #[arg(long, env = "MINK_LOG_FORMAT")]
    log_format: Option<LogFormat>,
    #[command(flatten)]
    settings: SettingsFlags,
}

/// The flags (or their environment variables) that set a setting. Each field is named and nested
/// as its setting is, so the flags given serialise to a TOML table laid over the file's (flags
/// not given are `None`, which TOML leaves out).
#[derive(Debug, Args, Serialize)]
struct SettingsFlags {
    /// Address of the HTTP API [default: 127.0.0.1:6465].
    #[arg(long, env = "MINK_LISTEN")]
    listen: Option<SocketAddr>,
    /// This node's id; names its WAL objects [default: mink-1].
    #[arg(long, env = "MINK_NODE_ID")]
    node_id: Option<String>,
    /// Folder of the embedded default's files [default: ./mink-data].
    #[arg(long, env = "MINK_DATA_DIR")]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    storage: StorageFlags,
    #[command(flatten)]
    metadata: MetadataFlags,
    #[command(flatten)]
    http: HttpFlags,
}

/// `[storage]`.
#[derive(Debug, Args, Serialize)]
#[command(next_help_heading = "Object storage")]
struct StorageFlags {
    /// Object store backend [default: local].
    #[arg(
        id = "storage",
        long = "storage",
        value_name = "STORAGE",
        env = "MINK_STORAGE"
    )]
    backend: Option<StorageBackend>,
    /// Folder of the local backend [default: {data_dir}/objects].
    #[arg(
        long = "objects-dir",
        value_name = "OBJECTS_DIR",
        env = "MINK_OBJECTS_DIR"
    )]
    local_dir: Option<PathBuf>,
    /// S3 bucket for committed (compacted) objects [default: the WAL bucket].
    #[arg(
        long = "s3-data-bucket",
        value_name = "S3_DATA_BUCKET",
        env = "MINK_S3_DATA_BUCKET"
    )]
    data_bucket: Option<String>,
    #[command(flatten)]
    s3: S3Flags,
}

/// `[storage.s3]`.
#[derive(Debug, Args, Serialize)]
#[command(next_help_heading = "Object storage")]
struct S3Flags {
    /// S3 endpoint URL of an S3-compatible server [default: none, AWS].
    #[arg(
        long = "s3-endpoint",
        value_name = "S3_ENDPOINT",
        env = "MINK_S3_ENDPOINT"
    )]
    endpoint: Option<String>,
    /// S3 bucket for WAL objects (and data, unless --s3-data-bucket) [required for s3].
    #[arg(long = "s3-bucket", value_name = "S3_BUCKET", env = "MINK_S3_BUCKET")]
    bucket: Option<String>,
    /// S3 region [default: us-east-1].
    #[arg(long = "s3-region", value_name = "S3_REGION", env = "MINK_S3_REGION")]
    region: Option<String>,
    /// S3 access key id [default: the AWS credential chain].
    #[arg(
        long = "s3-access-key",
        value_name = "S3_ACCESS_KEY",
        env = "MINK_S3_ACCESS_KEY"
    )]
    access_key: Option<String>,
    /// S3 secret access key [default: the AWS credential chain].
    #[arg(
        long = "s3-secret-key",
        value_name = "S3_SECRET_KEY",
        env = "MINK_S3_SECRET_KEY",
        hide_env_values = true
    )]
    secret_key: Option<String>,
    /// Root key prefix inside the buckets [default: none].
    #[arg(long = "s3-prefix", value_name = "S3_PREFIX", env = "MINK_S3_PREFIX")]
    prefix: Option<String>,
    /// Allow plain-HTTP S3 endpoints (local servers) [default: false].
    #[arg(
        long = "s3-allow-http",
        value_name = "S3_ALLOW_HTTP",
        env = "MINK_S3_ALLOW_HTTP"
    )]
    allow_http: Option<bool>,
}

/// `[metadata]`.
#[derive(Debug, Args, Serialize)]
#[command(next_help_heading = "Metadata")]
struct MetadataFlags {
    /// Metadata backend [default: redb].
    #[arg(
        id = "metadata",
        long = "metadata",
        value_name = "METADATA",
        env = "MINK_METADATA"
    )]
    backend: Option<MetadataBackend>,
    /// The redb file [default: {data_dir}/meta.redb].
    #[arg(long, env = "MINK_REDB_PATH")]
    redb_path: Option<PathBuf>,
    /// etcd endpoints, comma-separated (http://127.0.0.1:2379) [required for etcd].
    #[arg(long, env = "MINK_ETCD_ENDPOINTS", value_delimiter = ',')]
    etcd_endpoints: Option<Vec<String>>,
    /// Prefix of every etcd key Mink writes [default: mink/].
    #[arg(long, env = "MINK_ETCD_PREFIX")]
    etcd_prefix: Option<String>,
}

/// `[http]`.
#[derive(Debug, Args, Serialize)]
#[command(next_help_heading = "HTTP")]
struct HttpFlags {
    /// Largest request body in bytes; larger appends get 413 [default: 8388608].
    #[arg(long, env = "MINK_MAX_BODY_BYTES")]
    max_body_bytes: Option<usize>,
    /// Default max_bytes of a read [default: 1048576].
    #[arg(long, env = "MINK_DEFAULT_READ_BYTES")]
    default_read_bytes: Option<usize>,
    /// Largest max_bytes a read may ask for [default: 16777216].
    #[arg(long, env = "MINK_MAX_READ_BYTES")]
    max_read_bytes: Option<usize>,
    /// Default long-poll timeout in ms [default: 25000].
    #[arg(long, env = "MINK_LONG_POLL_TIMEOUT_MS")]
    long_poll_timeout_ms: Option<u64>,
    /// Longest timeout_ms a long-poll may ask for [default: 60000].
    #[arg(long, env = "MINK_MAX_LONG_POLL_TIMEOUT_MS")]
    max_long_poll_timeout_ms: Option<u64>,
    /// SSE responses close after this many ms; clients reconnect [default: 55000].
    #[arg(long, env = "MINK_SSE_RECYCLE_MS")]
    sse_recycle_ms: Option<u64>,
    /// Interval of SSE heartbeat comments in ms [default: 10000].
    #[arg(long, env = "MINK_SSE_HEARTBEAT_MS")]
    sse_heartbeat_ms: Option<u64>,
    /// Requests per second admitted, 0 = unlimited [default: 0].
    #[arg(
        long = "rate-limit",
        value_name = "RATE_LIMIT",
        env = "MINK_RATE_LIMIT"
    )]
    rate_limit_per_sec: Option<u32>,
    /// Burst of the rate limit [default: 1000].
    #[arg(long, env = "MINK_RATE_LIMIT_BURST")]
    rate_limit_burst: Option<u32>,
    /// Retry-After seconds on 503 and 429 [default: 1].
    #[arg(long, env = "MINK_RETRY_AFTER_SECS")]
    retry_after_secs: Option<u32>,
    /// Longest wait for in-flight requests at shutdown, ms [default: 30000].
    #[arg(long, env = "MINK_SHUTDOWN_GRACE_MS")]
    shutdown_grace_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

impl ServeArgs {
    /// The defaults, under the file's settings, under the flags and environment.
    fn settings(&self) -> Result<Settings, String> {
        let file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                Settings::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))?
            }
            None => Settings::default(),
        };
        let flags = toml::Table::try_from(&self.settings).map_err(|e| format!("flags: {e}"))?;
        let mut layered = toml::Table::try_from(&file).map_err(|e| format!("settings: {e}"))?;
        lay_over(&mut layered, flags);
        layered.try_into().map_err(|e| format!("flags: {e}"))
    }
}

/// Lays `over` onto `under`: tables merge key by key, any other value replaces the one below.
fn lay_over(under: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (under.get_mut(&key), value) {
            (Some(toml::Value::Table(below)), toml::Value::Table(above)) => lay_over(below, above),
            (_, value) => {
                under.insert(key, value);
            }
        }
    }
}

fn init_logs(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("Ctrl-C received"),
        _ = term => tracing::info!("SIGTERM received"),
    }
}

/// How a node that started stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    /// Asked to (SIGTERM, Ctrl-C), and shut down cleanly.
    Asked,
    /// Its WAL failed for good: it exits for a supervisor to restart it.
    WalFailed,
}

async fn serve(args: ServeArgs) -> Result<Stopped, String> {
    let log_format = args.log_format.unwrap_or(LogFormat::Text);
    init_logs(log_format);
    let settings = args.settings()?;
    let node = mink_server::NodeBuilder::from_settings(settings)
        .await
        .map_err(|e| e.to_string())?
        .start()
        .await
        .map_err(|e| e.to_string())?;
    let failed = node.failed();
    tokio::select! {
        () = shutdown_signal() => {
            Node::shutdown(node).await.map_err(|e| e.to_string())?;
            Ok(Stopped::Asked)
        }
        reason = failed => {
            // Not reopened in place: the restart's recovery replays the WAL objects that landed.
            // Until then /healthz answers 503 with the reason, so the supervisor sees why.
            let delay = node.settings().node.exit_delay_on_wal_failure;
            tracing::error!(
                %reason,
                exit_in_ms = delay.as_millis() as u64,
                status = mink_server::node::EXIT_WAL_FAILED,
                "the WAL failed for good; appends are refused and the node exits to be restarted"
            );
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = shutdown_signal() => {}
            }
            node.abort();
            Ok(Stopped::WalFailed)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::DefaultConfig => {
            #[expect(clippy::print_stdout, reason = "the configuration is the output")]
            {
                print!("{}", Settings::default().to_toml());
            }
            ExitCode::SUCCESS
        }
        Command::Serve(args) => {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("mink: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(serve(*args)) {
                Ok(Stopped::Asked) => ExitCode::SUCCESS,
                Ok(Stopped::WalFailed) => ExitCode::from(mink_server::node::EXIT_WAL_FAILED),
                Err(message) => {
                    tracing::error!(%message, "mink stopped");
                    eprintln!("mink: {message}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(args: &[&str]) -> ServeArgs {
        let cli = Cli::try_parse_from(["mink", "serve"].iter().chain(args)).unwrap();
        match cli.command {
            Command::Serve(args) => *args,
            Command::DefaultConfig => unreachable!("parsed serve"),
        }
    }

    #[test]
    fn flags_lay_over_the_file_over_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mink.toml");
        std::fs::write(
            &file,
            "node_id = \"from-file\"\n[storage.s3]\nbucket = \"wal\"\nregion = \"eu-west-1\"\n\
             [http]\nrate_limit_per_sec = 5\nmax_body_bytes = 1024\n",
        )
        .unwrap();
        let config = file.to_str().unwrap();
        let settings = serve(&[
            "--config",
            config,
            "--s3-bucket",
            "flag-wal",
            "--objects-dir",
            "/tmp/objects",
            "--rate-limit",
            "7",
            "--etcd-endpoints",
            "http://a:2379,http://b:2379",
            "--s3-allow-http",
            "true",
        ])
        .settings()
        .unwrap();
        let mut expected = Settings::from_toml(&std::fs::read_to_string(&file).unwrap()).unwrap();
        expected.storage.s3.bucket = "flag-wal".to_owned();
        expected.storage.s3.allow_http = true;
        expected.storage.local_dir = Some(PathBuf::from("/tmp/objects"));
        expected.http.rate_limit_per_sec = 7;
        expected.metadata.etcd_endpoints =
            vec!["http://a:2379".to_owned(), "http://b:2379".to_owned()];
        assert_eq!(settings, expected);
        assert_eq!(settings.node_id, "from-file");
        assert_eq!(settings.storage.s3.region, "eu-west-1");
        assert_eq!(settings.http.max_body_bytes, 1024);
        assert_eq!(serve(&[]).settings().unwrap(), Settings::default());
    }
}
