//! The stable driver: runs a target over its corpus, then over seeded mutations of it,
//! catching panics. Deterministic: the same seed and iteration count run the same inputs on
//! every machine, so a finding in CI reproduces anywhere.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::mutate::{mutate, Rng};

/// Longest input the driver makes (libFuzzer's default `-max_len` is 4096; record batches
/// and segments need a little more room).
pub const MAX_LEN: usize = 64 * 1024;

/// An input that made the target panic.
#[derive(Debug)]
pub struct Finding {
    pub input: Vec<u8>,
    /// "corpus FILE" or "mutation N of FILE".
    pub origin: String,
    pub message: String,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Report {
    pub corpus_inputs: usize,
    pub mutated_inputs: usize,
    pub elapsed: Duration,
    pub findings: Vec<Finding>,
    /// True when the time limit stopped the mutations early.
    pub timed_out: bool,
}

/// Reads every file of a corpus directory, sorted by name.
pub fn load_corpus(dir: &Path) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_file() {
            out.push((
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path())?,
            ));
        }
    }
    out.sort();
    Ok(out)
}

/// Runs `target` on every corpus entry, then on `iterations` mutations (entry `i % len`,
/// mutated with a generator seeded by `seed`), stopping early after `time_limit` or at the
/// third finding. `before` sees every input before it runs (the caller can keep it where an
/// abort would not lose it).
pub fn replay(
    target: fn(&[u8]),
    corpus: &[(String, Vec<u8>)],
    iterations: usize,
    seed: u64,
    time_limit: Duration,
    mut before: impl FnMut(&[u8]),
) -> Report {
    let started = Instant::now();
    let mut report = Report::default();
    let mut run = |input: Vec<u8>, origin: String, report: &mut Report| {
        before(&input);
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| target(&input))) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
                .unwrap_or_else(|| "panic".into());
            report.findings.push(Finding {
                input,
                origin,
                message,
            });
        }
    };
    for (name, bytes) in corpus {
        run(bytes.clone(), format!("corpus {name}"), &mut report);
        report.corpus_inputs += 1;
    }
    let seeds: Vec<Vec<u8>> = corpus.iter().map(|(_, b)| b.clone()).collect();
    let mut rng = Rng::new(seed);
    for i in 0..iterations {
        if report.findings.len() >= 3 {
            break;
        }
        if started.elapsed() > time_limit {
            report.timed_out = true;
            break;
        }
        let (base, input) = if seeds.is_empty() {
            (
                "nothing".to_string(),
                mutate(&mut rng, &[], &seeds, MAX_LEN),
            )
        } else {
            let k = i % seeds.len();
            (
                corpus[k].0.clone(),
                mutate(&mut rng, &seeds[k], &seeds, MAX_LEN),
            )
        };
        run(input, format!("mutation {i} of {base}"), &mut report);
        report.mutated_inputs += 1;
    }
    report.elapsed = started.elapsed();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parser with a planted bug two mutations away from its seed: the driver finds it.
    fn planted(data: &[u8]) {
        if data.len() >= 4 && data[0] == b'K' && data[3] == 0xff {
            panic!("planted bug");
        }
    }

    #[test]
    fn finds_a_planted_bug_and_reports_the_input() {
        let corpus = vec![("seed".to_string(), b"Kafka frame".to_vec())];
        let report = replay(
            planted,
            &corpus,
            20_000,
            1,
            Duration::from_secs(600),
            |_| {},
        );
        assert_eq!(report.corpus_inputs, 1);
        let f = report.findings.first().expect("the planted bug is found");
        assert_eq!(f.message, "planted bug");
        assert!(f.origin.starts_with("mutation "), "{}", f.origin);
        assert_eq!((f.input[0], f.input[3]), (b'K', 0xff));
    }

    #[test]
    fn a_clean_target_has_no_findings() {
        let corpus = vec![("seed".to_string(), b"Kafka".to_vec())];
        let mut seen = 0;
        let report = replay(
            |_| {},
            &corpus,
            1000,
            1,
            Duration::from_secs(600),
            |_| seen += 1,
        );
        assert!(report.findings.is_empty());
        assert_eq!((report.mutated_inputs, seen), (1000, 1001));
    }
}
