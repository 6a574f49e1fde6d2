//! Listing the object store and reading the index of every object the metadata does not know:
//! committed objects by their footer and index (a ranged read of the tail, and of the index
//! when it is longer), WAL objects whole (at most a group commit) for the epochs of their
//! WAL section.

use std::collections::HashSet;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt, stream};

use super::place::FoundObject;
use crate::error::{Result, StreamError};
use crate::format::is_object_name;
use crate::format::manifest::StreamManifest;
use crate::format::object::{self, FOOTER_LEN};
use crate::format::wal;
use crate::storage::{ObjectMeta, ObjectStorage};

/// Bytes read from the end of a committed object at first: the footer and, nearly always, the
/// whole index.
const TAIL_READ: u64 = 64 << 10;

/// Where an object was listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Under the data prefix of the data store.
    Data,
    /// Under the WAL prefix of the WAL store (`{wal_prefix}{member}/{id}`).
    Wal,
}

/// One listed object Mink's layout names.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub(crate) meta: ObjectMeta,
    pub(crate) place: Place,
}

/// What the listing holds: the objects named as Mink names them, and how many other keys.
pub(crate) struct Listing {
    pub(crate) objects: Vec<Listed>,
    pub(crate) other_keys: usize,
}

/// Lists the data prefix of `data` and the WAL prefix of `wal` (once when they are one store and
/// the prefixes nest).
pub(crate) async fn list(
    wal_store: &Arc<dyn ObjectStorage>,
    data_store: &Arc<dyn ObjectStorage>,
    wal_prefix: &str,
    data_prefix: &str,
) -> Result<Listing> {
    let storage = |e| StreamError::Storage(Arc::new(e));
    let mut listing = Listing {
        objects: Vec::new(),
        other_keys: 0,
    };
    for meta in data_store.list(data_prefix).await.map_err(storage)? {
        if meta
            .key
            .strip_prefix(data_prefix)
            .is_some_and(is_object_name)
        {
            listing.objects.push(Listed {
                meta,
                place: Place::Data,
            });
        } else {
            listing.other_keys += 1;
        }
    }
    for meta in wal_store.list(wal_prefix).await.map_err(storage)? {
        let named = meta
            .key
            .strip_prefix(wal_prefix)
            .and_then(|rest| rest.split_once('/'))
            .is_some_and(|(member, id)| !member.is_empty() && is_object_name(id));
        if named {
            listing.objects.push(Listed {
                meta,
                place: Place::Wal,
            });
        } else {
            listing.other_keys += 1;
        }
    }
    Ok(listing)
}

/// What reading one object gave.
pub(crate) enum Read {
    /// Its index.
    Found(FoundObject),
    /// It did not decode: the key and why.
    Corrupt(String, String),
    /// It was deleted after the listing.
    Vanished,
}

/// Reads the index of each of `objects` (`concurrency` at a time), in listing order.
pub(crate) async fn read_all(
    wal_store: &Arc<dyn ObjectStorage>,
    data_store: &Arc<dyn ObjectStorage>,
    objects: Vec<Listed>,
    concurrency: usize,
) -> Result<Vec<Read>> {
    stream::iter(objects)
        .map(|listed| async move {
            match listed.place {
                Place::Data => read_committed(data_store.as_ref(), listed.meta).await,
                Place::Wal => read_wal(wal_store.as_ref(), listed.meta).await,
            }
        })
        .buffered(concurrency.max(1))
        .try_collect()
        .await
}

/// A storage error, except a key gone since the listing, which is [`Read::Vanished`].
fn storage_error(e: crate::storage::StorageError) -> Result<Read> {
    if e.is_not_found() {
        Ok(Read::Vanished)
    } else {
        Err(StreamError::Storage(Arc::new(e)))
    }
}

async fn read_committed(store: &dyn ObjectStorage, meta: ObjectMeta) -> Result<Read> {
    let size = meta.size;
    let corrupt = |reason: String| Ok(Read::Corrupt(meta.key.clone(), reason));
    if size < FOOTER_LEN as u64 {
        return corrupt(format!("{size} bytes: too short for a footer"));
    }
    let tail_start = size.saturating_sub(TAIL_READ);
    let tail = match store.get_range(&meta.key, tail_start..size).await {
        Ok(tail) => tail,
        Err(e) => return storage_error(e),
    };
    let Some(footer) = tail
        .len()
        .checked_sub(FOOTER_LEN)
        .and_then(|at| tail.get(at..))
    else {
        return corrupt("short read of the footer".to_owned());
    };
    let (index_range, crc) = match object::decode_footer(footer, size)
        .and_then(|range| Ok((range, object::footer_index_crc(footer)?)))
    {
        Ok(found) => found,
        Err(e) => return corrupt(e.to_string()),
    };
    let index = if index_range.start >= tail_start {
        let at = (index_range.start - tail_start) as usize;
        tail.slice(at..at + (index_range.end - index_range.start) as usize)
    } else {
        match store.get_range(&meta.key, index_range.clone()).await {
            Ok(index) => index,
            Err(e) => return storage_error(e),
        }
    };
    match object::decode_index(&index, crc, index_range.start) {
        Ok(entries) => Ok(Read::Found(FoundObject {
            key: meta.key,
            size,
            wal: false,
            blocks: entries.into_iter().map(|e| (e, None)).collect(),
        })),
        Err(e) => corrupt(e.to_string()),
    }
}

async fn read_wal(store: &dyn ObjectStorage, meta: ObjectMeta) -> Result<Read> {
    let bytes = match store.get(&meta.key).await {
        Ok(bytes) => bytes,
        Err(e) => return storage_error(e),
    };
    match wal::decode_index_epochs(&bytes) {
        Ok(blocks) => Ok(Read::Found(FoundObject {
            key: meta.key,
            size: bytes.len() as u64,
            wal: true,
            blocks: blocks
                .into_iter()
                .map(|(e, epoch)| (e, Some(epoch)))
                .collect(),
        })),
        Err(e) => Ok(Read::Corrupt(meta.key, e.to_string())),
    }
}

/// The keys of `listing` (for telling which known records' objects are gone).
pub(crate) fn keys(listing: &Listing) -> HashSet<&str> {
    listing
        .objects
        .iter()
        .map(|l| l.meta.key.as_str())
        .collect()
}

/// Every stream manifest under `prefix` on `store` (`concurrency` read at once), and the keys of
/// those that did not decode, with why.
pub async fn read_manifests(
    store: &Arc<dyn ObjectStorage>,
    prefix: &str,
    concurrency: usize,
) -> Result<(Vec<StreamManifest>, Vec<(String, String)>)> {
    let listed = store
        .list(prefix)
        .await
        .map_err(|e| StreamError::Storage(Arc::new(e)))?;
    // Per object: its key and its manifests, or why they did not decode.
    type Read = Option<(String, std::result::Result<Vec<StreamManifest>, String>)>;
    let read: Vec<Read> = stream::iter(listed)
        .map(|meta| async move {
            match store.get(&meta.key).await {
                Ok(bytes) => Ok(Some((
                    meta.key,
                    StreamManifest::decode_any(&bytes).map_err(|e| e.to_string()),
                ))),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(StreamError::Storage(Arc::new(e))),
            }
        })
        .buffered(concurrency.max(1))
        .try_collect()
        .await?;
    let mut manifests = Vec::new();
    let mut corrupt = Vec::new();
    for (key, manifest) in read.into_iter().flatten() {
        match manifest {
            Ok(m) => manifests.extend(m),
            Err(why) => corrupt.push((key, why)),
        }
    }
    Ok((manifests, corrupt))
}
