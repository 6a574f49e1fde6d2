//! Mink's metadata: the KV trait and its backends (memory, redb, etcd), id allocators, the metadata
//! log and the node-local object index.
//!
//! The crate is filled in by the metadata issue; until then it holds nothing.
