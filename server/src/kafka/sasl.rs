//! SASL: SaslHandshake and SaslAuthenticate with the PLAIN mechanism, whose password is one of
//! the HTTP API's tokens (docs/kafka.md, "Security"). A node that requires tokens serves only
//! ApiVersions and these two until a connection authenticates.

use bytes::Bytes;
use kafka_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;

use super::errors::code;
use super::state::Kafka;

/// The mechanisms served.
const MECHANISMS: &[&str] = &["PLAIN"];

/// Answers a SaslHandshake: PLAIN is taken, anything else is UNSUPPORTED_SASL_MECHANISM.
pub(crate) fn handshake(kafka: &mut Kafka, mechanism: String) -> SaslHandshakeResponse {
    let mechanisms = MECHANISMS
        .iter()
        .map(|m| StrBytes::from_static_str(m))
        .collect();
    let response = SaslHandshakeResponse::default().with_mechanisms(mechanisms);
    if MECHANISMS.contains(&mechanism.as_str()) {
        kafka.mechanism = Some(mechanism);
        response
    } else {
        response.with_error_code(code::UNSUPPORTED_SASL_MECHANISM)
    }
}

/// Answers a SaslAuthenticate; `Err` carries the answer of a failed one, after which the
/// connection is closed.
pub(crate) fn authenticate(
    kafka: &mut Kafka,
    auth_bytes: Bytes,
) -> Result<SaslAuthenticateResponse, SaslAuthenticateResponse> {
    let failed = |message: &str| {
        SaslAuthenticateResponse::default()
            .with_error_code(code::SASL_AUTHENTICATION_FAILED)
            .with_error_message(Some(StrBytes::from_string(message.to_owned())))
    };
    if kafka.mechanism.as_deref() != Some("PLAIN") {
        return Err(failed("SaslHandshake with the PLAIN mechanism first"));
    }
    let Some(token) = plain_password(&auth_bytes) else {
        return Err(failed(
            "a PLAIN message is [authzid] NUL username NUL password",
        ));
    };
    match kafka.core().authenticator().authenticate(Some(token)) {
        Ok(principal) => {
            kafka.authenticated_as(principal);
            Ok(SaslAuthenticateResponse::default())
        }
        Err(_) => {
            tracing::info!(peer = %kafka.peer, "kafka: SASL authentication failed");
            Err(failed(
                "authentication failed: the password must be one of the node's tokens",
            ))
        }
    }
}

/// The password of a PLAIN message (RFC 4616): `[authzid] NUL authcid NUL passwd`. The user
/// name is not checked: the token is the credential.
fn plain_password(message: &[u8]) -> Option<&str> {
    let mut parts = message.split(|b| *b == 0);
    let (_authzid, _user, password) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || password.is_empty() {
        return None;
    }
    std::str::from_utf8(password).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_messages_give_their_password_and_malformed_ones_nothing() {
        assert_eq!(plain_password(b"\0user\0secret"), Some("secret"));
        assert_eq!(plain_password(b"admin\0user\0secret"), Some("secret"));
        assert_eq!(plain_password(b"\0user\0"), None);
        assert_eq!(plain_password(b"user secret"), None);
        assert_eq!(plain_password(b"\0a\0b\0c"), None);
        assert_eq!(plain_password(b"\0user\0\xff"), None);
    }
}
