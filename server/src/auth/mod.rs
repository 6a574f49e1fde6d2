//! Access control shared by every front end: who presents which token, and what it may do.
//!
//! The [`Authenticator`] holds the SHA-256 digest of every configured token (never the token)
//! with its [`Scope`] and optional table list. A front end passes the token a request presents to
//! [`Authenticator::authenticate`] and gets a [`Principal`], then asks
//! [`Principal::check`] before it acts. HTTP takes the token from `Authorization: Bearer` or
//! `access_token` (`http/auth.rs`); Kafka will take it as the SASL/PLAIN password and Flight from
//! its `authorization` metadata, mapping [`ApiError::Unauthorized`] and [`ApiError::Forbidden`]
//! to their protocol's errors.
//!
//! `tokens.rs` builds the authenticator from the settings (`auth.token`, `auth.token_file`,
//! `[[auth.tokens]]`). With no token configured every request is [`Principal::open`].

mod tokens;

use std::net::SocketAddr;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::error::{ApiError, ApiResult};
pub use crate::settings::Scope;

/// What a request does, as the scopes see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read rows or offsets, list or describe tables.
    Read,
    /// Append, trim, take a writer id, create or drop a table, add a schema version.
    Write,
    /// Node-wide observation (`/metrics`): any scope, but only a token not limited to tables,
    /// since the figures cover every table.
    Monitor,
}

/// A token's SHA-256 digest.
type TokenDigest = [u8; 32];

fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

/// One configured token: its digest and what it may do.
#[derive(Clone)]
struct Grant {
    digest: TokenDigest,
    principal: Principal,
}

/// Checks presented tokens against the configured ones.
#[derive(Clone, Default)]
pub struct Authenticator {
    grants: Vec<Grant>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("tokens", &self.grants.len())
            .finish()
    }
}

impl Authenticator {
    /// No tokens: every request is allowed.
    pub fn open() -> Self {
        Authenticator::default()
    }

    /// Whether tokens are required.
    pub fn is_enabled(&self) -> bool {
        !self.grants.is_empty()
    }

    /// Adds a token; refuses one already configured (its two entries could disagree on scope).
    fn add(&mut self, token: &str, principal: Principal) -> Result<(), String> {
        let digest = digest(token);
        // Configuration time: timing does not matter here, only at authentication.
        if self.grants.iter().any(|g| g.digest == digest) {
            return Err("is configured twice".to_owned());
        }
        self.grants.push(Grant { digest, principal });
        Ok(())
    }

    /// The principal of a request presenting `token` (`None`: no token).
    ///
    /// Without configured tokens every request is [`Principal::open`]. Otherwise the digest of
    /// the token is compared with every configured digest in constant time, without stopping at
    /// a match, so neither the token nor its position leaks through timing; a missing or unknown
    /// token is [`ApiError::Unauthorized`].
    pub fn authenticate(&self, token: Option<&str>) -> ApiResult<Principal> {
        if !self.is_enabled() {
            return Ok(Principal::open());
        }
        let Some(token) = token else {
            return Err(ApiError::Unauthorized {
                message: "a token is required: send `Authorization: Bearer TOKEN` (or `access_token=TOKEN` in the query)".to_owned(),
            });
        };
        let presented = digest(token);
        let mut found = subtle::Choice::from(0);
        let mut index = 0u64;
        for (i, grant) in self.grants.iter().enumerate() {
            let equal = grant.digest.ct_eq(&presented);
            index.conditional_assign(&(i as u64), equal);
            found |= equal;
        }
        if bool::from(found) {
            let grant = usize::try_from(index).ok().and_then(|i| self.grants.get(i));
            if let Some(grant) = grant {
                return Ok(grant.principal.clone());
            }
        }
        Err(ApiError::Unauthorized {
            message: "the token is not valid".to_owned(),
        })
    }
}

/// Who a request is, as far as access goes: a scope and optionally the tables it is limited to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    scope: Scope,
    /// `None`: every table.
    tables: Option<Arc<[String]>>,
}

impl Principal {
    /// Everything allowed: the principal of every request when no token is configured.
    pub fn open() -> Self {
        Principal {
            scope: Scope::Write,
            tables: None,
        }
    }

    /// A token's principal.
    pub fn new(scope: Scope, tables: Option<Vec<String>>) -> Self {
        Principal {
            scope,
            tables: tables.map(Arc::from),
        }
    }

    /// Whether this principal may read `table` (listing shows only those).
    pub fn may_read(&self, table: &str) -> bool {
        self.tables
            .as_ref()
            .is_none_or(|tables| tables.iter().any(|t| t == table))
    }

    /// Allows `action` on `table` (`None`: no particular table, such as listing tables or taking
    /// a writer id, where the scope alone decides), or answers [`ApiError::Forbidden`].
    pub fn check(&self, action: Action, table: Option<&str>) -> ApiResult<()> {
        match action {
            Action::Monitor if self.tables.is_some() => {
                return Err(ApiError::Forbidden {
                    message: "this token is limited to some tables; node-wide figures need a token for every table".to_owned(),
                });
            }
            Action::Write if self.scope == Scope::Read => {
                return Err(ApiError::Forbidden {
                    message: "this token may only read".to_owned(),
                });
            }
            Action::Read | Action::Write | Action::Monitor => {}
        }
        match table {
            Some(table) if !self.may_read(table) => Err(ApiError::Forbidden {
                message: format!("this token may not use table `{table}`"),
            }),
            _ => Ok(()),
        }
    }
}

/// Logs a loud warning when the API is reachable beyond this machine and no token guards it.
pub(crate) fn warn_if_open(auth: &Authenticator, addr: SocketAddr) {
    if !auth.is_enabled() && !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "THE API IS OPEN TO ANYONE WHO CAN REACH {addr}: no token is configured, so anyone \
             can read, write and drop every table. Set MINK_AUTH_TOKEN or --auth-token-file, or \
             listen on 127.0.0.1"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authenticator() -> Authenticator {
        let mut auth = Authenticator::open();
        auth.add("writer-token-0123456789", Principal::open())
            .unwrap();
        auth.add("reader-token-0123456789", Principal::new(Scope::Read, None))
            .unwrap();
        auth.add(
            "scoped-token-0123456789",
            Principal::new(Scope::Write, Some(vec!["a".to_owned()])),
        )
        .unwrap();
        auth
    }

    #[test]
    fn no_tokens_means_everything_is_open() {
        let auth = Authenticator::open();
        assert!(!auth.is_enabled());
        assert_eq!(auth.authenticate(None).unwrap(), Principal::open());
        assert_eq!(
            auth.authenticate(Some("anything")).unwrap(),
            Principal::open()
        );
    }

    #[test]
    fn tokens_authenticate_to_their_principal() {
        let mut auth = authenticator();
        for token in [None, Some("wrong"), Some("writer-token-012345678")] {
            assert_eq!(
                auth.authenticate(token).unwrap_err().kind(),
                "unauthorized",
                "{token:?}"
            );
        }
        assert_eq!(
            auth.authenticate(Some("reader-token-0123456789")).unwrap(),
            Principal::new(Scope::Read, None)
        );
        assert_eq!(
            auth.authenticate(Some("writer-token-0123456789")).unwrap(),
            Principal::open()
        );
        assert!(
            auth.add("reader-token-0123456789", Principal::open())
                .is_err()
        );
    }

    #[test]
    fn scopes_allow_what_they_say() {
        let reader = Principal::new(Scope::Read, None);
        let scoped = Principal::new(Scope::Write, Some(vec!["a".to_owned()]));
        let allowed = [
            (&reader, Action::Read, Some("a")),
            (&reader, Action::Read, None),
            (&reader, Action::Monitor, None),
            (&scoped, Action::Write, Some("a")),
            (&scoped, Action::Write, None),
            (&scoped, Action::Read, Some("a")),
        ];
        for (principal, action, table) in allowed {
            assert!(
                principal.check(action, table).is_ok(),
                "{principal:?} {action:?} {table:?}"
            );
        }
        let refused = [
            (&reader, Action::Write, Some("a")),
            (&reader, Action::Write, None),
            (&scoped, Action::Write, Some("b")),
            (&scoped, Action::Read, Some("b")),
            (&scoped, Action::Monitor, None),
        ];
        for (principal, action, table) in refused {
            let error = principal.check(action, table).unwrap_err();
            assert_eq!(
                error.kind(),
                "forbidden",
                "{principal:?} {action:?} {table:?}"
            );
        }
        assert!(scoped.may_read("a") && !scoped.may_read("b"));
        assert!(Principal::open().may_read("b"));
    }
}
