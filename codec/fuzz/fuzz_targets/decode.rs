//! Fuzz target: view, validate, decode (fixed schema) and projection over arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mink_codec_fuzz::run(data);
});
