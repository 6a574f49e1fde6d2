//! Building the [`Authenticator`] from the settings, and the token file's format.
//!
//! The token file (`auth.token_file`, `--auth-token-file`) holds one token per line:
//!
//! ```text
//! # TOKEN [read|write] [table,table,...]
//! 3f9c2a1e8b7d4c6f0a5e9d2b1c8f7e6a               # read-write, every table
//! 7b1e4d9a2c6f8e0b3a5d7c9e1f2b4a6d read          # read-only, every table
//! 9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b write events  # read-write, table `events` only
//! ```
//!
//! Fields are separated by spaces or tabs; a field starting with `#` starts a comment (a `#`
//! inside a token is part of it); blank lines are skipped; a line
//! with only a token is read-write on every table, like `MINK_AUTH_TOKEN`. A malformed line fails
//! the start with the file and line number, never with the token.

use std::path::Path;

use super::{Authenticator, Principal};
use crate::settings::{AuthSettings, Scope, check_tables, check_token};

impl Authenticator {
    /// The authenticator of the settings: `auth.token`, the lines of `auth.token_file` and
    /// `[[auth.tokens]]`. Fails (naming the setting, or the file and line) on an unreadable or
    /// malformed file, an empty one, or a token given twice.
    pub fn from_settings(settings: &AuthSettings) -> Result<Self, String> {
        settings.validate()?;
        let mut auth = Authenticator::open();
        if let Some(token) = &settings.token {
            auth.add(token.expose(), Principal::open())
                .map_err(|why| format!("auth.token {why}"))?;
        }
        for (i, entry) in settings.tokens.iter().enumerate() {
            auth.add(
                entry.token.expose(),
                Principal::new(entry.scope, entry.tables.clone()),
            )
            .map_err(|why| format!("auth.tokens[{i}].token {why}"))?;
        }
        if let Some(path) = &settings.token_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("auth.token_file: cannot read {}: {e}", path.display()))?;
            let entries = parse_token_file(path, &text)?;
            if entries.is_empty() {
                return Err(format!(
                    "auth.token_file: {} holds no token (a file given means tokens are wanted)",
                    path.display()
                ));
            }
            for (line, token, principal) in entries {
                auth.add(token, principal)
                    .map_err(|why| format!("{}:{line}: the token {why}", path.display()))?;
            }
        }
        Ok(auth)
    }
}

/// The tokens of a token file with their line numbers, or the first malformed line.
fn parse_token_file<'a>(
    path: &Path,
    text: &'a str,
) -> Result<Vec<(usize, &'a str, Principal)>, String> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        let bad = |why: &str| {
            format!(
                "{}:{number}: {why} (expected `TOKEN [read|write] [table,...]`)",
                path.display()
            )
        };
        // A comment starts a field, so a `#` inside a token does not cut it short.
        let mut fields = line.split_whitespace().take_while(|f| !f.starts_with('#'));
        let Some(token) = fields.next() else {
            continue;
        };
        check_token(token).map_err(|why| bad(&format!("the token {why}")))?;
        let scope = match fields.next() {
            None | Some("write") => Scope::Write,
            Some("read") => Scope::Read,
            // Not echoed: a line with its fields out of order would show the token.
            Some(_) => return Err(bad("the second field must be `read` or `write`")),
        };
        let tables = match fields.next() {
            None => None,
            Some(list) => {
                let tables: Vec<String> = list.split(',').map(str::to_owned).collect();
                check_tables(tables.iter().map(String::as_str))
                    .map_err(|why| bad(&format!("the table list {why}")))?;
                Some(tables)
            }
        };
        if fields.next().is_some() {
            return Err(bad(
                "too many fields (table names are separated by `,` only)",
            ));
        }
        entries.push((number, token, Principal::new(scope, tables)));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::settings::{Secret, TokenSettings};

    const SECRET: &str = "s3cr3t-s3cr3t-s3cr3t";

    #[test]
    fn token_file_lines_parse_with_comments_and_blank_lines() {
        let text = format!(
            "# tokens of the test\n\n{SECRET}\n   \nreader-0123456789abcdef read # dashboards\n\
             \twriter-0123456789abcdef\twrite  a,b\nwith#hash-0123456789 #comment\n"
        );
        let entries = parse_token_file(Path::new("tokens"), &text).unwrap();
        let got: Vec<_> = entries
            .iter()
            .map(|(n, t, p)| (*n, *t, p.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (3, SECRET, Principal::open()),
                (
                    5,
                    "reader-0123456789abcdef",
                    Principal::new(Scope::Read, None)
                ),
                (
                    6,
                    "writer-0123456789abcdef",
                    Principal::new(Scope::Write, Some(vec!["a".to_owned(), "b".to_owned()]))
                ),
                (7, "with#hash-0123456789", Principal::open()),
            ]
        );
    }

    #[test]
    fn malformed_lines_name_the_file_and_line_but_not_the_token() {
        let cases = [
            (format!("{SECRET} admin"), "tokens:2: the second field"),
            (format!("{SECRET} read a b"), "tokens:2: too many fields"),
            (format!("{SECRET} read a,,b"), "tokens:2: the table list"),
            (
                "short read".to_owned(),
                "tokens:2: the token must be at least",
            ),
            // Fields out of order: the token is in the second field.
            (
                format!("read {SECRET}"),
                "tokens:2: the token must be at least",
            ),
            (
                format!("write {SECRET}"),
                "tokens:2: the token must be at least",
            ),
        ];
        for (line, message) in cases {
            let text = format!("# first\n{line}\n");
            let error = parse_token_file(Path::new("tokens"), &text).unwrap_err();
            assert!(error.starts_with(message), "{line}: {error}");
            assert!(!error.contains(SECRET), "{error}");
        }
    }

    #[test]
    fn settings_merge_every_source_and_refuse_an_empty_file_or_a_repeated_token() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(&file, "file-token-0123456789 read\n").unwrap();
        let settings = AuthSettings {
            token: Some(Secret::new("env-token-0123456789")),
            token_file: Some(file.clone()),
            tokens: vec![TokenSettings {
                token: Secret::new("config-token-0123456789"),
                scope: Scope::Read,
                tables: Some(vec!["a".to_owned()]),
            }],
        };
        let auth = Authenticator::from_settings(&settings).unwrap();
        assert_eq!(
            auth.authenticate(Some("env-token-0123456789")).unwrap(),
            Principal::open()
        );
        assert_eq!(
            auth.authenticate(Some("file-token-0123456789")).unwrap(),
            Principal::new(Scope::Read, None)
        );
        assert_eq!(
            auth.authenticate(Some("config-token-0123456789")).unwrap(),
            Principal::new(Scope::Read, Some(vec!["a".to_owned()]))
        );
        assert!(
            !Authenticator::from_settings(&AuthSettings::default())
                .unwrap()
                .is_enabled()
        );

        std::fs::write(&file, "# nothing yet\n").unwrap();
        let error = Authenticator::from_settings(&settings).unwrap_err();
        assert!(error.contains("holds no token"), "{error}");

        std::fs::write(&file, "\nenv-token-0123456789\n").unwrap();
        let error = Authenticator::from_settings(&settings).unwrap_err();
        assert!(
            error.ends_with("tokens:2: the token is configured twice"),
            "{error}"
        );
        assert!(!error.contains("env-token"), "{error}");

        let missing = AuthSettings {
            token_file: Some(PathBuf::from("/nonexistent/tokens")),
            ..AuthSettings::default()
        };
        let error = Authenticator::from_settings(&missing).unwrap_err();
        assert!(
            error.starts_with("auth.token_file: cannot read /nonexistent/tokens"),
            "{error}"
        );
    }
}
