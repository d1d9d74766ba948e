//! The dependency direction of ARCHITECTURE.md, enforced: reads `cargo metadata` and fails on
//! any edge between workspace crates that the code map does not allow.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// For each workspace crate, the workspace crates it may depend on (normal dependencies).
/// Keep in step with ARCHITECTURE.md.
fn allowed() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    let rules: &[(&str, &[&str])] = &[
        ("telemetry", &[]),
        ("admin", &["telemetry"]),
        ("model", &[]),
        ("record", &["model"]),
        ("protocol", &[]),
        ("storage", &["model", "record", "telemetry"]),
        ("metadata", &["model"]),
        ("replication", &["model"]),
        ("auth", &["model"]),
        ("controller", &["model", "metadata", "auth"]),
        ("coordinator", &["model", "protocol"]),
        ("client", &["model", "record", "protocol", "auth"]),
        ("quorum", &["model", "metadata", "controller", "client"]),
        (
            "broker",
            &[
                "model",
                "record",
                "protocol",
                "storage",
                "metadata",
                "replication",
                "controller",
                "quorum",
                "coordinator",
                "telemetry",
                "client",
                "auth",
            ],
        ),
        ("fuzzing", &["model", "record", "protocol", "storage"]),
        // Test tool: speaks the wire protocol to brokers, never links one (the broker is a
        // dev-dependency of its self-test only).
        ("conformance", &["model", "record", "protocol"]),
        (
            "moldau",
            &[
                "model",
                "record",
                "protocol",
                "broker",
                "client",
                "coordinator",
                "admin",
            ],
        ),
    ];
    rules
        .iter()
        .map(|(k, v)| (*k, v.iter().copied().collect()))
        .collect()
}

#[test]
fn workspace_dependencies_follow_the_code_map() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("parse metadata");
    let packages = meta["packages"].as_array().expect("packages");
    let members: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(String::from))
        .collect();
    let rules = allowed();
    let mut violations = Vec::new();
    for p in packages {
        let name = p["name"].as_str().unwrap_or_default();
        let Some(allowed) = rules.get(name) else {
            violations.push(format!(
                "crate '{name}' is not in the code map (ARCHITECTURE.md)"
            ));
            continue;
        };
        for d in p["dependencies"].as_array().into_iter().flatten() {
            let dep = d["name"].as_str().unwrap_or_default();
            let normal = d["kind"].is_null();
            if normal && members.contains(dep) && !allowed.contains(dep) {
                violations.push(format!("{name} -> {dep} is not allowed"));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "dependency rules broken:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_rules_themselves_are_layered() {
    // A crate may only depend on crates listed before it: no cycles, one direction.
    let order = [
        "telemetry",
        "model",
        "record",
        "protocol",
        "storage",
        "metadata",
        "replication",
        "auth",
        "controller",
        "coordinator",
        "client",
        "quorum",
        "broker",
        "admin",
        "fuzzing",
        "moldau",
    ];
    let rules = allowed();
    for (i, name) in order.iter().enumerate() {
        for dep in &rules[name] {
            let j = order.iter().position(|o| o == dep).expect("known crate");
            assert!(j < i, "{name} may not depend on {dep}, which comes later");
        }
    }
}
