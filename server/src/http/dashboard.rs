//! `/dashboard`: a page compiled into the binary (HTML, CSS and script in one file, no build
//! step) that shows the node's tables and schemas, every bucket's log start, high watermark,
//! retained bytes and owner, the node's key counters over the last minutes as a chart, and a
//! live tail of any bucket. The page itself holds nothing secret and needs no token; the API
//! calls it makes carry the token typed into it (kept for the browser tab only).

use axum::http::header;
use axum::response::{IntoResponse, Response};

const PAGE: &str = include_str!("dashboard.html");

#[utoipa::path(get, path = "/dashboard", tag = "operations", responses(
    (status = 200, description = "The dashboard page (HTML)", content_type = "text/html", body = String)))]
pub(crate) async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        PAGE,
    )
        .into_response()
}
