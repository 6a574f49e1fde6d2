//! Fuzz target: a table schema (JSON, or a bare type text).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mink_fuzz::http::run_schema(data);
});
