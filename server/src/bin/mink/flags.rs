//! The flags of `mink serve`: each sets the setting of the same name and nesting, and they lay
//! over the configuration file, which lays over the defaults.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use mink_server::Settings;
use mink_server::settings::{MetadataBackend, StorageBackend};
use serde::Serialize;

#[derive(Debug, Args)]
#[command(
    after_help = "Every flag also reads the environment variable shown. The engine's \
settings (WAL group commit and retries, compaction, back-pressure) live in the config file only: \
`mink default-config` prints the whole file with every default. Precedence: flags and environment \
over the file over the defaults."
)]
pub(crate) struct ServeArgs {
    /// TOML configuration file (see `mink default-config`); flags override it.
    #[arg(long, env = "MINK_CONFIG")]
    config: Option<PathBuf>,
    /// Log format: text or json [default: text]. The filter is RUST_LOG [default: info].
    #[arg(long, env = "MINK_LOG_FORMAT")]
    pub(crate) log_format: Option<LogFormat>,
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
    #[command(flatten)]
    flight: FlightFlags,
    #[command(flatten)]
    kafka: KafkaFlags,
    #[command(flatten)]
    auth: AuthFlags,
    #[command(flatten)]
    tablet: TabletFlags,
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

/// `[flight]`.
#[derive(Debug, Args, Serialize)]
#[command(next_help_heading = "Arrow Flight")]
struct FlightFlags {
    /// Address of the Arrow Flight service, or `none` to turn it off [default: 127.0.0.1:8815].
    #[arg(
        id = "flight_listen",
        long = "flight-listen",
        value_name = "ADDRESS|none",
        env = "MINK_FLIGHT_LISTEN",
        value_parser = listen_or_none
    )]
    listen: Option<String>,
}

/// `[kafka]`.
#[derive(Debug, Args, Serialize)]
#[command(next_help_heading = "Kafka")]
struct KafkaFlags {
    /// Address of the Kafka protocol, or `none` to turn it off [default: 127.0.0.1:9092].
    #[arg(
        id = "kafka_listen",
        long = "kafka-listen",
        value_name = "ADDRESS|none",
        env = "MINK_KAFKA_LISTEN",
        value_parser = listen_or_none
    )]
    listen: Option<String>,
    /// `host:port` this broker names to Kafka clients [default: the bound address].
    #[arg(
        id = "kafka_advertise",
        long = "kafka-advertise",
        env = "MINK_KAFKA_ADVERTISE"
    )]
    advertise: Option<String>,
}

fn listen_or_none(text: &str) -> Result<String, String> {
    mink_server::settings::listen::parse(text).map(|_| text.trim().to_owned())
}

/// `[http]`.
#[derive(Debug, Args, Serialize)]
#[command(next_help_heading = "HTTP")]
struct HttpFlags {
    #[command(flatten)]
    #[serde(flatten)]
    serving: ServingFlags,
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
    #[command(flatten)]
    #[serde(flatten)]
    reads: HttpReadFlags,
}

/// `[http]`: the bounds of reads.
#[derive(Debug, Args, Serialize)]
#[command(next_help_heading = "HTTP")]
struct HttpReadFlags {
    /// Bytes one NDJSON or Arrow read response or SSE event renders; past it the response stops
    /// and Mink-Next-Offset says where to go on [default: 16777216].
    #[arg(long, env = "MINK_MAX_RENDER_BYTES")]
    max_render_bytes: Option<usize>,
    /// Long-polls parked and SSE streams open on the node; more get 429 [default: 10000].
    #[arg(long, env = "MINK_MAX_PARKED_READS")]
    max_parked_reads: Option<usize>,
    /// Long-polls parked and SSE streams open for one client IP address; more get 429
    /// [default: 1000].
    #[arg(long, env = "MINK_MAX_PARKED_READS_PER_CLIENT")]
    max_parked_reads_per_client: Option<usize>,
}

/// `[auth]`. The one read-write token comes from `MINK_AUTH_TOKEN` only, never a flag, because
/// a flag's value shows in every process listing.
#[derive(Args, Serialize)]
#[command(next_help_heading = "Access control")]
struct AuthFlags {
    #[arg(skip = std::env::var("MINK_AUTH_TOKEN").ok().filter(|t| !t.is_empty()))]
    token: Option<String>,
    /// File of bearer tokens, one per line: `TOKEN [read|write] [table,...]`, `#` comments.
    /// Once a token is configured (this file, MINK_AUTH_TOKEN for one read-write token on every
    /// table, or [[auth.tokens]]), every route but /healthz needs one [default: none, open].
    #[arg(
        long = "auth-token-file",
        value_name = "FILE",
        env = "MINK_AUTH_TOKEN_FILE"
    )]
    token_file: Option<PathBuf>,
}

impl std::fmt::Debug for AuthFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthFlags")
            .field("token", &self.token.as_ref().map(|_| ".."))
            .field("token_file", &self.token_file)
            .finish()
    }
}

/// The serving loop's part of `[http]`: connections, timeouts, the request budget, hosts.
#[derive(Debug, Args, Serialize)]
#[command(next_help_heading = "HTTP")]
struct ServingFlags {
    /// Open connections the node keeps; more are closed at accept [default: 10000].
    #[arg(long, env = "MINK_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Open connections per client IP address [default: 1000].
    #[arg(long, env = "MINK_MAX_CONNECTIONS_PER_CLIENT")]
    max_connections_per_client: Option<usize>,
    /// A request head must arrive within this many ms [default: 10000].
    #[arg(long, env = "MINK_HEADER_TIMEOUT_MS")]
    header_timeout_ms: Option<u64>,
    /// Connections with no request in flight close after this many ms [default: 60000].
    #[arg(long, env = "MINK_IDLE_TIMEOUT_MS")]
    idle_timeout_ms: Option<u64>,
    /// Connections whose client reads nothing for this many ms close [default: 30000].
    #[arg(long, env = "MINK_WRITE_TIMEOUT_MS")]
    write_timeout_ms: Option<u64>,
    /// Request body bytes the node holds at once; more get 503 [default: 268435456].
    #[arg(long, env = "MINK_MAX_INFLIGHT_REQUEST_BYTES")]
    max_inflight_request_bytes: Option<usize>,
    /// Host names the API answers, comma-separated; others get 421 [default: any].
    #[arg(long, env = "MINK_ALLOWED_HOSTS", value_delimiter = ',')]
    allowed_hosts: Option<Vec<String>>,
    #[command(flatten)]
    body: BodyFlags,
    #[command(flatten)]
    tls: TlsFlags,
}

/// `[http.body]`.
#[derive(Debug, Args, Serialize)]
#[command(next_help_heading = "HTTP")]
struct BodyFlags {
    /// Largest append of mink batches in bytes; larger get 413 [default: 8388608].
    #[arg(long, env = "MINK_MAX_APPEND_BYTES")]
    max_append_bytes: Option<usize>,
    /// Largest append of an Arrow IPC stream in bytes [default: 8388608].
    #[arg(long, env = "MINK_MAX_ARROW_BYTES")]
    max_arrow_bytes: Option<usize>,
    /// Largest append of NDJSON rows in bytes [default: 8388608].
    #[arg(long, env = "MINK_MAX_NDJSON_BYTES")]
    max_ndjson_bytes: Option<usize>,
    /// Largest JSON body of a control route in bytes [default: 1048576].
    #[arg(long, env = "MINK_MAX_JSON_BYTES")]
    max_json_bytes: Option<usize>,
}

/// `[http.tls]`.
#[derive(Debug, Args, Serialize)]
#[command(next_help_heading = "HTTP")]
struct TlsFlags {
    /// PEM certificate chain: serve the API over TLS [default: none, plain HTTP].
    #[arg(
        long = "tls-cert-file",
        value_name = "TLS_CERT_FILE",
        env = "MINK_TLS_CERT_FILE"
    )]
    cert_file: Option<PathBuf>,
    /// PEM private key of the certificate [required with --tls-cert-file].
    #[arg(
        long = "tls-key-file",
        value_name = "TLS_KEY_FILE",
        env = "MINK_TLS_KEY_FILE"
    )]
    key_file: Option<PathBuf>,
}

/// `[tablet]`: the limits every tablet of the node enforces.
#[derive(Debug, Args, Serialize)]
#[command(next_help_heading = "Tablets")]
struct TabletFlags {
    /// Most rows in one appended batch; more is 400 limit_exceeded [default: 1048576].
    #[arg(long, env = "MINK_MAX_ROWS_PER_BATCH")]
    max_rows_per_batch: Option<u64>,
    /// Most rows in one append request [default: 1048576].
    #[arg(long, env = "MINK_MAX_ROWS_PER_REQUEST")]
    max_rows_per_request: Option<u64>,
    /// Most idempotent writers tracked per bucket; a new one beyond is 429 too_many_writers
    /// [default: 10000, at most 11684].
    #[arg(long, env = "MINK_MAX_WRITERS")]
    max_writers: Option<u64>,
    /// A writer idle this many ms is forgotten and frees its place [default: 604800000, 7 days].
    #[arg(long, env = "MINK_WRITER_TTL_MS")]
    writer_ttl_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

impl ServeArgs {
    /// The defaults, under the file's settings, under the flags and environment.
    pub(crate) fn settings(&self) -> Result<Settings, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cli, Command};
    use clap::Parser as _;

    fn serve(args: &[&str]) -> ServeArgs {
        let cli = Cli::try_parse_from(["mink", "serve"].iter().chain(args)).unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("`mink serve` parsed as another command");
        };
        *args
    }

    #[test]
    fn flags_lay_over_the_file_over_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mink.toml");
        std::fs::write(
            &file,
            "node_id = \"from-file\"\n[storage.s3]\nbucket = \"wal\"\nregion = \"eu-west-1\"\n\
             [http]\nrate_limit_per_sec = 5\n[http.body]\nmax_ndjson_bytes = 1024\n",
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
            "--max-render-bytes",
            "65536",
            "--max-parked-reads-per-client",
            "3",
            "--auth-token-file",
            "/etc/mink/tokens",
            "--max-arrow-bytes",
            "2048",
            "--allowed-hosts",
            "mink.example,localhost",
            "--tls-cert-file",
            "/etc/mink/cert.pem",
            "--tls-key-file",
            "/etc/mink/key.pem",
            "--max-writers",
            "99",
            "--writer-ttl-ms",
            "5000",
        ])
        .settings()
        .unwrap();
        let mut expected = Settings::from_toml(&std::fs::read_to_string(&file).unwrap()).unwrap();
        expected.storage.s3.bucket = "flag-wal".to_owned();
        expected.storage.s3.allow_http = true;
        expected.storage.local_dir = Some(PathBuf::from("/tmp/objects"));
        expected.http.rate_limit_per_sec = 7;
        expected.http.max_render_bytes = 65536;
        expected.http.max_parked_reads_per_client = 3;
        expected.auth.token_file = Some(PathBuf::from("/etc/mink/tokens"));
        expected.http.body.max_arrow_bytes = 2048;
        expected.http.allowed_hosts = vec!["mink.example".to_owned(), "localhost".to_owned()];
        expected.http.tls.cert_file = Some(PathBuf::from("/etc/mink/cert.pem"));
        expected.http.tls.key_file = Some(PathBuf::from("/etc/mink/key.pem"));
        expected.tablet.max_writers = 99;
        expected.tablet.writer_ttl = std::time::Duration::from_secs(5);
        expected.metadata.etcd_endpoints =
            vec!["http://a:2379".to_owned(), "http://b:2379".to_owned()];
        assert_eq!(settings, expected);
        assert_eq!(settings.node_id, "from-file");
        assert_eq!(settings.storage.s3.region, "eu-west-1");
        assert_eq!(settings.http.body.max_ndjson_bytes, 1024);
        assert_eq!(serve(&[]).settings().unwrap(), Settings::default());
    }

    #[test]
    fn kafka_listen_takes_an_address_or_none() {
        let off = serve(&["--kafka-listen", "none"]).settings().unwrap();
        assert_eq!(off.kafka.listen, None);
        let other = serve(&["--kafka-listen", "127.0.0.1:0", "--kafka-advertise", "h:1"])
            .settings()
            .unwrap();
        assert_eq!(other.kafka.listen, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(other.kafka.advertise.as_deref(), Some("h:1"));
    }

    #[test]
    fn flight_listen_takes_an_address_or_none() {
        let off = serve(&["--flight-listen", "none"]).settings().unwrap();
        assert_eq!(off.flight.listen, None);
        let other = serve(&["--flight-listen", "127.0.0.1:0"])
            .settings()
            .unwrap();
        assert_eq!(other.flight.listen, Some("127.0.0.1:0".parse().unwrap()));
        let cli = Cli::try_parse_from(["mink", "serve", "--flight-listen", "nowhere"]);
        assert!(cli.is_err());
    }
}
