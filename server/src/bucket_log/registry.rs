//! The node's registry of open bucket logs: each log is opened once, on first use, and closed
//! together at shutdown; [`Logs::owner`] is where ownership (which node serves a bucket) goes.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Mutex;

use mink_metadata::TableRecord;

use super::{BucketLog, LogKey, LogProvider, Owner};
use crate::catalog::TableInfo;
use crate::error::{ApiError, ApiResult};

/// The node's open logs.
pub struct Logs {
    provider: Arc<dyn LogProvider>,
    /// Open logs; read on every request, so a plain read lock.
    open: parking_lot::RwLock<HashMap<LogKey, Arc<dyn BucketLog>>>,
    /// Serialises opens, drops and shutdown (an open can take a while: it replays the log).
    changes: Mutex<()>,
    closing: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Logs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Logs").finish_non_exhaustive()
    }
}

impl Logs {
    /// A registry over `provider`.
    pub fn new(provider: Arc<dyn LogProvider>) -> Self {
        Logs {
            provider,
            open: parking_lot::RwLock::new(HashMap::new()),
            changes: Mutex::new(()),
            closing: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Who owns `key`. Single node: always this one.
    pub fn owner(&self, _key: &LogKey) -> Owner {
        Owner::Local
    }

    /// The open log of `key`, opening it on first use.
    pub async fn get(&self, key: &LogKey, table: &Arc<TableInfo>) -> ApiResult<Arc<dyn BucketLog>> {
        if self.closing.load(std::sync::atomic::Ordering::Acquire) {
            return Err(ApiError::ShuttingDown);
        }
        if let Some(log) = self.open.read().get(key)
            && !log.is_closed()
        {
            return Ok(Arc::clone(log));
        }
        let _changing = self.changes.lock().await;
        if self.closing.load(std::sync::atomic::Ordering::Acquire) {
            return Err(ApiError::ShuttingDown);
        }
        if let Some(log) = self.open.read().get(key)
            && !log.is_closed()
        {
            return Ok(Arc::clone(log));
        }
        let log = self.provider.open(key, table).await?;
        self.open.write().insert(key.clone(), Arc::clone(&log));
        Ok(log)
    }

    /// Destroys every bucket log of the (dropped) table `table`'s incarnation, open or not.
    /// Safe to repeat after a partial run. Under the lock that opens take, so an open of the
    /// same incarnation either finished before (and its log is destroyed here) or comes after
    /// and finds the table record gone.
    pub async fn destroy_table(&self, table: &TableRecord) -> ApiResult<()> {
        let _changing = self.changes.lock().await;
        for partition in &table.partitions {
            for bucket in 0..table.bucket_count {
                let key = LogKey {
                    table: table.name.clone(),
                    partition: partition.clone(),
                    bucket,
                    incarnation: table.incarnation,
                };
                let open = self.open.write().remove(&key);
                match open {
                    Some(log) => log.destroy().await?,
                    None => self.provider.destroy_closed(&key).await?,
                }
            }
        }
        Ok(())
    }

    /// Refuses new opens and closes every open log (writer snapshots, streams closed).
    pub async fn close_all(&self) -> ApiResult<()> {
        self.closing
            .store(true, std::sync::atomic::Ordering::Release);
        let _changing = self.changes.lock().await;
        let logs: Vec<(LogKey, Arc<dyn BucketLog>)> = self.open.write().drain().collect();
        let mut first_error = None;
        for (key, log) in logs {
            if let Err(e) = log.close().await {
                tracing::warn!(log = %key, error = %e, "closing a log failed");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The keys of the open logs.
    pub fn open_keys(&self) -> Vec<LogKey> {
        self.open.read().keys().cloned().collect()
    }

    /// Closes the log of `key` if it is open (writer snapshot, stream closed), so another node
    /// can open it: the bucket moved away. Its parked readers return; requests that come after
    /// find it gone and are routed by ownership. Returns whether it was open.
    pub async fn release(&self, key: &LogKey) -> ApiResult<bool> {
        let _changing = self.changes.lock().await;
        let Some(log) = self.open.write().remove(key) else {
            return Ok(false);
        };
        log.close().await?;
        Ok(true)
    }

    /// How many logs are open.
    pub fn open_count(&self) -> usize {
        self.open.read().len()
    }
}
