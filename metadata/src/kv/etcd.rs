//! [`EtcdKv`]: the metadata KV on an etcd cluster, for several nodes. Versions are etcd
//! `mod_revision`s, transactions are etcd transactions, watches and leases are etcd's own.
//!
//! Every key is stored under a fixed prefix given to [`EtcdKv::connect`] (so several clusters, or
//! several tests, can share one etcd); the prefix is invisible to callers. Values are stored as
//! given (see [`crate::value`] for the format of metadata values).

use std::ops::Bound;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, Compare as EtcdCompare, CompareOp, ConnectOptions, DeleteOptions, GetOptions,
    PutOptions, Txn as EtcdTxn, TxnOp, WatchOptions,
};
use futures::StreamExt;

use super::{
    KeyValue, Lease, LeaseId, LeaseKeeper, MetaKv, Op, ScanPage, Txn, TxnOutcome, WatchEvent,
    WatchStream, prefix_end, scan_start, validate_key, validate_scan_limit, validate_txn,
};
use crate::error::{InvalidRequest, MetaError, Result};

const BACKEND: &str = "etcd";
/// Keys per page of a read pinned to one revision.
const SCAN_ALL_PAGE: usize = 512;

fn unavailable(operation: &'static str) -> impl FnOnce(etcd_client::Error) -> MetaError {
    move |e| MetaError::Unavailable {
        backend: BACKEND,
        operation,
        source: Box::new(e),
    }
}

/// A [`MetaKv`] on etcd. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct EtcdKv {
    client: Client,
    prefix: String,
}

impl std::fmt::Debug for EtcdKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdKv")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl EtcdKv {
    /// Connects to the etcd `endpoints` (`http://host:port`) and keeps every key under `prefix`.
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<Self> {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(10));
        let client = Client::connect(endpoints, Some(options))
            .await
            .map_err(unavailable("connect"))?;
        Ok(EtcdKv {
            client,
            prefix: prefix.to_owned(),
        })
    }

    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn strip(&self, key: &[u8]) -> Result<String> {
        let key = std::str::from_utf8(key).map_err(|e| MetaError::Corrupt {
            key: String::from_utf8_lossy(key).into_owned(),
            reason: format!("etcd key is not UTF-8: {e}"),
        })?;
        key.strip_prefix(self.prefix.as_str())
            .map(str::to_owned)
            .ok_or_else(|| MetaError::Corrupt {
                key: key.to_owned(),
                reason: format!("etcd returned a key outside the prefix {}", self.prefix),
            })
    }

    /// One page of a scan, at `revision` when given (a later page of a read pinned to one
    /// revision), else at the newest.
    async fn scan_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        revision: Option<i64>,
    ) -> Result<ScanPage> {
        validate_scan_limit(limit)?;
        let full_prefix = self.full(prefix);
        let start = match scan_start(prefix, start_after) {
            Bound::Excluded(after) => {
                let mut k = self.full(after).into_bytes();
                k.push(0);
                k
            }
            _ => full_prefix.clone().into_bytes(),
        };
        // An empty range end asks etcd for every key from `start` on ("\0" in etcd's terms).
        let end = prefix_end(full_prefix.as_bytes()).unwrap_or_else(|| vec![0]);
        let mut options = GetOptions::new()
            .with_range(end)
            .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        if let Some(revision) = revision {
            options = options.with_revision(revision);
        }
        let resp = self
            .client
            .kv_client()
            .get(start, Some(options))
            .await
            .map_err(unavailable("scan"))?;
        let items = resp
            .kvs()
            .iter()
            .map(|kv| self.convert(kv))
            .collect::<Result<Vec<_>>>()?;
        Ok(ScanPage {
            items,
            more: resp.more(),
            revision: revision_of(resp.header()),
        })
    }

    fn convert(&self, kv: &etcd_client::KeyValue) -> Result<KeyValue> {
        Ok(KeyValue {
            key: self.strip(kv.key())?,
            value: Bytes::copy_from_slice(kv.value()),
            version: u64::try_from(kv.mod_revision()).unwrap_or(0),
        })
    }
}

fn revision_of(header: Option<&etcd_client::ResponseHeader>) -> u64 {
    header.map_or(0, |h| u64::try_from(h.revision()).unwrap_or(0))
}

fn to_i64(value: u64, what: &'static str) -> Result<i64> {
    i64::try_from(value)
        .map_err(|_| MetaError::Invalid(InvalidRequest::TooLargeForEtcd { what, value }))
}

#[async_trait]
impl MetaKv for EtcdKv {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn max_txn_ops(&self) -> Option<usize> {
        // etcd's default `--max-txn-ops`; a server configured higher is not asked.
        Some(128)
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        validate_key(key)?;
        let resp = self
            .client
            .kv_client()
            .get(self.full(key), None)
            .await
            .map_err(unavailable("get"))?;
        resp.kvs().first().map(|kv| self.convert(kv)).transpose()
    }

    async fn put(&self, key: &str, value: Bytes) -> Result<u64> {
        validate_key(key)?;
        let resp = self
            .client
            .kv_client()
            .put(self.full(key), value.to_vec(), None)
            .await
            .map_err(unavailable("put"))?;
        Ok(revision_of(resp.header()))
    }

    async fn delete(&self, key: &str) -> Result<bool> {
        validate_key(key)?;
        let resp = self
            .client
            .kv_client()
            .delete(self.full(key), None::<DeleteOptions>)
            .await
            .map_err(unavailable("delete"))?;
        Ok(resp.deleted() > 0)
    }

    async fn txn(&self, txn: Txn) -> Result<TxnOutcome> {
        validate_txn(&txn)?;
        let mut compares = Vec::with_capacity(txn.compares.len());
        for c in &txn.compares {
            compares.push(EtcdCompare::mod_revision(
                self.full(&c.key),
                CompareOp::Equal,
                to_i64(c.version, "version")?,
            ));
        }
        let ops: Vec<TxnOp> = txn
            .on_success
            .iter()
            .map(|op| match op {
                Op::Put { key, value, lease } => TxnOp::put(
                    self.full(key),
                    value.to_vec(),
                    lease.map(|l| PutOptions::new().with_lease(l)),
                ),
                Op::Delete { key } => TxnOp::delete(self.full(key), None),
            })
            .collect();
        let resp = self
            .client
            .kv_client()
            .txn(EtcdTxn::new().when(compares).and_then(ops))
            .await
            .map_err(|e| {
                match txn.on_success.iter().find_map(|op| match op {
                    Op::Put { lease: Some(l), .. } if lease_not_found(&e) => Some(*l),
                    _ => None,
                }) {
                    // Nothing was applied: etcd refused the put of a lease that is gone.
                    Some(lease) => MetaError::NotFound {
                        what: "lease",
                        id: lease.to_string(),
                    },
                    // A request, not an outage: retrying cannot help.
                    None if e.to_string().contains("too many operations") => {
                        MetaError::Invalid(InvalidRequest::TooManyOperations {
                            ops: txn.compares.len().max(txn.on_success.len()),
                            limit: 128,
                        })
                    }
                    None => unavailable("txn")(e),
                }
            })?;
        Ok(TxnOutcome {
            succeeded: resp.succeeded(),
            revision: revision_of(resp.header()),
        })
    }

    async fn scan(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<ScanPage> {
        self.scan_page(prefix, start_after, limit, None).await
    }

    async fn scan_all_at_one_revision(&self, prefix: &str) -> Result<Option<Vec<KeyValue>>> {
        let mut page = self.scan_page(prefix, None, SCAN_ALL_PAGE, None).await?;
        let revision = i64::try_from(page.revision).unwrap_or(i64::MAX);
        let mut out = Vec::new();
        loop {
            let more = page.more;
            out.append(&mut page.items);
            if !more {
                return Ok(Some(out));
            }
            let after = out.last().map(|kv| kv.key.clone());
            page = match self
                .scan_page(prefix, after.as_deref(), SCAN_ALL_PAGE, Some(revision))
                .await
            {
                Ok(page) => page,
                // The revision was compacted away mid-read: no one moment to read any more.
                Err(e) if e.to_string().contains("compacted") => return Ok(None),
                Err(e) => return Err(e),
            };
        }
    }

    async fn watch_prefix(&self, prefix: &str) -> Result<WatchStream> {
        let full_prefix = self.full(prefix);
        let mut stream = self
            .client
            .watch_client()
            .watch(full_prefix.clone(), Some(WatchOptions::new().with_prefix()))
            .await
            .map_err(unavailable("watch"))?;
        // Wait for the server to confirm: changes after this point are guaranteed to be seen.
        loop {
            match stream.message().await.map_err(unavailable("watch"))? {
                Some(resp) if resp.created() => break,
                Some(_) => continue,
                None => {
                    return Err(MetaError::Unavailable {
                        backend: BACKEND,
                        operation: "watch",
                        source: "etcd closed the watch before confirming it".into(),
                    });
                }
            }
        }
        let this = self.clone();
        let events = futures::stream::unfold(Some(stream), move |state| {
            let this = this.clone();
            let full_prefix = full_prefix.clone();
            async move {
                let mut stream = state?;
                match stream.message().await {
                    Ok(Some(resp)) => {
                        if resp.canceled() {
                            let err = MetaError::Unavailable {
                                backend: BACKEND,
                                operation: "watch",
                                source: format!(
                                    "etcd cancelled the watch of {full_prefix}: {}",
                                    resp.cancel_reason()
                                )
                                .into(),
                            };
                            return Some((vec![Err(err)], None));
                        }
                        let mut out = Vec::with_capacity(resp.events().len());
                        for event in resp.events() {
                            let Some(kv) = event.kv() else { continue };
                            let converted = match event.event_type() {
                                etcd_client::EventType::Put => {
                                    this.convert(kv).map(WatchEvent::Put)
                                }
                                etcd_client::EventType::Delete => {
                                    this.strip(kv.key()).map(|key| WatchEvent::Delete {
                                        key,
                                        revision: u64::try_from(kv.mod_revision()).unwrap_or(0),
                                    })
                                }
                            };
                            out.push(converted);
                        }
                        Some((out, Some(stream)))
                    }
                    Ok(None) => {
                        let err = MetaError::Unavailable {
                            backend: BACKEND,
                            operation: "watch",
                            source: "etcd closed the watch stream".into(),
                        };
                        Some((vec![Err(err)], None))
                    }
                    Err(e) => Some((vec![Err(unavailable("watch")(e))], None)),
                }
            }
        })
        .flat_map(futures::stream::iter);
        Ok(events.boxed())
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease> {
        // etcd grants whole seconds: round up, so the lease is never shorter than asked.
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let secs = i64::try_from(secs.max(1)).unwrap_or(i64::MAX);
        let resp = self
            .client
            .lease_client()
            .grant(secs, None)
            .await
            .map_err(unavailable("grant_lease"))?;
        Ok(Lease {
            id: resp.id(),
            ttl: Duration::from_secs(u64::try_from(resp.ttl()).unwrap_or(0)),
        })
    }

    async fn lease_keeper(&self, lease: LeaseId) -> Result<Box<dyn LeaseKeeper>> {
        let (keeper, stream) = self
            .client
            .lease_client()
            .keep_alive(lease)
            .await
            .map_err(unavailable("keep_alive"))?;
        Ok(Box::new(EtcdKeeper { keeper, stream }))
    }

    async fn lease_ttl(&self, lease: LeaseId) -> Result<Option<Duration>> {
        match self.client.lease_client().time_to_live(lease, None).await {
            // etcd answers -1 for a lease it no longer has.
            Ok(resp) => Ok(u64::try_from(resp.ttl())
                .ok()
                .filter(|ttl| *ttl > 0)
                .map(Duration::from_secs)),
            Err(e) if lease_not_found(&e) => Ok(None),
            Err(e) => Err(unavailable("lease_ttl")(e)),
        }
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        match self.client.lease_client().revoke(lease).await {
            Ok(_) => Ok(()),
            Err(e) if lease_not_found(&e) => Ok(()),
            Err(e) => Err(unavailable("revoke_lease")(e)),
        }
    }
}

/// Whether etcd refused a call because the lease does not exist (`requested lease not found`).
fn lease_not_found(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(status) if status.message().contains("lease not found"))
}

/// The keep-alive stream of an etcd lease: etcd-client's keeper (sends) and stream (answers).
struct EtcdKeeper {
    keeper: etcd_client::LeaseKeeper,
    stream: etcd_client::LeaseKeepAliveStream,
}

#[async_trait]
impl LeaseKeeper for EtcdKeeper {
    async fn renew(&mut self) -> Result<Option<Duration>> {
        self.keeper
            .keep_alive()
            .await
            .map_err(unavailable("keep_alive"))?;
        match self
            .stream
            .message()
            .await
            .map_err(unavailable("keep_alive"))?
        {
            // etcd answers a TTL of 0 or less for a lease that is gone.
            Some(resp) => Ok(u64::try_from(resp.ttl())
                .ok()
                .filter(|ttl| *ttl > 0)
                .map(Duration::from_secs)),
            None => Err(MetaError::Unavailable {
                backend: BACKEND,
                operation: "keep_alive",
                source: "etcd closed the keep-alive stream".into(),
            }),
        }
    }
}
