//! The fuzz targets on stable, as CI runs them: every file of `fuzz/corpus/<target>`, then
//! seeded mutations of them, under an allocation cap. A panic, a broken assertion or an
//! allocation past the cap (the process aborts with "memory allocation of N bytes failed")
//! fails the test. See fuzz/README.md.
//!
//! Knobs (environment): MOLDAU_FUZZ_ITERS mutations per target (default per target below),
//! MOLDAU_FUZZ_SEED (default fixed, so CI runs the same inputs every time),
//! MOLDAU_FUZZ_SECONDS time limit per target (default 60), MOLDAU_FUZZ_INPUT=FILE runs only
//! that file through every target (to reproduce a finding).

use std::path::PathBuf;
use std::time::Duration;

use fuzzing::{corpus_dir, load_corpus, replay, TARGETS};

/// Inputs of up to 64 KiB never need more than this live at once (batches decompress within
/// 1 MiB, reads take 64 KiB): anything past it is an allocation sized by a claim in the
/// input, not by the input.
const ALLOCATION_CAP: usize = 256 << 20;

#[global_allocator]
static ALLOCATOR: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);

fn env_num(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// Where the input being run is kept, so an abort (allocation cap) does not lose it.
fn current_input_path(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-{target}.current"))
}

fn artifact_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/artifacts")
        .join(target)
}

fn run_target(name: &str, default_iters: u64) {
    let target = TARGETS
        .iter()
        .find(|t| t.name == name)
        .expect("target exists");
    // One line per panic, no backtrace: a finding is reported with its input below.
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let at = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let payload = info.payload();
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            eprintln!("panic at {at}: {msg}");
        }));
    });
    // Only this test's own allocations count against the cap (nextest runs each test in its
    // own process; under plain `cargo test` the three share it, still far below the cap).
    ALLOCATOR
        .set_limit(ALLOCATOR.allocated() + ALLOCATION_CAP)
        .expect("set the allocation cap");
    let corpus = match std::env::var_os("MOLDAU_FUZZ_INPUT") {
        Some(file) => {
            let bytes = std::fs::read(&file).expect("read MOLDAU_FUZZ_INPUT");
            vec![(PathBuf::from(file).display().to_string(), bytes)]
        }
        None => load_corpus(&corpus_dir(name)).expect("read the corpus"),
    };
    assert!(
        corpus.len() >= 10 || std::env::var_os("MOLDAU_FUZZ_INPUT").is_some(),
        "{name}: the corpus in {} has {} files; it must be seeded (fuzz/README.md)",
        corpus_dir(name).display(),
        corpus.len()
    );
    let iters = if std::env::var_os("MOLDAU_FUZZ_INPUT").is_some() {
        0
    } else {
        env_num("MOLDAU_FUZZ_ITERS").unwrap_or(default_iters)
    };
    let seed = env_num("MOLDAU_FUZZ_SEED").unwrap_or(0x4d6f_6c64_6175);
    let limit = Duration::from_secs(env_num("MOLDAU_FUZZ_SECONDS").unwrap_or(60));
    let current = current_input_path(name);
    let report = replay(target.run, &corpus, iters as usize, seed, limit, |input| {
        let _ = std::fs::write(&current, input);
    });
    let _ = std::fs::remove_file(&current);
    println!(
        "fuzz {name}: {} corpus + {} mutated inputs (seed {seed:#x}) in {:.1}s, {} findings{}",
        report.corpus_inputs,
        report.mutated_inputs,
        report.elapsed.as_secs_f64(),
        report.findings.len(),
        if report.timed_out {
            " (stopped at the time limit)"
        } else {
            ""
        }
    );
    if report.findings.is_empty() {
        return;
    }
    let dir = artifact_dir(name);
    let _ = std::fs::create_dir_all(&dir);
    let mut msg = format!("fuzz target {name}: {} findings\n", report.findings.len());
    for f in &report.findings {
        let hash = f.input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
        });
        let path = dir.join(format!("crash-{hash:016x}"));
        let saved = std::fs::write(&path, &f.input).is_ok();
        let hex: String = f
            .input
            .iter()
            .take(256)
            .map(|b| format!("{b:02x}"))
            .collect();
        msg.push_str(&format!(
            "- {}: {}\n  input ({} bytes{}): {hex}\n  saved: {} (reproduce: MOLDAU_FUZZ_INPUT={} cargo test -p fuzzing --test replay {name})\n",
            f.origin,
            f.message,
            f.input.len(),
            if f.input.len() > 256 { ", first 256 shown" } else { "" },
            if saved { path.display().to_string() } else { "no".into() },
            path.display(),
        ));
    }
    panic!("{msg}");
}

/// The cap is real: a target that allocates past it kills the run (checked in a child
/// process, which must abort with the allocator's message).
#[test]
fn an_allocation_past_the_cap_fails_the_run() {
    if std::env::var_os("MOLDAU_FUZZ_ALLOC_PROBE").is_some() {
        ALLOCATOR
            .set_limit(ALLOCATOR.allocated() + ALLOCATION_CAP)
            .expect("set the allocation cap");
        let v: Vec<u8> = Vec::with_capacity(ALLOCATION_CAP + 1);
        std::hint::black_box(&v);
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args(["--exact", "an_allocation_past_the_cap_fails_the_run"])
        .env("MOLDAU_FUZZ_ALLOC_PROBE", "1")
        .output()
        .expect("run the probe");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the probe passed:\n{stderr}");
    assert!(
        stderr.contains("memory allocation of"),
        "the probe failed for another reason:\n{stderr}"
    );
}

#[test]
fn decode_request() {
    run_target("decode_request", 20_000);
}

#[test]
fn record_validation() {
    run_target("record_validation", 20_000);
}

#[test]
fn storage_recovery() {
    run_target("storage_recovery", 5_000);
}
