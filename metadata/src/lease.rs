//! [`LeaseSession`]: one lease kept alive for a node's whole life, and the deadline until which
//! the node may act on it.
//!
//! The session renews the lease every third of its TTL on one keep-alive stream
//! ([`MetaKv::lease_keeper`]), reopening the stream when it breaks. It reads the clock's
//! monotonic time when it *sends* each renewal; when the answer grants a TTL `T`, the deadline
//! becomes `send time + T - margin`. etcd processed the renewal after it was sent, so it cannot
//! expire the lease before `send time + T`: until the deadline, the node knows its lease is alive
//! without asking. The deadline only moves forward, and only on a renewal that was answered.
//!
//! The session is **lost**, for good, when the store says the lease is gone or when the deadline
//! passes without a renewal (the node was paused or cut off from the store); a node whose session
//! is lost starts a new one as a new incarnation (docs/cluster.md).

use std::sync::Arc;
use std::time::Duration;

use mink_runtime::{Backoff, Clock};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::{InvalidRequest, MetaError, Result};
use crate::kv::{Lease, LeaseId, LeaseKeeper, MetaKv};

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// The lease is alive at least until `deadline` (the clock's monotonic time).
    Live {
        /// Until when the node may act on the lease.
        deadline: Duration,
    },
    /// The lease is gone, or may be: the node must not act on it again.
    Lost,
}

/// One lease, kept alive until [`revoke`](LeaseSession::revoke) or until it is lost.
pub struct LeaseSession {
    lease: Lease,
    margin: Duration,
    clock: Arc<dyn Clock>,
    state: watch::Receiver<SessionState>,
    kv: Arc<dyn MetaKv>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for LeaseSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseSession")
            .field("lease", &self.lease)
            .field("margin", &self.margin)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl LeaseSession {
    /// Grants a lease of `ttl` on `kv` and keeps it alive. `margin` is subtracted from every
    /// deadline (clock-rate differences, and the time from an event to the reading of the clock);
    /// it must be shorter than the granted TTL.
    ///
    /// # Errors
    /// The store's errors granting the lease or opening its keep-alive stream;
    /// [`MetaError::Unsupported`] on a store without leases; `InvalidRequest` when `margin` is not
    /// shorter than the TTL granted.
    pub async fn start(
        kv: Arc<dyn MetaKv>,
        clock: Arc<dyn Clock>,
        ttl: Duration,
        margin: Duration,
    ) -> Result<Self> {
        let sent = clock.monotonic();
        let lease = kv.grant_lease(ttl).await?;
        if margin >= lease.ttl {
            let _ = kv.revoke_lease(lease.id).await;
            return Err(MetaError::Invalid(InvalidRequest::LeaseMargin {
                margin,
                ttl: lease.ttl,
            }));
        }
        let keeper = match kv.lease_keeper(lease.id).await {
            Ok(keeper) => keeper,
            Err(e) => {
                let _ = kv.revoke_lease(lease.id).await;
                return Err(e);
            }
        };
        let deadline = sent + lease.ttl - margin;
        let (tx, state) = watch::channel(SessionState::Live { deadline });
        let task = tokio::spawn(keep_alive(Renewals {
            kv: Arc::clone(&kv),
            clock: Arc::clone(&clock),
            lease,
            margin,
            keeper: Some(keeper),
            deadline,
            tx,
        }));
        Ok(LeaseSession {
            lease,
            margin,
            clock,
            state,
            kv,
            task,
        })
    }

    /// The lease's id, for puts that must vanish with the session.
    pub fn id(&self) -> LeaseId {
        self.lease.id
    }

    /// The TTL the store granted.
    pub fn ttl(&self) -> Duration {
        self.lease.ttl
    }

    /// The margin subtracted from every deadline.
    pub fn margin(&self) -> Duration {
        self.margin
    }

    /// The session's state as last published.
    pub fn state(&self) -> SessionState {
        *self.state.borrow()
    }

    /// Whether the lease is known to be alive at the monotonic time `at`: the session is not lost
    /// and `at` is before its deadline. The acknowledgement rule asks this with the time a PUT's
    /// success arrived.
    pub fn alive_at(&self, at: Duration) -> bool {
        matches!(self.state(), SessionState::Live { deadline } if at < deadline)
    }

    /// Now, on the monotonic clock deadlines are measured on.
    pub fn now(&self) -> Duration {
        self.clock.monotonic()
    }

    /// Whether the lease is known to be alive now.
    pub fn alive(&self) -> bool {
        self.alive_at(self.clock.monotonic())
    }

    /// A receiver of every change of state (deadlines moving, the session lost).
    pub fn watch(&self) -> watch::Receiver<SessionState> {
        self.state.clone()
    }

    /// Waits until the session is lost.
    pub async fn lost(&self) {
        let mut state = self.state.clone();
        // An error means the renewing task ended, which it only does once the session is lost.
        let _ = state.wait_for(|s| *s == SessionState::Lost).await;
    }

    /// Stops renewing and revokes the lease, deleting its keys at once (a graceful stop).
    ///
    /// # Errors
    /// The store's error revoking; the lease then expires after its TTL anyway.
    pub async fn revoke(self) -> Result<()> {
        self.task.abort();
        self.kv.revoke_lease(self.lease.id).await
    }
}

impl Drop for LeaseSession {
    fn drop(&mut self) {
        // Without renewals the lease expires after its TTL.
        self.task.abort();
    }
}

/// What the renewing task owns.
struct Renewals {
    kv: Arc<dyn MetaKv>,
    clock: Arc<dyn Clock>,
    lease: Lease,
    margin: Duration,
    keeper: Option<Box<dyn LeaseKeeper>>,
    deadline: Duration,
    tx: watch::Sender<SessionState>,
}

impl Renewals {
    /// Time left before the deadline.
    fn left(&self) -> Duration {
        self.deadline.saturating_sub(self.clock.monotonic())
    }

    fn lose(&self, why: &str) {
        tracing::warn!(lease = self.lease.id, "lease session lost: {why}");
        self.tx.send_replace(SessionState::Lost);
    }
}

/// Renews every third of the TTL until the session is lost.
async fn keep_alive(mut r: Renewals) {
    let every = r.lease.ttl / 3;
    let backoff = Backoff::new(
        Duration::from_millis(50),
        every.max(Duration::from_millis(50)),
    );
    let mut delays = backoff.delays();
    loop {
        tokio::time::sleep(every.min(r.left())).await;
        if r.left().is_zero() {
            return r.lose("the deadline passed without a renewal");
        }
        let keeper = match r.keeper.as_mut() {
            Some(keeper) => keeper,
            // Reopening may hang on a store out of reach: no longer than the deadline.
            None => match tokio::time::timeout(r.left(), r.kv.lease_keeper(r.lease.id)).await {
                Err(_) => {
                    return r
                        .lose("the keep-alive stream could not be reopened before the deadline");
                }
                Ok(Ok(keeper)) => r.keeper.insert(keeper),
                Ok(Err(e)) => {
                    tracing::debug!(lease = r.lease.id, "reopening the keep-alive stream: {e}");
                    tokio::time::sleep(delays.next().unwrap_or(every).min(r.left())).await;
                    continue;
                }
            },
        };
        let sent = r.clock.monotonic();
        // An answer after the deadline is of no use: the session is lost by then.
        let left = r.deadline.saturating_sub(sent);
        match tokio::time::timeout(left, keeper.renew()).await {
            Ok(Ok(Some(ttl))) => {
                delays = backoff.delays();
                let deadline = (sent + ttl).saturating_sub(r.margin);
                if deadline > r.deadline {
                    r.deadline = deadline;
                    r.tx.send_replace(SessionState::Live { deadline });
                }
            }
            Ok(Ok(None)) => return r.lose("the store says the lease is gone"),
            Ok(Err(e)) => {
                tracing::debug!(lease = r.lease.id, "keep-alive failed: {e}");
                r.keeper = None;
                tokio::time::sleep(delays.next().unwrap_or(every).min(r.left())).await;
            }
            Err(_) => return r.lose("no renewal was answered before the deadline"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use mink_runtime::ManualClock;

    use super::{LeaseSession, SessionState};
    use crate::kv::{MemoryKv, MetaKv, Op, Txn};

    fn store() -> (Arc<ManualClock>, Arc<dyn MetaKv>) {
        let clock = Arc::new(ManualClock::new(0));
        let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::with_clock(clock.clone()));
        (clock, kv)
    }

    async fn put_with(kv: &Arc<dyn MetaKv>, key: &str, lease: i64) -> crate::error::Result<()> {
        kv.txn(Txn {
            compares: vec![],
            on_success: vec![Op::Put {
                key: key.to_owned(),
                value: Bytes::from_static(b"x"),
                lease: Some(lease),
            }],
        })
        .await
        .map(|_| ())
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_move_the_deadline_and_keep_the_keys() {
        let (clock, kv) = store();
        let ttl = Duration::from_secs(3);
        let margin = Duration::from_millis(300);
        let session = LeaseSession::start(kv.clone(), clock.clone(), ttl, margin)
            .await
            .unwrap();
        assert_eq!(session.ttl(), ttl);
        assert_eq!(
            session.state(),
            SessionState::Live {
                deadline: ttl - margin
            }
        );
        put_with(&kv, "mink/nodes/a", session.id()).await.unwrap();
        // Ten TTLs of time, in steps of a tenth: the renewals keep the lease and the key alive.
        for _ in 0..100 {
            clock.advance(300);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert!(session.alive(), "{:?}", session.state());
        let SessionState::Live { deadline } = session.state() else {
            panic!("lost");
        };
        assert!(deadline > Duration::from_secs(28), "{deadline:?}");
        assert!(kv.get("mink/nodes/a").await.unwrap().is_some());
        // Past the deadline the session is not alive, whatever the renewing task did.
        assert!(!session.alive_at(deadline));
        assert!(session.alive_at(deadline - Duration::from_millis(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_paused_node_finds_its_session_lost_and_its_keys_gone() {
        let (clock, kv) = store();
        let session = LeaseSession::start(
            kv.clone(),
            clock.clone(),
            Duration::from_secs(3),
            Duration::from_millis(300),
        )
        .await
        .unwrap();
        put_with(&kv, "mink/nodes/a", session.id()).await.unwrap();
        // The process is stopped for longer than the TTL: no renewal ran, the store expired the
        // lease. The next look at the session, and the next renewal, find it lost.
        clock.advance(5_000);
        assert!(!session.alive());
        assert!(kv.get("mink/nodes/a").await.unwrap().is_none());
        tokio::time::timeout(Duration::from_secs(5), session.lost())
            .await
            .expect("the session is lost");
        assert_eq!(session.state(), SessionState::Lost);
        // A lost lease cannot hold keys again.
        assert!(put_with(&kv, "mink/nodes/a", session.id()).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_revoked_lease_deletes_its_keys_and_other_sessions_live_on() {
        let (clock, kv) = store();
        let ttl = Duration::from_secs(3);
        let margin = Duration::from_millis(300);
        let a = LeaseSession::start(kv.clone(), clock.clone(), ttl, margin)
            .await
            .unwrap();
        let b = LeaseSession::start(kv.clone(), clock.clone(), ttl, margin)
            .await
            .unwrap();
        assert_ne!(a.id(), b.id());
        put_with(&kv, "mink/nodes/a", a.id()).await.unwrap();
        put_with(&kv, "mink/nodes/b", b.id()).await.unwrap();
        let a_id = a.id();
        a.revoke().await.unwrap();
        assert!(kv.get("mink/nodes/a").await.unwrap().is_none());
        assert_eq!(kv.lease_ttl(a_id).await.unwrap(), None);
        assert!(kv.get("mink/nodes/b").await.unwrap().is_some());
        assert!(kv.lease_ttl(b.id()).await.unwrap().is_some());
        // Someone else revoking b's lease: b's next renewal finds it gone.
        kv.revoke_lease(b.id()).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), b.lost())
            .await
            .expect("b's session is lost");
    }

    #[tokio::test]
    async fn a_margin_as_long_as_the_lease_is_refused() {
        let (clock, kv) = store();
        let refused =
            LeaseSession::start(kv, clock, Duration::from_secs(1), Duration::from_secs(1))
                .await
                .unwrap_err();
        assert!(refused.to_string().contains("margin"), "{refused}");
    }
}
