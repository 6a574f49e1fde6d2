//! `[auth]`: the bearer tokens a node accepts and what each may do.
//!
//! No token configured means no access control. Tokens come from three places, all merged:
//! `auth.token` (what `MINK_AUTH_TOKEN` sets: one read-write token on every table),
//! `auth.token_file` (read at start, see `crate::auth`), and `[[auth.tokens]]`:
//!
//! ```toml
//! [auth]
//! token_file = "/etc/mink/tokens"
//! [[auth.tokens]]
//! token = "a-long-random-token-for-dashboards"
//! scope = "read"
//! tables = ["events"]
//! ```
//!
//! The settings hold the token text only until the node starts: the authenticator keeps digests.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Shortest token accepted: a short token can be guessed, and the rate limit is optional.
pub(crate) const MIN_TOKEN_LEN: usize = 16;
/// Longest token accepted (it travels in a header).
pub(crate) const MAX_TOKEN_LEN: usize = 4096;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Reads, offsets, listing and describing tables.
    Read,
    /// Everything `read` allows, plus appends, trims, writer ids, creating and dropping tables
    /// and adding schema versions.
    Write,
}

/// A token's text. Its `Debug` never shows it, so settings can be logged.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a token.
    pub fn new(text: impl Into<String>) -> Self {
        Secret(text.into())
    }

    /// The token itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// One `[[auth.tokens]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSettings {
    /// The token.
    pub token: Secret,
    /// What it may do. Default `write`, as a token given alone in `auth.token`.
    #[serde(default = "write")]
    pub scope: Scope,
    /// The tables it may use; absent: every table (and the node-wide routes such as `/metrics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<Vec<String>>,
}

fn write() -> Scope {
    Scope::Write
}

/// The `[auth]` section.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSettings {
    /// One read-write token on every table (`MINK_AUTH_TOKEN`). Default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    /// A file of tokens, one per line: `TOKEN [read|write] [table,...]` (`--auth-token-file`).
    /// Default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// Tokens given in the config file.
    pub tokens: Vec<TokenSettings>,
}

impl AuthSettings {
    /// Refuses tokens that cannot work or are too short to be safe, and empty table lists,
    /// naming the setting (never the token).
    pub fn validate(&self) -> Result<(), String> {
        if let Some(token) = &self.token {
            check_token(token.expose()).map_err(|why| format!("auth.token {why}"))?;
        }
        for (i, entry) in self.tokens.iter().enumerate() {
            check_token(entry.token.expose())
                .map_err(|why| format!("auth.tokens[{i}].token {why}"))?;
            if let Some(tables) = &entry.tables {
                check_tables(tables.iter().map(String::as_str))
                    .map_err(|why| format!("auth.tokens[{i}].tables {why}"))?;
            }
        }
        if self
            .token_file
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            return Err("auth.token_file must not be empty".to_owned());
        }
        Ok(())
    }
}

/// Why `token` is not acceptable, as the end of a sentence naming it.
pub(crate) fn check_token(token: &str) -> Result<(), String> {
    if token.len() < MIN_TOKEN_LEN {
        return Err(format!("must be at least {MIN_TOKEN_LEN} characters"));
    }
    if token.len() > MAX_TOKEN_LEN {
        return Err(format!("must be at most {MAX_TOKEN_LEN} characters"));
    }
    // What a client can send in `Authorization: Bearer` and a token file can hold on one line.
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be printable ASCII without spaces".to_owned());
    }
    Ok(())
}

/// Why a token's table list is not acceptable.
pub(crate) fn check_tables<'a>(mut tables: impl Iterator<Item = &'a str>) -> Result<(), String> {
    let mut any = false;
    let bad = tables.find(|t| {
        any = true;
        t.is_empty() || t.contains(|c: char| c == ',' || c.is_whitespace())
    });
    if bad.is_some() {
        return Err("holds an empty table name or one with `,` or spaces".to_owned());
    }
    if !any {
        return Err("must name at least one table (leave it out for every table)".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_and_bad_ones_are_refused_without_showing_them() {
        let s: AuthSettings = toml::from_str(
            "token = \"0123456789abcdef\"\n\
             [[tokens]]\ntoken = \"read-only-token-for-dashboards\"\nscope = \"read\"\ntables = [\"a\"]\n\
             [[tokens]]\ntoken = \"another-write-token-ok\"\n",
        )
        .unwrap();
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.tokens[0].scope, Scope::Read);
        assert_eq!(s.tokens[1].scope, Scope::Write);
        assert_eq!(s.tokens[1].tables, None);
        assert!(!format!("{s:?}").contains("0123456789abcdef"));
        assert!(
            toml::from_str::<AuthSettings>("[[tokens]]\ntoken = \"x\"\nscope = \"admin\"").is_err()
        );

        let cases = [
            ("token = \"short\"", "auth.token must be at least 16"),
            (
                "[[tokens]]\ntoken = \"has spaces in the token\"",
                "auth.tokens[0].token must be printable",
            ),
            (
                "[[tokens]]\ntoken = \"0123456789abcdef\"\ntables = []",
                "auth.tokens[0].tables must name at least one",
            ),
            (
                "[[tokens]]\ntoken = \"0123456789abcdef\"\ntables = [\"a,b\"]",
                "auth.tokens[0].tables holds",
            ),
            ("token_file = \"\"", "auth.token_file must not be empty"),
        ];
        for (text, message) in cases {
            let error = toml::from_str::<AuthSettings>(text)
                .unwrap()
                .validate()
                .unwrap_err();
            assert!(error.starts_with(message), "{text}: {error}");
            assert!(!error.contains("has spaces"), "{error}");
        }
    }
}
