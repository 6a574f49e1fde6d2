//! The group state machine, driven with a made-up clock.

use super::*;

fn limits() -> Limits {
    Limits {
        initial_delay: Duration::from_millis(100),
        min_session: Duration::from_secs(1),
        max_session: Duration::from_secs(60),
        max_members: 3,
    }
}

fn ask(member_id: &str, new_id: &str) -> JoinAsk {
    JoinAsk {
        member_id: member_id.to_owned(),
        new_member_id: new_id.to_owned(),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout: Duration::from_secs(10),
        rebalance_timeout: Duration::from_secs(5),
        protocol_type: "consumer".into(),
        protocols: vec![
            ("range".into(), Bytes::from_static(b"r")),
            ("roundrobin".into(), Bytes::from_static(b"rr")),
        ],
        member_id_required: true,
    }
}

fn now_answer<T>(step: Step<T>) -> T {
    match step {
        Step::Now(t) => t,
        Step::Wait(_) => panic!("expected an answer now"),
    }
}

fn parked<T>(step: Step<T>) -> oneshot::Receiver<T> {
    match step {
        Step::Wait(rx) => rx,
        Step::Now(_) => panic!("expected to wait"),
    }
}

/// Joins `id` through MEMBER_ID_REQUIRED; returns the parked join.
fn join_new(g: &mut Group, id: &str, now: Instant) -> oneshot::Receiver<Joined> {
    let first = now_answer(g.join(ask("", id), now, &limits()));
    assert_eq!(first.error, code::MEMBER_ID_REQUIRED);
    assert_eq!(first.member_id, id);
    parked(g.join(ask(id, "unused"), now, &limits()))
}

#[test]
fn two_members_join_one_generation_and_the_leader_assigns_both() {
    let t0 = Instant::now();
    let mut g = Group::new();
    let mut a = join_new(&mut g, "a", t0);
    assert_eq!(g.state, State::PreparingRebalance);
    let mut b = join_new(&mut g, "b", t0 + Duration::from_millis(10));
    // The initial delay holds the first generation back for more members.
    g.tick(t0 + Duration::from_millis(50), &limits());
    assert!(a.try_recv().is_err());
    g.tick(t0 + Duration::from_millis(100), &limits());
    let (ja, jb) = (a.try_recv().unwrap(), b.try_recv().unwrap());
    assert_eq!((ja.error, jb.error), (code::NONE, code::NONE));
    assert_eq!(ja.generation, 1);
    assert_eq!(ja.generation, jb.generation);
    assert_eq!(ja.protocol.as_deref(), Some("range"));
    assert_eq!(ja.leader, "a");
    assert_eq!(jb.leader, "a");
    let listed: Vec<&str> = ja.members.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(listed, vec!["a", "b"]);
    assert!(jb.members.is_empty(), "only the leader is told the members");
    assert_eq!(g.state, State::CompletingRebalance);

    // The follower waits for the leader's assignments.
    let mut sb = parked(g.sync("b", 1, (None, None), vec![], t0));
    let sa = now_answer(g.sync(
        "a",
        1,
        (Some("consumer"), Some("range")),
        vec![
            ("a".into(), Bytes::from_static(b"A")),
            ("b".into(), Bytes::from_static(b"B")),
        ],
        t0,
    ));
    assert_eq!(sa.assignment, Bytes::from_static(b"A"));
    assert_eq!(sb.try_recv().unwrap().assignment, Bytes::from_static(b"B"));
    assert_eq!(g.state, State::Stable);
    assert_eq!(g.heartbeat("b", 1, t0), code::NONE);
    assert_eq!(g.heartbeat("b", 0, t0), code::ILLEGAL_GENERATION);
    assert_eq!(g.heartbeat("x", 1, t0), code::UNKNOWN_MEMBER_ID);
    // A stable follower joining again unchanged stays in its generation.
    let again = now_answer(g.join(ask("b", "unused"), t0, &limits()));
    assert_eq!((again.error, again.generation), (code::NONE, 1));
}

#[test]
fn a_new_member_rebalances_the_group_and_heartbeats_say_so() {
    let t0 = Instant::now();
    let mut g = Group::new();
    let mut a = join_new(&mut g, "a", t0);
    g.tick(t0 + Duration::from_millis(100), &limits());
    assert_eq!(a.try_recv().unwrap().generation, 1);
    now_answer(g.sync(
        "a",
        1,
        (None, None),
        vec![("a".into(), Bytes::from_static(b"all"))],
        t0,
    ));
    let mut b = join_new(&mut g, "b", t0 + Duration::from_secs(1));
    assert_eq!(g.state, State::PreparingRebalance);
    assert_eq!(
        g.heartbeat("a", 1, t0 + Duration::from_secs(1)),
        code::REBALANCE_IN_PROGRESS
    );
    // Commits of the old generation are still taken while members rejoin.
    assert_eq!(g.may_commit("a", 1, t0), code::NONE);
    let mut a = parked(g.join(ask("a", "unused"), t0 + Duration::from_secs(2), &limits()));
    // Every known member rejoined: no waiting for the deadline.
    let (ja, jb) = (a.try_recv().unwrap(), b.try_recv().unwrap());
    assert_eq!((ja.generation, jb.generation), (2, 2));
    assert_eq!(ja.leader, "a", "the leader stays the leader");
    assert_eq!(g.may_commit("a", 2, t0), code::REBALANCE_IN_PROGRESS);
}

#[test]
fn a_member_that_does_not_rejoin_or_heartbeat_is_dropped() {
    let t0 = Instant::now();
    let mut g = Group::new();
    let mut a = join_new(&mut g, "a", t0);
    let mut b = join_new(&mut g, "b", t0);
    g.tick(t0 + Duration::from_millis(100), &limits());
    a.try_recv().unwrap();
    b.try_recv().unwrap();
    now_answer(g.sync("a", 1, (None, None), vec![], t0));
    now_answer(g.sync("b", 1, (None, None), vec![], t0));
    // b heartbeats, a goes silent past its 10 s session.
    assert_eq!(g.heartbeat("b", 1, t0 + Duration::from_secs(9)), code::NONE);
    g.tick(t0 + Duration::from_secs(11), &limits());
    assert!(!g.members.contains_key("a"));
    assert_eq!(g.state, State::PreparingRebalance);
    let mut b = parked(g.join(ask("b", "unused"), t0 + Duration::from_secs(12), &limits()));
    let jb = b.try_recv().unwrap();
    assert_eq!((jb.generation, jb.leader.as_str()), (2, "b"));

    // During a rebalance, a member that does not rejoin by the deadline is left out.
    let mut c = join_new(&mut g, "c", t0 + Duration::from_secs(13));
    assert!(c.try_recv().is_err(), "b has not rejoined yet");
    g.tick(t0 + Duration::from_secs(19), &limits());
    let jc = c.try_recv().unwrap();
    assert_eq!(jc.generation, 3);
    assert_eq!(jc.leader, "c");
    assert_eq!(g.members.keys().collect::<Vec<_>>(), vec!["c"]);
}

#[test]
fn leaving_rebalances_the_rest_and_the_last_one_out_empties_the_group() {
    let t0 = Instant::now();
    let mut g = Group::new();
    let mut a = join_new(&mut g, "a", t0);
    let mut b = join_new(&mut g, "b", t0);
    g.tick(t0 + Duration::from_millis(100), &limits());
    a.try_recv().unwrap();
    b.try_recv().unwrap();
    // b waits on its SyncGroup when a leaves: it is told to rejoin.
    let mut sb = parked(g.sync("b", 1, (None, None), vec![], t0));
    assert_eq!(g.leave("a", t0, &limits()), code::NONE);
    assert_eq!(sb.try_recv().unwrap().error, code::REBALANCE_IN_PROGRESS);
    assert_eq!(g.leave("a", t0, &limits()), code::UNKNOWN_MEMBER_ID);
    let mut b = parked(g.join(ask("b", "unused"), t0, &limits()));
    assert_eq!(b.try_recv().unwrap().generation, 2);
    assert_eq!(g.leave("b", t0, &limits()), code::NONE);
    assert_eq!(g.state, State::Empty);
    assert!(g.is_idle());
    // Simple commits (no member, generation -1) are for empty groups only.
    assert_eq!(g.may_commit("", -1, t0), code::NONE);
}

#[test]
fn bad_joins_are_refused_and_change_nothing() {
    let t0 = Instant::now();
    let mut g = Group::new();
    let mut short = ask("", "a");
    short.session_timeout = Duration::from_millis(10);
    assert_eq!(
        now_answer(g.join(short, t0, &limits())).error,
        code::INVALID_SESSION_TIMEOUT
    );
    assert_eq!(
        now_answer(g.join(ask("ghost", "a"), t0, &limits())).error,
        code::UNKNOWN_MEMBER_ID
    );
    assert!(g.is_idle());
    let _a = join_new(&mut g, "a", t0);
    let mut other = ask("", "b");
    other.protocols = vec![("sticky".into(), Bytes::new())];
    assert_eq!(
        now_answer(g.join(other, t0, &limits())).error,
        code::INCONSISTENT_GROUP_PROTOCOL
    );
    let mut connect = ask("", "b");
    connect.protocol_type = "connect".into();
    assert_eq!(
        now_answer(g.join(connect, t0, &limits())).error,
        code::INCONSISTENT_GROUP_PROTOCOL
    );
    let _b = join_new(&mut g, "b", t0);
    let _c = join_new(&mut g, "c", t0);
    assert_eq!(
        now_answer(g.join(ask("", "d"), t0, &limits())).error,
        code::GROUP_MAX_SIZE_REACHED
    );
    // A member id handed out and never used expires.
    now_answer(g.join(
        ask("", "e"),
        t0,
        &Limits {
            max_members: 10,
            ..limits()
        },
    ));
    g.tick(t0 + Duration::from_secs(11), &limits());
    assert_eq!(
        now_answer(g.join(ask("e", "x"), t0, &limits())).error,
        code::UNKNOWN_MEMBER_ID
    );
}
