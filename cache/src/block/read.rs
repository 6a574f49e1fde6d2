//! Reading a range: looking its pages up in both tiers, waiting for the missing ones (loaded by
//! `load.rs`), and cutting the range out of the pages: slices of them, copied together only for
//! callers that need one contiguous buffer.

use std::{ops::Range, sync::Arc};

use bytes::{Bytes, BytesMut};
use foyer::Source;

use super::load::Pending;
use super::page::PageKey;
use super::{Inner, PageLoader};
use crate::{error::CacheError, metrics::add};

impl Inner {
    /// Looks a page up in both tiers; `None` if absent or expired (an expired page is removed).
    async fn lookup(&self, key: PageKey) -> Option<Bytes> {
        let entry = match self.pages.get(&key).await {
            Ok(Some(entry)) => entry,
            Ok(None) => return None,
            Err(error) => {
                tracing::warn!(?key, %error, "block cache disk tier read failed; loading the page again");
                return None;
            }
        };
        if self.is_expired(&entry) {
            self.pages.remove(&key);
            add(&self.counters.block_expired, 1);
            return None;
        }
        match entry.source() {
            Source::Disk => add(&self.counters.block_disk_hits, 1),
            Source::Memory | Source::Outer => add(&self.counters.block_memory_hits, 1),
        }
        Some(entry.data.clone())
    }

    /// Reads a range as slices of its pages, in order (no copy); also says whether the reader
    /// had to wait for a load.
    pub(super) async fn read(
        self: &Arc<Self>,
        object_id: u64,
        object_size: u64,
        range: Range<u64>,
        loader: &Arc<dyn PageLoader>,
    ) -> Result<(Vec<Bytes>, bool), CacheError> {
        if range.start > range.end || range.end > object_size {
            return Err(CacheError::RangeOutOfBounds {
                object_id,
                range,
                object_size,
            });
        }
        if range.is_empty() {
            return Ok((Vec::new(), false));
        }
        let page_size = self.settings.page_size;
        let first = range.start / page_size;
        let last = (range.end - 1) / page_size;
        let mut pages = Vec::with_capacity((last - first + 1) as usize);
        let mut missing = Vec::new();
        for page_index in first..=last {
            let page = self.lookup(Self::page_key(object_id, page_index)).await;
            if page.is_none() {
                missing.push(page_index);
            }
            pages.push(page);
        }
        let waited = !missing.is_empty();
        if waited {
            let claimed = self.claim(object_id, object_size, &missing, loader, None);
            // Counted once the reader has joined or started the pages' loads: a miss the metrics
            // show is one those loads answer (a test that waits for the misses of its readers
            // before it lets a load end relies on it).
            add(&self.counters.block_misses, missing.len() as u64);
            for (page_index, pending) in claimed {
                let bytes = match pending {
                    Pending::Ready(bytes) => bytes,
                    Pending::Loading(rx) => Self::wait(object_id, page_index, rx).await?,
                };
                pages[(page_index - first) as usize] = Some(bytes);
            }
        }
        let parts = self.slices(object_id, object_size, first, &pages, &range)?;
        Ok((parts, waited))
    }

    /// The requested range's part of each of its pages.
    fn slices(
        &self,
        object_id: u64,
        object_size: u64,
        first: u64,
        pages: &[Option<Bytes>],
        range: &Range<u64>,
    ) -> Result<Vec<Bytes>, CacheError> {
        let page_size = self.settings.page_size;
        let mut parts = Vec::with_capacity(pages.len());
        for (i, page) in pages.iter().enumerate() {
            let page_index = first + i as u64;
            let page_start = page_index * page_size;
            let expected = page_size.min(object_size - page_start);
            let page = match page {
                Some(page) if page.len() as u64 == expected => page,
                other => {
                    return Err(CacheError::PageSizeMismatch {
                        object_id,
                        page_index,
                        expected,
                        actual: other.as_ref().map_or(0, |p| p.len() as u64),
                    });
                }
            };
            let from = range.start.max(page_start) - page_start;
            let to = range.end.min(page_start + expected) - page_start;
            parts.push(page.slice(from as usize..to as usize));
        }
        Ok(parts)
    }
}

impl Inner {
    /// [`Inner::read`] as one `Bytes`: the slices copied together unless there is only one.
    pub(super) async fn read_joined(
        self: &Arc<Self>,
        object_id: u64,
        object_size: u64,
        range: Range<u64>,
        loader: &Arc<dyn PageLoader>,
    ) -> Result<Bytes, CacheError> {
        let (parts, _waited) = self.read(object_id, object_size, range, loader).await?;
        Ok(joined(parts))
    }
}

/// The parts as one `Bytes`: copied together unless there is only one.
fn joined(mut parts: Vec<Bytes>) -> Bytes {
    if parts.len() <= 1 {
        return parts.pop().unwrap_or_default();
    }
    let mut out = BytesMut::with_capacity(parts.iter().map(Bytes::len).sum());
    for part in parts {
        out.extend_from_slice(&part);
    }
    out.freeze()
}
