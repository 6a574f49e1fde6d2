//! Server-sent events: a held-open read of one bucket.
//!
//! Each batch becomes one event: `data` is a JSON array of its rows (projected to `columns`), `id`
//! is the offset after the batch. A batch whose rows render past `http.max_render_bytes` is
//! split into several events, each of at most the bound plus one piece of rows, each `id` the
//! offset after its last row; a stream may start inside a batch (a `Last-Event-ID` of a split
//! batch), and sends the rows from there. Events are rendered one at a time as the client takes
//! them; the events of a small batch sent whole are rendered once for every stream that sends
//! them (`shared_renders.rs`) and sent by each as the same bytes (`sse_frames.rs`). An open
//! stream holds a place of the parked-read limits (`parked.rs`) until it ends; past them it is
//! refused with 429. At the tail the stream parks on the log's high-watermark waiter,
//! so an event leaves the moment its append is durable. Heartbeat comments (`: heartbeat`) keep
//! idle proxies from closing the connection (one after each heartbeat interval parked with
//! nothing new), and the response ends after the recycle time (55 s by
//! default). A client reconnecting with `Last-Event-ID` (or `offset`) continues exactly after the
//! last event it saw: offsets, not the connection, carry the position. A failure after the
//! response started is sent as an `error` event carrying the usual JSON error body, then the
//! stream ends.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;

use super::headers::position_headers;
use super::parked::ParkedRead;
use super::read::{Parking, ReadQuery, start_offset, stored_rows};
use super::shared_renders::{
    BatchEvents, EventsKey, MAX_SHARED_STORED_BYTES, SharedBatch, SharedEvent, SharedEvents,
};
use super::sse_frames::{self, HEARTBEAT};
use crate::bucket_log::{BucketLog, TailPark, Woken};
use crate::catalog::TableInfo;
use crate::core::NodeCore;
use crate::error::{ApiError, ApiResult};
use crate::format::{self, StoredRows};

/// One SSE response's position and what it has yet to send.
struct Feed {
    core: Arc<NodeCore>,
    info: Arc<TableInfo>,
    log: Arc<dyn BucketLog>,
    /// The offset after the last event sent.
    next: u64,
    until: Option<u64>,
    columns: Option<Vec<String>>,
    max_bytes: usize,
    max_render_bytes: usize,
    deadline: Instant,
    /// How long a parked stream waits before it sends a heartbeat comment.
    heartbeat: Duration,
    /// What a parked stream waits on, taken once: the log's tail, the node's shutdown and the
    /// heartbeat's timer.
    tail: TailPark,
    /// Stored batches read and not yet sent.
    queue: VecDeque<Bytes>,
    /// Where the read that filled `queue` ends.
    queue_end: u64,
    /// The batch being sent: its rows, and the row range left to send.
    current: Option<(StoredRows, usize, usize)>,
    /// The batch being sent from shared events: they, and the next to send.
    sending: Option<(BatchEvents, usize)>,
    /// The events of small batches, shared by the router's streams.
    shared: Arc<SharedEvents>,
    done: bool,
    /// The feed parked at the tail since its last read: what it reads next is a delivery to a
    /// parked reader.
    parked: bool,
    /// This stream's place among the parked reads, given back when the stream is dropped.
    _place: ParkedRead,
}

/// The SSE response of a read.
pub(crate) fn serve(
    core: Arc<NodeCore>,
    info: Arc<TableInfo>,
    log: Arc<dyn BucketLog>,
    q: ReadQuery,
    headers: &HeaderMap,
    parking: &Parking,
) -> ApiResult<Response> {
    let offsets = log.offsets();
    let from = match headers.get("last-event-id") {
        Some(id) => id
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| ApiError::bad_request("Last-Event-ID is not an offset"))?,
        None => start_offset(q.offset.as_deref(), offsets)?,
    };
    if from < offsets.log_start {
        return Err(ApiError::OffsetTrimmed {
            offset: from,
            log_start: offsets.log_start,
        });
    }
    if from > offsets.high_watermark {
        return Err(ApiError::OffsetOutOfRange {
            offset: from,
            high_watermark: offsets.high_watermark,
        });
    }
    let columns = q.columns();
    if let (Some(c), Some((id, _))) = (&columns, info.schemas.latest()) {
        info.read_schema(id, Some(c))?;
    }
    let place = parking.admit()?;
    let http = &core.settings().http;
    let deadline = Instant::now() + http.sse_recycle;
    let heartbeat = http.sse_heartbeat_interval();
    let feed = Feed {
        max_bytes: q.max_bytes(http),
        max_render_bytes: http.max_render_bytes,
        deadline,
        heartbeat,
        tail: TailPark::new(
            log.watch_tail(),
            core.shutdown_signal(),
            (Instant::now() + heartbeat).min(deadline),
        ),
        core,
        info,
        log,
        next: from,
        until: q.until,
        columns,
        queue: VecDeque::new(),
        queue_end: from,
        current: None,
        sending: None,
        shared: parking.reads.events.clone(),
        done: false,
        parked: false,
        _place: place,
    };
    let frames = futures::stream::unfold(feed, |mut feed| async move {
        let frame = feed.next_event().await?;
        Some((Ok::<_, Infallible>(frame), feed))
    });
    let mut response = Response::new(Body::from_stream(frames));
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Tell nginx-style proxies not to buffer the stream.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    position_headers(h, from, offsets);
    Ok(response)
}

impl Feed {
    /// The next bytes to send: an event, or a heartbeat comment after a wait at the tail with
    /// nothing new; `None` when the stream ends.
    async fn next_event(&mut self) -> Option<Bytes> {
        loop {
            match self.next_queued() {
                Ok(Some(event)) => return Some(event),
                Ok(None) => {}
                Err(error) => return Some(self.fail(&error)),
            }
            if self.done
                || Instant::now() >= self.deadline
                || self.core.is_shutting_down()
                || self.until.is_some_and(|u| self.next >= u)
            {
                return None;
            }
            match self.read().await {
                Ok(true) => {}
                Ok(false) => {
                    if !self.park().await
                        && !self.done
                        && Instant::now() < self.deadline
                        && !self.core.is_shutting_down()
                    {
                        return Some(Bytes::from_static(HEARTBEAT));
                    }
                }
                Err(error) => return Some(self.fail(&error)),
            }
        }
    }

    /// The `error` event that ends the stream.
    fn fail(&mut self, error: &ApiError) -> Bytes {
        self.done = true;
        self.queue.clear();
        self.current = None;
        self.sending = None;
        sse_frames::event(Some("error"), None, error.body().to_string().as_bytes())
    }

    /// The next event of the batches read, rendered now; `None` once they are all sent.
    fn next_queued(&mut self) -> ApiResult<Option<Bytes>> {
        loop {
            if let Some((events, at)) = &mut self.sending {
                if let Some(event) = events.events.get(*at) {
                    *at += 1;
                    self.next = event.next;
                    return Ok(Some(event.frame.clone()));
                }
                self.sending = None;
            }
            if let Some((rows, start, end)) = &mut self.current {
                if *start < *end {
                    let event =
                        format::json_array_event(rows, *start, *end, self.max_render_bytes)?;
                    *start = event.end;
                    self.next = rows.base_offset + event.end as u64;
                    return Ok(Some(sse_frames::rows_event(
                        self.next,
                        event.data.as_bytes(),
                    )));
                }
                self.current = None;
            }
            let Some(batch) = self.queue.pop_front() else {
                // Whatever the batches held, the next read starts after them.
                self.next = self.next.max(self.queue_end);
                return Ok(None);
            };
            if let Some(events) = self.shared_events(&batch)? {
                self.sending = Some((events, 0));
                continue;
            }
            let schema = self
                .info
                .read_schema(format::schema_id_of(&batch)?, self.columns.as_deref())?;
            match stored_rows(&batch, &schema)? {
                Some(rows) => {
                    let (start, end) = rows.window(self.next, self.until);
                    self.current = Some((rows, start, end));
                }
                None => {
                    self.next = self.next.max(format::next_offset_of(&batch)?);
                    return Ok(Some(sse_frames::rows_event(self.next, b"[]")));
                }
            }
        }
    }

    /// The events of `batch` from the shared ones, rendering and sharing them if no stream has
    /// yet; `None` when this stream renders its own (the batch is large, or not sent whole).
    fn shared_events(&self, batch: &Bytes) -> ApiResult<Option<BatchEvents>> {
        if batch.len() > MAX_SHARED_STORED_BYTES {
            return Ok(None);
        }
        let base = format::base_offset_of(batch)?;
        let end = format::next_offset_of(batch)?;
        if self.next > base || self.until.is_some_and(|u| u < end) {
            return Ok(None);
        }
        let columns = self.columns.as_deref();
        let kept = self.shared.get(&self.log, |k| {
            k.base_offset == base && k.columns.as_deref() == columns
        });
        if let Some(events) = kept {
            return Ok(Some(events));
        }
        let schema = self
            .info
            .read_schema(format::schema_id_of(batch)?, columns)?;
        let mut events = Vec::new();
        match stored_rows(batch, &schema)? {
            Some(rows) => {
                let (mut start, stop) = (0, rows.rows.num_rows());
                while start < stop {
                    let event =
                        format::json_array_event(&rows, start, stop, self.max_render_bytes)?;
                    start = event.end;
                    events.push(SharedEvent::new(
                        rows.base_offset + event.end as u64,
                        &event.data,
                    ));
                }
            }
            None => events.push(SharedEvent::new(end, "[]")),
        }
        let bytes = events
            .iter()
            .map(|e| e.frame.len() + std::mem::size_of::<SharedEvent>())
            .sum();
        let events: BatchEvents = Arc::new(SharedBatch {
            events,
            stored_len: batch.len(),
            commit_timestamp: format::commit_timestamp_of(batch),
        });
        let key = EventsKey {
            base_offset: base,
            columns: columns.map(<[String]>::to_vec),
        };
        self.shared.insert(&self.log, key, &events, bytes);
        Ok(Some(events))
    }

    /// Reads at `next`, queueing the batches; false when at the tail. A stream woken at the tail
    /// first takes the events another stream of the log rendered of the batch at `next`, if one
    /// did, without reading; a stream at the high watermark does not read.
    async fn read(&mut self) -> ApiResult<bool> {
        if self.parked
            && let Some(events) = self.rendered_next()
        {
            self.parked = false;
            self.core
                .delivered_shared(events.stored_len, events.commit_timestamp);
            self.sending = Some((events, 0));
            return Ok(true);
        }
        if self.next >= self.tail.high_watermark() {
            return Ok(false);
        }
        let chunk = self
            .core
            .read(
                self.log.as_ref(),
                self.next,
                self.until,
                self.columns.as_deref(),
                self.max_bytes,
            )
            .await?;
        if chunk.batches.is_empty() {
            return Ok(false);
        }
        if std::mem::take(&mut self.parked) {
            self.core.delivered_to_parked(&chunk);
        }
        self.queue.extend(chunk.batches);
        self.queue_end = chunk.next_offset;
        Ok(true)
    }

    /// The events of the batch at `next`, whole within `until`, when another stream of the log
    /// rendered them.
    fn rendered_next(&self) -> Option<BatchEvents> {
        // Below the log start a read is refused, as it would be had this stream read.
        if self.next < self.log.offsets().log_start {
            return None;
        }
        let columns = self.columns.as_deref();
        let events = self.shared.get(&self.log, |k| {
            k.base_offset == self.next && k.columns.as_deref() == columns
        })?;
        let end = events.events.last()?.next;
        self.until.is_none_or(|u| end <= u).then_some(events)
    }

    /// Waits at the tail until new data is durable, the log closes, the heartbeat or recycle
    /// time comes or the node shuts down; true when new data is durable. The heartbeat is due one
    /// interval after the stream parked.
    async fn park(&mut self) -> bool {
        let due = (Instant::now() + self.heartbeat).min(self.deadline);
        let _parked = self.core.metrics().park();
        let arrived = match self.tail.park(self.next, due).await {
            Woken::Past(high_watermark) => high_watermark > self.next,
            Woken::Closed => {
                self.done = true;
                false
            }
            Woken::Due | Woken::Shutdown => false,
        };
        self.parked = true;
        if !arrived && self.log.is_closed() {
            self.done = true;
        }
        arrived
    }
}
