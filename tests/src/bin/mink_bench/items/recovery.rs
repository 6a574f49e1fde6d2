//! Item 16: recovery after kill -9 with uncompacted WAL. Compaction is held back while 64 MiB
//! (and 512 MiB, without `--quick`) are appended, the node is killed, and the time from its
//! restart to the first append it accepts is set beside a raw sequential GET of the WAL objects
//! it has to read back.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::rows::{kv_fields, mink_batch};
use crate::{Error, GROUP_ROWS, MINK_BATCHES};

use super::Bench;

/// Buckets of each case's table.
const BUCKETS: u32 = 8;
/// Writers appending at once.
const WRITERS: u32 = 16;

impl Bench {
    /// Item 16: restart to first accepted append with 64 / 512 MiB of uncompacted WAL.
    pub(crate) async fn recovery(&mut self) -> Result<(), Error> {
        let sizes: &[u64] = if self.options.quick {
            &[64]
        } else {
            &[64, 512]
        };
        let body = mink_batch(GROUP_ROWS)?;
        let mut rows = String::new();
        for &mib in sizes {
            // Room for the whole case in the WAL, and no round until long after it.
            self.node.extra_config = format!(
                "[engine]\nmax_uncompacted_bytes = {}\n[engine.compaction]\ninterval = 3600000\ntrigger_bytes = {}\n",
                (mib + 256) << 20,
                (mib + 256) << 20,
            );
            self.restart().await?;
            let table = format!("recovery{mib}");
            self.client
                .create_table(&table, kv_fields(), BUCKETS)
                .await?;
            let target = mib << 20;
            let written = Arc::new(AtomicU64::new(0));
            let mut tasks = Vec::new();
            for w in 0..WRITERS {
                let (client, written, body) = (self.client.clone(), written.clone(), body.clone());
                let url = self.client.records(&table, w % BUCKETS);
                tasks.push(tokio::spawn(async move {
                    while written.fetch_add(body.len() as u64, Ordering::Relaxed) < target {
                        client.post(url.clone(), MINK_BATCHES, body.clone()).await?;
                    }
                    Ok::<_, Error>(())
                }));
            }
            for task in tasks {
                task.await.map_err(|e| format!("writer task: {e}"))??;
            }
            let pending = self.client.metric("wal_pending_bytes").await?;
            let end = self.client.high_watermark(&table, 0).await?;
            self.node.process.kill()?;
            // What recovery reads back: the WAL objects of the life just killed (those of
            // earlier lives under `wal/` are committed, adopted as they were).
            let store = self.node_store()?;
            let mut wal = store
                .list("wal/")
                .await
                .map_err(|e| format!("list WAL objects: {e}"))?;
            let life = |key: &str| -> u64 {
                key.split('/')
                    .nth(1)
                    .and_then(|member| member.rsplit_once('~'))
                    .and_then(|(_, n)| n.parse().ok())
                    .unwrap_or(0)
            };
            let last = wal.iter().map(|o| life(&o.key)).max().unwrap_or(0);
            wal.retain(|o| life(&o.key) == last);
            let started = Instant::now();
            let mut wal_bytes = 0u64;
            for object in &wal {
                wal_bytes += store
                    .get(&object.key)
                    .await
                    .map_err(|e| format!("raw GET {}: {e}", object.key))?
                    .len() as u64;
            }
            let raw_seconds = started.elapsed().as_secs_f64();
            // The restart: from spawning the process to the first append it acknowledges.
            let started = Instant::now();
            self.node.start()?;
            let url = self.client.records(&table, 0);
            let ready = loop {
                if self
                    .client
                    .post(url.clone(), MINK_BATCHES, body.clone())
                    .await
                    .is_ok()
                {
                    break started.elapsed().as_secs_f64();
                }
                if started.elapsed() > Duration::from_secs(300) {
                    return Err(format!(
                        "no append accepted within 300 s of a restart with {mib} MiB of WAL"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            // Nothing acknowledged was lost: the log goes on from where it was.
            let after = self.client.high_watermark(&table, 0).await?;
            if after <= end {
                return Err(format!(
                    "bucket 0 of {table} is at {after} after the restart, not past {end}"
                ));
            }
            let _ = writeln!(
                rows,
                "| {mib} | {:.0} | {} | {:.0} | {:.2} | {:.2} | {:.1}x |",
                pending / f64::from(1 << 20),
                wal.len(),
                wal_bytes as f64 / f64::from(1 << 20),
                raw_seconds,
                ready,
                ready / raw_seconds.max(1e-6),
            );
        }
        self.node.extra_config.clear();
        self.restart().await?;
        let _ = write!(
            self.report.md,
            "### 16. Recovery after kill -9 with uncompacted WAL ({BUCKETS} buckets, {WRITERS} writers of {GROUP_ROWS}-row mink batches, compaction held back)\n\n\
             | appended MiB | WAL pending at the kill (MiB) | WAL objects | WAL MiB on the store | raw sequential GET of them (s) | restart to first accepted append (s) | ratio |\n\
             |---|---|---|---|---|---|---|\n{rows}\n\
             The restart is timed from spawning the process (its start, WAL recovery and the \
             bucket's tablet open) to the first append it acknowledges; the baseline reads every \
             WAL object of the node once, one after another, with the node down.\n\n",
        );
        Ok(())
    }
}
