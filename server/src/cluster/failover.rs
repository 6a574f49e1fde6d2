//! [`Failover`]: a survivor's recovery of dead members (docs/cluster.md, "Failover").
//!
//! Every node runs it; one recovers each dead member, by claim. Its passes look at every member
//! that may hold data or streams and is not registered any more: the members with WAL
//! reservations, those the view saw leave, and those a stream open reported holding a stream
//! ([`Suspects`]). For each, the claim is put only if the member is unregistered (its lease gone),
//! the engine replays and commits its WAL, and the claim is marked done: the streams it held open
//! may then be opened by the nodes the leader assigns them to.
//!
//! A pass runs at once when the view sees a node leave or a suspect is reported, and every
//! second otherwise (a claim another node held may have been freed by that node's death).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mink_metadata::{ClaimOutcome, LeaseId, Metadata};
use mink_s3stream::engine::Engine;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::OwnershipView;

/// How often a pass runs when nothing wakes it.
const PASS_INTERVAL: Duration = Duration::from_secs(1);

/// Members reported holding a stream a node could not open; the next failover pass looks at them.
#[derive(Debug, Clone, Default)]
pub struct Suspects {
    inner: Arc<SuspectsInner>,
}

#[derive(Debug, Default)]
struct SuspectsInner {
    members: Mutex<BTreeSet<String>>,
    wake: Notify,
}

impl Suspects {
    /// Reports `member` (a stream it holds open could not be opened here).
    pub fn report(&self, member: &str) {
        if self.inner.members.lock().insert(member.to_owned()) {
            self.inner.wake.notify_one();
        }
    }

    fn reported(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let inner = Arc::clone(&self.inner);
        async move { inner.wake.notified().await }
    }

    fn take(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.inner.members.lock())
    }
}

/// A node's part in recovering dead members.
pub struct Failover {
    metadata: Arc<Metadata>,
    engine: Engine,
    view: Arc<OwnershipView>,
    /// This member, the claimer.
    member: String,
    lease: Option<LeaseId>,
    suspects: Suspects,
    /// Members recovered (by anyone) or found alive at the last look, not looked at again
    /// unless they show up again.
    done: Mutex<HashSet<String>>,
    metrics: Arc<crate::metrics::Metrics>,
}

impl std::fmt::Debug for Failover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Failover")
            .field("member", &self.member)
            .finish_non_exhaustive()
    }
}

impl Failover {
    /// Failover for `member` (holding claims with `lease`), recovering through `engine`.
    pub fn new(
        metadata: Arc<Metadata>,
        engine: Engine,
        view: Arc<OwnershipView>,
        member: String,
        lease: Option<LeaseId>,
        suspects: Suspects,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        Failover {
            metadata,
            engine,
            view,
            member,
            lease,
            suspects,
            done: Mutex::new(HashSet::new()),
            metrics,
        }
    }

    /// Runs passes until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            if let Err(e) = self.pass().await {
                tracing::warn!(error = %e, "failover pass failed; the next one retries");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(PASS_INTERVAL) => {}
                () = self.suspects.reported() => {}
                () = self.view.departure() => {}
            }
        }
    }

    /// One pass: every unregistered member that may hold something is recovered, by this node
    /// if it wins the claim. Returns the members this pass recovered.
    pub async fn pass(&self) -> mink_metadata::Result<Vec<String>> {
        let live: HashSet<String> = self.view.live_nodes().iter().map(|n| n.member()).collect();
        let mut candidates: BTreeSet<String> =
            self.metadata.wal_nodes().await?.into_iter().collect();
        candidates.extend(self.view.take_departed());
        candidates.extend(self.suspects.take());
        let mut recovered = Vec::new();
        for member in candidates {
            if member == self.member || live.contains(&member) {
                continue;
            }
            let seen_done = self.done.lock().contains(&member);
            if seen_done && !self.has_wal(&member).await? {
                continue;
            }
            if self.recover(&member).await? {
                recovered.push(member);
            }
        }
        Ok(recovered)
    }

    async fn has_wal(&self, member: &str) -> mink_metadata::Result<bool> {
        Ok(!self.metadata.wal_reservations(member).await?.is_empty())
    }

    /// Claims and recovers `member`; returns whether this node recovered it.
    async fn recover(&self, member: &str) -> mink_metadata::Result<bool> {
        match self
            .metadata
            .claim_recovery(member, &self.member, self.lease)
            .await?
        {
            ClaimOutcome::Claimed => {}
            ClaimOutcome::Done => {
                self.done.lock().insert(member.to_owned());
                return Ok(false);
            }
            ClaimOutcome::Alive => return Ok(false),
            ClaimOutcome::Held { by } => {
                tracing::debug!(member, by = %by, "another node is recovering it");
                return Ok(false);
            }
        }
        let started = Instant::now();
        tracing::info!(member, "recovering a dead member's WAL");
        if let Err(e) = self.engine.recover_member(member).await {
            // The claim stays with this node's lease; the next pass tries again.
            tracing::warn!(member, error = %e, "recovering a dead member failed; retrying");
            return Ok(false);
        }
        self.metadata.finish_recovery(member, &self.member).await?;
        self.done.lock().insert(member.to_owned());
        self.metrics.cluster_recoveries.inc();
        tracing::info!(
            member,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "dead member recovered; its buckets open on their new owners"
        );
        Ok(true)
    }
}
