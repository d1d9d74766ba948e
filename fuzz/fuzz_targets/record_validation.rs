//! libFuzzer target `record_validation`: the body is `fuzzing::record_validation` (its doc says what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::record_validation(data));
