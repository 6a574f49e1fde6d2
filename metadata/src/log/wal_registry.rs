//! The WAL registry: which object ids each node reserved for its WAL objects and has not yet seen
//! compacted, so recovery finds every uncompacted WAL object without listing the bucket.
//!
//! | Key | Value |
//! |---|---|
//! | `mink/wal/{node}/{first_id:020}` | [`WalReservation`]: node, `[first_id, end_id)` still live |
//!
//! A block is registered before its ids are handed out. Commits retire ids below a bound
//! ([`WalCompacted`]): a block wholly below it is deleted, one straddling it keeps its key and
//! moves its live start.

use std::ops::Range;

use futures::future::try_join_all;

use super::Metadata;
use super::read::{SCAN_PAGE, decode_all};
use crate::error::{MetaError, Result};
use crate::keys;
use crate::kv::{Compare, KeyValue, MetaKvExt, Op, Txn};
use crate::records::WalReservation;
use crate::value::{decode, encode};

/// WAL ids of `node` below `below` have been compacted (their data is in committed objects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalCompacted {
    /// The node whose WAL it is.
    pub node: String,
    /// Every WAL object id of the node below this is compacted.
    pub below: u64,
}

impl Metadata {
    /// Reserves `count` object ids for `node`'s WAL objects and registers them, so recovery finds
    /// them. One call per block of WAL uploads. The ids are registered before they are returned.
    /// Fails with [`MetaError::Recovered`] once another member claimed `node`'s recovery.
    pub async fn reserve_wal_ids(&self, node: &str, count: u64) -> Result<Range<u64>> {
        keys::check_segment("node", node)?;
        let ids = self.object_ids.reserve(count).await?;
        let reservation = WalReservation {
            node: node.to_owned(),
            first_id: ids.start,
            end_id: ids.end,
        };
        // Never once the node's member is claimed for recovery: what the claimer replays is
        // then all it will ever have written.
        let outcome = self
            .kv
            .txn(Txn {
                compares: vec![Compare::absent(keys::recovery(node))],
                on_success: vec![Op::put(keys::wal(node, ids.start), encode(&reservation))],
            })
            .await?;
        if !outcome.succeeded {
            return Err(MetaError::Recovered {
                member: node.to_owned(),
            });
        }
        Ok(ids)
    }

    /// The uncompacted WAL id ranges of `node`, in id order. Recovery reads each id's object; an id
    /// whose object does not exist was reserved but never written.
    pub async fn wal_reservations(&self, node: &str) -> Result<Vec<WalReservation>> {
        keys::check_segment("node", node)?;
        decode_all(&self.kv.scan_all(&keys::wal_node(node), SCAN_PAGE).await?)
    }

    /// Nodes that have WAL reservations (alive or not), for takeover after a node dies.
    pub async fn wal_nodes(&self) -> Result<Vec<String>> {
        let all: Vec<WalReservation> = decode_all(&self.kv.scan_all(keys::WAL, SCAN_PAGE).await?)?;
        let mut nodes: Vec<String> = all.into_iter().map(|r| r.node).collect();
        nodes.dedup();
        Ok(nodes)
    }

    /// The registrations of each node in `retire` as stored, with their versions, for a commit to
    /// compare on.
    pub(super) async fn read_wal_registrations(
        &self,
        retire: &[WalCompacted],
    ) -> Result<Vec<Vec<KeyValue>>> {
        try_join_all(
            retire.iter().map(|w| async move {
                self.kv.scan_all(&keys::wal_node(&w.node), SCAN_PAGE).await
            }),
        )
        .await
    }
}

/// Adds to a commit the compares and writes that retire `retire.below` on the node's
/// `reservations` (as read by [`Metadata::read_wal_registrations`]).
pub(super) fn retire_wal(
    retire: &WalCompacted,
    reservations: &[KeyValue],
    compares: &mut Vec<Compare>,
    ops: &mut Vec<Op>,
) -> Result<()> {
    for kv in reservations {
        let mut reservation = decode::<WalReservation>(&kv.key, &kv.value)?;
        if reservation.first_id >= retire.below {
            continue;
        }
        compares.push(Compare::version(kv.key.clone(), kv.version));
        if reservation.end_id <= retire.below {
            ops.push(Op::delete(kv.key.clone()));
        } else {
            // Keep the key (named after the block's first id); move the live start.
            reservation.first_id = retire.below;
            ops.push(Op::put(kv.key.clone(), encode(&reservation)));
        }
    }
    Ok(())
}
