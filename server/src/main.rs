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
    /// Address of the HTTP API [default: 127.0.0.1:6465].
    #[arg(long, env = "MINK_LISTEN")]
    listen: Option<SocketAddr>,
    /// This node's id; names its WAL objects [default: mink-1].
    #[arg(long, env = "MINK_NODE_ID")]
    node_id: Option<String>,
    /// Folder of the embedded default's files [default: ./mink-data].
    #[arg(long, env = "MINK_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Log format: text or json [default: text]. The filter is RUST_LOG [default: info].
    #[arg(long, env = "MINK_LOG_FORMAT")]
    log_format: Option<LogFormat>,

    /// Object store backend [default: local].
    #[arg(long, env = "MINK_STORAGE", help_heading = "Object storage")]
    storage: Option<StorageBackend>,
    /// Folder of the local backend [default: {data_dir}/objects].
    #[arg(long, env = "MINK_OBJECTS_DIR", help_heading = "Object storage")]
    objects_dir: Option<PathBuf>,
    /// S3 endpoint URL of an S3-compatible server [default: none, AWS].
    #[arg(long, env = "MINK_S3_ENDPOINT", help_heading = "Object storage")]
    s3_endpoint: Option<String>,
    /// S3 bucket for WAL objects (and data, unless --s3-data-bucket) [required for s3].
    #[arg(long, env = "MINK_S3_BUCKET", help_heading = "Object storage")]
    s3_bucket: Option<String>,
    /// S3 bucket for committed (compacted) objects [default: the WAL bucket].
    #[arg(long, env = "MINK_S3_DATA_BUCKET", help_heading = "Object storage")]
    s3_data_bucket: Option<String>,
    /// S3 region [default: us-east-1].
    #[arg(long, env = "MINK_S3_REGION", help_heading = "Object storage")]
    s3_region: Option<String>,
    /// S3 access key id [default: the AWS credential chain].
    #[arg(long, env = "MINK_S3_ACCESS_KEY", help_heading = "Object storage")]
    s3_access_key: Option<String>,
    /// S3 secret access key [default: the AWS credential chain].
    #[arg(
        long,
        env = "MINK_S3_SECRET_KEY",
        hide_env_values = true,
        help_heading = "Object storage"
    )]
    s3_secret_key: Option<String>,
    /// Root key prefix inside the buckets [default: none].
    #[arg(long, env = "MINK_S3_PREFIX", help_heading = "Object storage")]
    s3_prefix: Option<String>,
    /// Allow plain-HTTP S3 endpoints (local servers) [default: false].
    #[arg(long, env = "MINK_S3_ALLOW_HTTP", help_heading = "Object storage")]
    s3_allow_http: Option<bool>,

    /// Metadata backend [default: redb].
    #[arg(long, env = "MINK_METADATA", help_heading = "Metadata")]
    metadata: Option<MetadataBackend>,
    /// The redb file [default: {data_dir}/meta.redb].
    #[arg(long, env = "MINK_REDB_PATH", help_heading = "Metadata")]
    redb_path: Option<PathBuf>,
    /// etcd endpoints, comma-separated (http://127.0.0.1:2379) [required for etcd].
    #[arg(
        long,
        env = "MINK_ETCD_ENDPOINTS",
        value_delimiter = ',',
        help_heading = "Metadata"
    )]
    etcd_endpoints: Option<Vec<String>>,
    /// Prefix of every etcd key Mink writes [default: mink/].
    #[arg(long, env = "MINK_ETCD_PREFIX", help_heading = "Metadata")]
    etcd_prefix: Option<String>,

    /// Largest request body in bytes; larger appends get 413 [default: 8388608].
    #[arg(long, env = "MINK_MAX_BODY_BYTES", help_heading = "HTTP")]
    max_body_bytes: Option<usize>,
    /// Default max_bytes of a read [default: 1048576].
    #[arg(long, env = "MINK_DEFAULT_READ_BYTES", help_heading = "HTTP")]
    default_read_bytes: Option<usize>,
    /// Largest max_bytes a read may ask for [default: 16777216].
    #[arg(long, env = "MINK_MAX_READ_BYTES", help_heading = "HTTP")]
    max_read_bytes: Option<usize>,
    /// Default long-poll timeout in ms [default: 25000].
    #[arg(long, env = "MINK_LONG_POLL_TIMEOUT_MS", help_heading = "HTTP")]
    long_poll_timeout_ms: Option<u64>,
    /// Longest timeout_ms a long-poll may ask for [default: 60000].
    #[arg(long, env = "MINK_MAX_LONG_POLL_TIMEOUT_MS", help_heading = "HTTP")]
    max_long_poll_timeout_ms: Option<u64>,
    /// SSE responses close after this many ms; clients reconnect [default: 55000].
    #[arg(long, env = "MINK_SSE_RECYCLE_MS", help_heading = "HTTP")]
    sse_recycle_ms: Option<u64>,
    /// Interval of SSE heartbeat comments in ms [default: 10000].
    #[arg(long, env = "MINK_SSE_HEARTBEAT_MS", help_heading = "HTTP")]
    sse_heartbeat_ms: Option<u64>,
    /// Requests per second admitted, 0 = unlimited [default: 0].
    #[arg(long, env = "MINK_RATE_LIMIT", help_heading = "HTTP")]
    rate_limit: Option<u32>,
    /// Burst of the rate limit [default: 1000].
    #[arg(long, env = "MINK_RATE_LIMIT_BURST", help_heading = "HTTP")]
    rate_limit_burst: Option<u32>,
    /// Retry-After seconds on 503 and 429 [default: 1].
    #[arg(long, env = "MINK_RETRY_AFTER_SECS", help_heading = "HTTP")]
    retry_after_secs: Option<u32>,
    /// Longest wait for in-flight requests at shutdown, ms [default: 30000].
    #[arg(long, env = "MINK_SHUTDOWN_GRACE_MS", help_heading = "HTTP")]
    shutdown_grace_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn set<T>(target: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *target = v;
    }
}

impl ServeArgs {
    fn settings(self) -> Result<Settings, String> {
        let mut s = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                Settings::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))?
            }
            None => Settings::default(),
        };
        set(&mut s.listen, self.listen);
        set(&mut s.node_id, self.node_id);
        set(&mut s.data_dir, self.data_dir);
        set(&mut s.storage.backend, self.storage);
        if self.objects_dir.is_some() {
            s.storage.local_dir = self.objects_dir;
        }
        let s3 = &mut s.storage.s3;
        if self.s3_endpoint.is_some() {
            s3.endpoint = self.s3_endpoint;
        }
        set(&mut s3.bucket, self.s3_bucket);
        if self.s3_data_bucket.is_some() {
            s.storage.data_bucket = self.s3_data_bucket;
        }
        set(&mut s3.region, self.s3_region);
        if self.s3_access_key.is_some() {
            s3.access_key = self.s3_access_key;
        }
        if self.s3_secret_key.is_some() {
            s3.secret_key = self.s3_secret_key;
        }
        set(&mut s3.prefix, self.s3_prefix);
        set(&mut s3.allow_http, self.s3_allow_http);
        set(&mut s.metadata.backend, self.metadata);
        if self.redb_path.is_some() {
            s.metadata.redb_path = self.redb_path;
        }
        set(&mut s.metadata.etcd_endpoints, self.etcd_endpoints);
        set(&mut s.metadata.etcd_prefix, self.etcd_prefix);
        let h = &mut s.http;
        set(&mut h.max_body_bytes, self.max_body_bytes);
        set(&mut h.default_read_bytes, self.default_read_bytes);
        set(&mut h.max_read_bytes, self.max_read_bytes);
        set(&mut h.long_poll_timeout_ms, self.long_poll_timeout_ms);
        set(
            &mut h.max_long_poll_timeout_ms,
            self.max_long_poll_timeout_ms,
        );
        set(&mut h.sse_recycle_ms, self.sse_recycle_ms);
        set(&mut h.sse_heartbeat_ms, self.sse_heartbeat_ms);
        set(&mut h.rate_limit_per_sec, self.rate_limit);
        set(&mut h.rate_limit_burst, self.rate_limit_burst);
        set(&mut h.retry_after_secs, self.retry_after_secs);
        set(&mut h.shutdown_grace_ms, self.shutdown_grace_ms);
        Ok(s)
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

async fn serve(args: ServeArgs) -> Result<(), String> {
    let log_format = args.log_format.unwrap_or(LogFormat::Text);
    init_logs(log_format);
    let settings = args.settings()?;
    let node = mink_server::NodeBuilder::from_settings(settings)
        .await
        .map_err(|e| e.to_string())?
        .start()
        .await
        .map_err(|e| e.to_string())?;
    shutdown_signal().await;
    Node::shutdown(node).await.map_err(|e| e.to_string())
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
                Ok(()) => ExitCode::SUCCESS,
                Err(message) => {
                    tracing::error!(%message, "mink stopped");
                    eprintln!("mink: {message}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
