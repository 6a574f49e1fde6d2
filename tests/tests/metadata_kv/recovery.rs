//! Recovery claims: a dead member's recovery is claimed once, only after its registration is
//! gone; the claim stops the member's WAL and, once done, frees the streams it held open.

use std::sync::Arc;
use std::time::Duration;

use mink_metadata::{
    ClaimOutcome, ErrorKind, LeaseSession, MetaError, Metadata, MetadataOptions, NodeRecord,
};
use mink_runtime::SystemClock;

use super::Fixture;

fn record(node: &str, incarnation: u64, lease: Option<i64>) -> NodeRecord {
    NodeRecord {
        node_id: node.to_owned(),
        incarnation,
        broker_id: 1,
        http_url: String::new(),
        kafka_address: None,
        flight_url: None,
        lease,
        started_at_ms: 0,
        draining: false,
    }
}

async fn session(f: &Fixture) -> Option<LeaseSession> {
    if f.kv.backend() == "redb" {
        return None;
    }
    Some(
        LeaseSession::start(
            Arc::clone(&f.kv),
            Arc::new(SystemClock),
            Duration::from_secs(5),
            Duration::from_millis(500),
        )
        .await
        .unwrap(),
    )
}

pub(super) async fn recovery_is_claimed_once_after_the_member_is_gone(f: Fixture) {
    let meta = Metadata::open(Arc::clone(&f.kv), MetadataOptions::default())
        .await
        .unwrap();
    let n1 = session(&f).await;
    let n2 = session(&f).await;
    let dead = record("n1", 1, n1.as_ref().map(LeaseSession::id));
    let n2_lease = n2.as_ref().map(LeaseSession::id);
    meta.register_node(&dead).await.unwrap();
    let stream = meta.create_stream().await.unwrap().id;
    meta.open_stream(stream, "n1~1").await.unwrap();
    meta.reserve_wal_ids("n1~1", 4).await.unwrap();

    // Registered: alive, whatever anyone else thinks.
    assert_eq!(
        meta.claim_recovery("n1~1", "n2~1", n2_lease).await.unwrap(),
        ClaimOutcome::Alive
    );
    assert!(meta.recovery_claim("n1~1").await.unwrap().is_none());
    // Its registration gone (its lease ended, or it left):
    match n1 {
        Some(n1) => n1.revoke().await.unwrap(),
        None => meta.deregister_node(&dead).await.unwrap(),
    }
    assert_eq!(
        meta.claim_recovery("n1~1", "n2~1", n2_lease).await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(
        meta.claim_recovery("n1~1", "n2~1", n2_lease).await.unwrap(),
        ClaimOutcome::Claimed,
        "claiming again what one holds"
    );
    assert_eq!(
        meta.claim_recovery("n1~1", "n3~1", None).await.unwrap(),
        ClaimOutcome::Held {
            by: "n2~1".to_owned()
        }
    );
    // The member can reserve no more WAL ids.
    let refused = meta.reserve_wal_ids("n1~1", 4).await.unwrap_err();
    assert!(matches!(refused, MetaError::Recovered { .. }), "{refused}");
    assert_eq!(refused.kind(), ErrorKind::Fenced);
    // Its streams stay held until the recovery is done ...
    let held = meta
        .open_stream_exclusive(stream, "n3~1", "n3")
        .await
        .unwrap_err();
    assert!(matches!(held, MetaError::StreamHeld { .. }), "{held}");
    assert!(!meta.recovered("n1~1").await.unwrap());
    // ... which only the claimer can say.
    assert_eq!(
        meta.finish_recovery("n1~1", "n3~1")
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    meta.finish_recovery("n1~1", "n2~1").await.unwrap();
    assert!(meta.recovered("n1~1").await.unwrap());
    assert_eq!(
        meta.claim_recovery("n1~1", "n3~1", None).await.unwrap(),
        ClaimOutcome::Done
    );
    let opened = meta
        .open_stream_exclusive(stream, "n3~1", "n3")
        .await
        .unwrap();
    assert_eq!(opened.owner.as_deref(), Some("n3~1"));

    // A later life registered means this one's lease is gone.
    meta.register_node(&record("n4", 2, n2_lease))
        .await
        .unwrap();
    assert_eq!(
        meta.claim_recovery("n4~2", "n2~1", n2_lease).await.unwrap(),
        ClaimOutcome::Alive
    );
    assert_eq!(
        meta.claim_recovery("n4~1", "n2~1", n2_lease).await.unwrap(),
        ClaimOutcome::Claimed
    );
    // A claim left by an earlier life of the claimer's own node is taken over by a later one.
    assert_eq!(
        meta.claim_recovery("n4~1", "n2~2", None).await.unwrap(),
        ClaimOutcome::Claimed
    );
    meta.finish_recovery("n4~1", "n2~2").await.unwrap();

    if let Some(n2) = n2 {
        // A claimer whose lease ends frees its unfinished claims.
        meta.claim_recovery("n5~1", "n2~1", n2_lease).await.unwrap();
        n2.revoke().await.unwrap();
        assert!(meta.recovery_claim("n5~1").await.unwrap().is_none());
        assert!(
            meta.recovered("n4~1").await.unwrap(),
            "a finished claim holds no lease"
        );
        assert_eq!(
            meta.claim_recovery("n5~1", "n3~1", None).await.unwrap(),
            ClaimOutcome::Claimed
        );
    }
}
