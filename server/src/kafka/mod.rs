//! The Kafka front end (docs/kafka.md): the Kafka wire protocol on its own address
//! (`kafka.listen`), over the same node core as HTTP and Flight.
//!
//! Files: `listener` (accepts connections), `brokers` (the cluster's brokers, partition leaders
//! and group coordinators), `connection` (frames, in-order answers),
//! `dispatch` (a frame to its handler, the Produce chain, response framing), `wire` (a reader of
//! request bodies that never allocates by a declared count), `requests` (the request bodies we
//! serve, per version), `versions` (the APIs and versions served, ApiVersions), `records` (Kafka
//! record batches, decoded and encoded, compression within a budget), `table` (the Kafka schema
//! and rows to records), `errors` (node errors as Kafka codes), `state` (what a connection's
//! requests share), one file per API: `metadata`, `producer_id` (InitProducerId), `produce`,
//! `offsets` (ListOffsets), `fetch`, `topics` (CreateTopics, DeleteTopics, auto-creation), `sasl` (SaslHandshake,
//! SaslAuthenticate), `configs` (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs),
//! `delete_records`, and `groups/` (the group coordinator: membership, rebalances, committed offsets).

mod brokers;
mod configs;
mod connection;
mod delete_records;
mod dispatch;
mod errors;
mod fetch;
mod groups;
mod listener;
mod metadata;
mod offsets;
mod produce;
mod producer_id;
mod records;
mod requests;
mod sasl;
mod state;
mod table;
mod topics;
mod versions;
mod wire;

pub(crate) use listener::start;
