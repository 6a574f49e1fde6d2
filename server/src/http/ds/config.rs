//! What a PUT asks a stream to be (its content type and lifetime), checked as the protocol
//! says, and what the stream's table looks like for that content type.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use axum::http::HeaderMap;
use mink_metadata::StreamConfig;

use crate::error::{ApiError, ApiResult};

/// The content type of a stream created without one.
pub(crate) const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// The column of each message's bytes.
pub(crate) const DATA: &str = "data";
/// The column of the newest `Stream-Seq` (on the last row of each batch).
pub(crate) const STREAM_SEQ: &str = "stream_seq";

/// How a stream's messages are framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `application/json`: messages are JSON values; reads answer a JSON array.
    Json,
    /// `text/*`: UTF-8 text, concatenated on reads.
    Text,
    /// Anything else: bytes, concatenated on reads, base64 over SSE.
    Binary,
}

impl Mode {
    /// The mode of a content type.
    pub(crate) fn of(content_type: &str) -> Mode {
        let media = media_type(content_type);
        if media == "application/json" {
            Mode::Json
        } else if media.starts_with("text/") {
            Mode::Text
        } else {
            Mode::Binary
        }
    }

    /// The Arrow type of the data column.
    fn data_type(self) -> DataType {
        match self {
            Mode::Json | Mode::Text => DataType::Utf8,
            Mode::Binary => DataType::Binary,
        }
    }
}

/// The media type of a content type, lowercase, without parameters.
pub(crate) fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Whether two content types name the same media type (parameters aside).
pub(crate) fn same_type(a: &str, b: &str) -> bool {
    media_type(a) == media_type(b)
}

/// The schema of a stream's table.
pub(crate) fn schema(mode: Mode) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(DATA, mode.data_type(), true),
        Field::new(STREAM_SEQ, DataType::Utf8, true),
    ]))
}

/// The request's `Content-Type`, if it has a usable one.
pub(crate) fn content_type(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let Some(value) = headers.get(axum::http::header::CONTENT_TYPE) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| ApiError::bad_request("Content-Type is not ASCII"))?
        .trim();
    let media = media_type(text);
    let Some((kind, sub)) = media.split_once('/') else {
        return Err(ApiError::bad_request(format!(
            "Content-Type `{text}` is not a media type"
        )));
    };
    if kind.is_empty() || sub.is_empty() || text.len() > 256 {
        return Err(ApiError::bad_request(format!(
            "Content-Type `{text}` is not a media type"
        )));
    }
    Ok(Some(text.to_owned()))
}

/// The configuration a PUT asks for (`created_ms` is `now_ms`), and whether it asks the stream
/// closed (`Stream-Closed: true`).
pub(crate) fn requested(headers: &HeaderMap, now_ms: u64) -> ApiResult<(StreamConfig, bool)> {
    let forked = headers.contains_key("stream-forked-from");
    if !forked
        && ["stream-fork-offset", "stream-fork-sub-offset"]
            .iter()
            .any(|h| headers.contains_key(*h))
    {
        return Err(ApiError::bad_request(
            "Stream-Fork-Offset and Stream-Fork-Sub-Offset need Stream-Forked-From",
        ));
    }
    if forked {
        return Err(ApiError::NotImplemented {
            message: "forks are not served (docs/durable-streams.md, \"What is not served\")"
                .to_owned(),
        });
    }
    let content_type = content_type(headers)?.unwrap_or_else(|| DEFAULT_CONTENT_TYPE.to_owned());
    let ttl = header_text(headers, "stream-ttl")?;
    let expires = header_text(headers, "stream-expires-at")?;
    let (ttl_secs, expires_at_ms) = match (ttl, expires) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "give Stream-TTL or Stream-Expires-At, not both",
            ));
        }
        (Some(ttl), None) => (Some(parse_ttl(ttl)?), None),
        (None, Some(at)) => (None, Some(parse_expires_at(at)?)),
        (None, None) => (None, None),
    };
    let closed = closed(headers)?;
    Ok((
        StreamConfig {
            content_type,
            ttl_secs,
            expires_at_ms,
            created_ms: now_ms,
        },
        closed,
    ))
}

/// Whether the request carries `Stream-Closed: true` (anything but `true` or `false` is a 400).
pub(crate) fn closed(headers: &HeaderMap) -> ApiResult<bool> {
    match header_text(headers, "stream-closed")? {
        None => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(ApiError::bad_request(format!(
            "Stream-Closed is `{v}`, not `true` or `false`"
        ))),
    }
}

/// Whether an existing stream's configuration is the one a PUT asks for.
pub(crate) fn matches(existing: &StreamConfig, asked: &StreamConfig) -> bool {
    same_type(&existing.content_type, &asked.content_type)
        && existing.ttl_secs == asked.ttl_secs
        && existing.expires_at_ms == asked.expires_at_ms
}

/// A header's text, trimmed, when present.
pub(crate) fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> ApiResult<Option<&'a str>> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map(str::trim)
                .map_err(|_| ApiError::bad_request(format!("header {name} is not ASCII")))
        })
        .transpose()
}

/// A TTL: decimal seconds without sign, point, exponent or leading zero.
fn parse_ttl(text: &str) -> ApiResult<u64> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical
        .then(|| text.parse::<u64>().ok())
        .flatten()
        .filter(|secs| *secs <= 100 * 365 * 86_400)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "Stream-TTL `{text}` is not a whole number of seconds (digits, no leading zero, at most 100 years)"
            ))
        })
}

/// An RFC 3339 time as milliseconds since the epoch.
fn parse_expires_at(text: &str) -> ApiResult<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|e| {
            ApiError::bad_request(format!("Stream-Expires-At `{text}` is not RFC 3339: {e}"))
        })
}

/// `Stream-Expires-At` as the protocol writes it (UTC, milliseconds).
pub(crate) fn format_expires_at(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(String::new, |t| {
        t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_are_canonical_decimal_seconds() {
        assert_eq!(parse_ttl("3600").unwrap(), 3600);
        assert_eq!(parse_ttl("0").unwrap(), 0);
        for bad in [
            "",
            "03600",
            "+3600",
            "3600.0",
            "3.6e3",
            "-1",
            "abc",
            "99999999999999999999",
        ] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn expiry_times_are_rfc3339_with_any_offset() {
        let z = parse_expires_at("2030-01-02T03:04:05Z").unwrap();
        let offset = parse_expires_at("2030-01-02T05:04:05+02:00").unwrap();
        assert_eq!(z, offset);
        assert!(parse_expires_at("tomorrow").is_err());
        assert_eq!(format_expires_at(z), "2030-01-02T03:04:05.000Z");
    }

    #[test]
    fn content_types_compare_by_media_type() {
        assert!(same_type("text/plain", "TEXT/PLAIN"));
        assert!(same_type(
            "application/json; charset=utf-8",
            "application/json"
        ));
        assert!(!same_type("text/plain", "application/json"));
        assert_eq!(Mode::of("Application/JSON; charset=utf-8"), Mode::Json);
        assert_eq!(Mode::of("text/markdown"), Mode::Text);
        assert_eq!(Mode::of("image/png"), Mode::Binary);
    }
}
