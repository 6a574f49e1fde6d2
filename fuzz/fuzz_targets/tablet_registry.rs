//! Fuzz target: a tablet registry value.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mink_fuzz::tablet::run_registry(data);
});
