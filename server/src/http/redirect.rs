//! 307s to a bucket's owner (docs/cluster.md, "Routing").
//!
//! A handler that finds the bucket owned by another live node answers [`ApiError::Moved`] with
//! the owner's base URL; the gate (`gate.rs`), outside the token check so it sees the query as the
//! client sent it (`access_token` included: a 307 keeps it), turns that into the full URL of the
//! same path and query, plus `redirected_by={node_id}`, and adds `Cache-Control: no-store`. A
//! `redirected_by` the client brings is taken out of the query before anything parses it and
//! handed to the routing as a [`RedirectedBy`] extension, so a node never sends a request back
//! to the node that sent it (`NodeCore::bucket_log`).
//!
//! [`ApiError::Moved`]: crate::error::ApiError::Moved

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use super::query::take_param;
use crate::core::NodeCore;
use crate::error::ApiError;

/// The query parameter a redirect adds, naming the node that redirected.
pub(crate) const REDIRECTED_BY: &str = "redirected_by";

/// The node that redirected a request here, from its `redirected_by` parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RedirectedBy(pub(crate) String);

/// Takes `redirected_by` out of the query of `request` into a [`RedirectedBy`] extension;
/// returns the URI the client asked for without it (what a redirect keeps), or the error of a
/// request that gives it twice or not as UTF-8.
pub(super) fn take_redirected_by(request: &mut Request) -> Result<Uri, ApiError> {
    let mut uri = request.uri().clone();
    match take_param(&mut uri, REDIRECTED_BY) {
        Ok(Some(by)) => {
            *request.uri_mut() = uri.clone();
            request.extensions_mut().insert(RedirectedBy(by));
            Ok(uri)
        }
        Ok(None) => Ok(uri),
        Err(_) => Err(ApiError::bad_request(format!(
            "give `{REDIRECTED_BY}` once, as UTF-8"
        ))),
    }
}

/// `response` as sent: a 307 to an owner's base URL becomes the full URL of the same path and
/// `uri`'s query plus `redirected_by`, not to be cached; any other answer is left as it is.
pub(super) fn to_owner(core: &NodeCore, uri: &Uri, mut response: Response) -> Response {
    if response.status() != StatusCode::TEMPORARY_REDIRECT {
        return response;
    }
    let Some(base) = response
        .headers()
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
    else {
        return response;
    };
    let me = &core.settings().node_id;
    let query = match uri.query() {
        Some(q) if !q.is_empty() => format!("{q}&{REDIRECTED_BY}={me}"),
        _ => format!("{REDIRECTED_BY}={me}"),
    };
    let location = format!("{}{}?{query}", base.trim_end_matches('/'), uri.path());
    match HeaderValue::from_str(&location) {
        Ok(value) => {
            let headers = response.headers_mut();
            headers.insert(header::LOCATION, value);
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Err(_) => ApiError::Internal {
            message: format!("the owner's address makes no valid URL: {location:?}"),
        }
        .into_response(),
    }
}
