//! In-process watches for the backends that have no server to watch (memory, redb): writers publish
//! their events here, in revision order, while they still hold the write lock.

use futures::StreamExt;
use tokio::sync::broadcast;

use super::{WatchEvent, WatchStream};
use crate::error::MetaError;

/// Events kept for slow watchers before they are told they lagged.
const CAPACITY: usize = 16 * 1024;

/// Fan-out of committed changes to in-process watchers.
#[derive(Debug)]
pub(crate) struct WatchHub {
    tx: broadcast::Sender<WatchEvent>,
}

impl WatchHub {
    pub(crate) fn new() -> Self {
        let (tx, _) = broadcast::channel(CAPACITY);
        WatchHub { tx }
    }

    /// Publishes events; call while holding the backend's write lock so order is revision order.
    pub(crate) fn publish(&self, events: impl IntoIterator<Item = WatchEvent>) {
        if self.tx.receiver_count() == 0 {
            return;
        }
        for event in events {
            // An error only means no receiver is left.
            let _ = self.tx.send(event);
        }
    }

    /// A stream of the events under `prefix` published from now on.
    pub(crate) fn subscribe(&self, prefix: &str) -> WatchStream {
        let rx = self.tx.subscribe();
        let prefix = prefix.to_owned();
        futures::stream::unfold(Some(rx), move |rx| {
            let prefix = prefix.clone();
            async move {
                let mut rx = rx?;
                loop {
                    match rx.recv().await {
                        Ok(event) if event.key().starts_with(&prefix) => {
                            return Some((Ok(event), Some(rx)));
                        }
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Closed) => return None,
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            return Some((Err(MetaError::WatchLagged { prefix, missed }), None));
                        }
                    }
                }
            }
        })
        .boxed()
    }
}
