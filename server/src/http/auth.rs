//! The access control of the HTTP API, in front of every route (in the gate, `gate.rs`).
//!
//! It takes the token from `Authorization: Bearer TOKEN` or from `access_token=TOKEN` in the query
//! (a browser's `EventSource` cannot send headers), authenticates it with the node's
//! [`Authenticator`](crate::auth::Authenticator), checks the route's [`Action`] on the table its
//! path names, and hands the [`Principal`] to the handlers as a request extension (listing
//! tables filters by it; creating a table checks the name in the body).
//!
//! `access_token` is removed from the URI before anything else sees it, whether or not tokens
//! are configured: the handlers' query parsers refuse unknown fields, and nothing downstream can
//! log it.
//!
//! | Route | Action |
//! |---|---|
//! | `/healthz`, `/readyz`, `/dashboard` | none: always open (probes carry no token; the page holds nothing secret and sends the token typed into it) |
//! | `/metrics` | [`Action::Monitor`]: any token not limited to tables |
//! | `GET`/`HEAD` under `/v1` | [`Action::Read`] on the table in the path, if any |
//! | any other method under `/v1` | [`Action::Write`] on the table in the path, if any |
//! | anything else | a valid token (then 404) |

use axum::extract::{OriginalUri, Request};
use axum::http::{Method, Uri, header};

use super::query::{TakeError, percent_decode, take_param};
use crate::auth::{Action, Principal};
use crate::core::NodeCore;
use crate::error::{ApiError, ApiResult};

/// The query parameter that may carry the token.
const ACCESS_TOKEN: &str = "access_token";

/// Strips `access_token` from the query, authenticates, checks the route's action, and passes
/// the principal on as an extension; or the error to answer (400, 401 or 403).
pub(super) fn admit(core: &NodeCore, request: &mut Request) -> ApiResult<()> {
    let from_query = take_query_token(request.uri_mut())?;
    if let Some(OriginalUri(original)) = request.extensions_mut().get_mut::<OriginalUri>() {
        take_query_token(original)?;
    }
    let auth = core.authenticator();
    if !auth.is_enabled() {
        request.extensions_mut().insert(Principal::open());
        return Ok(());
    }
    let Some(action) = action_of(request.method(), request.uri().path()) else {
        return Ok(());
    };
    let from_header = bearer(request)?;
    let token = match (from_header, from_query.as_deref()) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "give the token once: in `Authorization` or in `access_token`, not both",
            ));
        }
        (header, query) => header.or(query),
    };
    let principal = auth.authenticate(token)?;
    let (action, table) = action;
    principal.check(action, table.as_deref())?;
    request.extensions_mut().insert(principal);
    Ok(())
}

/// The token of an `Authorization: Bearer` header, if there is one.
fn bearer(request: &Request) -> ApiResult<Option<&str>> {
    let Some(value) = request.headers().get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let unauthorized = || ApiError::Unauthorized {
        message: "the Authorization header must be `Bearer TOKEN`".to_owned(),
    };
    let value = value.to_str().map_err(|_| unauthorized())?;
    let (scheme, token) = value.trim().split_once(' ').ok_or_else(unauthorized)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(unauthorized());
    }
    Ok(Some(token.trim()))
}

/// The action a route needs and the table its path names; `None` for the open `/healthz`.
fn action_of(method: &Method, path: &str) -> Option<(Action, Option<String>)> {
    let mut segments = path.strip_prefix('/').unwrap_or(path).split('/');
    let first = segments.next().unwrap_or("");
    match first {
        "healthz" | "readyz" | "dashboard" if segments.next().is_none() => None,
        "metrics" => Some((Action::Monitor, None)),
        "v1" => {
            let action = if matches!(*method, Method::GET | Method::HEAD) {
                Action::Read
            } else {
                Action::Write
            };
            let table = match (segments.next(), segments.next()) {
                // A name the router would decode (`%61` for `a`) is checked decoded; one that
                // does not decode matches no table list.
                (Some("tables"), Some(name)) => {
                    Some(percent_decode(name, false).unwrap_or_else(|| name.to_owned()))
                }
                _ => None,
            };
            Some((action, table))
        }
        "ds" => {
            let action = if matches!(*method, Method::GET | Method::HEAD) {
                Action::Read
            } else {
                Action::Write
            };
            // A stream is the table its name maps to; a name that maps to none matches no
            // table list.
            let rest = path.strip_prefix("/ds/v1/stream/");
            let table = rest.map(|name| {
                let name = percent_decode(name, false).unwrap_or_else(|| name.to_owned());
                super::ds::names::table_of(&name).unwrap_or(name)
            });
            Some((action, table))
        }
        _ => Some((Action::Read, None)),
    }
}

/// Removes every `access_token` pair from the query of `uri`, leaving the other pairs as they
/// were; returns its decoded value. Two of them are refused.
fn take_query_token(uri: &mut Uri) -> ApiResult<Option<String>> {
    take_param(uri, ACCESS_TOKEN).map_err(|e| match e {
        TakeError::Twice => ApiError::bad_request("give `access_token` once"),
        TakeError::BadEncoding => ApiError::Unauthorized {
            message: "`access_token` is not valid percent-encoded UTF-8".to_owned(),
        },
        TakeError::BadUri => ApiError::bad_request("the request URI is not valid"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_map_to_actions_and_tables() {
        let cases = [
            (Method::GET, "/healthz", None),
            (Method::GET, "/readyz", None),
            (Method::GET, "/metrics", Some((Action::Monitor, None))),
            (Method::GET, "/v1/tables", Some((Action::Read, None))),
            (Method::POST, "/v1/tables", Some((Action::Write, None))),
            (Method::POST, "/v1/writers", Some((Action::Write, None))),
            (Method::GET, "/v1/tables/t", Some((Action::Read, Some("t")))),
            (
                Method::DELETE,
                "/v1/tables/t",
                Some((Action::Write, Some("t"))),
            ),
            (
                Method::POST,
                "/v1/tables/t/schemas",
                Some((Action::Write, Some("t"))),
            ),
            (
                Method::HEAD,
                "/v1/tables/t/buckets/0/records",
                Some((Action::Read, Some("t"))),
            ),
            (
                Method::POST,
                "/v1/tables/%74/buckets/0/trim",
                Some((Action::Write, Some("t"))),
            ),
            (
                Method::GET,
                "/v1/tables/%zz/buckets/0/offsets",
                Some((Action::Read, Some("%zz"))),
            ),
            (
                Method::GET,
                "/ds/v1/stream/a%2Fb",
                Some((Action::Read, Some("ds.a_2Fb"))),
            ),
            (
                Method::POST,
                "/ds/v1/stream/s",
                Some((Action::Write, Some("ds.s"))),
            ),
            (Method::PUT, "/ds/v1", Some((Action::Write, None))),
            (Method::GET, "/healthz/x", Some((Action::Read, None))),
            (Method::GET, "/nope", Some((Action::Read, None))),
        ];
        for (method, path, expected) in cases {
            let got = action_of(&method, path);
            let expected = expected.map(|(a, t)| (a, t.map(str::to_owned)));
            assert_eq!(got, expected, "{method} {path}");
        }
    }

    #[test]
    fn access_token_is_taken_out_of_the_query() {
        let cases = [
            ("/p", None, "/p"),
            ("/p?offset=1", None, "/p?offset=1"),
            ("/p?access_token=abc", Some("abc"), "/p"),
            (
                "/p?offset=1&access_token=a%2Bb+c&live=sse",
                Some("a+b c"),
                "/p?offset=1&live=sse",
            ),
            (
                "/p?access%5Ftoken=x&columns=a,b",
                Some("x"),
                "/p?columns=a,b",
            ),
            ("/p?access_token", Some(""), "/p"),
        ];
        for (uri, token, left) in cases {
            let mut parsed: Uri = uri.parse().unwrap();
            let got = take_query_token(&mut parsed).unwrap();
            assert_eq!(
                (got.as_deref(), parsed.to_string().as_str()),
                (token, left),
                "{uri}"
            );
        }
        let mut twice: Uri = "/p?access_token=a&access_token=b".parse().unwrap();
        assert_eq!(
            take_query_token(&mut twice).unwrap_err().kind(),
            "bad_request"
        );
        let mut bad: Uri = "/p?access_token=%ff".parse().unwrap();
        assert_eq!(
            take_query_token(&mut bad).unwrap_err().kind(),
            "unauthorized"
        );
    }
}
