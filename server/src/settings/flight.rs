//! `[flight]`: the Arrow Flight front end (docs/flight.md): where it listens and its limits.
//! TLS is the HTTP API's (`[http.tls]`): one certificate for the node.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The port the Flight front end listens on by default (Arrow Flight's customary port).
pub const DEFAULT_FLIGHT_PORT: u16 = 8815;

/// The Flight front end. Durations are whole milliseconds in files (the `_ms` keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlightSettings {
    /// Address the Flight service listens on, or `none` to turn it off. Default
    /// `127.0.0.1:8815`.
    #[serde(with = "super::listen")]
    pub listen: Option<SocketAddr>,
    /// The largest gRPC message taken or sent (`max_message_bytes`): one FlightData, a record
    /// batch with its metadata. Default 16 MiB.
    pub max_message_bytes: usize,
    /// Record batches of one DoPut stream that arrive while its previous append is in flight
    /// and are appended together next, at most (`max_batches_per_append`); more wait for the
    /// append before them. Also bounded by the tablet's request limits. Default 64.
    pub max_batches_per_append: usize,
    /// Bytes of the batches of one such grouped append, at most (`max_append_bytes`); a single
    /// larger batch goes alone. An append is one record of the WAL and one block of the object
    /// that holds it, and a read inside a block decodes all of it, so large groups make reads
    /// slower. Default 8 MiB (as `http.body.max_append_bytes`).
    pub max_append_bytes: usize,
    /// Appends of one DoPut stream in flight at once (`max_appends_in_flight`), each started once
    /// the one before it has its place in the log, so that their WAL PUTs overlap. 1 waits for
    /// each append to be durable before the next. Default 4.
    pub max_appends_in_flight: usize,
    /// Live DoGet streams open on the node at once (`max_live_streams`); one more is refused
    /// with RESOURCE_EXHAUSTED. Default 10 000.
    pub max_live_streams: usize,
    /// How long a live DoGet at the tail waits before it sends a heartbeat, a message with only
    /// `app_metadata` carrying the high watermark (`heartbeat_interval_ms`). Default 5 s.
    #[serde(rename = "heartbeat_interval_ms", with = "mink_runtime::duration_ms")]
    pub heartbeat_interval: Duration,
    /// Stored bytes a DoGet reads from the log at a time (`read_bytes`). Default 16 MiB (as
    /// the largest HTTP read).
    pub read_bytes: usize,
}

impl Default for FlightSettings {
    fn default() -> Self {
        FlightSettings {
            listen: Some(SocketAddr::from(([127, 0, 0, 1], DEFAULT_FLIGHT_PORT))),
            max_message_bytes: 16 << 20,
            max_batches_per_append: 64,
            max_append_bytes: 8 << 20,
            max_appends_in_flight: 4,
            max_live_streams: 10_000,
            heartbeat_interval: Duration::from_secs(5),
            read_bytes: 16 << 20,
        }
    }
}

impl FlightSettings {
    /// Refuses zero limits and absurd ones, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        let counts = [
            ("flight.max_message_bytes", self.max_message_bytes),
            ("flight.max_batches_per_append", self.max_batches_per_append),
            ("flight.max_append_bytes", self.max_append_bytes),
            ("flight.max_appends_in_flight", self.max_appends_in_flight),
            ("flight.max_live_streams", self.max_live_streams),
            ("flight.read_bytes", self.read_bytes),
        ];
        if let Some((name, _)) = counts.iter().find(|(_, n)| *n == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        if self.max_message_bytes > 1 << 30 {
            return Err("flight.max_message_bytes must be at most 1 GiB".to_owned());
        }
        if self.max_appends_in_flight > 64 {
            return Err("flight.max_appends_in_flight must be at most 64".to_owned());
        }
        if self.read_bytes > 256 << 20 {
            return Err("flight.read_bytes must be at most 256 MiB".to_owned());
        }
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval > Duration::from_secs(600) {
            return Err("flight.heartbeat_interval_ms must be 1 to 600000".to_owned());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::settings::Settings;

    #[test]
    fn flight_listens_on_loopback_by_default_and_none_turns_it_off() {
        let defaults = Settings::default();
        assert_eq!(
            defaults.flight.listen,
            Some("127.0.0.1:8815".parse().unwrap())
        );
        let off = Settings::from_toml("[flight]\nlisten = \"none\"").unwrap();
        assert_eq!(off.flight.listen, None);
        assert_eq!(Settings::from_toml(&off.to_toml()).unwrap(), off);
        let other = Settings::from_toml("[flight]\nlisten = \"0.0.0.0:9815\"").unwrap();
        assert_eq!(other.flight.listen.unwrap().port(), 9815);
        let error = Settings::from_toml("[flight]\nlisten = \"eight\"").unwrap_err();
        assert!(error.to_string().contains("neither an address"), "{error}");
        let zero = Settings::from_toml("[flight]\nmax_live_streams = 0").unwrap();
        assert!(
            zero.validate()
                .unwrap_err()
                .contains("flight.max_live_streams")
        );
        for appends in [0, 65] {
            let bad = Settings::from_toml(&format!("[flight]\nmax_appends_in_flight = {appends}"))
                .unwrap();
            let error = bad.validate().unwrap_err();
            assert!(error.contains("flight.max_appends_in_flight"), "{error}");
        }
        assert_eq!(defaults.flight.max_appends_in_flight, 4);
    }
}
