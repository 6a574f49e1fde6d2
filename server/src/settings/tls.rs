//! `[http.tls]`: TLS for the HTTP API (rustls), from a PEM certificate chain and private key.
//!
//! Both files or neither: with neither the API speaks plain HTTP. The files are read when the
//! node starts, and a missing, unreadable or mismatched file stops the start with a message that
//! names the setting (`http/tls.rs`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where the certificate and key are.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSettings {
    /// PEM file of the certificate chain, leaf first. Default none (plain HTTP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// PEM file of the private key (PKCS#8, PKCS#1 or SEC1). Default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

impl TlsSettings {
    /// Whether the API is served over TLS.
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some()
    }

    /// Refuses one file without the other.
    pub fn validate(&self) -> Result<(), String> {
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => Err("http.tls.key_file is required with http.tls.cert_file".into()),
            (None, Some(_)) => Err("http.tls.cert_file is required with http.tls.key_file".into()),
            _ => Ok(()),
        }
    }
}
