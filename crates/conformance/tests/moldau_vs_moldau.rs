//! The harness against itself: every scenario (at the newest common versions) and a few
//! seconds of generated cases on two embedded Moldau brokers must show no difference and no
//! harness error. This checks the scenario files, the request conversion at every step, the
//! normalisation (two clusters with different ids and ports) and that Moldau answers
//! deterministically. The comparison with Apache Kafka runs in `scripts/test conformance`.

use conformance::compare::load_intentional;
use conformance::runner::Target;
use conformance::scenario::{load_dir, VersionPolicy};
use conformance::Pair;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

fn start(rt: &tokio::runtime::Runtime, dir: &Path) -> broker::BrokerHandle {
    let props: BTreeMap<String, String> = [
        ("listeners", "127.0.0.1:0".to_string()),
        ("log.dirs", dir.display().to_string()),
        ("group.initial.rebalance.delay.ms", "0".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let config = model::BrokerConfig::from_props(props).expect("config");
    rt.block_on(broker::Broker::start(config))
        .expect("start broker")
}

#[test]
fn every_scenario_agrees_between_two_moldau_brokers() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (start(&rt, da.path()), start(&rt, db.path()));
    let reference = Target::probe("reference", a.local_addr(), None).expect("probe a");
    let subject = Target::probe("subject", b.local_addr(), None).expect("probe b");
    reference.warm_up().expect("warm up a");
    subject.warm_up().expect("warm up b");
    let pair = Pair::new(reference, subject);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut scenarios = load_dir(&root.join("scenarios")).expect("scenarios");
    assert!(scenarios.len() >= 50, "only {} scenarios", scenarios.len());
    for s in &mut scenarios {
        s.versions = VersionPolicy::Latest;
    }
    let intentional = load_intentional(&root.join("intentional.json")).expect("intentional");
    let reports = pair
        .run_all(&scenarios, &[], 4, &|_| {})
        .expect("run scenarios");
    let problems: Vec<String> = reports
        .iter()
        .filter(|r| r.failed())
        .map(|r| format!("{}: {:?} {:?}", r.scenario, r.harness_errors, r.diffs))
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(reports.iter().map(|r| r.compared).sum::<usize>() > 200);

    let found = conformance::generate::run(
        &pair,
        &scenarios,
        &intentional,
        42,
        u64::MAX,
        Instant::now() + Duration::from_secs(5),
        2,
        &|_| {},
        &|_, _| {},
    );
    assert!(found.cases > 0);
    assert!(
        found.regressions.is_empty() && found.unstable.is_empty(),
        "{:?} {:?}",
        found.regressions,
        found.unstable
    );
    rt.block_on(async {
        a.shutdown().await;
        b.shutdown().await;
    });
}
