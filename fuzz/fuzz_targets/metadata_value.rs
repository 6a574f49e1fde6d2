//! Fuzz target: a metadata value, decoded as every record kind.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mink_fuzz::metadata::run(data);
});
