//! The `moldau` CLI against a real `moldau server` process: topic, produce, consume, group,
//! cluster and bench commands, their JSON output and their exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "cli_support.rs"]
mod support;

use serde_json::Value;
use support::Server;

fn json_lines(s: &str) -> Vec<Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn topic_commands_round_trip() {
    let server = Server::start(&[]);
    let out = server.ok(
        &[
            "topic",
            "create",
            "orders",
            "-p",
            "3",
            "-c",
            "retention.ms=60000",
        ],
        "",
    );
    assert!(out.contains("created topic orders"), "{out}");
    let list: Value = serde_json::from_str(&server.ok(&["topic", "list", "--json"], "")).unwrap();
    let t = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "orders")
        .unwrap();
    assert_eq!(t["partitions"], 3);
    let table = server.ok(&["topic", "list"], "");
    assert!(table.lines().next().unwrap().starts_with("NAME"), "{table}");
    assert!(table.contains("orders"));
    server.ok(
        &[
            "topic",
            "alter-config",
            "orders",
            "--set",
            "cleanup.policy=compact",
            "--delete",
            "retention.ms",
        ],
        "",
    );
    server.ok(&["topic", "add-partitions", "orders", "--num", "2"], "");
    let d: Value =
        serde_json::from_str(&server.ok(&["topic", "describe", "orders", "--json"], "")).unwrap();
    assert_eq!(d["partitions"].as_array().unwrap().len(), 5);
    assert_eq!(d["configs"]["cleanup.policy"]["value"], "compact");
    assert!(d["configs"].get("retention.ms").is_none(), "{d}");
    let human = server.ok(&["topic", "describe", "orders"], "");
    assert!(human.contains("HIGH-WATERMARK"), "{human}");
    // Errors: clear message, non-zero exit.
    let dup = server.cli(&["topic", "create", "orders"], "");
    assert!(!dup.status.success());
    assert!(String::from_utf8_lossy(&dup.stderr).contains("TOPIC_ALREADY_EXISTS"));
    let missing = server.cli(&["topic", "describe", "nope"], "");
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("UNKNOWN_TOPIC_OR_PARTITION"));
    server.ok(&["topic", "delete", "orders"], "");
    let list: Value = serde_json::from_str(&server.ok(&["topic", "list", "--json"], "")).unwrap();
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["name"] != "orders"));
    let info: Value = serde_json::from_str(&server.ok(&["cluster", "info", "--json"], "")).unwrap();
    assert_eq!(info["brokers"].as_array().unwrap().len(), 1);
    // The one node is the quorum's only voter and leader (DescribeQuorum), caught up.
    assert_eq!(info["controller_id"], info["brokers"][0]["node_id"]);
    assert_eq!(info["quorum"]["leader_id"], info["controller_id"]);
    assert_eq!(info["quorum"]["voters"][0]["lag"], 0);
    assert!(server.ok(&["cluster", "info"], "").contains("CONTROLLER"));
    // Nothing listens here: a clear error and exit code 1.
    let down = std::process::Command::new(env!("CARGO_BIN_EXE_moldau"))
        .args([
            "topic",
            "list",
            "--brokers",
            "127.0.0.1:1",
            "--timeout-ms",
            "2000",
        ])
        .output()
        .unwrap();
    assert_eq!(down.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&down.stderr).contains("127.0.0.1:1"));
}

#[test]
fn produce_and_consume_text_json_and_templates() {
    let server = Server::start(&[]);
    server.ok(&["topic", "create", "lines", "-p", "2"], "");
    let out = server.ok(
        &["produce", "lines", "-k", ":", "-H", "src=test", "--json"],
        "k1:hello\nk2:world\nnokey\n",
    );
    let acks = json_lines(&out);
    assert_eq!(acks.len(), 3);
    let k1_partition = client::partition_for_key(b"k1", 2);
    assert_eq!(acks[0]["partition"], k1_partition);
    server.ok(
        &["produce", "lines", "--format", "json", "-p", "1"],
        "{\"key\":\"j\",\"value\":{\"a\":1},\"headers\":{\"h\":\"v\"},\"timestamp\":1234}\n",
    );
    let out = server.ok(
        &["consume", "lines", "--from-beginning", "-e", "--json"],
        "",
    );
    let records = json_lines(&out);
    assert_eq!(records.len(), 4, "{out}");
    let r = records.iter().find(|r| r["key"] == "k1").unwrap();
    assert_eq!(r["value"], "hello");
    assert_eq!(
        r["headers"],
        serde_json::json!([{"key": "src", "value": "test"}])
    );
    assert_eq!(r["partition"], k1_partition);
    let j = records.iter().find(|r| r["key"] == "j").unwrap();
    assert_eq!(
        (j["value"].as_str(), j["timestamp"].as_i64()),
        (Some("{\"a\":1}"), Some(1234))
    );
    assert!(records
        .iter()
        .any(|r| r["key"].is_null() && r["value"] == "nokey"));
    let out = server.ok(
        &[
            "consume",
            "lines",
            "--from-beginning",
            "-e",
            "-p",
            "1",
            "-f",
            "%k=%v@%p/%o %h",
        ],
        "",
    );
    let line = out
        .lines()
        .find(|l| l.starts_with("j="))
        .unwrap_or_default();
    assert!(
        line.starts_with("j={\"a\":1}@1/") && line.ends_with(" h=v"),
        "{out}"
    );
    // --count stops early; --offset starts at an offset.
    let out = server.ok(&["consume", "lines", "--from-beginning", "-n", "1"], "");
    assert_eq!(out.lines().count(), 1);
    let out = server.ok(
        &[
            "consume", "lines", "-p", "1", "--offset", "1", "-e", "-f", "%o",
        ],
        "",
    );
    assert!(out.lines().all(|l| l.parse::<i64>().unwrap() >= 1), "{out}");
    // -N: the last N records of the partition.
    let out = server.ok(
        &[
            "consume", "lines", "-p", "1", "--offset", "-1", "-e", "-f", "%k",
        ],
        "",
    );
    assert_eq!(out, "j\n", "{out}");
    // Timestamp 1234 is the oldest in partition 1 only if it was produced first there; by
    // timestamp far in the future nothing is returned.
    let out = server.ok(
        &["consume", "lines", "--timestamp", "99999999999999", "-e"],
        "",
    );
    assert!(out.is_empty(), "{out}");
}

#[test]
fn group_consume_describe_and_reset() {
    let server = Server::start(&[]);
    server.ok(&["topic", "create", "gt", "-p", "2"], "");
    let input: String = (0..10).map(|i| format!("{i}\n")).collect();
    server.ok(&["produce", "gt"], &input);
    let out = server.ok(
        &[
            "consume",
            "gt",
            "-g",
            "cli-g",
            "--from-beginning",
            "-n",
            "4",
        ],
        "",
    );
    assert_eq!(out.lines().count(), 4);
    let d: Value =
        serde_json::from_str(&server.ok(&["group", "describe", "cli-g", "--json"], "")).unwrap();
    assert_eq!(d["total_lag"], 6, "{d}");
    // Lag in seconds: the age of the first uncommitted record, produced moments ago.
    let behind: Vec<&Value> = d["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["lag"].as_i64() > Some(0))
        .collect();
    assert!(!behind.is_empty(), "{d}");
    for o in behind {
        let s = o["lag_seconds"].as_f64().unwrap_or(-1.0);
        assert!((0.0..600.0).contains(&s), "{d}");
    }
    let human = server.ok(&["group", "describe", "cli-g"], "");
    assert!(human.contains("LAG-SECONDS"), "{human}");
    let list = server.ok(&["group", "list", "--json"], "");
    assert!(list.contains("cli-g"));
    // The group resumes where it stopped.
    let out = server.ok(&["consume", "gt", "-g", "cli-g", "-n", "6"], "");
    assert_eq!(out.lines().count(), 6);
    let d: Value =
        serde_json::from_str(&server.ok(&["group", "describe", "cli-g", "--json"], "")).unwrap();
    assert_eq!(d["total_lag"], 0, "{d}");
    let r: Value = serde_json::from_str(&server.ok(
        &["group", "reset-offsets", "cli-g", "--to-earliest", "--json"],
        "",
    ))
    .unwrap();
    assert_eq!(r["applied"], true);
    let d: Value =
        serde_json::from_str(&server.ok(&["group", "describe", "cli-g", "--json"], "")).unwrap();
    assert_eq!(d["total_lag"], 10, "{d}");
    // Null keys stick to one partition: it holds all 10 records and the other none (its
    // shifted offset is clamped to the log end), so shifting by 3 leaves a lag of 7.
    server.ok(
        &[
            "group",
            "reset-offsets",
            "cli-g",
            "--topic",
            "gt",
            "--shift-by",
            "3",
        ],
        "",
    );
    let d: Value =
        serde_json::from_str(&server.ok(&["group", "describe", "cli-g", "--json"], "")).unwrap();
    assert_eq!(d["total_lag"], 7, "{d}");
    server.ok(&["group", "delete", "cli-g"], "");
    let list = server.ok(&["group", "list", "--json"], "");
    assert!(!list.contains("cli-g"), "{list}");
}

#[test]
fn bench_reports_json_on_the_last_line() {
    let server = Server::start(&[]);
    let keys = [
        "records",
        "records_per_sec",
        "mb_per_sec",
        "p50_ms",
        "p99_ms",
        "p999_ms",
        "max_ms",
    ];
    let check = |out: &str, records: u64| {
        let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        for k in keys {
            assert!(
                last.get(k).is_some_and(Value::is_number),
                "{k} missing in {last}"
            );
        }
        assert_eq!(last["records"], records);
        assert_eq!(last["errors"], 0);
    };
    let out = server.ok(
        &[
            "bench",
            "produce",
            "-t",
            "b",
            "-p",
            "2",
            "-n",
            "5000",
            "-s",
            "200",
            "--producers",
            "2",
            "-z",
            "lz4",
            "--json",
        ],
        "",
    );
    check(&out, 5000);
    let out = server.ok(
        &["bench", "consume", "-t", "b", "--consumers", "2", "--json"],
        "",
    );
    check(&out, 5000);
    let out = server.ok(
        &[
            "bench", "e2e", "-t", "e", "-p", "1", "-n", "500", "-r", "2000", "--json",
        ],
        "",
    );
    check(&out, 500);
    let human = server.ok(
        &["bench", "produce", "-t", "b", "-n", "100", "--acks", "all"],
        "",
    );
    assert!(
        human.contains("records/s") && human.contains("p99.9"),
        "{human}"
    );
}

/// `moldau consume --group` that runs until SIGTERM still commits what it printed and leaves.
#[test]
fn group_consume_commits_on_sigterm() {
    use std::io::BufRead;
    let server = Server::start(&[]);
    server.ok(&["topic", "create", "tail", "-p", "1"], "");
    server.ok(&["produce", "tail"], "a\nb\nc\n");
    /// Kills the consumer we started if the test fails before it exits.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_moldau"))
            .args(["consume", "tail", "-g", "tailers", "--from-beginning"])
            .env("MOLDAU_BROKERS", &server.addr)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let got: Vec<String> = (0..3)
        .map(|_| {
            rx.recv_timeout(std::time::Duration::from_secs(60))
                .expect("a record printed within 60 s")
        })
        .collect();
    assert_eq!(got, vec!["a", "b", "c"]);
    // Stop the consumer we started, by its PID.
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(child.0.wait().unwrap().success());
    let d: Value =
        serde_json::from_str(&server.ok(&["group", "describe", "tailers", "--json"], "")).unwrap();
    assert_eq!(d["total_lag"], 0, "{d}");
    assert_eq!(
        d["members"].as_array().unwrap().len(),
        0,
        "left the group: {d}"
    );
}

/// Producing to a missing topic on a broker that won't auto-create fails at once with
/// UNKNOWN_TOPIC_OR_PARTITION instead of waiting out the request timeout.
#[test]
fn produce_to_missing_topic_fails_fast_without_auto_create() {
    let server = Server::start(&["auto.create.topics.enable=false"]);
    let started = std::time::Instant::now();
    let out = server.cli(&["produce", "nope"], "x\n");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn a_server_whose_config_contradicts_itself_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (sets, key) in [
        (&["process.roles=broker"][..], "controller.quorum.voters"),
        (
            &[
                "node.id=1",
                "controller.quorum.voters=2@127.0.0.1:1,3@127.0.0.1:2",
            ][..],
            "controller.quorum.voters",
        ),
        (&["node.id=banana"][..], "node.id"),
    ] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_moldau"));
        cmd.args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path());
        for s in sets {
            cmd.args(["--set", s]);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{sets:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{sets:?}: one line, got {stderr}");
        assert!(
            lines[0].starts_with("moldau: ") && lines[0].contains(key),
            "{sets:?}: {stderr}"
        );
    }
}
