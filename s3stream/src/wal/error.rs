//! Why an append did not become durable, and why WAL ids could not be reserved.

use std::sync::Arc;

use crate::storage::StorageError;

/// Why an append did not become durable.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    /// The PUT carrying the append failed after every retry.
    #[error("WAL object {key} could not be written after {attempts} attempts: {source}")]
    PutFailed {
        /// The WAL object's key.
        key: String,
        /// Attempts made.
        attempts: u32,
        /// The last storage error.
        source: Arc<StorageError>,
    },
    /// An earlier WAL object failed, so this append cannot be acknowledged in order. The engine
    /// must be reopened; recovery replays what landed.
    #[error("the WAL failed earlier ({cause}); appends are refused until the engine is reopened")]
    Failed {
        /// The first failure.
        cause: Arc<WalError>,
    },
    /// No WAL object id could be reserved.
    #[error("{source}")]
    Ids {
        /// What went wrong.
        source: Arc<WalIdError>,
    },
    /// A failpoint armed by a test fired (a simulated crash).
    #[error("failpoint {0} fired")]
    Failpoint(&'static str),
    /// The writer was shut down before the append was uploaded.
    #[error("the WAL is shut down")]
    ShutDown,
    /// The PUT of WAL object `key` succeeded after the node could prove its lease alive, so its
    /// appends are not acknowledged; the node must rejoin as a new incarnation.
    #[error(
        "WAL object {key} was written after the node's lease deadline; the node stops acknowledging appends until it rejoins the cluster"
    )]
    Fenced {
        /// The WAL object's key.
        key: String,
    },
}

/// Why a block of WAL ids could not be reserved.
#[derive(Debug, thiserror::Error)]
#[error("could not reserve WAL object ids: {source}")]
pub struct WalIdError {
    /// What went wrong.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync + 'static>,
}
