//! Reading a request's body within its limit and the node's request budget.
//!
//! The limit of an append is the one of its format (`[http.body]`); every other request's body
//! (the JSON of the control routes) is read by the layer [`JsonBodiesLayer`] within
//! `http.body.max_json_bytes` before its handler parses it. A body whose length is known
//! (`Content-Length`) and over the limit is refused before a byte of it is read; a chunked body
//! is cut as soon as it passes the limit (413 `payload_too_large` either way; the rest is read and
//! thrown away in the background, up to 16 MiB or 5 s, so the client sees the answer). The bytes are
//! reserved against the budget ([`super::budget`]) before they are buffered, so a request the
//! node has no room for gets 503 `overloaded` instead of memory. A body that sends nothing for
//! `http.idle_timeout_ms` is given up, so a stalled client cannot hold its reservation.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use futures::future::{BoxFuture, Either};
use http_body_util::BodyExt;
use tower::{Layer, Service};

use crate::budget::{Budget, Permit};
use crate::error::{ApiError, ApiResult};

/// The body, read whole, and the permit that holds its bytes.
pub(crate) async fn read(
    body: Body,
    limit: usize,
    budget: &Arc<Budget>,
    stall: Duration,
) -> ApiResult<(Bytes, Permit)> {
    let hint = body.size_hint();
    let too_large = ApiError::PayloadTooLarge { limit };
    let declared = match hint.upper() {
        Some(upper) if upper > limit as u64 => {
            drain(body);
            return Err(too_large);
        }
        // Known and within the limit: reserved and allocated once.
        Some(upper) if upper == hint.lower() => usize::try_from(upper).unwrap_or(limit),
        _ => 0,
    };
    let mut permit = budget.reserve(declared)?;
    let mut buffer = BytesMut::with_capacity(declared);
    let mut body = body;
    loop {
        let frame = match tokio::time::timeout(stall, body.frame()).await {
            Ok(Some(Ok(frame))) => frame,
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(ApiError::bad_request(format!(
                    "could not read the body: {e}"
                )));
            }
            Err(_) => {
                return Err(ApiError::bad_request(format!(
                    "the body sent nothing for {} ms (`http.idle_timeout_ms`)",
                    stall.as_millis()
                )));
            }
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers carry nothing an append uses
        };
        let total = buffer.len() + data.len();
        if total > limit {
            drain(body);
            return Err(too_large);
        }
        if total > permit.bytes() {
            permit.resize(total)?;
        }
        buffer.extend_from_slice(&data);
    }
    Ok((buffer.freeze(), permit))
}

/// Bytes of a refused body read and thrown away so the client sees the 413 (closing a
/// connection with unread bytes resets it, and a client still sending would see the reset
/// first); past this, or after [`DRAIN_TIME`], the connection is closed anyway.
const DRAIN_BYTES: u64 = 16 << 20;
/// How long a refused body is drained at most.
const DRAIN_TIME: Duration = Duration::from_secs(5);

/// Reads and discards the rest of a refused body in the background, within [`DRAIN_BYTES`] and
/// [`DRAIN_TIME`]: the answer goes out meanwhile, and nothing is kept.
fn drain(mut body: Body) {
    tokio::spawn(async move {
        let mut read = 0u64;
        let _ = tokio::time::timeout(DRAIN_TIME, async {
            while read < DRAIN_BYTES {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        read += frame.data_ref().map_or(0, |d| d.len() as u64);
                    }
                    _ => break,
                }
            }
        })
        .await;
    });
}

/// The limits of the JSON bodies of every route but the append: a tower layer
/// ([`JsonBodiesLayer`]) reads such a body within `limit` and the budget (413 or 503 at once)
/// and holds its bytes while the handler runs.
#[derive(Debug)]
pub(super) struct JsonBodies {
    pub(super) limit: usize,
    pub(super) budget: Arc<Budget>,
    pub(super) stall: Duration,
}

/// The layer of [`BoundedJson`].
#[derive(Debug, Clone)]
pub(super) struct JsonBodiesLayer(pub(super) Arc<JsonBodies>);

impl<S> Layer<S> for JsonBodiesLayer {
    type Service = BoundedJson<S>;

    fn layer(&self, inner: S) -> BoundedJson<S> {
        BoundedJson {
            bodies: self.0.clone(),
            inner,
        }
    }
}

/// Reads the body of a request to any route but the append within [`JsonBodies`] before the
/// service `S` beneath. A request whose body is known to be empty (a GET) goes on as it is.
#[derive(Debug, Clone)]
pub(super) struct BoundedJson<S> {
    bodies: Arc<JsonBodies>,
    inner: S,
}

impl<S> Service<Request> for BoundedJson<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, BoxFuture<'static, Result<Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let append = request.method() == Method::POST && request.uri().path().ends_with("/records");
        if append || request.body().size_hint().exact() == Some(0) {
            return Either::Left(self.inner.call(request));
        }
        // The service made ready by `poll_ready` serves this request; a clone stays for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let bodies = self.bodies.clone();
        Either::Right(Box::pin(async move {
            let (parts, body) = request.into_parts();
            match read(body, bodies.limit, &bodies.budget, bodies.stall).await {
                Ok((bytes, permit)) => {
                    let response = inner
                        .call(Request::from_parts(parts, Body::from(bytes)))
                        .await;
                    drop(permit);
                    response
                }
                Err(error) => Ok(error.into_response()),
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use futures::stream;
    use hyper::body::Frame;

    use super::*;
    use crate::metrics::Metrics;

    fn chunked(chunks: &[&'static [u8]]) -> Body {
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::from_static(c))))
            .collect();
        Body::new(http_body_util::StreamBody::new(stream::iter(frames)))
    }

    #[tokio::test]
    async fn bodies_are_cut_at_their_limit_and_held_against_the_budget() {
        let budget = Budget::new(1000, Arc::new(Metrics::new(None)));
        let stall = Duration::from_secs(5);

        let (bytes, permit) = read(chunked(&[b"abc", b"de"]), 5, &budget, stall)
            .await
            .unwrap();
        assert_eq!(&bytes[..], b"abcde");
        assert_eq!(permit.bytes(), 5);
        drop(permit);

        let cut = read(chunked(&[b"abc", b"def"]), 5, &budget, stall).await;
        assert_eq!(cut.unwrap_err().kind(), "payload_too_large");
        let declared = read(Body::from(vec![0u8; 6]), 5, &budget, stall).await;
        assert_eq!(declared.unwrap_err().kind(), "payload_too_large");

        let held = budget.reserve(998).unwrap();
        let refused = read(Body::from(vec![0u8; 3]), 5, &budget, stall).await;
        assert_eq!(refused.unwrap_err().kind(), "overloaded");
        let refused = read(chunked(&[b"a", b"bc"]), 5, &budget, stall).await;
        assert_eq!(refused.unwrap_err().kind(), "overloaded");
        drop(held);
        let (bytes, _permit) = read(Body::from(vec![0u8; 3]), 5, &budget, stall)
            .await
            .unwrap();
        assert_eq!(bytes.len(), 3);
    }

    #[tokio::test]
    async fn a_body_that_stalls_is_given_up() {
        let budget = Budget::new(1000, Arc::new(Metrics::new(None)));
        let stalled = Body::new(http_body_util::StreamBody::new(stream::pending::<
            Result<Frame<Bytes>, std::io::Error>,
        >()));
        let error = read(stalled, 5, &budget, Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("http.idle_timeout_ms"),
            "{error}"
        );
    }
}
