//! The latency model (`LatencyStorage` with a `LatencyProfile`): the S3 Standard and Express One
//! Zone profiles give latencies like those services' under concurrent calls, and a constant
//! profile delays by exactly its value.

use super::*;
use mink_s3stream::storage::{LatencyDistribution, LatencyProfile, LatencyStorage};

fn percentile(mut xs: Vec<Duration>, p: usize) -> Duration {
    xs.sort();
    xs[(xs.len() * p / 100).min(xs.len() - 1)]
}

/// Runs `n` concurrent calls of `op` and returns each call's latency.
async fn measure<F, Fut>(n: usize, op: F) -> Vec<Duration>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let fut = op(i);
            tokio::spawn(async move {
                let started = Instant::now();
                fut.await;
                started.elapsed()
            })
        })
        .collect();
    let mut out = Vec::with_capacity(n);
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_standard_on_memory_has_s3_like_put_and_get_latency() {
    let profile = LatencyProfile::s3_standard();
    assert_eq!(profile.put.p50(), Duration::from_millis(30));
    let store: Arc<dyn ObjectStorage> = Arc::new(LatencyStorage::new(
        Arc::new(ObjectStoreBackend::memory()),
        profile,
        42,
    ));
    let puts = measure(200, |i| {
        let store = store.clone();
        async move {
            store
                .put(&format!("p/{i}"), pattern(4096, 0))
                .await
                .unwrap();
        }
    })
    .await;
    let p50 = percentile(puts.clone(), 50);
    let p99 = percentile(puts, 99);
    assert!(
        (Duration::from_millis(20)..Duration::from_millis(60)).contains(&p50),
        "PUT p50 {p50:?}, set to 30 ms"
    );
    assert!(
        (Duration::from_millis(60)..Duration::from_millis(600)).contains(&p99),
        "PUT p99 {p99:?}, set to 150 ms"
    );

    // GET: 15 ms to first byte plus 1 MiB at 90 MB/s (11.7 ms).
    store.put("g", pattern(1 << 20, 1)).await.unwrap();
    let gets = measure(100, |_| {
        let store = store.clone();
        async move {
            store.get("g").await.unwrap();
        }
    })
    .await;
    let p50 = percentile(gets, 50);
    assert!(
        (Duration::from_millis(18)..Duration::from_millis(70)).contains(&p50),
        "GET p50 {p50:?}, expected about 27 ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn express_one_zone_on_local_files_is_single_digit_ms() {
    let dir = tempfile::tempdir().unwrap();
    let local = ObjectStoreBackend::local(dir.path()).unwrap();
    let profile = LatencyProfile::s3_express_one_zone();
    assert!(profile.put.p99() < Duration::from_millis(20));
    let store: Arc<dyn ObjectStorage> = Arc::new(LatencyStorage::new(Arc::new(local), profile, 3));
    // Sequential, as a single writer would see it.
    let mut puts = Vec::new();
    for i in 0..100 {
        let started = Instant::now();
        store
            .put(&format!("x/{i}"), pattern(4096, 0))
            .await
            .unwrap();
        puts.push(started.elapsed());
    }
    let p50 = percentile(puts, 50);
    assert!(
        (Duration::from_millis(4)..Duration::from_millis(60)).contains(&p50),
        "PUT p50 {p50:?}, set to 5 ms (plus a local fsync, which is slow on a busy disk)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_constant_profile_delays_by_exactly_that() {
    let profile =
        LatencyProfile::none().with_put(LatencyDistribution::constant(Duration::from_millis(40)));
    let store = LatencyStorage::new(Arc::new(ObjectStoreBackend::memory()), profile, 0);
    let started = Instant::now();
    store.put("k", pattern(10, 0)).await.unwrap();
    let put = started.elapsed();
    let started = Instant::now();
    store.get("k").await.unwrap();
    let get = started.elapsed();
    assert!(put >= Duration::from_millis(40), "{put:?}");
    assert!(
        get < Duration::from_millis(40),
        "no GET latency configured: {get:?}"
    );
}
