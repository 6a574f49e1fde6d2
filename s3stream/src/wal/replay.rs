//! Reading a node's WAL back at recovery.
//!
//! The metadata's WAL registry holds the node's reserved id ranges that are not yet compacted.
//! Ids are used in submission order and acknowledgements are released in that order, so the
//! first id whose object is missing ends the WAL: a PUT that never landed was never acknowledged,
//! and neither was anything submitted after it. Objects past that point (uploads that landed
//! after an earlier one failed) were never acknowledged either and are ignored.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use mink_runtime::{Backoff, Retryable};

use super::writer::WalWriter;
use crate::format::wal::{self, WalFormatError, WalRecord};
use crate::storage::{ObjectStorage, StorageError};

/// GETs in flight while replaying.
const REPLAY_CONCURRENCY: usize = 8;
/// Delays between attempts of a GET that fails with a retryable error (eight attempts).
const READ_BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(20), Duration::from_secs(2)).with_max_retries(7);

/// One WAL object read back.
#[derive(Debug, Clone)]
pub struct ReplayedObject {
    /// Its id.
    pub id: u64,
    /// Its records: by stream, then offset.
    pub records: Vec<WalRecord>,
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
    /// The first id that ended the WAL (missing), if the registry held any id past the last
    /// object read.
    pub ended_at: Option<u64>,
}

/// Reads every WAL object of `ranges` (in order) under `prefix` until the first missing one.
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
    while let Some((id, key, outcome)) = reads.next().await {
        let Some(object) = outcome? else {
            replay.ended_at = Some(id);
            break;
        };
        let records =
            wal::decode(&object).map_err(|source| ReplayError::Corrupt { key, source })?;
        replay.objects.push(ReplayedObject { id, records });
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
