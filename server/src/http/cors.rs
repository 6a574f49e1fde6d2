//! Browsers on other origins (`[http.cors]`, docs/server.md "Browsers").
//!
//! tower-http's CORS layer answers preflights and adds the headers: reads (GET and HEAD) from
//! any origin, writes from the origins in `http.cors.write_origins`, or from any origin when the
//! node requires a token (a page without one cannot write). The `Mink-*` position headers are
//! exposed, so a page's `fetch` can read `Mink-Next-Offset`, and so are the Durable Streams
//! protocol's `Stream-*` and `Producer-*` headers (`/ds`).
//!
//! Whether CORS is on or not, every write obeys one more rule, checked before anything runs: a
//! request carrying an `Origin` that is neither this node's own nor allowed to write is refused
//! (403 `forbidden`). A browser sends some cross-origin POSTs without asking first (a "simple"
//! request); those change nothing.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::header::{
    ACCEPT, ACCESS_CONTROL_REQUEST_METHOD, AUTHORIZATION, CONTENT_TYPE, ETAG, HOST, IF_NONE_MATCH,
    LOCATION, ORIGIN, RETRY_AFTER,
};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowOrigin, CorsLayer};

use super::ds::answer as ds;
use super::headers::{
    HIGH_WATERMARK, LOG_START, NEXT_OFFSET, SCHEMA_ID, SEQUENCE, UP_TO_DATE, WRITER_ID,
};
use crate::core::NodeCore;
use crate::error::ApiError;

/// Who may write from a browser.
#[derive(Debug)]
pub(crate) struct WriteOrigins {
    listed: Vec<String>,
    /// A token is required: any origin may try.
    any: bool,
}

impl WriteOrigins {
    pub(crate) fn new(core: &NodeCore) -> Arc<Self> {
        Arc::new(WriteOrigins {
            listed: core
                .settings()
                .http
                .cors
                .write_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            any: core.authenticator().is_enabled(),
        })
    }

    fn allows(&self, origin: &HeaderValue) -> bool {
        self.any
            || origin.to_str().is_ok_and(|o| {
                let o = o.trim_end_matches('/').to_ascii_lowercase();
                self.listed.contains(&o)
            })
    }
}

fn is_read(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

/// The CORS layer, or `None` when `http.cors.enabled` is false.
pub(crate) fn layer(core: &NodeCore) -> Option<CorsLayer> {
    let cors = &core.settings().http.cors;
    if !cors.enabled {
        return None;
    }
    let writers = WriteOrigins::new(core);
    let allow = AllowOrigin::predicate(move |origin: &HeaderValue, parts: &Parts| {
        // A preflight asks for the method of the request to come.
        let method = match parts.method {
            Method::OPTIONS => parts
                .headers
                .get(ACCESS_CONTROL_REQUEST_METHOD)
                .and_then(|m| Method::from_bytes(m.as_bytes()).ok()),
            ref other => Some(other.clone()),
        };
        match method {
            Some(m) if is_read(&m) => true,
            Some(_) => writers.allows(origin),
            None => false,
        }
    });
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([
                Method::GET,
                Method::HEAD,
                Method::POST,
                Method::PUT,
                Method::PATCH,
                Method::DELETE,
            ])
            .allow_headers([
                AUTHORIZATION,
                CONTENT_TYPE,
                ACCEPT,
                HeaderName::from_static("last-event-id"),
                WRITER_ID,
                SEQUENCE,
                SCHEMA_ID,
                IF_NONE_MATCH,
                // The Durable Streams requests (`/ds`).
                HeaderName::from_static("stream-seq"),
                ds::TTL,
                ds::EXPIRES_AT,
                ds::CLOSED,
                HeaderName::from_static("producer-id"),
                ds::PRODUCER_EPOCH,
                ds::PRODUCER_SEQ,
            ])
            .expose_headers([
                NEXT_OFFSET,
                HIGH_WATERMARK,
                LOG_START,
                UP_TO_DATE,
                SCHEMA_ID,
                RETRY_AFTER,
                LOCATION,
                ETAG,
                // The Durable Streams answers (`/ds`).
                ds::NEXT_OFFSET,
                ds::UP_TO_DATE,
                ds::CURSOR,
                ds::CLOSED,
                ds::TTL,
                ds::EXPIRES_AT,
                ds::SSE_ENCODING,
                ds::PRODUCER_EPOCH,
                ds::PRODUCER_SEQ,
                ds::PRODUCER_EXPECTED,
                ds::PRODUCER_RECEIVED,
            ])
            .max_age(Duration::from_secs(cors.max_age_secs)),
    )
}

/// Whether `origin` is this node's own: its host and port are the request's `Host`.
fn same_origin(origin: &HeaderValue, host: Option<&HeaderValue>) -> bool {
    let (Ok(origin), Some(Ok(host))) = (origin.to_str(), host.map(HeaderValue::to_str)) else {
        return false;
    };
    origin
        .split_once("://")
        .is_some_and(|(_, rest)| rest.trim_end_matches('/').eq_ignore_ascii_case(host))
}

/// Refuses a write carrying an `Origin` that may not write (see the module doc).
pub(super) fn check_write(writers: &WriteOrigins, request: &Request) -> Result<(), ApiError> {
    let method = request.method();
    if !is_read(method)
        && method != Method::OPTIONS
        && let Some(origin) = request.headers().get(ORIGIN)
        && !writers.allows(origin)
        && !same_origin(origin, request.headers().get(HOST))
    {
        let shown = origin.to_str().unwrap_or("?").to_owned();
        return Err(ApiError::Forbidden {
            message: format!(
                "a page on {shown} may not write here: list its origin in http.cors.write_origins, or require a token"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_is_this_nodes_own_when_it_names_the_requests_host() {
        let v = |s: &str| HeaderValue::from_str(s).unwrap();
        assert!(same_origin(
            &v("http://127.0.0.1:6465"),
            Some(&v("127.0.0.1:6465"))
        ));
        assert!(same_origin(
            &v("https://Mink.example"),
            Some(&v("mink.example"))
        ));
        assert!(!same_origin(
            &v("http://evil.example"),
            Some(&v("127.0.0.1:6465"))
        ));
        assert!(!same_origin(&v("null"), Some(&v("127.0.0.1:6465"))));
        assert!(!same_origin(&v("http://127.0.0.1:6465"), None));
        let listed = WriteOrigins {
            listed: vec!["https://app.example".into()],
            any: false,
        };
        assert!(listed.allows(&v("https://APP.example/")));
        assert!(!listed.allows(&v("https://app.example.evil")));
    }
}
