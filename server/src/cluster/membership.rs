//! [`Membership`]: which life of the node this is, and the lease that keeps it a member.
//!
//! Joining, in order: the next incarnation of the node id (so this life is a new member, with its
//! own WAL prefix), the node id's broker id, a lease session (on a store with leases), when an
//! earlier life of the same node id is still registered a wait until its lease is gone (it might
//! still be acknowledging appends until then; a life this host's life lock proves dead has its
//! lease revoked instead, `life_lock.rs`), the registration (without an address yet), and a
//! recovery claim on each earlier life that left a WAL. The engine recovers those at open,
//! before this life writes anything. The advertised address is added once the API listens.

use std::sync::Arc;
use std::time::Duration;

use mink_metadata::{
    ClaimOutcome, LeaseSession, MetaError, MetaKv, Metadata, NodeRecord, is_life_of, member_id,
};
use mink_runtime::SystemClock;
use mink_s3stream::wal::AckFence;

use super::life_lock::LifeLock;
use crate::node::NodeError;
use crate::settings::Settings;

/// How often a joining node looks whether an earlier life's registration is gone.
const EARLIER_LIFE_POLL: Duration = Duration::from_millis(200);

/// This life of the node in the cluster.
#[derive(Debug)]
pub struct Membership {
    metadata: Arc<Metadata>,
    record: NodeRecord,
    session: Option<Arc<LeaseSession>>,
    earlier: Vec<String>,
    /// Held for this life: a restart on this host after a crash revokes its lease at once.
    _life_lock: Option<LifeLock>,
}

impl Membership {
    /// Joins as the next life of `settings.node_id`: see the module doc. The registration is not
    /// written yet ([`Membership::register`]).
    pub async fn join(
        metadata: Arc<Metadata>,
        kv: Arc<dyn MetaKv>,
        settings: &Settings,
    ) -> Result<Self, NodeError> {
        let node_id = settings.node_id.clone();
        let incarnation = metadata.next_incarnation(&node_id).await?;
        let broker_id = metadata.broker_id(&node_id).await?;
        let cluster = &settings.cluster;
        // Deadlines are real time, whatever clock the node's timestamps come from.
        let session = match LeaseSession::start(
            kv.clone(),
            Arc::new(SystemClock),
            cluster.lease_ttl,
            cluster.lease_margin,
        )
        .await
        {
            Ok(session) => Some(Arc::new(session)),
            Err(MetaError::Unsupported { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        // Only on etcd, whose endpoints and prefix name one store: in-process stores (memory)
        // have nothing that tells one from another on a host.
        let mut life_lock = session
            .as_ref()
            .filter(|_| settings.metadata.backend == crate::settings::MetadataBackend::Etcd)
            .and_then(|_| LifeLock::acquire(settings));
        if let Some(session) = &session {
            let dead = life_lock.as_ref().and_then(LifeLock::previous);
            wait_for_earlier_lives(
                &metadata,
                kv.as_ref(),
                &node_id,
                incarnation,
                session.ttl(),
                dead,
            )
            .await?;
        }
        let member = member_id(&node_id, incarnation);
        let record = NodeRecord {
            node_id,
            incarnation,
            broker_id,
            http_url: String::new(),
            kafka_address: None,
            flight_url: None,
            lease: session.as_ref().map(|s| s.id()),
            started_at_ms: metadata.clock().now_ms_unsigned(),
            draining: false,
        };
        // Registered before the engine opens, so for as long as this life may write WAL objects
        // it is registered, and a survivor that finds it unregistered knows its lease is gone
        // (docs/cluster.md, "Failover"). No address yet: routes to it are unavailable until
        // [`Membership::advertise`].
        match &session {
            Some(_) => match metadata.register_node(&record).await {
                Ok(()) => {}
                Err(MetaError::AlreadyExists { .. }) => {
                    return Err(NodeError::NodeIdInUse {
                        node_id: record.node_id.clone(),
                        member: "another process".to_owned(),
                    });
                }
                Err(e) => return Err(e.into()),
            },
            None => metadata.replace_node(&record).await?,
        }
        let lease = session.as_ref().map(|s| s.id());
        if let (Some(lock), Some(lease)) = (life_lock.as_mut(), lease) {
            lock.record(&member, lease);
        }
        let earlier = claim_earlier_lives(&metadata, &record.node_id, &member, lease).await?;
        tracing::info!(
            member = %record.member(),
            broker_id,
            lease = ?record.lease,
            earlier_lives = ?earlier,
            "joined as a new incarnation"
        );
        Ok(Membership {
            metadata,
            record,
            session,
            earlier,
            _life_lock: life_lock,
        })
    }

    /// The member id of this life: what the engine names its WAL and its streams' owner by.
    pub fn member(&self) -> String {
        self.record.member()
    }

    /// This life's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.record.incarnation
    }

    /// The node id's broker id.
    pub fn broker_id(&self) -> i32 {
        self.record.broker_id
    }

    /// The earlier lives of this node id that left WAL objects: the engine recovers them at open.
    pub fn earlier(&self) -> &[String] {
        &self.earlier
    }

    /// The fence the WAL acknowledges through, when the node holds a lease.
    pub fn fence(&self) -> Option<Arc<dyn AckFence>> {
        self.session
            .as_ref()
            .map(|session| Arc::new(SessionFence(Arc::clone(session))) as Arc<dyn AckFence>)
    }

    /// The lease session, when the store has leases.
    pub fn session(&self) -> Option<&Arc<LeaseSession>> {
        self.session.as_ref()
    }

    /// Marks the recoveries of the earlier lives done, once the engine has recovered them.
    pub async fn finish_earlier(&self) -> Result<(), NodeError> {
        let member = self.member();
        for earlier in &self.earlier {
            self.metadata.finish_recovery(earlier, &member).await?;
        }
        Ok(())
    }

    /// Advertises `http_url` (and the Flight URL, when Flight listens) in the registration:
    /// other nodes redirect here from now on.
    pub async fn advertise(
        &mut self,
        http_url: String,
        flight_url: Option<String>,
        kafka_address: Option<String>,
    ) -> Result<(), NodeError> {
        self.record.http_url = http_url;
        self.record.flight_url = flight_url;
        self.record.kafka_address = kafka_address;
        self.metadata.update_node(&self.record).await?;
        tracing::info!(member = %self.member(), url = %self.record.http_url, "registered");
        Ok(())
    }

    /// Marks the registration draining (a graceful shutdown): the leader moves this node's
    /// buckets to the others and assigns it none.
    pub async fn set_draining(&mut self) -> Result<(), NodeError> {
        self.record.draining = true;
        self.metadata.update_node(&self.record).await?;
        tracing::info!(member = %self.member(), "draining: handing this node's buckets to the others");
        Ok(())
    }

    /// The registration as written.
    pub fn record(&self) -> &NodeRecord {
        &self.record
    }

    /// Resolves once the lease session is lost (never, without a lease).
    pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let session = self.session.clone();
        async move {
            match session {
                Some(session) => session.lost().await,
                None => std::future::pending().await,
            }
        }
    }

    /// Whether the lease is lost (false without a lease).
    pub fn is_lost(&self) -> bool {
        self.session.as_ref().is_some_and(|s| !s.alive())
    }

    /// Leaves: the registration is removed, and the lease revoked so its keys go at once.
    pub async fn leave(self) {
        if let Err(e) = self.metadata.deregister_node(&self.record).await {
            tracing::warn!(error = %e, "removing the registration failed; it goes with the lease");
        }
        if let Some(session) = self.session
            && let Ok(session) = Arc::try_unwrap(session)
            && let Err(e) = session.revoke().await
        {
            tracing::warn!(error = %e, "revoking the lease failed; it expires by itself");
        }
    }
}

/// Waits until no earlier life of `node_id` is registered: its lease expired (a crash) or was
/// revoked (a clean stop). `dead` is the life this host's life lock named while it was free: that
/// process is gone, so its lease is revoked rather than waited out. Gives up after two TTLs and
/// a second: then another process holds the node id.
async fn wait_for_earlier_lives(
    metadata: &Metadata,
    kv: &dyn MetaKv,
    node_id: &str,
    incarnation: u64,
    ttl: Duration,
    dead: Option<&(String, mink_metadata::LeaseId)>,
) -> Result<(), NodeError> {
    let give_up = tokio::time::Instant::now() + ttl * 2 + Duration::from_secs(1);
    let mut waited = false;
    loop {
        let holder = metadata
            .live_nodes()
            .await?
            .into_iter()
            .find(|n| n.node_id == node_id && n.incarnation < incarnation);
        let Some(holder) = holder else {
            return Ok(());
        };
        if let Some((member, lease)) = dead
            && *member == holder.member()
            && holder.lease == Some(*lease)
        {
            match kv.revoke_lease(*lease).await {
                Ok(()) => tracing::info!(
                    earlier = %member,
                    "an earlier life of this node is dead (its life lock on this host was free); revoked its lease"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "revoking a dead earlier life's lease failed; waiting for it to end")
                }
            }
        }
        if tokio::time::Instant::now() >= give_up {
            return Err(NodeError::NodeIdInUse {
                node_id: node_id.to_owned(),
                member: holder.member(),
            });
        }
        if !waited {
            tracing::info!(
                earlier = %holder.member(),
                "an earlier life of this node is still registered; waiting for its lease to end"
            );
            waited = true;
        }
        tokio::time::sleep(EARLIER_LIFE_POLL).await;
    }
}

/// How long a joining node waits for another node's recovery of one of its earlier lives.
const EARLIER_RECOVERY_WAIT: Duration = Duration::from_secs(120);

/// Claims the recovery of every earlier life of `node_id` that left WAL reservations, for this
/// life (`member`): returns those this life recovers at engine open. An earlier life another node
/// is recovering (it found it dead first) is waited for; one already recovered is skipped.
async fn claim_earlier_lives(
    metadata: &Metadata,
    node_id: &str,
    member: &str,
    lease: Option<mink_metadata::LeaseId>,
) -> Result<Vec<String>, NodeError> {
    let mut mine = Vec::new();
    let earlier: Vec<String> = metadata
        .wal_nodes()
        .await?
        .into_iter()
        .filter(|owner| is_life_of(owner, node_id) && owner != member)
        .collect();
    for life in earlier {
        let give_up = tokio::time::Instant::now() + EARLIER_RECOVERY_WAIT;
        loop {
            match metadata.claim_recovery(&life, member, lease).await? {
                ClaimOutcome::Claimed => {
                    mine.push(life);
                    break;
                }
                ClaimOutcome::Done => break,
                ClaimOutcome::Alive => {
                    return Err(NodeError::NodeIdInUse {
                        node_id: node_id.to_owned(),
                        member: life,
                    });
                }
                ClaimOutcome::Held { by } => {
                    if tokio::time::Instant::now() >= give_up {
                        return Err(NodeError::Settings {
                            message: format!(
                                "node {by} has been recovering this node's earlier life {life} for over {EARLIER_RECOVERY_WAIT:?}; start again once it is done"
                            ),
                        });
                    }
                    tracing::info!(earlier = %life, by = %by, "an earlier life is being recovered by another node; waiting");
                    tokio::time::sleep(EARLIER_LIFE_POLL * 5).await;
                }
            }
        }
    }
    Ok(mine)
}

/// The acknowledgement rule over a lease session: a PUT is acknowledged only if its success
/// arrived before the session's deadline.
#[derive(Debug)]
struct SessionFence(Arc<LeaseSession>);

impl AckFence for SessionFence {
    fn now(&self) -> Duration {
        self.0.now()
    }

    fn admits(&self, completed_at: Duration) -> bool {
        self.0.alive_at(completed_at)
    }
}
