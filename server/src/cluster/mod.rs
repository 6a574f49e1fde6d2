//! The node's part in a cluster (docs/cluster.md).
//!
//! - `membership.rs`: [`Membership`]: this life of the node (its incarnation and member id), its
//!   lease session, its registration, the earlier lives whose WALs it recovers, and the fence
//!   that makes its WAL follow the acknowledgement rule.
//! - `view.rs`: [`OwnershipView`]: the watched, local view of bucket assignments and live nodes
//!   that routes every bucket request ([`Route`]: here, a 307 to the owner, or 503).
//! - `leader.rs`: [`Leader`]: the elected node's re-spread of buckets when nodes join, drain or
//!   die ([`plan`]), fenced on its leadership.
//! - `failover.rs`: [`Failover`]: recovering dead members, one claim each, and the
//!   [`Suspects`] stream opens report.
//!
//! On a metadata store without leases (redb, the embedded default) the node is a cluster of one:
//! it has an incarnation and a registration, but no lease and no fence.

mod failover;
mod leader;
mod life_lock;
mod membership;
mod view;

pub use failover::{Failover, Suspects};
pub use leader::{Leader, plan};
pub use membership::Membership;
pub use view::{OwnershipView, Route, assignment_key};
