//! Building a node's components from its settings: the object stores and the metadata KV that
//! `storage` and `metadata` name, wrapped in fault injection when `[chaos]` asks for it.

use std::sync::Arc;

use mink_metadata::{EtcdKv, MemoryKv, MetaKv, RedbKv};
use mink_s3stream::storage::{ObjectStorage, ObjectStoreBackend};

use super::{Node, NodeBuilder, NodeError};
use crate::settings::{MetadataBackend, Settings, StorageBackend};

impl NodeBuilder {
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
                // Boxed: the etcd client's connect is a large future.
                let connect = Box::pin(EtcdKv::connect(
                    &settings.metadata.etcd_endpoints,
                    &settings.metadata.etcd_prefix,
                ));
                let fail = |cause: String| NodeError::Probe {
                    what: "the metadata store",
                    step: "connect",
                    cause,
                    fix: super::probe::metadata_fix(&settings),
                };
                Arc::new(
                    super::probe::bounded(&settings, connect)
                        .await
                        .map_err(fail)?
                        .map_err(|e| fail(e.to_string()))?,
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
        faulty.set_put_delay(chaos.put_delay);
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
