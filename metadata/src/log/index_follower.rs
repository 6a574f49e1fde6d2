//! The index follower: fills the node-local [`ObjectIndex`] from the object records and keeps it
//! current with a watch of `mink/objects/` (other nodes' commits on etcd). Commits made through this
//! [`Metadata`](super::Metadata) update the index themselves.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use mink_runtime::Backoff;
use tokio::task::JoinHandle;

use super::read::{SCAN_PAGE, decode_all};
use crate::error::{MetaError, Result};
use crate::index::ObjectIndex;
use crate::keys;
use crate::kv::{MetaKv, MetaKvExt, WatchEvent, WatchStream};
use crate::records::ObjectRecord;
use crate::value::decode;

/// Reads every object record into `index` and, if `watch` is on and the backend can watch,
/// follows later object changes in a background task (the returned handle). The watch starts
/// before the read, so no commit falls between the two.
pub(super) async fn start(
    kv: &Arc<dyn MetaKv>,
    index: &Arc<ObjectIndex>,
    watch: bool,
) -> Result<Option<JoinHandle<()>>> {
    let watch = if watch {
        match kv.watch_prefix(keys::OBJECTS).await {
            Ok(stream) => Some(stream),
            Err(MetaError::Unsupported { .. }) => None,
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    rebuild_index(kv.as_ref(), index).await?;
    Ok(watch.map(|stream| {
        tokio::spawn(follow_objects(
            Arc::downgrade(kv),
            Arc::clone(index),
            stream,
        ))
    }))
}

/// Replaces the content of `index` with every object record in the KV.
pub(super) async fn rebuild_index(kv: &dyn MetaKv, index: &ObjectIndex) -> Result<()> {
    let objects = decode_all::<ObjectRecord>(&kv.scan_all(keys::OBJECTS, SCAN_PAGE).await?)?;
    index.rebuild(objects);
    Ok(())
}

/// Delays between attempts to watch the objects again after a lost watch.
const REWATCH_BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));

/// Applies object changes from `stream` to `index`; on a lost watch, watches again and re-reads.
/// Holds the KV weakly, so dropping the last `Metadata` and KV handle closes the store.
async fn follow_objects(kv: Weak<dyn MetaKv>, index: Arc<ObjectIndex>, mut stream: WatchStream) {
    let mut delays = REWATCH_BACKOFF.delays();
    loop {
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Put(kv)) => match decode::<ObjectRecord>(&kv.key, &kv.value) {
                    Ok(object) => index.insert(object),
                    Err(e) => tracing::warn!(error = %e, "ignoring an undecodable object record"),
                },
                Ok(WatchEvent::Delete { key, .. }) => {
                    if let Some(id) = keys::object_id(&key) {
                        index.remove(id);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "object watch ended; watching again");
                    break;
                }
            }
        }
        loop {
            let delay = delays.next().unwrap_or(Duration::from_secs(5));
            tokio::time::sleep(delay).await;
            let Some(kv) = kv.upgrade() else { return };
            let Ok(next) = kv.watch_prefix(keys::OBJECTS).await else {
                continue;
            };
            if let Err(e) = rebuild_index(kv.as_ref(), &index).await {
                tracing::warn!(error = %e, "cannot re-read objects for the index; retrying");
                continue;
            }
            stream = next;
            delays = REWATCH_BACKOFF.delays();
            break;
        }
    }
}
