//! Error mapping of both S3 backends against a fake S3 server that answers every request with a
//! fixed status (or never answers), for the failures a real test server cannot produce on demand.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// How the fake server answers.
#[derive(Clone, Copy)]
enum Answer {
    Status(&'static str, &'static str),
    Silence,
}

/// One request as the fake server read it: the head (lowercased) and the body.
struct Request {
    head: String,
    body: Vec<u8>,
}

impl Request {
    /// The value of header `name` (lowercase), if the request has it.
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key == name).then(|| value.trim())
        })
    }
}

/// Reads one HTTP request (headers and a Content-Length body) so the reply is not met by a reset;
/// `None` when the connection ends first.
async fn read_request(sock: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    let body_len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = buf.split_off(header_end);
    while body.len() < body_len {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(Some(Request { head, body }))
}

/// Starts the fake server; returns its endpoint URL.
async fn fake_s3(answer: Answer) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                // Keep-alive: answer every request on the connection.
                while let Ok(Some(_)) = read_request(&mut sock).await {
                    match answer {
                        Answer::Silence => {
                            tokio::time::sleep(Duration::from_secs(60)).await;
                            return;
                        }
                        Answer::Status(status, code) => {
                            let body = format!(
                                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
                                 <Message>fake</Message><RequestId>1</RequestId></Error>"
                            );
                            let reply = format!(
                                "HTTP/1.1 {status}\r\ncontent-type: application/xml\r\n\
                                 content-length: {}\r\nx-amz-request-id: 1\r\n\r\n{body}",
                                body.len()
                            );
                            if sock.write_all(reply.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

fn config(endpoint: String) -> S3Config {
    S3Config {
        max_retries: 0,
        request_timeout_ms: 300,
        ..S3Config::local_server(endpoint, "fake-bucket", "us-east-1", "ak", "sk")
    }
}

async fn backends(answer: Answer) -> Vec<Box<dyn ObjectStorage>> {
    let endpoint = fake_s3(answer).await;
    vec![
        Box::new(ObjectStoreBackend::s3(&config(endpoint.clone())).unwrap()),
        Box::new(AwsS3Backend::new(config(endpoint)).await.unwrap()),
    ]
}

#[tokio::test]
async fn slow_down_is_throttled() {
    for store in backends(Answer::Status("503 Slow Down", "SlowDown")).await {
        let err = store.put("k", Bytes::from_static(b"x")).await.unwrap_err();
        assert!(
            matches!(
                err,
                StorageError::Throttled {
                    op: StorageOp::Put,
                    ..
                }
            ),
            "{}: {err:?}",
            store.name()
        );
        assert!(err.is_retryable());
        let err = store.get("k").await.unwrap_err();
        assert_eq!(err.kind(), "throttled", "{}: {err:?}", store.name());
    }
}

#[tokio::test]
async fn internal_error_is_unavailable() {
    for store in backends(Answer::Status("500 Internal Server Error", "InternalError")).await {
        let err = store.head("k").await.unwrap_err();
        assert_eq!(err.kind(), "unavailable", "{}: {err:?}", store.name());
        assert!(err.is_retryable());
    }
}

#[tokio::test]
async fn access_denied_is_other_and_final() {
    for store in backends(Answer::Status("403 Forbidden", "AccessDenied")).await {
        let err = store.put("k", Bytes::from_static(b"x")).await.unwrap_err();
        assert_eq!(err.kind(), "other", "{}: {err:?}", store.name());
        assert!(!err.is_retryable());
    }
}

#[tokio::test]
async fn precondition_failed_is_precondition() {
    for store in backends(Answer::Status(
        "412 Precondition Failed",
        "PreconditionFailed",
    ))
    .await
    {
        let err = store
            .put_if_absent("k", Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert!(err.is_precondition(), "{}: {err:?}", store.name());
    }
}

#[tokio::test]
async fn a_silent_server_times_out() {
    for store in backends(Answer::Silence).await {
        let started = std::time::Instant::now();
        let err = store.put("k", Bytes::from_static(b"x")).await.unwrap_err();
        assert_eq!(err.kind(), "timeout", "{}: {err:?}", store.name());
        assert!(err.is_retryable());
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}: took {:?}",
            store.name(),
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn refused_connections_are_unavailable() {
    // Bind and drop to get a port with nothing listening.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let stores: Vec<Box<dyn ObjectStorage>> = vec![
        Box::new(ObjectStoreBackend::s3(&config(endpoint.clone())).unwrap()),
        Box::new(AwsS3Backend::new(config(endpoint)).await.unwrap()),
    ];
    for store in stores {
        let err = store.get("k").await.unwrap_err();
        assert_eq!(err.kind(), "unavailable", "{}: {err:?}", store.name());
    }
}

/// Starts a fake server that answers every request `200 OK` and hands each request it read to
/// the returned channel; returns its endpoint URL.
async fn recording_s3() -> (String, tokio::sync::mpsc::UnboundedReceiver<Request>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Ok(Some(request)) = read_request(&mut sock).await {
                    let _ = tx.send(request);
                    let reply = "HTTP/1.1 200 OK\r\netag: \"e1\"\r\ncontent-length: 0\r\n\r\n";
                    if sock.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), rx)
}

#[tokio::test]
async fn put_integrity_decides_what_a_put_proves_to_the_store() {
    let body = Bytes::from(vec![7u8; 100_000]);
    for integrity in [
        PutIntegrity::Crc64Nvme,
        PutIntegrity::Signed,
        PutIntegrity::None,
    ] {
        let (endpoint, mut requests) = recording_s3().await;
        let store = ObjectStoreBackend::s3(&S3Config {
            put_integrity: integrity,
            ..config(endpoint)
        })
        .unwrap();
        store.put("k", body.clone()).await.unwrap();
        let put = requests.recv().await.unwrap();
        assert!(put.head.starts_with("put "), "{integrity:?}: {}", put.head);
        assert_eq!(put.body, body, "{integrity:?}: the body arrives whole");
        let content_hash = put.header("x-amz-content-sha256").unwrap_or_default();
        let checksum = put.header("x-amz-checksum-crc64nvme");
        match integrity {
            PutIntegrity::Crc64Nvme => {
                assert_eq!(content_hash, "unsigned-payload", "{}", put.head);
                let checksum = checksum.expect("a CRC64-NVME checksum header");
                // Base64 of 8 bytes: 12 characters, the last one padding.
                assert_eq!(checksum.len(), 12, "{checksum}");
                assert!(checksum.ends_with('='), "{checksum}");
            }
            PutIntegrity::Signed => {
                assert_eq!(
                    content_hash.len(),
                    64,
                    "the body's SHA-256 in hex: {}",
                    put.head
                );
                assert!(content_hash.bytes().all(|b| b.is_ascii_hexdigit()));
                assert!(checksum.is_none(), "{}", put.head);
            }
            PutIntegrity::None => {
                assert_eq!(content_hash, "unsigned-payload", "{}", put.head);
                assert!(checksum.is_none(), "{}", put.head);
            }
        }
    }
}

#[tokio::test]
async fn crc64nvme_checksums_differ_for_different_bodies() {
    let (endpoint, mut requests) = recording_s3().await;
    let store = ObjectStoreBackend::s3(&config(endpoint)).unwrap();
    store
        .put("a", Bytes::from_static(b"one body"))
        .await
        .unwrap();
    store
        .put("b", Bytes::from_static(b"another body"))
        .await
        .unwrap();
    let first = requests.recv().await.unwrap();
    let second = requests.recv().await.unwrap();
    assert_ne!(
        first.header("x-amz-checksum-crc64nvme"),
        second.header("x-amz-checksum-crc64nvme"),
        "the checksum is the body's"
    );
}

#[tokio::test]
async fn plain_http_needs_allow_http() {
    let mut c = config("http://127.0.0.1:1".to_owned());
    c.allow_http = false;
    let err = AwsS3Backend::new(c).await.unwrap_err();
    assert_eq!(err.kind(), "config");
}
