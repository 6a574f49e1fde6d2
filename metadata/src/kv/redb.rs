//! [`RedbKv`]: the metadata KV in one redb file, the embedded default. Every write is one redb
//! transaction committed with immediate durability (fsync), so an acknowledged write survives
//! `kill -9` and a torn commit is rolled back by redb on the next open.
//!
//! # File layout
//!
//! Table `kv` maps each key (UTF-8) to a stored entry:
//!
//! | Offset | Size | Field |
//! |---|---|---|
//! | 0 | 8 | version: the revision that last wrote the key, u64 little-endian, never 0 |
//! | 8 | n | the value bytes (a metadata value, see [`crate::value`]) |
//!
//! Table `meta` maps `revision` to the store's current revision (u64), written in the same redb
//! transaction as the keys, so versions never repeat across restarts.
//!
//! # Group commit
//!
//! Every commit fsyncs, and redb has one writer at a time, so transactions that arrive while a
//! commit runs would each wait for a commit of their own. Instead each one queues itself and
//! takes the write lock (an async lock: a transaction waits for it without holding a thread);
//! whoever holds it applies every queued transaction, in queue order, in one redb transaction
//! and one commit ([`MAX_GROUP`] at most) on a blocking thread, and leaves each its outcome. So
//! a burst of writes (a thousand tablets opening at once) holds one blocking thread, not one per
//! transaction waiting for redb's writer. A
//! transaction sees the writes of those before it in its group, gets a revision of its own, and
//! its watch events are published in that order, so nothing is observable of the grouping but
//! the time saved. If anything in a group fails (a storage error, the commit), the group is
//! applied again one transaction per commit, so each gets its own outcome or error.
//!
//! Watches are in-process: they see the writes made through this `RedbKv` (and its clones), not
//! those of another process opening the same file (redb allows only one writer process anyway).
//! redb has no leases.

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::hub::WatchHub;
use super::{
    KeyValue, MetaKv, Op, ScanPage, Txn, TxnOutcome, WatchEvent, WatchStream, leases_unsupported,
    put_as_txn, puts_with_lease, scan_start, validate_key, validate_scan_limit, validate_txn,
};
use crate::error::{BoxError, MetaError, Result};

const BACKEND: &str = "redb";
const KV: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("kv");
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");
const REVISION: &str = "revision";

fn storage<E: Into<redb::Error>>(operation: &'static str) -> impl FnOnce(E) -> MetaError {
    move |e| MetaError::Storage {
        backend: BACKEND,
        operation,
        source: Box::new(e.into()) as BoxError,
    }
}

fn decode_entry(key: &str, raw: &[u8]) -> Result<KeyValue> {
    let Some((version, value)) = raw.split_first_chunk::<8>() else {
        return Err(MetaError::Corrupt {
            key: key.to_owned(),
            reason: format!(
                "redb entry is {} bytes, shorter than its 8-byte version",
                raw.len()
            ),
        });
    };
    Ok(KeyValue {
        key: key.to_owned(),
        value: Bytes::copy_from_slice(value),
        version: u64::from_le_bytes(*version),
    })
}

fn encode_entry(version: u64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + value.len());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(value);
    out
}

#[derive(Debug)]
struct Inner {
    db: Database,
    /// Serialises commit + publish so watchers see revision order; its holder commits the queue.
    /// Held by the blocking task that commits, so that a caller dropped meanwhile lets nobody in
    /// before the commit has ended.
    write: Arc<tokio::sync::Mutex<()>>,
    /// Transactions waiting for the holder of `write` to commit them.
    queue: Mutex<Vec<Queued>>,
    hub: WatchHub,
    /// redb commits made (groups and lone transactions).
    commits: std::sync::atomic::AtomicU64,
}

/// Transactions a group commits at most: the rest wait for the next group.
const MAX_GROUP: usize = 512;

/// A queued transaction and where its outcome goes.
#[derive(Debug)]
struct Queued {
    txn: Txn,
    outcome: Arc<Mutex<Option<Result<TxnOutcome>>>>,
}

/// What a group did with one of its transactions before the commit.
enum Applied {
    /// Compares failed, nothing changed, or the transaction was refused: final as it is.
    Done(Result<TxnOutcome>),
    /// Written at `revision`; these events are published once the group is committed.
    Wrote {
        revision: u64,
        events: Vec<WatchEvent>,
    },
}

/// A [`MetaKv`] in one redb file. Cheap to clone; clones share the database.
#[derive(Debug, Clone)]
pub struct RedbKv {
    inner: Arc<Inner>,
}

impl RedbKv {
    /// Opens (or creates) the database file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let db = Database::create(path.as_ref()).map_err(storage("open"))?;
        let txn = db.begin_write().map_err(storage("open"))?;
        {
            txn.open_table(KV).map_err(storage("open"))?;
            txn.open_table(META).map_err(storage("open"))?;
        }
        txn.commit().map_err(storage("open"))?;
        Ok(RedbKv {
            inner: Arc::new(Inner {
                db,
                write: Arc::new(tokio::sync::Mutex::new(())),
                queue: Mutex::new(Vec::new()),
                hub: WatchHub::new(),
                commits: std::sync::atomic::AtomicU64::new(0),
            }),
        })
    }

    async fn blocking<T: Send + 'static>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&Inner) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| MetaError::Storage {
                backend: BACKEND,
                operation,
                source: Box::new(e),
            })?
    }
}

impl RedbKv {
    /// Commits `txn`, in a group with whatever else is queued (see the module doc).
    async fn submit(&self, txn: Txn) -> Result<TxnOutcome> {
        let outcome = Arc::new(Mutex::new(None));
        self.inner.queue.lock().push(Queued {
            txn,
            outcome: Arc::clone(&outcome),
        });
        loop {
            let guard = Arc::clone(&self.inner.write).lock_owned().await;
            if let Some(done) = outcome.lock().take() {
                return done;
            }
            let group: Vec<Queued> = {
                let mut queue = self.inner.queue.lock();
                let take = queue.len().min(MAX_GROUP);
                queue.drain(..take).collect()
            };
            // The blocking task's handle on `inner` goes with it when it ends, before this wakes:
            // whoever drops the last handle once its transaction returned closes the file at once.
            self.blocking("txn", move |inner| {
                inner.commit_group(group);
                drop(guard);
                Ok(())
            })
            .await?;
            if let Some(done) = outcome.lock().take() {
                return done;
            }
            // Queued after a full group: the next holder of the lock (maybe this task) takes it.
        }
    }
}

impl Inner {
    /// Applies `group` in one redb transaction and one commit, or, if anything fails, one by one.
    /// Every member gets its outcome. The caller holds the write lock.
    fn commit_group(&self, group: Vec<Queued>) {
        if group.len() == 1 {
            for member in group {
                let done = self.apply(member.txn);
                *member.outcome.lock() = Some(done);
            }
            return;
        }
        let txns: Vec<Txn> = group.iter().map(|m| m.txn.clone()).collect();
        match self.apply_group(txns) {
            Ok(applied) => {
                for (member, applied) in group.into_iter().zip(applied) {
                    let done = match applied {
                        Applied::Done(done) => done,
                        Applied::Wrote { revision, events } => {
                            self.hub.publish(events);
                            Ok(TxnOutcome {
                                succeeded: true,
                                revision,
                            })
                        }
                    };
                    *member.outcome.lock() = Some(done);
                }
            }
            Err(error) => {
                tracing::warn!(%error, members = group.len(), "a grouped metadata commit failed; committing its transactions one by one");
                for member in group {
                    let done = self.apply(member.txn);
                    *member.outcome.lock() = Some(done);
                }
            }
        }
    }

    /// `txns` in one redb transaction, each seeing the ones before it, committed once. Fails
    /// (committing nothing) on any storage error.
    fn apply_group(&self, txns: Vec<Txn>) -> Result<Vec<Applied>> {
        let wtx = self.db.begin_write().map_err(storage("txn"))?;
        let mut applied = Vec::with_capacity(txns.len());
        let mut wrote = false;
        {
            let mut kv = wtx.open_table(KV).map_err(storage("txn"))?;
            let mut meta = wtx.open_table(META).map_err(storage("txn"))?;
            let mut current = meta
                .get(REVISION)
                .map_err(storage("txn"))?
                .map_or(0, |g| g.value());
            for txn in txns {
                let one = apply_txn(&mut kv, current, txn)?;
                if let Applied::Wrote { revision, .. } = &one {
                    current = *revision;
                    wrote = true;
                }
                applied.push(one);
            }
            if wrote {
                meta.insert(REVISION, current).map_err(storage("txn"))?;
            }
        }
        if wrote {
            wtx.commit().map_err(storage("commit"))?;
            self.commits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        } else {
            wtx.abort().map_err(storage("txn"))?;
        }
        Ok(applied)
    }

    /// One transaction in a redb transaction of its own. The caller holds the write lock.
    fn apply(&self, txn: Txn) -> Result<TxnOutcome> {
        let wtx = self.db.begin_write().map_err(storage("txn"))?;
        let applied = {
            let mut kv = wtx.open_table(KV).map_err(storage("txn"))?;
            let mut meta = wtx.open_table(META).map_err(storage("txn"))?;
            let current = meta
                .get(REVISION)
                .map_err(storage("txn"))?
                .map_or(0, |g| g.value());
            let applied = apply_txn(&mut kv, current, txn)?;
            if let Applied::Wrote { revision, .. } = &applied {
                meta.insert(REVISION, *revision).map_err(storage("txn"))?;
            }
            applied
        };
        match applied {
            Applied::Done(done) => {
                wtx.abort().map_err(storage("txn"))?;
                done
            }
            Applied::Wrote { revision, events } => {
                wtx.commit().map_err(storage("commit"))?;
                self.commits
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.hub.publish(events);
                Ok(TxnOutcome {
                    succeeded: true,
                    revision,
                })
            }
        }
    }
}

/// Applies `txn` to `kv` inside an open write transaction whose revision is `current`: its
/// compares, then its operations at `current + 1`. A storage error leaves the write transaction
/// to be aborted.
fn apply_txn(
    kv: &mut redb::Table<'_, &'static str, &'static [u8]>,
    current: u64,
    txn: Txn,
) -> Result<Applied> {
    for compare in &txn.compares {
        let version = match kv.get(compare.key.as_str()).map_err(storage("txn"))? {
            Some(raw) => decode_entry(&compare.key, raw.value())?.version,
            None => 0,
        };
        if version != compare.version {
            return Ok(Applied::Done(Ok(TxnOutcome {
                succeeded: false,
                revision: current,
            })));
        }
    }
    if puts_with_lease(&txn) {
        return Ok(Applied::Done(Err(leases_unsupported(BACKEND))));
    }
    let revision = current + 1;
    let mut events = Vec::with_capacity(txn.on_success.len());
    for op in txn.on_success {
        match op {
            Op::Put { key, value, .. } => {
                kv.insert(key.as_str(), encode_entry(revision, &value).as_slice())
                    .map_err(storage("txn"))?;
                events.push(WatchEvent::Put(KeyValue {
                    key,
                    value,
                    version: revision,
                }));
            }
            Op::Delete { key } => {
                if kv.remove(key.as_str()).map_err(storage("txn"))?.is_some() {
                    events.push(WatchEvent::Delete { key, revision });
                }
            }
        }
    }
    if events.is_empty() {
        // Nothing changed (empty txn or deletes of absent keys): keep the revision.
        return Ok(Applied::Done(Ok(TxnOutcome {
            succeeded: true,
            revision: current,
        })));
    }
    Ok(Applied::Wrote { revision, events })
}

#[async_trait]
impl MetaKv for RedbKv {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self.get_many(&[key.to_owned()]).await?.pop().flatten())
    }

    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<KeyValue>>> {
        for key in keys {
            validate_key(key)?;
        }
        let keys = keys.to_vec();
        self.blocking("get", move |inner| {
            let rtx = inner.db.begin_read().map_err(storage("get"))?;
            let kv = rtx.open_table(KV).map_err(storage("get"))?;
            keys.iter()
                .map(|key| match kv.get(key.as_str()).map_err(storage("get"))? {
                    Some(raw) => Ok(Some(decode_entry(key, raw.value())?)),
                    None => Ok(None),
                })
                .collect()
        })
        .await
    }

    async fn put(&self, key: &str, value: Bytes) -> Result<u64> {
        put_as_txn(self, key, value).await
    }

    async fn delete(&self, key: &str) -> Result<bool> {
        validate_key(key)?;
        let before = self.get(key).await?;
        let Some(before) = before else {
            return Ok(false);
        };
        // Delete only the version we saw, so "existed" is exact even under concurrent writers.
        let mut txn = Txn {
            compares: vec![super::Compare::version(key, before.version)],
            on_success: vec![Op::delete(key)],
        };
        loop {
            let outcome = self.txn(txn).await?;
            if outcome.succeeded {
                return Ok(true);
            }
            match self.get(key).await? {
                None => return Ok(false),
                Some(kv) => {
                    txn = Txn {
                        compares: vec![super::Compare::version(key, kv.version)],
                        on_success: vec![Op::delete(key)],
                    };
                }
            }
        }
    }

    async fn txn(&self, txn: Txn) -> Result<TxnOutcome> {
        validate_txn(&txn)?;
        self.submit(txn).await
    }

    async fn scan(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<ScanPage> {
        validate_scan_limit(limit)?;
        let prefix = prefix.to_owned();
        let start_after = start_after.map(str::to_owned);
        self.blocking("scan", move |inner| {
            let rtx = inner.db.begin_read().map_err(storage("scan"))?;
            let kv = rtx.open_table(KV).map_err(storage("scan"))?;
            let meta = rtx.open_table(META).map_err(storage("scan"))?;
            let revision = meta
                .get(REVISION)
                .map_err(storage("scan"))?
                .map_or(0, |g| g.value());
            let lower = scan_start(&prefix, start_after.as_deref());
            let range = kv
                .range::<&str>((lower, Bound::Unbounded))
                .map_err(storage("scan"))?;
            let mut items = Vec::new();
            let mut more = false;
            for entry in range {
                let (key, raw) = entry.map_err(storage("scan"))?;
                let key = key.value();
                if !key.starts_with(prefix.as_str()) {
                    break;
                }
                if items.len() == limit {
                    more = true;
                    break;
                }
                items.push(decode_entry(key, raw.value())?);
            }
            Ok(ScanPage {
                items,
                more,
                revision,
            })
        })
        .await
    }

    async fn scan_all_at_one_revision(&self, prefix: &str) -> Result<Option<Vec<KeyValue>>> {
        // One call is one read transaction: one state of the file.
        Ok(Some(self.scan(prefix, None, usize::MAX).await?.items))
    }

    async fn watch_prefix(&self, prefix: &str) -> Result<WatchStream> {
        Ok(self.inner.hub.subscribe(prefix))
    }

    // No leases: the trait's defaults refuse them.
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With one blocking thread, transactions that each waited on a thread of their own for the
    /// write lock would commit one by one; waiting for it without a thread, a burst commits in a
    /// few groups.
    #[test]
    fn a_burst_of_transactions_commits_in_groups_on_one_blocking_thread() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kv = RedbKv::open(dir.path().join("meta.redb")).unwrap();
        let outcomes = runtime.block_on(async {
            let burst: Vec<_> = (0..256)
                .map(|i| {
                    let kv = kv.clone();
                    tokio::spawn(async move {
                        kv.txn(Txn {
                            compares: Vec::new(),
                            on_success: vec![Op::put(format!("k/{i:03}"), Bytes::from("v"))],
                        })
                        .await
                    })
                })
                .collect();
            let mut outcomes = Vec::new();
            for txn in burst {
                outcomes.push(txn.await.unwrap().unwrap());
            }
            outcomes
        });
        assert!(outcomes.iter().all(|o| o.succeeded));
        let mut revisions: Vec<u64> = outcomes.iter().map(|o| o.revision).collect();
        revisions.sort_unstable();
        revisions.dedup();
        assert_eq!(
            revisions.len(),
            256,
            "each transaction has a revision of its own"
        );
        let commits = kv.inner.commits.load(std::sync::atomic::Ordering::Relaxed);
        assert!(commits <= 32, "256 transactions took {commits} commits");
        let scan = runtime.block_on(kv.scan("k/", None, 1000)).unwrap();
        assert_eq!(scan.items.len(), 256);
    }
}
