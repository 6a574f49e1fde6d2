//! `live=sse` (docs/durable-streams.md, "Reads"): each read of the log becomes one `data` event
//! (the messages as the stream's content type gives them: text split into `data:` lines, JSON as
//! one array, binary as base64) followed by a `control` event with `streamNextOffset`,
//! `streamCursor` and `upToDate`. A response that starts at the tail (an empty stream,
//! `offset=now`) opens with a control event. At the tail the response parks on the log's
//! waiter, sending comment heartbeats; at the end of a closed stream the last control event says
//! `streamClosed` (and carries no cursor), and the response ends. It ends too after the node's
//! SSE recycle time, the client resuming from the last `streamNextOffset`. An open response
//! holds a place of the parked-read limits.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use base64::Engine;
use bytes::Bytes;

use super::answer::{self, Refusal, SSE_ENCODING};
use super::config::Mode;
use super::messages::read_messages;
use super::offsets::{self, Start};
use super::opened::{Opened, now_ms};
use crate::bucket_log::{TailPark, Woken};
use crate::core::NodeCore;
use crate::http::parked::ParkedRead;
use crate::http::read::Parking;
use crate::http::sse_frames::{HEARTBEAT, lines};

/// One SSE response's position.
struct Feed {
    core: Arc<NodeCore>,
    opened: Opened,
    /// Where the next read starts (the last `streamNextOffset` sent).
    next: u64,
    /// The cursor every control event of this response carries.
    cursor: String,
    deadline: Instant,
    heartbeat: Duration,
    /// Nothing was sent yet: at the tail, the first thing sent is a control event.
    first: bool,
    done: bool,
    /// What the response waits on at the tail, taken once: the log's tail, the node's shutdown
    /// and the heartbeat's timer.
    tail: TailPark,
    _place: ParkedRead,
}

/// The SSE response of a read.
pub(crate) async fn serve(
    core: Arc<NodeCore>,
    opened: Opened,
    offset: Option<&str>,
    cursor: Option<&str>,
    parking: &Parking,
) -> Result<Response, Refusal> {
    let log_offsets = opened.log.offsets();
    let from = match offsets::parse(offset)? {
        Start::Beginning => log_offsets.log_start,
        Start::Now => log_offsets.high_watermark,
        Start::At(o) => offsets::check(o, log_offsets)?,
    };
    let place = parking.admit()?;
    let http = &core.settings().http;
    let binary = opened.mode == Mode::Binary;
    let content_type = opened.config.content_type.clone();
    let deadline = Instant::now() + http.sse_recycle;
    let heartbeat = http.sse_heartbeat_interval();
    let feed = Feed {
        next: from,
        cursor: offsets::cursor(cursor),
        deadline,
        heartbeat,
        first: true,
        done: false,
        tail: TailPark::new(
            opened.log.watch_tail(),
            core.shutdown_signal(),
            (Instant::now() + heartbeat).min(deadline),
        ),
        _place: place,
        core,
        opened,
    };
    let frames = futures::stream::unfold(feed, |mut feed| async move {
        let frame = feed.next_frame().await?;
        Some((Ok::<_, Infallible>(frame), feed))
    });
    let mut response = Response::new(axum::body::Body::from_stream(frames));
    *response.status_mut() = StatusCode::OK;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Tell nginx-style proxies not to buffer the stream.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if binary {
        answer::set(h, SSE_ENCODING, "base64");
    }
    tracing::trace!(content_type, from, "sse stream opened");
    Ok(response)
}

impl Feed {
    /// The next bytes to send: events, or a heartbeat comment; `None` when the response ends.
    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if self.done {
                return None;
            }
            let read = match read_messages(
                &self.core,
                self.opened.log.as_ref(),
                self.opened.mode,
                self.next,
                self.core.settings().ds.max_read_bytes,
            )
            .await
            {
                Ok(read) => read,
                Err(error) => {
                    tracing::debug!(%error, "a stream's SSE read failed; ending the response");
                    self.done = true;
                    return None;
                }
            };
            let moved = read.next > self.next;
            if moved || !read.body.is_empty() || self.first {
                self.first = false;
                self.next = read.next;
                let up_to_date = read.next >= self.opened.log.offsets().high_watermark;
                let closed = up_to_date && self.closed().await;
                let mut frame = Vec::new();
                if !read.body.is_empty() {
                    data_event(&mut frame, self.opened.mode, &read.body.finish());
                }
                self.control_event(&mut frame, up_to_date, closed);
                self.done = closed;
                return Some(Bytes::from(frame));
            }
            if Instant::now() >= self.deadline || self.core.is_shutting_down() {
                return None;
            }
            let due = (Instant::now() + self.heartbeat).min(self.deadline);
            let parked = self.core.metrics().park();
            let arrived = match self.tail.park(self.next, due).await {
                Woken::Past(high_watermark) => high_watermark > self.next,
                Woken::Due => false,
                // The tablet closed (shutdown, transfer): the client resumes where it was.
                Woken::Closed | Woken::Shutdown => return None,
            };
            drop(parked);
            if self.opened.log.is_closed() {
                // The tablet closed (shutdown, transfer): the client resumes where it was.
                return None;
            }
            if !arrived {
                self.opened.stream.touch(now_ms(&self.core));
                return Some(Bytes::from_static(HEARTBEAT));
            }
        }
    }

    async fn closed(&self) -> bool {
        self.opened.closed(&self.core).await.unwrap_or(false)
    }

    fn control_event(&self, out: &mut Vec<u8>, up_to_date: bool, closed: bool) {
        let mut control = serde_json::Map::new();
        control.insert(
            "streamNextOffset".to_owned(),
            offsets::render(self.next).into(),
        );
        if closed {
            control.insert("streamClosed".to_owned(), true.into());
        } else {
            control.insert("streamCursor".to_owned(), self.cursor.clone().into());
        }
        if up_to_date {
            control.insert("upToDate".to_owned(), true.into());
        }
        out.extend_from_slice(b"event: control\ndata:");
        out.extend_from_slice(serde_json::Value::Object(control).to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }
}

/// Appends a `data` event of `body` to `out`: base64 for binary streams, else the text split at
/// every line end (CR LF, LF, CR) into `data:` lines, so nothing in a message can end the event.
fn data_event(out: &mut Vec<u8>, mode: Mode, body: &[u8]) {
    out.extend_from_slice(b"event: data\n");
    if mode == Mode::Binary {
        out.extend_from_slice(b"data:");
        out.extend_from_slice(
            base64::engine::general_purpose::STANDARD
                .encode(body)
                .as_bytes(),
        );
        out.push(b'\n');
    } else {
        for line in lines(body) {
            out.extend_from_slice(b"data:");
            if line.first() == Some(&b' ') {
                // A reader drops one space after the colon: keep the message's own.
                out.push(b' ');
            }
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_cannot_make_events_of_their_own() {
        let mut out = Vec::new();
        data_event(
            &mut out,
            Mode::Text,
            b"x\r\n\r\nevent: control\ndata: {}\r\r",
        );
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "event: data\ndata:x\ndata:\ndata:event: control\ndata:data: {}\ndata:\ndata:\n\n"
        );
        assert_eq!(text.matches("\n\n").count(), 1);
        let mut out = Vec::new();
        data_event(&mut out, Mode::Text, b" indented");
        assert_eq!(out, b"event: data\ndata:  indented\n\n");
        let mut out = Vec::new();
        data_event(&mut out, Mode::Binary, b"Hello");
        assert_eq!(out, b"event: data\ndata:SGVsbG8=\n\n");
    }
}
