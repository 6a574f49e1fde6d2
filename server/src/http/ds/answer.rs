//! The protocol's headers, the headers every answer carries, and refusals that carry headers of
//! their own (a closed stream's 409, a stale producer's 403, a sequence gap's 409).

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::offsets;
use crate::error::ApiError;

/// Header: where the next read continues (the tail after an append).
pub(crate) const NEXT_OFFSET: HeaderName = HeaderName::from_static("stream-next-offset");
/// Header: the response holds everything up to the tail.
pub(crate) const UP_TO_DATE: HeaderName = HeaderName::from_static("stream-up-to-date");
/// Header: the cursor of a live response.
pub(crate) const CURSOR: HeaderName = HeaderName::from_static("stream-cursor");
/// Header: the stream is closed (and, on a read, the response reaches its end).
pub(crate) const CLOSED: HeaderName = HeaderName::from_static("stream-closed");
/// Header: the TTL the stream was created with.
pub(crate) const TTL: HeaderName = HeaderName::from_static("stream-ttl");
/// Header: the stream's expiry time.
pub(crate) const EXPIRES_AT: HeaderName = HeaderName::from_static("stream-expires-at");
/// Header: SSE data events are base64.
pub(crate) const SSE_ENCODING: HeaderName = HeaderName::from_static("stream-sse-data-encoding");
/// Header: the producer's epoch (echoed, or the current one on a 403).
pub(crate) const PRODUCER_EPOCH: HeaderName = HeaderName::from_static("producer-epoch");
/// Header: the producer's highest accepted sequence.
pub(crate) const PRODUCER_SEQ: HeaderName = HeaderName::from_static("producer-seq");
/// Header: the sequence expected (a gap's 409).
pub(crate) const PRODUCER_EXPECTED: HeaderName = HeaderName::from_static("producer-expected-seq");
/// Header: the sequence received (a gap's 409).
pub(crate) const PRODUCER_RECEIVED: HeaderName = HeaderName::from_static("producer-received-seq");

/// Adds the browser-safety headers every `/ds` answer carries.
pub(crate) async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("cross-origin"),
    );
    response
}

/// Sets a header whose value is plain text we made (digits, offsets, times).
pub(crate) fn set(h: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        h.insert(name, v);
    }
}

/// Sets `Stream-Next-Offset`.
pub(crate) fn set_offset(h: &mut HeaderMap, offset: u64) {
    set(h, NEXT_OFFSET, &offsets::render(offset));
}

/// A refused request: the API's error answer, with the protocol's headers added.
#[derive(Debug)]
pub(crate) struct Refusal(Box<Response>);

impl Refusal {
    /// `error`'s answer with `headers` set.
    pub(crate) fn with(error: ApiError, headers: &[(HeaderName, String)]) -> Refusal {
        let mut response = error.into_response();
        for (name, value) in headers {
            set(response.headers_mut(), name.clone(), value);
        }
        Refusal(Box::new(response))
    }
}

impl Refusal {
    /// The refusal's status.
    pub(crate) fn status_code(&self) -> axum::http::StatusCode {
        self.0.status()
    }

    /// The same refusal with another status.
    pub(crate) fn status(mut self, status: axum::http::StatusCode) -> Refusal {
        *self.0.status_mut() = status;
        self
    }
}

impl From<ApiError> for Refusal {
    fn from(error: ApiError) -> Self {
        Refusal(Box::new(error.into_response()))
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        *self.0
    }
}
