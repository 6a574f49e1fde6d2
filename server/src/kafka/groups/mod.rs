//! The group coordinator: every consumer group with members on this node, their rebalances and
//! heartbeats (docs/kafka.md, "Consumer groups"). Committed offsets live in the metadata KV
//! (`offsets`), not here: a node that restarts loses its groups' members, who join again, and
//! keeps their offsets.

mod answers;
mod group;
mod offsets;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

pub(crate) use answers::{
    describe_groups, find_coordinator, heartbeat, join_group, leave_group, list_groups, sync_group,
};
use group::{Group, Limits, Step};
pub(crate) use group::{JoinAsk, Joined, State, Synced};
pub(crate) use offsets::{offset_commit, offset_fetch};

use crate::kafka::errors::code;
use crate::settings::KafkaSettings;

/// How often groups are ticked (session expiry, rebalance deadlines).
const TICK: Duration = Duration::from_millis(100);

/// The longest group id taken.
pub(crate) const MAX_GROUP_ID_BYTES: usize = 255;

/// One member as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub(crate) struct MemberView {
    pub(crate) member_id: String,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) metadata: Bytes,
    pub(crate) assignment: Bytes,
}

/// One group as DescribeGroups and ListGroups show it.
#[derive(Debug, Clone)]
pub(crate) struct GroupView {
    pub(crate) state: State,
    pub(crate) protocol_type: String,
    pub(crate) protocol: String,
    pub(crate) members: Vec<MemberView>,
}

/// Every group with members on this node.
pub(crate) struct Coordinator {
    groups: Mutex<HashMap<String, Group>>,
    limits: Limits,
    max_groups: usize,
    /// Makes member ids unique on this node and across its restarts.
    started: u64,
    next_member: AtomicU64,
}

impl Coordinator {
    pub(crate) fn new(settings: &KafkaSettings) -> Arc<Self> {
        Arc::new(Coordinator {
            groups: Mutex::new(HashMap::new()),
            limits: Limits {
                initial_delay: settings.group_initial_rebalance_delay,
                min_session: settings.group_min_session_timeout,
                max_session: settings.group_max_session_timeout,
                max_members: settings.max_group_members,
            },
            max_groups: settings.max_groups,
            started: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            next_member: AtomicU64::new(0),
        })
    }

    /// Ticks every group until `shutdown`: members that stopped heartbeating leave, rebalances
    /// past their deadline complete, idle groups are forgotten.
    pub(crate) fn start_ticking(self: &Arc<Self>, shutdown: CancellationToken) {
        let coordinator = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(TICK);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = interval.tick() => {}
                    () = shutdown.cancelled() => return,
                }
                let Some(coordinator) = coordinator.upgrade() else {
                    return;
                };
                let now = Instant::now();
                let mut groups = coordinator.groups.lock();
                for group in groups.values_mut() {
                    group.tick(now, &coordinator.limits);
                }
                groups.retain(|_, g| !g.is_idle());
            }
        });
    }

    /// A fresh member id for `client_id`.
    fn member_id(&self, client_id: &str) -> String {
        let client: String = client_id.chars().take(64).collect();
        let n = self.next_member.fetch_add(1, Ordering::Relaxed);
        format!("{client}-{:x}-{n}", self.started)
    }

    /// A JoinGroup; waits while the group rebalances.
    pub(crate) async fn join(&self, group_id: &str, mut ask: JoinAsk) -> Joined {
        ask.new_member_id = self.member_id(&ask.client_id);
        let member_id = ask.member_id.clone();
        let step = {
            let mut groups = self.groups.lock();
            if !groups.contains_key(group_id) && groups.len() >= self.max_groups {
                tracing::warn!(
                    group = group_id,
                    limit = self.max_groups,
                    "kafka: kafka.max_groups reached; join refused"
                );
                return Joined::error(code::GROUP_MAX_SIZE_REACHED, &member_id);
            }
            groups
                .entry(group_id.to_owned())
                .or_insert_with(Group::new)
                .join(ask, Instant::now(), &self.limits)
        };
        match step {
            Step::Now(joined) => joined,
            // Superseded by a later join of the same member, or the node shut down.
            Step::Wait(wait) => wait
                .await
                .unwrap_or_else(|_| Joined::error(code::REBALANCE_IN_PROGRESS, &member_id)),
        }
    }

    /// A SyncGroup; a follower waits for the leader's assignments.
    pub(crate) async fn sync(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        protocol: (Option<&str>, Option<&str>),
        assignments: Vec<(String, Bytes)>,
    ) -> Synced {
        let step = {
            let mut groups = self.groups.lock();
            match groups.get_mut(group_id) {
                Some(group) => {
                    group.sync(member_id, generation, protocol, assignments, Instant::now())
                }
                None => return Synced::error(code::UNKNOWN_MEMBER_ID),
            }
        };
        match step {
            Step::Now(synced) => synced,
            Step::Wait(wait) => wait
                .await
                .unwrap_or_else(|_| Synced::error(code::REBALANCE_IN_PROGRESS)),
        }
    }

    /// A Heartbeat.
    pub(crate) fn heartbeat(&self, group_id: &str, member_id: &str, generation: i32) -> i16 {
        match self.groups.lock().get_mut(group_id) {
            Some(group) => group.heartbeat(member_id, generation, Instant::now()),
            None => code::UNKNOWN_MEMBER_ID,
        }
    }

    /// A member leaves.
    pub(crate) fn leave(&self, group_id: &str, member_id: &str) -> i16 {
        match self.groups.lock().get_mut(group_id) {
            Some(group) => group.leave(member_id, Instant::now(), &self.limits),
            None => code::UNKNOWN_MEMBER_ID,
        }
    }

    /// Whether a commit of `member_id` in `generation` to `group_id` may be stored.
    pub(crate) fn may_commit(&self, group_id: &str, member_id: &str, generation: i32) -> i16 {
        match self.groups.lock().get_mut(group_id) {
            Some(group) => group.may_commit(member_id, generation, Instant::now()),
            // A group with no members here: commits from outside any generation only.
            None if generation < 0 && member_id.is_empty() => code::NONE,
            None => code::UNKNOWN_MEMBER_ID,
        }
    }

    /// A group as DescribeGroups shows it (`None`: no members here).
    pub(crate) fn describe(&self, group_id: &str) -> Option<GroupView> {
        let groups = self.groups.lock();
        let group = groups.get(group_id)?;
        let protocol = group.protocol.clone().unwrap_or_default();
        let stable = group.state == State::Stable;
        let members = group
            .members
            .iter()
            .map(|(id, m)| MemberView {
                member_id: id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: m
                    .protocols
                    .iter()
                    .find(|(name, _)| *name == protocol)
                    .map(|(_, meta)| meta.clone())
                    .unwrap_or_default(),
                assignment: if stable {
                    m.assignment.clone()
                } else {
                    Bytes::new()
                },
            })
            .collect();
        Some(GroupView {
            state: group.state,
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            protocol,
            members,
        })
    }

    /// Every group with members here: (id, protocol type, state).
    pub(crate) fn list(&self) -> Vec<(String, String, State)> {
        self.groups
            .lock()
            .iter()
            .map(|(id, g)| {
                (
                    id.clone(),
                    g.protocol_type.clone().unwrap_or_default(),
                    g.state,
                )
            })
            .collect()
    }
}
