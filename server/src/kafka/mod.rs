//! The Kafka front end (docs/kafka.md), built in steps: this step holds the parts below the
//! connection, each tested on its own; the listener and the request handlers that use them
//! land next, and until then nothing serves Kafka.
//!
//! Files: `wire` (a reader of request bodies that never allocates by a declared count),
//! `requests` (the request bodies we serve, per version), `versions` (the APIs and versions
//! served, ApiVersions), `records` (Kafka record batches, decoded and encoded, compression
//! within a budget), `table` (the Kafka schema and rows to records), `errors` (node errors as
//! Kafka codes).

mod errors;
mod records;
mod requests;
mod table;
mod versions;
mod wire;
