//! The HTTP front end over the node core: the API versioned under `/v1`, JSON for control, batch
//! formats for data (see [`crate::format`]). The routes:
//!
//! | Method | Path | What |
//! |---|---|---|
//! | GET | `/healthz` | liveness: 200 while serving; 503 while shutting down or once the WAL failed for good (`{"status":"failing","reason"}`) |
//! | POST | `/v1/admin/snapshot` | write a metadata snapshot to the object store now |
//! | GET | `/readyz` | readiness: 200 while the metadata and object stores answer |
//! | GET | `/metrics` | Prometheus text |
//! | GET | `/dashboard` | the built-in web dashboard (`dashboard.html`) |
//! | GET | `/v1/openapi.json` | the OpenAPI 3.1 document of all of this (`openapi.rs`) |
//!
//! Every route is added in `routes.rs`, which also lists it for the OpenAPI completeness test;
//! `operations.rs` holds the health, readiness and metrics handlers, `answers.rs` the described
//! shapes of the JSON answers and of the error body.
//! | POST | `/v1/tables` | create a table: `{"name", "schema": {"fields": [...]}, "buckets", "partitions", "retention"}` |
//! | GET | `/v1/tables` | list tables |
//! | GET, DELETE | `/v1/tables/{table}` | get / drop a table (drop destroys its logs and writer snapshots) |
//! | PATCH | `/v1/tables/{table}` | `{"retention": {"age_ms", "bytes"} or null}`: set the table's retention |
//! | POST | `/v1/tables/{table}/schemas` | add a schema version: `{"schema": {...}}` -> `{"schema_id"}` |
//! | POST | `/v1/writers` | init_writer: `{"writer_id"}` from the shared allocator |
//! | GET | `/v1/cluster` | the live nodes and the bucket assignments, as this node sees them |
//! | POST | `/v1/tables/{table}/buckets/{bucket}/records` | append |
//! | GET | `/v1/tables/{table}/buckets/{bucket}/records` | read, long-poll, SSE |
//! | GET | `/v1/tables/{table}/buckets/{bucket}/offsets` | log start and high watermark; `?timestamp=ms` for an offset |
//! | POST | `/v1/tables/{table}/buckets/{bucket}/trim` | `{"offset"}`: move the log start forward |
//! | POST | `/v1/tables/{table}/buckets/{bucket}/transfer` | `{"to": node}`: move the bucket to a live node (202) |
//!
//! | PUT, POST, GET, HEAD, DELETE | `/ds/v1/stream/{name}` | the Durable Streams protocol (`ds/`, docs/durable-streams.md; `[ds] enabled`) |
//!
//! Bucket routes take `?partition=NAME` (default `default`).
//!
//! Files: `listener` (the accept loop, connection limits, TLS handshakes), `connection` (one
//! connection's header, idle and write timeouts and its service), `tls` (the rustls
//! configuration of `[http.tls]`),
//! `body` (an append's body read within its format's limit), `hosts` (the `Host` allowlist),
//! `extract` (query, body and bucket of a request), `headers` (the `Mink-*` headers),
//! `records` (the bucket routes), `read` (range reads and long-polls), `sse` (server-sent
//! events), `parked` (the limits on parked long-polls and open SSE streams), `pieces` (a body of pieces
//! sent as they are), `tables` (tables, schemas, writers), `error` (status codes and JSON error bodies),
//! `rate_limit` (the token bucket in front of `/v1`), `cluster` (`GET /v1/cluster`), `redirect`
//! (307s to a bucket's owner), `query` (taking a parameter out of the query), `cors` (browsers
//! on other origins: the CORS layer, and writes refused from origins that may not write). The middleware is layered in one place,
//! [`router`]: the `Host` allowlist, the budget and body limits (`body`: appends read their
//! body with their format's limit, every other route within `http.body.max_json_bytes`), the
//! rate limit, the request log (tower-http's trace); outside it, response compression of JSON
//! and NDJSON (gzip, zstd, when the client asks) and CORS.

mod admin;
mod answers;
mod auth;
mod body;
mod cluster;
mod connection;
mod cors;
mod dashboard;
pub(crate) mod ds;
mod error;
mod extract;
mod gate;
mod headers;
mod hosts;
mod listener;
mod openapi;
mod operations;
mod parked;
mod pieces;
mod query;
mod rate_limit;
mod read;
mod records;
mod redirect;
mod routes;
mod shared_renders;
mod sse;
mod sse_frames;
mod tables;
pub(crate) mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;

use axum::{Extension, Router};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::{Predicate, SizeAbove};
use tower_http::trace::TraceLayer;
use tracing::Span;

pub use headers::{
    HIGH_WATERMARK, LOG_START, NEXT_OFFSET, SCHEMA_ID, SEQUENCE, UP_TO_DATE, WRITER_ID,
};
pub(crate) use listener::{ConnectionGauges, bind};

use self::gate::GateLayer;

use crate::core::NodeCore;
use crate::error::ApiError;

/// A running HTTP server (the API, or the Flight front end).
pub(crate) struct HttpServer {
    /// The address it listens on.
    pub(crate) addr: SocketAddr,
    /// The server; it ends once the core's shutdown signal fired and requests in flight finished.
    pub(crate) task: JoinHandle<std::io::Result<()>>,
}

/// Reads the TLS files of the settings (if any), binds the address in the settings (`listen`)
/// and serves the API until the core shuts down.
pub(crate) async fn start(core: Arc<NodeCore>) -> std::io::Result<HttpServer> {
    let settings = core.settings();
    error::set_retry_after(settings.http.retry_after_secs);
    let gauges = ConnectionGauges {
        open: core.metrics().connections.clone(),
        refused: core.metrics().connections_refused.clone(),
    };
    let app = router(core.clone());
    serve_on(core.clone(), settings.listen, app, gauges).await
}

/// Binds `addr` and serves `app` there until the core shuts down (see [`serve_listener`]).
pub(crate) async fn serve_on(
    core: Arc<NodeCore>,
    addr: SocketAddr,
    app: Router,
    gauges: ConnectionGauges,
) -> std::io::Result<HttpServer> {
    let listener = bind(addr)?;
    serve_listener(core, listener, app, gauges)
}

/// Serves `app` on `listener` until the core shuts down, with `[http]`'s connection limits and
/// timeouts and `[http.tls]`'s certificate (read first), counting connections in `gauges`: the
/// HTTP API and the Flight front end are served alike.
pub(crate) fn serve_listener(
    core: Arc<NodeCore>,
    listener: TcpListener,
    app: Router,
    gauges: ConnectionGauges,
) -> std::io::Result<HttpServer> {
    let tls = tls::acceptor(&core.settings().http.tls)?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        listener::serve(
            listener,
            app,
            tls,
            &core.settings().http,
            gauges,
            core.shutdown_signal().clone(),
        )
        .await
    });
    Ok(HttpServer { addr, task })
}

/// The router of the whole API, with its middleware.
pub(crate) fn router(core: Arc<NodeCore>) -> Router {
    let http = &core.settings().http;
    let budget = core.budget().clone();
    // One rate limit and one set of parked-read places for every route family.
    let rate_limit = rate_limit::RateLimit::new(
        http.rate_limit_per_sec,
        http.rate_limit_burst,
        core.metrics().clone(),
    );
    let parked = parked::ParkedReads::new(
        http.max_parked_reads,
        http.max_parked_reads_per_client,
        core.metrics().clone(),
    );
    // One layer of the whole stack (axum boxes and clones each `layer` call's service per
    // request). Outermost first: the parked-read places, the rate limit, the request log (method,
    // path, status, micros at debug level, once admitted by the rate limit), the budget, and the
    // bodies bounded before anything reads them (appends by their format's limit, the rest by
    // the JSON limit, within the budget).
    let v1 = routes::v1().router.layer(
        tower::ServiceBuilder::new()
            .layer(Extension(parked.clone()))
            .layer(GateLayer(rate_limit.clone()))
            .layer(trace_layer())
            .layer(Extension(budget.clone()))
            .layer(body::JsonBodiesLayer(Arc::new(body::JsonBodies {
                limit: http.body.max_json_bytes,
                budget: budget.clone(),
                stall: http.idle_timeout,
            }))),
    );
    let mut app = routes::root().router.nest("/v1", v1);
    if core.settings().ds.enabled {
        // The Durable Streams front end reads its own bodies, within `ds.max_append_bytes`.
        let ds = ds::routes(&core).layer(
            tower::ServiceBuilder::new()
                .layer(Extension(parked))
                .layer(GateLayer(rate_limit))
                .layer(trace_layer())
                .layer(Extension(budget)),
        );
        app = app.nest("/ds", ds);
    }
    // The routes, then the middleware every request passes through, layered once around them
    // (as the fallback of an empty router) rather than around each route: axum clones a route's
    // whole stack for every request it answers, so this stack stays short, and its checks are
    // gates (`gate.rs`) rather than `from_fn` middleware, which boxes and clones again. These
    // layers see each request as the client sent it, before routing, as they did when they
    // wrapped each route.
    let app = Router::new().fallback_service(app.fallback(not_found).with_state(core.clone()));
    // Before anything else (only the Host allowlist and CORS, below, come first): a write from a
    // page that may not write is refused, `redirected_by` is taken out of the query (a redirect
    // keeps the query as the client sent it), then the token is checked; nothing runs, not even
    // the rate limit, before it.
    let app = app.layer(GateLayer(gate::Front {
        writers: cors::WriteOrigins::new(&core),
        core: core.clone(),
    }));
    // JSON and NDJSON bodies compressed when the client asks (gzip, zstd); never SSE, whose
    // events must leave as they come, nor the binary formats.
    let app = app.layer(
        CompressionLayer::new()
            .gzip(true)
            .zstd(true)
            .compress_when(SizeAbove::new(256).and(compressible)),
    );
    // Outside everything but the Host allowlist: preflights carry no token.
    let app = match cors::layer(&core) {
        Some(cors) => app.layer(cors),
        None => app,
    };
    match hosts::AllowedHosts::new(&http.allowed_hosts) {
        Some(hosts) => app.layer(GateLayer(hosts)),
        None => app,
    }
}

/// The request log's layer.
type RequestLog = TraceLayer<
    tower_http::classify::SharedClassifier<tower_http::classify::ServerErrorsAsFailures>,
    fn(&axum::http::Request<Body>) -> Span,
    (),
    fn(&axum::http::Response<Body>, Duration, &Span),
    (),
    (),
    (),
>;

/// The request log: method, path, status and micros of each request, at debug level.
fn trace_layer() -> RequestLog {
    fn span(request: &axum::http::Request<Body>) -> Span {
        tracing::debug_span!(
            "request",
            method = %request.method(),
            path = %request.uri().path()
        )
    }
    fn done(response: &axum::http::Response<Body>, latency: Duration, _: &Span) {
        tracing::debug!(
            status = response.status().as_u16(),
            micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX),
            "request"
        );
    }
    TraceLayer::new_for_http()
        .make_span_with(span as fn(&axum::http::Request<Body>) -> Span)
        .on_request(())
        .on_response(done as fn(&axum::http::Response<Body>, Duration, &Span))
        .on_body_chunk(())
        .on_eos(())
        .on_failure(())
}

/// Whether a response is JSON or NDJSON, the bodies worth compressing.
fn compressible(
    _: axum::http::StatusCode,
    _: axum::http::Version,
    headers: &axum::http::HeaderMap,
    _: &axum::http::Extensions,
) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            let t = t.split(';').next().unwrap_or("").trim();
            t == "application/json" || t == crate::format::NDJSON
        })
}

async fn not_found(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::RouteNotFound {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}
