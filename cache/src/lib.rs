//! Mink's read caches, which sit between a stream's readers and the object store.
//!
//! - [`TailCache`]: the most recent batches of each stream, filled by the write path only
//!   ([`TailCache::append`]), so a reader keeping up with a writer is served without entering the
//!   engine. Bounded by a byte budget, least recently used first out; trimmed and dropped per stream.
//! - [`BlockCache`]: fixed-size pages of committed objects in memory (and on disk when configured),
//!   LRU with a TTL, loaded through a caller-supplied [`PageLoader`] with one load per page however many
//!   readers wait on it; sequential readers get a growing readahead window ([`ReadaheadState`]).
//! - [`IndexCache`]: parsed footers/indexes of committed objects, keyed by object id.
//! - [`CacheMetrics`]: hit, miss and load counters of all of them.
//!
//! The crate knows nothing about object storage or the batch format: objects are ids and sizes, data is
//! [`bytes::Bytes`], and loading is the caller's [`PageLoader`]. [`Caches`] opens all three from one
//! [`CacheSettings`], sharing one set of counters.

mod block;
mod error;
mod metrics;
mod settings;
mod tail;

use std::sync::Arc;

use bytes::Bytes;

pub use mink_runtime::{Clock, SystemClock};

pub use crate::{
    block::{BlockCache, BlockCacheBuilder, IndexCache, PageLoader, ReadaheadState, Weighted},
    error::{CacheError, LoadError},
    metrics::CacheMetrics,
    settings::{BlockCacheSettings, CacheSettings, ReadaheadSettings, TailCacheSettings},
    tail::{CachedBatch, TailCache, TailRead},
};

// The loader is held as a trait object: keep it object-safe.
const _: () = {
    fn _page_loader_is_object_safe(_: &dyn PageLoader) {}
};

/// The caches of one node, opened from one [`CacheSettings`] and sharing one set of counters.
///
/// `I` is what the index cache holds per object (default: the index bytes).
#[derive(Debug)]
pub struct Caches<I = Bytes> {
    /// The tail cache.
    pub tail: TailCache,
    /// The block cache.
    pub blocks: BlockCache,
    /// The object index cache.
    pub indexes: IndexCache<I>,
    counters: Arc<metrics::Counters>,
}

impl<I: Clone + Send + Sync + 'static> Clone for Caches<I> {
    fn clone(&self) -> Self {
        Self {
            tail: self.tail.clone(),
            blocks: self.blocks.clone(),
            indexes: self.indexes.clone(),
            counters: Arc::clone(&self.counters),
        }
    }
}

impl<I> Caches<I>
where
    I: Weighted + Clone + Send + Sync + 'static,
{
    /// Opens the caches with the system clock.
    pub async fn open(settings: &CacheSettings) -> Result<Self, CacheError> {
        Self::open_with_clock(settings, Arc::new(SystemClock)).await
    }

    /// Opens the caches, measuring page ages with `clock`.
    pub async fn open_with_clock(
        settings: &CacheSettings,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, CacheError> {
        let counters = Arc::new(metrics::Counters::default());
        let blocks = BlockCache::builder(settings.block.clone())
            .readahead(settings.readahead.clone())
            .clock(clock)
            .counters(Arc::clone(&counters))
            .build()
            .await?;
        Ok(Self {
            tail: TailCache::with_counters(&settings.tail, Arc::clone(&counters)),
            blocks,
            indexes: IndexCache::with_counters(
                settings.block.index_capacity_bytes,
                Arc::clone(&counters),
            ),
            counters,
        })
    }

    /// A snapshot of the counters of all three caches.
    pub fn metrics(&self) -> CacheMetrics {
        self.counters.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use super::*;

    struct Zeros;

    #[async_trait::async_trait]
    impl PageLoader for Zeros {
        async fn load(&self, _object_id: u64, range: Range<u64>) -> Result<Bytes, LoadError> {
            Ok(Bytes::from(vec![0u8; (range.end - range.start) as usize]))
        }
    }

    #[tokio::test]
    async fn caches_opened_together_report_one_set_of_counters() {
        let settings = CacheSettings {
            block: BlockCacheSettings {
                memory_bytes: 4 << 20,
                ..Default::default()
            },
            ..Default::default()
        };
        let caches: Caches = Caches::open(&settings).await.expect("open");
        caches
            .tail
            .append(1, 0, 5, Bytes::from_static(b"batch"))
            .expect("append");
        assert!(caches.tail.get(1, 0, 1024).is_some());
        assert!(caches.tail.get(1, 5, 1024).is_none());

        let loader: Arc<dyn PageLoader> = Arc::new(Zeros);
        caches
            .blocks
            .read(9, 3 << 20, 0..10, &loader)
            .await
            .expect("read");
        caches
            .blocks
            .read(9, 3 << 20, 0..10, &loader)
            .await
            .expect("read");
        caches
            .indexes
            .get_or_load(9, async { Ok(Bytes::from_static(b"idx")) })
            .await
            .expect("index");
        caches
            .indexes
            .get_or_load(9, async { Ok(Bytes::from_static(b"other")) })
            .await
            .expect("index");

        let m = caches.metrics();
        assert_eq!((m.tail_hits, m.tail_misses), (1, 1));
        assert_eq!(
            (m.block_misses, m.block_memory_hits, m.loads, m.bytes_loaded),
            (1, 1, 1, 1 << 20)
        );
        assert_eq!((m.index_loads, m.index_hits), (1, 1));
        assert_eq!(
            caches.blocks.metrics(),
            m,
            "every handle reports the shared counters"
        );
    }
}
