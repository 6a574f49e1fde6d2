//! A stream's name and the table that holds it (docs/durable-streams.md, "A stream is a
//! table"): `ds.` and the name with every byte but ASCII letters, digits and `-` written `_XX`
//! (hex), so the mapping is one to one and the table name is a valid one.

use crate::error::{ApiError, ApiResult};

/// What every stream's table name starts with.
pub(crate) const PREFIX: &str = "ds.";

/// The longest escaped name: with the prefix, within the 200 characters of a table name.
const MAX_ESCAPED: usize = 190;

/// The table of stream `name` (the path after `/ds/v1/stream/`, percent-decoded), or a 400.
pub(crate) fn table_of(name: &str) -> ApiResult<String> {
    if name.is_empty() {
        return Err(ApiError::bad_request("a stream needs a name"));
    }
    let mut out = String::with_capacity(PREFIX.len() + name.len());
    out.push_str(PREFIX);
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("_{b:02X}"));
        }
    }
    if out.len() - PREFIX.len() > MAX_ESCAPED {
        return Err(ApiError::bad_request(format!(
            "stream name is too long: {} characters once escaped, at most {MAX_ESCAPED}",
            out.len() - PREFIX.len()
        )));
    }
    Ok(out)
}

/// The stream name a table holds, when it is a stream's table name: the inverse of
/// [`table_of`], which shows the mapping one to one.
#[cfg(test)]
fn stream_of(table: &str) -> Option<String> {
    let escaped = table.strip_prefix(PREFIX)?.as_bytes();
    let mut out = Vec::with_capacity(escaped.len());
    let mut i = 0;
    while i < escaped.len() {
        if escaped[i] == b'_' {
            let hex = std::str::from_utf8(escaped.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(escaped[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_one_to_one_onto_valid_table_names() {
        for name in [
            "a",
            "create-test-1",
            "a/b",
            "x.y_z",
            "ünï code",
            "%2F",
            "_41",
        ] {
            let table = table_of(name).unwrap();
            assert!(
                table
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
                "{table}"
            );
            assert_eq!(stream_of(&table).as_deref(), Some(name));
        }
        assert_ne!(table_of("_41").unwrap(), table_of("A").unwrap());
        assert!(table_of("").is_err());
        assert!(table_of(&"a".repeat(191)).is_err());
        assert!(table_of(&"a".repeat(190)).is_ok());
        assert_eq!(stream_of("orders"), None);
    }
}
