//! `conformance`: runs the differential scenarios (and generated cases) against a reference
//! broker (Apache Kafka) and a subject (Moldau), and reports every difference.

use anyhow::Context;
use clap::{Parser, Subcommand};
use conformance::compare::{load_intentional, RunReport};
use conformance::runner::{Auth, Target};
use conformance::scenario::load_dir;
use conformance::Pair;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

#[derive(Parser)]
#[command(about = "Differential conformance harness: Apache Kafka vs Moldau")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs the scenarios on both brokers and compares every response.
    Run(RunArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// The reference broker (Apache Kafka), HOST:PORT.
    #[arg(long)]
    reference: String,
    /// The broker under test (Moldau), HOST:PORT.
    #[arg(long)]
    subject: String,
    /// Speaks SASL/PLAIN to both brokers (SASL_PLAINTEXT listeners) with these users,
    /// USER:PASSWORD (repeatable); a step's `as` picks one. Without it no step may say `as`.
    #[arg(long = "sasl-user", value_name = "USER:PASSWORD")]
    sasl_users: Vec<String>,
    /// The user of steps without `as` and of the harness's own requests (probing, warming
    /// up, settling); it must be a super user. Default: the first --sasl-user.
    #[arg(long, value_name = "USER")]
    sasl_default_user: Option<String>,
    /// Directory of scenario files.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios"))]
    scenarios: PathBuf,
    /// The differences kept on purpose.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/intentional.json"))]
    intentional: PathBuf,
    /// Only run the scenarios whose name contains this (generated cases still derive from
    /// all of them).
    #[arg(long)]
    only: Option<String>,
    /// Runs in parallel.
    #[arg(long, default_value_t = 4)]
    jobs: usize,
    /// Writes the full report (JSON) here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Prints every compared run, not only the differing ones.
    #[arg(long)]
    verbose: bool,
    /// Prints each run's transcript (normalised outcomes of both sides).
    #[arg(long)]
    transcripts: bool,
    /// After the scenarios, runs generated cases for this many seconds.
    #[arg(long, env = "CONFORMANCE_GENERATE_SECS", default_value_t = 0)]
    generate_secs: u64,
    /// At most this many generated cases (within the time above).
    #[arg(long, env = "CONFORMANCE_GENERATE_CASES", default_value_t = u64::MAX)]
    generate_cases: u64,
    /// Seed of the generated cases (the same seed derives the same cases).
    #[arg(long, env = "CONFORMANCE_SEED", default_value_t = 1)]
    seed: u64,
    /// Writes each reduced difference the generator finds here, as a scenario file to keep.
    #[arg(long)]
    found: Option<PathBuf>,
}

fn addr(s: &str) -> anyhow::Result<SocketAddr> {
    s.to_socket_addrs()
        .with_context(|| format!("resolve {s}"))?
        .next()
        .with_context(|| format!("no address for {s}"))
}

fn print_diffs(r: &RunReport) {
    for e in &r.harness_errors {
        println!("  HARNESS ERROR {e}");
    }
    for d in &r.diffs {
        let tag = match &d.kept {
            Some(reason) => format!("kept ({reason})"),
            None => "DIFFERENCE".to_string(),
        };
        println!(
            "  {tag}: step {} {} v{}",
            d.step,
            d.api,
            d.version.map_or("-".into(), |v| v.to_string())
        );
        if d.kept.is_none() {
            println!("    request: {}", d.request);
            for p in d.paths.iter().take(20) {
                println!(
                    "    {}: reference {} / subject {}",
                    p.path, p.reference, p.subject
                );
            }
            if d.paths.len() > 20 {
                println!("    ... {} more", d.paths.len() - 20);
            }
        }
    }
}

fn run(args: RunArgs) -> anyhow::Result<bool> {
    let auth = if args.sasl_users.is_empty() {
        None
    } else {
        Some(Auth::parse(
            &args.sasl_users,
            args.sasl_default_user.as_deref(),
        )?)
    };
    let reference = Target::probe("reference", addr(&args.reference)?, auth.clone())?;
    let subject = Target::probe("subject", addr(&args.subject)?, auth)?;
    reference.warm_up().context("warm up the reference")?;
    subject.warm_up().context("warm up the subject")?;
    let pair = Pair::new(reference, subject);
    let all_scenarios = load_dir(&args.scenarios)?;
    let mut scenarios = all_scenarios.clone();
    if let Some(only) = &args.only {
        scenarios.retain(|s| s.name.contains(only.as_str()));
    }
    let intentional = load_intentional(&args.intentional)?;
    let missing: Vec<String> = pair
        .reference
        .versions
        .keys()
        .filter(|k| !pair.subject.versions.contains_key(k))
        .filter_map(|k| {
            protocol::ApiKey::try_from(*k)
                .ok()
                .map(|a| format!("{a:?}"))
        })
        .collect();
    println!(
        "conformance: {} scenarios; {} APIs in common; APIs only the reference advertises: {}",
        scenarios.len(),
        pair.common.len(),
        missing.join(" ")
    );
    let verbose = args.verbose || args.transcripts;
    let transcripts = args.transcripts;
    let started = std::time::Instant::now();
    let reports = pair.run_all(&scenarios, &intentional, args.jobs, &|r| {
        if r.failed() || verbose {
            println!(
                "{} run {} ({}): {} compared, {} skipped",
                r.scenario, r.run, r.prefix, r.compared, r.skipped
            );
            print_diffs(r);
        }
        if transcripts {
            for (step, api, v, a, b) in &r.transcript {
                let v = v.map_or("-".into(), |v| v.to_string());
                if a == b {
                    println!("    step {step} {api} v{v}: {a}");
                } else {
                    println!(
                        "    step {step} {api} v{v}:\n      reference {a}\n      subject   {b}"
                    );
                }
            }
        }
    })?;
    let runs = reports.len();
    let compared: usize = reports.iter().map(|r| r.compared).sum();
    let failed: Vec<&RunReport> = reports.iter().filter(|r| r.failed()).collect();
    let kept: usize = reports
        .iter()
        .map(|r| r.diffs.iter().filter(|d| d.kept.is_some()).count())
        .sum();
    if let Some(path) = &args.report {
        std::fs::write(path, serde_json::to_vec_pretty(&reports)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    // Every kept difference is named by its reason (listed in intentional.json); the runs
    // showing each are in the report and printed with --verbose.
    let mut by_reason: std::collections::BTreeMap<&str, usize> = Default::default();
    for d in reports.iter().flat_map(|r| &r.diffs) {
        if let Some(reason) = &d.kept {
            *by_reason.entry(reason.as_str()).or_default() += 1;
        }
    }
    for (reason, n) in &by_reason {
        println!("  kept {n}x: {reason}");
    }
    println!(
        "conformance: {} scenarios, {runs} runs, {compared} responses compared in {:.0}s; {} runs differ, {kept} intentional differences",
        scenarios.len(),
        started.elapsed().as_secs_f64(),
        failed.len()
    );
    let mut ok = failed.is_empty();
    if args.generate_secs > 0 {
        println!(
            "conformance: generating cases for {}s (seed {})",
            args.generate_secs, args.seed
        );
        let started = std::time::Instant::now();
        let deadline = started + std::time::Duration::from_secs(args.generate_secs);
        // Cases derive from every scenario, whatever `--only` selected to run.
        let found = conformance::generate::run(
            &pair,
            &all_scenarios,
            &intentional,
            args.seed,
            args.generate_cases,
            deadline,
            args.jobs,
            &|line| println!("  {line}"),
            &|sig, s| {
                let text = serde_json::to_string_pretty(&conformance::generate::to_file_json(s))
                    .unwrap_or_default();
                println!("DIFFERENCE found by the generator ({sig}); minimal scenario:\n{text}");
                if let Some(dir) = &args.found {
                    let name = dir.join(format!("found-{:016x}.json", fnv(sig)));
                    let written = std::fs::create_dir_all(dir)
                        .and_then(|()| std::fs::write(&name, text + "\n"));
                    match written {
                        Ok(()) => println!("  written to {}", name.display()),
                        Err(e) => println!("  could not write {}: {e}", name.display()),
                    }
                }
            },
        );
        for sig in &found.unstable {
            println!("unstable difference (did not show again when re-run): {sig}");
        }
        println!(
            "conformance: {} generated cases ({} invalid) in {:.0}s, {} differences found, {} unstable",
            found.cases,
            found.invalid,
            started.elapsed().as_secs_f64(),
            found.regressions.len(),
            found.unstable.len()
        );
        if !found.regressions.is_empty() {
            println!(
                "conformance: generated differences reproduce with CONFORMANCE_SEED={} CONFORMANCE_GENERATE_CASES={} (the same seed derives the same cases)",
                args.seed, found.cases
            );
        }
        ok &= found.regressions.is_empty();
    }
    Ok(ok)
}

/// FNV-1a, for stable file names of found differences.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let ok = match cli.cmd {
        Cmd::Run(a) => run(a)?,
    };
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
