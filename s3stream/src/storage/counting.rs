//! [`CountingStorage`]: forwards every call and counts requests and bytes, so tests and
//! benchmarks can assert "one append costs one PUT" and report request costs.

use std::ops::{Range, Sub};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

use super::{ObjectMeta, ObjectStorage, PutResult, Result};

/// A snapshot of a [`CountingStorage`]'s counters. Requests are counted when made, whether they
/// succeed or not; bytes only when the call succeeds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StorageCounts {
    /// `put` and `put_if_absent` calls.
    pub puts: u64,
    /// `get` and `get_range` calls.
    pub gets: u64,
    /// `head` calls.
    pub heads: u64,
    /// `delete` and `delete_many` calls.
    pub deletes: u64,
    /// Keys passed to `delete` and `delete_many`.
    pub deleted_keys: u64,
    /// `list` calls.
    pub lists: u64,
    /// Bytes written by successful PUTs.
    pub bytes_in: u64,
    /// Bytes returned by successful GETs.
    pub bytes_out: u64,
    /// Calls that returned an error.
    pub errors: u64,
}

impl StorageCounts {
    /// All requests of any kind.
    pub fn requests(&self) -> u64 {
        self.puts + self.gets + self.heads + self.deletes + self.lists
    }
}

impl Sub for StorageCounts {
    type Output = StorageCounts;

    /// The counts between two snapshots (`later - earlier`).
    fn sub(self, earlier: StorageCounts) -> StorageCounts {
        StorageCounts {
            puts: self.puts - earlier.puts,
            gets: self.gets - earlier.gets,
            heads: self.heads - earlier.heads,
            deletes: self.deletes - earlier.deletes,
            deleted_keys: self.deleted_keys - earlier.deleted_keys,
            lists: self.lists - earlier.lists,
            bytes_in: self.bytes_in - earlier.bytes_in,
            bytes_out: self.bytes_out - earlier.bytes_out,
            errors: self.errors - earlier.errors,
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    puts: AtomicU64,
    gets: AtomicU64,
    heads: AtomicU64,
    deletes: AtomicU64,
    deleted_keys: AtomicU64,
    lists: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    errors: AtomicU64,
    /// PUTs under way now, and the most there have been at once.
    puts_in_flight: AtomicU64,
    most_puts_in_flight: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// Wraps an [`ObjectStorage`] and counts what passes through it.
#[derive(Debug)]
pub struct CountingStorage {
    inner: Arc<dyn ObjectStorage>,
    counters: Counters,
}

impl CountingStorage {
    /// Counts calls to `inner`, starting from zero.
    pub fn new(inner: Arc<dyn ObjectStorage>) -> Self {
        CountingStorage {
            inner,
            counters: Counters::default(),
        }
    }

    /// The counters now.
    pub fn counts(&self) -> StorageCounts {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StorageCounts {
            puts: load(&c.puts),
            gets: load(&c.gets),
            heads: load(&c.heads),
            deletes: load(&c.deletes),
            deleted_keys: load(&c.deleted_keys),
            lists: load(&c.lists),
            bytes_in: load(&c.bytes_in),
            bytes_out: load(&c.bytes_out),
            errors: load(&c.errors),
        }
    }

    /// The most PUTs (of any kind) that were under way at once.
    pub fn most_puts_in_flight(&self) -> u64 {
        self.counters.most_puts_in_flight.load(Ordering::Relaxed)
    }

    /// Counts a PUT under way until the returned guard is dropped.
    fn put_started(&self) -> InFlight<'_> {
        bump(&self.counters.puts, 1);
        let now = self.counters.puts_in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.counters
            .most_puts_in_flight
            .fetch_max(now, Ordering::Relaxed);
        InFlight(&self.counters.puts_in_flight)
    }

    fn track<T>(&self, res: Result<T>) -> Result<T> {
        if res.is_err() {
            bump(&self.counters.errors, 1);
        }
        res
    }
}

/// A PUT under way: counted out when dropped.
struct InFlight<'a>(&'a AtomicU64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStorage for CountingStorage {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<PutResult> {
        let _put = self.put_started();
        let len = data.len() as u64;
        let res = self.track(self.inner.put(key, data).await)?;
        bump(&self.counters.bytes_in, len);
        Ok(res)
    }

    async fn put_parts(&self, key: &str, parts: Vec<Bytes>) -> Result<PutResult> {
        let _put = self.put_started();
        let len = parts.iter().map(|p| p.len() as u64).sum();
        let res = self.track(self.inner.put_parts(key, parts).await)?;
        bump(&self.counters.bytes_in, len);
        Ok(res)
    }

    async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutResult> {
        let _put = self.put_started();
        let len = data.len() as u64;
        let res = self.track(self.inner.put_if_absent(key, data).await)?;
        bump(&self.counters.bytes_in, len);
        Ok(res)
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        bump(&self.counters.gets, 1);
        let bytes = self.track(self.inner.get(key).await)?;
        bump(&self.counters.bytes_out, bytes.len() as u64);
        Ok(bytes)
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        bump(&self.counters.gets, 1);
        let bytes = self.track(self.inner.get_range(key, range).await)?;
        bump(&self.counters.bytes_out, bytes.len() as u64);
        Ok(bytes)
    }

    async fn get_range_pieces(
        &self,
        key: &str,
        range: Range<u64>,
        piece_len: u64,
    ) -> Result<Vec<Bytes>> {
        bump(&self.counters.gets, 1);
        let pieces = self.track(self.inner.get_range_pieces(key, range, piece_len).await)?;
        let len: usize = pieces.iter().map(Bytes::len).sum();
        bump(&self.counters.bytes_out, len as u64);
        Ok(pieces)
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        bump(&self.counters.heads, 1);
        self.track(self.inner.head(key).await)
    }

    async fn delete(&self, key: &str) -> Result<()> {
        bump(&self.counters.deletes, 1);
        bump(&self.counters.deleted_keys, 1);
        self.track(self.inner.delete(key).await)
    }

    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        bump(&self.counters.deletes, 1);
        bump(&self.counters.deleted_keys, keys.len() as u64);
        self.track(self.inner.delete_many(keys).await)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        bump(&self.counters.lists, 1);
        self.track(self.inner.list(prefix).await)
    }
}
