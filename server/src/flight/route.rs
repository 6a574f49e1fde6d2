//! Which node serves a bucket, as Flight says it: this node opens the bucket's log; for a bucket
//! another node owns the answer is UNAVAILABLE with that node's Flight URL in `mink-location`
//! (gRPC has no redirect), and FlightInfo endpoints name the owner's URL.

use std::sync::Arc;

use tonic::Status;

use super::address::BucketAddress;
use super::state::Flight;
use super::status::{LOCATION, set, status};
use crate::bucket_log::{BucketLog, LogKey};
use crate::catalog::TableInfo;
use crate::cluster::Route;
use crate::error::ApiError;

impl Flight {
    /// The log of `address`, opened here, or the status that says where it is served.
    pub(crate) async fn open(
        &self,
        info: &Arc<TableInfo>,
        address: &BucketAddress,
    ) -> Result<Arc<dyn BucketLog>, Status> {
        let opened = self
            .core
            .bucket_log(info, address.bucket, &address.partition, None)
            .await;
        match opened {
            Ok(log) => Ok(log),
            Err(error @ ApiError::Moved { .. }) => {
                let key = self
                    .core
                    .log_key(info, address.bucket, &address.partition)?;
                let mut s = match self.location(&key) {
                    Some(url) => {
                        let mut s = Status::unavailable(format!(
                            "bucket {key} is served by {url}; send the request there (GetFlightInfo names each bucket's node)"
                        ));
                        set(&mut s, LOCATION, &url);
                        s
                    }
                    None => Status::unavailable(format!(
                        "bucket {key} is served by another node ({error}), which has no Flight address"
                    )),
                };
                set(&mut s, super::status::ERROR_KIND, "moved");
                Err(s)
            }
            Err(error) => Err(status(&error)),
        }
    }

    /// The Flight URL of the node serving `key`: this one's, the owner's (if it advertises
    /// one), or `None` while nobody serves it.
    pub(crate) fn location(&self, key: &LogKey) -> Option<String> {
        let Some(view) = self.core.ownership() else {
            return Some(self.url.clone());
        };
        match view.route(key) {
            Route::Local => Some(self.url.clone()),
            Route::Remote { node, .. } => view
                .live_nodes()
                .into_iter()
                .find(|n| n.node_id == node)
                .and_then(|n| n.flight_url),
            Route::Unavailable { .. } => None,
        }
    }

    /// Whether this node serves `key`.
    pub(crate) fn is_local(&self, key: &LogKey) -> bool {
        self.core
            .ownership()
            .is_none_or(|view| view.route(key) == Route::Local)
    }
}
