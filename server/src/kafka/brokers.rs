//! The brokers a client is told about: every live node of the cluster that serves Kafka, each
//! under its broker id; which of them leads each partition (the bucket's owner) and which
//! coordinates each group (docs/kafka.md, "Brokers"). A node alone is the only broker.

use std::collections::HashMap;

use mink_metadata::NodeRecord;

use super::errors::code;
use super::state::Kafka;
use crate::catalog::TableInfo;
use crate::cluster::Route;

/// One broker: id, host, port.
pub(crate) type Broker = (i32, String, i32);

/// The brokers as this node sees them now.
pub(crate) struct Brokers {
    me: i32,
    /// Sorted by broker id.
    list: Vec<Broker>,
    /// Broker ids by node id.
    by_node: HashMap<String, i32>,
}

impl Brokers {
    pub(crate) fn of(kafka: &Kafka) -> Self {
        let me = (kafka.broker_id(), kafka.host.clone(), kafka.port);
        let mut list = vec![me.clone()];
        let mut by_node = HashMap::new();
        if let Some(view) = kafka.core().ownership() {
            by_node.insert(view.me().to_owned(), me.0);
            for node in view.live_nodes() {
                if node.node_id == view.me() {
                    continue;
                }
                if let Some(broker) = broker_of(&node) {
                    by_node.insert(node.node_id.clone(), broker.0);
                    list.push(broker);
                }
            }
        }
        list.sort_by_key(|b| b.0);
        list.dedup_by_key(|b| b.0);
        Brokers {
            me: me.0,
            list,
            by_node,
        }
    }

    /// Every broker.
    pub(crate) fn all(&self) -> &[Broker] {
        &self.list
    }

    /// The broker id of the leader of partition `bucket` of `info`: its owner, or the error
    /// code when nobody serves it now (`LEADER_NOT_AVAILABLE`: clients retry).
    pub(crate) fn leader(&self, kafka: &Kafka, info: &TableInfo, bucket: u32) -> Result<i32, i16> {
        let Some(view) = kafka.core().ownership() else {
            return Ok(self.me);
        };
        let partition = info
            .record()
            .partitions
            .first()
            .cloned()
            .unwrap_or_default();
        let key = kafka
            .core()
            .log_key(info, bucket, &partition)
            .map_err(|_| code::UNKNOWN_TOPIC_OR_PARTITION)?;
        match view.route(&key) {
            Route::Local => Ok(self.me),
            Route::Remote { node, .. } => self
                .by_node
                .get(&node)
                .copied()
                .ok_or(code::LEADER_NOT_AVAILABLE),
            Route::Unavailable { .. } => Err(code::LEADER_NOT_AVAILABLE),
        }
    }

    /// The broker that coordinates `group`: the highest of a hash of the group and each broker
    /// id (rendezvous hashing), so a broker that comes or goes moves only its own share.
    pub(crate) fn coordinator(&self, group: &str) -> &Broker {
        self.list
            .iter()
            .max_by_key(|b| score(group, b.0))
            .unwrap_or(&self.list[0])
    }

    /// Whether this node coordinates `group`.
    pub(crate) fn coordinates(&self, group: &str) -> bool {
        self.coordinator(group).0 == self.me
    }
}

/// A node's broker, when its Kafka address is `host:port`.
fn broker_of(node: &NodeRecord) -> Option<Broker> {
    let address = node.kafka_address.as_ref()?;
    let (host, port) = address.rsplit_once(':')?;
    Some((node.broker_id, host.to_owned(), port.parse().ok()?))
}

/// FNV-1a of the group id and the broker id: the same on every node and every build.
fn score(group: &str, broker: i32) -> u64 {
    group
        .bytes()
        .chain(broker.to_be_bytes())
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers(ids: &[i32]) -> Brokers {
        Brokers {
            me: ids[0],
            list: ids.iter().map(|id| (*id, "h".to_owned(), 9092)).collect(),
            by_node: HashMap::new(),
        }
    }

    #[test]
    fn groups_spread_over_brokers_and_a_departure_moves_only_its_own() {
        let three = brokers(&[1, 2, 3]);
        let two = brokers(&[1, 2]);
        let groups: Vec<String> = (0..300).map(|i| format!("group-{i}")).collect();
        let mut per_broker = HashMap::new();
        for g in &groups {
            let before = three.coordinator(g).0;
            *per_broker.entry(before).or_insert(0) += 1;
            if before != 3 {
                assert_eq!(
                    two.coordinator(g).0,
                    before,
                    "{g} moved though its broker stayed"
                );
            }
        }
        assert_eq!(per_broker.len(), 3);
        assert!(per_broker.values().all(|n| *n > 50), "{per_broker:?}");
    }
}
