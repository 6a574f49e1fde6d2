//! The node's part in a cluster (docs/cluster.md).
//!
//! - `membership.rs`: [`Membership`]: this life of the node (its incarnation and member id), its
//!   lease session, its registration, the earlier lives whose WALs it recovers, and the fence
//!   that makes its WAL follow the acknowledgement rule.
//!
//! On a metadata store without leases (redb, the embedded default) the node is a cluster of one:
//! it has an incarnation and a registration, but no lease and no fence.

mod membership;

pub use membership::Membership;
