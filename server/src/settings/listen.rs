//! How a front end's listen address is spelled in files and flags: an address, or `none` for a
//! front end that is turned off.

use std::net::SocketAddr;

use serde::{Deserialize, Deserializer, Serializer};

/// The word that turns a front end off.
pub const NONE: &str = "none";

/// Parses `none` or a socket address.
pub fn parse(text: &str) -> Result<Option<SocketAddr>, String> {
    if text.trim().eq_ignore_ascii_case(NONE) {
        return Ok(None);
    }
    text.trim()
        .parse()
        .map(Some)
        .map_err(|_| format!("`{text}` is neither an address (host:port) nor `none`"))
}

/// Writes `none` or the address.
pub(crate) fn serialize<S: Serializer>(
    listen: &Option<SocketAddr>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match listen {
        Some(address) => serializer.collect_str(address),
        None => serializer.serialize_str(NONE),
    }
}

/// Reads `none` or an address.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SocketAddr>, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse(&text).map_err(serde::de::Error::custom)
}
