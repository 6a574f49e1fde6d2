//! What the node keeps in memory per stream it serves (docs/durable-streams.md, "A stream is a
//! table" and "TTL and expiry"): the tail the append path judges (closed, newest `Stream-Seq`,
//! the batch that closed it), read back from the log's last batch whenever the log was opened
//! anew; the time of the last read or append; the lock appends pass; and the writer ids of
//! producer names.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use mink_codec::BatchView;
use parking_lot::Mutex;

use super::config::Mode;
use super::messages::Stored;
use crate::bucket_log::BucketLog;
use crate::core::NodeCore;
use crate::error::{ApiError, ApiResult};

/// The end of a stream's log as the append path needs it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tail {
    /// The log this was read from (its address): a log opened again is read again.
    log: usize,
    /// Whether the last row is the close marker.
    pub(crate) closed: bool,
    /// The newest `Stream-Seq` accepted.
    pub(crate) last_seq: Option<String>,
    /// The writer field and sequence of the batch that closed the stream, if a writer did.
    pub(crate) closed_by: Option<(i64, i32)>,
    /// The commit timestamp of the last batch (ms), 0 for an empty log.
    pub(crate) last_commit_ms: i64,
}

/// One stream's entry.
pub(crate) struct Stream {
    /// The incarnation of the table it belongs to.
    incarnation: u64,
    /// Appends hold it from their checks until the tablet placed them (until they are durable
    /// when they change the tail); reads take it briefly to learn the tail.
    pub(crate) tail: tokio::sync::Mutex<Option<Tail>>,
    /// The last read or append (ms); 0 until the tail was first read.
    last_access_ms: AtomicU64,
    /// Producers seen appending here since the node started: writer id -> (epoch, highest
    /// sequence accepted). The tablet's window judges every append; this answers a retry of an
    /// accepted request (or a stale epoch) before any other check, as the protocol orders them.
    pub(crate) producers: Mutex<HashMap<u64, (i16, i32)>>,
    /// How many producer names the stream has in the metadata store, once counted; new names
    /// are claimed under it, one at a time.
    names: tokio::sync::Mutex<Option<usize>>,
}

impl Stream {
    /// The tail of `log`, read from its last batch if this entry has not seen this log yet.
    pub(crate) async fn tail_of<'a>(
        &'a self,
        core: &NodeCore,
        log: &Arc<dyn BucketLog>,
        mode: Mode,
        guard: &'a mut Option<Tail>,
    ) -> ApiResult<&'a mut Tail> {
        let id = Arc::as_ptr(log).cast::<()>() as usize;
        if guard.as_ref().is_none_or(|t| t.log != id) {
            let mut tail = read_tail(core, log.as_ref(), mode).await?;
            tail.log = id;
            let seen = u64::try_from(tail.last_commit_ms).unwrap_or(0);
            self.last_access_ms.fetch_max(seen, Ordering::Relaxed);
            *guard = Some(tail);
        }
        Ok(guard.get_or_insert_with(Tail::default))
    }

    /// Marks a read or an append now.
    pub(crate) fn touch(&self, now_ms: u64) {
        self.last_access_ms.fetch_max(now_ms, Ordering::Relaxed);
    }

    /// The last read or append (ms), at least `created_ms`.
    pub(crate) fn last_access(&self, created_ms: u64) -> u64 {
        self.last_access_ms.load(Ordering::Relaxed).max(created_ms)
    }
}

/// Reads the tail from the log's last batch.
async fn read_tail(core: &NodeCore, log: &dyn BucketLog, mode: Mode) -> ApiResult<Tail> {
    let offsets = log.offsets();
    if offsets.high_watermark <= offsets.log_start {
        return Ok(Tail::default());
    }
    let chunk = core
        .read(log, offsets.high_watermark - 1, None, None, 1)
        .await?;
    let Some(batch) = chunk.batches.last() else {
        return Ok(Tail::default());
    };
    let view = BatchView::new(batch.clone()).map_err(|e| ApiError::Internal {
        message: format!("a stream's last batch does not parse: {e}"),
    })?;
    let Some(stored) = Stored::decode(batch, mode)? else {
        return Ok(Tail {
            last_commit_ms: view.commit_timestamp(),
            ..Tail::default()
        });
    };
    let closed = stored.closes();
    Ok(Tail {
        log: 0,
        closed,
        last_seq: stored.last_seq(),
        closed_by: (closed && view.writer_id() >= 0)
            .then(|| (view.writer_id(), view.batch_sequence())),
        last_commit_ms: view.commit_timestamp(),
    })
}

/// Every stream entry and producer name this node holds.
pub(crate) struct Streams {
    max: usize,
    entries: Mutex<HashMap<String, Arc<Stream>>>,
    /// `(table key segment, producer name)` -> writer id.
    producers: Mutex<HashMap<(String, String), u64>>,
}

impl Streams {
    pub(crate) fn new(max: usize) -> Arc<Streams> {
        Arc::new(Streams {
            max,
            entries: Mutex::new(HashMap::new()),
            producers: Mutex::new(HashMap::new()),
        })
    }

    /// The entry of table `table`'s incarnation `incarnation`.
    pub(crate) fn get(&self, table: &str, incarnation: u64) -> Arc<Stream> {
        let mut entries = self.entries.lock();
        if let Some(s) = entries.get(table)
            && s.incarnation == incarnation
        {
            return s.clone();
        }
        if entries.len() >= self.max {
            // Forget the ones no request holds; they are read back from their logs on use.
            entries.retain(|_, s| Arc::strong_count(s) > 1);
        }
        let stream = Arc::new(Stream {
            incarnation,
            tail: tokio::sync::Mutex::new(None),
            last_access_ms: AtomicU64::new(0),
            producers: Mutex::new(HashMap::new()),
            names: tokio::sync::Mutex::new(None),
        });
        entries.insert(table.to_owned(), stream.clone());
        stream
    }

    /// Forgets a deleted stream.
    pub(crate) fn forget(&self, table: &str) {
        self.entries.lock().remove(table);
        self.producers
            .lock()
            .retain(|(t, _), _| t.split_once('@').map_or(t.as_str(), |(name, _)| name) != table);
    }

    /// The writer id of producer `name` of `stream`, in the table whose key segment is
    /// `segment`: from memory, the metadata store, or a new one from the allocator claimed
    /// there, within `ds.max_producers_per_stream` (429 `too_many_writers` past it).
    pub(crate) async fn producer(
        &self,
        core: &NodeCore,
        stream: &Stream,
        segment: &str,
        name: &str,
    ) -> ApiResult<u64> {
        let key = (segment.to_owned(), name.to_owned());
        if let Some(id) = self.producers.lock().get(&key) {
            return Ok(*id);
        }
        let metadata = core.metadata();
        let id = match metadata.producer_name(segment, name).await? {
            Some(id) => id,
            None => {
                let limit = core.settings().ds.max_producers_per_stream;
                let mut names = stream.names.lock().await;
                let count = match *names {
                    Some(count) => count,
                    None => metadata.count_producer_names(segment, limit).await?,
                };
                if count >= limit {
                    *names = Some(count);
                    return Err(ApiError::TooManyWriters {
                        limit: u64::try_from(limit).unwrap_or(u64::MAX),
                    });
                }
                let fresh = core.allocate_writer_id().await?;
                let id = metadata.claim_producer_name(segment, name, fresh).await?;
                // Another node's claim may have won: then no name was added, and counting one
                // more only brings the limit nearer.
                *names = Some(count + 1);
                id
            }
        };
        let mut producers = self.producers.lock();
        if producers.len() >= self.max {
            producers.clear();
        }
        producers.insert(key, id);
        Ok(id)
    }
}
