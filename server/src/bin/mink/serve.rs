//! `mink serve`: a node's run until it is asked to stop, with its logs and signals; a node whose
//! lease was lost rejoins in place as its next incarnation.

use mink_server::{Node, Settings};
use tracing_subscriber::EnvFilter;

use crate::flags::{LogFormat, ServeArgs};

fn init_logs(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// SIGTERM and Ctrl-C, listened for from the moment this is made to the end of the process.
///
/// Made before the node starts: a signal that comes while it starts (a WAL recovery, a metadata
/// store still out of reach) must stop it, not kill the process by the signal's default action,
/// and one listener for the whole run misses no signal between two waits.
struct StopSignals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listen = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for {name}");
                    None
                }
            };
            StopSignals {
                term: listen(SignalKind::terminate(), "SIGTERM"),
                interrupt: listen(SignalKind::interrupt(), "Ctrl-C"),
            }
        }
        #[cfg(not(unix))]
        StopSignals {}
    }

    /// Resolves on the next SIGTERM or Ctrl-C.
    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            async fn next(signal: &mut Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            tokio::select! {
                () = next(&mut self.interrupt) => tracing::info!("Ctrl-C received"),
                () = next(&mut self.term) => tracing::info!("SIGTERM received"),
            }
        }
        #[cfg(not(unix))]
        {
            if let Err(e) = tokio::signal::ctrl_c().await {
                tracing::warn!(error = %e, "cannot listen for Ctrl-C");
                std::future::pending::<()>().await;
            }
            tracing::info!("Ctrl-C received");
        }
    }
}

/// How a node that started stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stopped {
    /// Asked to (SIGTERM, Ctrl-C), and shut down cleanly.
    Asked,
    /// Its WAL failed for good or its lease was lost: it exits for a supervisor to restart it.
    WalFailed,
}

/// How long a node that lost its lease waits between attempts to rejoin (the metadata store may
/// still be out of reach: a partition).
const REJOIN_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

async fn start(settings: &Settings) -> Result<Node, String> {
    mink_server::NodeBuilder::from_settings(settings.clone())
        .await
        .map_err(|e| e.to_string())?
        .start()
        .await
        .map_err(|e| e.to_string())
}

pub(crate) async fn serve(args: ServeArgs) -> Result<Stopped, String> {
    let log_format = args.log_format.unwrap_or(LogFormat::Text);
    init_logs(log_format);
    let settings = args.settings()?;
    let mut signals = StopSignals::listen();
    let mut node = tokio::select! {
        started = start(&settings) => started?,
        () = signals.recv() => {
            // What a start did so far is what a crash leaves, which recovery is made for.
            tracing::info!("asked to stop while starting; the node exits without serving");
            return Ok(Stopped::Asked);
        }
    };
    loop {
        let failed = node.failed();
        tokio::select! {
            () = signals.recv() => {
                Node::shutdown(node).await.map_err(|e| e.to_string())?;
                return Ok(Stopped::Asked);
            }
            reason = failed => {
                if node.lease_lost() {
                    // Paused or cut off past the lease: this life acknowledges nothing more and
                    // another node recovers it. The node id joins again as a new incarnation.
                    tracing::error!(%reason, "the node's lease was lost; rejoining as a new incarnation");
                    node.abandon().await;
                    match rejoin(&settings, &mut signals).await {
                        Some(next) => {
                            node = next;
                            continue;
                        }
                        None => return Ok(Stopped::Asked),
                    }
                }
                // Not reopened in place: the restart's recovery replays the WAL objects that
                // landed. Until then /healthz answers 503 with the reason, so the supervisor
                // sees why.
                let delay = node.settings().node.exit_delay_on_wal_failure;
                tracing::error!(
                    %reason,
                    exit_in_ms = delay.as_millis() as u64,
                    status = mink_server::node::EXIT_WAL_FAILED,
                    "the node can no longer serve appends; it refuses them and exits to be restarted"
                );
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = signals.recv() => {}
                }
                node.abort();
                return Ok(Stopped::WalFailed);
            }
        }
    }
}

/// Starts the next life of the node, trying again until it succeeds; `None` when asked to stop
/// meanwhile.
async fn rejoin(settings: &Settings, signals: &mut StopSignals) -> Option<Node> {
    loop {
        tokio::select! {
            () = signals.recv() => return None,
            started = start(settings) => match started {
                Ok(node) => {
                    tracing::info!("rejoined");
                    return Some(node);
                }
                Err(message) => {
                    tracing::warn!(%message, "cannot rejoin yet; trying again");
                }
            },
        }
        tokio::select! {
            () = signals.recv() => return None,
            () = tokio::time::sleep(REJOIN_RETRY) => {}
        }
    }
}
