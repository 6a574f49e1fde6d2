//! Node registrations: where each node serves and until when it counts as alive.
//!
//! | Key | Value |
//! |---|---|
//! | `mink/nodes/{node}` | [`NodeRecord`]: node id, advertised address, expiry (Unix ms), etcd lease |
//!
//! On etcd the key is held by a lease, so it vanishes when the node stops heartbeating; on every
//! backend the record carries its expiry time, which [`Metadata::live_nodes`] checks.

use std::time::Duration;

use super::Metadata;
use super::read::{SCAN_PAGE, decode_all, get_record};
use crate::error::{MetaError, Result};
use crate::keys;
use crate::kv::{Compare, MetaKvExt, Op, Txn};
use crate::records::NodeRecord;
use crate::value::encode;

impl Metadata {
    /// Registers `node` at `address` for `ttl`: on etcd with a lease (the record vanishes if the
    /// node stops heartbeating), everywhere with an expiry time in the record.
    pub async fn register_node(
        &self,
        node: &str,
        address: &str,
        ttl: Duration,
    ) -> Result<NodeRecord> {
        keys::check_segment("node", node)?;
        let lease = match self.kv.grant_lease(ttl).await {
            Ok(lease) => Some(lease),
            Err(MetaError::Unsupported { .. }) => None,
            Err(e) => return Err(e),
        };
        let record = NodeRecord {
            node_id: node.to_owned(),
            address: address.to_owned(),
            expires_at_ms: self
                .clock
                .now_ms_unsigned()
                .saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
            lease,
        };
        let op = Op::Put {
            key: keys::node(node),
            value: encode(&record),
            lease,
        };
        self.kv
            .txn(Txn {
                compares: vec![],
                on_success: vec![op],
            })
            .await?;
        Ok(record)
    }

    /// Extends `node`'s registration by `ttl` from now. Fails with NotFound if it expired.
    pub async fn heartbeat_node(&self, node: &str, ttl: Duration) -> Result<NodeRecord> {
        keys::check_segment("node", node)?;
        let key = keys::node(node);
        let Some((mut record, version)) = get_record::<NodeRecord>(&self.kv.get(&key).await?)?
        else {
            return Err(MetaError::NotFound {
                what: "node",
                id: node.to_owned(),
            });
        };
        if let Some(lease) = record.lease {
            self.kv.keep_alive(lease).await?;
        }
        record.expires_at_ms = self
            .clock
            .now_ms_unsigned()
            .saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let op = Op::Put {
            key: key.clone(),
            value: encode(&record),
            lease: record.lease,
        };
        let outcome = self
            .kv
            .txn(Txn {
                compares: vec![Compare::version(key.clone(), version)],
                on_success: vec![op],
            })
            .await?;
        if !outcome.succeeded {
            return Err(MetaError::Contended {
                operation: "heartbeat",
                key,
                attempts: 1,
            });
        }
        Ok(record)
    }

    /// Nodes whose registration has not expired at `now_ms` (Unix milliseconds).
    pub async fn live_nodes(&self, now_ms: u64) -> Result<Vec<NodeRecord>> {
        let all: Vec<NodeRecord> = decode_all(&self.kv.scan_all(keys::NODES, SCAN_PAGE).await?)?;
        Ok(all
            .into_iter()
            .filter(|n| n.expires_at_ms > now_ms)
            .collect())
    }

    /// Removes `node`'s registration (and revokes its lease).
    pub async fn deregister_node(&self, node: &str) -> Result<()> {
        keys::check_segment("node", node)?;
        let key = keys::node(node);
        if let Some((
            NodeRecord {
                lease: Some(lease), ..
            },
            _,
        )) = get_record::<NodeRecord>(&self.kv.get(&key).await?)?
        {
            self.kv.revoke_lease(lease).await?;
        }
        self.kv.delete(&key).await?;
        Ok(())
    }
}
