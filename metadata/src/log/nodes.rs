//! Node registrations: which life of each node is alive and where it serves.
//!
//! | Key | Value |
//! |---|---|
//! | `mink/nodes/{node}` | [`NodeRecord`], put with the node's lease |
//! | `mink/incarnations/{node}` | the node's last incarnation (an id counter) |
//! | `mink/broker-ids/{node}` | the node's Kafka broker id (an id counter's value), for good |
//!
//! On a store with leases the registration vanishes with its lease, so the registrations present
//! are the nodes alive. A store without leases (redb) holds one node only, registered without one.

use super::Metadata;
use super::read::{SCAN_PAGE, decode_all, get_record};
use crate::alloc::{IdKind, reserve_at, reserve_block};
use crate::error::{MetaError, Result};
use crate::keys;
use crate::kv::{CasOutcome, Compare, MetaKvExt, Op, Txn};
use crate::records::{IdCounter, NodeRecord};
use crate::value::{decode, encode};

impl Metadata {
    /// The next incarnation of `node`: 1 at its first start, one more at every start after.
    pub async fn next_incarnation(&self, node: &str) -> Result<u64> {
        keys::check_segment("node", node)?;
        Ok(
            reserve_at(self.kv.as_ref(), keys::incarnation(node), 1, u64::MAX)
                .await?
                .end,
        )
    }

    /// The Kafka broker id of `node`: allocated at its first start, the same ever after.
    pub async fn broker_id(&self, node: &str) -> Result<i32> {
        keys::check_segment("node", node)?;
        let key = keys::broker_id(node);
        let read = |raw: &[u8]| -> Result<i32> {
            let id = decode::<IdCounter>(&key, raw)?.0;
            i32::try_from(id).map_err(|_| MetaError::Corrupt {
                key: key.clone(),
                reason: format!("broker id {id} does not fit an i32"),
            })
        };
        if let Some(kv) = self.kv.get(&key).await? {
            return read(&kv.value);
        }
        // Broker ids start at 1; a lost race wastes one.
        let id = reserve_block(self.kv.as_ref(), IdKind::Broker, 1)
            .await?
            .end;
        match self
            .kv
            .compare_and_swap(&key, 0, Some(encode(&IdCounter(id))))
            .await?
        {
            CasOutcome::Swapped { .. } => read(&encode(&IdCounter(id))),
            CasOutcome::Conflict {
                current: Some(kv), ..
            } => read(&kv.value),
            CasOutcome::Conflict { current: None } => Err(MetaError::Contended {
                operation: "allocate a broker id",
                key,
                attempts: 1,
            }),
        }
    }

    /// Registers `record` (with its lease, when it has one). Fails with
    /// [`MetaError::AlreadyExists`] while another registration of the same node id is present:
    /// a previous life whose lease has not expired yet, or another process using the same id.
    pub async fn register_node(&self, record: &NodeRecord) -> Result<()> {
        keys::check_segment("node", &record.node_id)?;
        let key = keys::node(&record.node_id);
        let outcome = self
            .kv
            .txn(Txn {
                compares: vec![Compare::absent(key.clone())],
                on_success: vec![Op::Put {
                    key: key.clone(),
                    value: encode(record),
                    lease: record.lease,
                }],
            })
            .await?;
        if outcome.succeeded {
            return Ok(());
        }
        let present = get_record::<NodeRecord>(&self.kv.get(&key).await?)?;
        Err(MetaError::AlreadyExists {
            what: "node registration",
            id: match present {
                Some((other, _)) => format!("{} (member {})", record.node_id, other.member()),
                None => record.node_id.clone(),
            },
        })
    }

    /// Registers `record` in place of any registration of its node id, for a store without leases,
    /// which holds one node only: a registration a crash left behind is replaced.
    pub async fn replace_node(&self, record: &NodeRecord) -> Result<()> {
        keys::check_segment("node", &record.node_id)?;
        self.kv
            .txn(Txn {
                compares: vec![],
                on_success: vec![Op::Put {
                    key: keys::node(&record.node_id),
                    value: encode(record),
                    lease: record.lease,
                }],
            })
            .await?;
        Ok(())
    }

    /// Rewrites the registration of `record`'s member (to set `draining`, say). Fails with
    /// [`MetaError::NotFound`] when that member is not the one registered.
    pub async fn update_node(&self, record: &NodeRecord) -> Result<()> {
        keys::check_segment("node", &record.node_id)?;
        let key = keys::node(&record.node_id);
        let not_found = || MetaError::NotFound {
            what: "node registration",
            id: record.member(),
        };
        let Some((current, version)) = get_record::<NodeRecord>(&self.kv.get(&key).await?)? else {
            return Err(not_found());
        };
        if current.incarnation != record.incarnation {
            return Err(not_found());
        }
        let outcome = self
            .kv
            .txn(Txn {
                compares: vec![Compare::version(key.clone(), version)],
                on_success: vec![Op::Put {
                    key,
                    value: encode(record),
                    lease: record.lease,
                }],
            })
            .await?;
        if outcome.succeeded {
            Ok(())
        } else {
            Err(not_found())
        }
    }

    /// The registrations present: on a store with leases, the nodes alive.
    pub async fn live_nodes(&self) -> Result<Vec<NodeRecord>> {
        decode_all(&self.kv.scan_all(keys::NODES, SCAN_PAGE).await?)
    }

    /// Removes the registration of `record`'s member, if it is the one registered.
    pub async fn deregister_node(&self, record: &NodeRecord) -> Result<()> {
        keys::check_segment("node", &record.node_id)?;
        let key = keys::node(&record.node_id);
        if let Some((current, version)) = get_record::<NodeRecord>(&self.kv.get(&key).await?)?
            && current.incarnation == record.incarnation
        {
            self.kv.compare_and_swap(&key, version, None).await?;
        }
        Ok(())
    }
}
