//! The harness's SASL mode against itself: the authorizer scenarios (`scenarios-sasl/`) on two
//! embedded Moldau brokers with a SASL_PLAINTEXT listener, PLAIN users admin, alice and bob,
//! StandardAuthorizer and `super.users=User:admin` must show no difference and no harness
//! error. This checks that the harness authenticates per user and that the scenarios are
//! well-formed and deterministic; the comparison with Apache Kafka runs in
//! `scripts/test conformance`.

use conformance::runner::{Auth, Target};
use conformance::scenario::{load_dir, VersionPolicy};
use conformance::Pair;
use std::collections::BTreeMap;
use std::path::Path;

const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
    username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" \
    user_alice=\"alice-secret\" user_bob=\"bob-secret\";";

fn start(rt: &tokio::runtime::Runtime, dir: &Path) -> broker::BrokerHandle {
    let props: BTreeMap<String, String> = [
        ("listeners", "SASL_PLAINTEXT://127.0.0.1:0".to_string()),
        ("log.dirs", dir.display().to_string()),
        ("group.initial.rebalance.delay.ms", "0".to_string()),
        ("sasl.enabled.mechanisms", "PLAIN".to_string()),
        (
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            JAAS.to_string(),
        ),
        (
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer".to_string(),
        ),
        ("super.users", "User:admin".to_string()),
        ("allow.everyone.if.no.acl.found", "false".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let config = model::BrokerConfig::from_props(props).expect("config");
    rt.block_on(broker::Broker::start(config))
        .expect("start broker")
}

fn users() -> Auth {
    let pairs: Vec<String> = ["admin:admin-secret", "alice:alice-secret", "bob:bob-secret"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    Auth::parse(&pairs, None).expect("users")
}

#[test]
fn sasl_scenarios_agree_between_two_moldau_brokers() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (start(&rt, da.path()), start(&rt, db.path()));
    // Without credentials a SASL listener closes the connection: the probe must fail.
    assert!(Target::probe("plain", a.local_addr(), None).is_err());
    // A wrong password is refused and reported as such.
    let wrong = Auth::parse(&["admin:nope".to_string()], None).expect("auth");
    let err = Target::probe("wrong", a.local_addr(), Some(wrong)).expect_err("wrong password");
    assert!(format!("{err:#}").contains("SaslAuthenticate"), "{err:#}");

    let reference = Target::probe("reference", a.local_addr(), Some(users())).expect("probe a");
    let subject = Target::probe("subject", b.local_addr(), Some(users())).expect("probe b");
    reference.warm_up().expect("warm up a");
    subject.warm_up().expect("warm up b");
    let pair = Pair::new(reference, subject);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut scenarios = load_dir(&root.join("scenarios-sasl")).expect("scenarios");
    assert!(scenarios.len() >= 5, "only {} scenarios", scenarios.len());
    for s in &mut scenarios {
        s.versions = VersionPolicy::Latest;
    }
    let reports = pair
        .run_all(&scenarios, &[], 4, &|_| {})
        .expect("run scenarios");
    let problems: Vec<String> = reports
        .iter()
        .filter(|r| r.failed())
        .map(|r| format!("{}: {:?} {:?}", r.scenario, r.harness_errors, r.diffs))
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
    // The scenarios saw refusals: the steps did act as alice and bob.
    let refused = reports
        .iter()
        .flat_map(|r| &r.transcript)
        .filter(|(_, _, _, a, _)| {
            let t = a.to_string();
            t.contains("\"error_code\":29") || t.contains("\"error_code\":30")
        })
        .count();
    assert!(refused >= 5, "only {refused} refused answers");
    rt.block_on(async {
        a.shutdown().await;
        b.shutdown().await;
    });
}
