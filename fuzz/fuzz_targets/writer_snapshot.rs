//! Fuzz target: a tablet's writer snapshot.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mink_fuzz::tablet::run_snapshot(data);
});
