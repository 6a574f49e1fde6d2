//! The Kafka front end's metrics: its connections, requests by API, and each consumer group's
//! committed offsets and lag per partition (`mink_kafka_consumer_lag`: the partition's high
//! watermark minus the group's committed offset, computed at scrape time).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

/// Label of the Kafka request counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ApiLabel {
    /// The API's name (`Produce`, `Fetch`, ...).
    pub api: String,
}

/// The high watermark of a partition whose lag is shown, while its log is open on this node.
pub type HighWatermark = Box<dyn Fn() -> Option<u64> + Send + Sync>;

/// Partitions of groups shown at most (each commit of a new one past it is left out).
const MAX_LAG_SERIES: usize = 10_000;

/// (group, topic, partition).
type LagKey = (String, String, u32);

/// The committed offsets of the groups that committed on this node, with their partitions'
/// high watermarks.
#[derive(Default)]
pub struct ConsumerLag {
    entries: RwLock<HashMap<LagKey, (i64, HighWatermark)>>,
}

impl std::fmt::Debug for ConsumerLag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerLag")
            .field("series", &self.entries.read().len())
            .finish()
    }
}

impl ConsumerLag {
    /// Records `group`'s commit of `offset` to `partition` of `topic`.
    pub fn committed(
        &self,
        group: &str,
        topic: &str,
        partition: u32,
        offset: i64,
        high_watermark: HighWatermark,
    ) {
        let mut entries = self.entries.write();
        let key = (group.to_owned(), topic.to_owned(), partition);
        if entries.len() >= MAX_LAG_SERIES && !entries.contains_key(&key) {
            return;
        }
        entries.insert(key, (offset, high_watermark));
    }

    /// Forgets every series of `topic` (a dropped topic).
    pub fn forget_topic(&self, topic: &str) {
        self.entries.write().retain(|(_, t, _), _| t != topic);
    }
}

/// The scrape-time view of [`ConsumerLag`].
#[derive(Debug)]
struct LagCollector(Arc<ConsumerLag>);

impl Collector for LagCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let entries = self.0.entries.read();
        let mut rows: Vec<(&LagKey, i64, Option<u64>)> = entries
            .iter()
            .map(|(key, (offset, hwm))| (key, *offset, hwm()))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(b.0));
        let kind = ConstGauge::new(0i64).metric_type();
        let mut committed = encoder.encode_descriptor(
            "kafka_committed_offset",
            "A Kafka consumer group's committed offset of a partition",
            None,
            kind,
        )?;
        for ((group, topic, partition), offset, _) in &rows {
            let partition = partition.to_string();
            let labels = [
                ("group", group.as_str()),
                ("topic", topic.as_str()),
                ("partition", partition.as_str()),
            ];
            ConstGauge::new(*offset).encode(committed.encode_family(&labels)?)?;
        }
        let mut lag = encoder.encode_descriptor(
            "kafka_consumer_lag",
            "Records of a partition past a Kafka consumer group's committed offset (high watermark minus committed offset; partitions whose log is open on this node)",
            None,
            kind,
        )?;
        for ((group, topic, partition), offset, hwm) in &rows {
            let Some(hwm) = hwm else { continue };
            let partition = partition.to_string();
            let labels = [
                ("group", group.as_str()),
                ("topic", topic.as_str()),
                ("partition", partition.as_str()),
            ];
            let behind = i64::try_from(*hwm).unwrap_or(i64::MAX) - offset.max(&0);
            ConstGauge::new(behind.max(0)).encode(lag.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// The Kafka front end's metrics.
#[derive(Debug, Default)]
pub struct KafkaMetrics {
    /// Kafka connections open now.
    pub connections: Gauge,
    /// Kafka connections closed at accept by `kafka.max_connections`.
    pub connections_refused: Counter,
    /// Requests handled, by API.
    pub requests: Family<ApiLabel, Counter>,
    /// Consumer groups' committed offsets and lag.
    pub lag: Arc<ConsumerLag>,
}

impl KafkaMetrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "kafka_connections",
            "Kafka connections open",
            self.connections.clone(),
        );
        registry.register(
            "kafka_connections_refused",
            "Kafka connections closed at accept by kafka.max_connections",
            self.connections_refused.clone(),
        );
        registry.register(
            "kafka_requests",
            "Kafka requests handled, by API",
            self.requests.clone(),
        );
        registry.register_collector(Box::new(LagCollector(self.lag.clone())));
    }
}
