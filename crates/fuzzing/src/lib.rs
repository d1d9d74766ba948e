//! The bodies of Moldau's fuzz targets, shared by the coverage-guided libFuzzer binaries in
//! `fuzz/` (nightly, `cargo fuzz run`) and by the deterministic stable driver CI runs
//! (`tests/replay.rs`: every committed corpus file, then seeded mutations of them).
//!
//! A target takes arbitrary bytes and must neither panic nor allocate without bound; each
//! asserts what its code promises for input it accepts (a decoded request re-encodes to the
//! same request; a validated batch decodes record by record; a recovered log reads back whole
//! batches to its end and takes appends), so a wrong answer is a finding too, not only a
//! crash. See fuzz/README.md.

pub mod driver;
pub mod mutate;
mod targets;

pub use driver::{load_corpus, replay, Finding, Report};
pub use targets::{decode_request, record_validation, storage_recovery};

/// A fuzz target: its name (the `fuzz/fuzz_targets/<name>.rs` binary and the
/// `fuzz/corpus/<name>` directory) and its body.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "decode_request",
        run: decode_request,
    },
    Target {
        name: "record_validation",
        run: record_validation,
    },
    Target {
        name: "storage_recovery",
        run: storage_recovery,
    },
];

/// The committed corpus of a target: `<repo>/fuzz/corpus/<name>`.
pub fn corpus_dir(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(name)
}
