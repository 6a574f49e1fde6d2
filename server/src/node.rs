//! Assembling and running a node.
//!
//! Components come in through [`NodeBuilder`] (`Node::builder().object_store(..).metadata(..)`),
//! so a test starts a node in-process on `127.0.0.1:0` against memory or local-file storage; the
//! binary builds them from [`Settings`] with [`NodeBuilder::from_settings`].
//!
//! Start: open the metadata log, open the s3stream engine (which replays this node's WAL), bind
//! the listener, serve. Shutdown ([`Node::shutdown`], or SIGTERM/Ctrl-C in the binary): parked
//! long-polls and SSE streams return, the listener stops accepting, in-flight requests (appends)
//! finish, every open tablet is closed (writer snapshot, stream closed), the engine flushes and
//! compacts, and the node reports how it went.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mink_metadata::{EtcdKv, MemoryKv, MetaKv, Metadata, MetadataOptions, RedbKv};
use mink_s3stream::engine::Engine;
use mink_s3stream::storage::{ObjectStorage, ObjectStoreBackend};
use mink_tablet::TabletSettings;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState, RateLimiter};
use crate::log::{LogProvider, Logs};
use crate::metrics::Metrics;
use crate::settings::{MetadataBackend, Settings, StorageBackend};
use crate::tables::Tables;
use crate::tablets::TabletProvider;

/// Why a node could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// A component is missing from the builder.
    #[error("the node builder needs {what}")]
    Missing {
        /// What is missing.
        what: &'static str,
    },
    /// The settings are unusable.
    #[error("invalid settings: {message}")]
    Settings {
        /// What is wrong.
        message: String,
    },
    /// The object store could not be set up.
    #[error("object storage ({what}): {source}")]
    Storage {
        /// Which store.
        what: &'static str,
        /// The cause.
        #[source]
        source: mink_s3stream::storage::StorageError,
    },
    /// Metadata could not be opened.
    #[error("metadata: {source}")]
    Metadata {
        /// The cause.
        #[from]
        source: mink_metadata::MetaError,
    },
    /// The stream engine failed to open or shut down.
    #[error("stream engine: {source}")]
    Engine {
        /// The cause.
        #[from]
        source: mink_s3stream::error::StreamError,
    },
    /// The listener could not be bound or failed.
    #[error("HTTP listener on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Closing tablets at shutdown failed.
    #[error("closing tablets: {message}")]
    Close {
        /// What failed.
        message: String,
    },
}

/// Builds a [`Node`].
#[derive(Default)]
pub struct NodeBuilder {
    settings: Settings,
    wal_store: Option<Arc<dyn ObjectStorage>>,
    data_store: Option<Arc<dyn ObjectStorage>>,
    metadata: Option<Arc<dyn MetaKv>>,
    tablet_settings: TabletSettings,
}

impl std::fmt::Debug for NodeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeBuilder")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl NodeBuilder {
    /// Settings (default: [`Settings::default`]).
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// The object store for WAL objects, and for data objects unless [`Self::data_store`] is set.
    pub fn object_store(mut self, store: Arc<dyn ObjectStorage>) -> Self {
        self.wal_store = Some(store);
        self
    }

    /// A separate object store for committed (compacted) objects.
    pub fn data_store(mut self, store: Arc<dyn ObjectStorage>) -> Self {
        self.data_store = Some(store);
        self
    }

    /// The metadata KV.
    pub fn metadata(mut self, kv: Arc<dyn MetaKv>) -> Self {
        self.metadata = Some(kv);
        self
    }

    /// Tablet settings (writer TTL, snapshot cadence).
    pub fn tablet_settings(mut self, settings: TabletSettings) -> Self {
        self.tablet_settings = settings;
        self
    }

    /// A builder with every component made from `settings`: the object store and metadata
    /// backends they name.
    pub async fn from_settings(settings: Settings) -> Result<Self, NodeError> {
        let storage = |what: &'static str| move |source| NodeError::Storage { what, source };
        let (wal, data): Stores = match settings.storage.backend {
            StorageBackend::Local => {
                let dir = settings.local_objects_dir();
                std::fs::create_dir_all(&dir).map_err(|e| NodeError::Settings {
                    message: format!("cannot create {}: {e}", dir.display()),
                })?;
                (
                    Arc::new(ObjectStoreBackend::local(&dir).map_err(storage("local"))?),
                    None,
                )
            }
            StorageBackend::Memory => (Arc::new(ObjectStoreBackend::memory()), None),
            StorageBackend::S3 => {
                let s3 = &settings.storage.s3;
                if s3.bucket.is_empty() {
                    return Err(NodeError::Settings {
                        message: "storage.s3.bucket (--s3-bucket) is required for S3".to_owned(),
                    });
                }
                let wal: Arc<dyn ObjectStorage> =
                    Arc::new(ObjectStoreBackend::s3(s3).map_err(storage("S3 WAL bucket"))?);
                let data = match &settings.storage.data_bucket {
                    Some(bucket) if *bucket != s3.bucket => {
                        let mut config = s3.clone();
                        config.bucket = bucket.clone();
                        Some(Arc::new(
                            ObjectStoreBackend::s3(&config).map_err(storage("S3 data bucket"))?,
                        ) as Arc<dyn ObjectStorage>)
                    }
                    _ => None,
                };
                (wal, data)
            }
        };
        let (wal, data) = inject_faults(&settings, wal, data)?;
        let kv: Arc<dyn MetaKv> = match settings.metadata.backend {
            MetadataBackend::Redb => {
                let path = settings.redb_path();
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| NodeError::Settings {
                        message: format!("cannot create {}: {e}", parent.display()),
                    })?;
                }
                Arc::new(RedbKv::open(&path)?)
            }
            MetadataBackend::Memory => Arc::new(MemoryKv::new()),
            MetadataBackend::Etcd => {
                if settings.metadata.etcd_endpoints.is_empty() {
                    return Err(NodeError::Settings {
                        message: "metadata.etcd_endpoints (--etcd-endpoints) is required for etcd"
                            .to_owned(),
                    });
                }
                Arc::new(
                    EtcdKv::connect(
                        &settings.metadata.etcd_endpoints,
                        &settings.metadata.etcd_prefix,
                    )
                    .await?,
                )
            }
        };
        let mut builder = Node::builder()
            .settings(settings)
            .object_store(wal)
            .metadata(kv);
        if let Some(data) = data {
            builder = builder.data_store(data);
        }
        Ok(builder)
    }

    /// Opens everything and starts serving on `settings.listen`.
    pub async fn start(self) -> Result<Node, NodeError> {
        let wal_store = self.wal_store.ok_or(NodeError::Missing {
            what: "an object store",
        })?;
        let kv = self.metadata.ok_or(NodeError::Missing {
            what: "a metadata KV",
        })?;
        let settings = Arc::new(self.settings);
        crate::error::set_retry_after(settings.http.retry_after_secs);
        let metadata = Arc::new(Metadata::open(kv, MetadataOptions::default()).await?);
        let mut engine = Engine::builder()
            .node(settings.node_id.clone())
            .wal_storage(wal_store)
            .metadata(metadata.clone())
            .settings(settings.engine.clone());
        if let Some(data) = self.data_store {
            engine = engine.data_storage(data);
        }
        let engine = engine.open().await?;
        let provider: Arc<dyn LogProvider> =
            Arc::new(TabletProvider::new(engine.clone(), self.tablet_settings));
        let listener =
            TcpListener::bind(settings.listen)
                .await
                .map_err(|source| NodeError::Listen {
                    addr: settings.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| NodeError::Listen {
            addr: settings.listen,
            source,
        })?;
        let shutdown = CancellationToken::new();
        let state = Arc::new(AppState {
            limiter: RateLimiter::new(
                settings.http.rate_limit_per_sec,
                settings.http.rate_limit_burst,
            ),
            tables: Tables::new(metadata.clone()),
            logs: Arc::new(Logs::new(provider)),
            metrics: Arc::new(Metrics::new(Some(engine.clone()))),
            engine: Some(engine.clone()),
            metadata,
            shutdown: shutdown.clone(),
            settings: settings.clone(),
        });
        let app = api::router(state.clone());
        let stop = shutdown.clone();
        let server = tokio::spawn(async move {
            // No Nagle: SSE events are small writes that must leave at once, not after the
            // peer's delayed ACK (~40 ms).
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "cannot set TCP_NODELAY");
                }
            });
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
        });
        tracing::info!(
            %addr,
            node = %settings.node_id,
            storage = ?settings.storage.backend,
            metadata = ?settings.metadata.backend,
            "mink node serving"
        );
        Ok(Node {
            addr,
            state,
            engine,
            server: Some(server),
        })
    }
}

/// The WAL store and, when separate, the data store.
type Stores = (Arc<dyn ObjectStorage>, Option<Arc<dyn ObjectStorage>>);

/// Wraps the object stores in fault-injecting ones when `settings.chaos` asks for it (only in a
/// build with the cargo feature `chaos`; other builds refuse the section).
#[cfg(feature = "chaos")]
fn inject_faults(
    settings: &Settings,
    wal: Arc<dyn ObjectStorage>,
    data: Option<Arc<dyn ObjectStorage>>,
) -> Result<Stores, NodeError> {
    use mink_s3stream::storage::{
        FaultKind, FaultyStorage, LatencyProfile, LatencyStorage, StorageOp,
    };
    let Some(chaos) = &settings.chaos else {
        return Ok((wal, data));
    };
    let profile = match chaos.latency_profile.as_deref() {
        None => None,
        Some("s3-standard") => Some(LatencyProfile::s3_standard()),
        Some("s3-express") => Some(LatencyProfile::s3_express_one_zone()),
        Some(other) => {
            return Err(NodeError::Settings {
                message: format!(
                    "chaos.latency_profile is `{other}`; it must be `s3-standard` or `s3-express`"
                ),
            });
        }
    };
    if !(0.0..=1.0).contains(&chaos.put_failure_rate) {
        return Err(NodeError::Settings {
            message: format!(
                "chaos.put_failure_rate is {}; it must be between 0 and 1",
                chaos.put_failure_rate
            ),
        });
    }
    tracing::warn!(
        ?chaos,
        "chaos build: injecting faults into object storage PUTs"
    );
    let wrap = |store: Arc<dyn ObjectStorage>, seed: u64| -> Arc<dyn ObjectStorage> {
        // The latency model sits under the faults: a failed PUT has waited like a real one.
        let store = match profile {
            Some(profile) => Arc::new(LatencyStorage::new(store, profile, seed)),
            None => store,
        };
        let faulty = FaultyStorage::new(store, seed);
        faulty.set_failure_rate(
            StorageOp::Put,
            chaos.put_failure_rate,
            FaultKind::Unavailable,
        );
        faulty.set_put_delay(Duration::from_millis(chaos.put_delay_ms));
        faulty.set_fail_after_write(chaos.put_fail_after_write);
        Arc::new(faulty)
    };
    let data = data.map(|d| wrap(d, chaos.seed.wrapping_add(1)));
    Ok((wrap(wal, chaos.seed), data))
}

#[cfg(not(feature = "chaos"))]
fn inject_faults(
    settings: &Settings,
    wal: Arc<dyn ObjectStorage>,
    data: Option<Arc<dyn ObjectStorage>>,
) -> Result<Stores, NodeError> {
    match settings.chaos {
        None => Ok((wal, data)),
        Some(_) => Err(NodeError::Settings {
            message: "the [chaos] section (fault injection) needs a mink built with the cargo \
                      feature `chaos` (cargo xtask chaos builds one); remove it from the \
                      configuration"
                .to_owned(),
        }),
    }
}

/// A running node.
pub struct Node {
    addr: SocketAddr,
    state: Arc<AppState>,
    engine: Engine,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// A builder.
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    /// The address the API listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://{addr}`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The node's stream engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Stops gracefully: parked readers return, the listener stops, in-flight requests finish
    /// (up to `http.shutdown_grace_ms`), tablets are closed and the engine flushes.
    pub async fn shutdown(mut self) -> Result<(), NodeError> {
        tracing::info!("shutting down: no new requests; waiting for requests in flight");
        self.state.shutdown.cancel();
        if let Some(server) = self.server.take() {
            let grace = Duration::from_millis(self.state.settings.http.shutdown_grace_ms);
            match tokio::time::timeout(grace, server).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "the HTTP server failed"),
                Ok(Err(e)) => tracing::warn!(error = %e, "the HTTP server task failed"),
                Err(_) => tracing::warn!(?grace, "requests still in flight after the grace period"),
            }
        }
        let closed = self.state.logs.close_all().await;
        tracing::info!("tablets closed; flushing the engine");
        let flushed = self.engine.shutdown().await;
        closed.map_err(|e| NodeError::Close {
            message: e.to_string(),
        })?;
        flushed?;
        tracing::info!("shutdown complete");
        Ok(())
    }

    /// Stops without closing anything, as a crash would (tests of recovery).
    pub fn abort(mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
        self.state.shutdown.cancel();
        self.engine.abort();
    }
}

#[cfg(all(test, not(feature = "chaos")))]
mod tests {
    use super::*;
    use crate::settings::ChaosSettings;

    #[tokio::test]
    async fn chaos_settings_are_refused_without_the_chaos_feature() {
        let mut settings = Settings::default();
        settings.storage.backend = StorageBackend::Memory;
        settings.metadata.backend = MetadataBackend::Memory;
        assert!(NodeBuilder::from_settings(settings.clone()).await.is_ok());
        settings.chaos = Some(ChaosSettings::default());
        let error = NodeBuilder::from_settings(settings).await.unwrap_err();
        assert!(
            matches!(&error, NodeError::Settings { message } if message.contains("feature `chaos`")),
            "{error}"
        );
    }
}
