//! What every request of the Kafka front end shares: the node core, this broker's address, the
//! connection's principal.

use std::net::SocketAddr;
use std::sync::Arc;

use super::groups::Coordinator;
use crate::auth::Principal;
use crate::bucket_log::BucketLog;
use crate::catalog::TableInfo;
use crate::core::NodeCore;
use crate::error::{ApiError, ApiResult};
use crate::settings::KafkaSettings;
use crate::settings::Scope;

/// The front end's state for one connection.
#[derive(Clone)]
pub(crate) struct Kafka {
    core: Arc<NodeCore>,
    /// The host and port this broker advertises in Metadata.
    pub(crate) host: String,
    pub(crate) port: i32,
    broker_id: i32,
    /// What the connection may do: the token's principal once SASL authenticated it (or at
    /// once when the node requires no token); until then a principal that may do nothing.
    principal: Principal,
    /// Whether requests other than ApiVersions and SASL's are served on the connection.
    pub(crate) authenticated: bool,
    /// The SASL mechanism the client asked for in its SaslHandshake.
    pub(crate) mechanism: Option<String>,
    /// The client's address.
    pub(crate) peer: SocketAddr,
    groups: Arc<Coordinator>,
}

/// What the connections of one Kafka front end share.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) core: Arc<NodeCore>,
    pub(crate) host: String,
    pub(crate) port: i32,
    /// This node's broker id (its registration's, the same for every life of the node id).
    pub(crate) broker_id: i32,
    pub(crate) groups: Arc<Coordinator>,
}

impl Kafka {
    /// A connection from `peer`: authenticated at once when the node requires no token.
    pub(crate) fn new(shared: &Shared, peer: SocketAddr) -> Self {
        let open = shared.core.authenticator().authenticate(None).ok();
        Kafka {
            core: shared.core.clone(),
            host: shared.host.clone(),
            port: shared.port,
            broker_id: shared.broker_id,
            authenticated: open.is_some(),
            principal: open.unwrap_or_else(|| Principal::new(Scope::Read, Some(Vec::new()))),
            mechanism: None,
            peer,
            groups: shared.groups.clone(),
        }
    }

    /// The connection is now `principal`'s.
    pub(crate) fn authenticated_as(&mut self, principal: Principal) {
        self.principal = principal;
        self.authenticated = true;
    }

    /// The group coordinator.
    pub(crate) fn groups(&self) -> &Coordinator {
        &self.groups
    }

    /// This broker's id in Metadata and FindCoordinator.
    pub(crate) fn broker_id(&self) -> i32 {
        self.broker_id
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
