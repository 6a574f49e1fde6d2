//! Reading a node's WAL back at recovery.
//!
//! The metadata's WAL registry holds the node's reserved id ranges that are not yet compacted.
//! Ids are used in order, one per PUT, and at most [`MAX_INFLIGHT_PUTS`] PUTs are in flight at
//! once; a PUT that fails for good stops the writer. So no more than that many objects can be
//! missing among the ids a writer used (uploads in flight when it stopped, or the failed one),
//! and more than that many missing in a row means the WAL has ended. A missing object before the
//! end is a gap: the records after it were acknowledged only for the streams with nothing in it
//! (a stream's acknowledgements wait for its own earlier records), so recovery keeps each stream
//! up to its own first missing record (`engine/recovery/`) and reads on past the gap.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use mink_runtime::{Backoff, Retryable};

use super::settings::MAX_INFLIGHT_PUTS;
use super::writer::WalWriter;
use crate::format::wal::{self, WalFormatError, WalRecord, WalSpan};
use crate::storage::{ObjectStorage, StorageError};

/// GETs in flight while replaying.
const REPLAY_CONCURRENCY: usize = 32;
/// Delays between attempts of a GET that fails with a retryable error (eight attempts).
const READ_BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(20), Duration::from_secs(2)).with_max_retries(7);

/// One WAL object read back.
#[derive(Debug, Clone)]
pub struct ReplayedObject {
    /// Its id.
    pub id: u64,
    /// Its key in the WAL store.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its records: by stream, then offset.
    pub records: Vec<WalRecord>,
    /// The runs of its records by stream and epoch, where their blocks lie in the object.
    pub spans: Vec<WalSpan>,
}

/// Why the WAL could not be read back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// A WAL object could not be read.
    #[error("reading WAL object {key} failed: {source}")]
    Storage {
        /// The object's key.
        key: String,
        /// The storage error.
        #[source]
        source: StorageError,
    },
    /// A WAL object is corrupt: refusing to guess what it held.
    #[error("WAL object {key} is corrupt: {source}")]
    Corrupt {
        /// The object's key.
        key: String,
        /// What is wrong with it.
        #[source]
        source: WalFormatError,
    },
}

/// What a replay found.
#[derive(Debug, Default)]
pub struct Replay {
    /// The objects, in id order.
    pub objects: Vec<ReplayedObject>,
    /// The first id of the missing run that ended the WAL, if the registry held any id past the
    /// last object read.
    pub ended_at: Option<u64>,
    /// Ids missing before the last object read: uploads that never landed.
    pub gaps: Vec<u64>,
}

/// Reads every WAL object of `ranges` (in order) under `prefix`, past missing ones, until more
/// than [`MAX_INFLIGHT_PUTS`] are missing in a row or the ranges end.
pub async fn replay(
    storage: &Arc<dyn ObjectStorage>,
    prefix: &str,
    ranges: &[Range<u64>],
) -> Result<Replay, ReplayError> {
    // Owned ids, storage and prefix: the stream borrows nothing, so a spawned recovery's
    // future is `Send` (borrowing closures inside it defeat the compiler's proof).
    let ids: Vec<u64> = ranges.iter().flat_map(|r| r.clone()).collect();
    let storage = Arc::clone(storage);
    let prefix = prefix.to_owned();
    let mut reads = futures::stream::iter(ids)
        .map(move |id| {
            let storage = Arc::clone(&storage);
            let key = WalWriter::object_key(&prefix, id);
            async move {
                let object = read(&storage, &key).await;
                (id, key, object)
            }
        })
        .buffered(REPLAY_CONCURRENCY);
    let mut replay = Replay::default();
    // The ids missing since the last object read.
    let mut missing = Vec::new();
    while let Some((id, key, outcome)) = reads.next().await {
        let Some(object) = outcome? else {
            missing.push(id);
            if missing.len() > MAX_INFLIGHT_PUTS {
                break;
            }
            continue;
        };
        let (records, spans) = match wal::decode_with_spans(&object) {
            Ok(decoded) => decoded,
            Err(source) => return Err(ReplayError::Corrupt { key, source }),
        };
        replay.gaps.append(&mut missing);
        replay.objects.push(ReplayedObject {
            id,
            key,
            size: object.len() as u64,
            records,
            spans,
        });
    }
    replay.ended_at = missing.first().copied();
    if !replay.gaps.is_empty() {
        tracing::warn!(
            gaps = ?replay.gaps,
            "WAL objects missing before the last one: uploads that never landed; each stream is \
             kept up to its first missing record"
        );
    }
    Ok(replay)
}

/// The object, or `None` if it does not exist; retryable errors are retried.
async fn read(
    storage: &Arc<dyn ObjectStorage>,
    key: &str,
) -> Result<Option<bytes::Bytes>, ReplayError> {
    let get = || async {
        match storage.get(key).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(StorageError::NotFound { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    };
    get.retry(READ_BACKOFF.builder())
        .when(StorageError::is_retryable)
        .notify(|error, delay| {
            tracing::warn!(%key, %error, ?delay, "reading WAL object failed; retrying");
        })
        .await
        .map_err(|source| ReplayError::Storage {
            key: key.to_owned(),
            source,
        })
}
