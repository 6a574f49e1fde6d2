//! The object index cache: parsed footers/indexes of committed objects, keyed by object id, so that
//! locating a batch in a warm object costs no extra GET.
//!
//! The caller decides what an index is (raw index bytes, or its own parsed structure) and how much it
//! weighs; loads are single-flight per object and failures are not cached.

use std::{future::Future, sync::Arc};

use bytes::Bytes;
use moka::{future::Cache, policy::EvictionPolicy};

use crate::{
    error::{CacheError, LoadError},
    metrics::{CacheMetrics, Counters, add},
};

/// A value whose memory footprint the index cache counts against its budget.
pub trait Weighted {
    /// Approximate bytes held by the value.
    fn weight(&self) -> usize;
}

impl Weighted for Bytes {
    fn weight(&self) -> usize {
        self.len()
    }
}

impl<T: Weighted + ?Sized> Weighted for Arc<T> {
    fn weight(&self) -> usize {
        (**self).weight()
    }
}

/// Parsed indexes of committed objects. Cheap to clone; clones share the cache.
pub struct IndexCache<V> {
    indexes: Cache<u64, V>,
    counters: Arc<Counters>,
}

impl<V: Clone + Send + Sync + 'static> Clone for IndexCache<V> {
    fn clone(&self) -> Self {
        Self {
            indexes: self.indexes.clone(),
            counters: Arc::clone(&self.counters),
        }
    }
}

impl<V> std::fmt::Debug for IndexCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexCache")
            .field("entries", &self.indexes.entry_count())
            .finish_non_exhaustive()
    }
}

impl<V> IndexCache<V>
where
    V: Weighted + Clone + Send + Sync + 'static,
{
    /// An index cache holding at most `capacity_bytes` of indexes, with its own counters.
    pub fn new(capacity_bytes: u64) -> Self {
        Self::with_counters(capacity_bytes, Arc::default())
    }

    pub(crate) fn with_counters(capacity_bytes: u64, counters: Arc<Counters>) -> Self {
        let indexes = Cache::builder()
            .max_capacity(capacity_bytes)
            .eviction_policy(EvictionPolicy::lru())
            .weigher(|_id: &u64, index: &V| {
                u32::try_from(index.weight().saturating_add(32)).unwrap_or(u32::MAX)
            })
            .build();
        Self { indexes, counters }
    }

    /// The index of `object_id`, from the cache or else from `load` (run once however many callers ask
    /// at the same time; its error goes to all of them and is not cached).
    pub async fn get_or_load<F>(&self, object_id: u64, load: F) -> Result<V, CacheError>
    where
        F: Future<Output = Result<V, LoadError>> + Send,
    {
        let counters = &self.counters;
        let entry = self
            .indexes
            .entry(object_id)
            .or_try_insert_with(async {
                add(&counters.index_loads, 1);
                load.await
            })
            .await
            .map_err(|source| CacheError::IndexLoad { object_id, source })?;
        if !entry.is_fresh() {
            add(&counters.index_hits, 1);
        }
        Ok(entry.into_value())
    }

    /// The index of `object_id` if cached.
    pub async fn get(&self, object_id: u64) -> Option<V> {
        let found = self.indexes.get(&object_id).await;
        if found.is_some() {
            add(&self.counters.index_hits, 1);
        }
        found
    }

    /// Drops the index of `object_id` (e.g. once the object has been deleted).
    pub async fn invalidate(&self, object_id: u64) {
        self.indexes.invalidate(&object_id).await;
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> CacheMetrics {
        self.counters.snapshot()
    }
}
