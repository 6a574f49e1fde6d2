//! The accept loop: connection limits, TLS, and one task per connection served by hyper.
//!
//! A connection past `http.max_connections`, or past `http.max_connections_per_client` for its
//! peer's IP address, is closed as soon as it is accepted, before a byte is read (counted in
//! `mink_http_connections_refused_total`; `mink_http_connections` is the gauge of open ones).
//! An accept error that is about one connection (reset before it was accepted) is skipped; any
//! other (out of file descriptors, of memory) is logged and the loop pauses briefly, so it
//! neither spins nor stops serving. When the core's shutdown signal fires the listener closes,
//! every connection is asked to finish (idle ones close at once, requests in flight are
//! answered) and the loop returns once the last one has ended; `Node::shutdown` bounds that
//! wait by `http.shutdown_grace_ms`.
//!
//! Every front end (HTTP, Flight, Kafka) binds with [`bind`], whose queue of connections not
//! yet accepted holds [`LISTEN_BACKLOG`]: with tokio's default of 1,024, a burst of a thousand
//! writers connecting while the node was busy overflowed it, and the kernel's SYN cookies
//! then answered some of them with a reset.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use super::connection::{Activity, ConnectionService, TimedIo, Timeouts};
use crate::settings::HttpSettings;

/// Connections the kernel queues for a listener before they are accepted (it caps the value at
/// `net.core.somaxconn`, 4,096 on current Linux).
pub(crate) const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` (with `SO_REUSEADDR`, as tokio's own `bind`) whose accept queue holds
/// [`LISTEN_BACKLOG`] connections.
pub(crate) fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// How long the loop waits after an accept error that is not about one connection.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// The metrics of one listener's connections.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionGauges {
    /// Open now.
    pub(crate) open: Gauge,
    /// Closed at accept by a limit.
    pub(crate) refused: Counter,
}

/// Open connections, in all and per client address.
#[derive(Debug)]
struct ConnectionLimits {
    max: usize,
    per_client: usize,
    open: Mutex<Open>,
    gauges: ConnectionGauges,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_client: HashMap<IpAddr, usize>,
}

impl ConnectionLimits {
    fn new(settings: &HttpSettings, gauges: ConnectionGauges) -> Arc<Self> {
        Arc::new(ConnectionLimits {
            max: settings.max_connections,
            per_client: settings.max_connections_per_client,
            open: Mutex::new(Open::default()),
            gauges,
        })
    }

    /// A slot for a connection from `client`, or `None` (counted) when a limit is reached.
    fn admit(self: &Arc<Self>, client: IpAddr) -> Option<Slot> {
        let client = client_of(client);
        let mut open = self.open.lock();
        let of_client = open.by_client.get(&client).copied().unwrap_or(0);
        if open.total >= self.max || of_client >= self.per_client {
            let (limit, setting) = if open.total >= self.max {
                (self.max, "http.max_connections")
            } else {
                (self.per_client, "http.max_connections_per_client")
            };
            drop(open);
            self.gauges.refused.inc();
            tracing::debug!(%client, limit, setting, "connection refused at accept");
            return None;
        }
        open.total += 1;
        open.by_client.insert(client, of_client + 1);
        drop(open);
        self.gauges.open.inc();
        Some(Slot {
            limits: Arc::clone(self),
            client,
        })
    }
}

/// The client a per-client limit counts an address as: an IPv4 address reaching an IPv6 socket
/// is the same client as over IPv4, and an IPv6 address stands for its /64 (one host or one
/// site's network is given a /64, and picks addresses in it at will).
pub(crate) fn client_of(address: IpAddr) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V6(v6) => {
            let mut segments = v6.segments();
            segments[4..].fill(0);
            IpAddr::V6(segments.into())
        }
        v4 => v4,
    }
}

/// One admitted connection; frees its place when dropped.
#[derive(Debug)]
struct Slot {
    limits: Arc<ConnectionLimits>,
    client: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.limits.open.lock();
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.by_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                open.by_client.remove(&self.client);
            }
        }
        drop(open);
        self.limits.gauges.open.dec();
    }
}

/// Whether to pause after an accept error: not for one that concerns a single connection.
fn accept_pause(error: &io::Error) -> Option<Duration> {
    match error.kind() {
        io::ErrorKind::ConnectionAborted
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionRefused
        | io::ErrorKind::Interrupted
        | io::ErrorKind::WouldBlock => None,
        _ => Some(ACCEPT_PAUSE),
    }
}

/// What every connection task shares.
struct Shared {
    app: Router,
    builder: auto::Builder<TokioExecutor>,
    tls: Option<TlsAcceptor>,
    timeouts: Timeouts,
}

/// Serves `app` on `listener` until `stop` fires and the last connection has ended, with the
/// connection limits and timeouts of `settings`, counted in `gauges`. The HTTP API and the
/// Flight front end (gRPC over HTTP/2) are both served this way.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsAcceptor>,
    settings: &HttpSettings,
    gauges: ConnectionGauges,
    stop: CancellationToken,
) -> io::Result<()> {
    let limits = ConnectionLimits::new(settings, gauges);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The timer serves hyper's HTTP/2 keep-alive; header and idle clocks are `connection.rs`'s.
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new());
    let shared = Arc::new(Shared {
        app,
        builder,
        tls,
        timeouts: Timeouts {
            header: settings.header_timeout,
            idle: settings.idle_timeout,
            write: settings.write_timeout,
        },
    });
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                if let Some(pause) = accept_pause(&error) {
                    tracing::warn!(%error, ?pause, "cannot accept connections; pausing");
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(pause) => {}
                    }
                }
                continue;
            }
        };
        let Some(slot) = limits.admit(peer.ip()) else {
            drop(tcp);
            continue;
        };
        // No Nagle: SSE events are small writes that must leave at once, not after the
        // peer's delayed ACK (~40 ms).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        tokio::spawn(connection(
            tcp,
            peer,
            slot,
            graceful.watcher(),
            Arc::clone(&shared),
        ));
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    slot: Slot,
    watcher: Watcher,
    shared: Arc<Shared>,
) {
    let activity = Activity::new();
    match &shared.tls {
        None => drive(tcp, peer, activity, watcher, &shared).await,
        Some(acceptor) => {
            // The handshake counts as part of the first request's head.
            let handshake = tokio::time::timeout(shared.timeouts.header, acceptor.accept(tcp));
            match handshake.await {
                Ok(Ok(stream)) => drive(stream, peer, activity, watcher, &shared).await,
                Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        }
    }
    drop(slot);
}

async fn drive<I>(
    io: I,
    peer: SocketAddr,
    activity: Arc<Activity>,
    watcher: Watcher,
    shared: &Shared,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(TimedIo::new(io, activity.clone(), shared.timeouts.write));
    let service = ConnectionService {
        app: shared.app.clone(),
        peer,
        activity: activity.clone(),
    };
    let served = watcher.watch(shared.builder.serve_connection(io, service).into_owned());
    tokio::select! {
        result = served => {
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        }
        why = activity.expired(shared.timeouts) => {
            tracing::debug!(%peer, why, "connection closed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_client_counts_as_its_slash_64_and_a_mapped_ipv4_as_itself() {
        let parse = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            client_of(parse("2001:db8:1:2:aaaa:bbbb:cccc:dddd")),
            parse("2001:db8:1:2::")
        );
        assert_eq!(
            client_of(parse("2001:db8:1:2::1")),
            client_of(parse("2001:db8:1:2:ffff::9"))
        );
        assert_ne!(
            client_of(parse("2001:db8:1:2::1")),
            client_of(parse("2001:db8:1:3::1"))
        );
        assert_eq!(client_of(parse("::ffff:10.0.0.7")), parse("10.0.0.7"));
        assert_eq!(client_of(parse("10.0.0.7")), parse("10.0.0.7"));
    }

    #[test]
    fn connections_past_a_limit_are_refused_and_closed_ones_free_their_place() {
        let metrics = Arc::new(crate::metrics::Metrics::new(None));
        let settings = HttpSettings {
            max_connections: 3,
            max_connections_per_client: 2,
            ..HttpSettings::default()
        };
        let gauges = ConnectionGauges {
            open: metrics.connections.clone(),
            refused: metrics.connections_refused.clone(),
        };
        let limits = ConnectionLimits::new(&settings, gauges);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "::ffff:127.0.0.2".parse().unwrap();
        let c: IpAddr = "127.0.0.3".parse().unwrap();
        let first = limits.admit(a).unwrap();
        let _second = limits.admit(a).unwrap();
        assert!(limits.admit(a).is_none(), "a third from one client");
        let _third = limits.admit(b).unwrap();
        assert!(
            limits.admit("127.0.0.2".parse().unwrap()).is_none(),
            "the mapped address is the same client"
        );
        assert!(limits.admit(c).is_none(), "a fourth in all");
        assert_eq!(metrics.connections.get(), 3);
        assert_eq!(metrics.connections_refused.get(), 3);
        drop(first);
        let _fourth = limits.admit(c).unwrap();
        assert_eq!(metrics.connections.get(), 3);
    }

    #[test]
    fn only_accept_errors_that_are_not_about_one_connection_pause_the_loop() {
        let emfile = io::Error::from_raw_os_error(24);
        assert_eq!(accept_pause(&emfile), Some(ACCEPT_PAUSE));
        let aborted = io::Error::from(io::ErrorKind::ConnectionAborted);
        assert_eq!(accept_pause(&aborted), None);
    }
}
