//! SaslHandshake and SaslAuthenticate request bodies.

use bytes::Bytes;

use super::{Reader, WireResult};

/// SaslHandshake: the mechanism the client wants.
pub(crate) fn sasl_handshake(r: &mut Reader, _version: i16) -> WireResult<String> {
    let mechanism = r.string()?;
    r.tagged_fields()?;
    Ok(mechanism)
}

/// SaslAuthenticate: the mechanism's bytes.
pub(crate) fn sasl_authenticate(r: &mut Reader, _version: i16) -> WireResult<Bytes> {
    let bytes = r.bytes()?;
    r.tagged_fields()?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::*;

    #[test]
    fn sasl_requests_decode_as_the_crate_encodes_them() {
        let handshake =
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
        let mut buf = BytesMut::new();
        handshake.encode(&mut buf, 1).unwrap();
        let mut r = Reader::new(buf.freeze(), false);
        assert_eq!(sasl_handshake(&mut r, 1).unwrap(), "PLAIN");
        for v in 0..=2 {
            let auth = SaslAuthenticateRequest::default()
                .with_auth_bytes(Bytes::from_static(b"\0user\0secret"));
            let mut buf = BytesMut::new();
            auth.encode(&mut buf, v).unwrap();
            let mut r = Reader::new(buf.freeze(), v >= 2);
            assert_eq!(
                sasl_authenticate(&mut r, v).unwrap(),
                Bytes::from_static(b"\0user\0secret")
            );
            assert_eq!(r.remaining(), 0);
        }
    }
}
