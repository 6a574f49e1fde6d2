//! The Durable Streams protocol under `/ds` (docs/durable-streams.md): a stream's URL is
//! `/ds/v1/stream/{name}`; PUT creates it, POST appends (and closes), GET reads (catch-up,
//! `live=long-poll`, `live=sse`), HEAD answers its metadata, DELETE deletes it. Each stream is a
//! one-bucket table of the catalog (`names.rs`, `config.rs`), one row per message
//! (`messages.rs`), its offsets rendered to sort as strings (`offsets.rs`); what the node keeps
//! per stream is in `streams.rs`, a stream found and opened for one request in `opened.rs`.
//! This file routes each method of a stream's URL (with `request.rs`, what every handler shares);
//! `write.rs` holds PUT, POST and DELETE, `read.rs` GET and HEAD, `sse.rs` the event stream,
//! `answer.rs` the protocol's headers and refusals.

pub(crate) mod answer;
mod config;
mod messages;
pub(crate) mod names;
mod offsets;
mod opened;
mod read;
mod request;
mod sse;
mod streams;
mod write;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, OriginalUri, Path, RawQuery, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::any;

use self::request::Request;
use self::streams::Streams;
use crate::budget::Budget;
use crate::core::NodeCore;
use crate::error::ApiError;
use crate::http::parked::ParkedReads;
use crate::http::read::Parking;
use crate::http::redirect::RedirectedBy;

/// The routes under `/ds` (paths relative to it): one path, every method.
pub(crate) fn routes(core: &NodeCore) -> Router<Arc<NodeCore>> {
    let streams = Streams::new(core.settings().ds.max_streams_cached);
    Router::new()
        .route("/v1/stream/{*name}", any(dispatch))
        .layer(axum::Extension(streams))
        .layer(axum::middleware::map_response(answer::security_headers))
}

/// A stream URL's request, by method.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn dispatch(
    State(core): State<Arc<NodeCore>>,
    Extension(streams): Extension<Arc<Streams>>,
    Extension(budget): Extension<Arc<Budget>>,
    Extension(parked): Extension<Arc<ParkedReads>>,
    redirected: Option<Extension<RedirectedBy>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    OriginalUri(uri): OriginalUri,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let by = redirected
        .as_ref()
        .map(|Extension(RedirectedBy(n))| n.as_str());
    let request = Request {
        core: &core,
        streams: &streams,
        name: &name,
        headers: &headers,
        redirected_by: by,
    };
    let answer = match method {
        Method::PUT => request.create(&budget, body, &uri).await,
        Method::POST => request.append(&budget, body).await,
        Method::DELETE => request.delete().await,
        Method::GET | Method::HEAD => {
            let parking = Parking {
                reads: parked,
                client: peer.map(|Extension(ConnectInfo(addr))| addr.ip()),
            };
            read::serve(&request, method == Method::HEAD, query.as_deref(), &parking).await
        }
        other => Err(ApiError::bad_request(format!(
            "{other} is not a method of a stream (PUT, POST, GET, HEAD, DELETE)"
        ))
        .into()),
    };
    answer.unwrap_or_else(IntoResponse::into_response)
}
