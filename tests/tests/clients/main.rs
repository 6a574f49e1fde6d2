//! Real clients users run, against a node: each drives the node from its own process and
//! checks what it sees; the test checks the same data from the node's side.
//!
//! - `pyarrow`: `pyarrow.flight` (tests/clients/pyarrow_flight.py) over the Flight front end.
//! - `chromium`: headless Chromium running a page from another origin (CORS, EventSource).

mod chromium;
mod pyarrow;
