//! Fuzz target: a stream manifest or a batch of them, decoded as a rebuild reads them.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mink_fuzz::objects::run_manifest(data);
});
