//! Who a Flight request is: the HTTP API's tokens, from the gRPC `authorization` metadata
//! (`Bearer TOKEN`, or `Basic` with the token as the password, as Flight clients send for
//! `authenticate_basic_token`), checked by the node core's authenticator.

use base64::Engine as _;
use tonic::Status;
use tonic::metadata::MetadataMap;

use crate::auth::{Authenticator, Principal};
use crate::error::ApiError;

/// The metadata key the token travels in.
pub(crate) const AUTHORIZATION: &str = "authorization";

/// The token of `metadata`: a bearer token, or the password of basic credentials.
pub(crate) fn token(metadata: &MetadataMap) -> Option<String> {
    let value = metadata.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, rest) = value.split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(rest.to_owned());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (_user, password) = text.split_once(':')?;
        return Some(password.to_owned());
    }
    None
}

/// The principal of a request, or UNAUTHENTICATED.
pub(crate) fn principal(
    authenticator: &Authenticator,
    metadata: &MetadataMap,
) -> Result<Principal, Status> {
    let token = token(metadata);
    authenticator.authenticate(token.as_deref()).map_err(|e| match token {
        Some(_) => Status::from(e),
        None => Status::from(ApiError::Unauthorized {
            message: "a token is required: send the gRPC metadata `authorization: Bearer TOKEN` (or basic credentials with the token as the password)".to_owned(),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        metadata.insert(AUTHORIZATION, value.parse().unwrap());
        metadata
    }

    #[test]
    fn a_token_comes_as_bearer_or_as_the_basic_password() {
        assert_eq!(token(&with("Bearer abc")).as_deref(), Some("abc"));
        assert_eq!(token(&with("bearer  abc ")).as_deref(), Some("abc"));
        let basic = base64::engine::general_purpose::STANDARD.encode("user:s3cret:x");
        assert_eq!(
            token(&with(&format!("Basic {basic}"))).as_deref(),
            Some("s3cret:x")
        );
        assert_eq!(token(&with("Basic !!!")), None);
        assert_eq!(token(&with("Token abc")), None);
        assert_eq!(token(&MetadataMap::new()), None);
    }
}
