//! Key rules shared by every backend, and joining keys onto a backend's root prefix.

use super::error::{Result, StorageError};

/// Longest key accepted, in bytes (S3 allows 1024 including the root prefix; we keep room for it).
pub const MAX_KEY_LEN: usize = 768;

fn allowed(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'=' | b'~' | b'+')
}

fn check_segments(key: &str, allow_trailing_partial: bool) -> Result<()> {
    let invalid = |reason| StorageError::InvalidKey {
        key: key.to_owned(),
        reason,
    };
    if key.len() > MAX_KEY_LEN {
        return Err(invalid("longer than 768 bytes"));
    }
    if key.bytes().any(|c| c != b'/' && !allowed(c)) {
        return Err(invalid(
            "contains a character other than ASCII letters, digits, '/' and -_.=~+",
        ));
    }
    let segments: Vec<&str> = key.split('/').collect();
    let last = segments.len() - 1;
    for (i, segment) in segments.iter().enumerate() {
        if segment.is_empty() {
            // A prefix may end with '/', meaning "everything under this folder".
            if allow_trailing_partial && i == last && i > 0 {
                continue;
            }
            return Err(invalid(
                "has an empty segment (leading, trailing or double '/')",
            ));
        }
        // A prefix's last segment may be a partial name, but never a relative path component.
        if *segment == "." || *segment == ".." {
            return Err(invalid("has a '.' or '..' segment"));
        }
    }
    Ok(())
}

/// Checks `key` against the key rules of [`ObjectStorage`](super::ObjectStorage).
pub fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(StorageError::InvalidKey {
            key: String::new(),
            reason: "is empty",
        });
    }
    check_segments(key, false)
}

/// Checks a listing prefix: `""`, or a key, or a key followed by `/`, or a key whose last segment
/// is cut short (`wal/00`).
pub fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Ok(());
    }
    check_segments(prefix, true)
}

/// A backend's root prefix, normalised: no leading or trailing '/', validated like a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Root(String);

impl Root {
    pub(crate) fn new(prefix: &str) -> Result<Self> {
        let trimmed = prefix.trim_matches('/');
        if !trimmed.is_empty() {
            validate_key(trimmed).map_err(|e| StorageError::Config {
                message: format!("root prefix {prefix:?} is not a valid key path: {e}"),
                source: Some(Box::new(e)),
            })?;
        }
        Ok(Root(trimmed.to_owned()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The full key for a caller's key (or prefix).
    pub(crate) fn join(&self, key: &str) -> String {
        if self.0.is_empty() {
            key.to_owned()
        } else {
            format!("{}/{}", self.0, key)
        }
    }

    /// The caller's key for a full key, or `None` if it is outside the root.
    pub(crate) fn strip<'a>(&self, full: &'a str) -> Option<&'a str> {
        if self.0.is_empty() {
            Some(full)
        } else {
            full.strip_prefix(self.0.as_str())?.strip_prefix('/')
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_rules() {
        for ok in ["a", "wal/00000001", "s/x=1/obj.bin", "a-b_c.d~e+f"] {
            validate_key(ok).unwrap();
        }
        for bad in ["", "/a", "a/", "a//b", "a/../b", ".", "a b", "é", "a?b"] {
            let err = validate_key(bad).unwrap_err();
            assert_eq!(err.kind(), "invalid_key", "{bad:?}");
        }
        assert!(validate_key(&"a".repeat(MAX_KEY_LEN + 1)).is_err());
        for ok in ["", "wal/", "wal/00", "a"] {
            validate_prefix(ok).unwrap();
        }
        for bad in ["/", "/wal", "a//", "../x"] {
            assert!(validate_prefix(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn root_join_strip() {
        let root = Root::new("/tenant/a/").unwrap();
        assert_eq!(root.join("wal/1"), "tenant/a/wal/1");
        assert_eq!(root.strip("tenant/a/wal/1"), Some("wal/1"));
        assert_eq!(root.strip("tenant/ab/wal/1"), None);
        let empty = Root::new("").unwrap();
        assert_eq!(empty.join("k"), "k");
        assert!(Root::new("a b").is_err());
    }
}
