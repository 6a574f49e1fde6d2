//! Assembling and running a node.
//!
//! Components come in through [`NodeBuilder`] (`Node::builder().object_store(..).metadata(..)`),
//! so a test starts a node in-process on `127.0.0.1:0` against memory or local-file storage; the
//! binary builds them from [`Settings`] with [`NodeBuilder::from_settings`].
//!
//! Start: probe the stores (`probe.rs`: a probe object written, read back and deleted in each
//! object store, a metadata read; a failure names the setting to fix), open the metadata log, open the s3stream engine (which replays this node's WAL), build
//! the node core over them, and start the front ends on it (the HTTP API: bind, serve).
//! `backends.rs` builds the stores and the KV from settings. Shutdown ([`Node::shutdown`], or SIGTERM/Ctrl-C in the binary): parked
//! long-polls and SSE streams return, the listener stops accepting, in-flight requests (appends)
//! finish, every open tablet is closed (writer snapshot, stream closed), the engine flushes and
//! compacts, and the node reports how it went.

mod backends;
mod error;
mod probe;

use std::net::SocketAddr;
use std::sync::Arc;

use mink_metadata::{MetaKv, Metadata, MetadataOptions};
use mink_runtime::{Clock, SystemClock};
use mink_s3stream::engine::Engine;
use mink_s3stream::storage::ObjectStorage;
use mink_tablet::TabletSettings;
use tokio::task::JoinHandle;

use crate::bucket_log::{LogProvider, TabletProvider};
use crate::cluster::{Failover, Leader, Membership, OwnershipView, Route, Suspects};
use crate::core::NodeCore;
use crate::http;
use crate::latency::{Latencies, TimedStorage};
use crate::readiness::Readiness;
use crate::settings::Settings;
use crate::snapshots::Snapshots;

pub use error::NodeError;

/// The exit status of a node whose WAL failed for good (`EX_TEMPFAIL`: restart me).
pub const EXIT_WAL_FAILED: u8 = 75;

/// Builds a [`Node`].
#[derive(Default)]
pub struct NodeBuilder {
    settings: Settings,
    wal_store: Option<Arc<dyn ObjectStorage>>,
    data_store: Option<Arc<dyn ObjectStorage>>,
    metadata: Option<Arc<dyn MetaKv>>,
    tablet_settings: Option<TabletSettings>,
    clock: Option<Arc<dyn Clock>>,
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

    /// Tablet settings in place of the settings' `[tablet]` section (tests set them here
    /// without building a whole [`Settings`]); validated the same way.
    pub fn tablet_settings(mut self, settings: TabletSettings) -> Self {
        self.tablet_settings = Some(settings);
        self
    }

    /// The one clock of the node: commit timestamps, writer idleness, node registration expiry
    /// and page ages in the block cache (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The metadata KV given, if any (the admin commands work on it without starting a node).
    pub fn metadata_kv(&self) -> Option<&Arc<dyn MetaKv>> {
        self.metadata.as_ref()
    }

    /// The store WAL objects go to, if any.
    pub fn wal_objects(&self) -> Option<&Arc<dyn ObjectStorage>> {
        self.wal_store.as_ref()
    }

    /// The settings given (the admin commands read the engine's key prefixes from them).
    pub fn node_settings(&self) -> &Settings {
        &self.settings
    }

    /// The store committed objects go to: the data store when there is one, else the WAL store.
    pub fn data_objects(&self) -> Option<&Arc<dyn ObjectStorage>> {
        self.data_store.as_ref().or(self.wal_store.as_ref())
    }

    /// Opens everything and starts serving on `settings.listen`.
    pub async fn start(self) -> Result<Node, NodeError> {
        // Boxed: probes, recovery and the first cleanup pass make a large future.
        Box::pin(self.start_boxed()).await
    }

    async fn start_boxed(self) -> Result<Node, NodeError> {
        let wal_store = self.wal_store.ok_or(NodeError::Missing {
            what: "an object store",
        })?;
        let kv = self.metadata.ok_or(NodeError::Missing {
            what: "a metadata KV",
        })?;
        let mut settings = self.settings;
        if let Some(tablet) = self.tablet_settings {
            settings.tablet = tablet;
        }
        settings
            .validate()
            .map_err(|message| NodeError::Settings { message })?;
        probe::metadata(kv.as_ref(), &settings).await?;
        probe::object_store(wal_store.as_ref(), probe::StoreRole::Wal, &settings).await?;
        if let Some(data) = &self.data_store {
            probe::object_store(data.as_ref(), probe::StoreRole::Data, &settings).await?;
        }
        // Every object-store request is timed (the latency histograms of /metrics).
        let latencies = Arc::new(Latencies::default());
        let (wal_prefix, data_prefix) = (&settings.engine.wal_prefix, &settings.engine.data_prefix);
        let wal_store = TimedStorage::wrap(wal_store, latencies.clone(), wal_prefix, data_prefix);
        let data_store = self
            .data_store
            .map(|data| TimedStorage::wrap(data, latencies.clone(), wal_prefix, data_prefix));
        let snapshots = Arc::new(Snapshots::new(
            data_store.clone().unwrap_or_else(|| wal_store.clone()),
            settings.metadata.snapshots_kept,
        ));
        let mut ready_stores = vec![("the WAL object store", wal_store.clone())];
        if let Some(data) = &data_store {
            ready_stores.push(("the data object store", data.clone()));
        }
        let readiness = Readiness::new(
            kv.clone(),
            ready_stores,
            format!("readyz/{}", settings.node_id),
            settings.node.ready_timeout,
        );
        let auth = crate::auth::Authenticator::from_settings(&settings.auth)
            .map_err(|message| NodeError::Settings { message })?;
        let settings = Arc::new(settings);
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let metadata = Arc::new(
            Metadata::open_with_clock(kv.clone(), MetadataOptions::default(), clock.clone())
                .await?,
        );
        let mut membership = Membership::join(metadata.clone(), kv.clone(), &settings).await?;
        if membership.session().is_some()
            && settings.cluster.advertise_http.is_none()
            && settings.listen.ip().is_unspecified()
        {
            // Other nodes would send clients to 0.0.0.0.
            membership.leave().await;
            return Err(NodeError::Settings {
                message: format!(
                    "listening on {} in a cluster needs cluster.advertise_http: the address other nodes redirect clients to",
                    settings.listen
                ),
            });
        }
        // In a cluster (a store with leases), requests are routed by the watched ownership.
        let ownership = match membership.session() {
            Some(_) => Some(Arc::new(
                OwnershipView::start(settings.node_id.clone(), metadata.clone(), kv.clone())
                    .await?,
            )),
            None => None,
        };
        let mut engine = Engine::builder()
            .node(membership.member())
            .recover_earlier(membership.earlier().to_vec())
            .clock(clock.clone())
            .wal_storage(wal_store)
            .metadata(metadata.clone())
            .stage_observer(latencies.clone())
            .settings(settings.engine.clone());
        if let Some(data) = data_store {
            engine = engine.data_storage(data);
        }
        if let Some(fence) = membership.fence() {
            // In a cluster: acknowledgements follow the lease, and a stream another node holds
            // open is not taken from it.
            engine = engine.ack_fence(fence).exclusive(settings.node_id.clone());
        }
        let engine = engine.open().await?;
        membership.finish_earlier().await?;
        let suspects = Suspects::default();
        let mut provider =
            TabletProvider::new(engine.clone(), settings.tablet.clone()).with_clock(clock);
        if ownership.is_some() {
            provider = provider.with_suspects(suspects.clone());
        }
        let provider: Arc<dyn LogProvider> = Arc::new(provider);
        let core = Arc::new(
            NodeCore::new(
                settings.clone(),
                auth,
                metadata,
                engine.clone(),
                provider,
                latencies,
            )
            .with_readiness(readiness)
            .with_snapshots(snapshots.clone())
            .with_lease(membership.session().cloned())
            .with_ownership(ownership.clone()),
        );
        // Drops that stopped half-way (a crash after the tombstone) are finished before serving.
        match core.clean_dropped_tables().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(tables = n, "finished dropping tables"),
            Err(e) => tracing::warn!(error = %e, "cannot list dropped tables; retrying later"),
        }
        let background = tokio::spawn({
            let core = core.clone();
            async move {
                // Periodic metadata snapshots: by the single node, or by the cluster's leader.
                let due = {
                    let core = core.clone();
                    move || core.ownership().is_none() || core.metrics().cluster_leader.get() == 1
                };
                tokio::join!(
                    core.clone().run_background(),
                    crate::retention::run(core.clone()),
                    crate::snapshots::run(
                        snapshots,
                        core.metadata().clone(),
                        core.settings().metadata.snapshot_interval,
                        due,
                        core.shutdown_signal().clone(),
                        core.metrics().clone(),
                    )
                );
            }
        });
        let releases = tokio::spawn(core.clone().run_releases());
        let server = http::start(core.clone()).await.map_err(|source| {
            background.abort();
            releases.abort();
            NodeError::Listen {
                addr: settings.listen,
                source,
            }
        })?;
        let addr = server.addr;
        let flight = match settings.flight.listen {
            Some(flight_addr) => match crate::flight::start(core.clone(), flight_addr).await {
                Ok(flight) => Some(flight),
                Err(source) => {
                    server.task.abort();
                    background.abort();
                    releases.abort();
                    return Err(NodeError::Listen {
                        addr: flight_addr,
                        source,
                    });
                }
            },
            None => None,
        };
        let kafka = match settings.kafka.listen {
            Some(kafka_addr) => {
                match crate::kafka::start(core.clone(), kafka_addr, membership.record().broker_id)
                    .await
                {
                    Ok(kafka) => Some(kafka),
                    Err(source) => {
                        server.task.abort();
                        if let Some(flight) = &flight {
                            flight.server.task.abort();
                        }
                        background.abort();
                        releases.abort();
                        return Err(NodeError::Listen {
                            addr: kafka_addr,
                            source,
                        });
                    }
                }
            }
            None => None,
        };
        let tls = settings.http.tls.enabled();
        let url = settings
            .cluster
            .advertise_http
            .clone()
            .unwrap_or_else(|| format!("{}://{addr}", if tls { "https" } else { "http" }));
        let flight_url = flight.as_ref().map(|f| f.url.clone());
        let kafka_address = kafka.as_ref().map(|k| k.advertised.clone());
        if let Err(e) = membership.advertise(url, flight_url, kafka_address).await {
            server.task.abort();
            if let Some(flight) = &flight {
                flight.server.task.abort();
            }
            if let Some(kafka) = &kafka {
                kafka.task.abort();
            }
            background.abort();
            releases.abort();
            return Err(e);
        }
        let mut cluster_tasks = Vec::new();
        let mut leader = None;
        if let Some(view) = &ownership {
            view.registered(membership.record().clone());
            let failover = Arc::new(Failover::new(
                core.metadata().clone(),
                engine.clone(),
                view.clone(),
                membership.member(),
                membership.session().map(|s| s.id()),
                suspects,
                core.metrics().clone(),
            ));
            cluster_tasks.push(tokio::spawn(failover.run(core.shutdown_signal().clone())));
            let candidate = Arc::new(Leader::new(
                core.metadata().clone(),
                kv.clone(),
                view.clone(),
                membership.member(),
                membership.session().map(|s| s.id()),
                settings.cluster.max_concurrent_moves,
                core.metrics().clone(),
            ));
            cluster_tasks.push(tokio::spawn(
                candidate.clone().run(core.shutdown_signal().clone()),
            ));
            leader = Some(candidate);
        }
        crate::auth::warn_if_open(core.authenticator(), addr);
        tracing::info!(
            %addr,
            flight = flight.as_ref().map(|f| f.url.as_str()),
            kafka = ?kafka.as_ref().map(|k| k.addr),
            node = %settings.node_id,
            member = %membership.member(),
            storage = ?settings.storage.backend,
            metadata = ?settings.metadata.backend,
            "mink node serving"
        );
        Ok(Node {
            addr,
            flight_addr: flight.as_ref().map(|f| f.server.addr),
            kafka_addr: kafka.as_ref().map(|k| k.addr),
            core,
            engine,
            membership: Some(membership),
            server: Some(server.task),
            flight: flight.map(|f| f.server.task),
            kafka: kafka.map(|k| k.task),
            background,
            releases,
            cluster_tasks,
            leader,
        })
    }
}

/// A running node.
pub struct Node {
    addr: SocketAddr,
    /// Where the Flight front end listens, when it does.
    flight_addr: Option<SocketAddr>,
    /// Where the Kafka front end listens, when it does.
    kafka_addr: Option<SocketAddr>,
    core: Arc<NodeCore>,
    engine: Engine,
    /// This life of the node in the cluster; taken when it leaves.
    membership: Option<Membership>,
    server: Option<JoinHandle<std::io::Result<()>>>,
    /// The Flight front end's server, when it listens.
    flight: Option<JoinHandle<std::io::Result<()>>>,
    /// The Kafka front end's accept loop, when it listens.
    kafka: Option<JoinHandle<std::io::Result<()>>>,
    /// The core's background work (dropped-table cleanup, retention); stops with the shutdown
    /// signal.
    background: JoinHandle<()>,
    /// Releases buckets moved away (a cluster); stops with the shutdown signal.
    releases: JoinHandle<()>,
    /// Failover and the leader's work (a cluster); stop with the shutdown signal.
    cluster_tasks: Vec<JoinHandle<()>>,
    /// This node's candidacy in the leader election (a cluster).
    leader: Option<Arc<Leader>>,
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

    /// The address the Flight front end listens on, when it does (`flight.listen`).
    pub fn flight_addr(&self) -> Option<SocketAddr> {
        self.flight_addr
    }

    /// The address the Kafka front end listens on, when it does (`kafka.listen`).
    pub fn kafka_addr(&self) -> Option<SocketAddr> {
        self.kafka_addr
    }

    /// `http://{addr}`, or `https://{addr}` when the API is served over TLS.
    pub fn url(&self) -> String {
        let tls = self.core.settings().http.tls.enabled();
        format!("{}://{}", if tls { "https" } else { "http" }, self.addr)
    }

    /// The node's stream engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Why the node can no longer serve appends, if it cannot: its WAL failed for good, or its
    /// lease was lost.
    pub fn failure(&self) -> Option<String> {
        self.core.failure()
    }

    /// Resolves with the reason once the node can no longer serve appends: its WAL failed for
    /// good, or its lease was lost (a pause or a partition longer than its TTL; its WAL then
    /// acknowledges nothing, docs/cluster.md). The binary then exits with [`EXIT_WAL_FAILED`]
    /// after `node.exit_delay_on_wal_failure_ms`, so a supervisor restarts it as a new
    /// incarnation whose recovery replays the WAL; nothing acknowledged is lost.
    pub fn failed(&self) -> impl std::future::Future<Output = String> + Send + 'static {
        let engine = self.engine.clone();
        let lost = self.membership.as_ref().map(Membership::lost);
        async move {
            let lost = async move {
                match lost {
                    Some(lost) => lost.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                cause = engine.wal_failed() => format!("the WAL failed for good: {cause}"),
                () = lost => "the node's lease was lost".to_owned(),
            }
        }
    }

    /// This life of the node in the cluster: member id, incarnation, registration.
    pub fn membership(&self) -> Option<&Membership> {
        self.membership.as_ref()
    }

    /// The node's settings.
    pub fn settings(&self) -> &Settings {
        self.core.settings()
    }

    /// Stops gracefully: parked readers return, the listener stops, in-flight requests finish
    /// (up to `http.shutdown_grace`), tablets are closed and the engine flushes.
    pub async fn shutdown(mut self) -> Result<(), NodeError> {
        if let Some(leader) = self.leader.take() {
            // Another node leads at once, instead of when this one's lease ends.
            leader.resign().await;
        }
        self.drain().await;
        tracing::info!("shutting down: no new requests; waiting for requests in flight");
        self.core.shutdown_signal().cancel();
        let grace = self.core.settings().http.shutdown_grace;
        let deadline = tokio::time::Instant::now() + grace;
        let servers = [
            ("HTTP", self.server.take()),
            ("Flight", self.flight.take()),
            ("Kafka", self.kafka.take()),
        ];
        for (name, server) in servers {
            let Some(server) = server else { continue };
            match tokio::time::timeout_at(deadline, server).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, server = name, "the server failed"),
                Ok(Err(e)) => tracing::warn!(error = %e, server = name, "the server task failed"),
                Err(_) => tracing::warn!(
                    ?grace,
                    server = name,
                    "requests still in flight after the grace period"
                ),
            }
        }
        // A cleanup pass in progress would race the tablets' close.
        self.background.abort();
        self.releases.abort();
        for task in self.cluster_tasks.drain(..) {
            task.abort();
        }
        let closed = self.core.logs().close_all().await;
        tracing::info!("tablets closed; flushing the engine");
        let flushed = self.engine.shutdown().await;
        if let Some(membership) = self.membership.take() {
            membership.leave().await;
        }
        closed.map_err(|e| NodeError::Close {
            message: e.to_string(),
        })?;
        flushed?;
        tracing::info!("shutdown complete");
        Ok(())
    }

    /// In a cluster with other serving nodes: marks this node draining and waits (up to
    /// `cluster.drain_timeout_ms`) until the leader has assigned all its buckets elsewhere and
    /// this node has released them (many at once), while it goes on serving and redirecting.
    async fn drain(&mut self) {
        let (Some(view), Some(membership)) =
            (self.core.ownership().cloned(), self.membership.as_mut())
        else {
            return;
        };
        let me = membership.record().node_id.clone();
        let others = view
            .live_nodes()
            .iter()
            .filter(|n| n.node_id != me && !n.draining && !n.http_url.is_empty())
            .count();
        if others == 0 || membership.is_lost() {
            return;
        }
        if let Err(e) = membership.set_draining().await {
            tracing::warn!(error = %e, "cannot mark this node draining; its buckets fail over instead");
            return;
        }
        view.registered(membership.record().clone());
        let started = std::time::Instant::now();
        let deadline = started + self.core.settings().cluster.drain_timeout;
        loop {
            let assigned = view.assignments().iter().filter(|(_, n)| *n == me).count();
            let held = self
                .core
                .logs()
                .open_keys()
                .iter()
                .filter(|key| view.route(key) != Route::Local)
                .count();
            if assigned == 0 && held == 0 {
                tracing::info!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "every bucket handed to other nodes"
                );
                return;
            }
            if std::time::Instant::now() >= deadline {
                tracing::warn!(
                    assigned,
                    held,
                    "drain timed out; the buckets left fail over once this node is gone"
                );
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Whether the node's lease was lost (it then acknowledges nothing more; see
    /// [`Node::failed`]).
    pub fn lease_lost(&self) -> bool {
        self.membership.as_ref().is_some_and(Membership::is_lost)
    }

    /// Gives this life up after its lease was lost or its WAL failed (it acknowledges nothing
    /// more either way): stops as a crash would, then removes its registration and revokes its
    /// lease if they are still there, so a new life of the node id can join at once and any
    /// node can recover this one.
    pub async fn abandon(mut self) {
        let membership = self.membership.take();
        self.abort();
        if let Some(membership) = membership {
            membership.leave().await;
        }
    }

    /// Stops without closing anything, as a crash would (tests of recovery).
    pub fn abort(mut self) {
        for server in [self.server.take(), self.flight.take(), self.kafka.take()]
            .into_iter()
            .flatten()
        {
            server.abort();
        }
        self.core.shutdown_signal().cancel();
        self.background.abort();
        self.releases.abort();
        for task in self.cluster_tasks.drain(..) {
            task.abort();
        }
        self.engine.abort();
    }

    /// The node core (tests drive its background passes directly).
    pub fn core(&self) -> &Arc<NodeCore> {
        &self.core
    }
}
