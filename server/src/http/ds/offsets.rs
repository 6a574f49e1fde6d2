//! Offsets as the protocol sees them (docs/durable-streams.md, "Offsets"): the Mink offset
//! zero-padded to 20 digits, so they sort as strings; `-1` (the start) and `now` (the tail) are
//! the sentinels. And the cursor of live reads.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{ApiError, ApiResult};

/// Digits of a rendered offset (a u64 has at most 20).
const DIGITS: usize = 20;

/// Where a read asks to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// `-1`, or no offset: the log start.
    Beginning,
    /// `now`: the tail.
    Now,
    /// A rendered offset.
    At(u64),
}

/// An offset as sent.
pub(crate) fn render(offset: u64) -> String {
    format!("{offset:0DIGITS$}")
}

/// The `offset` of a read (`None`: not given), or a 400.
pub(crate) fn parse(asked: Option<&str>) -> ApiResult<Start> {
    match asked {
        None | Some("-1") => Ok(Start::Beginning),
        Some("now") => Ok(Start::Now),
        Some(text) if text.len() == DIGITS && text.bytes().all(|b| b.is_ascii_digit()) => {
            text.parse().map(Start::At).map_err(|_| bad_offset(text))
        }
        Some(text) => Err(bad_offset(text)),
    }
}

fn bad_offset(text: &str) -> ApiError {
    let shown: String = text.chars().take(64).collect();
    ApiError::bad_request(format!(
        "offset `{shown}` is not one this server gave out (20 digits), `-1` or `now`"
    ))
}

/// An offset a client sent, within the log: below the log start 410, past the tail 400.
pub(crate) fn check(offset: u64, log: crate::bucket_log::LogOffsets) -> ApiResult<u64> {
    if offset < log.log_start {
        return Err(ApiError::OffsetTrimmed {
            offset,
            log_start: log.log_start,
        });
    }
    if offset > log.high_watermark {
        return Err(ApiError::bad_request(format!(
            "offset {} is past the stream's tail, {}",
            render(offset),
            render(log.high_watermark)
        )));
    }
    Ok(offset)
}

/// Seconds per cursor interval.
const INTERVAL_SECS: u64 = 20;
/// The cursor epoch: 2024-10-09T00:00:00Z.
const CURSOR_EPOCH_SECS: u64 = 1_728_432_000;

/// The cursor of a live response: the current interval number, or, when the client's cursor is
/// not behind it, the client's plus 1 to 180 intervals (20 s to an hour), so cursors never go
/// back and a cached response cannot loop.
pub(crate) fn cursor(client: Option<&str>) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let interval = now.as_secs().saturating_sub(CURSOR_EPOCH_SECS) / INTERVAL_SECS;
    let client = client.and_then(|c| c.trim().parse::<u64>().ok());
    let next = match client {
        Some(c) if c >= interval => {
            // Jitter from the clock's low bits: spreads cursors, needs no generator.
            let jitter = 1 + u64::from(now.subsec_nanos()) % 180;
            c.saturating_add(jitter)
        }
        _ => interval,
    };
    next.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_sort_as_strings_and_parse_back() {
        let offsets = [0u64, 9, 10, 99, 100, 123_456_789, u64::MAX];
        let rendered: Vec<String> = offsets.iter().map(|o| render(*o)).collect();
        let mut sorted = rendered.clone();
        sorted.sort();
        assert_eq!(sorted, rendered);
        for (o, r) in offsets.iter().zip(&rendered) {
            assert_eq!(parse(Some(r)).unwrap(), Start::At(*o));
        }
        assert_eq!(parse(None).unwrap(), Start::Beginning);
        assert_eq!(parse(Some("-1")).unwrap(), Start::Beginning);
        assert_eq!(parse(Some("now")).unwrap(), Start::Now);
        for bad in [
            "",
            "5",
            "0,1",
            "0 1",
            "abc",
            "-2",
            "99999999999999999999",
            "+0000000000000000001",
        ] {
            assert!(parse(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn cursors_move_forward_past_the_clients() {
        let now: u64 = cursor(None).parse().unwrap();
        let later: u64 = cursor(Some(&now.to_string())).parse().unwrap();
        assert!(later > now);
        let far: u64 = cursor(Some(&(now + 1000).to_string())).parse().unwrap();
        assert!(far > now + 1000);
        // A client behind the clock gets the current interval (which may have moved on).
        let behind: u64 = cursor(Some("1")).parse().unwrap();
        assert!(behind >= now && behind < now + 2, "{behind} {now}");
    }
}
