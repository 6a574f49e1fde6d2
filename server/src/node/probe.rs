//! Start-up probes: before a node serves, it writes, reads back and deletes a small object in each
//! object store and reads the metadata store, each within `node.probe_timeout_ms`. A failure stops
//! the start with a message naming the setting to fix (a step the store fails transiently, as a
//! throttled S3 does, is tried again a few times first), instead of a node that says it is serving
//! and fails its WAL at the first append (an `http://` S3 endpoint without
//! `--s3-allow-http true` is refused only when the first request is sent).

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use mink_metadata::MetaKv;
use mink_runtime::Backoff;
use mink_s3stream::storage::{ObjectStorage, StorageError};

use super::error::NodeError;
use crate::settings::{MetadataBackend, Settings, StorageBackend};

/// What a probe object holds.
const PROBE_BODY: &[u8] = b"mink start-up probe: safe to delete";

/// Which object store a probe checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StoreRole {
    /// The store of WAL objects (and of data, when there is no separate one).
    Wal,
    /// The separate store of committed objects.
    Data,
}

impl StoreRole {
    fn name(self) -> &'static str {
        match self {
            StoreRole::Wal => "the WAL object store",
            StoreRole::Data => "the data object store",
        }
    }
}

/// The probe object's key: one per node, so nodes sharing a bucket never race on one key.
fn probe_key(settings: &Settings) -> String {
    format!("mink-probe/node-{}", settings.node_id)
}

/// Writes, reads back and deletes a probe object in `store`.
pub(super) async fn object_store(
    store: &dyn ObjectStorage,
    role: StoreRole,
    settings: &Settings,
) -> Result<(), NodeError> {
    let key = probe_key(settings);
    let fail = |step: &'static str, cause: String| NodeError::Probe {
        what: role.name(),
        step,
        cause,
        fix: store_fix(settings, role),
    };
    let body = Bytes::from_static(PROBE_BODY);
    bounded(settings, transient(|| store.put(&key, body.clone())))
        .await
        .map_err(|c| fail("write a probe object", c))?
        .map_err(|e| fail("write a probe object", e.to_string()))?;
    let read = bounded(settings, transient(|| store.get(&key)))
        .await
        .map_err(|c| fail("read the probe object back", c))?
        .map_err(|e| fail("read the probe object back", e.to_string()))?;
    if read != body {
        return Err(fail(
            "read the probe object back",
            format!(
                "it read back {} bytes that differ from the {} written",
                read.len(),
                body.len()
            ),
        ));
    }
    bounded(settings, transient(|| store.delete(&key)))
        .await
        .map_err(|c| fail("delete the probe object", c))?
        .map_err(|e| fail("delete the probe object", e.to_string()))?;
    Ok(())
}

/// Reads the metadata store once.
pub(super) async fn metadata(kv: &dyn MetaKv, settings: &Settings) -> Result<(), NodeError> {
    let fail = |cause: String| NodeError::Probe {
        what: "the metadata store",
        step: "read a key",
        cause,
        fix: metadata_fix(settings),
    };
    bounded(settings, kv.get(mink_metadata::keys::IDS))
        .await
        .map_err(fail)?
        .map_err(|e| fail(e.to_string()))?;
    Ok(())
}

/// The fix to suggest when the metadata store cannot be reached (also for a failed connect).
pub(super) fn metadata_fix(settings: &Settings) -> String {
    let m = &settings.metadata;
    match m.backend {
        MetadataBackend::Etcd => format!(
            "check that etcd is running and reachable at --etcd-endpoints \
             (metadata.etcd_endpoints, now {:?})",
            m.etcd_endpoints
        ),
        MetadataBackend::Redb => format!(
            "check that --redb-path (metadata.redb_path, now {}) is a writable file",
            settings.redb_path().display()
        ),
        MetadataBackend::Memory => "the in-memory metadata store cannot fail".to_owned(),
    }
}

fn store_fix(settings: &Settings, role: StoreRole) -> String {
    let storage = &settings.storage;
    match storage.backend {
        StorageBackend::Local => format!(
            "check that --objects-dir (storage.local_dir, now {}) is a writable folder",
            settings.local_objects_dir().display()
        ),
        StorageBackend::Memory => "the in-memory object store cannot fail".to_owned(),
        StorageBackend::S3 => {
            let s3 = &storage.s3;
            if let Some(endpoint) = &s3.endpoint
                && endpoint
                    .trim_start()
                    .to_ascii_lowercase()
                    .starts_with("http://")
                && !s3.allow_http
            {
                return format!(
                    "the S3 endpoint {endpoint} is plain HTTP: set --s3-allow-http true \
                     (storage.s3.allow_http) to allow it, or use an https:// endpoint"
                );
            }
            let bucket = match role {
                StoreRole::Wal => format!("--s3-bucket (storage.s3.bucket, now {:?})", s3.bucket),
                StoreRole::Data => format!(
                    "--s3-data-bucket (storage.data_bucket, now {:?})",
                    storage.data_bucket.as_deref().unwrap_or_default()
                ),
            };
            format!(
                "check --s3-endpoint (storage.s3.endpoint, now {:?}), {bucket}, --s3-region \
                 (storage.s3.region) and the credentials (--s3-access-key, --s3-secret-key); a \
                 store that refuses the x-amz-checksum-crc64nvme header needs \
                 storage.s3.put_integrity = \"signed\" (now \"{}\")",
                s3.endpoint.as_deref().unwrap_or("AWS"),
                s3.put_integrity
            )
        }
    }
}

/// Attempts of a probe step that fails transiently (a throttled store, a 503): a store that
/// answers at all answers within a few.
const TRANSIENT_ATTEMPTS: usize = 10;

/// Runs a store step, again after a short pause while it fails with an error the store says is
/// worth retrying, at most [`TRANSIENT_ATTEMPTS`] times; the last outcome is returned.
async fn transient<T, F, Fut>(mut step: F) -> Result<T, StorageError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StorageError>>,
{
    let mut delays = Backoff::new(Duration::from_millis(10), Duration::from_millis(100))
        .with_max_retries(TRANSIENT_ATTEMPTS - 1)
        .delays();
    loop {
        match step().await {
            Err(e) if e.is_retryable() => match delays.next() {
                Some(delay) => tokio::time::sleep(delay).await,
                None => return Err(e),
            },
            outcome => return outcome,
        }
    }
}

/// Runs `step` within `node.probe_timeout_ms`; `Err` says it timed out.
pub(super) async fn bounded<T>(
    settings: &Settings,
    step: impl Future<Output = T>,
) -> Result<T, String> {
    let limit = settings.node.probe_timeout;
    tokio::time::timeout(limit, step).await.map_err(|_| {
        format!(
            "no answer within {} ms (node.probe_timeout_ms)",
            limit.as_millis()
        )
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use mink_metadata::MemoryKv;
    use mink_s3stream::storage::{
        FaultKind, FaultyStorage, ObjectStoreBackend, S3Config, StorageOp,
    };

    use super::*;

    fn s3_settings(endpoint: &str, allow_http: bool) -> Settings {
        let mut settings = Settings::default();
        settings.storage.backend = StorageBackend::S3;
        settings.storage.s3 = S3Config {
            endpoint: Some(endpoint.to_owned()),
            bucket: "b".to_owned(),
            access_key: Some("ak".to_owned()),
            secret_key: Some("sk".to_owned()),
            allow_http,
            max_retries: 0,
            ..S3Config::default()
        };
        settings.node.probe_timeout = Duration::from_secs(5);
        settings
    }

    /// The S3 client refuses a plain-HTTP endpoint only when a request is sent, not when it is
    /// built: so only a probe at start can catch it, and it names the flag.
    #[tokio::test]
    async fn an_http_s3_endpoint_without_allow_http_fails_the_probe_naming_the_flag() {
        // Nobody listens there: the refusal comes before any connection.
        let settings = s3_settings("http://127.0.0.1:9", false);
        let store = ObjectStoreBackend::s3(&settings.storage.s3)
            .expect("the builder accepts an http endpoint without allow_http");
        let error = object_store(&store, StoreRole::Wal, &settings)
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("--s3-allow-http true"), "{text}");
        assert!(text.contains("storage.s3.allow_http"), "{text}");
        assert!(text.contains("write a probe object"), "{text}");
    }

    #[tokio::test]
    async fn an_unreachable_s3_endpoint_fails_the_probe_naming_the_endpoint() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let settings = s3_settings(&format!("http://127.0.0.1:{port}"), true);
        let store = ObjectStoreBackend::s3(&settings.storage.s3).unwrap();
        let error = object_store(&store, StoreRole::Wal, &settings)
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("--s3-endpoint"), "{text}");
        assert!(text.contains("--s3-bucket"), "{text}");
    }

    #[tokio::test]
    async fn a_store_failing_a_step_transiently_is_tried_again() {
        let settings = Settings::default();
        let store = FaultyStorage::new(Arc::new(ObjectStoreBackend::memory()), 1);
        // Three throttled PUTs, then it answers: the probe passes.
        store.fail_next_op(StorageOp::Put, 3, FaultKind::Unavailable);
        object_store(&store, StoreRole::Wal, &settings)
            .await
            .unwrap();
        // A store that stays unavailable still fails the probe, with its error.
        store.fail_next_op(StorageOp::Put, 1000, FaultKind::Unavailable);
        let error = object_store(&store, StoreRole::Wal, &settings)
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("write a probe object"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_working_store_passes_and_keeps_no_probe_object() {
        let settings = Settings::default();
        let store = ObjectStoreBackend::memory();
        object_store(&store, StoreRole::Wal, &settings)
            .await
            .unwrap();
        assert!(store.list("").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_store_failing_any_step_fails_the_probe() {
        let settings = Settings::default();
        for (op, step) in [
            (StorageOp::Put, "write a probe object"),
            (StorageOp::Get, "read the probe object back"),
            (StorageOp::Delete, "delete the probe object"),
        ] {
            let store = FaultyStorage::new(Arc::new(ObjectStoreBackend::memory()), 1);
            store.fail_next_op(op, 1, FaultKind::Other);
            let error = object_store(&store, StoreRole::Data, &settings)
                .await
                .unwrap_err();
            let text = error.to_string();
            assert!(text.contains(step), "{op:?}: {text}");
            assert!(text.contains("the data object store"), "{text}");
            assert!(text.contains("--objects-dir"), "{text}");
        }
    }

    #[tokio::test]
    async fn a_metadata_store_that_answers_passes() {
        metadata(&MemoryKv::new(), &Settings::default())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_probe_that_hangs_is_cut_at_the_probe_timeout() {
        let mut settings = Settings::default();
        settings.node.probe_timeout = Duration::from_millis(50);
        let store = FaultyStorage::new(Arc::new(ObjectStoreBackend::memory()), 1);
        store.set_put_delay(Duration::from_secs(60));
        let started = std::time::Instant::now();
        let error = object_store(&store, StoreRole::Wal, &settings)
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(
            error.to_string().contains("node.probe_timeout_ms"),
            "{error}"
        );
    }
}
