//! The API's routes, each listed once: [`add!`] both routes a path to its handlers and records
//! the (method, path) pairs, so the OpenAPI document (`openapi.rs`) can be checked against what
//! is really served.

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use super::{admin, cluster, dashboard, openapi, operations, records, tables};
use crate::core::NodeCore;

/// The routes and the (method, path) pairs they serve.
pub(crate) struct Routes {
    pub(crate) router: Router<Arc<NodeCore>>,
    pub(crate) listed: Vec<(&'static str, String)>,
}

/// `add!(routes, "/path", get(handler).post(other))`: routes the path, lists each method.
macro_rules! add {
    ($routes:ident, $path:literal, $first:ident($handler:path) $(. $method:ident($more:path))*) => {
        $routes.router = $routes.router.route($path, $first($handler)$(.$method($more))*);
        $routes.listed.push((stringify!($first), $path.to_owned()));
        $( $routes.listed.push((stringify!($method), $path.to_owned())); )*
    };
}

/// The routes under `/v1` (paths relative to it).
pub(crate) fn v1() -> Routes {
    let mut r = Routes {
        router: Router::new(),
        listed: Vec::new(),
    };
    add!(r, "/tables", post(tables::create).get(tables::list));
    add!(
        r,
        "/tables/{table}",
        get(tables::get)
            .patch(tables::update)
            .delete(tables::drop_table)
    );
    add!(r, "/tables/{table}/schemas", post(tables::add_schema));
    add!(r, "/writers", post(tables::init_writer));
    add!(r, "/cluster", get(cluster::cluster));
    add!(
        r,
        "/tables/{table}/buckets/{bucket}/records",
        post(records::append).get(records::read)
    );
    add!(
        r,
        "/tables/{table}/buckets/{bucket}/offsets",
        get(records::offsets)
    );
    add!(
        r,
        "/tables/{table}/buckets/{bucket}/trim",
        post(records::trim)
    );
    add!(
        r,
        "/tables/{table}/buckets/{bucket}/transfer",
        post(cluster::transfer)
    );
    add!(r, "/openapi.json", get(openapi::openapi));
    add!(r, "/admin/snapshot", post(admin::snapshot));
    r
}

/// The routes outside `/v1`.
pub(crate) fn root() -> Routes {
    let mut r = Routes {
        router: Router::new(),
        listed: Vec::new(),
    };
    add!(r, "/healthz", get(operations::healthz));
    add!(r, "/readyz", get(operations::readyz));
    add!(r, "/metrics", get(operations::metrics));
    add!(r, "/dashboard", get(dashboard::page));
    r
}

/// Every (method, path) served, with full paths.
#[cfg(test)]
pub(crate) fn listed() -> Vec<(&'static str, String)> {
    let mut out: Vec<_> = v1()
        .listed
        .into_iter()
        .map(|(m, p)| (m, format!("/v1{p}")))
        .collect();
    out.extend(root().listed);
    out
}
