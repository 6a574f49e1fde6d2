//! The write-ahead log: a sequence of small objects on the WAL bucket, one per group commit.
//!
//! - [`writer`]: group commit with several PUTs in flight.
//! - `release`: which acknowledgements may go, each stream's in its submission order.
//! - `settings` and `error`: [`WalSettings`], [`WalError`] and [`WalIdError`].
//! - `hedge`: a PUT still unanswered well past what recent PUTs took is sent a second time.
//! - [`replay`]: reading a node's WAL back at recovery, through the metadata's WAL registry.
//!
//! The bytes of a WAL object are laid out in [`crate::format::wal`].
//!
//! Object keys are `{wal_prefix}{node}/{id:016x}`, with ids reserved in blocks from the metadata
//! (the WAL registry) before they are used, so recovery never lists the bucket.

mod error;
mod hedge;
mod release;
pub mod replay;
mod settings;
pub mod writer;

pub use crate::format::wal::{WalFormatError, WalRecord, WalSpan};
pub use error::{WalError, WalIdError};
pub use release::{Ack, WrittenObject};
pub use settings::{MAX_INFLIGHT_PUTS, WalSettings};
pub use writer::{AckFence, WalIdSource, WalMetrics, WalWriter};

/// The key prefix of `node`'s WAL objects under the WAL root `root` (ending in `/` unless empty).
pub fn node_prefix(root: &str, node: &str) -> String {
    format!("{root}{node}/")
}

#[cfg(test)]
mod tests;
