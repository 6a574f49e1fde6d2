//! The Mink node: configuration, the HTTP API, ownership and redirects, metrics.
//!
//! The crate is filled in by the node issue; until then it holds nothing.
