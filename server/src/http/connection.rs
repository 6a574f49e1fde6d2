//! One HTTP connection: its timeouts, and the service that hands its requests to the router.
//!
//! Three clocks bound what a connection can hold:
//! - **header** (`http.header_timeout_ms`): a new connection must deliver its first request head,
//!   and a request head once its first byte arrived, within this long;
//! - **idle** (`http.idle_timeout_ms`): a connection with no request in flight is closed after
//!   this long;
//! - **write** (`http.write_timeout_ms`): a write that makes no progress for this long (the
//!   client stopped reading and the socket buffers are full) fails the connection, so a response
//!   (an SSE stream, a large read) cannot stay pinned in memory; this is also what ends an SSE
//!   stream at its recycle time when its client stopped reading.
//!
//! hyper's own header timeout is not used: it also runs while a kept-alive connection waits for
//! its next request, which would make the idle timeout the header timeout. [`Activity`] tells
//! the phases apart instead: the service marks requests in flight (until their response body is
//! sent or dropped), the IO marks bytes read between requests as the start of a head.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::response::Response;
use futures::future::BoxFuture;
use hyper::body::{Frame, Incoming, SizeHint};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

/// The three timeouts of a connection.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timeouts {
    pub(super) header: Duration,
    pub(super) idle: Duration,
    pub(super) write: Duration,
}

/// What a connection is doing, as its timeouts see it.
#[derive(Debug)]
pub(super) struct Activity {
    state: Mutex<Phase>,
    /// Wakes [`Activity::expired`] when a head starts, which moves its deadline earlier.
    changed: Notify,
}

#[derive(Debug)]
struct Phase {
    /// Requests whose response is not yet sent whole.
    in_flight: usize,
    /// With nothing in flight: a request head is arriving (or the first is awaited), not idle.
    reading_head: bool,
    /// When the current phase began.
    since: Instant,
}

impl Activity {
    /// A connection just accepted: waiting for its first request head.
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Activity {
            state: Mutex::new(Phase {
                in_flight: 0,
                reading_head: true,
                since: Instant::now(),
            }),
            changed: Notify::new(),
        })
    }

    /// Bytes arrived: between requests, they are the start of a head.
    fn read(&self) {
        let mut phase = self.state.lock();
        if phase.in_flight == 0 && !phase.reading_head {
            phase.reading_head = true;
            phase.since = Instant::now();
            drop(phase);
            self.changed.notify_one();
        }
    }

    /// A request reached the service; the guard marks it in flight until dropped.
    fn begin(self: &Arc<Self>) -> InFlight {
        let mut phase = self.state.lock();
        phase.in_flight += 1;
        phase.reading_head = false;
        InFlight(Arc::clone(self))
    }

    /// Resolves when the connection has been waiting for a head, or idle, for too long; says
    /// which.
    pub(super) async fn expired(&self, timeouts: Timeouts) -> &'static str {
        loop {
            let now = Instant::now();
            let (deadline, why) = {
                let phase = self.state.lock();
                if phase.in_flight > 0 {
                    // Looked at again later: a request's end starts the idle clock.
                    (now + timeouts.idle, None)
                } else if phase.reading_head {
                    (phase.since + timeouts.header, Some("header timeout"))
                } else {
                    (phase.since + timeouts.idle, Some("idle timeout"))
                }
            };
            if let Some(why) = why
                && now >= deadline
            {
                return why;
            }
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {}
                () = self.changed.notified() => {}
            }
        }
    }
}

/// A request in flight on its connection.
#[derive(Debug)]
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut phase = self.0.state.lock();
        phase.in_flight = phase.in_flight.saturating_sub(1);
        if phase.in_flight == 0 {
            phase.since = Instant::now();
        }
    }
}

/// A response body that keeps its request in flight until it is sent or dropped.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The service of one connection: each request gets the peer's address (`ConnectInfo`) and is
/// marked in flight while the router answers it and its response is sent.
#[derive(Clone)]
pub(super) struct ConnectionService {
    pub(super) app: Router,
    pub(super) peer: SocketAddr,
    pub(super) activity: Arc<Activity>,
}

impl hyper::service::Service<hyper::Request<Incoming>> for ConnectionService {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn call(&self, mut request: hyper::Request<Incoming>) -> Self::Future {
        let in_flight = self.activity.begin();
        request.extensions_mut().insert(ConnectInfo(self.peer));
        let answer = self.app.clone().oneshot(request.map(Body::new));
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| {
                Body::new(Tracked {
                    body,
                    _in_flight: in_flight,
                })
            }))
        })
    }
}

/// The connection's IO: reads tell [`Activity`] a head may be starting, and a write, flush or
/// shutdown that stays pending for the write timeout fails with `TimedOut`.
pub(super) struct TimedIo<T> {
    inner: T,
    activity: Arc<Activity>,
    write_timeout: Duration,
    /// Armed while a write is pending; reset whenever one makes progress.
    stalled: Pin<Box<Sleep>>,
    armed: bool,
}

impl<T> TimedIo<T> {
    pub(super) fn new(inner: T, activity: Arc<Activity>, write_timeout: Duration) -> Self {
        TimedIo {
            inner,
            activity,
            write_timeout,
            stalled: Box::pin(tokio::time::sleep(write_timeout)),
            armed: false,
        }
    }

    fn progress<R>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        if poll.is_ready() {
            self.armed = false;
            return poll;
        }
        if !self.armed {
            self.armed = true;
            let deadline = Instant::now() + self.write_timeout;
            self.stalled.as_mut().reset(deadline);
        }
        match self.stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing for {} ms (`http.write_timeout_ms`)",
                    self.write_timeout.as_millis()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        poll
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progress(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progress(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.progress(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const TIMEOUTS: Timeouts = Timeouts {
        header: Duration::from_millis(40),
        idle: Duration::from_millis(400),
        write: Duration::from_millis(60),
    };

    #[tokio::test]
    async fn a_write_that_makes_no_progress_fails_after_the_write_timeout() {
        let (near, mut far) = tokio::io::duplex(16);
        let mut io = TimedIo::new(near, Activity::new(), TIMEOUTS.write);
        // Writes that the peer reads keep going, however long in all.
        for _ in 0..3 {
            io.write_all(b"0123456789abcdef").await.unwrap();
            let mut buf = [0; 16];
            far.read_exact(&mut buf).await.unwrap();
        }
        io.write_all(&[0; 16]).await.unwrap();
        let started = Instant::now();
        let error = io.write_all(b"the peer stopped reading").await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(
            started.elapsed() >= TIMEOUTS.write,
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn the_header_clock_runs_until_a_request_and_the_idle_clock_after_it() {
        let started = Instant::now();
        let activity = Activity::new();
        assert_eq!(activity.expired(TIMEOUTS).await, "header timeout");
        assert!(started.elapsed() >= TIMEOUTS.header);

        // A request in flight is neither; its end starts the idle clock.
        let request = activity.begin();
        let waiting = tokio::spawn({
            let activity = activity.clone();
            async move { activity.expired(TIMEOUTS).await }
        });
        tokio::time::sleep(TIMEOUTS.header * 2).await;
        assert!(!waiting.is_finished(), "a request in flight never expires");
        let ended = Instant::now();
        drop(request);
        assert_eq!(waiting.await.unwrap(), "idle timeout");
        assert!(ended.elapsed() >= TIMEOUTS.idle);

        // Between requests, the first byte of a head brings the header deadline in.
        let activity = Activity::new();
        drop(activity.begin());
        let waiting = tokio::spawn({
            let activity = activity.clone();
            async move { activity.expired(TIMEOUTS).await }
        });
        let head = Instant::now();
        activity.read();
        assert_eq!(waiting.await.unwrap(), "header timeout");
        assert!(head.elapsed() < TIMEOUTS.idle, "{:?}", head.elapsed());
    }
}
