//! A [`LogStream`] wrapper that counts fetches (tests and benchmarks; `test-util` feature).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use mink_s3stream::StreamBatch;
use mink_s3stream::error::StreamError;
use mink_s3stream::{AppendPermit, Build, Footprint, Offsets, PendingAppend, ReadBound};
use tokio::sync::watch;

use super::{LogStream, StreamLayer};

/// A stream wrapper that counts fetches, for measuring how many reads an operation costs (the
/// binary search of `offset_for_timestamp`, replay at open).
pub struct CountingStream {
    inner: Arc<dyn LogStream>,
    fetches: Arc<AtomicU64>,
}

impl CountingStream {
    /// A [`StreamLayer`] wrapping the opened stream, adding one to `fetches` per fetch.
    pub fn layer(fetches: Arc<AtomicU64>) -> StreamLayer {
        Arc::new(move |inner| {
            Arc::new(CountingStream {
                inner,
                fetches: Arc::clone(&fetches),
            }) as Arc<dyn LogStream>
        })
    }
}

#[async_trait]
impl LogStream for CountingStream {
    fn id(&self) -> u64 {
        self.inner.id()
    }

    fn epoch(&self) -> u64 {
        self.inner.epoch()
    }

    fn offsets(&self) -> Offsets {
        self.inner.offsets()
    }

    fn confirm_offset(&self) -> u64 {
        self.inner.confirm_offset()
    }

    fn watch_confirm(&self) -> watch::Receiver<u64> {
        self.inner.watch_confirm()
    }

    fn footprint(&self) -> Footprint {
        self.inner.footprint()
    }

    async fn reserve(&self, len: usize) -> Result<AppendPermit, StreamError> {
        self.inner.reserve(len).await
    }

    fn try_reserve(&self, len: usize) -> Option<Result<AppendPermit, StreamError>> {
        self.inner.try_reserve(len)
    }

    fn submit_with(
        &self,
        permit: &mut Option<AppendPermit>,
        build: &mut dyn FnMut(u64) -> Build,
    ) -> Result<Option<PendingAppend>, StreamError> {
        self.inner.submit_with(permit, build)
    }

    async fn fetch(
        &self,
        from: u64,
        to: u64,
        max_bytes: usize,
        bound: ReadBound,
    ) -> Result<Vec<StreamBatch>, StreamError> {
        self.fetches.fetch_add(1, Ordering::Relaxed);
        self.inner.fetch(from, to, max_bytes, bound).await
    }

    async fn trim(&self, offset: u64) -> Result<(), StreamError> {
        self.inner.trim(offset).await
    }

    async fn close(&self) -> Result<(), StreamError> {
        self.inner.close().await
    }

    async fn destroy(&self) -> Result<(), StreamError> {
        self.inner.destroy().await
    }
}
