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

/// Reads one HTTP request (headers and a Content-Length body) so the reply is not met by a reset.
async fn read_request(sock: &mut TcpStream) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let headers = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    let body_len: usize = headers
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut have = buf.len() - header_end;
    while have < body_len {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        have += n;
    }
    Ok(())
}

/// Starts the fake server; returns its endpoint URL.
async fn fake_s3(answer: Answer) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                // Keep-alive: answer every request on the connection.
                while read_request(&mut sock).await.is_ok() {
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

#[tokio::test]
async fn plain_http_needs_allow_http() {
    let mut c = config("http://127.0.0.1:1".to_owned());
    c.allow_http = false;
    let err = AwsS3Backend::new(c).await.unwrap_err();
    assert_eq!(err.kind(), "config");
}
