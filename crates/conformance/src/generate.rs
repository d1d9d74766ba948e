//! Generated cases: seeded mutations of the scenarios (values of topics, partitions, offsets,
//! groups, members, configs; request versions; dropped, repeated and swapped steps), run on
//! both brokers, and every difference reduced to a minimal scenario.
//!
//! Values come from pools per kind of field (chosen by field name) so that mutations hit the
//! edges brokers check: -1, 0, the partition count, past the log end, unknown names, invalid
//! names, empty member ids. Counts that make a broker do real work (partitions, records,
//! timeouts) stay small, so no case can exhaust either broker.

use crate::compare::{Intentional, RunReport};
use crate::runner::At;
use crate::scenario::{api_by_name, Mode, Scenario, VersionPin, VersionPolicy};
use crate::Pair;
use serde_json::Value;
use std::collections::BTreeMap;

/// A small deterministic PRNG (SplitMix64): generated cases depend only on the seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
}

const PARTITIONS: &[i64] = &[-1, 0, 1, 2, 3, 7, 100];
const COUNTS: &[i64] = &[-2, -1, 0, 1, 2, 3, 5];
const OFFSETS: &[i64] = &[-5, -4, -3, -2, -1, 0, 1, 2, 3, 5, 1_000, i64::MAX];
const TIMESTAMPS: &[i64] = &[-5, -3, -2, -1, 0, 999_999, 1_000_000, 1_000_002, i64::MAX];
const EPOCHS: &[i64] = &[-1, 0, 1, 2, 99];
const TIMEOUTS: &[i64] = &[-1, 0, 1, 100, 1_000, 6_000, 10_000];
const SMALL: &[i64] = &[-1, 0, 1, 2, 3];
const STRINGS: &[&str] = &[
    "",
    "@x",
    "@other",
    "bad name",
    "..",
    "__consumer_offsets",
    "a/b",
];
const MEMBER_IDS: &[&str] = &["", "unknown-member", "conformance-0000"];
const CONFIG_NAMES: &[&str] = &[
    "retention.ms",
    "cleanup.policy",
    "max.message.bytes",
    "min.insync.replicas",
    "segment.bytes",
    "message.timestamp.type",
    "compression.type",
    "consumer.session.timeout.ms",
    "no.such.config",
];
const CONFIG_VALUES: &[&str] = &[
    "", "-1", "0", "1", "abc", "compact", "delete", "60000", "gzip",
];

/// The pool for an integer field, by its name.
fn int_pool(field: &str) -> &'static [i64] {
    match field {
        "num_partitions" | "count" | "assignments" => COUNTS,
        "replication_factor" => SMALL,
        "partition_index" | "partition" | "index" | "partitions" => PARTITIONS,
        f if f.contains("timestamp") => TIMESTAMPS,
        f if f.contains("offset") => OFFSETS,
        f if f.contains("epoch") || f.contains("generation") => EPOCHS,
        f if f.ends_with("_ms") || f.ends_with("timeout") => TIMEOUTS,
        "acks" => &[-2, -1, 0, 1, 2],
        "isolation_level" | "config_operation" | "key_type" => &[-1, 0, 1, 2, 3, 4],
        "resource_type" => &[0, 1, 2, 3, 4, 8, 16, 32],
        _ => SMALL,
    }
}

/// Fields the generator leaves alone: they size real work, or name structure the scenario
/// depends on.
fn frozen(field: &str) -> bool {
    matches!(
        field,
        "records" | "max_bytes" | "partition_max_bytes" | "value" | "metadata" | "assignment"
    ) || field.ends_with("_bytes")
}

/// Changes one leaf of a request, chosen at random.
fn mutate_value(rng: &mut Rng, v: &mut Value, names: &[String]) -> bool {
    let mut leaves = Vec::new();
    collect_leaves(v, &mut Vec::new(), &mut leaves);
    if leaves.is_empty() {
        return false;
    }
    let path = rng.pick(&leaves).clone();
    let field = path
        .iter()
        .rev()
        .find(|s| s.parse::<usize>().is_err())
        .cloned()
        .unwrap_or_default();
    let Some(slot) = leaf_mut(v, &path) else {
        return false;
    };
    *slot = match &*slot {
        Value::Bool(b) => Value::Bool(!b),
        Value::Number(n) if n.is_i64() => {
            let pool = int_pool(&field);
            // Time limits stay small: a long Fetch wait or session would only slow the run.
            Value::from(*rng.pick(pool))
        }
        Value::String(s) if s.starts_with('$') => Value::String(rng.pick(MEMBER_IDS).to_string()),
        Value::String(_) if field == "name" && path.iter().any(|p| p == "configs") => {
            Value::String(rng.pick(CONFIG_NAMES).to_string())
        }
        Value::String(_) if field == "value" => Value::String(rng.pick(CONFIG_VALUES).to_string()),
        Value::String(_) if field.contains("member_id") || field == "group_instance_id" => {
            Value::String(rng.pick(MEMBER_IDS).to_string())
        }
        Value::String(_) => {
            if !names.is_empty() && rng.chance(50) {
                Value::String(rng.pick(names).clone())
            } else {
                Value::String(rng.pick(STRINGS).to_string())
            }
        }
        Value::Null => Value::Array(Vec::new()),
        Value::Array(_) => Value::Null,
        other => other.clone(),
    };
    true
}

fn collect_leaves(v: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                if frozen(k) {
                    continue;
                }
                path.push(k.clone());
                collect_leaves(x, path, out);
                path.pop();
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, x) in a.iter().enumerate() {
                path.push(i.to_string());
                collect_leaves(x, path, out);
                path.pop();
            }
        }
        _ => out.push(path.clone()),
    }
}

fn leaf_mut<'a>(v: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |cur, seg| match cur {
        Value::Object(o) => o.get_mut(seg),
        Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
        _ => None,
    })
}

/// Every `@name` used in a scenario.
fn names_in(s: &Scenario) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) if s.starts_with('@') && !s.starts_with("@@") && !out.contains(s) => {
                out.push(s.clone());
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for st in &s.steps {
        walk(&st.req, &mut out);
    }
    out
}

/// Whether a scenario may be mutated: no overlapping requests (their timing is the broker's
/// business, not a protocol answer).
fn generatable(s: &Scenario) -> bool {
    s.generate && s.steps.iter().all(|st| st.mode == Mode::Call)
}

/// One generated case from `base`: 1-3 mutations, every step pinned to a random common
/// version, run once.
pub fn derive(
    rng: &mut Rng,
    base: &Scenario,
    common: &BTreeMap<i16, (i16, i16)>,
    index: u64,
) -> Scenario {
    let mut s = base.clone();
    s.name = format!("generated #{index} from '{}'", base.name);
    s.versions = VersionPolicy::Latest;
    let names = names_in(&s);
    for _ in 0..1 + rng.below(3) {
        let n = s.steps.len();
        match rng.below(10) {
            0 if n > 1 => {
                s.steps.remove(rng.below(n));
            }
            1 if n > 0 => {
                let i = rng.below(n);
                let dup = s.steps[i].clone();
                s.steps.insert(i, dup);
            }
            2 if n > 1 => {
                let i = rng.below(n - 1);
                s.steps.swap(i, i + 1);
            }
            _ if n > 0 => {
                let i = rng.below(n);
                let step = &mut s.steps[i];
                step.compare = true;
                mutate_value(rng, &mut step.req, &names);
            }
            _ => {}
        }
    }
    for step in &mut s.steps {
        let range = step
            .api
            .as_deref()
            .and_then(api_by_name)
            .and_then(|api| common.get(&(api as i16)).copied());
        if let Some((lo, hi)) = range {
            let (plo, phi) = step.version.map_or((lo, hi), VersionPin::range);
            let (lo, hi) = (lo.max(plo), hi.min(phi));
            if lo <= hi {
                let v = lo + rng.below((hi - lo + 1) as usize) as i16;
                step.version = Some(VersionPin::One(v));
            }
        }
    }
    s
}

/// The signature of a run's first real difference: its API and differing paths (indices
/// dropped), so a reduced case can be checked to still show the same difference.
pub fn signature(r: &RunReport) -> Option<String> {
    let d = r.failures().next()?;
    let mut paths: Vec<String> = d
        .paths
        .iter()
        .map(|p| {
            p.path
                .split('.')
                .filter(|s| s.parse::<usize>().is_err())
                .collect::<Vec<_>>()
                .join(".")
        })
        .collect();
    paths.sort();
    paths.dedup();
    Some(format!("{} {}", d.api, paths.join(",")))
}

/// Runs a (generated or reduced) scenario once on both brokers.
pub fn run_case(pair: &Pair, s: &Scenario, intentional: &[Intentional]) -> Option<RunReport> {
    let plan = crate::runner::plan(s, &pair.common).ok()?;
    let versions: Vec<At> = plan.into_iter().next()?;
    Some(pair.run(s, 0, &versions, intentional))
}

/// Shrinks `s` while its run keeps showing a difference with signature `sig`: drops steps,
/// then request members, then array elements beyond the first. At most `attempts` runs, and
/// none started after `deadline` (what is reduced by then is kept).
pub fn reduce(
    pair: &Pair,
    s: &Scenario,
    sig: &str,
    intentional: &[Intentional],
    attempts: usize,
    deadline: std::time::Instant,
) -> Scenario {
    let mut best = s.clone();
    let mut left = attempts;
    let still = |c: &Scenario, left: &mut usize| -> bool {
        if *left == 0 || std::time::Instant::now() > deadline {
            return false;
        }
        *left -= 1;
        run_case(pair, c, intentional)
            .and_then(|r| signature(&r))
            .is_some_and(|x| x == sig)
    };
    // Steps, last first.
    let mut i = best.steps.len();
    while i > 0 {
        i -= 1;
        if best.steps.len() == 1 {
            break;
        }
        let mut c = best.clone();
        c.steps.remove(i);
        if still(&c, &mut left) {
            best = c;
        }
    }
    // Request members and array tails, step by step.
    for si in 0..best.steps.len() {
        let mut paths = Vec::new();
        member_paths(&best.steps[si].req, &mut Vec::new(), &mut paths);
        for p in paths.into_iter().rev() {
            let mut c = best.clone();
            if remove_at(&mut c.steps[si].req, &p) && still(&c, &mut left) {
                best = c;
            }
        }
    }
    best.name = format!("regression: {sig}");
    best.doc = format!("Reduced from {}", s.name);
    best
}

/// Paths of every object member and of every array element after the first.
fn member_paths(v: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                path.push(k.clone());
                out.push(path.clone());
                member_paths(x, path, out);
                path.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                path.push(i.to_string());
                if i > 0 {
                    out.push(path.clone());
                }
                member_paths(x, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn remove_at(v: &mut Value, path: &[String]) -> bool {
    let Some((last, parent)) = path.split_last() else {
        return false;
    };
    match leaf_mut(v, parent) {
        Some(Value::Object(o)) => o.remove(last).is_some(),
        Some(Value::Array(a)) => match last.parse::<usize>() {
            Ok(i) if i < a.len() => {
                a.remove(i);
                true
            }
            _ => false,
        },
        _ => false,
    }
}

/// What the generator found.
#[derive(Debug, Default)]
pub struct Findings {
    pub cases: u64,
    /// Cases the mutations made invalid (they fail to build), not run to completion.
    pub invalid: u64,
    /// Reduced regression scenarios, one per distinct signature.
    pub regressions: Vec<(String, Scenario)>,
    /// Differences that did not show again when re-run (timing), by signature.
    pub unstable: Vec<String>,
}

/// How long reducing one difference may take, and how long after the generation deadline
/// reductions may still run.
const REDUCE_TIME: std::time::Duration = std::time::Duration::from_secs(45);
const REDUCE_GRACE: std::time::Duration = std::time::Duration::from_secs(90);

/// Runs generated cases `0..cases` (or until `deadline`), `jobs` at a time; reduces each new
/// difference and hands it to `found` as soon as it is reduced. With a case count the cases
/// run do not depend on the machine's speed.
#[allow(clippy::too_many_arguments)]
pub fn run(
    pair: &Pair,
    scenarios: &[Scenario],
    intentional: &[Intentional],
    seed: u64,
    cases: u64,
    deadline: std::time::Instant,
    jobs: usize,
    progress: &(dyn Fn(&str) + Sync),
    found: &(dyn Fn(&str, &Scenario) + Sync),
) -> Findings {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;
    let bases: Vec<&Scenario> = scenarios.iter().filter(|s| generatable(s)).collect();
    let findings = Mutex::new(Findings::default());
    if bases.is_empty() {
        return findings.into_inner().unwrap_or_default();
    }
    let next = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                while std::time::Instant::now() < deadline {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= cases {
                        break;
                    }
                    // Each case has its own generator, so case N is the same whatever the
                    // number of jobs; see `case_base` for why it is seeded per scenario.
                    let (base, mut rng) = case_base(seed, &bases, index);
                    let case = derive(&mut rng, base, &pair.common, index);
                    let Some(report) = run_case(pair, &case, intentional) else {
                        continue;
                    };
                    let lock = || findings.lock().unwrap_or_else(|e| e.into_inner());
                    lock().cases += 1;
                    if !report.harness_errors.is_empty() {
                        // A mutation that does not fit the message (a null where an array
                        // must be, a dropped step that saved a variable): not a valid case.
                        lock().invalid += 1;
                        continue;
                    }
                    let Some(sig) = signature(&report) else {
                        continue;
                    };
                    {
                        let f = lock();
                        if f.regressions.iter().any(|(s, _)| *s == sig) || f.unstable.contains(&sig)
                        {
                            continue;
                        }
                    }
                    progress(&format!("{}: difference {sig}; reducing", case.name));
                    let again = run_case(pair, &case, intentional)
                        .and_then(|r| signature(&r))
                        .is_some_and(|s| s == sig);
                    if !again {
                        progress(&format!(
                            "{}: difference {sig} did not show again",
                            case.name
                        ));
                        lock().unstable.push(sig);
                        continue;
                    }
                    let until =
                        (std::time::Instant::now() + REDUCE_TIME).min(deadline + REDUCE_GRACE);
                    let reduced = reduce(pair, &case, &sig, intentional, 80, until);
                    found(&sig, &reduced);
                    lock().regressions.push((sig, reduced));
                }
            });
        }
    });
    findings.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// The base scenario of case `index` and the generator that mutates it. The cases go round
/// the bases in order (case `index` is round `index / bases` of base `index % bases`), and
/// the generator is seeded by the seed, the base's name and the round only: adding, removing
/// or changing a scenario changes its own cases and no other scenario's (a new scenario only
/// moves the end of the last round, which then leaves one case out). Before, every case drew
/// its base from one stream, so one new scenario shifted every seed's cases onto others and
/// could turn the stage red on an old difference nobody had touched.
fn case_base<'a>(seed: u64, bases: &[&'a Scenario], index: u64) -> (&'a Scenario, Rng) {
    let n = bases.len().max(1) as u64;
    let base = bases[(index % n) as usize];
    let round = index / n;
    // FNV-1a of the name: stable across builds and platforms (std's hasher is not).
    let name = base.name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let rng = Rng::new(seed ^ name ^ round.wrapping_mul(0xA24B_AED4_963E_E407));
    (base, rng)
}

/// A scenario as the JSON a scenario file holds (for regressions to keep).
pub fn to_file_json(s: &Scenario) -> Value {
    // A reduced case keeps the versions it was found at: its steps are pinned.
    Value::Array(vec![serde_json::to_value(s).unwrap_or(Value::Null)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scenario() -> Scenario {
        serde_json::from_value(json!({
            "name": "base",
            "steps": [
                {"api": "CreateTopics", "req": {"topics": [{"name": "@t", "num_partitions": 2}]}},
                {"api": "ListOffsets", "req": {"topics": [{"name": "@t", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn derivation_is_deterministic_and_pins_versions() {
        let mut common = BTreeMap::new();
        common.insert(19, (2, 7));
        common.insert(2, (1, 10));
        let a = derive(&mut Rng::new(7), &scenario(), &common, 3);
        let b = derive(&mut Rng::new(7), &scenario(), &common, 3);
        assert_eq!(a, b);
        assert!(a
            .steps
            .iter()
            .all(|s| matches!(s.version, Some(VersionPin::One(_)))));
        let differ = (0..20).any(|i| derive(&mut Rng::new(i), &scenario(), &common, i) != a);
        assert!(differ);
    }

    #[test]
    fn cases_of_a_scenario_do_not_depend_on_the_others() {
        let named = |n: &str| Scenario {
            name: n.into(),
            ..scenario()
        };
        let (a, b, c) = (named("a"), named("b"), named("c"));
        let mut common = BTreeMap::new();
        common.insert(19, (2, 7));
        common.insert(2, (1, 10));
        // The cases of "a" and "c" with and without "b" between them.
        let case = |bases: &[&Scenario], i: u64| {
            let (base, mut rng) = case_base(7, bases, i);
            let mut s = derive(&mut rng, base, &common, 0);
            s.name = base.name.clone();
            s
        };
        let two: Vec<Scenario> = (0..6).map(|i| case(&[&a, &c], i)).collect();
        let three: Vec<Scenario> = (0..9).map(|i| case(&[&a, &b, &c], i)).collect();
        for round in 0..3 {
            assert_eq!(two[round * 2], three[round * 3]);
            assert_eq!(two[round * 2 + 1], three[round * 3 + 2]);
        }
        assert_ne!(three[0], three[3], "rounds differ");
    }

    #[test]
    fn mutations_stay_small() {
        let mut rng = Rng::new(1);
        for _ in 0..500 {
            let mut v = json!({"topics": [{"name": "@t", "num_partitions": 2, "timeout_ms": 5}]});
            mutate_value(&mut rng, &mut v, &["@t".into()]);
            if let Some(n) = v["topics"][0]["num_partitions"].as_i64() {
                assert!(n <= 100, "{v}");
            }
        }
    }

    #[test]
    fn removal_paths() {
        let mut v = json!({"a": [1, 2, 3], "b": {"c": 1}});
        assert!(remove_at(&mut v, &["a".into(), "1".into()]));
        assert!(remove_at(&mut v, &["b".into(), "c".into()]));
        assert_eq!(v, json!({"a": [1, 3], "b": {}}));
        let mut paths = Vec::new();
        member_paths(&v, &mut Vec::new(), &mut paths);
        assert!(paths.contains(&vec!["a".to_string(), "1".to_string()]));
        assert!(!paths.contains(&vec!["a".to_string(), "0".to_string()]));
    }
}
