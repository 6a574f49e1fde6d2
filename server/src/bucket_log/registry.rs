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

    /// Refuses new opens and closes every open log (writer snapshots, streams closed),
    /// [`CLOSE_PARALLELISM`] at a time.
    pub async fn close_all(&self) -> ApiResult<()> {
        self.closing
            .store(true, std::sync::atomic::Ordering::Release);
        let _changing = self.changes.lock().await;
        let logs: Vec<(LogKey, Arc<dyn BucketLog>)> = self.open.write().drain().collect();
        close_logs(logs).await.1
    }

    /// The keys of the open logs.
    pub fn open_keys(&self) -> Vec<LogKey> {
        self.open.read().keys().cloned().collect()
    }

    /// Closes the logs of `keys` that are open (writer snapshot, stream closed),
    /// [`CLOSE_PARALLELISM`] at a time, so another node can open them: their buckets moved
    /// away. Their parked readers return; requests that come after find them gone and are
    /// routed by ownership. Returns the keys released, and the first error.
    pub async fn release(&self, keys: &[LogKey]) -> (Vec<LogKey>, ApiResult<()>) {
        let _changing = self.changes.lock().await;
        let logs: Vec<(LogKey, Arc<dyn BucketLog>)> = {
            let mut open = self.open.write();
            keys.iter()
                .filter_map(|key| Some((key.clone(), open.remove(key)?)))
                .collect()
        };
        close_logs(logs).await
    }

    /// How many logs are open.
    pub fn open_count(&self) -> usize {
        self.open.read().len()
    }
}

/// Logs closed at once by a release or the shutdown: each close waits for its appends in flight
/// and writes a snapshot, so thousands of them one after another would outlast a grace period.
const CLOSE_PARALLELISM: usize = 64;

/// Closes `logs`, [`CLOSE_PARALLELISM`] at a time; returns the keys closed and the first error
/// (every log is tried).
async fn close_logs(logs: Vec<(LogKey, Arc<dyn BucketLog>)>) -> (Vec<LogKey>, ApiResult<()>) {
    use futures::StreamExt;
    // Boxed before they go into the stream: a stream over the logs themselves defeats the
    // compiler's proof that the task running it is `Send`.
    type Close = std::pin::Pin<
        Box<dyn std::future::Future<Output = (LogKey, ApiResult<()>)> + Send + 'static>,
    >;
    let closes: Vec<Close> = logs
        .into_iter()
        .map(|(key, log)| -> Close {
            Box::pin(async move {
                let closed = log.close().await;
                (key, closed)
            })
        })
        .collect();
    let outcomes: Vec<(LogKey, ApiResult<()>)> = futures::stream::iter(closes)
        .buffer_unordered(CLOSE_PARALLELISM)
        .collect()
        .await;
    let mut closed = Vec::with_capacity(outcomes.len());
    let mut first_error = None;
    for (key, outcome) in outcomes {
        match outcome {
            Ok(()) => closed.push(key),
            Err(e) => {
                tracing::warn!(log = %key, error = %e, "closing a log failed");
                first_error.get_or_insert(e);
            }
        }
    }
    (closed, first_error.map_or(Ok(()), Err))
}
