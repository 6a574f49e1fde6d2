//! What every handler of one request to a stream's URL shares.

use std::sync::Arc;

use axum::http::HeaderMap;

use super::answer::Refusal;
use super::opened::{Opened, open};
use super::streams::Streams;
use crate::core::NodeCore;

/// What every handler of one request shares.
pub(crate) struct Request<'a> {
    pub(crate) core: &'a Arc<NodeCore>,
    pub(crate) streams: &'a Arc<Streams>,
    pub(crate) name: &'a str,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) redirected_by: Option<&'a str>,
}

impl Request<'_> {
    pub(crate) async fn open(&self) -> Result<Opened, Refusal> {
        open(self.core, self.streams, self.name, self.redirected_by).await
    }
}
