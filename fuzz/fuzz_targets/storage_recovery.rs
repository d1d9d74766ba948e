//! libFuzzer target `storage_recovery`: the body is `fuzzing::storage_recovery` (its doc says what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzzing::storage_recovery(data));
