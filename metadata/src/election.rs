//! [`Election`]: one leader among the live members, and the fence its decisions are written with
//! (docs/cluster.md, "Ownership").
//!
//! etcd's election recipe, on the [`MetaKv`] trait so every store with leases has it: each
//! candidate puts `{prefix}{member}` with its lease, once; the leader is the candidate whose key
//! has the lowest version (the revision that created it: the key is never rewritten). A leader
//! stays leader until its key goes: it resigns (deletes it), or its lease ends. Every decision
//! the leader writes compares its key's version ([`Election::fence`]), so once its key is gone a
//! deposed leader's writes fail, whatever it believes.

use futures::StreamExt;

use crate::error::{MetaError, Result};
use crate::kv::{Compare, KeyValue, LeaseId, MetaKv, MetaKvExt, Op, Txn};

/// How many candidate keys a scan reads per page.
const PAGE: usize = 256;

/// A candidacy in one election.
#[derive(Debug, Clone)]
pub struct Election {
    prefix: String,
    key: String,
    version: u64,
}

impl Election {
    /// Stands `member` as a candidate under `prefix` (ending in `/`), holding the candidacy with
    /// `lease` so it ends with the member. Returns at once; [`Election::is_leader`] and
    /// [`Election::leadership`] say when it leads.
    ///
    /// # Errors
    /// [`MetaError::AlreadyExists`] when `member` already stands; the store's errors.
    pub async fn campaign(
        kv: &dyn MetaKv,
        prefix: &str,
        member: &str,
        lease: Option<LeaseId>,
    ) -> Result<Self> {
        let key = format!("{prefix}{member}");
        let outcome = kv
            .txn(Txn {
                compares: vec![Compare::absent(key.clone())],
                on_success: vec![Op::Put {
                    key: key.clone(),
                    value: bytes::Bytes::from(member.to_owned()),
                    lease,
                }],
            })
            .await?;
        if !outcome.succeeded {
            return Err(MetaError::AlreadyExists {
                what: "candidacy",
                id: key,
            });
        }
        Ok(Election {
            prefix: prefix.to_owned(),
            key,
            version: outcome.revision,
        })
    }

    /// The current leader under `prefix`: its member id and its leadership revision.
    pub async fn leader(kv: &dyn MetaKv, prefix: &str) -> Result<Option<(String, u64)>> {
        let candidates = kv.scan_all(prefix, PAGE).await?;
        Ok(lowest(&candidates).map(|c| {
            let member = c.key.strip_prefix(prefix).unwrap_or(&c.key).to_owned();
            (member, c.version)
        }))
    }

    /// This candidacy's leadership revision: its key's version.
    pub fn revision(&self) -> u64 {
        self.version
    }

    /// Whether this candidate leads now.
    pub async fn is_leader(&self, kv: &dyn MetaKv) -> Result<bool> {
        Ok(Self::leader(kv, &self.prefix).await?.map(|(_, v)| v) == Some(self.version))
    }

    /// Waits until this candidate leads. Fails with [`MetaError::NotFound`] when its candidacy
    /// is gone (resigned, or its lease ended): it can never lead then.
    pub async fn leadership(&self, kv: &dyn MetaKv) -> Result<()> {
        loop {
            // Watch first, then look, so no change falls between the two.
            let mut watch = kv.watch_prefix(&self.prefix).await?;
            let candidates = kv.scan_all(&self.prefix, PAGE).await?;
            if !candidates
                .iter()
                .any(|c| c.key == self.key && c.version == self.version)
            {
                return Err(MetaError::NotFound {
                    what: "candidacy",
                    id: self.key.clone(),
                });
            }
            if lowest(&candidates).map(|c| c.version) == Some(self.version) {
                return Ok(());
            }
            // Any change under the prefix may make this candidate the leader: look again.
            match watch.next().await {
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::debug!(error = %e, "election watch broke; looking again"),
                None => {}
            }
        }
    }

    /// The compare every decision of the leader carries: its candidacy still stands, unchanged.
    /// While it stands with the lowest version, nobody else leads.
    pub fn fence(&self) -> Compare {
        Compare::version(self.key.clone(), self.version)
    }

    /// Ends the candidacy (and the leadership, if it leads): the next candidate leads.
    pub async fn resign(self, kv: &dyn MetaKv) -> Result<()> {
        kv.compare_and_swap(&self.key, self.version, None).await?;
        Ok(())
    }
}

fn lowest(candidates: &[KeyValue]) -> Option<&KeyValue> {
    candidates.iter().min_by_key(|c| c.version)
}
