//! Block cache behaviour: hits and misses, exact load counts, single-flight, TTL, disk tier, readahead,
//! error propagation.

use std::{
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::Duration,
};

use tokio::sync::Semaphore;

use super::*;
use mink_runtime::ManualClock;

const KIB: u64 = 1024;
const PAGE: u64 = 64 * KIB;

/// A loader serving one deterministic object per id, counting and recording its loads.
#[derive(Debug, Default)]
struct CountingLoader {
    loads: AtomicU64,
    ranges: Mutex<Vec<(u64, Range<u64>)>>,
    /// When set, each load takes a permit first: the test decides when loads finish.
    gate: Option<Semaphore>,
    /// Simulated object-store latency.
    latency: Option<Duration>,
    fail: AtomicBool,
    short: AtomicBool,
    panic: AtomicBool,
}

fn object_byte(object_id: u64, offset: u64) -> u8 {
    (offset.wrapping_mul(31) ^ object_id.wrapping_mul(131) ^ (offset >> 8)) as u8
}

fn object_bytes(object_id: u64, range: Range<u64>) -> Bytes {
    range
        .map(|o| object_byte(object_id, o))
        .collect::<Vec<u8>>()
        .into()
}

#[async_trait]
impl PageLoader for CountingLoader {
    async fn load(&self, object_id: u64, range: Range<u64>) -> Result<Bytes, LoadError> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        self.ranges.lock().push((object_id, range.clone()));
        if let Some(gate) = &self.gate {
            gate.acquire().await.expect("gate open").forget();
        }
        if let Some(latency) = self.latency {
            tokio::time::sleep(latency).await;
        }
        assert!(
            !self.panic.load(Ordering::SeqCst),
            "loader panicked on purpose"
        );
        if self.fail.load(Ordering::SeqCst) {
            return Err(LoadError::Storage {
                object_id,
                range,
                source: "503 Slow Down".into(),
            });
        }
        if self.short.load(Ordering::SeqCst) {
            return Ok(object_bytes(object_id, range.start..range.end - 1));
        }
        Ok(object_bytes(object_id, range))
    }
}

impl CountingLoader {
    fn loads(&self) -> u64 {
        self.loads.load(Ordering::SeqCst)
    }

    fn ranges(&self) -> Vec<(u64, Range<u64>)> {
        self.ranges.lock().clone()
    }
}

fn settings() -> BlockCacheSettings {
    BlockCacheSettings {
        memory_bytes: 64 * PAGE,
        page_size: PAGE,
        max_load_bytes: 4 * PAGE,
        ..Default::default()
    }
}

async fn open(settings: BlockCacheSettings) -> BlockCache {
    BlockCache::builder(settings)
        .build()
        .await
        .expect("open block cache")
}

fn as_loader(loader: &Arc<CountingLoader>) -> Arc<dyn PageLoader> {
    Arc::clone(loader) as Arc<dyn PageLoader>
}

/// Waits until `condition` holds, failing the test after five seconds.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting until {what}"));
}

#[tokio::test]
async fn a_miss_loads_once_and_the_next_read_is_a_memory_hit() {
    let cache = open(settings()).await;
    let counting = Arc::new(CountingLoader::default());
    let loader = as_loader(&counting);
    let size = 10 * PAGE;

    let first = cache.read(7, size, 100..200, &loader).await.expect("read");
    assert_eq!(first, object_bytes(7, 100..200));
    assert_eq!(
        counting.ranges(),
        vec![(7, 0..PAGE)],
        "a whole page is loaded"
    );

    let again = cache.read(7, size, 150..PAGE, &loader).await.expect("read");
    assert_eq!(again, object_bytes(7, 150..PAGE));
    assert_eq!(counting.loads(), 1, "the second read is served from memory");

    // Pages 0..3: page 0 is cached, pages 1 and 2 are loaded together with one ranged load.
    let span = cache
        .read(7, size, 10..3 * PAGE - 10, &loader)
        .await
        .expect("read");
    assert_eq!(span, object_bytes(7, 10..3 * PAGE - 10));
    assert_eq!(counting.ranges(), vec![(7, 0..PAGE), (7, PAGE..3 * PAGE)]);

    // Another object with the same page indexes is a different page.
    cache.read(8, size, 0..10, &loader).await.expect("read");
    assert_eq!(counting.loads(), 3);

    let m = cache.metrics();
    assert_eq!(m.loads, 3);
    assert_eq!(m.block_misses, 4, "pages 7/0, 7/1, 7/2, 8/0");
    assert_eq!(m.block_memory_hits, 2, "page 7/0 twice");
    assert_eq!(m.block_disk_hits, 0);
    assert_eq!(m.bytes_loaded, 4 * PAGE);
}

#[tokio::test]
async fn adjacent_missing_pages_are_loaded_in_runs_of_at_most_max_load_bytes() {
    let cache = open(settings()).await;
    let counting = Arc::new(CountingLoader::default());
    let loader = as_loader(&counting);
    let size = 20 * PAGE;
    cache
        .read(1, size, 2 * PAGE..2 * PAGE + 1, &loader)
        .await
        .expect("read");
    // Pages 0..10 with page 2 cached: runs [0,1], [3,4,5,6] (max 4 pages), [7,8,9].
    let all = cache
        .read(1, size, 0..10 * PAGE, &loader)
        .await
        .expect("read");
    assert_eq!(all, object_bytes(1, 0..10 * PAGE));
    let mut ranges = counting.ranges();
    ranges.sort_by_key(|(_, r)| r.start);
    assert_eq!(
        ranges,
        vec![
            (1, 0..2 * PAGE),
            (1, 2 * PAGE..3 * PAGE),
            (1, 3 * PAGE..7 * PAGE),
            (1, 7 * PAGE..10 * PAGE)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_readers_of_a_cold_page_cause_exactly_one_load() {
    let cache = open(settings()).await;
    let counting = Arc::new(CountingLoader {
        gate: Some(Semaphore::new(0)),
        ..Default::default()
    });
    let loader = as_loader(&counting);
    let size = 4 * PAGE;

    let readers: Vec<_> = (0..64u64)
        .map(|i| {
            let cache = cache.clone();
            let loader = Arc::clone(&loader);
            tokio::spawn(async move {
                let start = i * 100;
                cache.read(3, size, start..start + 1000, &loader).await
            })
        })
        .collect();
    // All 64 readers have missed and are waiting before the single load is allowed to finish.
    eventually("all readers missed", || cache.metrics().block_misses == 64).await;
    assert_eq!(counting.loads(), 1);
    counting.gate.as_ref().expect("gate").add_permits(1);

    for (i, reader) in readers.into_iter().enumerate() {
        let start = i as u64 * 100;
        let bytes = reader.await.expect("reader task").expect("read");
        assert_eq!(bytes, object_bytes(3, start..start + 1000));
    }
    assert_eq!(
        counting.loads(),
        1,
        "one GET for the page however many readers waited"
    );
    assert_eq!(cache.metrics().loads, 1);
}

#[tokio::test]
async fn ranges_spanning_pages_and_the_last_partial_page_are_assembled_exactly() {
    let cache = open(settings()).await;
    let counting = Arc::new(CountingLoader::default());
    let loader = as_loader(&counting);
    let size = 2 * PAGE + PAGE / 2;

    assert_eq!(
        cache.read(5, size, 0..size, &loader).await.expect("read"),
        object_bytes(5, 0..size)
    );
    assert_eq!(
        counting.ranges(),
        vec![(5, 0..size)],
        "the last page is loaded only up to the object end"
    );
    for range in [
        PAGE - 1..PAGE + 1,
        2 * PAGE..size,
        size - 1..size,
        PAGE..2 * PAGE,
        3..3,
    ] {
        assert_eq!(
            cache
                .read(5, size, range.clone(), &loader)
                .await
                .expect("read"),
            object_bytes(5, range)
        );
    }
    assert_eq!(counting.loads(), 1);

    let outside = cache
        .read(5, size, size - 1..size + 1, &loader)
        .await
        .expect_err("past the end");
    assert!(matches!(
        outside,
        CacheError::RangeOutOfBounds { object_id: 5, .. }
    ));
    #[expect(
        clippy::reversed_empty_ranges,
        reason = "an inverted range must be rejected"
    )]
    let inverted = cache
        .read(5, size, 10..5, &loader)
        .await
        .expect_err("inverted");
    assert!(matches!(inverted, CacheError::RangeOutOfBounds { .. }));
}

#[tokio::test]
async fn a_page_older_than_the_ttl_is_loaded_again() {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let cache = BlockCache::builder(BlockCacheSettings {
        ttl_ms: 60_000,
        ..settings()
    })
    .clock(Arc::clone(&clock) as Arc<dyn Clock>)
    .build()
    .await
    .expect("open");
    let counting = Arc::new(CountingLoader::default());
    let loader = as_loader(&counting);

    cache.read(1, PAGE, 0..10, &loader).await.expect("read");
    clock.advance(59_999);
    cache.read(1, PAGE, 0..10, &loader).await.expect("read");
    assert_eq!(
        counting.loads(),
        1,
        "still fresh one millisecond before the TTL"
    );
    clock.advance(1);
    assert_eq!(
        cache.read(1, PAGE, 0..10, &loader).await.expect("read"),
        object_bytes(1, 0..10)
    );
    assert_eq!(counting.loads(), 2, "expired at the TTL and loaded again");
    assert_eq!(cache.metrics().block_expired, 1);
}

#[tokio::test]
async fn with_a_short_ttl_on_the_system_clock_pages_expire() {
    let cache = open(BlockCacheSettings {
        ttl_ms: 50,
        ..settings()
    })
    .await;
    let counting = Arc::new(CountingLoader::default());
    let loader = as_loader(&counting);
    cache.read(1, PAGE, 0..10, &loader).await.expect("read");
    let reread = async {
        while counting.loads() < 2 {
            cache.read(1, PAGE, 0..10, &loader).await.expect("read");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), reread)
        .await
        .expect("the page expired within 5 s");
    // Only expiry can cause the second load: nothing else evicts from a 64-page cache holding one page.
    assert!(cache.metrics().block_expired >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_load_reaches_every_waiter_and_is_not_cached() {
    let cache = open(settings()).await;
    let counting = Arc::new(CountingLoader {
        gate: Some(Semaphore::new(0)),
        ..Default::default()
    });
    counting.fail.store(true, Ordering::SeqCst);
    let loader = as_loader(&counting);

    let readers: Vec<_> = (0..8)
        .map(|_| {
            let cache = cache.clone();
            let loader = Arc::clone(&loader);
            tokio::spawn(async move { cache.read(9, PAGE, 0..100, &loader).await })
        })
        .collect();
    eventually("all readers missed", || cache.metrics().block_misses == 8).await;
    counting.gate.as_ref().expect("gate").add_permits(1);
    for reader in readers {
        let error = reader
            .await
            .expect("reader task")
            .expect_err("the load failed");
        match error {
            CacheError::Load {
                object_id: 9,
                range,
                source,
            } => {
                assert_eq!(range, 0..PAGE);
                assert!(source.to_string().contains("503 Slow Down"), "{source}");
            }
            other => panic!("unexpected error {other:?}"),
        }
    }
    assert_eq!(counting.loads(), 1, "the waiters shared the failed load");
    assert_eq!(cache.metrics().load_errors, 1);

    counting.fail.store(false, Ordering::SeqCst);
    counting.gate.as_ref().expect("gate").add_permits(1);
    assert_eq!(
        cache.read(9, PAGE, 0..100, &loader).await.expect("retry"),
        object_bytes(9, 0..100)
    );
    assert_eq!(counting.loads(), 2, "the failure was not cached");
}

#[tokio::test]
async fn a_short_load_is_an_error_and_is_not_cached() {
    let cache = open(settings()).await;
    let counting = Arc::new(CountingLoader::default());
    counting.short.store(true, Ordering::SeqCst);
    let loader = as_loader(&counting);
    let error = cache
        .read(2, 2 * PAGE, 0..10, &loader)
        .await
        .expect_err("short");
    assert!(
        matches!(error, CacheError::ShortLoad { expected, actual, .. } if expected == PAGE && actual == PAGE - 1)
    );
    counting.short.store(false, Ordering::SeqCst);
    assert_eq!(
        cache.read(2, 2 * PAGE, 0..10, &loader).await.expect("read"),
        object_bytes(2, 0..10)
    );
    assert_eq!(counting.loads(), 2);
}

#[tokio::test]
async fn a_panicking_loader_abandons_its_waiters_and_the_next_read_loads_again() {
    let cache = open(settings()).await;
    let counting = Arc::new(CountingLoader::default());
    counting.panic.store(true, Ordering::SeqCst);
    let loader = as_loader(&counting);
    let error = cache
        .read(4, PAGE, 0..10, &loader)
        .await
        .expect_err("abandoned");
    assert!(matches!(
        error,
        CacheError::LoadAbandoned {
            object_id: 4,
            page_index: 0
        }
    ));
    counting.panic.store(false, Ordering::SeqCst);
    assert_eq!(
        cache.read(4, PAGE, 0..10, &loader).await.expect("read"),
        object_bytes(4, 0..10)
    );
    assert_eq!(counting.loads(), 2);
}

#[tokio::test]
async fn invalidating_an_object_drops_its_pages() {
    let cache = open(settings()).await;
    let counting = Arc::new(CountingLoader::default());
    let loader = as_loader(&counting);
    cache
        .read(1, 3 * PAGE, 0..3 * PAGE, &loader)
        .await
        .expect("read");
    cache.invalidate_object(1, 3 * PAGE);
    cache
        .read(1, 3 * PAGE, PAGE..PAGE + 1, &loader)
        .await
        .expect("read");
    assert_eq!(counting.loads(), 2);
}

#[tokio::test]
async fn the_disk_tier_serves_pages_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk_settings = BlockCacheSettings {
        disk_dir: Some(dir.path().to_path_buf()),
        disk_bytes: 64 * 1024 * KIB,
        ..settings()
    };
    let counting = Arc::new(CountingLoader::default());
    let loader = as_loader(&counting);
    let size = 5 * PAGE + 123;

    let cache = open(disk_settings.clone()).await;
    assert!(cache.has_disk_tier());
    assert_eq!(
        cache.read(11, size, 0..size, &loader).await.expect("read"),
        object_bytes(11, 0..size)
    );
    cache.close().await.expect("close flushes memory to disk");
    drop(cache);

    let reopened = open(disk_settings).await;
    let loads_before = counting.loads();
    assert_eq!(
        reopened
            .read(11, size, 0..size, &loader)
            .await
            .expect("read"),
        object_bytes(11, 0..size)
    );
    assert_eq!(counting.loads(), loads_before, "served from disk, no load");
    let m = reopened.metrics();
    assert_eq!(m.block_disk_hits, 6);
    assert_eq!(m.block_misses, 0);
    // Promoted to memory by the disk hit.
    reopened.read(11, size, 0..10, &loader).await.expect("read");
    assert_eq!(reopened.metrics().block_memory_hits, 1);
}

/// A cache of 256 pages with [`readahead_settings`], and a loader whose loads take 20 ms.
async fn readahead_cache() -> (BlockCache, Arc<CountingLoader>, Arc<dyn PageLoader>) {
    let cache = BlockCache::builder(BlockCacheSettings {
        memory_bytes: 256 * PAGE,
        ..settings()
    })
    .readahead(readahead_settings())
    .build()
    .await
    .expect("open");
    let counting = Arc::new(CountingLoader {
        latency: Some(Duration::from_millis(20)),
        ..Default::default()
    });
    let loader = as_loader(&counting);
    (cache, counting, loader)
}

fn readahead_settings() -> ReadaheadSettings {
    ReadaheadSettings {
        start_bytes: PAGE,
        growth_bytes: PAGE,
        max_bytes: 4 * PAGE,
        max_inflight_percent: 50,
    }
}

#[tokio::test(start_paused = true)]
async fn a_sequential_reader_gets_a_growing_readahead_window_without_duplicate_loads() {
    let (cache, counting, loader) = readahead_cache().await;
    let size = 64 * PAGE;
    let step = PAGE / 2;

    let mut state = ReadaheadState::new();
    let mut windows = Vec::new();
    let mut offset = 0;
    while offset < 16 * PAGE {
        let parts = cache
            .read_sequential(1, size, offset..offset + step, &loader, &mut state)
            .await
            .expect("read");
        assert_eq!(parts.concat(), object_bytes(1, offset..offset + step));
        windows.push(state.window());
        offset += step;
    }
    assert_eq!(windows[0], 0, "one read is not yet a sequential reader");
    assert_eq!(windows[1], PAGE, "the window opens at start_bytes");
    assert!(
        windows.windows(2).all(|w| w[0] <= w[1]),
        "the window never shrinks: {windows:?}"
    );
    assert_eq!(
        *windows.last().expect("reads"),
        4 * PAGE,
        "the window grows to its cap: {windows:?}"
    );

    let m = cache.metrics();
    assert!(m.readahead_loads > 0, "{m:?}");
    // Readahead already covers the pages after the last read: reading them costs no new load.
    eventually("readahead past page 16 started", || {
        counting
            .ranges()
            .iter()
            .any(|(_, r)| r.contains(&(16 * PAGE)))
    })
    .await;
    let loads = counting.loads();
    let ahead = cache
        .read(1, size, 16 * PAGE..17 * PAGE, &loader)
        .await
        .expect("read");
    assert_eq!(ahead, object_bytes(1, 16 * PAGE..17 * PAGE));
    assert_eq!(
        counting.loads(),
        loads,
        "the page after the reader was read ahead"
    );

    let mut pages: Vec<u64> = Vec::new();
    for (_, range) in counting.ranges() {
        pages.extend(range.start / PAGE..range.end.div_ceil(PAGE));
    }
    let loaded = pages.len();
    pages.sort_unstable();
    pages.dedup();
    assert_eq!(
        loaded,
        pages.len(),
        "no page was loaded twice: readahead and readers share loads"
    );
    assert!(
        pages.iter().any(|p| *p >= 16),
        "readahead loaded pages beyond what was read: {pages:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_random_reader_triggers_no_readahead() {
    let (cache, counting, loader) = readahead_cache().await;
    let size = 64 * PAGE;
    let mut state = ReadaheadState::new();
    for page in [40, 3, 17, 60, 8, 33, 21, 50] {
        let start = page * PAGE + 100;
        cache
            .read_sequential(1, size, start..start + 1000, &loader, &mut state)
            .await
            .expect("read");
        assert_eq!(state.window(), 0);
    }
    let m = cache.metrics();
    assert_eq!(m.readahead_loads, 0);
    assert_eq!(
        counting.loads(),
        8,
        "one load per random read, nothing more"
    );
}

#[tokio::test(start_paused = true)]
async fn readahead_is_skipped_when_its_share_of_memory_is_in_flight() {
    // 8 pages of memory, readahead may hold 25% = 2 pages in flight; a 4-page window does not fit.
    let cache = BlockCache::builder(BlockCacheSettings {
        memory_bytes: 8 * PAGE,
        ..settings()
    })
    .readahead(ReadaheadSettings {
        start_bytes: 4 * PAGE,
        max_inflight_percent: 25,
        ..readahead_settings()
    })
    .build()
    .await
    .expect("open");
    let counting = Arc::new(CountingLoader::default());
    let loader = as_loader(&counting);
    let mut state = ReadaheadState::new();
    for page in 0..4 {
        cache
            .read_sequential(
                1,
                32 * PAGE,
                page * PAGE..(page + 1) * PAGE,
                &loader,
                &mut state,
            )
            .await
            .expect("read");
    }
    let m = cache.metrics();
    assert!(m.readahead_skipped > 0, "{m:?}");
    assert_eq!(m.readahead_loads, 0);
    assert_eq!(counting.loads(), 4);
}

#[tokio::test]
async fn settings_that_cannot_work_are_rejected() {
    for (bad, name) in [
        (
            BlockCacheSettings {
                page_size: 0,
                ..settings()
            },
            "block.page_size",
        ),
        (
            BlockCacheSettings {
                memory_bytes: PAGE - 1,
                ..settings()
            },
            "block.memory_bytes",
        ),
        (
            BlockCacheSettings {
                ttl_ms: 0,
                ..settings()
            },
            "block.ttl_ms",
        ),
        (
            BlockCacheSettings {
                max_load_bytes: 1,
                ..settings()
            },
            "block.max_load_bytes",
        ),
    ] {
        match BlockCache::builder(bad).build().await {
            Err(CacheError::InvalidSetting { name: got, .. }) => assert_eq!(got, name),
            other => panic!("expected {name} to be rejected, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_cache_loads_once_and_does_not_cache_failures() {
    let indexes: IndexCache<Bytes> = IndexCache::new(1 << 20);
    let calls = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let waiters: Vec<_> = (0..16)
        .map(|_| {
            let indexes = indexes.clone();
            let calls = Arc::clone(&calls);
            let gate = Arc::clone(&gate);
            tokio::spawn(async move {
                indexes
                    .get_or_load(5, async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        gate.acquire().await.expect("gate").forget();
                        Ok(Bytes::from_static(b"index of 5"))
                    })
                    .await
            })
        })
        .collect();
    eventually("the load started", || calls.load(Ordering::SeqCst) == 1).await;
    gate.add_permits(1);
    for waiter in waiters {
        assert_eq!(
            waiter.await.expect("task").expect("index"),
            Bytes::from_static(b"index of 5")
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(indexes.metrics().index_loads, 1);
    assert_eq!(
        indexes.get(5).await,
        Some(Bytes::from_static(b"index of 5"))
    );

    let failed = indexes
        .get_or_load(6, async { Err(LoadError::NotFound { object_id: 6 }) })
        .await
        .expect_err("missing object");
    assert!(matches!(failed, CacheError::IndexLoad { object_id: 6, .. }));
    let loaded = indexes
        .get_or_load(6, async { Ok(Bytes::from_static(b"six")) })
        .await
        .expect("retry");
    assert_eq!(loaded, Bytes::from_static(b"six"));
}

#[tokio::test]
async fn pages_evicted_from_memory_are_served_from_the_disk_tier() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = open(BlockCacheSettings {
        memory_bytes: 4 * PAGE,
        disk_dir: Some(dir.path().to_path_buf()),
        disk_bytes: 64 * 1024 * KIB,
        ..settings()
    })
    .await;
    let counting = Arc::new(CountingLoader::default());
    let loader = as_loader(&counting);
    let size = 12 * PAGE;
    for page in 0..12 {
        cache
            .read(2, size, page * PAGE..(page + 1) * PAGE, &loader)
            .await
            .expect("read");
    }
    assert_eq!(counting.loads(), 12);
    let first = Inner::page_key(2, 0);
    assert!(
        cache.inner.pages.memory().get(&first).is_none(),
        "page 0 left the memory tier"
    );
    // The disk write of an evicted page is asynchronous.
    eventually("page 0 reached the disk tier", || {
        cache.inner.pages.contains(&first)
    })
    .await;

    let before = cache.metrics();
    assert_eq!(
        cache.read(2, size, 0..PAGE, &loader).await.expect("read"),
        object_bytes(2, 0..PAGE)
    );
    assert_eq!(
        counting.loads(),
        12,
        "served from the disk tier, not loaded again"
    );
    // foyer may still hold the page in its write buffer while the disk write settles, and then
    // reports the hit as a memory hit; either way it came from the cache, not the loader.
    let after = cache.metrics();
    assert_eq!(
        (after.block_disk_hits + after.block_memory_hits)
            - (before.block_disk_hits + before.block_memory_hits),
        1
    );
}

#[tokio::test]
async fn a_sequential_read_comes_as_slices_of_the_cached_pages() {
    let cache = open(settings()).await;
    let counting = Arc::new(CountingLoader::default());
    let loader = as_loader(&counting);
    let size = 8 * PAGE;
    let range = PAGE - 100..2 * PAGE + 100;
    let mut state = ReadaheadState::new();
    let first = cache
        .read_sequential(1, size, range.clone(), &loader, &mut state)
        .await
        .expect("read");
    assert_eq!(
        first.iter().map(Bytes::len).collect::<Vec<_>>(),
        [100, PAGE as usize, 100],
        "one slice per page the range touches"
    );
    assert_eq!(first.concat(), object_bytes(1, range.clone()));
    let again = cache
        .read_sequential(1, size, range.clone(), &loader, &mut ReadaheadState::new())
        .await
        .expect("read again");
    for (a, b) in first.iter().zip(&again) {
        assert_eq!(
            a.as_ptr(),
            b.as_ptr(),
            "the cached page's memory, not a copy"
        );
    }
    // A read that needs one buffer gets the same bytes joined.
    assert_eq!(
        cache
            .read(1, size, range.clone(), &loader)
            .await
            .expect("read"),
        object_bytes(1, range)
    );
}

#[tokio::test(start_paused = true)]
async fn a_range_passed_over_keeps_the_readers_run_and_its_readahead() {
    let (cache, counting, loader) = readahead_cache().await;
    let size = 64 * PAGE;
    // Every other page comes from elsewhere (a caller's decoded blocks): passed over, the run
    // goes on and the window grows to its cap.
    let mut state = ReadaheadState::new();
    for page in 0..12 {
        let range = page * PAGE..(page + 1) * PAGE;
        if page % 2 == 1 {
            cache.passed_over(1, size, range, &loader, &mut state);
            assert!(state.window() > 0, "still sequential after page {page}");
        } else {
            let parts = cache
                .read_sequential(1, size, range.clone(), &loader, &mut state)
                .await
                .expect("read");
            assert_eq!(parts.concat(), object_bytes(1, range));
        }
    }
    assert_eq!(state.window(), 4 * PAGE, "the window reached its cap");
    eventually("readahead past page 12 started", || {
        counting
            .ranges()
            .iter()
            .any(|(_, r)| r.contains(&(12 * PAGE)))
    })
    .await;
    // The same reads skipping those ranges instead look random: the window closes each time.
    let mut skipping = ReadaheadState::new();
    for page in (20..32).step_by(2) {
        cache
            .read_sequential(
                1,
                size,
                page * PAGE..(page + 1) * PAGE,
                &loader,
                &mut skipping,
            )
            .await
            .expect("read");
        assert_eq!(skipping.window(), 0, "a read after a gap is not sequential");
    }
}
