//! Latency histograms of `/metrics`, in seconds: an append until it is acknowledged and each
//! stage of it in the engine (docs/append-stages.md), a read, a
//! batch's way from its commit to a reader parked at the tail, and every request to the object
//! stores by operation and by what it touches (`wal`, `data`, `other`), so a WAL PUT and an object
//! GET each have their own distribution.
//!
//! [`TimedStorage`] wraps the node's object stores and observes each request; it is made before
//! the engine, so the histograms live apart from the node's `Metrics` and are
//! registered into its registry when the core is made.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use mink_s3stream::storage::{ObjectMeta, ObjectStorage, PutResult, Result};
use mink_s3stream::{AppendStage, StageObserver};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// Labels of an object-store request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ObjectRequest {
    /// `put`, `get`, `head`, `delete`, `list`.
    pub op: &'static str,
    /// `wal` (WAL objects), `data` (committed objects), `other` (probes).
    pub kind: &'static str,
}

/// Labels of an append's stage in the engine.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StageLabel {
    /// `admission`, `wal_queue`, `put`, `ordering`, `wake` ([`AppendStage::name`]).
    pub stage: &'static str,
}

/// 100 µs to about 52 s, doubling.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.000_1, 2.0, 20))
}

/// 10 µs to about 15 s in steps of √2: the stages of an append range from microseconds (a wake)
/// to seconds (back-pressure), and a breakdown wants finer steps than doubling.
fn stage_seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.000_01, std::f64::consts::SQRT_2, 42))
}

/// The node's latency histograms.
#[derive(Debug)]
pub struct Latencies {
    /// An append request, from the core taking it to its acknowledgement.
    pub append: Histogram,
    /// The stages of appends in the engine.
    pub append_stages: Family<StageLabel, Histogram, fn() -> Histogram>,
    /// `append_stages`' histograms in the order of [`AppendStage::ALL`], looked up once.
    stage_histograms: Vec<Histogram>,
    /// Each WAL group's upload (encoding its object and its PUT, from the moment a PUT slot took
    /// it), once per group: beside the PUT requests' own histogram it tells the upload task's
    /// waits from the store's time.
    pub wal_uploads: Histogram,
    /// A read of stored batches.
    pub read: Histogram,
    /// From a batch's commit timestamp to its delivery to a reader parked at the tail.
    pub tail_delivery: Histogram,
    /// Object-store requests.
    pub object_requests: Family<ObjectRequest, Histogram, fn() -> Histogram>,
    /// A bucket log's open on this node (its tablet's first use: metadata, manifest, replay).
    pub log_open: Histogram,
    /// A first use waiting for one of the bounded open slots before its open starts.
    pub log_open_wait: Histogram,
}

impl Default for Latencies {
    fn default() -> Self {
        let append_stages: Family<StageLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(stage_seconds);
        let stage_histograms = AppendStage::ALL
            .iter()
            .map(|stage| {
                append_stages
                    .get_or_create(&StageLabel {
                        stage: stage.name(),
                    })
                    .clone()
            })
            .collect();
        Latencies {
            append: seconds(),
            append_stages,
            stage_histograms,
            wal_uploads: stage_seconds(),
            read: seconds(),
            tail_delivery: seconds(),
            object_requests: Family::new_with_constructor(seconds),
            log_open: stage_seconds(),
            log_open_wait: stage_seconds(),
        }
    }
}

impl Latencies {
    /// Adds the histograms to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "append_duration",
            "Append requests, from the node taking them to their acknowledgement",
            Unit::Seconds,
            self.append.clone(),
        );
        registry.register_with_unit(
            "append_stage_duration",
            "The time appends spend in each stage of the engine: admission (waiting for room under max_uncompacted_bytes), wal_queue (waiting for a PUT slot), put, ordering (waiting for earlier WAL objects), wake (the acknowledged append's task resuming)",
            Unit::Seconds,
            self.append_stages.clone(),
        );
        registry.register_with_unit(
            "wal_upload_duration",
            "Each WAL group's upload, once per group: encoding its object and its PUT (retries included), from the moment a PUT slot took it",
            Unit::Seconds,
            self.wal_uploads.clone(),
        );
        registry.register_with_unit(
            "read_duration",
            "Reads of stored batches",
            Unit::Seconds,
            self.read.clone(),
        );
        registry.register_with_unit(
            "tail_delivery",
            "From a batch's commit timestamp to its delivery to a reader parked at the tail",
            Unit::Seconds,
            self.tail_delivery.clone(),
        );
        registry.register_with_unit(
            "object_request_duration",
            "Object-store requests by operation and by what they touch (wal, data, other)",
            Unit::Seconds,
            self.object_requests.clone(),
        );
        registry.register_with_unit(
            "log_open_duration",
            "Opens of bucket logs on this node (a tablet's first use: its metadata, its manifest when new, the replay of its writer windows)",
            Unit::Seconds,
            self.log_open.clone(),
        );
        registry.register_with_unit(
            "log_open_wait",
            "First uses of bucket logs waiting for an open slot (`node.max_concurrent_opens` at a time) before their open starts",
            Unit::Seconds,
            self.log_open_wait.clone(),
        );
    }

    /// Observes a delivery to a parked reader of a batch committed at `commit_ms` (ms since the
    /// epoch on the node's clock), `now_ms` now.
    pub fn delivered(&self, commit_ms: i64, now_ms: i64) {
        let ms = now_ms.saturating_sub(commit_ms).max(0);
        self.tail_delivery.observe(ms as f64 / 1000.0);
    }
}

impl StageObserver for Latencies {
    fn observe(&self, stage: AppendStage, elapsed: std::time::Duration, count: usize) {
        let Some(histogram) = AppendStage::ALL
            .iter()
            .position(|s| *s == stage)
            .and_then(|i| self.stage_histograms.get(i))
        else {
            return;
        };
        let seconds = elapsed.as_secs_f64();
        if stage == AppendStage::Put {
            // The WAL reports a group's upload once, for all its appends.
            self.wal_uploads.observe(seconds);
        }
        for _ in 0..count {
            histogram.observe(seconds);
        }
    }
}

/// An object store whose requests are timed into [`Latencies::object_requests`].
#[derive(Debug)]
pub struct TimedStorage {
    inner: Arc<dyn ObjectStorage>,
    latencies: Arc<Latencies>,
    wal_prefix: String,
    data_prefix: String,
}

impl TimedStorage {
    /// Wraps `inner`; keys under `wal_prefix` are WAL objects, under `data_prefix` committed ones.
    pub fn wrap(
        inner: Arc<dyn ObjectStorage>,
        latencies: Arc<Latencies>,
        wal_prefix: &str,
        data_prefix: &str,
    ) -> Arc<dyn ObjectStorage> {
        Arc::new(TimedStorage {
            inner,
            latencies,
            wal_prefix: wal_prefix.to_owned(),
            data_prefix: data_prefix.to_owned(),
        })
    }

    fn kind(&self, key: &str) -> &'static str {
        if key.starts_with(&self.wal_prefix) {
            "wal"
        } else if key.starts_with(&self.data_prefix) {
            "data"
        } else {
            "other"
        }
    }

    fn observe(&self, op: &'static str, key: &str, started: Instant) {
        let kind = self.kind(key);
        self.latencies
            .object_requests
            .get_or_create(&ObjectRequest { op, kind })
            .observe(started.elapsed().as_secs_f64());
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStorage for TimedStorage {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<PutResult> {
        let started = Instant::now();
        let result = self.inner.put(key, data).await;
        self.observe("put", key, started);
        result
    }

    async fn put_parts(&self, key: &str, parts: Vec<Bytes>) -> Result<PutResult> {
        let started = Instant::now();
        let result = self.inner.put_parts(key, parts).await;
        self.observe("put", key, started);
        result
    }

    async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutResult> {
        let started = Instant::now();
        let result = self.inner.put_if_absent(key, data).await;
        self.observe("put", key, started);
        result
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        let started = Instant::now();
        let result = self.inner.get(key).await;
        self.observe("get", key, started);
        result
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let started = Instant::now();
        let result = self.inner.get_range(key, range).await;
        self.observe("get", key, started);
        result
    }

    async fn get_range_pieces(
        &self,
        key: &str,
        range: Range<u64>,
        piece_len: u64,
    ) -> Result<Vec<Bytes>> {
        let started = Instant::now();
        let result = self.inner.get_range_pieces(key, range, piece_len).await;
        self.observe("get", key, started);
        result
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        let started = Instant::now();
        let result = self.inner.head(key).await;
        self.observe("head", key, started);
        result
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let started = Instant::now();
        let result = self.inner.delete(key).await;
        self.observe("delete", key, started);
        result
    }

    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        let started = Instant::now();
        let result = self.inner.delete_many(keys).await;
        self.observe("delete", keys.first().map_or("", String::as_str), started);
        result
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let started = Instant::now();
        let result = self.inner.list(prefix).await;
        self.observe("list", prefix, started);
        result
    }
}
