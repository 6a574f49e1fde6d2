//! Fuzz target: a WAL object, decoded whole as recovery decodes it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mink_fuzz::objects::run_wal(data);
});
