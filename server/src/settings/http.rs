//! `[http]`: the HTTP front end's limits and timings, with its body limits (`[http.body]`,
//! `body_limits.rs`) and TLS (`[http.tls]`, `tls.rs`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::body_limits::BodyLimits;
use super::cors::CorsSettings;
use super::tls::TlsSettings;

/// The longest wait a setting of reads may name: a day.
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// HTTP limits and timings. Durations are whole milliseconds in files (the `_ms` keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSettings {
    /// Open connections the node keeps; one more is closed at accept. Default 10 000.
    pub max_connections: usize,
    /// Open connections from one client IP address; one more is closed at accept. Default 1000.
    pub max_connections_per_client: usize,
    /// A request head (request line and headers) must arrive within this long of its first byte,
    /// and a new connection's first request within this long of the accept; a TLS handshake too
    /// (`header_timeout_ms`). Default 10 s.
    #[serde(rename = "header_timeout_ms", with = "mink_runtime::duration_ms")]
    pub header_timeout: Duration,
    /// A connection with no request in flight is closed after this long, and so is a request
    /// whose body sends nothing for this long (`idle_timeout_ms`). Default 60 s.
    #[serde(rename = "idle_timeout_ms", with = "mink_runtime::duration_ms")]
    pub idle_timeout: Duration,
    /// A connection whose writes make no progress for this long (the client stopped reading) is
    /// closed, so it cannot hold a response in memory (`write_timeout_ms`). Default 30 s.
    #[serde(rename = "write_timeout_ms", with = "mink_runtime::duration_ms")]
    pub write_timeout: Duration,
    /// Bytes of request bodies the whole node holds at once (being read, or appended and not yet
    /// acknowledged); a request that would pass it gets 503 `overloaded`. Default 256 MiB.
    pub max_inflight_request_bytes: usize,
    /// `Host` names (without port) the API answers; others get 421 `misdirected_request`. Empty:
    /// any. `/healthz` answers any. Default empty.
    pub allowed_hosts: Vec<String>,
    /// The largest request body per format.
    pub body: BodyLimits,
    /// TLS for the API (absent: plain HTTP).
    pub tls: TlsSettings,
    /// Browsers on other origins.
    pub cors: CorsSettings,
    /// Default `max_bytes` of a read. Default 1 MiB.
    pub default_read_bytes: usize,
    /// Largest `max_bytes` a read may ask for. Default 16 MiB.
    pub max_read_bytes: usize,
    /// How long a long-poll read parks at the tail (`long_poll_timeout_ms`). Default 25 s.
    #[serde(rename = "long_poll_timeout_ms", with = "mink_runtime::duration_ms")]
    pub long_poll_timeout: Duration,
    /// Longest `timeout_ms` a long-poll may ask for (`max_long_poll_timeout_ms`). Default 60 s.
    #[serde(
        rename = "max_long_poll_timeout_ms",
        with = "mink_runtime::duration_ms"
    )]
    pub max_long_poll_timeout: Duration,
    /// An SSE response is closed after this long so proxies never see an idle connection; the
    /// client reconnects from its last event id (`sse_recycle_ms`). Default 55 s.
    #[serde(rename = "sse_recycle_ms", with = "mink_runtime::duration_ms")]
    pub sse_recycle: Duration,
    /// Interval of SSE heartbeat comments (`sse_heartbeat_ms`; at least 1 ms). Default 10 s.
    #[serde(rename = "sse_heartbeat_ms", with = "mink_runtime::duration_ms")]
    pub sse_heartbeat: Duration,
    /// Requests per second the node admits (token bucket); 0 = unlimited. Default 0.
    pub rate_limit_per_sec: u32,
    /// Burst of the rate limit. Default 1000.
    pub rate_limit_burst: u32,
    /// Seconds a client is told to wait (`Retry-After`) after a 503 or 429. Default 1. Whole
    /// seconds, not a duration, because that is what the header carries.
    pub retry_after_secs: u32,
    /// Longest wait for in-flight requests at shutdown (`shutdown_grace_ms`). Default 30 s.
    #[serde(rename = "shutdown_grace_ms", with = "mink_runtime::duration_ms")]
    pub shutdown_grace: Duration,
    /// Bytes one NDJSON or Arrow read response (or one SSE event) renders at most, plus one piece
    /// of rows: past it the response stops and `Mink-Next-Offset` says where to go on. Default
    /// 16 MiB.
    pub max_render_bytes: usize,
    /// Long-polls parked and SSE streams open at once on the node (429 above). Default 10 000.
    pub max_parked_reads: usize,
    /// Long-polls parked and SSE streams open at once for one client IP address (429 above).
    /// Default 1000.
    pub max_parked_reads_per_client: usize,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            max_connections: 10_000,
            max_connections_per_client: 1000,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
            max_inflight_request_bytes: 256 << 20,
            allowed_hosts: Vec::new(),
            body: BodyLimits::default(),
            tls: TlsSettings::default(),
            cors: CorsSettings::default(),
            default_read_bytes: 1 << 20,
            max_read_bytes: 16 << 20,
            long_poll_timeout: Duration::from_secs(25),
            max_long_poll_timeout: Duration::from_secs(60),
            sse_recycle: Duration::from_secs(55),
            sse_heartbeat: Duration::from_secs(10),
            rate_limit_per_sec: 0,
            rate_limit_burst: 1000,
            retry_after_secs: 1,
            shutdown_grace: Duration::from_secs(30),
            max_render_bytes: 16 << 20,
            max_parked_reads: 10_000,
            max_parked_reads_per_client: 1000,
        }
    }
}

impl HttpSettings {
    /// Refuses zero and inconsistent values, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_edge()?;
        self.cors.validate()?;
        let positive = [
            ("http.default_read_bytes", self.default_read_bytes),
            ("http.max_read_bytes", self.max_read_bytes),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        if self.default_read_bytes > self.max_read_bytes {
            return Err(format!(
                "http.default_read_bytes ({}) must not exceed http.max_read_bytes ({})",
                self.default_read_bytes, self.max_read_bytes
            ));
        }
        let durations = [
            ("http.long_poll_timeout_ms", self.long_poll_timeout),
            ("http.max_long_poll_timeout_ms", self.max_long_poll_timeout),
            ("http.sse_recycle_ms", self.sse_recycle),
            ("http.sse_heartbeat_ms", self.sse_heartbeat),
        ];
        if let Some((name, _)) = durations.iter().find(|(_, d)| d.is_zero()) {
            return Err(format!("{name} must be at least 1"));
        }
        if let Some((name, _)) = durations.iter().find(|(_, d)| *d > MAX_WAIT) {
            return Err(format!(
                "{name} must be at most {} (a day)",
                MAX_WAIT.as_millis()
            ));
        }
        if self.long_poll_timeout > self.max_long_poll_timeout {
            return Err(
                "http.long_poll_timeout_ms must not exceed http.max_long_poll_timeout_ms"
                    .to_owned(),
            );
        }
        if self.rate_limit_per_sec > 0 && self.rate_limit_burst == 0 {
            return Err(
                "http.rate_limit_burst must be at least 1 when a rate limit is set".to_owned(),
            );
        }
        if self.retry_after_secs == 0 {
            return Err("http.retry_after_secs must be at least 1".to_owned());
        }
        self.validate_reads()
    }

    /// The read bounds: the render bound and the parked-read limits.
    fn validate_reads(&self) -> Result<(), String> {
        let positive = [
            ("http.max_render_bytes", self.max_render_bytes),
            ("http.max_parked_reads", self.max_parked_reads),
            (
                "http.max_parked_reads_per_client",
                self.max_parked_reads_per_client,
            ),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        Ok(())
    }

    /// The serving loop's settings: connections, timeouts, the request budget, hosts, bodies
    /// and TLS.
    fn validate_edge(&self) -> Result<(), String> {
        let positive = [
            ("http.max_connections", self.max_connections),
            (
                "http.max_connections_per_client",
                self.max_connections_per_client,
            ),
            (
                "http.max_inflight_request_bytes",
                self.max_inflight_request_bytes,
            ),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        let timeouts = [
            ("http.header_timeout_ms", self.header_timeout),
            ("http.idle_timeout_ms", self.idle_timeout),
            ("http.write_timeout_ms", self.write_timeout),
        ];
        if let Some((name, _)) = timeouts.iter().find(|(_, d)| d.is_zero()) {
            return Err(format!("{name} must be at least 1"));
        }
        self.body.validate()?;
        if self.max_inflight_request_bytes < self.body.largest() {
            return Err(format!(
                "http.max_inflight_request_bytes ({}) must be at least the largest http.body limit ({}), or such a body could never be admitted",
                self.max_inflight_request_bytes,
                self.body.largest()
            ));
        }
        if let Some(host) = self
            .allowed_hosts
            .iter()
            .find(|h| h.is_empty() || h.contains(['/', ' ']))
        {
            return Err(format!(
                "http.allowed_hosts entry `{host}` must be a host name or address"
            ));
        }
        self.tls.validate()
    }

    /// The SSE heartbeat interval (at least 1 ms: a zero interval would spin).
    pub fn sse_heartbeat_interval(&self) -> Duration {
        self.sse_heartbeat.max(Duration::from_millis(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_bounds_of_zero_are_refused_naming_the_setting() {
        assert_eq!(HttpSettings::default().validate(), Ok(()));
        for name in [
            "max_render_bytes",
            "max_parked_reads",
            "max_parked_reads_per_client",
        ] {
            let s: HttpSettings = toml::from_str(&format!("{name} = 0")).unwrap();
            assert_eq!(s.validate(), Err(format!("http.{name} must be at least 1")));
        }
    }

    #[test]
    fn serving_loop_settings_refuse_zero_and_inconsistent_values() {
        assert_eq!(HttpSettings::default().validate(), Ok(()));
        type Tweak = fn(&mut HttpSettings);
        let cases: [(Tweak, &str); 9] = [
            (|s| s.max_connections = 0, "http.max_connections"),
            (
                |s| s.max_connections_per_client = 0,
                "http.max_connections_per_client",
            ),
            (
                |s| s.header_timeout = Duration::ZERO,
                "http.header_timeout_ms",
            ),
            (|s| s.idle_timeout = Duration::ZERO, "http.idle_timeout_ms"),
            (
                |s| s.write_timeout = Duration::ZERO,
                "http.write_timeout_ms",
            ),
            (|s| s.body.max_arrow_bytes = 0, "http.body.max_arrow_bytes"),
            (
                |s| s.max_inflight_request_bytes = 1 << 20,
                "http.max_inflight_request_bytes",
            ),
            (
                |s| s.allowed_hosts = vec![String::new()],
                "http.allowed_hosts",
            ),
            (
                |s| s.tls.cert_file = Some("cert.pem".into()),
                "http.tls.key_file",
            ),
        ];
        for (tweak, setting) in cases {
            let mut settings = HttpSettings::default();
            tweak(&mut settings);
            let error = settings.validate().unwrap_err();
            assert!(error.contains(setting), "{setting}: {error}");
        }
    }
}
