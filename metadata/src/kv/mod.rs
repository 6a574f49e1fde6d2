//! The metadata KV: a small, object-safe async trait and its three backends.
//!
//! Everything Mink must agree on across restarts and nodes is stored as bytes under string keys
//! beginning with `mink/`. Each key carries a **version**: the backend-wide revision of the
//! transaction that last wrote it (etcd's `mod_revision`). Versions only grow, and version 0 means
//! "absent", so a compare on version 0 asserts that a key does not exist. Compare-and-swap and
//! multi-key transactions compare versions; this is all the typed layers above need to fence
//! stale writers.
//!
//! Backends: [`MemoryKv`] (tests), [`RedbKv`] (embedded, one file, durable per commit) and
//! [`EtcdKv`] (several nodes). All pass the same conformance suite in `tests/tests/metadata_kv.rs`.

mod etcd;
mod hub;
mod memory;
mod redb;

use std::ops::Bound;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

use crate::error::{InvalidRequest, MetaError, Result};

pub use self::etcd::EtcdKv;
pub use self::memory::MemoryKv;
pub use self::redb::RedbKv;

/// A key, its value and its version (the revision that last wrote it, never 0 for a present key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// The value bytes.
    pub value: Bytes,
    /// The revision of the transaction that last wrote this key.
    pub version: u64,
}

/// A condition of a [`Txn`]: the key's current version must equal `version` (0: the key is absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compare {
    /// The key to check.
    pub key: String,
    /// The required version; 0 requires the key to be absent.
    pub version: u64,
}

impl Compare {
    /// Requires `key` to be at `version`.
    pub fn version(key: impl Into<String>, version: u64) -> Self {
        Compare {
            key: key.into(),
            version,
        }
    }

    /// Requires `key` to be absent.
    pub fn absent(key: impl Into<String>) -> Self {
        Compare {
            key: key.into(),
            version: 0,
        }
    }
}

/// A write inside a [`Txn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Set `key` to `value`, optionally attached to a lease (deleted when the lease expires).
    Put {
        /// The key.
        key: String,
        /// The new value.
        value: Bytes,
        /// A lease from [`MetaKv::grant_lease`], on backends that have leases.
        lease: Option<LeaseId>,
    },
    /// Remove `key` (no effect if absent).
    Delete {
        /// The key.
        key: String,
    },
}

impl Op {
    /// A put without lease.
    pub fn put(key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        Op::Put {
            key: key.into(),
            value: value.into(),
            lease: None,
        }
    }

    /// A delete.
    pub fn delete(key: impl Into<String>) -> Self {
        Op::Delete { key: key.into() }
    }

    /// The key this op writes.
    pub fn key(&self) -> &str {
        match self {
            Op::Put { key, .. } | Op::Delete { key } => key,
        }
    }
}

/// An atomic multi-key transaction: if every compare holds, every op is applied, at one new revision;
/// otherwise nothing is applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    /// Conditions that must all hold.
    pub compares: Vec<Compare>,
    /// Writes applied when they do. A key may appear at most once.
    pub on_success: Vec<Op>,
}

/// The result of a [`Txn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnOutcome {
    /// Whether the compares held and the ops were applied.
    pub succeeded: bool,
    /// On success, the revision of the writes (every written key now has this version). On failure,
    /// the backend's revision when the compares were evaluated.
    pub revision: u64,
}

/// The result of [`MetaKvExt::compare_and_swap`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CasOutcome {
    /// The key was at the expected version and now holds the new value at `version`
    /// (or is deleted, when the new value was `None`).
    Swapped {
        /// The new version.
        version: u64,
    },
    /// The key was not at the expected version; nothing changed. `current` is what is there now.
    Conflict {
        /// The current key-value, `None` if absent.
        current: Option<KeyValue>,
    },
}

/// One page of a prefix scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPage {
    /// Keys in ascending byte order.
    pub items: Vec<KeyValue>,
    /// Whether more keys follow; continue with `start_after` = the last key of this page.
    pub more: bool,
    /// The backend's revision at which this page was read.
    pub revision: u64,
}

/// A change seen by a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// A key was written; `kv.version` is the revision of the write.
    Put(KeyValue),
    /// A key was deleted at `revision`.
    Delete {
        /// The deleted key.
        key: String,
        /// The revision of the delete.
        revision: u64,
    },
}

impl WatchEvent {
    /// The key this event is about.
    pub fn key(&self) -> &str {
        match self {
            WatchEvent::Put(kv) => &kv.key,
            WatchEvent::Delete { key, .. } => key,
        }
    }

    /// The revision of the change.
    pub fn revision(&self) -> u64 {
        match self {
            WatchEvent::Put(kv) => kv.version,
            WatchEvent::Delete { revision, .. } => *revision,
        }
    }
}

/// The events of a watch, in revision order. An `Err` item ends the watch (connection lost, or the
/// watcher fell behind): the caller re-reads the state and watches again.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent>> + Send + 'static>>;

/// A lease id from [`MetaKv::grant_lease`].
pub type LeaseId = i64;

/// A lease as the backend granted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Its id, for [`Op::Put`] and the other lease calls.
    pub id: LeaseId,
    /// The TTL the backend granted, which may be longer than the one asked for (etcd grants
    /// whole seconds).
    pub ttl: Duration,
}

/// One open keep-alive stream of a lease ([`MetaKv::lease_keeper`]), kept for the lease's life.
#[async_trait]
pub trait LeaseKeeper: Send {
    /// Sends one keep-alive and waits for its answer: `Some(ttl)` when the lease was renewed for
    /// `ttl` from when the backend processed it, `None` when the lease is gone (expired or
    /// revoked). An error means the stream broke and the outcome is unknown; open another.
    async fn renew(&mut self) -> Result<Option<Duration>>;
}

/// The metadata KV.
///
/// # Contract
///
/// - **Versions.** Every successful write (a `put`, a `delete` of a present key, a succeeded `txn`)
///   takes the next backend-wide revision; every key it writes gets that revision as its version.
///   Versions never repeat or go backwards for the life of the store (across restarts for redb and
///   etcd). Version 0 means absent.
/// - **Atomicity.** A [`Txn`] applies all of its ops or none. A returned error means the outcome may
///   be unknown only for [`MetaError::Unavailable`] (the request may have reached etcd); any other
///   error means nothing was applied. Callers that must know re-read the keys.
/// - **Durability.** When a write returns `Ok`, it survives a process crash (redb: fsync per commit;
///   etcd: quorum commit). [`MemoryKv`] forgets everything when dropped.
/// - **Scans** return keys with the prefix in ascending byte order, at most `limit` per page
///   (`limit` > 0), strictly after `start_after` when given. Each page is a consistent snapshot;
///   pages of one scan may come from different revisions.
/// - **Watches** deliver every change under the prefix made after `watch_prefix` returned, in revision
///   order, until the stream is dropped or yields an error. Backends without watches return
///   [`MetaError::Unsupported`].
/// - **Leases** (etcd, memory): a key put with a lease is deleted when the lease expires or is
///   revoked; a put with a lease that is gone fails with [`MetaError::NotFound`]. A lease is kept
///   alive through one [`LeaseKeeper`] for its whole life. Backends without leases (redb) return
///   [`MetaError::Unsupported`] from every lease call and from a put with a lease.
/// - Keys are non-empty UTF-8 strings. Methods never panic on any stored bytes.
#[async_trait]
pub trait MetaKv: Send + Sync + 'static {
    /// The backend's name, for errors and logs (`memory`, `redb`, `etcd`).
    fn backend(&self) -> &'static str;

    /// The most compares, and the most writes, one [`Txn`] may hold on this backend, if it limits
    /// them (etcd: `--max-txn-ops`, 128 by default); commits that grow with the number of
    /// streams are split to stay within it. `None`: no limit.
    fn max_txn_ops(&self) -> Option<usize> {
        None
    }

    /// Reads one key.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// Reads several keys: for each, what [`MetaKv::get`] would return, in the order of `keys`.
    /// Backends that can read them together do (redb: one read transaction; memory: one lock),
    /// so a commit naming hundreds of streams does not pay for hundreds of separate reads. Like
    /// `get`, the reads need not all see one revision.
    async fn get_many(&self, keys: &[String]) -> Result<Vec<Option<KeyValue>>> {
        futures::future::try_join_all(keys.iter().map(|k| self.get(k))).await
    }

    /// Writes one key unconditionally; returns its new version.
    async fn put(&self, key: &str, value: Bytes) -> Result<u64>;

    /// Deletes one key; returns whether it existed.
    async fn delete(&self, key: &str) -> Result<bool>;

    /// Applies `txn` atomically if all its compares hold.
    async fn txn(&self, txn: Txn) -> Result<TxnOutcome>;

    /// Reads up to `limit` keys starting with `prefix`, strictly after `start_after` when given.
    async fn scan(&self, prefix: &str, start_after: Option<&str>, limit: usize)
    -> Result<ScanPage>;

    /// Streams the changes under `prefix` made after this call returns.
    async fn watch_prefix(&self, prefix: &str) -> Result<WatchStream>;

    /// Every key under `prefix` as the store held them at one moment, when the backend can read
    /// that in one go: etcd pages at the revision of the first page, memory reads under one
    /// lock, redb in one read transaction. `None` (the default) when it cannot, or when the
    /// moment is gone (etcd compacted that revision mid-read): a caller that needs one state then
    /// checks for itself, as a metadata snapshot does by scanning twice.
    async fn scan_all_at_one_revision(&self, prefix: &str) -> Result<Option<Vec<KeyValue>>> {
        let _ = prefix;
        Ok(None)
    }

    /// Grants a lease of at least `ttl`; keys put with it disappear when it is not kept alive.
    /// Backends without leases (the default) fail with [`MetaError::Unsupported`].
    async fn grant_lease(&self, ttl: Duration) -> Result<Lease> {
        let _ = ttl;
        Err(leases_unsupported(self.backend()))
    }

    /// Opens the keep-alive stream of `lease`: one per lease, kept open while the lease is kept
    /// alive. Fails with [`MetaError::Unsupported`] on a backend without leases (the default).
    async fn lease_keeper(&self, lease: LeaseId) -> Result<Box<dyn LeaseKeeper>> {
        let _ = lease;
        Err(leases_unsupported(self.backend()))
    }

    /// The time `lease` has left, `None` when it is gone (expired, revoked, never granted). Fails
    /// with [`MetaError::Unsupported`] on a backend without leases (the default).
    async fn lease_ttl(&self, lease: LeaseId) -> Result<Option<Duration>> {
        let _ = lease;
        Err(leases_unsupported(self.backend()))
    }

    /// Revokes a lease, deleting its keys; revoking a lease that is gone succeeds. Fails with
    /// [`MetaError::Unsupported`] on a backend without leases (the default).
    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        let _ = lease;
        Err(leases_unsupported(self.backend()))
    }
}

/// Compile-time check that [`MetaKv`] stays object-safe.
fn _assert_object_safe(_: &dyn MetaKv) {}

/// Conveniences over [`MetaKv`], implemented for every backend.
#[async_trait]
pub trait MetaKvExt: MetaKv {
    /// Sets `key` to `value` (or deletes it, for `None`) if it is at `expected` version (0: absent).
    async fn compare_and_swap(
        &self,
        key: &str,
        expected: u64,
        value: Option<Bytes>,
    ) -> Result<CasOutcome> {
        let op = match value {
            Some(value) => Op::put(key, value),
            None => Op::delete(key),
        };
        let outcome = self
            .txn(Txn {
                compares: vec![Compare::version(key, expected)],
                on_success: vec![op],
            })
            .await?;
        if outcome.succeeded {
            Ok(CasOutcome::Swapped {
                version: outcome.revision,
            })
        } else {
            Ok(CasOutcome::Conflict {
                current: self.get(key).await?,
            })
        }
    }

    /// Reads every key under `prefix`, paging with `page` keys per request.
    async fn scan_all(&self, prefix: &str, page: usize) -> Result<Vec<KeyValue>> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let got = self.scan(prefix, after.as_deref(), page.max(1)).await?;
            let more = got.more;
            out.extend(got.items);
            if !more {
                return Ok(out);
            }
            after = out.last().map(|kv| kv.key.clone());
        }
    }
}

impl<T: MetaKv + ?Sized> MetaKvExt for T {}

/// Checks a transaction before a backend applies it.
pub(crate) fn validate_txn(txn: &Txn) -> Result<()> {
    let mut keys: Vec<&str> = txn.on_success.iter().map(Op::key).collect();
    keys.sort_unstable();
    if let Some(w) = keys.windows(2).find(|w| w[0] == w[1]) {
        return Err(MetaError::Invalid(InvalidRequest::KeyWrittenTwice {
            key: w[0].to_owned(),
        }));
    }
    if keys.iter().any(|k| k.is_empty()) || txn.compares.iter().any(|c| c.key.is_empty()) {
        return Err(MetaError::Invalid(InvalidRequest::EmptyKey));
    }
    Ok(())
}

/// Checks a scan's page size before use.
pub(crate) fn validate_scan_limit(limit: usize) -> Result<()> {
    if limit == 0 {
        return Err(MetaError::Invalid(InvalidRequest::ZeroScanLimit));
    }
    Ok(())
}

/// Where a scan of `prefix` starts: just after `start_after` when that is at or past the prefix's
/// first key (a later page), else at the prefix itself.
pub(crate) fn scan_start<'a>(prefix: &'a str, start_after: Option<&'a str>) -> Bound<&'a str> {
    match start_after {
        Some(after) if after >= prefix => Bound::Excluded(after),
        _ => Bound::Included(prefix),
    }
}

/// Whether a transaction writes a key under a lease (refused by backends without leases).
pub(crate) fn puts_with_lease(txn: &Txn) -> bool {
    txn.on_success
        .iter()
        .any(|op| matches!(op, Op::Put { lease: Some(_), .. }))
}

/// [`MetaKv::put`] for backends whose transactions do all the writing: a transaction of one put.
pub(crate) async fn put_as_txn<K: MetaKv + ?Sized>(kv: &K, key: &str, value: Bytes) -> Result<u64> {
    let outcome = kv
        .txn(Txn {
            compares: vec![],
            on_success: vec![Op::put(key, value)],
        })
        .await?;
    Ok(outcome.revision)
}

/// Applies `ops` in transactions without conditions, as many per transaction as the backend
/// takes (at most 256): for work done while no node runs on the store (restore, rebuild), where
/// nothing races with it. Not atomic as a whole; each caller is safe to run again.
pub(crate) async fn apply_unconditional(
    kv: &dyn MetaKv,
    ops: Vec<Op>,
    operation: &'static str,
) -> Result<()> {
    let chunk = kv.max_txn_ops().unwrap_or(256).clamp(1, 256);
    let mut ops = ops.into_iter().peekable();
    while ops.peek().is_some() {
        let outcome = kv
            .txn(Txn {
                compares: Vec::new(),
                on_success: ops.by_ref().take(chunk).collect(),
            })
            .await?;
        if !outcome.succeeded {
            return Err(MetaError::Unavailable {
                backend: kv.backend(),
                operation,
                source: "a transaction without conditions did not apply".into(),
            });
        }
    }
    Ok(())
}

/// What every lease operation returns on a backend without leases.
pub(crate) fn leases_unsupported(backend: &'static str) -> MetaError {
    MetaError::Unsupported {
        backend,
        operation: "leases",
    }
}

/// Checks a key before use.
pub(crate) fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(MetaError::Invalid(InvalidRequest::EmptyKey));
    }
    Ok(())
}

/// The smallest key greater than every key starting with `prefix` (None: no upper bound).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}
