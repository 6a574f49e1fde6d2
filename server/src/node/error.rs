//! Why a node could not start or stop cleanly: one error type for the builder, the probes and
//! shutdown.

use std::net::SocketAddr;

/// Why a node could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// A component is missing from the builder.
    #[error("the node builder needs {what}")]
    Missing {
        /// What is missing.
        what: &'static str,
    },
    /// The settings are unusable.
    #[error("invalid settings: {message}")]
    Settings {
        /// What is wrong.
        message: String,
    },
    /// A store failed its start-up probe.
    #[error("{what} failed its start-up check ({step}): {cause}; {fix}")]
    Probe {
        /// Which store.
        what: &'static str,
        /// The step that failed.
        step: &'static str,
        /// What went wrong.
        cause: String,
        /// The setting to fix.
        fix: String,
    },
    /// The object store could not be set up.
    #[error("object storage ({what}): {source}")]
    Storage {
        /// Which store.
        what: &'static str,
        /// The cause.
        #[source]
        source: mink_s3stream::storage::StorageError,
    },
    /// Metadata could not be opened.
    #[error("metadata: {source}")]
    Metadata {
        /// The cause.
        #[from]
        source: mink_metadata::MetaError,
    },
    /// The stream engine failed to open or shut down.
    #[error("stream engine: {source}")]
    Engine {
        /// The cause.
        #[from]
        source: mink_s3stream::error::StreamError,
    },
    /// The listener could not be bound or failed.
    #[error("HTTP listener on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Another life of the node id stays registered: another process runs with this node id.
    #[error(
        "node id {node_id} is registered by {member}, which is still alive: is another process running with this node_id?"
    )]
    NodeIdInUse {
        /// The node id.
        node_id: String,
        /// The member holding it.
        member: String,
    },
    /// Closing tablets at shutdown failed.
    #[error("closing tablets: {message}")]
    Close {
        /// What failed.
        message: String,
    },
}
