//! TLS for the HTTP API: the rustls server configuration built from `[http.tls]`.
//!
//! The files are read once, at start. A missing or unreadable file, a file without a
//! certificate or key, or a key that does not belong to the certificate stops the start with a
//! message naming the setting to fix. Connections negotiate HTTP/2 or HTTP/1.1 by ALPN.

use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::aws_lc_rs;

use crate::settings::TlsSettings;

/// The acceptor of the settings, or `None` when TLS is not configured.
pub(super) fn acceptor(settings: &TlsSettings) -> io::Result<Option<TlsAcceptor>> {
    let Some(mut config) = server_config(settings)? else {
        return Ok(None);
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(TlsAcceptor::from(Arc::new(config))))
}

/// The acceptor of the settings with no application protocol negotiated (the Kafka front
/// end's), or `None` when TLS is not configured.
pub(crate) fn plain_acceptor(settings: &TlsSettings) -> io::Result<Option<TlsAcceptor>> {
    Ok(server_config(settings)?.map(|config| TlsAcceptor::from(Arc::new(config))))
}

/// The rustls configuration of the settings, or `None` when TLS is not configured.
fn server_config(settings: &TlsSettings) -> io::Result<Option<ServerConfig>> {
    let (Some(cert_file), Some(key_file)) = (&settings.cert_file, &settings.key_file) else {
        return Ok(None);
    };
    let certs = CertificateDer::pem_file_iter(cert_file)
        .map_err(|e| invalid("http.tls.cert_file", cert_file, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid("http.tls.cert_file", cert_file, &e))?;
    if certs.is_empty() {
        return Err(invalid(
            "http.tls.cert_file",
            cert_file,
            &"no CERTIFICATE section",
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| invalid("http.tls.key_file", key_file, &e))?;
    // The provider is named rather than taken from the process default, which rustls cannot
    // choose when a build links more than one.
    let config = ServerConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "http.tls.key_file `{}` does not go with http.tls.cert_file `{}`: {e}",
                    key_file.display(),
                    cert_file.display()
                ),
            )
        })?;
    Ok(Some(config))
}

fn invalid(setting: &str, path: &Path, error: &dyn std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{setting} `{}`: {error}", path.display()),
    )
}
