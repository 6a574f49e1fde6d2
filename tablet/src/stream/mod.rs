//! The stream a tablet appends to, behind a small trait so tests and instrumentation can wrap it.
//!
//! The tablet only needs what [`LogStream`] lists; [`mink_s3stream::Stream`] implements it, and
//! [`TabletBuilder::stream_layer`](crate::TabletBuilder::stream_layer) lets a caller wrap the opened
//! stream (a test counts fetches this way: `CountingStream` in `counting.rs`, behind the
//! `test-util` feature).

#[cfg(feature = "test-util")]
mod counting;

use std::sync::Arc;

use async_trait::async_trait;
use mink_s3stream::StreamBatch;
use mink_s3stream::error::StreamError;
use mink_s3stream::{AppendPermit, Build, Footprint, Offsets, PendingAppend, ReadBound, Stream};
use tokio::sync::watch;

#[cfg(feature = "test-util")]
pub use counting::CountingStream;

/// An ordered log of opaque batches with start, confirm and next offsets.
///
/// # Contract
///
/// The same as [`mink_s3stream::Stream`]'s methods of the same names: `submit_with` runs its
/// builder under the stream's sequencing lock with the next offset and appends what it builds;
/// `PendingAppend::durable` resolves in submission order; the confirm watch only moves forward, at the
/// moment an append becomes durable; `fetch` returns whole batches starting with the one holding
/// `from`, at least one when any is below the bound.
#[async_trait]
pub trait LogStream: Send + Sync + 'static {
    /// The stream id.
    fn id(&self) -> u64;
    /// The epoch this handle holds.
    fn epoch(&self) -> u64;
    /// The three offsets now.
    fn offsets(&self) -> Offsets;
    /// The confirm offset now.
    fn confirm_offset(&self) -> u64;
    /// A receiver of the confirm offset.
    fn watch_confirm(&self) -> watch::Receiver<u64>;
    /// What the stream keeps from its start offset, piece by piece with sizes (retention).
    fn footprint(&self) -> Footprint;
    /// Reserves room for a batch of `len` bytes under the node's budget of uncompacted data
    /// (waits, bounded, while it is full).
    async fn reserve(&self, len: usize) -> Result<AppendPermit, StreamError>;
    /// [`LogStream::reserve`] if it needs no wait; `None` otherwise (the default: always wait).
    fn try_reserve(&self, len: usize) -> Option<Result<AppendPermit, StreamError>> {
        let _ = len;
        None
    }
    /// Appends what `build` decides given the next offset, under the stream's sequencing lock,
    /// with room reserved by [`LogStream::reserve`]; does not wait. See
    /// [`Stream::submit_with`].
    fn submit_with(
        &self,
        permit: &mut Option<AppendPermit>,
        build: &mut dyn FnMut(u64) -> Build,
    ) -> Result<Option<PendingAppend>, StreamError>;
    /// Whole batches from the one holding `from` up to `to`, about `max_bytes`.
    async fn fetch(
        &self,
        from: u64,
        to: u64,
        max_bytes: usize,
        bound: ReadBound,
    ) -> Result<Vec<StreamBatch>, StreamError>;
    /// Moves the start offset forward.
    async fn trim(&self, offset: u64) -> Result<(), StreamError>;
    /// Closes the stream so another node can open it.
    async fn close(&self) -> Result<(), StreamError>;
    /// Deletes the stream.
    async fn destroy(&self) -> Result<(), StreamError>;
}

/// Compile-time check that [`LogStream`] stays object-safe.
fn _assert_object_safe(_: &dyn LogStream) {}

/// A wrapper over the stream the tablet opened, applied once at open (tests, instrumentation).
pub type StreamLayer = Arc<dyn Fn(Arc<dyn LogStream>) -> Arc<dyn LogStream> + Send + Sync>;

#[async_trait]
impl LogStream for Stream {
    fn id(&self) -> u64 {
        Stream::id(self)
    }

    fn epoch(&self) -> u64 {
        Stream::epoch(self)
    }

    fn offsets(&self) -> Offsets {
        Stream::offsets(self)
    }

    fn confirm_offset(&self) -> u64 {
        Stream::confirm_offset(self)
    }

    fn watch_confirm(&self) -> watch::Receiver<u64> {
        Stream::watch_confirm(self)
    }

    fn footprint(&self) -> Footprint {
        Stream::footprint(self)
    }

    async fn reserve(&self, len: usize) -> Result<AppendPermit, StreamError> {
        Stream::reserve(self, len).await
    }

    fn try_reserve(&self, len: usize) -> Option<Result<AppendPermit, StreamError>> {
        Stream::try_reserve(self, len)
    }

    fn submit_with(
        &self,
        permit: &mut Option<AppendPermit>,
        build: &mut dyn FnMut(u64) -> Build,
    ) -> Result<Option<PendingAppend>, StreamError> {
        Stream::submit_with(self, permit, build)
    }

    async fn fetch(
        &self,
        from: u64,
        to: u64,
        max_bytes: usize,
        bound: ReadBound,
    ) -> Result<Vec<StreamBatch>, StreamError> {
        Stream::fetch(self, from, to, max_bytes, bound).await
    }

    async fn trim(&self, offset: u64) -> Result<(), StreamError> {
        Stream::trim(self, offset).await
    }

    async fn close(&self) -> Result<(), StreamError> {
        Stream::close(self).await
    }

    async fn destroy(&self) -> Result<(), StreamError> {
        Stream::destroy(self).await
    }
}
