//! [`Leader`]: the one node that decides which node owns which bucket after a table's create
//! (docs/cluster.md, "Ownership").
//!
//! Every node stands once per life in the election under `mink/leader/` with its lease; the
//! leader re-plans after every change its view sees and every two seconds, from what the store
//! holds (assignments with their versions, tables, registrations): [`plan`] is a pure function of
//! those. Its decisions are written in batches of at most [`MOVES_PER_TXN`], each compared on the
//! assignments as read and on the leader's candidacy, so a deposed leader, or an operator's
//! transfer in between, makes a batch fail whole; the next pass reads again.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use mink_metadata::{AssignmentMove, Election, MetaError, MetaKv, Metadata, NodeRecord, keys};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::OwnershipView;

/// How often the leader re-plans when nothing changes.
const PASS_INTERVAL: Duration = Duration::from_secs(2);
/// Decisions per transaction: one compare and one write each, plus the fence, within etcd's 128.
const MOVES_PER_TXN: usize = 60;

/// The table segment of an assignment key (`mink/assign/{table}/{partition}/{bucket}`).
fn table_segment(key: &str) -> Option<&str> {
    key.strip_prefix(keys::ASSIGNMENTS)?.split('/').next()
}

/// What the leader decides, from the assignments as read (`(key, node, version)`), the key
/// segments of the tables that exist, and the registrations:
///
/// - an assignment of a table that no longer exists is deleted;
/// - a bucket assigned to a node that is not registered, or is draining, goes to the serving
///   node with the fewest buckets (a node registered without an address yet is starting, and
///   keeps its buckets);
/// - then, at most `max_moves` buckets move from the node with the most to the one with the
///   fewest while they differ by more than one.
pub fn plan<'a>(
    assignments: &'a [(String, String, u64)],
    tables: &HashSet<String>,
    nodes: &'a [NodeRecord],
    max_moves: usize,
) -> Vec<AssignmentMove> {
    let registered: HashSet<&str> = nodes.iter().map(|n| n.node_id.as_str()).collect();
    let starting: HashSet<&str> = nodes
        .iter()
        .filter(|n| !n.draining && n.http_url.is_empty())
        .map(|n| n.node_id.as_str())
        .collect();
    let mut owned: BTreeMap<&str, Vec<(&str, u64)>> = nodes
        .iter()
        .filter(|n| !n.draining && !n.http_url.is_empty())
        .map(|n| (n.node_id.as_str(), Vec::new()))
        .collect();
    let mut moves = Vec::new();
    let mut orphans = Vec::new();
    for (key, node, version) in assignments {
        if !table_segment(key).is_some_and(|t| tables.contains(t)) {
            moves.push(AssignmentMove {
                key: key.clone(),
                version: *version,
                to: None,
            });
        } else if let Some(list) = owned.get_mut(node.as_str()) {
            list.push((key, *version));
        } else if !(registered.contains(node.as_str()) && starting.contains(node.as_str())) {
            orphans.push((key, *version));
        }
    }
    if owned.is_empty() {
        return moves;
    }
    let fewest = |owned: &BTreeMap<&str, Vec<(&str, u64)>>| {
        owned
            .iter()
            .min_by_key(|(node, list)| (list.len(), **node))
            .map(|(node, _)| (*node).to_owned())
    };
    // A bucket just placed on a node is marked (version MAX) so balancing does not move it again.
    let mut place = |owned: &mut BTreeMap<&'a str, Vec<(&'a str, u64)>>,
                     key: &'a str,
                     version: u64,
                     to: String| {
        if let Some(list) = owned.get_mut(to.as_str()) {
            list.push((key, u64::MAX));
        }
        moves.push(AssignmentMove {
            key: key.to_owned(),
            version,
            to: Some(to),
        });
    };
    for (key, version) in orphans {
        let Some(to) = fewest(&owned) else { break };
        place(&mut owned, key, version, to);
    }
    let mut balanced = 0;
    while balanced < max_moves {
        let Some((most, _)) = owned
            .iter()
            .filter(|(_, list)| list.iter().any(|(_, v)| *v != u64::MAX))
            .max_by_key(|(node, list)| (list.len(), std::cmp::Reverse(**node)))
            .map(|(n, l)| ((*n).to_owned(), l.len()))
        else {
            break;
        };
        let Some(least) = fewest(&owned) else { break };
        let (high, low) = (owned[most.as_str()].len(), owned[least.as_str()].len());
        if high <= low + 1 {
            break;
        }
        // The last bucket it holds that was not just placed there.
        let list = owned.get_mut(most.as_str()).expect("a node of the map");
        let Some(at) = list.iter().rposition(|(_, v)| *v != u64::MAX) else {
            break;
        };
        let (key, version) = list.remove(at);
        place(&mut owned, key, version, least);
        balanced += 1;
    }
    moves
}

/// This node's candidacy, and the leader's work while it leads.
pub struct Leader {
    metadata: Arc<Metadata>,
    kv: Arc<dyn MetaKv>,
    view: Arc<OwnershipView>,
    member: String,
    lease: Option<mink_metadata::LeaseId>,
    max_moves: usize,
    election: Mutex<Option<Election>>,
    metrics: Arc<crate::metrics::Metrics>,
}

impl std::fmt::Debug for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leader")
            .field("member", &self.member)
            .finish_non_exhaustive()
    }
}

impl Leader {
    /// The candidacy of `member` (held by `lease`), moving at most `max_moves` buckets per pass
    /// to balance the nodes.
    pub fn new(
        metadata: Arc<Metadata>,
        kv: Arc<dyn MetaKv>,
        view: Arc<OwnershipView>,
        member: String,
        lease: Option<mink_metadata::LeaseId>,
        max_moves: usize,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        Leader {
            metadata,
            kv,
            view,
            member,
            lease,
            max_moves,
            election: Mutex::new(None),
            metrics,
        }
    }

    /// Stands, then leads whenever elected, until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let election = loop {
            match Election::campaign(self.kv.as_ref(), keys::LEADER, &self.member, self.lease).await
            {
                Ok(election) => break election,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot stand in the leader election; retrying")
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(PASS_INTERVAL) => {}
            }
        };
        *self.election.lock() = Some(election.clone());
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                led = election.leadership(self.kv.as_ref()) => match led {
                    Ok(()) => {}
                    Err(MetaError::NotFound { .. }) => {
                        tracing::warn!("this node's candidacy is gone; it leads no more");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot follow the leader election; retrying");
                        tokio::time::sleep(PASS_INTERVAL).await;
                        continue;
                    }
                },
            }
            tracing::info!(member = %self.member, revision = election.revision(), "leading the cluster");
            self.metrics.cluster_leader.set(1);
            loop {
                // Armed before the pass, so a change during it wakes the next one.
                let changed = self.view.changed();
                if let Err(e) = self.pass(&election).await {
                    tracing::warn!(error = %e, "the leader's pass failed; the next one retries");
                }
                match election.is_leader(self.kv.as_ref()).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::info!("no longer leading");
                        self.metrics.cluster_leader.set(0);
                        break;
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot check the leadership"),
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = changed => {}
                    () = tokio::time::sleep(PASS_INTERVAL) => {}
                }
            }
        }
    }

    /// One pass of the leader: plans from the store and writes the decisions. Returns how many
    /// were written.
    pub async fn pass(&self, election: &Election) -> mink_metadata::Result<usize> {
        // Assignments before tables: a table and its assignments are created in one
        // transaction, so every assignment read has its table in the later read unless dropped.
        let assignments: Vec<(String, String, u64)> = self
            .metadata
            .assignments_versioned()
            .await?
            .into_iter()
            .map(|(key, a, version)| (key, a.node, version))
            .collect();
        let tables: HashSet<String> = self
            .metadata
            .list_tables()
            .await?
            .iter()
            .map(|t| keys::table_segment(&t.name, t.incarnation))
            .collect();
        let nodes = self.metadata.live_nodes().await?;
        let moves = plan(&assignments, &tables, &nodes, self.max_moves);
        let mut written = 0;
        for batch in moves.chunks(MOVES_PER_TXN) {
            if !self
                .metadata
                .assign_as_leader(batch, election.fence(), election.revision())
                .await?
            {
                tracing::info!("assignments changed under the leader; planning again");
                break;
            }
            let before: BTreeMap<&str, &str> = assignments
                .iter()
                .map(|(k, n, _)| (k.as_str(), n.as_str()))
                .collect();
            for m in batch {
                match &m.to {
                    Some(to) => tracing::info!(
                        assignment = %m.key,
                        from = before.get(m.key.as_str()).copied().unwrap_or("none"),
                        to = %to,
                        "leader moved a bucket"
                    ),
                    None => {
                        tracing::info!(assignment = %m.key, "leader removed the assignment of a dropped table")
                    }
                }
            }
            self.view.assigned(
                batch
                    .iter()
                    .filter_map(|m| Some((m.key.clone(), m.to.clone()?))),
            );
            written += batch.len();
            self.metrics.cluster_moves.inc_by(batch.len() as u64);
        }
        Ok(written)
    }

    /// Ends the candidacy (at shutdown): another node leads at once.
    pub async fn resign(&self) {
        self.metrics.cluster_leader.set(0);
        let election = self.election.lock().take();
        if let Some(election) = election
            && let Err(e) = election.resign(self.kv.as_ref()).await
        {
            tracing::warn!(error = %e, "resigning the leadership failed; it ends with the lease");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn node(id: &str, url: &str, draining: bool) -> NodeRecord {
        NodeRecord {
            node_id: id.to_owned(),
            incarnation: 1,
            broker_id: 1,
            http_url: url.to_owned(),
            kafka_address: None,
            flight_url: None,
            lease: None,
            started_at_ms: 0,
            draining,
        }
    }

    fn assignment(table: &str, bucket: u32, node: &str) -> (String, String, u64) {
        (keys::assignment(table, "p", bucket), node.to_owned(), 7)
    }

    fn targets(moves: &[AssignmentMove]) -> BTreeSet<String> {
        moves.iter().filter_map(|m| m.to.clone()).collect()
    }

    fn tables(names: &[&str]) -> HashSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn counts(
        assignments: &[(String, String, u64)],
        moves: &[AssignmentMove],
    ) -> BTreeMap<String, usize> {
        let mut now: BTreeMap<String, String> = assignments
            .iter()
            .map(|(k, n, _)| (k.clone(), n.clone()))
            .collect();
        for m in moves {
            match &m.to {
                Some(to) => {
                    now.insert(m.key.clone(), to.clone());
                }
                None => {
                    now.remove(&m.key);
                }
            }
        }
        let mut counts = BTreeMap::new();
        for node in now.values() {
            *counts.entry(node.clone()).or_default() += 1;
        }
        counts
    }

    #[test]
    fn a_dead_nodes_buckets_go_to_the_survivors_evenly() {
        let all: Vec<_> = (0..9)
            .map(|b| assignment("t", b, ["a", "b", "c"][b as usize % 3]))
            .collect();
        let nodes = [node("a", "http://a", false), node("b", "http://b", false)];
        let moves = plan(&all, &tables(&["t"]), &nodes, 16);
        assert_eq!(moves.len(), 3, "only c's buckets move: {moves:?}");
        assert!(moves.iter().all(|m| m.version == 7));
        let counts = counts(&all, &moves);
        assert_eq!(counts.get("c"), None);
        assert!(counts["a"].abs_diff(counts["b"]) <= 1, "{counts:?}");
    }

    #[test]
    fn a_draining_node_is_emptied_and_a_starting_one_keeps_its_buckets() {
        let all: Vec<_> = (0..6)
            .map(|b| assignment("t", b, ["a", "b", "c"][b as usize % 3]))
            .collect();
        let nodes = [
            node("a", "http://a", false),
            node("b", "http://b", true),
            node("c", "", false),
        ];
        let moves = plan(&all, &tables(&["t"]), &nodes, 0);
        assert_eq!(targets(&moves), BTreeSet::from(["a".to_owned()]));
        assert_eq!(moves.len(), 2, "b's two buckets: {moves:?}");
    }

    #[test]
    fn a_new_node_gets_buckets_until_counts_differ_by_one_paced() {
        let all: Vec<_> = (0..10).map(|b| assignment("t", b, "a")).collect();
        let nodes = [node("a", "http://a", false), node("b", "http://b", false)];
        let paced = plan(&all, &tables(&["t"]), &nodes, 3);
        assert_eq!(paced.len(), 3);
        let moves = plan(&all, &tables(&["t"]), &nodes, 100);
        assert_eq!(moves.len(), 5);
        assert_eq!(counts(&all, &moves)["b"], 5);
        // Balanced already: nothing to do.
        let even: Vec<_> = (0..4)
            .map(|b| assignment("t", b, ["a", "b"][b as usize % 2]))
            .collect();
        assert!(plan(&even, &tables(&["t"]), &nodes, 100).is_empty());
    }

    #[test]
    fn assignments_of_dropped_tables_are_deleted() {
        let all = vec![assignment("gone@2", 0, "a"), assignment("t", 0, "a")];
        let nodes = [node("a", "http://a", false)];
        let moves = plan(&all, &tables(&["t"]), &nodes, 16);
        assert_eq!(
            moves,
            vec![AssignmentMove {
                key: keys::assignment("gone@2", "p", 0),
                version: 7,
                to: None,
            }]
        );
        // With no serving node, only the deletions.
        assert_eq!(plan(&all, &tables(&["t"]), &[], 16).len(), 1);
    }
}
