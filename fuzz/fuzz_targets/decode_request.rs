//! libFuzzer target `decode_request`: the body is `fuzzing::decode_request` (its doc says what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::decode_request(data));
