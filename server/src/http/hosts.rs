//! The `Host` allowlist (`http.allowed_hosts`): a request naming a host the node does not serve
//! gets 421 `misdirected_request`.
//!
//! A page on another site that the browser reaches under a name of the attacker's that resolves
//! to this node (DNS rebinding) sends that name as `Host`; refusing names not on the list keeps
//! such pages out even where no token is configured. The port is not compared, names are
//! compared without case and without a trailing dot. `/healthz` answers any host, because
//! orchestrators probe it by address.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::header;

use super::gate::Check;
use crate::error::ApiError;

/// The hosts the node answers.
#[derive(Debug)]
pub(super) struct AllowedHosts(HashSet<String>);

impl AllowedHosts {
    /// The list of the settings; `None` when it is empty (any host).
    pub(super) fn new(hosts: &[String]) -> Option<Arc<Self>> {
        if hosts.is_empty() {
            return None;
        }
        Some(Arc::new(AllowedHosts(
            hosts.iter().map(|h| normalize(h)).collect(),
        )))
    }

    fn allows(&self, host: &str) -> bool {
        self.0.contains(&normalize(host))
    }
}

/// `host[:port]` without the port, brackets of an IPv6 address, case and trailing dot.
fn normalize(host: &str) -> String {
    let host = host.trim();
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None if host.matches(':').count() == 1 => host.split(':').next().unwrap_or(host),
        // No port, or a bare IPv6 address (several colons).
        None => host,
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// The allowlist as a gate (`gate.rs`): passes requests for a listed host, answers 421 to the
/// rest.
impl Check for Arc<AllowedHosts> {
    type Kept = ();

    fn check(&self, request: &mut Request) -> Result<(), ApiError> {
        // HTTP/2 carries the host in the URI (`:authority`), HTTP/1.1 in the header.
        let host = request.uri().authority().map(|a| a.as_str()).or_else(|| {
            request
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
        });
        let host = host.unwrap_or_default();
        if request.uri().path() == "/healthz" || self.allows(host) {
            return Ok(());
        }
        Err(ApiError::MisdirectedRequest {
            host: host.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_compare_without_port_case_brackets_or_trailing_dot() {
        let hosts = AllowedHosts::new(&[
            "Mink.Example.com".to_owned(),
            "127.0.0.1".to_owned(),
            "[::1]".to_owned(),
        ])
        .unwrap();
        for host in [
            "mink.example.com",
            "MINK.example.com:6465",
            "mink.example.com.",
            "127.0.0.1:80",
            "[::1]:6465",
            "::1",
        ] {
            assert!(hosts.allows(host), "{host} is listed");
        }
        for host in ["", "evil.example", "mink.example.com.evil", "127.0.0.2"] {
            assert!(!hosts.allows(host), "{host} is not listed");
        }
        assert!(AllowedHosts::new(&[]).is_none());
    }
}
