//! Recovery claims: which live member recovers a dead member's WAL, once (docs/cluster.md,
//! "Failover").
//!
//! | Key | Value |
//! |---|---|
//! | `mink/recovery/{member}` | [`RecoveryClaim`]: the claimer, and whether it is done |
//!
//! A claim is put only while the dead member is not registered (its registration, held by its
//! lease, is written before its engine opens, so once it is gone etcd has expired or revoked the
//! lease), compared in the same transaction, and held by the claimer's lease, so a claimer that
//! dies half-way frees it. While a claim exists the member can reserve no more WAL ids
//! ([`Metadata::reserve_wal_ids`]), so what the claimer replays is all the member ever wrote.
//! A claim marked done is kept (without a lease): streams the member held open may then be
//! opened by any node ([`Metadata::open_stream_exclusive`]).

use super::Metadata;
use super::read::get_record;
use crate::error::{MetaError, Result};
use crate::keys;
use crate::kv::{Compare, LeaseId, Op, Txn};
use crate::records::{NodeRecord, RecoveryClaim, is_life_of};
use crate::value::encode;

/// What [`Metadata::claim_recovery`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The caller holds the claim now: it recovers the member, then calls
    /// [`Metadata::finish_recovery`].
    Claimed,
    /// The member is registered: it is alive (or its lease has not expired yet).
    Alive,
    /// Another member is recovering it.
    Held {
        /// The claimer.
        by: String,
    },
    /// Its recovery is done.
    Done,
}

/// Splits a member id into its node id and incarnation (a bare node id from before
/// incarnations has none).
fn split_member(member: &str) -> (&str, Option<u64>) {
    match member.rsplit_once('~') {
        Some((node, n)) => match n.parse() {
            Ok(incarnation) => (node, Some(incarnation)),
            Err(_) => (member, None),
        },
        None => (member, None),
    }
}

impl Metadata {
    /// Claims the recovery of `member` for `claimer`, holding the claim with `lease`: only when
    /// `member` is not registered and nobody else holds a claim on it (a claim left by an
    /// earlier life of the claimer's node is taken over). Claiming again what one holds is
    /// [`ClaimOutcome::Claimed`]. See the module doc.
    pub async fn claim_recovery(
        &self,
        member: &str,
        claimer: &str,
        lease: Option<LeaseId>,
    ) -> Result<ClaimOutcome> {
        keys::check_segment("member", member)?;
        let key = keys::recovery(member);
        let (node, incarnation) = split_member(member);
        keys::check_segment("node", node)?;
        let node_key = keys::node(node);
        let key_ref = key.clone();
        self.retry("claim a recovery", &key_ref, move |_| {
            let key = key.clone();
            let node_key = node_key.clone();
            async move {
                let current = get_record::<RecoveryClaim>(&self.kv.get(&key).await?)?;
                let claim_version = match current {
                    Some((claim, _)) if claim.done => return Ok(Some(ClaimOutcome::Done)),
                    // An earlier life of the claimer's own node stopped half-way (on a store
                    // without leases its claim outlives it): this life takes over.
                    Some((claim, version))
                        if claim.claimer != claimer
                            && is_life_of(&claim.claimer, split_member(claimer).0) =>
                    {
                        version
                    }
                    Some((claim, _)) if claim.claimer == claimer => {
                        return Ok(Some(ClaimOutcome::Claimed));
                    }
                    Some((claim, _)) => return Ok(Some(ClaimOutcome::Held { by: claim.claimer })),
                    None => 0,
                };
                let registered = self.kv.get(&node_key).await?;
                let node_version = match get_record::<NodeRecord>(&registered)? {
                    Some((record, _)) if incarnation.is_none_or(|n| n == record.incarnation) => {
                        return Ok(Some(ClaimOutcome::Alive));
                    }
                    // A later life of the node is registered: this one's lease is gone.
                    Some((_, version)) => version,
                    None => 0,
                };
                let claim = RecoveryClaim {
                    claimer: claimer.to_owned(),
                    done: false,
                };
                let outcome = self
                    .kv
                    .txn(Txn {
                        compares: vec![
                            Compare::version(key.clone(), claim_version),
                            Compare::version(node_key, node_version),
                        ],
                        on_success: vec![Op::Put {
                            key,
                            value: encode(&claim),
                            lease,
                        }],
                    })
                    .await?;
                Ok(outcome.succeeded.then_some(ClaimOutcome::Claimed))
            }
        })
        .await
    }

    /// Marks `claimer`'s recovery of `member` done (kept without a lease). Fails with
    /// [`MetaError::NotFound`] when `claimer` no longer holds the claim (its lease ended).
    pub async fn finish_recovery(&self, member: &str, claimer: &str) -> Result<()> {
        keys::check_segment("member", member)?;
        let key = keys::recovery(member);
        let lost = || MetaError::NotFound {
            what: "recovery claim",
            id: format!("{member} by {claimer}"),
        };
        let Some((claim, version)) = get_record::<RecoveryClaim>(&self.kv.get(&key).await?)? else {
            return Err(lost());
        };
        if claim.claimer != claimer {
            return Err(lost());
        }
        let done = RecoveryClaim {
            claimer: claimer.to_owned(),
            done: true,
        };
        let outcome = self
            .kv
            .txn(Txn {
                compares: vec![Compare::version(key.clone(), version)],
                on_success: vec![Op::put(key, encode(&done))],
            })
            .await?;
        if outcome.succeeded {
            Ok(())
        } else {
            Err(lost())
        }
    }

    /// The recovery claim on `member`, if there is one.
    pub async fn recovery_claim(&self, member: &str) -> Result<Option<RecoveryClaim>> {
        keys::check_segment("member", member)?;
        Ok(
            get_record::<RecoveryClaim>(&self.kv.get(&keys::recovery(member)).await?)?
                .map(|(c, _)| c),
        )
    }

    /// Whether `member`'s recovery is done.
    pub async fn recovered(&self, member: &str) -> Result<bool> {
        Ok(self.recovery_claim(member).await?.is_some_and(|c| c.done))
    }
}

#[cfg(test)]
mod tests {
    use super::split_member;

    #[test]
    fn member_ids_split_into_node_and_incarnation() {
        assert_eq!(split_member("mink-1~3"), ("mink-1", Some(3)));
        assert_eq!(split_member("mink-1"), ("mink-1", None));
        assert_eq!(split_member("mink-1~x"), ("mink-1~x", None));
    }
}
