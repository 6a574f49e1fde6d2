//! Real clients users run, against a node: each drives the node from its own process and
//! checks what it sees; the test checks the same data from the node's side.
//!
//! - `pyarrow`: `pyarrow.flight` (tests/clients/pyarrow_flight.py) over the Flight front end.
//! - `chromium`: headless Chromium running a page from another origin (CORS, EventSource).
//! - `dashboard`: the built-in dashboard in headless Chromium, driven by ChromeDriver.
//! - `kcat`: kcat (librdkafka) over the Kafka front end; `kcat_groups`: its balanced consumer
//!   (consumer groups, committed offsets) and topics created on first use; `kcat_sasl`: TLS
//!   and SASL/PLAIN with a token.
//! - `kafka_clients`: confluent-kafka and kafka-python over the Kafka front end, through
//!   restarts.
//! - `durable_streams`: the Durable Streams conformance suite (npm) against `/ds`; and the
//!   mapping of streams onto tables, through `/v1` and a restart.
//! - `openapi`: the API's OpenAPI document through `openapi-spec-validator`.

mod chromium;
mod dashboard;
mod durable_streams;
mod kafka_clients;
mod kcat;
mod kcat_groups;
mod kcat_sasl;
mod openapi;
mod pyarrow;

/// A node on loopback with objects and metadata in memory and no Flight port, `tweak`ed.
async fn memory_node(tweak: impl FnOnce(&mut mink_server::Settings)) -> mink_server::Node {
    let mut settings = mink_server::Settings {
        listen: "127.0.0.1:0".parse().expect("address"),
        ..mink_server::Settings::default()
    };
    settings.flight.listen = None;
    settings.kafka.listen = None;
    tweak(&mut settings);
    mink_server::Node::builder()
        .settings(settings)
        .object_store(std::sync::Arc::new(
            mink_s3stream::storage::ObjectStoreBackend::memory(),
        ))
        .metadata(std::sync::Arc::new(mink_metadata::MemoryKv::new()))
        .start()
        .await
        .expect("node starts")
}
