//! The Kafka listener: accepts connections within `kafka.max_connections` and serves each on
//! its own task until the node shuts down.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::task::JoinHandle;

use super::connection;
use super::groups::Coordinator;
use super::state::{Kafka, Shared};
use crate::core::NodeCore;

/// How long a client has for its TLS handshake.
const TLS_HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(10);

/// A running Kafka front end.
pub(crate) struct KafkaServer {
    /// The address it listens on.
    pub(crate) addr: SocketAddr,
    /// The `host:port` it tells clients (`kafka.advertise`, else the bound address).
    pub(crate) advertised: String,
    /// The accept loop; it ends with the core's shutdown.
    pub(crate) task: JoinHandle<std::io::Result<()>>,
}

/// Binds `addr` and serves Kafka as broker `broker_id` until the core shuts down.
pub(crate) async fn start(
    core: Arc<NodeCore>,
    addr: SocketAddr,
    broker_id: i32,
) -> std::io::Result<KafkaServer> {
    let listener = crate::http::bind(addr)?;
    let bound = listener.local_addr()?;
    let (host, port) = match &core.settings().kafka.advertise {
        Some(advertise) => {
            let (host, port) = advertise.rsplit_once(':').unwrap_or((advertise, "9092"));
            (host.to_owned(), port.parse().unwrap_or(9092))
        }
        None => (bound.ip().to_string(), i32::from(bound.port())),
    };
    // The HTTP API's certificate: Kafka clients connect with `security.protocol=SSL` (or
    // `SASL_SSL`) when the node has one.
    let tls = crate::http::tls::plain_acceptor(&core.settings().http.tls)?;
    let groups = Coordinator::new(&core.settings().kafka);
    groups.start_ticking(core.shutdown_signal().clone());
    let advertised = format!("{host}:{port}");
    let shared = Shared {
        core: core.clone(),
        host,
        port,
        broker_id,
        groups,
    };
    let open = Arc::new(AtomicUsize::new(0));
    let limit = core.settings().kafka.max_connections;
    let task = tokio::spawn(async move {
        let shutdown = core.shutdown_signal().clone();
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = shutdown.cancelled() => return Ok(()),
            };
            let Ok((stream, peer)) = accepted else {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            };
            let metrics = core.metrics().clone();
            if open.fetch_add(1, Ordering::AcqRel) >= limit {
                open.fetch_sub(1, Ordering::AcqRel);
                metrics.kafka.connections_refused.inc();
                tracing::debug!(%peer, limit, "kafka: kafka.max_connections reached; connection closed");
                continue;
            }
            let _ = stream.set_nodelay(true);
            let kafka = Kafka::new(&shared, peer);
            let open = open.clone();
            let tls = tls.clone();
            metrics.kafka.connections.inc();
            tokio::spawn(async move {
                match tls {
                    None => connection::serve(kafka, stream).await,
                    Some(tls) => {
                        match tokio::time::timeout(TLS_HANDSHAKE, tls.accept(stream)).await {
                            Ok(Ok(stream)) => connection::serve(kafka, stream).await,
                            _ => {
                                tracing::debug!(%peer, "kafka: the TLS handshake failed or timed out")
                            }
                        }
                    }
                }
                open.fetch_sub(1, Ordering::AcqRel);
                metrics.kafka.connections.dec();
            });
        }
    });
    tracing::info!(%bound, "kafka front end listening");
    Ok(KafkaServer {
        addr: bound,
        advertised,
        task,
    })
}
