//! Placeholder replaced by the append-rate harness.
fn main() {}
