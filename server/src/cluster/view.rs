//! [`OwnershipView`]: the node's watched, local copy of who owns which bucket and where each
//! live node serves, so routing a request costs no metadata round trip.
//!
//! It follows two key families: the bucket assignments (`mink/assign/`) and the node
//! registrations (`mink/nodes/`). The watches are opened before the first scan, so no change
//! falls between them; a watch that breaks (a lost connection, a watcher that fell behind) is
//! reopened and the families scanned again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use mink_metadata::value::decode;
use mink_metadata::{BucketAssignment, MetaKv, Metadata, NodeRecord, WatchEvent, keys};
use mink_runtime::Backoff;
use parking_lot::RwLock;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::bucket_log::LogKey;

/// Where a request for a bucket goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// This node serves it.
    Local,
    /// Another live node does, at this base URL.
    Remote {
        /// The owner's node id.
        node: String,
        /// Its advertised HTTP base URL.
        url: String,
    },
    /// Its owner is not alive (or not known yet): nobody serves it right now.
    Unavailable {
        /// Why, for the 503's message.
        why: String,
    },
}

#[derive(Debug, Default)]
struct State {
    /// Assigned node of each bucket, by assignment key.
    assignments: HashMap<String, String>,
    /// Live registrations, by node id.
    nodes: HashMap<String, NodeRecord>,
    /// Members whose registration went (or was replaced by a later life), not yet taken by
    /// failover.
    departed: Vec<String>,
}

/// What wakes the view's followers.
#[derive(Debug, Default)]
struct Signals {
    /// A member's registration went.
    departure: Notify,
    /// Anything changed (an assignment, a registration).
    change: Notify,
}

/// The local view of ownership; see the module doc.
pub struct OwnershipView {
    me: String,
    state: Arc<RwLock<State>>,
    signals: Arc<Signals>,
    metadata: Arc<Metadata>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for OwnershipView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.read();
        f.debug_struct("OwnershipView")
            .field("me", &self.me)
            .field("assignments", &state.assignments.len())
            .field("nodes", &state.nodes.len())
            .finish()
    }
}

impl Drop for OwnershipView {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The assignment key of a bucket.
pub fn assignment_key(key: &LogKey) -> String {
    keys::assignment(
        &keys::table_segment(&key.table, key.incarnation),
        &key.partition,
        key.bucket,
    )
}

impl OwnershipView {
    /// Starts following the store for node `me`; returns once the first scan is in.
    pub async fn start(
        me: String,
        metadata: Arc<Metadata>,
        kv: Arc<dyn MetaKv>,
    ) -> mink_metadata::Result<Self> {
        let state = Arc::new(RwLock::new(State::default()));
        let signals = Arc::new(Signals::default());
        let watches = open_watches(&kv).await?;
        rescan(&metadata, &state, &signals).await?;
        let task = tokio::spawn(follow(
            kv,
            Arc::clone(&metadata),
            Arc::clone(&state),
            Arc::clone(&signals),
            watches,
        ));
        Ok(OwnershipView {
            me,
            state,
            signals,
            metadata,
            task,
        })
    }

    /// This node's id.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// Where a request for `key` goes, by the view. A bucket without an assignment (a table
    /// created before assignments, or on a store without them) is served here.
    pub fn route(&self, key: &LogKey) -> Route {
        let state = self.state.read();
        let Some(node) = state.assignments.get(&assignment_key(key)) else {
            return Route::Local;
        };
        route_to(&self.me, node, state.nodes.get(node))
    }

    /// Where a request for `key` goes, by the store itself rather than the view: for a request
    /// another node redirected here that the view would send back (one of the two views is
    /// behind).
    pub async fn route_fresh(&self, key: &LogKey) -> mink_metadata::Result<Route> {
        let Some(assignment) = self.metadata.assignment(&assignment_key(key)).await? else {
            return Ok(Route::Local);
        };
        let node = self
            .metadata
            .live_nodes()
            .await?
            .into_iter()
            .find(|n| n.node_id == assignment.node);
        Ok(route_to(&self.me, &assignment.node, node.as_ref()))
    }

    /// The live nodes, by node id.
    pub fn live_nodes(&self) -> Vec<NodeRecord> {
        let mut nodes: Vec<NodeRecord> = self.state.read().nodes.values().cloned().collect();
        nodes.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        nodes
    }

    /// Every assignment in the view, `(key, node)`, by key.
    pub fn assignments(&self) -> Vec<(String, String)> {
        let mut all: Vec<(String, String)> = self
            .state
            .read()
            .assignments
            .iter()
            .map(|(k, n)| (k.clone(), n.clone()))
            .collect();
        all.sort();
        all
    }

    /// The members whose registration went since the last call (for failover).
    pub fn take_departed(&self) -> Vec<String> {
        std::mem::take(&mut self.state.write().departed)
    }

    /// Resolves when a member's registration goes.
    pub fn departure(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let signals = Arc::clone(&self.signals);
        async move { signals.departure.notified().await }
    }

    /// Resolves at the next change the view sees (an assignment or a registration).
    pub fn changed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let signals = Arc::clone(&self.signals);
        async move { signals.change.notified().await }
    }

    /// Records assignments this node has just written, before the watch brings them back.
    pub fn assigned(&self, assignments: impl IntoIterator<Item = (String, String)>) {
        self.state.write().assignments.extend(assignments);
    }

    /// Records this node's own registration, before the watch brings it back.
    pub fn registered(&self, record: NodeRecord) {
        self.state
            .write()
            .nodes
            .insert(record.node_id.clone(), record);
    }
}

fn route_to(me: &str, node: &str, record: Option<&NodeRecord>) -> Route {
    if node == me {
        return Route::Local;
    }
    match record {
        Some(record) if !record.http_url.is_empty() => Route::Remote {
            node: node.to_owned(),
            url: record.http_url.clone(),
        },
        _ => Route::Unavailable {
            why: format!(
                "its owner, node {node}, is not alive; it moves once the node's lease ends"
            ),
        },
    }
}

type Watches = (mink_metadata::WatchStream, mink_metadata::WatchStream);

async fn open_watches(kv: &Arc<dyn MetaKv>) -> mink_metadata::Result<Watches> {
    Ok((
        kv.watch_prefix(keys::ASSIGNMENTS).await?,
        kv.watch_prefix(keys::NODES).await?,
    ))
}

/// Reads both families whole into `state`.
async fn rescan(
    metadata: &Metadata,
    state: &RwLock<State>,
    signals: &Signals,
) -> mink_metadata::Result<()> {
    let assignments: HashMap<String, String> = metadata
        .assignments()
        .await?
        .into_iter()
        .map(|(key, a)| (key, a.node))
        .collect();
    let nodes: HashMap<String, NodeRecord> = metadata
        .live_nodes()
        .await?
        .into_iter()
        .map(|n| (n.node_id.clone(), n))
        .collect();
    let mut state = state.write();
    let gone: Vec<String> = state
        .nodes
        .values()
        .filter(|n| {
            nodes
                .get(&n.node_id)
                .is_none_or(|now| now.incarnation != n.incarnation)
        })
        .map(NodeRecord::member)
        .collect();
    state.departed.extend(gone);
    state.assignments = assignments;
    state.nodes = nodes;
    drop(state);
    signals.departure.notify_one();
    signals.change.notify_waiters();
    Ok(())
}

/// Applies watch events until a watch breaks; then reopens both and scans again.
async fn follow(
    kv: Arc<dyn MetaKv>,
    metadata: Arc<Metadata>,
    state: Arc<RwLock<State>>,
    signals: Arc<Signals>,
    mut watches: Watches,
) {
    let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        loop {
            let event = tokio::select! {
                e = watches.0.next() => e,
                e = watches.1.next() => e,
            };
            match event {
                Some(Ok(event)) => apply(&state, &signals, event),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "ownership watch broke; scanning again");
                    break;
                }
                None => break,
            }
        }
        let mut delays = backoff.delays();
        loop {
            let reopened = match open_watches(&kv).await {
                Ok(w) => rescan(&metadata, &state, &signals).await.map(|()| w),
                Err(e) => Err(e),
            };
            match reopened {
                Ok(w) => {
                    watches = w;
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot follow ownership; retrying");
                    tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(5))).await;
                }
            }
        }
    }
}

fn apply(state: &RwLock<State>, signals: &Signals, event: WatchEvent) {
    let mut departed = false;
    match event {
        WatchEvent::Put(kv) if kv.key.starts_with(keys::ASSIGNMENTS) => {
            match decode::<BucketAssignment>(&kv.key, &kv.value) {
                Ok(a) => {
                    state.write().assignments.insert(kv.key, a.node);
                }
                Err(e) => tracing::warn!(key = %kv.key, error = %e, "unreadable assignment"),
            }
        }
        WatchEvent::Put(kv) => match decode::<NodeRecord>(&kv.key, &kv.value) {
            Ok(n) => {
                let mut state = state.write();
                if let Some(before) = state.nodes.insert(n.node_id.clone(), n)
                    && let Some(now) = state.nodes.get(&before.node_id)
                    && now.incarnation != before.incarnation
                {
                    state.departed.push(before.member());
                    departed = true;
                }
            }
            Err(e) => tracing::warn!(key = %kv.key, error = %e, "unreadable node record"),
        },
        WatchEvent::Delete { key, .. } => {
            let mut state = state.write();
            if key.starts_with(keys::ASSIGNMENTS) {
                state.assignments.remove(&key);
            } else if let Some(node) = key.strip_prefix(keys::NODES)
                && let Some(before) = state.nodes.remove(node)
            {
                tracing::info!(member = %before.member(), "a node left the cluster");
                state.departed.push(before.member());
                departed = true;
            }
        }
    }
    if departed {
        signals.departure.notify_one();
    }
    signals.change.notify_waiters();
}
