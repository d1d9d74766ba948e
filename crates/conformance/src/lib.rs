//! Differential conformance testing: drives Apache Kafka (the reference) and Moldau (the
//! subject) with the same request sequences and compares their responses field by field.
//!
//! - [`scenario`]: scenarios as data (JSON files under `scenarios/`).
//! - [`runner`]: plans versions (every version both brokers advertise), runs a scenario on
//!   one broker over raw TCP with requests built by Moldau's protocol layer, and records a
//!   transcript.
//! - [`normalize`]: what legitimately differs between two brokers, made equal (each rule
//!   documented there).
//! - [`compare`]: field-by-field differences, minus the intentional ones
//!   (`intentional.json`).
//! - [`generate`]: derives more cases from the scenarios (seeded), and reduces a difference
//!   to a minimal scenario.

pub mod compare;
pub mod generate;
pub mod json;
pub mod messages;
pub mod normalize;
pub mod records;
pub mod runner;
pub mod scenario;
pub mod wire;

use compare::{compare_runs, Intentional, RunReport};
use runner::{plan, run_once, run_prefix, Target};
use scenario::Scenario;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// The two brokers and what they have in common.
#[derive(Debug)]
pub struct Pair {
    pub reference: Target,
    pub subject: Target,
    pub common: BTreeMap<i16, (i16, i16)>,
    /// Names runs of this process apart from other processes' runs on the same brokers.
    token: u16,
    counter: AtomicU32,
}

impl Pair {
    pub fn new(reference: Target, subject: Target) -> Pair {
        let common = runner::common_versions(&reference, &subject);
        let token = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() ^ d.as_secs() as u32)
            ^ std::process::id()) as u16;
        Pair {
            reference,
            subject,
            common,
            token,
            counter: AtomicU32::new(0),
        }
    }

    /// A fresh run prefix.
    pub fn next_prefix(&self) -> String {
        run_prefix(self.token, self.counter.fetch_add(1, Ordering::Relaxed))
    }

    /// Runs one planned run on both brokers at once and compares the transcripts.
    pub fn run(
        &self,
        s: &Scenario,
        run: usize,
        versions: &[runner::At],
        intentional: &[Intentional],
    ) -> RunReport {
        let prefix = self.next_prefix();
        let (a, b) = std::thread::scope(|scope| {
            let a = scope.spawn(|| run_once(&self.reference, s, versions, &prefix));
            let b = run_once(&self.subject, s, versions, &prefix);
            (a.join(), b)
        });
        match a {
            Ok(a) => compare_runs(&s.name, run, &prefix, &a, &b, intentional),
            Err(_) => RunReport {
                scenario: s.name.clone(),
                run,
                prefix,
                harness_errors: vec!["the reference run panicked".into()],
                ..RunReport::default()
            },
        }
    }

    /// Runs every run of every scenario, `jobs` at a time, and returns the reports in
    /// scenario order. `progress` is called after each run.
    pub fn run_all(
        &self,
        scenarios: &[Scenario],
        intentional: &[Intentional],
        jobs: usize,
        progress: &(dyn Fn(&RunReport) + Sync),
    ) -> anyhow::Result<Vec<RunReport>> {
        let mut queue = VecDeque::new();
        for (si, s) in scenarios.iter().enumerate() {
            for (ri, versions) in plan(s, &self.common)?.into_iter().enumerate() {
                queue.push_back((si, ri, versions));
            }
        }
        let queue = Mutex::new(queue);
        let results = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..jobs.max(1) {
                scope.spawn(|| loop {
                    let job = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                    let Some((si, ri, versions)) = job else {
                        return;
                    };
                    let report = self.run(&scenarios[si], ri, &versions, intentional);
                    progress(&report);
                    results
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(((si, ri), report));
                });
            }
        });
        let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
        results.sort_by_key(|(k, _)| *k);
        Ok(results.into_iter().map(|(_, r)| r).collect())
    }
}
