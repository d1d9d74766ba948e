//! Transactions with the native client and the CLI against a real `moldau server` process:
//! the transactional producer (commit, abort, offsets in the transaction, fencing), the
//! consumer's read_committed mode, `moldau consume --isolation`, `moldau txn
//! list|describe|describe-producers|abort` on a hanging transaction, and `moldau bench produce
//! --transactional`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "cli_support.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use client::{
    Admin, Consumer, ConsumerConfig, ConsumerGroupMetadata, NewTopic, OffsetReset, Producer,
    ProducerConfig, ProducerRecord, SeekTo, TopicPartition,
};
use serde_json::Value;
use support::Server;

fn txn_producer(server: &Server, id: &str) -> ProducerConfig {
    ProducerConfig {
        client: server.client_config(),
        transactional_id: Some(id.to_owned()),
        linger_ms: 1,
        ..ProducerConfig::default()
    }
}

/// Values of `topic` partition 0 from the beginning, reading until `n` arrived or `wait`.
async fn read(
    server: &Server,
    topic: &str,
    read_committed: bool,
    n: usize,
    wait: Duration,
) -> Vec<String> {
    let mut c = Consumer::new(ConsumerConfig {
        client: server.client_config(),
        auto_offset_reset: OffsetReset::Earliest,
        isolation_level: i8::from(read_committed),
        ..ConsumerConfig::default()
    })
    .await
    .unwrap();
    let tp = TopicPartition::new(topic, 0);
    c.assign(vec![tp.clone()]);
    c.seek(&tp, SeekTo::Beginning);
    let mut out = Vec::new();
    let deadline = Instant::now() + wait;
    while out.len() < n && Instant::now() < deadline {
        for r in c.poll(Duration::from_millis(200)).await.unwrap() {
            out.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_producer_commits_aborts_and_is_fenced() {
    let server = Server::start(&[]);
    let admin = Admin::connect(server.client_config()).await.unwrap();
    admin
        .create_topic(NewTopic::new("tx-native", 1))
        .await
        .unwrap();
    let p = Producer::new(txn_producer(&server, "native-1"))
        .await
        .unwrap();
    // Sending outside a transaction is refused.
    assert!(p
        .send(ProducerRecord::new("tx-native", "early"))
        .await
        .is_err());
    p.init_transactions().await.unwrap();
    assert!(p
        .send(ProducerRecord::new("tx-native", "no-begin"))
        .await
        .is_err());
    for (round, commit) in [(0, true), (1, false), (2, true)] {
        p.begin_transaction().unwrap();
        for i in 0..3 {
            p.enqueue(ProducerRecord::new("tx-native", format!("r{round}-{i}")).partition(0))
                .await
                .unwrap();
        }
        if commit {
            p.commit_transaction().await.unwrap();
        } else {
            p.abort_transaction().await.unwrap();
        }
    }
    let committed: Vec<String> = ["r0-0", "r0-1", "r0-2", "r2-0", "r2-1", "r2-2"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        read(&server, "tx-native", true, 6, Duration::from_secs(20)).await,
        committed
    );
    assert_eq!(
        read(&server, "tx-native", false, 9, Duration::from_secs(20))
            .await
            .len(),
        9
    );

    // A second producer with the same id fences the first.
    p.begin_transaction().unwrap();
    p.enqueue(ProducerRecord::new("tx-native", "zombie").partition(0))
        .await
        .unwrap();
    p.flush().await.unwrap();
    let p2 = Producer::new(txn_producer(&server, "native-1"))
        .await
        .unwrap();
    p2.init_transactions().await.unwrap();
    p2.begin_transaction().unwrap();
    p2.send(ProducerRecord::new("tx-native", "live").partition(0))
        .await
        .unwrap();
    p2.commit_transaction().await.unwrap();
    assert!(
        p.commit_transaction().await.is_err(),
        "the zombie can't commit"
    );
    let all = read(&server, "tx-native", true, 7, Duration::from_secs(20)).await;
    assert_eq!(all.last().map(String::as_str), Some("live"));
    assert!(!all.iter().any(|v| v == "zombie"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_transform_produce_commits_offsets_in_the_transaction() {
    let server = Server::start(&[]);
    let admin = Admin::connect(server.client_config()).await.unwrap();
    admin
        .create_topic(NewTopic::new("ctp-in", 1))
        .await
        .unwrap();
    admin
        .create_topic(NewTopic::new("ctp-out", 1))
        .await
        .unwrap();
    let plain = Producer::new(ProducerConfig {
        client: server.client_config(),
        ..ProducerConfig::default()
    })
    .await
    .unwrap();
    for i in 0..30 {
        plain
            .enqueue(ProducerRecord::new("ctp-in", i.to_string()).partition(0))
            .await
            .unwrap();
    }
    plain.flush().await.unwrap();
    let mut consumer = Consumer::new(ConsumerConfig {
        client: server.client_config(),
        group_id: Some("ctp".into()),
        auto_offset_reset: OffsetReset::Earliest,
        enable_auto_commit: false,
        isolation_level: 1,
        session_timeout_ms: 6_000,
        ..ConsumerConfig::default()
    })
    .await
    .unwrap();
    consumer.subscribe(&["ctp-in"]).unwrap();
    let p = Producer::new(txn_producer(&server, "ctp-tx"))
        .await
        .unwrap();
    p.init_transactions().await.unwrap();
    let mut copied = 0;
    let mut aborted = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    while copied < 30 {
        assert!(Instant::now() < deadline, "copied {copied} of 30");
        let records = consumer.poll(Duration::from_millis(300)).await.unwrap();
        if records.is_empty() {
            continue;
        }
        p.begin_transaction().unwrap();
        let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
        for r in &records {
            let v = String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap();
            p.enqueue(ProducerRecord::new("ctp-out", format!("{v}!")).partition(0))
                .await
                .unwrap();
            next.insert((r.topic.to_string(), r.partition), r.offset + 1);
        }
        let group: ConsumerGroupMetadata = consumer.consumer_group_metadata().unwrap();
        p.send_offsets_to_transaction(&next, &group).await.unwrap();
        if !aborted {
            // The first round is aborted: its output vanishes and its input is read again.
            p.abort_transaction().await.unwrap();
            aborted = true;
            let tp = TopicPartition::new("ctp-in", 0);
            consumer.seek(&tp, SeekTo::Beginning);
            continue;
        }
        p.commit_transaction().await.unwrap();
        copied += records.len();
    }
    let out = read(&server, "ctp-out", true, 30, Duration::from_secs(20)).await;
    assert_eq!(out, (0..30).map(|i| format!("{i}!")).collect::<Vec<_>>());
    // The offsets count once the COMMIT marker reached __consumer_offsets (just after the
    // output's markers).
    let tp = TopicPartition::new("ctp-in", 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let offsets = admin.list_group_offsets("ctp", None).await.unwrap();
        if offsets.get(&tp).copied() == Some(30) {
            break;
        }
        assert!(Instant::now() < deadline, "committed offsets: {offsets:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_lists_describes_and_aborts_a_hanging_transaction() {
    let server = Server::start(&[]);
    let admin = Admin::connect(server.client_config()).await.unwrap();
    admin.create_topic(NewTopic::new("hang", 1)).await.unwrap();
    let p = Producer::new(txn_producer(&server, "hanger"))
        .await
        .unwrap();
    p.init_transactions().await.unwrap();
    p.begin_transaction().unwrap();
    p.send(ProducerRecord::new("hang", "stuck").partition(0))
        .await
        .unwrap();
    // The producer goes quiet with its transaction open (its timeout is a minute away).
    let list: Value = serde_json::from_str(&server.ok(&["txn", "list", "--json"], "")).unwrap();
    let t = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["transactional_id"] == "hanger")
        .unwrap()
        .clone();
    assert_eq!(t["state"], "Ongoing");
    let ongoing: Value =
        serde_json::from_str(&server.ok(&["txn", "list", "--state", "Ongoing", "--json"], ""))
            .unwrap();
    assert_eq!(ongoing.as_array().unwrap().len(), 1);
    let d: Value =
        serde_json::from_str(&server.ok(&["txn", "describe", "hanger", "--json"], "")).unwrap();
    assert_eq!(d[0]["state"], "Ongoing");
    assert_eq!(d[0]["partitions"][0], "hang-0");
    let table = server.ok(&["txn", "describe", "hanger"], "");
    assert!(
        table.contains("Ongoing") && table.contains("hang-0"),
        "{table}"
    );
    let producers: Value = serde_json::from_str(&server.ok(
        &[
            "txn",
            "describe-producers",
            "-t",
            "hang",
            "-p",
            "0",
            "--json",
        ],
        "",
    ))
    .unwrap();
    assert_eq!(producers[0]["current_transaction_start_offset"], 0);
    // Held at the LSO: read_committed sees nothing yet.
    let out = server.ok(
        &[
            "consume",
            "hang",
            "--from-beginning",
            "-e",
            "--isolation",
            "read_committed",
        ],
        "",
    );
    assert!(out.trim().is_empty(), "{out}");
    // Unknown start offset: a clean error.
    let bad = server.cli(
        &[
            "txn",
            "abort",
            "-t",
            "hang",
            "-p",
            "0",
            "--start-offset",
            "5",
        ],
        "",
    );
    assert!(!bad.status.success());
    server.ok(
        &[
            "txn",
            "abort",
            "-t",
            "hang",
            "-p",
            "0",
            "--start-offset",
            "0",
        ],
        "",
    );
    // The partition's LSO moved past the aborted record.
    let admin_producers = admin.describe_producers("hang", 0).await.unwrap();
    assert_eq!(admin_producers[0].current_transaction_start_offset, -1);
    let plain = Producer::new(ProducerConfig {
        client: server.client_config(),
        ..ProducerConfig::default()
    })
    .await
    .unwrap();
    plain
        .send(ProducerRecord::new("hang", "after").partition(0))
        .await
        .unwrap();
    let out = server.ok(
        &[
            "consume",
            "hang",
            "--from-beginning",
            "-e",
            "--isolation",
            "read_committed",
        ],
        "",
    );
    assert_eq!(out.trim(), "after");
}

#[test]
fn bench_produces_in_transactions() {
    let server = Server::start(&[]);
    let out = server.ok(
        &[
            "bench",
            "produce",
            "-t",
            "bench-txn",
            "-p",
            "2",
            "-n",
            "500",
            "-s",
            "64",
            "--acks",
            "all",
            "--transactional",
            "--transaction-size",
            "50",
            "--progress-interval",
            "0",
            "--json",
        ],
        "",
    );
    let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(v["records"], 500);
    assert_eq!(v["errors"], 0);
    assert_eq!(v["transactions"], 10);
    assert!(v["commit_p50_ms"].as_f64().unwrap() > 0.0);
    let consumed = server.ok(
        &[
            "bench",
            "consume",
            "-t",
            "bench-txn",
            "--isolation",
            "read_committed",
            "--progress-interval",
            "0",
            "--json",
        ],
        "",
    );
    let c: Value = serde_json::from_str(consumed.lines().last().unwrap()).unwrap();
    assert_eq!(c["records"], 500);
}
