//! What every Flight call shares: the node core, this node's Flight URL, the places of live
//! DoGets, and the response streams the calls return.

use std::sync::Arc;

use futures::stream::BoxStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

use crate::auth::Principal;
use crate::core::NodeCore;
use crate::error::ApiError;

/// The Flight service of a node.
pub(crate) struct Flight {
    pub(super) core: Arc<NodeCore>,
    /// This node's Flight URL, as endpoints name it.
    pub(super) url: String,
    /// Places of live DoGet streams (`flight.max_live_streams`).
    live: Arc<Semaphore>,
}

impl Flight {
    /// The service of `core`, at `url`.
    pub(super) fn new(core: Arc<NodeCore>, url: String) -> Self {
        let live = Arc::new(Semaphore::new(core.settings().flight.max_live_streams));
        Flight { core, url, live }
    }

    /// A place for one more live DoGet, or RESOURCE_EXHAUSTED.
    pub(super) fn live_place(&self) -> Result<LivePlace, Status> {
        let permit = self.live.clone().try_acquire_owned().map_err(|_| {
            Status::from(ApiError::TooManyRequests {
                message: format!(
                    "the node already serves {} live DoGet streams (setting `flight.max_live_streams`)",
                    self.core.settings().flight.max_live_streams
                ),
            })
        })?;
        self.core.metrics().flight_live_streams.inc();
        Ok(LivePlace {
            _permit: permit,
            gauge: self.core.metrics().flight_live_streams.clone(),
        })
    }

    /// Who the call's metadata says the caller is (see `access`).
    pub(super) fn principal(
        &self,
        metadata: &tonic::metadata::MetadataMap,
    ) -> Result<Principal, Status> {
        super::access::principal(self.core.authenticator(), metadata)
    }
}

/// One live DoGet's place; freed (and counted down) when the stream ends.
pub(crate) struct LivePlace {
    _permit: OwnedSemaphorePermit,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl Drop for LivePlace {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// A response stream.
pub(super) type Stream<T> = BoxStream<'static, Result<T, Status>>;

/// The stream of what a task sends on `receiver` (the task ends when the client goes away and
/// the stream is dropped).
pub(super) fn receiver_stream<T: Send + 'static>(
    receiver: tokio::sync::mpsc::Receiver<Result<T, Status>>,
) -> Stream<T> {
    Box::pin(futures::stream::unfold(
        receiver,
        |mut receiver| async move { receiver.recv().await.map(|item| (item, receiver)) },
    ))
}
