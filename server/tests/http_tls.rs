//! TLS for the HTTP API (`[http.tls]`): a node with a self-signed certificate answers over
//! HTTPS and not over plain HTTP, and unusable certificate or key files stop the start with a
//! message naming the setting to fix.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mink_metadata::MemoryKv;
use mink_s3stream::storage::ObjectStoreBackend;
use mink_server::{Node, NodeError, Settings};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::crypto::aws_lc_rs;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// A self-signed certificate for `localhost` and its key, as PEM files `{name}.crt`/`{name}.key`.
fn certificate(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, generated.cert.pem()).unwrap();
    std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

async fn start(cert_file: PathBuf, key_file: PathBuf) -> Result<Node, NodeError> {
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        flight: mink_server::settings::FlightSettings {
            listen: None,
            ..Default::default()
        },
        kafka: mink_server::settings::KafkaSettings {
            listen: None,
            ..Default::default()
        },
        ..Settings::default()
    };
    settings.http.tls.cert_file = Some(cert_file);
    settings.http.tls.key_file = Some(key_file);
    Node::builder()
        .settings(settings)
        .object_store(Arc::new(ObjectStoreBackend::memory()))
        .metadata(Arc::new(MemoryKv::new()))
        .start()
        .await
}

/// A client that trusts only `cert`.
fn connector(cert: &Path) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(cert).unwrap())
        .unwrap();
    let config = ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_over_tls_only() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = certificate(dir.path(), "node");
    let node = start(cert.clone(), key).await.unwrap();
    assert!(node.url().starts_with("https://"), "{}", node.url());

    let tcp = TcpStream::connect(node.addr()).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = connector(&cert).connect(name, tcp).await.unwrap();
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    // The node ends the stream after the answer; what came before the end is the answer.
    let _ = tls.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"status\":\"ok\""), "{answer}");

    let plain = reqwest::get(format!("http://{}/healthz", node.addr())).await;
    assert!(
        plain.is_err(),
        "plain HTTP got an answer from the TLS port: {plain:?}"
    );
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_tls_files_stop_the_start_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = certificate(dir.path(), "one");
    let (_, other_key) = certificate(dir.path(), "two");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "not a certificate").unwrap();
    let missing = dir.path().join("missing.pem");
    let cases = [
        (missing.clone(), key.clone(), "http.tls.cert_file"),
        (not_pem.clone(), key.clone(), "http.tls.cert_file"),
        (cert.clone(), missing, "http.tls.key_file"),
        (cert.clone(), not_pem, "http.tls.key_file"),
        (cert, other_key, "does not go with http.tls.cert_file"),
    ];
    for (cert_file, key_file, expected) in cases {
        let what = format!("{} + {}", cert_file.display(), key_file.display());
        let error = start(cert_file, key_file).await.unwrap_err().to_string();
        assert!(error.contains(expected), "{what}: {error}");
    }
}
