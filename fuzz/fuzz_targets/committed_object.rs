//! Fuzz target: a committed object, read by footer, index and blocks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mink_fuzz::objects::run_committed(data);
});
