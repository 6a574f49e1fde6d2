//! Codec benchmarks (filled in with the codec).
fn main() {}
