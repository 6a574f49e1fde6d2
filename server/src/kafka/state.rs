//! What every request of the Kafka front end shares: the node core, this broker's address, the
//! connection's principal.

use std::sync::Arc;

use crate::auth::Principal;
use crate::bucket_log::BucketLog;
use crate::catalog::TableInfo;
use crate::core::NodeCore;
use crate::error::{ApiError, ApiResult};
use crate::settings::KafkaSettings;

/// The front end's state for one connection.
#[derive(Clone)]
pub(crate) struct Kafka {
    core: Arc<NodeCore>,
    /// The host and port this broker advertises in Metadata.
    pub(crate) host: String,
    pub(crate) port: i32,
    principal: Principal,
}

impl Kafka {
    pub(crate) fn new(core: Arc<NodeCore>, host: String, port: i32, principal: Principal) -> Self {
        Kafka {
            core,
            host,
            port,
            principal,
        }
    }

    pub(crate) fn core(&self) -> &Arc<NodeCore> {
        &self.core
    }

    pub(crate) fn settings(&self) -> &KafkaSettings {
        &self.core.settings().kafka
    }

    pub(crate) fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The log of Kafka partition `index` of `info`: bucket `index` of its first partition.
    pub(crate) async fn partition(
        &self,
        info: &Arc<TableInfo>,
        index: i32,
    ) -> ApiResult<Arc<dyn BucketLog>> {
        let bucket = u32::try_from(index).map_err(|_| ApiError::NoSuchBucket {
            message: format!("partition {index} does not exist"),
        })?;
        let partition = info
            .record()
            .partitions
            .first()
            .cloned()
            .unwrap_or_default();
        self.core.bucket_log(info, bucket, &partition, None).await
    }
}
