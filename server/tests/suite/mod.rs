//! The end-to-end HTTP suite: a real node on a random loopback port, driven through real HTTP
//! (reqwest, an SSE client library, curl). Every test takes a [`Backend`] so the same suite runs
//! against the embedded default (local files + redb) and against S3 + etcd.
//!
//! Included by `server/tests/http_embedded.rs` and `tests/tests/http_s3_etcd.rs`. The files:
//! `harness` (the node and the HTTP calls the tests repeat), `data` (the rows written and read),
//! then one file per concept under test: `tables`, `schemas` (types and `[limits]`), `append`,
//! `writers`, `read`, `sse`, `errors` (table-driven), `node` (restart, health, metrics, shutdown),
//! `retention` (policies, trimming by size and by age), `recovery` (metadata snapshots and
//! restore), `compressed` (tables stored compressed), `bounds` (the render bound, append
//! decoding bounds, parked-read limits), `access` (tokens and
//! scopes, the writer-id rule, explicit Content-Type), `edge` (the serving loop's limits and
//! timeouts, against raw TCP clients).

#![allow(
    dead_code,
    unreachable_pub,
    unused_imports,
    reason = "shared by two test crates, each using a different part"
)]

mod access;
mod append;
mod bounds;
mod compressed;
mod data;
mod edge;
mod errors;
mod harness;
mod node;
mod read;
mod recovery;
mod retention;
mod schemas;
mod sse;
mod tables;
mod writers;

pub use access::{access_control, open_without_tokens, writer_ids_and_content_types};
pub use append::append_and_read_each_format;
pub use bounds::{append_decoding_bounds, parked_read_limits, read_render_bound};
pub use compressed::compressed_tables;
pub use edge::{
    body_limits_per_format, connection_limits, header_and_idle_timeouts, host_allowlist,
    request_budget_answers_503, write_timeout_cuts_off_a_client_that_stops_reading,
};
pub use errors::{error_cases, rate_limit};
pub use harness::{Backend, embedded};
pub use node::{health_metrics_and_shutdown, restart_reads_everything_back};
pub use read::{
    long_polls_share_rendered_bodies, offsets_and_timestamps, projection, tail_reads_and_long_poll,
};
pub use recovery::metadata_snapshot_and_restore;
pub use retention::{retention_by_age, retention_by_size, retention_policy_api};
pub use schemas::{
    every_allowed_type_round_trips, hostile_schemas_are_refused, table_shape_limits,
};
pub use sse::{sse_readers_share_rendered_events, sse_with_client_library, sse_with_curl};
pub use tables::tables_lifecycle;
pub use writers::idempotent_retries;

/// One `#[tokio::test]` per suite function, for a backend maker `fn(&str) -> Backend`.
macro_rules! http_suite {
    ($make:path) => {
        http_suite!(@tests $make;
            tables_lifecycle, append_and_read_each_format, projection, tail_reads_and_long_poll,
            sse_with_client_library, sse_with_curl, sse_readers_share_rendered_events,
            long_polls_share_rendered_bodies,
            idempotent_retries, error_cases,
            offsets_and_timestamps, restart_reads_everything_back, health_metrics_and_shutdown,
            rate_limit, read_render_bound, append_decoding_bounds, parked_read_limits,
            every_allowed_type_round_trips, hostile_schemas_are_refused, table_shape_limits,
            access_control, open_without_tokens, writer_ids_and_content_types, connection_limits, header_and_idle_timeouts,
            write_timeout_cuts_off_a_client_that_stops_reading, body_limits_per_format,
            request_budget_answers_503, host_allowlist, retention_policy_api, retention_by_size,
            metadata_snapshot_and_restore, compressed_tables);
    };
    (@tests $make:path; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                suite::$name($make(stringify!($name))).await;
            }
        )*
    };
}
