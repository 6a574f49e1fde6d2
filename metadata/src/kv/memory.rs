//! [`MemoryKv`]: the metadata KV in a `BTreeMap`, for tests. Fast, watchable, forgotten on drop.

use std::collections::BTreeMap;
use std::ops::Bound;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;

use super::hub::WatchHub;
use super::{
    KeyValue, MetaKv, Op, ScanPage, Txn, TxnOutcome, WatchEvent, WatchStream, leases_unsupported,
    put_as_txn, puts_with_lease, scan_start, validate_key, validate_scan_limit, validate_txn,
};
use crate::error::Result;

const BACKEND: &str = "memory";

#[derive(Debug, Default)]
struct State {
    map: BTreeMap<String, (Bytes, u64)>,
    revision: u64,
}

/// An in-memory [`MetaKv`]. Supports watches; has no leases (node records carry an expiry instead).
#[derive(Debug)]
pub struct MemoryKv {
    state: Mutex<State>,
    hub: WatchHub,
}

impl Default for MemoryKv {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryKv {
    /// An empty store.
    pub fn new() -> Self {
        MemoryKv {
            state: Mutex::new(State::default()),
            hub: WatchHub::new(),
        }
    }
}

#[async_trait]
impl MetaKv for MemoryKv {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        validate_key(key)?;
        let state = self.state.lock();
        Ok(state.map.get(key).map(|(value, version)| KeyValue {
            key: key.to_owned(),
            value: value.clone(),
            version: *version,
        }))
    }

    async fn put(&self, key: &str, value: Bytes) -> Result<u64> {
        put_as_txn(self, key, value).await
    }

    async fn delete(&self, key: &str) -> Result<bool> {
        validate_key(key)?;
        let mut state = self.state.lock();
        if state.map.remove(key).is_none() {
            return Ok(false);
        }
        state.revision += 1;
        let revision = state.revision;
        self.hub.publish([WatchEvent::Delete {
            key: key.to_owned(),
            revision,
        }]);
        Ok(true)
    }

    async fn txn(&self, txn: Txn) -> Result<TxnOutcome> {
        validate_txn(&txn)?;
        let mut state = self.state.lock();
        let holds = txn
            .compares
            .iter()
            .all(|c| state.map.get(&c.key).map_or(0, |(_, version)| *version) == c.version);
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
        if puts_with_lease(&txn) {
            return Err(leases_unsupported(BACKEND));
        }
        state.revision += 1;
        let revision = state.revision;
        let mut events = Vec::with_capacity(txn.on_success.len());
        for op in txn.on_success {
            match op {
                Op::Put { key, value, .. } => {
                    state.map.insert(key.clone(), (value.clone(), revision));
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
        self.hub.publish(events);
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
        let state = self.state.lock();
        let lower = scan_start(prefix, start_after);
        let mut items = Vec::new();
        let mut more = false;
        for (key, (value, version)) in state.map.range::<str, _>((lower, Bound::Unbounded)) {
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

    async fn watch_prefix(&self, prefix: &str) -> Result<WatchStream> {
        Ok(self.hub.subscribe(prefix))
    }

    // No leases: the trait's defaults refuse them.
}
