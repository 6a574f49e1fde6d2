//! One consumer group's membership, as Kafka's classic group protocol runs it: members join,
//! the coordinator waits for every known member to rejoin (or for the rebalance timeout), picks
//! a protocol and a leader, the leader's SyncGroup hands out the assignments, heartbeats keep
//! members alive (docs/kafka.md, "Consumer groups").
//!
//! Pure state: time comes in as `now`, answers go out through oneshot channels to the requests
//! parked on a rebalance. The coordinator holds each group under a lock and ticks it.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::kafka::errors::code;

/// A group's state, named as Kafka names them in DescribeGroups and ListGroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// No members (committed offsets may remain).
    Empty,
    /// Waiting for members to rejoin.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignments.
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
}

impl State {
    pub(crate) fn name(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::PreparingRebalance => "PreparingRebalance",
            State::CompletingRebalance => "CompletingRebalance",
            State::Stable => "Stable",
        }
    }
}

/// What bounds a group.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    pub(crate) initial_delay: Duration,
    pub(crate) min_session: Duration,
    pub(crate) max_session: Duration,
    pub(crate) max_members: usize,
}

/// A JoinGroup, as the group sees it.
#[derive(Debug, Clone)]
pub(crate) struct JoinAsk {
    pub(crate) member_id: String,
    /// The id a new member gets (made by the coordinator, unique on this node).
    pub(crate) new_member_id: String,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) session_timeout: Duration,
    pub(crate) rebalance_timeout: Duration,
    pub(crate) protocol_type: String,
    pub(crate) protocols: Vec<(String, Bytes)>,
    /// Whether the client takes MEMBER_ID_REQUIRED (JoinGroup v4+, KIP-394).
    pub(crate) member_id_required: bool,
}

/// A JoinGroup's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Joined {
    pub(crate) error: i16,
    pub(crate) generation: i32,
    pub(crate) protocol_type: Option<String>,
    pub(crate) protocol: Option<String>,
    pub(crate) leader: String,
    pub(crate) member_id: String,
    /// Every member and its metadata for the chosen protocol: for the leader only.
    pub(crate) members: Vec<(String, Bytes)>,
}

impl Joined {
    pub(crate) fn error(error: i16, member_id: &str) -> Self {
        Joined {
            error,
            generation: -1,
            protocol_type: None,
            protocol: None,
            leader: String::new(),
            member_id: member_id.to_owned(),
            members: Vec::new(),
        }
    }
}

/// A SyncGroup's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Synced {
    pub(crate) error: i16,
    pub(crate) protocol_type: Option<String>,
    pub(crate) protocol: Option<String>,
    pub(crate) assignment: Bytes,
}

impl Synced {
    pub(crate) fn error(error: i16) -> Self {
        Synced {
            error,
            protocol_type: None,
            protocol: None,
            assignment: Bytes::new(),
        }
    }
}

/// An answer now, or one to wait for (the request is parked on the rebalance).
pub(crate) enum Step<T> {
    Now(T),
    Wait(oneshot::Receiver<T>),
}

/// One member.
#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    pub(crate) protocols: Vec<(String, Bytes)>,
    pub(crate) assignment: Bytes,
    last_seen: Instant,
    join: Option<oneshot::Sender<Joined>>,
    sync: Option<oneshot::Sender<Synced>>,
}

impl Member {
    fn metadata(&self, protocol: &str) -> Option<&Bytes> {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m)
    }

    /// Whether a request of the member's is parked on the group (it cannot heartbeat then).
    fn parked(&self) -> bool {
        self.join.is_some() || self.sync.is_some()
    }
}

/// One group.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) state: State,
    pub(crate) generation: i32,
    pub(crate) protocol_type: Option<String>,
    pub(crate) protocol: Option<String>,
    pub(crate) leader: Option<String>,
    pub(crate) members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED and not joined yet, with their expiry.
    pending: HashMap<String, Instant>,
    /// When the rebalance under way completes without the members that have not rejoined.
    deadline: Option<Instant>,
    /// Whether the rebalance under way started from an empty group (it waits the initial
    /// delay for more members even when every known member has joined).
    initial: bool,
}

impl Group {
    pub(crate) fn new() -> Self {
        Group {
            state: State::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending: HashMap::new(),
            deadline: None,
            initial: false,
        }
    }

    /// Whether the group holds nothing: it can be forgotten (its committed offsets stay).
    pub(crate) fn is_idle(&self) -> bool {
        self.state == State::Empty && self.members.is_empty() && self.pending.is_empty()
    }

    /// A JoinGroup.
    pub(crate) fn join(&mut self, ask: JoinAsk, now: Instant, limits: &Limits) -> Step<Joined> {
        let refuse = |error| Step::Now(Joined::error(error, &ask.member_id));
        if ask.session_timeout < limits.min_session || ask.session_timeout > limits.max_session {
            return refuse(code::INVALID_SESSION_TIMEOUT);
        }
        if ask.protocol_type.is_empty() || ask.protocols.is_empty() {
            return refuse(code::INCONSISTENT_GROUP_PROTOCOL);
        }
        let others_agree = ask.protocols.iter().any(|(name, _)| {
            self.members
                .iter()
                .filter(|(id, _)| **id != ask.member_id)
                .all(|(_, m)| m.metadata(name).is_some())
        });
        let has_others = self.members.keys().any(|id| *id != ask.member_id);
        if has_others
            && (self.protocol_type.as_deref() != Some(ask.protocol_type.as_str()) || !others_agree)
        {
            return refuse(code::INCONSISTENT_GROUP_PROTOCOL);
        }
        let member_id = if ask.member_id.is_empty() {
            if self.members.len() + self.pending.len() >= limits.max_members {
                return refuse(code::GROUP_MAX_SIZE_REACHED);
            }
            if ask.member_id_required {
                self.pending
                    .insert(ask.new_member_id.clone(), now + ask.session_timeout);
                return Step::Now(Joined::error(code::MEMBER_ID_REQUIRED, &ask.new_member_id));
            }
            ask.new_member_id.clone()
        } else if self.pending.remove(&ask.member_id).is_some() {
            ask.member_id.clone()
        } else if let Some(member) = self.members.get_mut(&ask.member_id) {
            member.last_seen = now;
            let same = member.protocols == ask.protocols;
            let leader = self.leader.as_deref() == Some(ask.member_id.as_str());
            match self.state {
                // Nothing changed: the member gets the generation it is in.
                State::Stable if same && !leader => {
                    return Step::Now(self.joined(&ask.member_id));
                }
                // A join sent again while the leader assigns.
                State::CompletingRebalance if same => {
                    return Step::Now(self.joined(&ask.member_id));
                }
                _ => {}
            }
            ask.member_id.clone()
        } else {
            return refuse(code::UNKNOWN_MEMBER_ID);
        };
        if self.members.is_empty() {
            self.protocol_type = Some(ask.protocol_type.clone());
        }
        let (answer, wait) = oneshot::channel();
        let member = self.members.entry(member_id).or_insert_with(|| Member {
            client_id: ask.client_id.clone(),
            client_host: ask.client_host.clone(),
            session_timeout: ask.session_timeout,
            rebalance_timeout: ask.rebalance_timeout,
            protocols: Vec::new(),
            assignment: Bytes::new(),
            last_seen: now,
            join: None,
            sync: None,
        });
        member.session_timeout = ask.session_timeout;
        member.rebalance_timeout = ask.rebalance_timeout;
        member.protocols = ask.protocols;
        member.last_seen = now;
        // An earlier join of the same member still parked is superseded.
        member.join = Some(answer);
        self.prepare_rebalance(now, limits);
        self.try_complete(now);
        Step::Wait(wait)
    }

    /// The join answer of the generation under way for `member_id`.
    fn joined(&self, member_id: &str) -> Joined {
        let leader = self.leader.clone().unwrap_or_default();
        let members = if leader == member_id {
            self.member_metadata()
        } else {
            Vec::new()
        };
        Joined {
            error: code::NONE,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            leader,
            member_id: member_id.to_owned(),
            members,
        }
    }

    fn member_metadata(&self) -> Vec<(String, Bytes)> {
        let protocol = self.protocol.as_deref().unwrap_or_default();
        self.members
            .iter()
            .map(|(id, m)| {
                (
                    id.clone(),
                    m.metadata(protocol).cloned().unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Starts a rebalance unless one is under way: members waiting on SyncGroup are told to
    /// rejoin.
    fn prepare_rebalance(&mut self, now: Instant, limits: &Limits) {
        if self.state == State::PreparingRebalance {
            return;
        }
        for member in self.members.values_mut() {
            if let Some(sync) = member.sync.take() {
                let _ = sync.send(Synced::error(code::REBALANCE_IN_PROGRESS));
            }
        }
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or(limits.initial_delay);
        self.initial = self.state == State::Empty;
        self.deadline = Some(
            now + if self.initial {
                limits.initial_delay.min(timeout)
            } else {
                timeout
            },
        );
        self.state = State::PreparingRebalance;
    }

    /// Completes the rebalance under way when every member has rejoined (past the initial delay
    /// of a group that was empty), or when its deadline has passed.
    fn try_complete(&mut self, now: Instant) {
        if self.state != State::PreparingRebalance {
            return;
        }
        let due = self.deadline.is_none_or(|d| now >= d);
        let all = self.members.values().all(|m| m.join.is_some());
        if due || (all && !self.initial) {
            self.complete_join(now);
        }
    }

    /// A new generation of the members that rejoined: a protocol every one of them supports, a
    /// leader, and each parked join answered.
    fn complete_join(&mut self, now: Instant) {
        self.members.retain(|_, m| m.join.is_some());
        self.deadline = None;
        self.initial = false;
        self.generation = self.generation.wrapping_add(1).max(1);
        if self.members.is_empty() {
            self.become_empty();
            return;
        }
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        let leader = self.leader.clone().unwrap_or_default();
        let preferred = &self.members[&leader].protocols;
        self.protocol = preferred
            .iter()
            .map(|(name, _)| name)
            .find(|name| self.members.values().all(|m| m.metadata(name).is_some()))
            .or_else(|| preferred.first().map(|(name, _)| name))
            .cloned();
        self.state = State::CompletingRebalance;
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let answer = self.joined(&id);
            let member = self.members.get_mut(&id).expect("a member just listed");
            member.assignment = Bytes::new();
            member.last_seen = now;
            if let Some(join) = member.join.take() {
                let _ = join.send(answer);
            }
        }
    }

    fn become_empty(&mut self) {
        self.state = State::Empty;
        self.leader = None;
        self.protocol = None;
        self.protocol_type = None;
        self.deadline = None;
    }

    /// A SyncGroup: the leader's assignments are handed out; a follower waits for them.
    pub(crate) fn sync(
        &mut self,
        member_id: &str,
        generation: i32,
        protocol: (Option<&str>, Option<&str>),
        assignments: Vec<(String, Bytes)>,
        now: Instant,
    ) -> Step<Synced> {
        let refuse = |error| Step::Now(Synced::error(error));
        if !self.members.contains_key(member_id) {
            return refuse(code::UNKNOWN_MEMBER_ID);
        }
        if generation != self.generation {
            return refuse(code::ILLEGAL_GENERATION);
        }
        let (protocol_type, name) = protocol;
        if protocol_type.is_some_and(|t| Some(t) != self.protocol_type.as_deref())
            || name.is_some_and(|n| Some(n) != self.protocol.as_deref())
        {
            return refuse(code::INCONSISTENT_GROUP_PROTOCOL);
        }
        let leader = self.leader.as_deref() == Some(member_id);
        if let Some(member) = self.members.get_mut(member_id) {
            member.last_seen = now;
        }
        match self.state {
            State::PreparingRebalance => refuse(code::REBALANCE_IN_PROGRESS),
            State::Empty => refuse(code::UNKNOWN_MEMBER_ID),
            State::Stable => Step::Now(self.synced(member_id)),
            State::CompletingRebalance if leader => {
                for (id, assignment) in assignments {
                    if let Some(member) = self.members.get_mut(&id) {
                        member.assignment = assignment;
                    }
                }
                self.state = State::Stable;
                let ids: Vec<String> = self.members.keys().cloned().collect();
                for id in ids {
                    let answer = self.synced(&id);
                    if let Some(sync) = self.members.get_mut(&id).and_then(|m| m.sync.take()) {
                        let _ = sync.send(answer);
                    }
                }
                Step::Now(self.synced(member_id))
            }
            State::CompletingRebalance => {
                let (answer, wait) = oneshot::channel();
                if let Some(member) = self.members.get_mut(member_id) {
                    member.sync = Some(answer);
                }
                Step::Wait(wait)
            }
        }
    }

    fn synced(&self, member_id: &str) -> Synced {
        Synced {
            error: code::NONE,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            assignment: self
                .members
                .get(member_id)
                .map(|m| m.assignment.clone())
                .unwrap_or_default(),
        }
    }

    /// A Heartbeat.
    pub(crate) fn heartbeat(&mut self, member_id: &str, generation: i32, now: Instant) -> i16 {
        let Some(member) = self.members.get_mut(member_id) else {
            return code::UNKNOWN_MEMBER_ID;
        };
        member.last_seen = now;
        if generation != self.generation {
            return code::ILLEGAL_GENERATION;
        }
        match self.state {
            State::PreparingRebalance => code::REBALANCE_IN_PROGRESS,
            _ => code::NONE,
        }
    }

    /// A member leaves: the others rebalance.
    pub(crate) fn leave(&mut self, member_id: &str, now: Instant, limits: &Limits) -> i16 {
        if self.pending.remove(member_id).is_some() {
            return code::NONE;
        }
        if self.members.remove(member_id).is_none() {
            return code::UNKNOWN_MEMBER_ID;
        }
        self.members_gone(now, limits);
        code::NONE
    }

    /// After members left or expired: an empty group, or a rebalance of those left.
    fn members_gone(&mut self, now: Instant, limits: &Limits) {
        if self.members.is_empty() {
            self.generation = self.generation.wrapping_add(1).max(1);
            self.become_empty();
        } else {
            self.prepare_rebalance(now, limits);
            self.try_complete(now);
        }
    }

    /// Whether an OffsetCommit of `member_id` in `generation` may be stored: NONE or why not.
    /// A commit from outside any generation (-1, no member) is for a group with no members.
    pub(crate) fn may_commit(&mut self, member_id: &str, generation: i32, now: Instant) -> i16 {
        if generation < 0 && member_id.is_empty() && self.state == State::Empty {
            return code::NONE;
        }
        if self.state == State::CompletingRebalance {
            return code::REBALANCE_IN_PROGRESS;
        }
        let Some(member) = self.members.get_mut(member_id) else {
            return code::UNKNOWN_MEMBER_ID;
        };
        member.last_seen = now;
        if generation != self.generation {
            return code::ILLEGAL_GENERATION;
        }
        code::NONE
    }

    /// Expires members that stopped heartbeating and completes a rebalance whose deadline has
    /// passed.
    pub(crate) fn tick(&mut self, now: Instant, limits: &Limits) {
        self.pending.retain(|_, expiry| *expiry > now);
        let before = self.members.len();
        self.members
            .retain(|_, m| m.parked() || m.last_seen + m.session_timeout > now);
        if self.members.len() < before {
            self.members_gone(now, limits);
        }
        self.try_complete(now);
    }
}

#[cfg(test)]
#[path = "group_tests.rs"]
mod tests;
