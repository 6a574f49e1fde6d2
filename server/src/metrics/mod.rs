//! `/metrics`: the node's counters in the Prometheus text format.
//!
//! The node core counts appends and reads, the front ends parked waiters; the engine's own
//! counters (WAL PUTs, object GETs, uncompacted bytes) are read at scrape time by a collector, so
//! nothing is counted twice: `mink_cache_hits_total{tier}` and `mink_cache_misses_total{tier}` come from the
//! engine's tail, block and index caches. `mink_read_tier_total` attributes each HTTP read to
//! `memory` when the engine made no object GET while serving it, `object_store` otherwise (exact
//! with one reader, approximate under concurrent reads). The serving loop reports its open
//! connections, the connections it refused at accept, the request bytes it holds against
//! `http.max_inflight_request_bytes` and the requests that budget refused. In a cluster: the
//! leader's assignment writes, the dead members recovered here, whether this node leads, and
//! the buckets it released. Retention counts its runs, the offsets it trimmed and its failures.
//! The Kafka front end's are in [`kafka`].

mod kafka;

pub use kafka::{ApiLabel, ConsumerLag, HighWatermark, KafkaMetrics};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use mink_s3stream::engine::Engine;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use crate::latency::Latencies;

/// Label of the read tier counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TierLabel {
    /// `memory` or `object_store`.
    pub tier: &'static str,
}

/// The node's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Append requests that appended (or deduplicated) batches.
    pub appends: Counter,
    /// Bytes of batches appended.
    pub append_bytes: Counter,
    /// Append requests answered as duplicates.
    pub duplicates: Counter,
    /// Read requests answered (range reads, long-polls, SSE batches).
    pub reads: Counter,
    /// Bytes of batches read.
    pub read_bytes: Counter,
    /// Reads by the tier that answered.
    pub read_tiers: Family<TierLabel, Counter>,
    /// Long-poll and SSE readers parked at the tail now.
    pub waiters: Gauge,
    /// Requests refused by the rate limit.
    pub rate_limited: Counter,
    /// Long-polls parked and SSE streams open now, as held against `http.max_parked_reads`.
    pub parked_reads: Gauge,
    /// Long-polls and SSE streams refused by the parked-read limits.
    pub parked_reads_refused: Counter,
    /// HTTP connections open now.
    pub connections: Gauge,
    /// Connections closed at accept by `http.max_connections` or `http.max_connections_per_client`.
    pub connections_refused: Counter,
    /// Bytes of request bodies held now (`http.max_inflight_request_bytes`).
    pub inflight_request_bytes: Gauge,
    /// Requests refused with 503 `overloaded` by the request-bytes budget.
    pub overloaded: Counter,
    /// Bucket assignments this node wrote as the cluster's leader (moves and deletions).
    pub cluster_moves: Counter,
    /// Dead members whose WAL this node recovered.
    pub cluster_recoveries: Counter,
    /// 1 while this node leads the cluster.
    pub cluster_leader: Gauge,
    /// Buckets released to other nodes (transfers, re-spreads, drains).
    pub cluster_releases: Counter,
    /// Arrow Flight connections open now.
    pub flight_connections: Gauge,
    /// Flight connections closed at accept by the connection limits.
    pub flight_connections_refused: Counter,
    /// Live DoGet streams open now (`flight.max_live_streams`).
    pub flight_live_streams: Gauge,
    /// Retention runs finished.
    pub retention_runs: Counter,
    /// Offsets retention moved below log starts.
    pub retention_trimmed_offsets: Counter,
    /// Buckets (or whole runs) retention failed on.
    pub retention_errors: Counter,
    /// How long the last retention run took, in milliseconds.
    pub retention_last_run_ms: Gauge,
    /// Metadata snapshots written.
    pub metadata_snapshots: Counter,
    /// Metadata snapshots that failed.
    pub metadata_snapshot_errors: Counter,
    /// Size of the last metadata snapshot.
    pub metadata_snapshot_bytes: Gauge,
    /// The Kafka front end's.
    pub kafka: KafkaMetrics,
    /// Latency histograms (also fed by the object stores' timing wrapper).
    pub latencies: Arc<Latencies>,
}

impl Metrics {
    /// Metrics, with the engine's counters included when given.
    pub fn new(engine: Option<Engine>) -> Self {
        Self::with_latencies(engine, Arc::default())
    }

    /// Metrics whose latency histograms are `latencies` (shared with the object stores' timing
    /// wrapper).
    pub fn with_latencies(engine: Option<Engine>, latencies: Arc<Latencies>) -> Self {
        let mut registry = Registry::with_prefix("mink");
        let appends = Counter::default();
        let append_bytes = Counter::default();
        let duplicates = Counter::default();
        let reads = Counter::default();
        let read_bytes = Counter::default();
        let read_tiers = Family::<TierLabel, Counter>::default();
        let waiters = Gauge::default();
        let rate_limited = Counter::default();
        let parked_reads = Gauge::default();
        let parked_reads_refused = Counter::default();
        let connections = Gauge::default();
        let connections_refused = Counter::default();
        let inflight_request_bytes = Gauge::default();
        let overloaded = Counter::default();
        let cluster_moves = Counter::default();
        let cluster_recoveries = Counter::default();
        let cluster_leader = Gauge::default();
        let cluster_releases = Counter::default();
        let flight_connections = Gauge::default();
        let flight_connections_refused = Counter::default();
        let flight_live_streams = Gauge::default();
        let retention_runs = Counter::default();
        let retention_trimmed_offsets = Counter::default();
        let retention_errors = Counter::default();
        let retention_last_run_ms = Gauge::default();
        let metadata_snapshots = Counter::default();
        let metadata_snapshot_errors = Counter::default();
        let metadata_snapshot_bytes = Gauge::default();
        registry.register(
            "metadata_snapshots",
            "Metadata snapshots written to the object store",
            metadata_snapshots.clone(),
        );
        registry.register(
            "metadata_snapshot_errors",
            "Metadata snapshots that failed",
            metadata_snapshot_errors.clone(),
        );
        registry.register(
            "metadata_snapshot_bytes",
            "Size of the last metadata snapshot",
            metadata_snapshot_bytes.clone(),
        );
        registry.register("appends", "Append requests served", appends.clone());
        registry.register(
            "append_bytes",
            "Bytes of batches appended",
            append_bytes.clone(),
        );
        registry.register(
            "append_duplicates",
            "Append requests that were retries of appended batches",
            duplicates.clone(),
        );
        registry.register("reads", "Read requests served", reads.clone());
        registry.register("read_bytes", "Bytes of batches read", read_bytes.clone());
        registry.register(
            "read_tier",
            "Reads by the tier that answered them (memory: tail/log cache, object_store: GETs, shared: what another reader parked on the bucket read and rendered)",
            read_tiers.clone(),
        );
        registry.register(
            "waiters",
            "Long-poll and SSE readers parked at the tail",
            waiters.clone(),
        );
        registry.register(
            "rate_limited",
            "Requests refused by the rate limit",
            rate_limited.clone(),
        );
        registry.register(
            "parked_reads",
            "Long-polls parked and SSE streams open (limit http.max_parked_reads)",
            parked_reads.clone(),
        );
        registry.register(
            "parked_reads_refused",
            "Long-polls and SSE streams refused by the parked-read limits",
            parked_reads_refused.clone(),
        );
        registry.register(
            "http_connections",
            "HTTP connections open",
            connections.clone(),
        );
        registry.register(
            "http_connections_refused",
            "HTTP connections closed at accept by the connection limits",
            connections_refused.clone(),
        );
        registry.register(
            "http_inflight_request_bytes",
            "Bytes of request bodies held by requests in flight",
            inflight_request_bytes.clone(),
        );
        registry.register(
            "http_overloaded",
            "Requests refused because the request-bytes budget was spent",
            overloaded.clone(),
        );
        registry.register(
            "cluster_bucket_moves",
            "Bucket assignments written by this node as the cluster's leader",
            cluster_moves.clone(),
        );
        registry.register(
            "cluster_recoveries",
            "Dead members whose WAL this node recovered",
            cluster_recoveries.clone(),
        );
        registry.register(
            "cluster_leader",
            "1 while this node leads the cluster",
            cluster_leader.clone(),
        );
        registry.register(
            "cluster_bucket_releases",
            "Buckets this node released to other nodes",
            cluster_releases.clone(),
        );
        registry.register(
            "flight_connections",
            "Arrow Flight connections open",
            flight_connections.clone(),
        );
        registry.register(
            "flight_connections_refused",
            "Arrow Flight connections closed at accept by the connection limits",
            flight_connections_refused.clone(),
        );
        registry.register(
            "flight_live_streams",
            "Live DoGet streams open (limit flight.max_live_streams)",
            flight_live_streams.clone(),
        );
        registry.register(
            "retention_runs",
            "Retention runs finished",
            retention_runs.clone(),
        );
        registry.register(
            "retention_trimmed_offsets",
            "Offsets retention moved below log starts",
            retention_trimmed_offsets.clone(),
        );
        registry.register(
            "retention_errors",
            "Buckets or runs retention failed on (retried at the next run)",
            retention_errors.clone(),
        );
        registry.register(
            "retention_last_run_milliseconds",
            "How long the last retention run took",
            retention_last_run_ms.clone(),
        );
        let kafka = KafkaMetrics::default();
        kafka.register(&mut registry);
        latencies.register(&mut registry);
        if let Some(engine) = engine {
            registry.register_collector(Box::new(EngineCollector { engine }));
        }
        Metrics {
            registry,
            appends,
            append_bytes,
            duplicates,
            reads,
            read_bytes,
            read_tiers,
            waiters,
            rate_limited,
            parked_reads,
            parked_reads_refused,
            connections,
            connections_refused,
            inflight_request_bytes,
            overloaded,
            cluster_moves,
            cluster_recoveries,
            cluster_leader,
            cluster_releases,
            flight_connections,
            flight_connections_refused,
            flight_live_streams,
            retention_runs,
            retention_trimmed_offsets,
            retention_errors,
            retention_last_run_ms,
            metadata_snapshots,
            metadata_snapshot_errors,
            metadata_snapshot_bytes,
            kafka,
            latencies,
        }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Counts a read answered from `tier`.
    pub fn read_from(&self, tier: &'static str) {
        self.read_tiers.get_or_create(&TierLabel { tier }).inc();
    }

    /// A guard that counts one parked waiter while it lives.
    pub fn park(self: &Arc<Self>) -> WaiterGuard {
        self.waiters.inc();
        WaiterGuard {
            metrics: Arc::clone(self),
        }
    }
}

/// Counts a parked waiter until dropped.
#[derive(Debug)]
pub struct WaiterGuard {
    metrics: Arc<Metrics>,
}

impl Drop for WaiterGuard {
    fn drop(&mut self) {
        self.metrics.waiters.dec();
    }
}

#[derive(Debug)]
struct EngineCollector {
    engine: Engine,
}

fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: &AtomicU64,
) -> Result<(), std::fmt::Error> {
    let metric = ConstCounter::new(value.load(Ordering::Relaxed));
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for EngineCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let wal = self.engine.wal_metrics();
        let engine = self.engine.metrics();
        counter(&mut encoder, "wal_puts", "WAL objects PUT", &wal.puts)?;
        counter(
            &mut encoder,
            "wal_put_bytes",
            "Bytes PUT in WAL objects",
            &wal.put_bytes,
        )?;
        counter(
            &mut encoder,
            "wal_put_retries",
            "WAL PUT attempts that failed and were retried",
            &wal.put_retries,
        )?;
        counter(
            &mut encoder,
            "wal_put_hedges",
            "Second requests sent for WAL PUTs unanswered past the hedging delay",
            &wal.put_hedges,
        )?;
        counter(
            &mut encoder,
            "wal_put_hedge_wins",
            "Hedged WAL PUTs whose second request answered first",
            &wal.put_hedge_wins,
        )?;
        counter(
            &mut encoder,
            "object_gets",
            "GETs of committed objects",
            &engine.object_gets,
        )?;
        counter(
            &mut encoder,
            "object_get_bytes",
            "Bytes read from committed objects",
            &engine.object_bytes_read,
        )?;
        counter(
            &mut encoder,
            "decoded_block_hits",
            "Blocks of committed objects read from those kept decoded",
            &engine.decoded_block_hits,
        )?;
        counter(
            &mut encoder,
            "object_puts",
            "Committed objects written by compaction",
            &engine.objects_written,
        )?;
        counter(
            &mut encoder,
            "object_put_bytes",
            "Bytes of committed objects written by compaction, merges and regrouping",
            &engine.object_bytes_written,
        )?;
        counter(
            &mut encoder,
            "orphan_objects_deleted",
            "Committed objects no record named (left by a crash or a failed commit), deleted by the orphan sweep",
            &engine.orphans_deleted,
        )?;
        counter(
            &mut encoder,
            "stream_manifest_failures",
            "Streams created without their manifest (its PUT failed): a rebuild from objects places their data only from a metadata snapshot taken after they were created",
            &engine.manifest_failures,
        )?;
        counter(
            &mut encoder,
            "wal_objects_adopted",
            "WAL objects committed as stream-set objects as they are (written once)",
            &engine.wal_objects_adopted,
        )?;
        counter(
            &mut encoder,
            "wal_objects_rewritten",
            "WAL objects whose data compaction rewrote, then deleted",
            &engine.wal_objects_deleted,
        )?;
        counter(
            &mut encoder,
            "compactions",
            "Compactions that committed something",
            &engine.compactions,
        )?;
        let cache = self.engine.cache_metrics();
        let hits = ConstCounter::new(0u64);
        let mut family = encoder.encode_descriptor(
            "cache_hits",
            "Reads answered by a cache tier (tail: batches; block_memory/block_disk: pages; index)",
            None,
            hits.metric_type(),
        )?;
        for (tier, value) in [
            ("tail", cache.tail_hits),
            ("block_memory", cache.block_memory_hits),
            ("block_disk", cache.block_disk_hits),
            ("index", cache.index_hits),
        ] {
            ConstCounter::new(value).encode(family.encode_family(&[("tier", tier)])?)?;
        }
        let mut family = encoder.encode_descriptor(
            "cache_misses",
            "Reads a cache tier could not answer (block misses are loaded with a ranged GET)",
            None,
            hits.metric_type(),
        )?;
        for (tier, value) in [
            ("tail", cache.tail_misses),
            ("block", cache.block_misses),
            ("index", cache.index_loads),
        ] {
            ConstCounter::new(value).encode(family.encode_family(&[("tier", tier)])?)?;
        }
        let pending =
            ConstGauge::new(i64::try_from(self.engine.uncompacted_bytes()).unwrap_or(i64::MAX));
        pending.encode(encoder.encode_descriptor(
            "wal_pending_bytes",
            "Bytes appended on this node that still live only in WAL objects (not yet compacted)",
            None,
            pending.metric_type(),
        )?)?;
        Ok(())
    }
}

impl Metrics {
    /// GETs of committed objects so far (to attribute a read to a tier).
    pub fn object_gets(engine: Option<&Engine>) -> u64 {
        engine.map_or(0, |e| e.metrics().object_gets.load(Ordering::Relaxed))
    }
}
