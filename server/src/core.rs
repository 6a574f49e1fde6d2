//! The node core: what every front end (HTTP today; Kafka and Flight later) works through.
//!
//! It holds the settings, the authenticator, the catalog of tables, the registry of open bucket
//! logs, the metrics, the engine and the shutdown signal, and offers the operations a protocol
//! translates onto: resolving a bucket to its log (the seam where ownership and routing go),
//! appending and reading with the metrics counted once, dropping a table (and, in the background,
//! finishing drops from their tombstones), allocating writer ids. Front ends hold an
//! `Arc<NodeCore>` and never reach into one another.
//!
//! Every append passes the writer-id rule here, whatever front end it came from: a batch naming
//! a writer id the allocator never handed out is refused ([`ApiError::UnknownWriter`]), so a
//! client cannot pick a number another writer will be given and share its deduplication window.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use mink_metadata::{Metadata, TableRecord};
use mink_s3stream::engine::Engine;
use tokio_util::sync::CancellationToken;

use crate::auth::Authenticator;
use crate::bucket_log::{AppendOutcome, BucketLog, LogKey, LogProvider, Logs, Owner, ReadChunk};
use crate::budget::Budget;
use crate::catalog::{Catalog, TableInfo};
use crate::cluster::{OwnershipView, Route};
use crate::error::{ApiError, ApiResult};
use crate::latency::Latencies;
use crate::manifests::TableManifests;
use crate::metrics::Metrics;
use crate::readiness::Readiness;
use crate::settings::Settings;
use crate::snapshots::{Snapshots, Written};

/// The part of a node every front end shares.
pub struct NodeCore {
    settings: Arc<Settings>,
    authenticator: Authenticator,
    metadata: Arc<Metadata>,
    /// Writer ids below this were handed out by the allocator (a cache of its counter in the
    /// metadata store, which only grows; re-read when a batch names an id at or above it).
    writer_high_mark: AtomicU64,
    catalog: Catalog,
    logs: Logs,
    metrics: Arc<Metrics>,
    /// The node-wide budget of request bytes in flight, shared by the front ends.
    budget: Arc<Budget>,
    engine: Engine,
    /// Cancelled when the node starts shutting down: parked readers return at once.
    shutdown: CancellationToken,
    /// The node's lease session, when the metadata store has leases.
    lease: Option<Arc<mink_metadata::LeaseSession>>,
    /// Who owns which bucket, in a cluster.
    ownership: Option<Arc<OwnershipView>>,
    /// The stores `/readyz` checks.
    readiness: Option<Arc<Readiness>>,
    /// Where metadata snapshots go.
    snapshots: Option<Arc<Snapshots>>,
}

impl std::fmt::Debug for NodeCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCore")
            .field("node_id", &self.settings.node_id)
            .finish_non_exhaustive()
    }
}

impl NodeCore {
    /// A core over an open engine and metadata log, opening bucket logs through `provider` and
    /// checking tokens with `authenticator`.
    pub fn new(
        settings: Arc<Settings>,
        authenticator: Authenticator,
        metadata: Arc<Metadata>,
        engine: Engine,
        provider: Arc<dyn LogProvider>,
        latencies: Arc<Latencies>,
    ) -> Self {
        let metrics = Arc::new(Metrics::with_latencies(Some(engine.clone()), latencies));
        NodeCore {
            catalog: Catalog::new(metadata.clone(), settings.limits.clone())
                .with_manifests(TableManifests::new(engine.data_storage().clone())),
            logs: Logs::new(provider)
                .with_open_parallelism(settings.node.max_concurrent_opens)
                .with_latencies(metrics.latencies.clone()),
            budget: Budget::new(settings.http.max_inflight_request_bytes, metrics.clone()),
            metrics,
            settings,
            authenticator,
            writer_high_mark: AtomicU64::new(0),
            metadata,
            engine,
            shutdown: CancellationToken::new(),
            lease: None,
            ownership: None,
            readiness: None,
            snapshots: None,
        }
    }

    /// Has the node write metadata snapshots with `snapshots`.
    pub fn with_snapshots(mut self, snapshots: Arc<Snapshots>) -> Self {
        self.snapshots = Some(snapshots);
        self
    }

    /// Writes a metadata snapshot now (`POST /v1/admin/snapshot`).
    pub async fn snapshot_metadata(&self) -> ApiResult<Written> {
        let Some(snapshots) = &self.snapshots else {
            return Err(ApiError::Unavailable {
                message: "this node writes no metadata snapshots".to_owned(),
            });
        };
        match snapshots.write(&self.metadata).await {
            Ok(written) => {
                self.metrics.metadata_snapshots.inc();
                Ok(written)
            }
            Err(message) => {
                self.metrics.metadata_snapshot_errors.inc();
                Err(ApiError::Unavailable { message })
            }
        }
    }

    /// Has `/readyz` check these stores.
    pub fn with_readiness(mut self, readiness: Readiness) -> Self {
        self.readiness = Some(Arc::new(readiness));
        self
    }

    /// Whether the node can serve now: not shutting down, not failed, and its stores answer.
    pub async fn ready(&self) -> Result<(), String> {
        if self.is_shutting_down() {
            return Err("the node is shutting down".to_owned());
        }
        if let Some(reason) = self.failure() {
            return Err(reason);
        }
        match &self.readiness {
            Some(readiness) => readiness.check().await,
            None => Ok(()),
        }
    }

    /// Routes bucket requests by `view` (a cluster) and has table creates assign buckets.
    pub fn with_ownership(mut self, view: Option<Arc<OwnershipView>>) -> Self {
        self.catalog.set_ownership(view.clone());
        self.ownership = view;
        self
    }

    /// The ownership view, in a cluster.
    pub fn ownership(&self) -> Option<&Arc<OwnershipView>> {
        self.ownership.as_ref()
    }

    /// The node's lease session: once it is lost, the node cannot serve appends.
    pub fn with_lease(mut self, lease: Option<Arc<mink_metadata::LeaseSession>>) -> Self {
        self.lease = lease;
        self
    }

    /// Why the node can no longer serve appends, if it cannot: its WAL failed for good, or its
    /// lease was lost (it may no longer acknowledge anything; docs/cluster.md).
    pub fn failure(&self) -> Option<String> {
        if let Some(cause) = self.engine.wal_failure() {
            return Some(format!("the WAL failed for good: {cause}"));
        }
        if self.lease.as_ref().is_some_and(|lease| !lease.alive()) {
            return Some(
                "the node's lease was lost (paused, or cut off from the metadata store); it acknowledges nothing more and must rejoin".to_owned(),
            );
        }
        None
    }

    /// The node's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The tokens every front end checks.
    pub fn authenticator(&self) -> &Authenticator {
        &self.authenticator
    }

    /// The catalog of tables.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The registry of open bucket logs.
    pub fn logs(&self) -> &Logs {
        &self.logs
    }

    /// The node-wide budget of request bytes in flight.
    pub(crate) fn budget(&self) -> &Arc<Budget> {
        &self.budget
    }

    /// The node's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The metadata log.
    pub fn metadata(&self) -> &Arc<Metadata> {
        &self.metadata
    }

    /// The stream engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Cancelled once the node starts shutting down.
    pub fn shutdown_signal(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Whether the node is shutting down.
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// The key of `bucket` in `partition` of the table `info`, or [`ApiError::NoSuchBucket`].
    pub fn log_key(&self, info: &TableInfo, bucket: u32, partition: &str) -> ApiResult<LogKey> {
        let record = info.record();
        let table = &record.name;
        if bucket >= record.bucket_count {
            return Err(ApiError::NoSuchBucket {
                message: format!(
                    "table `{table}` has buckets 0..{}, not {bucket}",
                    record.bucket_count
                ),
            });
        }
        if !record.partitions.iter().any(|p| p == partition) {
            return Err(ApiError::NoSuchBucket {
                message: format!(
                    "table `{table}` has no partition `{partition}` (it has {:?})",
                    record.partitions
                ),
            });
        }
        let key = LogKey {
            table: table.clone(),
            partition: partition.to_owned(),
            bucket,
            incarnation: record.incarnation,
        };
        Ok(key)
    }

    /// The log of `bucket` in `partition` of the table `info`, opened on first use.
    ///
    /// Fails with [`ApiError::NoSuchBucket`] when the table has no such bucket or partition, with
    /// [`ApiError::Moved`] when another live node owns the bucket, and with
    /// [`ApiError::BucketUnavailable`] when its owner is not alive. `redirected_by` is the node
    /// that redirected the request here, if one did: a bucket this node's view says that node
    /// owns is looked up in the store itself, and never sent back (docs/cluster.md, "Routing").
    pub async fn bucket_log(
        &self,
        info: &Arc<TableInfo>,
        bucket: u32,
        partition: &str,
        redirected_by: Option<&str>,
    ) -> ApiResult<Arc<dyn BucketLog>> {
        let key = self.log_key(info, bucket, partition)?;
        match self.logs.owner(&key) {
            Owner::Local => {}
            Owner::Remote(base) => return Err(ApiError::Moved { owner: base }),
        }
        if let Some(view) = &self.ownership {
            let mut route = view.route(&key);
            if let (Route::Remote { node, .. }, Some(from)) = (&route, redirected_by)
                && node == from
            {
                route = view.route_fresh(&key).await?;
                if matches!(&route, Route::Remote { node, .. } if node == from) {
                    route = Route::Unavailable {
                        why: format!(
                            "node {from} sent it here and this node's view says it is {from}'s; the views disagree while ownership moves"
                        ),
                    };
                }
            }
            match route {
                Route::Local => {}
                Route::Remote { url, .. } => return Err(ApiError::Moved { owner: url }),
                Route::Unavailable { why } => {
                    return Err(ApiError::BucketUnavailable {
                        message: format!("bucket {key}: {why}"),
                    });
                }
            }
        }
        self.logs.get(&key, info).await
    }

    /// Appends batches to `log`, counting the append in the metrics.
    ///
    /// Refuses the request ([`ApiError::UnknownWriter`], nothing appended) when a batch names a
    /// writer id the allocator never handed out.
    pub async fn append(&self, log: &dyn BucketLog, batches: Bytes) -> ApiResult<AppendOutcome> {
        self.append_then(log, batches, None).await
    }

    /// [`NodeCore::append`], sending on `sequenced` once the batches have their place in the log
    /// ([`BucketLog::append_then`]), or once the append failed before that.
    pub async fn append_then(
        &self,
        log: &dyn BucketLog,
        batches: Bytes,
        sequenced: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> ApiResult<AppendOutcome> {
        // A node whose lease is lost would write WAL objects it may not acknowledge.
        if let Some(message) = self.failure() {
            return Err(ApiError::Unavailable { message });
        }
        self.check_writer_ids(&batches).await?;
        let len = batches.len() as u64;
        let started = std::time::Instant::now();
        let outcome = match sequenced {
            Some(sequenced) => log.append_then(batches, sequenced).await?,
            None => log.append(batches).await?,
        };
        self.metrics
            .latencies
            .append
            .observe(started.elapsed().as_secs_f64());
        self.metrics.appends.inc();
        if outcome.duplicate {
            self.metrics.duplicates.inc();
        } else {
            self.metrics.append_bytes.inc_by(len);
        }
        Ok(outcome)
    }

    /// A read that counts itself in the metrics and attributes itself to a tier.
    pub async fn read(
        &self,
        log: &dyn BucketLog,
        from: u64,
        until: Option<u64>,
        columns: Option<&[String]>,
        max_bytes: usize,
    ) -> ApiResult<ReadChunk> {
        let gets = Metrics::object_gets(Some(&self.engine));
        let started = std::time::Instant::now();
        let chunk = log.read(from, until, columns, max_bytes).await?;
        self.metrics
            .latencies
            .read
            .observe(started.elapsed().as_secs_f64());
        if !chunk.batches.is_empty() {
            self.metrics.reads.inc();
            self.metrics
                .read_bytes
                .inc_by(chunk.batches.iter().map(|b| b.len() as u64).sum());
            let tier = if Metrics::object_gets(Some(&self.engine)) > gets {
                "object_store"
            } else {
                "memory"
            };
            self.metrics.read_from(tier);
        }
        Ok(chunk)
    }

    /// Counts the batches of `chunk`, read for a reader that was parked at the tail, as
    /// delivered now: the time since each was committed goes to the tail-delivery histogram.
    pub fn delivered_to_parked(&self, chunk: &ReadChunk) {
        self.delivered_at(
            chunk
                .batches
                .iter()
                .filter_map(crate::format::commit_timestamp_of),
        );
    }

    /// Counts a read answered from what another parked reader of the same log read and
    /// rendered, without reading the log (tier `shared`): `stored_bytes` of batches, and the
    /// batches, committed at `commit_timestamps` (ms), delivered now.
    pub(crate) fn delivered_shared(
        &self,
        stored_bytes: usize,
        commit_timestamps: impl IntoIterator<Item = i64>,
    ) {
        self.metrics.reads.inc();
        self.metrics.read_bytes.inc_by(stored_bytes as u64);
        self.metrics.read_from("shared");
        self.delivered_at(commit_timestamps);
    }

    /// The time since each commit (ms) goes to the tail-delivery histogram.
    fn delivered_at(&self, commit_timestamps: impl IntoIterator<Item = i64>) {
        let now = self.metadata.clock().now_ms();
        for committed in commit_timestamps {
            self.metrics.latencies.delivered(committed, now);
        }
    }

    /// Drops the table `name`: one metadata transaction deletes its record and leaves a
    /// tombstone, so the name can be created again at once (a new incarnation, on other keys);
    /// then its bucket logs and writer snapshots are destroyed and the tombstone deleted. If that
    /// fails half-way, the tombstone stays and the cleanup pass finishes it.
    pub async fn drop_table(&self, name: &str) -> ApiResult<()> {
        self.catalog.get(name).await?;
        let dropped =
            self.metadata
                .drop_table(name)
                .await?
                .ok_or_else(|| ApiError::TableNotFound {
                    table: name.to_owned(),
                })?;
        self.catalog.forget(&dropped);
        if let Err(e) = self.destroy_dropped(&dropped).await {
            tracing::warn!(
                table = name,
                incarnation = dropped.incarnation,
                error = %e,
                "destroying a dropped table's logs failed; the cleanup pass will retry"
            );
        }
        Ok(())
    }

    /// Destroys the logs of a dropped table's incarnation, then its tombstone.
    async fn destroy_dropped(&self, dropped: &TableRecord) -> ApiResult<()> {
        // The manifest first: a rebuild must not bring the table back.
        self.catalog.delete_manifest(dropped).await?;
        self.logs.destroy_table(dropped).await?;
        self.metadata.delete_tombstone(dropped).await?;
        tracing::info!(
            table = dropped.name,
            incarnation = dropped.incarnation,
            "dropped table destroyed"
        );
        Ok(())
    }

    /// One pass of the dropped-table cleanup: every tombstone's logs are destroyed and the
    /// tombstone deleted (finishing drops that stopped half-way, here or on another node).
    /// Returns how many tombstones it finished; a failure is logged and left for the next pass.
    pub async fn clean_dropped_tables(&self) -> ApiResult<usize> {
        let mut finished = 0;
        for dropped in self.metadata.list_dropped_tables().await? {
            // Another node may have dropped it: no cached copy of that incarnation stays usable.
            self.catalog.forget(&dropped);
            match self.destroy_dropped(&dropped).await {
                Ok(()) => finished += 1,
                Err(e) => tracing::warn!(
                    table = dropped.name,
                    incarnation = dropped.incarnation,
                    error = %e,
                    "destroying a dropped table's logs failed; the next pass retries"
                ),
            }
        }
        Ok(finished)
    }

    /// Releases every open log whose bucket this node no longer owns (a transfer, the leader or
    /// a drain moved it): the logs are closed, many at once, so their new owners can open them.
    /// In a cluster, every 100 ms.
    pub async fn run_releases(self: Arc<Self>) {
        let Some(view) = self.ownership.clone() else {
            return;
        };
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => return,
                () = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
            }
            let moved: Vec<LogKey> = self
                .logs
                .open_keys()
                .into_iter()
                .filter(|key| view.route(key) != Route::Local)
                .collect();
            if moved.is_empty() {
                continue;
            }
            let (released, outcome) = self.logs.release(&moved).await;
            for key in &released {
                tracing::info!(log = %key, to = ?view.route(key), "bucket moved away; released");
            }
            self.metrics.cluster_releases.inc_by(released.len() as u64);
            if let Err(e) = outcome {
                tracing::warn!(error = %e, "releasing a moved bucket failed; its new owner can open it once this node's member is gone");
            }
        }
    }

    /// Moves `key`'s bucket to node `to` (a transfer): its assignment is rewritten, its owner
    /// releases it, and `to` opens it on its next request. Returns the node it was assigned to.
    pub async fn transfer(&self, key: &LogKey, to: &str) -> ApiResult<Option<String>> {
        let Some(view) = &self.ownership else {
            return Err(ApiError::bad_request(
                "this node is not in a cluster (its metadata store has no leases): there is nowhere to move a bucket",
            ));
        };
        if !view
            .live_nodes()
            .iter()
            .any(|n| n.node_id == to && !n.draining)
        {
            return Err(ApiError::bad_request(format!(
                "no live node `{to}` to move the bucket to (see GET /v1/cluster)"
            )));
        }
        let assignment = crate::cluster::assignment_key(key);
        let from = self.metadata.reassign(&assignment, to).await?;
        view.assigned([(assignment, to.to_owned())]);
        tracing::info!(log = %key, from = ?from, to, "bucket transfer asked");
        Ok(from)
    }

    /// The node's background work until shutdown: the dropped-table cleanup every
    /// `node.drop_cleanup_interval_ms`.
    pub async fn run_background(self: Arc<Self>) {
        let interval = self.settings.node.drop_cleanup_interval;
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
            if let Err(e) = self.clean_dropped_tables().await {
                tracing::warn!(error = %e, "listing dropped tables failed; the next pass retries");
            }
        }
    }

    /// A new idempotent writer id from the cluster-wide allocator.
    pub async fn allocate_writer_id(&self) -> ApiResult<u64> {
        let id = self.metadata.allocate_writer_id().await?;
        self.writer_high_mark
            .fetch_max(id.saturating_add(1), Ordering::AcqRel);
        Ok(id)
    }

    /// Refuses batches naming a writer id at or above the allocator's high mark.
    ///
    /// Only the headers are read. Ids below the cached mark pass at once; a higher one re-reads
    /// the counter from the metadata store once (another node may have handed it out since)
    /// before it is refused. A batch whose framing or header is broken is left to the tablet,
    /// which refuses it as `invalid_batch` with the reason.
    async fn check_writer_ids(&self, batches: &Bytes) -> ApiResult<()> {
        let mut highest = None;
        for view in mink_codec::batches(batches.as_ref()) {
            let Ok(view) = view else { break };
            // Bits 0-47 of the field are the allocated id, the rest its epoch.
            let Some(writer) = mink_codec::writer_parts(view.writer_id())
                .and_then(|(id, _epoch)| u64::try_from(id).ok())
            else {
                continue;
            };
            if highest.as_ref().is_none_or(|(h, _)| writer > *h) {
                highest = Some((writer, view));
            }
        }
        let Some((writer, view)) = highest else {
            return Ok(());
        };
        if writer < self.writer_high_mark.load(Ordering::Acquire) {
            return Ok(());
        }
        if view.check_header().is_err() {
            return Ok(());
        }
        let high_mark = self.metadata.writer_id_high_mark().await?;
        self.writer_high_mark.fetch_max(high_mark, Ordering::AcqRel);
        if writer < high_mark {
            return Ok(());
        }
        Err(ApiError::UnknownWriter {
            writer_id: i64::try_from(writer).unwrap_or(i64::MAX),
            high_mark,
        })
    }
}
