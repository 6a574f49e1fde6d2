//! The checks a request passes before its handler, each a [`Check`] run by one small tower
//! service, [`Gate`]: the front gate of every request (a write from an origin that may not write,
//! `redirected_by`, the token; then a 307 made into the owner's full URL on the way out), the
//! rate limit of `/v1` and `/ds` (`rate_limit.rs`) and the Host allowlist (`hosts.rs`).
//!
//! axum's `from_fn` middleware boxes a future and clones the services beneath it for each
//! request; five of them cost about a third of the node's CPU per request at the HTTP floor (a
//! `GET .../offsets` answered from memory), and as much again of a parked long-poll's delivery.
//! A gate runs its check in place and answers at once or calls the service beneath, whose
//! future it polls as it is.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::BoxError;
use axum::body::{Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{self, Uri};
use axum::response::{IntoResponse, Response};
use tower::{Layer, Service};

use super::{auth, cors, redirect};
use crate::core::NodeCore;
use crate::error::ApiError;

/// What a gate checks.
pub(crate) trait Check: Clone + Send + Sync + 'static {
    /// What the check keeps of the request for [`Check::answer`].
    type Kept: Send + 'static;

    /// Lets `request` go on (as the check leaves it), keeping what the answer needs; or the
    /// error that answers it instead.
    fn check(&self, request: &mut Request) -> Result<Self::Kept, ApiError>;

    /// The response of a request that went on, as sent (by default, as it came).
    fn answer(&self, kept: Self::Kept, response: Response) -> Response {
        let _ = kept;
        response
    }
}

/// The layer of a [`Gate`] checking `C`.
#[derive(Clone)]
pub(crate) struct GateLayer<C>(pub(crate) C);

impl<C: Check, S> Layer<S> for GateLayer<C> {
    type Service = Gate<C, S>;

    fn layer(&self, inner: S) -> Gate<C, S> {
        Gate {
            check: self.0.clone(),
            inner,
        }
    }
}

/// Runs `C` on each request before the service `S` beneath.
#[derive(Clone)]
pub(crate) struct Gate<C, S> {
    check: C,
    inner: S,
}

impl<C, S, B> Service<Request> for Gate<C, S>
where
    C: Check,
    S: Service<Request, Response = http::Response<B>, Error = Infallible>,
    S::Future: Unpin,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = GateFuture<C, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        match self.check.check(&mut request) {
            Ok(kept) => GateFuture::Passed {
                inner: self.inner.call(request),
                then: Some((self.check.clone(), kept)),
            },
            Err(error) => GateFuture::Answered(Some(error.into_response())),
        }
    }
}

/// The future of a [`Gate`]: its own answer, or the service's answer passed through
/// [`Check::answer`].
pub(crate) enum GateFuture<C: Check, F> {
    Answered(Option<Response>),
    Passed {
        inner: F,
        /// Taken when the answer is made.
        then: Option<(C, C::Kept)>,
    },
}

// Nothing of a gate's future is ever pinned but `F`.
impl<C: Check, F: Unpin> Unpin for GateFuture<C, F> {}

impl<C, F, B> Future for GateFuture<C, F>
where
    C: Check,
    F: Future<Output = Result<http::Response<B>, Infallible>> + Unpin,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answer = match self.get_mut() {
            GateFuture::Answered(response) => response.take(),
            GateFuture::Passed { inner, then } => {
                let Ok(response) = std::task::ready!(Pin::new(inner).poll(cx));
                then.take()
                    .map(|(check, kept)| check.answer(kept, response.into_response()))
            }
        };
        // `None` only when polled again after it finished: a bug of the caller, never a
        // client's doing, answered rather than panicking.
        Poll::Ready(Ok(answer.unwrap_or_else(|| {
            ApiError::Internal {
                message: "a gate's future was polled after it finished".to_owned(),
            }
            .into_response()
        })))
    }
}

/// The front gate of every request: a write from an origin that may not write is refused
/// (`cors.rs`), `redirected_by` is taken out of the query (`redirect.rs`), then the token is
/// checked (`auth.rs`); a 307 to a bucket's owner leaves as the owner's full URL of the same
/// path and query.
#[derive(Clone)]
pub(crate) struct Front {
    pub(crate) core: Arc<NodeCore>,
    pub(crate) writers: Arc<cors::WriteOrigins>,
}

impl Check for Front {
    /// The URI as the client sent it, less `redirected_by`: what a redirect keeps.
    type Kept = Uri;

    fn check(&self, request: &mut Request) -> Result<Uri, ApiError> {
        cors::check_write(&self.writers, request)?;
        let uri = redirect::take_redirected_by(request)?;
        auth::admit(&self.core, request)?;
        Ok(uri)
    }

    fn answer(&self, uri: Uri, response: Response) -> Response {
        redirect::to_owner(&self.core, &uri, response)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::body::Body;
    use axum::http::{HeaderValue, StatusCode};
    use tower::ServiceExt;

    use super::*;

    /// Refuses paths under `/no`, and marks every answer of the rest.
    #[derive(Clone)]
    struct Marks;

    impl Check for Marks {
        type Kept = String;

        fn check(&self, request: &mut Request) -> Result<String, ApiError> {
            let path = request.uri().path().to_owned();
            if path.starts_with("/no") {
                return Err(ApiError::bad_request(format!("{path} is refused")));
            }
            Ok(path)
        }

        fn answer(&self, path: String, mut response: Response) -> Response {
            let mark = HeaderValue::from_str(&path).expect("a path is a header value");
            response.headers_mut().insert("x-checked", mark);
            response
        }
    }

    #[tokio::test]
    async fn a_refused_request_is_answered_by_the_gate_and_a_passed_one_by_the_service() {
        let called = Arc::new(AtomicUsize::new(0));
        let counted = called.clone();
        let service = tower::service_fn(move |_: Request| {
            counted.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok::<_, Infallible>(Response::new(Body::from("served"))))
        });
        let gate = GateLayer(Marks).layer(service);
        let get = |path: &str| Request::get(path).body(Body::empty()).expect("a request");

        let refused = gate
            .clone()
            .oneshot(get("/no/way"))
            .await
            .expect("infallible");
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        assert!(refused.headers().get("x-checked").is_none());
        assert_eq!(called.load(Ordering::SeqCst), 0, "the service never saw it");

        let passed = gate.oneshot(get("/yes")).await.expect("infallible");
        assert_eq!(passed.status(), StatusCode::OK);
        assert_eq!(passed.headers()["x-checked"], "/yes");
        assert_eq!(called.load(Ordering::SeqCst), 1);
    }
}
