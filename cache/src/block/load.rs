//! Loading pages single-flight: the in-flight table, the spawned ranged loads of adjacent pages, and
//! readahead loads bounded to their share of the memory tier.

use std::{
    ops::Range,
    sync::{Arc, atomic::Ordering},
};

use bytes::Bytes;
use tokio::sync::watch;

use super::page::Page;
use super::{Inner, PageLoader, PageResult};
use crate::{error::CacheError, metrics::add};

/// A page a reader will get: at hand, or from a load in flight.
pub(super) enum Pending {
    Ready(Bytes),
    Loading(watch::Receiver<Option<PageResult>>),
}

impl Inner {
    /// Waits for a page's load in flight to report.
    pub(super) async fn wait(
        object_id: u64,
        page_index: u64,
        mut rx: watch::Receiver<Option<PageResult>>,
    ) -> PageResult {
        match rx.wait_for(Option::is_some).await {
            Ok(result) => match &*result {
                Some(result) => result.clone(),
                None => Err(CacheError::LoadAbandoned {
                    object_id,
                    page_index,
                }),
            },
            Err(_) => Err(CacheError::LoadAbandoned {
                object_id,
                page_index,
            }),
        }
    }

    /// For each page: joins its load in flight, takes it from memory, or becomes its loader. The pages
    /// this call must load are loaded by spawned tasks, adjacent ones together.
    pub(super) fn claim(
        self: &Arc<Self>,
        object_id: u64,
        object_size: u64,
        page_indexes: &[u64],
        loader: &Arc<dyn PageLoader>,
        readahead: Option<Arc<ReadaheadReservation>>,
    ) -> Vec<(u64, Pending)> {
        let mut out = Vec::with_capacity(page_indexes.len());
        let mut mine: Vec<(u64, watch::Sender<Option<PageResult>>)> = Vec::new();
        {
            let mut inflight = self.inflight.lock();
            for &page_index in page_indexes {
                let key = Self::page_key(object_id, page_index);
                if let Some(rx) = inflight.get(&key) {
                    out.push((page_index, Pending::Loading(rx.clone())));
                    continue;
                }
                // A load may have finished between the reader's lookup and now.
                if let Some(entry) = self.pages.memory().get(&key)
                    && !self.is_expired(&entry)
                {
                    out.push((page_index, Pending::Ready(entry.data.clone())));
                    continue;
                }
                let (tx, rx) = watch::channel(None);
                inflight.insert(key, rx.clone());
                out.push((page_index, Pending::Loading(rx)));
                mine.push((page_index, tx));
            }
        }
        let pages_per_load =
            (self.settings.max_load_bytes / self.settings.page_size).max(1) as usize;
        let mut run: Vec<(u64, watch::Sender<Option<PageResult>>)> = Vec::new();
        for (page_index, tx) in mine {
            let adjacent = run.last().is_some_and(|(last, _)| *last + 1 == page_index);
            if !run.is_empty() && (!adjacent || run.len() >= pages_per_load) {
                self.spawn_load(
                    object_id,
                    object_size,
                    std::mem::take(&mut run),
                    loader,
                    readahead.clone(),
                );
            }
            run.push((page_index, tx));
        }
        if !run.is_empty() {
            self.spawn_load(object_id, object_size, run, loader, readahead);
        }
        out
    }

    fn spawn_load(
        self: &Arc<Self>,
        object_id: u64,
        object_size: u64,
        run: Vec<(u64, watch::Sender<Option<PageResult>>)>,
        loader: &Arc<dyn PageLoader>,
        readahead: Option<Arc<ReadaheadReservation>>,
    ) {
        let first = run.first().map_or(0, |(i, _)| *i);
        let load = LoadRun {
            inner: Arc::clone(self),
            object_id,
            object_size,
            first,
            senders: run.into_iter().map(|(_, tx)| tx).collect(),
            loader: Arc::clone(loader),
            readahead,
        };
        tokio::spawn(load.run());
    }

    /// Starts loading the pages covering `ahead` that are in neither tier nor in flight.
    pub(super) fn read_ahead(
        self: &Arc<Self>,
        object_id: u64,
        object_size: u64,
        ahead: Range<u64>,
        loader: &Arc<dyn PageLoader>,
    ) {
        let page_size = self.settings.page_size;
        if ahead.is_empty() || ahead.end > object_size {
            return;
        }
        let missing: Vec<u64> = (ahead.start / page_size..=(ahead.end - 1) / page_size)
            .filter(|&i| !self.pages.contains(&Self::page_key(object_id, i)))
            .collect();
        if missing.is_empty() {
            return;
        }
        let bytes = missing.len() as u64 * page_size;
        let budget =
            self.settings.memory_bytes / 100 * u64::from(self.readahead.max_inflight_percent);
        let before = self.readahead_inflight.fetch_add(bytes, Ordering::AcqRel);
        if before + bytes > budget {
            self.readahead_inflight.fetch_sub(bytes, Ordering::AcqRel);
            add(&self.counters.readahead_skipped, 1);
            tracing::debug!(
                object_id,
                ?ahead,
                "readahead skipped: readahead in flight is at its budget"
            );
            return;
        }
        let reservation = Arc::new(ReadaheadReservation {
            inner: Arc::downgrade(self),
            bytes,
        });
        // The waiters are dropped: nobody waits for readahead, readers join its loads.
        drop(self.claim(object_id, object_size, &missing, loader, Some(reservation)));
    }
}

/// Readahead bytes counted against the in-flight budget until every load of the window has finished.
pub(super) struct ReadaheadReservation {
    inner: std::sync::Weak<Inner>,
    bytes: u64,
}

impl Drop for ReadaheadReservation {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            inner
                .readahead_inflight
                .fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

/// One ranged load of adjacent pages. Dropping it (after the load, or if its task dies) removes its
/// pages from the in-flight table; waiters of a load that never reported see `LoadAbandoned`.
struct LoadRun {
    inner: Arc<Inner>,
    object_id: u64,
    object_size: u64,
    first: u64,
    senders: Vec<watch::Sender<Option<PageResult>>>,
    loader: Arc<dyn PageLoader>,
    /// Held until the load ends; `Some` for readahead loads.
    readahead: Option<Arc<ReadaheadReservation>>,
}

impl LoadRun {
    async fn run(self) {
        let inner = &self.inner;
        let page_size = inner.settings.page_size;
        let count = self.senders.len() as u64;
        let start = self.first * page_size;
        let end = ((self.first + count) * page_size).min(self.object_size);
        let range = start..end;
        add(&inner.counters.loads, 1);
        if self.readahead.is_some() {
            add(&inner.counters.readahead_loads, 1);
        }
        let result = if count == 1 {
            self.loader
                .load(self.object_id, range.clone())
                .await
                .map(|bytes| vec![bytes])
        } else {
            self.loader
                .load_pages(self.object_id, range.clone(), page_size)
                .await
        };
        let expected_len = |i: u64| ((i + 1) * page_size).min(end - start) - i * page_size;
        let whole = |pages: &[Bytes]| {
            pages.len() as u64 == count
                && pages
                    .iter()
                    .enumerate()
                    .all(|(i, p)| p.len() as u64 == expected_len(i as u64))
        };
        let results: Vec<PageResult> = match result {
            Ok(pages) if whole(&pages) => {
                add(&inner.counters.bytes_loaded, end - start);
                let loaded_at_ms = inner.clock.now_ms_unsigned();
                pages
                    .into_iter()
                    .enumerate()
                    .map(|(i, data)| {
                        let key = Inner::page_key(self.object_id, self.first + i as u64);
                        inner.pages.insert(
                            key,
                            Page {
                                data: data.clone(),
                                loaded_at_ms,
                            },
                        );
                        Ok(data)
                    })
                    .collect()
            }
            Ok(pages) => {
                add(&inner.counters.load_errors, 1);
                let error = CacheError::ShortLoad {
                    object_id: self.object_id,
                    range: range.clone(),
                    expected: end - start,
                    actual: pages.iter().map(|p| p.len() as u64).sum(),
                };
                vec![Err(error); count as usize]
            }
            Err(source) => {
                add(&inner.counters.load_errors, 1);
                tracing::debug!(object_id = self.object_id, ?range, error = %source, "page load failed");
                let error = CacheError::Load {
                    object_id: self.object_id,
                    range: range.clone(),
                    source: Arc::new(source),
                };
                vec![Err(error); count as usize]
            }
        };
        for (tx, result) in self.senders.iter().zip(results) {
            tx.send_replace(Some(result));
        }
    }
}

impl Drop for LoadRun {
    fn drop(&mut self) {
        let mut inflight = self.inner.inflight.lock();
        for i in 0..self.senders.len() as u64 {
            inflight.remove(&Inner::page_key(self.object_id, self.first + i));
        }
    }
}
