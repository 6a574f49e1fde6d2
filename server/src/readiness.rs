//! `/readyz`: whether the node can do its work now, as distinct from `/healthz` (whether it is
//! alive). Ready means the metadata store and every object store answer: one metadata read and
//! one HEAD of a key that need not exist per store, each within `node.ready_timeout_ms`. The
//! answer is kept for a second, and concurrent probes share one check, so a busy prober costs
//! the stores at most a few requests a second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mink_metadata::MetaKv;
use mink_s3stream::storage::ObjectStorage;

/// How long an answer is reused.
const FRESH: Duration = Duration::from_secs(1);

/// The stores a node depends on, and the last answer.
pub struct Readiness {
    kv: Arc<dyn MetaKv>,
    stores: Vec<(&'static str, Arc<dyn ObjectStorage>)>,
    probe_key: String,
    timeout: Duration,
    last: tokio::sync::Mutex<Option<(Instant, Result<(), String>)>>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness").finish_non_exhaustive()
    }
}

impl Readiness {
    /// Checks `kv` and `stores` (a name for messages, the store), `HEAD`ing `probe_key`.
    pub fn new(
        kv: Arc<dyn MetaKv>,
        stores: Vec<(&'static str, Arc<dyn ObjectStorage>)>,
        probe_key: String,
        timeout: Duration,
    ) -> Self {
        Readiness {
            kv,
            stores,
            probe_key,
            timeout,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// `Ok` when every store answered (now or within the last second), else why not.
    pub async fn check(&self) -> Result<(), String> {
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = last.as_ref()
            && at.elapsed() < FRESH
        {
            return answer.clone();
        }
        let answer = self.probe().await;
        *last = Some((Instant::now(), answer.clone()));
        answer
    }

    async fn probe(&self) -> Result<(), String> {
        let within = |what: &str| {
            format!(
                "{what} did not answer within {} ms (node.ready_timeout_ms)",
                self.timeout.as_millis()
            )
        };
        match tokio::time::timeout(self.timeout, self.kv.get("mink/readyz")).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(format!("the metadata store failed: {e}")),
            Err(_) => return Err(within("the metadata store")),
        }
        for (name, store) in &self.stores {
            match tokio::time::timeout(self.timeout, store.head(&self.probe_key)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) if e.is_not_found() => {}
                Ok(Err(e)) => return Err(format!("{name} failed: {e}")),
                Err(_) => return Err(within(name)),
            }
        }
        Ok(())
    }
}
