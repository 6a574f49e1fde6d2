//! The items of the benchmark, one file each, all methods of [`Bench`] (the state they share):
//! 1 `idle_append`, 2 and 7 `group_commit` (with the node's peak RSS), 3 `tail_delivery`,
//! 4 `replay`, 5 `projection`, 6 `timestamp_lookup`, 9 `flight`, 10 `kafka`, 11
//! `durable_streams`, 12 `open_tablets`, 13 `fan_out`, 14 `compression`, 15 `request_cost`, 16 `recovery`.

use std::sync::Arc;

use mink_s3stream::storage::ObjectStorage;

use crate::args::Options;
use crate::client::Client;
use crate::node::NodeProcess;
use crate::report::Report;

mod compression;
mod durable_streams;
mod fan_out;
mod flight;
mod group_commit;
mod idle_append;
mod kafka;
pub(crate) mod open_tablets;
mod projection;
mod recovery;
mod replay;
mod request_cost;
mod tail_delivery;
mod timestamp_lookup;

/// What the items share: the flags, the node and its client, the raw store of the baselines, and
/// the report they write into.
pub(crate) struct Bench {
    pub(crate) options: Options,
    pub(crate) node: NodeProcess,
    pub(crate) client: Client,
    pub(crate) raw: Arc<dyn ObjectStorage>,
    pub(crate) report: Report,
    /// Wall-clock milliseconds when item 4 started and finished writing.
    pub(crate) replay_window: (i64, i64),
    /// Item 4's raw sequential GET throughput, MB/s (item 9's baseline).
    pub(crate) replay_raw_mbps: f64,
    /// Item 4's relay of the same GETs through a loopback socket, MB/s (item 9's ceiling).
    pub(crate) replay_relay_mbps: f64,
}

impl Bench {
    /// Samples of a latency item that makes one request after another: `full` in a full run, a
    /// tenth with `--quick`, and half on the S3 Standard model, where each sample waits tens of
    /// milliseconds for the modelled store (a full run stays within about an hour).
    pub(crate) fn samples(&self, full: usize) -> usize {
        if self.options.quick {
            full / 10
        } else if self.options.store == crate::args::Store::S3Standard {
            full / 2
        } else {
            full
        }
    }

    /// The node's own objects, as the raw baselines read them.
    pub(crate) fn node_store(&self) -> Result<Arc<dyn ObjectStorage>, crate::Error> {
        match self.options.store {
            crate::args::Store::Moto => crate::raw::raw_store(
                crate::args::Store::Moto,
                std::path::Path::new(""),
                &self.node.prefix,
            ),
            other => crate::raw::raw_store(other, &self.node.objects_dir(), ""),
        }
    }

    /// A new life of the node: empty caches.
    pub(crate) async fn restart(&mut self) -> Result<(), crate::Error> {
        self.node.stop()?;
        self.node.start()?;
        self.node.wait_ready(&self.client.http).await
    }

    /// Waits until compaction has committed everything the WAL holds (`wal_pending_bytes` 0),
    /// so that a read timed next competes with no compaction for the store; the seconds waited.
    pub(crate) async fn drained(&self) -> Result<f64, crate::Error> {
        let waited = std::time::Instant::now();
        loop {
            if self.client.metric("wal_pending_bytes").await? == 0.0 {
                return Ok(waited.elapsed().as_secs_f64());
            }
            if waited.elapsed() > std::time::Duration::from_secs(900) {
                return Err("compaction did not drain the WAL within 15 minutes".to_owned());
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
