//! `[cluster]`: the node's life in a cluster (docs/cluster.md): its lease, and the address the
//! other nodes send clients to.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Cluster membership. Durations are whole milliseconds in files (the `_ms` keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSettings {
    /// The TTL of the node's lease (`lease_ttl_ms`): a node that stops renewing it (a crash, a
    /// pause, a partition) counts as dead this long after its last renewal. etcd grants whole
    /// seconds, so it is rounded up. Default 5 s.
    #[serde(rename = "lease_ttl_ms", with = "mink_runtime::duration_ms")]
    pub lease_ttl: Duration,
    /// Taken off every lease deadline (`lease_margin_ms`): the node acknowledges an append only if
    /// its WAL PUT succeeded before its last answered renewal's send time + TTL - this margin.
    /// At least a tenth of the TTL. Default 500 ms.
    #[serde(rename = "lease_margin_ms", with = "mink_runtime::duration_ms")]
    pub lease_margin: Duration,
    /// The HTTP base URL other nodes redirect clients to (`http://10.0.0.5:6465`). Default: the
    /// listen address, with `https` when TLS is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertise_http: Option<String>,
    /// The Arrow Flight URL FlightInfo endpoints name for this node's buckets
    /// (`grpc://10.0.0.5:8815`). Default: the Flight listen address, with `grpc+tls` when TLS is
    /// on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertise_flight: Option<String>,
    /// Buckets the leader moves per pass (about every two seconds) to balance the nodes when one
    /// joins; a dead or draining node's buckets all move at once. 0 turns balancing off.
    /// Default 16.
    pub max_concurrent_moves: usize,
    /// How long a graceful shutdown waits for the other nodes to take this node's buckets
    /// (`drain_timeout_ms`) before it closes what it still holds; those then fail over like a
    /// crash's, with nothing acknowledged lost. Default 20 s.
    #[serde(rename = "drain_timeout_ms", with = "mink_runtime::duration_ms")]
    pub drain_timeout: Duration,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            lease_ttl: Duration::from_secs(5),
            lease_margin: Duration::from_millis(500),
            advertise_http: None,
            advertise_flight: None,
            max_concurrent_moves: 16,
            drain_timeout: Duration::from_secs(20),
        }
    }
}

/// The longest lease accepted: a dead node's buckets wait this long for a new owner.
const MAX_LEASE_TTL: Duration = Duration::from_secs(300);
/// The shortest: etcd's own minimum is about 1.5 s, and renewals must fit between.
const MIN_LEASE_TTL: Duration = Duration::from_secs(2);

impl ClusterSettings {
    /// Refuses a TTL outside 2 s to 300 s, a margin under a tenth of the TTL or not shorter than
    /// it, and an advertised URL that is not `http://` or `https://`, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        if !(MIN_LEASE_TTL..=MAX_LEASE_TTL).contains(&self.lease_ttl) {
            return Err(format!(
                "cluster.lease_ttl_ms must be {} to {}",
                MIN_LEASE_TTL.as_millis(),
                MAX_LEASE_TTL.as_millis()
            ));
        }
        if self.lease_margin < self.lease_ttl / 10 || self.lease_margin >= self.lease_ttl / 2 {
            return Err(format!(
                "cluster.lease_margin_ms must be at least a tenth and less than half of cluster.lease_ttl_ms ({} to {})",
                (self.lease_ttl / 10).as_millis(),
                (self.lease_ttl / 2).as_millis().saturating_sub(1)
            ));
        }
        if let Some(url) = &self.advertise_http {
            let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
            if !scheme_ok || url.parse::<axum::http::Uri>().is_err() {
                return Err(format!(
                    "cluster.advertise_http must be an http:// or https:// URL, not {url:?}"
                ));
            }
        }
        if let Some(url) = &self.advertise_flight {
            let scheme_ok = url.starts_with("grpc://")
                || url.starts_with("grpc+tcp://")
                || url.starts_with("grpc+tls://");
            if !scheme_ok || url.parse::<axum::http::Uri>().is_err() {
                return Err(format!(
                    "cluster.advertise_flight must be a grpc://, grpc+tcp:// or grpc+tls:// URL, not {url:?}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Settings;

    #[test]
    fn the_section_sets_the_lease_and_refuses_bad_values() {
        let s = Settings::from_toml(
            "[cluster]\nlease_ttl_ms = 3000\nlease_margin_ms = 400\nadvertise_http = \"http://10.0.0.5:6465\"\nmax_concurrent_moves = 4\ndrain_timeout_ms = 7000",
        )
        .unwrap();
        assert_eq!(s.cluster.lease_ttl, Duration::from_secs(3));
        assert_eq!(s.cluster.lease_margin, Duration::from_millis(400));
        assert_eq!(s.cluster.max_concurrent_moves, 4);
        assert_eq!(s.cluster.drain_timeout, Duration::from_secs(7));
        assert_eq!(s.validate(), Ok(()));
        for (text, setting) in [
            ("lease_ttl_ms = 500", "cluster.lease_ttl_ms"),
            ("lease_ttl_ms = 3600000", "cluster.lease_ttl_ms"),
            ("lease_margin_ms = 10", "cluster.lease_margin_ms"),
            ("lease_margin_ms = 4000", "cluster.lease_margin_ms"),
            (
                "advertise_http = \"10.0.0.5:6465\"",
                "cluster.advertise_http",
            ),
        ] {
            let s = Settings::from_toml(&format!("[cluster]\n{text}")).unwrap();
            let refused = s.validate().unwrap_err();
            assert!(refused.contains(setting), "{text}: {refused}");
        }
        assert!(Settings::from_toml("[cluster]\nlease_ttl = 5").is_err());
    }
}
