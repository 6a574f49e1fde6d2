//! Taking one parameter out of a request's query before anything else reads it (`access_token`
//! for the token check, `redirected_by` for routing), leaving the other pairs as they were.

use axum::http::Uri;

/// Why a parameter could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TakeError {
    /// It appears more than once.
    Twice,
    /// Its value is not valid percent-encoded UTF-8.
    BadEncoding,
    /// The URI without it does not parse again.
    BadUri,
}

/// Removes every `name` pair from the query of `uri`, leaving the other pairs as they were;
/// returns its decoded value.
pub(super) fn take_param(uri: &mut Uri, name: &str) -> Result<Option<String>, TakeError> {
    let Some(query) = uri.query() else {
        return Ok(None);
    };
    let mut value = None;
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
        if percent_decode(key, true).as_deref() != Some(name) {
            kept.push(pair);
            continue;
        }
        if value.is_some() {
            return Err(TakeError::Twice);
        }
        value = Some(percent_decode(raw, true).ok_or(TakeError::BadEncoding)?);
    }
    if value.is_none() {
        return Ok(None);
    }
    let path = uri.path();
    let rebuilt = if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", kept.join("&"))
    };
    let mut parts = std::mem::take(uri).into_parts();
    parts.path_and_query = Some(rebuilt.parse().map_err(|_| TakeError::BadUri)?);
    *uri = Uri::from_parts(parts).map_err(|_| TakeError::BadUri)?;
    Ok(value)
}

/// Decodes `%XX` escapes (and `+` as a space in a query); `None` for a bad escape or bytes that
/// are not UTF-8.
pub(super) fn percent_decode(text: &str, plus_is_space: bool) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}
