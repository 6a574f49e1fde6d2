//! `[kafka]`: the Kafka front end (docs/kafka.md): where it listens and its limits.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The port the Kafka front end listens on by default (Kafka's).
pub const DEFAULT_KAFKA_PORT: u16 = 9092;

/// The Kafka front end. Durations are whole milliseconds in files (the `_ms` keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaSettings {
    /// Address the Kafka protocol listens on, or `none` to turn it off. Default
    /// `127.0.0.1:9092`.
    #[serde(with = "super::listen")]
    pub listen: Option<SocketAddr>,
    /// `host:port` this broker names in Metadata (`advertise`). Default: the bound address.
    pub advertise: Option<String>,
    /// The largest request taken (`max_request_bytes`); a larger declared size closes the
    /// connection before its body is read. Default 100 MiB (Kafka's
    /// `socket.request.max.bytes`).
    pub max_request_bytes: usize,
    /// What the compressed batches of one Produce may inflate to, in all
    /// (`max_decompressed_bytes`). Default 64 MiB.
    pub max_decompressed_bytes: usize,
    /// Requests read from one connection and not answered yet, at most
    /// (`max_inflight_requests`); reading stops until the oldest is answered. Default 16.
    pub max_inflight_requests: usize,
    /// Kafka connections open at once (`max_connections`); one more is closed at accept.
    /// Default 10 000.
    pub max_connections: usize,
    /// A connection with no request for this long is closed (`idle_timeout_ms`). Default
    /// 10 minutes (Kafka's `connections.max.idle.ms`).
    #[serde(rename = "idle_timeout_ms", with = "mink_runtime::duration_ms")]
    pub idle_timeout: Duration,
    /// Whether a produce to (or a Metadata request with auto-creation for) a topic that does
    /// not exist creates it with the Kafka schema (`auto_create_topics`, Kafka's
    /// `auto.create.topics.enable`). Default off.
    pub auto_create_topics: bool,
    /// Partitions (buckets) of a topic created without a count: CreateTopics with -1, or
    /// auto-created (`default_partitions`). Default 1.
    pub default_partitions: u32,
    /// How long a consumer group that was empty waits for more members before its first
    /// rebalance completes (`group_initial_rebalance_delay_ms`). Default 3 s (Kafka's
    /// `group.initial.rebalance.delay.ms`).
    #[serde(
        rename = "group_initial_rebalance_delay_ms",
        with = "mink_runtime::duration_ms"
    )]
    pub group_initial_rebalance_delay: Duration,
    /// The shortest session timeout a consumer may ask for (`group_min_session_timeout_ms`).
    /// Default 6 s (Kafka's).
    #[serde(
        rename = "group_min_session_timeout_ms",
        with = "mink_runtime::duration_ms"
    )]
    pub group_min_session_timeout: Duration,
    /// The longest session timeout a consumer may ask for (`group_max_session_timeout_ms`).
    /// Default 30 minutes (Kafka's).
    #[serde(
        rename = "group_max_session_timeout_ms",
        with = "mink_runtime::duration_ms"
    )]
    pub group_max_session_timeout: Duration,
    /// Consumer groups with members on this node at once (`max_groups`). Default 10 000.
    pub max_groups: usize,
    /// Members of one consumer group (`max_group_members`). Default 1000.
    pub max_group_members: usize,
}

impl Default for KafkaSettings {
    fn default() -> Self {
        KafkaSettings {
            listen: Some(SocketAddr::from(([127, 0, 0, 1], DEFAULT_KAFKA_PORT))),
            advertise: None,
            max_request_bytes: 100 << 20,
            max_decompressed_bytes: 64 << 20,
            max_inflight_requests: 16,
            max_connections: 10_000,
            idle_timeout: Duration::from_secs(600),
            auto_create_topics: false,
            default_partitions: 1,
            group_initial_rebalance_delay: Duration::from_secs(3),
            group_min_session_timeout: Duration::from_secs(6),
            group_max_session_timeout: Duration::from_secs(1800),
            max_groups: 10_000,
            max_group_members: 1000,
        }
    }
}

impl KafkaSettings {
    /// Refuses zero limits and absurd ones, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        let counts = [
            ("kafka.max_request_bytes", self.max_request_bytes),
            ("kafka.max_decompressed_bytes", self.max_decompressed_bytes),
            ("kafka.max_inflight_requests", self.max_inflight_requests),
            ("kafka.max_connections", self.max_connections),
            ("kafka.default_partitions", self.default_partitions as usize),
            ("kafka.max_groups", self.max_groups),
            ("kafka.max_group_members", self.max_group_members),
        ];
        if let Some((name, _)) = counts.iter().find(|(_, n)| *n == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        if self.max_request_bytes > 1 << 30 {
            return Err("kafka.max_request_bytes must be at most 1 GiB".to_owned());
        }
        if self.max_inflight_requests > 1024 {
            return Err("kafka.max_inflight_requests must be at most 1024".to_owned());
        }
        if self.group_min_session_timeout > self.group_max_session_timeout {
            return Err(
                "kafka.group_min_session_timeout_ms must not be above kafka.group_max_session_timeout_ms"
                    .to_owned(),
            );
        }
        if self.idle_timeout.is_zero() {
            return Err("kafka.idle_timeout_ms must be at least 1".to_owned());
        }
        if let Some(advertise) = &self.advertise {
            let port = advertise.rsplit_once(':').and_then(|(h, p)| {
                (!h.is_empty()).then_some(())?;
                p.parse::<u16>().ok()
            });
            if port.is_none() {
                return Err(format!(
                    "kafka.advertise must be host:port, not {advertise:?}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::settings::Settings;

    #[test]
    fn kafka_listens_on_loopback_by_default_and_none_turns_it_off() {
        let defaults = Settings::default();
        assert_eq!(
            defaults.kafka.listen,
            Some("127.0.0.1:9092".parse().unwrap())
        );
        let off = Settings::from_toml("[kafka]\nlisten = \"none\"").unwrap();
        assert_eq!(off.kafka.listen, None);
        assert_eq!(Settings::from_toml(&off.to_toml()).unwrap(), off);
        let zero = Settings::from_toml("[kafka]\nmax_inflight_requests = 0").unwrap();
        let error = zero.validate().unwrap_err();
        assert!(error.contains("kafka.max_inflight_requests"), "{error}");
        let bad = Settings::from_toml("[kafka]\nadvertise = \"nohost\"").unwrap();
        assert!(bad.validate().unwrap_err().contains("kafka.advertise"));
    }
}
