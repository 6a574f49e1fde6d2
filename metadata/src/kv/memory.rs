//! [`MemoryKv`]: the metadata KV in a `BTreeMap`, for tests. Fast, watchable, forgotten on drop.
//!
//! Leases expire by the store's clock (its monotonic time, so a [`ManualClock`](mink_runtime)
//! moves them in tests). Expiry is applied at the start of every operation, a renewal included:
//! the expired leases' keys are deleted in one revision, and watchers see the deletes then.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use mink_runtime::{Clock, SystemClock};
use parking_lot::Mutex;

use super::hub::WatchHub;
use super::{
    KeyValue, Lease, LeaseId, LeaseKeeper, MetaKv, Op, ScanPage, Txn, TxnOutcome, WatchEvent,
    WatchStream, put_as_txn, scan_start, validate_key, validate_scan_limit, validate_txn,
};
use crate::error::{InvalidRequest, MetaError, Result};

const BACKEND: &str = "memory";

#[derive(Debug, Default)]
struct State {
    /// Value, version and lease of each key.
    map: BTreeMap<String, (Bytes, u64, Option<LeaseId>)>,
    revision: u64,
    /// Each live lease: its TTL and when it expires (the clock's monotonic time).
    leases: HashMap<LeaseId, (Duration, Duration)>,
    next_lease: LeaseId,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    hub: WatchHub,
    clock: Arc<dyn Clock>,
    /// Refuse transactions past this many compares or writes, as etcd does (tests).
    max_txn_ops: Option<usize>,
}

/// An in-memory [`MetaKv`] with watches and leases.
#[derive(Debug, Clone)]
pub struct MemoryKv {
    inner: Arc<Inner>,
}

impl Default for MemoryKv {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryKv {
    /// An empty store whose leases expire by the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store whose leases expire by `clock`'s monotonic time.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryKv {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                hub: WatchHub::new(),
                clock,
                max_txn_ops: None,
            }),
        }
    }

    /// An empty store that refuses transactions with more than `ops` compares or writes, as
    /// etcd refuses them past its `--max-txn-ops` (for tests of the commits that must stay
    /// within it).
    pub fn with_txn_limit(ops: usize) -> Self {
        MemoryKv {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                hub: WatchHub::new(),
                clock: Arc::new(SystemClock),
                max_txn_ops: Some(ops),
            }),
        }
    }
}

impl Inner {
    /// The state, with every lease that has expired by now removed along with its keys.
    fn state(&self) -> parking_lot::MutexGuard<'_, State> {
        let mut state = self.state.lock();
        let now = self.clock.monotonic();
        let expired: Vec<LeaseId> = state
            .leases
            .iter()
            .filter(|(_, (_, expires))| *expires <= now)
            .map(|(id, _)| *id)
            .collect();
        if !expired.is_empty() {
            self.drop_leases(&mut state, &expired);
        }
        state
    }

    /// Removes `leases` and deletes their keys in one revision.
    fn drop_leases(&self, state: &mut State, leases: &[LeaseId]) {
        for id in leases {
            state.leases.remove(id);
        }
        let keys: Vec<String> = state
            .map
            .iter()
            .filter(|(_, (_, _, lease))| lease.is_some_and(|l| leases.contains(&l)))
            .map(|(key, _)| key.clone())
            .collect();
        if keys.is_empty() {
            return;
        }
        state.revision += 1;
        let revision = state.revision;
        let mut events = Vec::with_capacity(keys.len());
        for key in keys {
            state.map.remove(&key);
            events.push(WatchEvent::Delete { key, revision });
        }
        self.hub.publish(events);
    }

    fn renew(&self, lease: LeaseId) -> Option<Duration> {
        let mut state = self.state();
        let now = self.clock.monotonic();
        let (ttl, expires) = state.leases.get_mut(&lease)?;
        *expires = now + *ttl;
        Some(*ttl)
    }
}

/// The keep-alive stream of a memory lease: each renewal is a call on the store.
struct MemoryKeeper {
    inner: Arc<Inner>,
    lease: LeaseId,
}

#[async_trait]
impl LeaseKeeper for MemoryKeeper {
    async fn renew(&mut self) -> Result<Option<Duration>> {
        Ok(self.inner.renew(self.lease))
    }
}

#[async_trait]
impl MetaKv for MemoryKv {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn max_txn_ops(&self) -> Option<usize> {
        self.inner.max_txn_ops
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self.get_many(&[key.to_owned()]).await?.pop().flatten())
    }

    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<KeyValue>>> {
        for key in keys {
            validate_key(key)?;
        }
        let state = self.inner.state();
        Ok(keys
            .iter()
            .map(|key| {
                state.map.get(key).map(|(value, version, _)| KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                    version: *version,
                })
            })
            .collect())
    }

    async fn put(&self, key: &str, value: Bytes) -> Result<u64> {
        put_as_txn(self, key, value).await
    }

    async fn delete(&self, key: &str) -> Result<bool> {
        validate_key(key)?;
        let mut state = self.inner.state();
        if state.map.remove(key).is_none() {
            return Ok(false);
        }
        state.revision += 1;
        let revision = state.revision;
        self.inner.hub.publish([WatchEvent::Delete {
            key: key.to_owned(),
            revision,
        }]);
        Ok(true)
    }

    async fn txn(&self, txn: Txn) -> Result<TxnOutcome> {
        validate_txn(&txn)?;
        if let Some(limit) = self.inner.max_txn_ops {
            let ops = txn.compares.len().max(txn.on_success.len());
            if ops > limit {
                return Err(MetaError::Invalid(InvalidRequest::TooManyOperations {
                    ops,
                    limit,
                }));
            }
        }
        let mut state = self.inner.state();
        let holds = txn
            .compares
            .iter()
            .all(|c| state.map.get(&c.key).map_or(0, |(_, version, _)| *version) == c.version);
        if !holds {
            return Ok(TxnOutcome {
                succeeded: false,
                revision: state.revision,
            });
        }
        if txn.on_success.is_empty() {
            return Ok(TxnOutcome {
                succeeded: true,
                revision: state.revision,
            });
        }
        // As etcd: a put with a lease that is gone fails the whole transaction.
        for op in &txn.on_success {
            if let Op::Put {
                lease: Some(lease), ..
            } = op
                && !state.leases.contains_key(lease)
            {
                return Err(MetaError::NotFound {
                    what: "lease",
                    id: lease.to_string(),
                });
            }
        }
        state.revision += 1;
        let revision = state.revision;
        let mut events = Vec::with_capacity(txn.on_success.len());
        for op in txn.on_success {
            match op {
                Op::Put { key, value, lease } => {
                    state
                        .map
                        .insert(key.clone(), (value.clone(), revision, lease));
                    events.push(WatchEvent::Put(KeyValue {
                        key,
                        value,
                        version: revision,
                    }));
                }
                Op::Delete { key } => {
                    if state.map.remove(&key).is_some() {
                        events.push(WatchEvent::Delete { key, revision });
                    }
                }
            }
        }
        if events.is_empty() {
            // Only deletes of absent keys: nothing changed, keep the revision.
            state.revision -= 1;
            return Ok(TxnOutcome {
                succeeded: true,
                revision: state.revision,
            });
        }
        self.inner.hub.publish(events);
        Ok(TxnOutcome {
            succeeded: true,
            revision,
        })
    }

    async fn scan(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<ScanPage> {
        validate_scan_limit(limit)?;
        let state = self.inner.state();
        let lower = scan_start(prefix, start_after);
        let mut items = Vec::new();
        let mut more = false;
        for (key, (value, version, _)) in state.map.range::<str, _>((lower, Bound::Unbounded)) {
            if !key.starts_with(prefix) {
                break;
            }
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(KeyValue {
                key: key.clone(),
                value: value.clone(),
                version: *version,
            });
        }
        Ok(ScanPage {
            items,
            more,
            revision: state.revision,
        })
    }

    async fn scan_all_at_one_revision(&self, prefix: &str) -> Result<Option<Vec<KeyValue>>> {
        // One call holds the state's lock throughout.
        Ok(Some(self.scan(prefix, None, usize::MAX).await?.items))
    }

    async fn watch_prefix(&self, prefix: &str) -> Result<WatchStream> {
        Ok(self.inner.hub.subscribe(prefix))
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease> {
        let ttl = ttl.max(Duration::from_millis(1));
        let mut state = self.inner.state();
        state.next_lease += 1;
        let id = state.next_lease;
        let expires = self.inner.clock.monotonic() + ttl;
        state.leases.insert(id, (ttl, expires));
        Ok(Lease { id, ttl })
    }

    async fn lease_keeper(&self, lease: LeaseId) -> Result<Box<dyn LeaseKeeper>> {
        Ok(Box::new(MemoryKeeper {
            inner: Arc::clone(&self.inner),
            lease,
        }))
    }

    async fn lease_ttl(&self, lease: LeaseId) -> Result<Option<Duration>> {
        let state = self.inner.state();
        let now = self.inner.clock.monotonic();
        Ok(state
            .leases
            .get(&lease)
            .map(|(_, expires)| expires.saturating_sub(now)))
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        let mut state = self.inner.state();
        if state.leases.contains_key(&lease) {
            self.inner.drop_leases(&mut state, &[lease]);
        }
        Ok(())
    }
}
