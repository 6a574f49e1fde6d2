//! Fuzz target: an Arrow IPC append body.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mink_fuzz::http::run_arrow(data);
});
