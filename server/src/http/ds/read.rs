//! GET and HEAD of a stream (docs/durable-streams.md, "Reads"): HEAD answers the metadata; GET
//! a catch-up read from `offset` (its messages in one body), with `live=long-poll` parking at
//! the tail, or with `live=sse` the event stream (`sse.rs`).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::answer::{self, CLOSED, CURSOR, EXPIRES_AT, Refusal, TTL, UP_TO_DATE};
use super::config;
use super::messages::{Body, read_messages};
use super::offsets::{self, Start};
use super::opened::{Opened, now_ms};
use super::request::Request;
use super::sse;
use crate::error::ApiError;
use crate::http::query::percent_decode;
use crate::http::read::Parking;

/// What a read's query asks (unknown parameters are ignored, as the protocol says).
#[derive(Debug, Default)]
pub(crate) struct ReadQuery {
    pub(crate) offset: Option<String>,
    pub(crate) live: Option<String>,
    pub(crate) cursor: Option<String>,
}

impl ReadQuery {
    fn parse(query: Option<&str>) -> Result<ReadQuery, Refusal> {
        let mut q = ReadQuery::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value, true).ok_or_else(|| {
                ApiError::bad_request(format!("query parameter `{key}` is not UTF-8"))
            })?;
            let slot = match key {
                "offset" => &mut q.offset,
                "live" => &mut q.live,
                "cursor" => &mut q.cursor,
                _ => continue,
            };
            if slot.replace(value).is_some() {
                return Err(ApiError::bad_request(format!("give `{key}` once")).into());
            }
        }
        Ok(q)
    }
}

/// GET or HEAD.
pub(crate) async fn serve(
    request: &Request<'_>,
    head: bool,
    query: Option<&str>,
    parking: &Parking,
) -> Result<Response, Refusal> {
    let q = ReadQuery::parse(query)?;
    let opened = request.open().await?;
    if head {
        return metadata(request, &opened).await;
    }
    opened.stream.touch(now_ms(request.core));
    match q.live.as_deref() {
        None => {}
        Some("long-poll" | "sse") if q.offset.is_none() => {
            return Err(ApiError::bad_request("a live read needs an offset").into());
        }
        Some("sse") => {
            let (offset, cursor) = (q.offset.as_deref(), q.cursor.as_deref());
            return sse::serve(request.core.clone(), opened, offset, cursor, parking).await;
        }
        Some("long-poll") => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "live is `{other}`, not `long-poll` or `sse`"
            ))
            .into());
        }
    }
    let long_poll = q.live.is_some();
    let start = offsets::parse(q.offset.as_deref())?;
    let log_offsets = opened.log.offsets();
    let from = match start {
        Start::Beginning => log_offsets.log_start,
        Start::Now => log_offsets.high_watermark,
        Start::At(o) => offsets::check(o, log_offsets)?,
    };
    let core = request.core;
    let max_bytes = core.settings().ds.max_read_bytes;
    if start == Start::Now && !long_poll {
        // The tail, and nothing else, whatever the stream holds.
        let closed = opened.closed(request.core).await?;
        let mut response = (StatusCode::OK, Body::new(opened.mode).finish()).into_response();
        let h = response.headers_mut();
        position(h, &opened, from, true, closed);
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        return Ok(response);
    }
    let mut read = read_messages(core, opened.log.as_ref(), opened.mode, from, max_bytes).await?;
    let mut status = StatusCode::OK;
    if read.body.is_empty() && long_poll {
        let closed = opened.closed(request.core).await?;
        if !closed {
            let place = parking.admit()?;
            let parked = core.metrics().park();
            tokio::select! {
                _ = opened.log.wait_past(from, core.settings().ds.long_poll_timeout) => {}
                _ = core.shutdown_signal().cancelled() => {}
            }
            drop(parked);
            drop(place);
            read = read_messages(core, opened.log.as_ref(), opened.mode, from, max_bytes).await?;
        }
        if read.body.is_empty() {
            status = StatusCode::NO_CONTENT;
        }
    }
    let up_to_date = read.next >= opened.log.offsets().high_watermark;
    let closed = up_to_date && opened.closed(request.core).await?;
    let etag = format!(
        "\"{}:{from}:{}{}\"",
        opened.info.record().incarnation,
        read.next,
        if closed { ":c" } else { "" }
    );
    let matched = request
        .headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut response = if status == StatusCode::NO_CONTENT {
        status.into_response()
    } else if matched {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (status, read.body.finish()).into_response()
    };
    let h = response.headers_mut();
    position(h, &opened, read.next, up_to_date, closed);
    if status != StatusCode::NO_CONTENT {
        answer::set(h, header::ETAG, &etag);
    }
    if long_poll && !closed {
        answer::set(h, CURSOR, &offsets::cursor(q.cursor.as_deref()));
    }
    // A response that reaches the tail changes as messages come: revalidated (ETag) each time.
    let cache = match (up_to_date, core.authenticator().is_enabled()) {
        (true, _) => "no-cache",
        (false, false) => "public, max-age=60, stale-while-revalidate=300",
        (false, true) => "private, max-age=60, stale-while-revalidate=300",
    };
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    Ok(response)
}

/// HEAD: the stream's content type, tail, lifetime and closed flag; the TTL is not extended.
async fn metadata(request: &Request<'_>, opened: &Opened) -> Result<Response, Refusal> {
    let closed = opened.closed(request.core).await?;
    let mut response = StatusCode::OK.into_response();
    let h = response.headers_mut();
    let tail = opened.log.offsets().high_watermark;
    position(h, opened, tail, true, closed);
    h.remove(UP_TO_DATE);
    if let Some(ttl) = opened.config.ttl_secs {
        answer::set(h, TTL, &ttl.to_string());
    }
    if let Some(at) = opened.config.expires_at_ms {
        answer::set(h, EXPIRES_AT, &config::format_expires_at(at));
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// The headers every read answer has: content type, next offset, up to date, closed.
fn position(
    h: &mut axum::http::HeaderMap,
    opened: &Opened,
    next: u64,
    up_to_date: bool,
    closed: bool,
) {
    answer::set(h, header::CONTENT_TYPE, &opened.config.content_type);
    answer::set_offset(h, next);
    if up_to_date {
        answer::set(h, UP_TO_DATE, "true");
    }
    if closed {
        answer::set(h, CLOSED, "true");
    }
}
