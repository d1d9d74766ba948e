//! A data dir written by the wave-1 single-node server (JSON `metadata.log`, see
//! `fixtures/README.md`) keeps working: today's server imports its metadata into the Raft log
//! once, and every topic (with its id), config, record and committed group offset is there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "cli_support.rs"]
mod support;

use client::{
    Admin, Consumer, ConsumerConfig, NewTopic, OffsetReset, Producer, ProducerConfig,
    ProducerRecord, ResourceType, TopicPartition,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use support::Server;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The topic id the legacy log recorded for `topic`, as Kafka prints ids (base64url).
fn legacy_topic_id(log: &[u8], topic: &str) -> String {
    let text = String::from_utf8_lossy(log);
    let needle = format!("\"name\":\"{topic}\",\"topic_id\":\"");
    let at = text.find(&needle).expect("topic in the legacy log") + needle.len();
    let hex = &text[at..at + 32];
    let bytes: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &x)| acc | (u32::from(x) << (16 - 8 * i)));
        for i in 0..chunk.len() + 1 {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

async fn check(server: &Server, orders_id: &str, compacted_id: &str, orders_records: i64) {
    let admin = Admin::connect(server.client_config()).await.unwrap();
    let topics = admin.list_topics().await.unwrap();
    let names: Vec<&str> = topics.iter().map(|t| t.name.as_str()).collect();
    assert!(
        !names.contains(&"gone"),
        "a deleted topic stays deleted: {names:?}"
    );
    let desc = admin
        .describe_topics(&["orders".into(), "compacted".into()])
        .await
        .unwrap();
    assert_eq!(desc[0].topic_id, orders_id);
    assert_eq!(desc[0].partitions.len(), 3);
    assert_eq!(desc[1].topic_id, compacted_id);
    let cfg = admin
        .describe_configs(ResourceType::Topic, "orders", None)
        .await
        .unwrap();
    let retention = cfg.iter().find(|c| c.name == "retention.ms").unwrap();
    assert_eq!(retention.value.as_deref(), Some("86400000"));
    assert_eq!(retention.source, "DYNAMIC_TOPIC_CONFIG");
    let cfg = admin
        .describe_configs(ResourceType::Topic, "compacted", None)
        .await
        .unwrap();
    let policy = cfg.iter().find(|c| c.name == "cleanup.policy").unwrap();
    assert_eq!(policy.value.as_deref(), Some("compact"));

    let tps: Vec<TopicPartition> = (0..3).map(|p| TopicPartition::new("orders", p)).collect();
    let queries: Vec<_> = tps.iter().map(|tp| (tp.clone(), -1)).collect();
    let ends = admin.list_offsets(&queries).await.unwrap();
    assert_eq!(ends.values().sum::<i64>(), orders_records);
    // The group's committed offsets survived too.
    let committed = admin.list_group_offsets("billing", None).await.unwrap();
    let legacy_ends: i64 = committed.values().sum();
    assert_eq!(legacy_ends, 30, "{committed:?}");

    let mut consumer = Consumer::new(ConsumerConfig {
        client: server.client_config(),
        auto_offset_reset: OffsetReset::Earliest,
        ..ConsumerConfig::default()
    })
    .await
    .unwrap();
    consumer.assign(tps);
    let mut values = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while (values.len() as i64) < orders_records {
        assert!(
            std::time::Instant::now() < deadline,
            "read {} records",
            values.len()
        );
        for r in consumer.poll(Duration::from_millis(200)).await.unwrap() {
            values.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
    }
    for i in 1..=30 {
        assert!(values.contains(&format!("v{i}")), "v{i} in {values:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave1_data_dir_is_imported_once_and_keeps_everything() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wave1-data");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_dir(&fixture, &data);
    let legacy_log = data.join("__cluster_metadata-0").join("metadata.log");
    let bytes = std::fs::read(&legacy_log).unwrap();
    let orders_id = legacy_topic_id(&bytes, "orders");
    let compacted_id = legacy_topic_id(&bytes, "compacted");
    let settings = ["offsets.topic.num.partitions=3"];

    let server = Server::start_in(&data, &settings).unwrap();
    check(&server, &orders_id, &compacted_id, 30).await;
    assert!(!legacy_log.exists());
    assert!(data
        .join("__cluster_metadata-0")
        .join("metadata.log.imported")
        .exists());
    // New writes go on from there.
    let admin = Admin::connect(server.client_config()).await.unwrap();
    admin.create_topic(NewTopic::new("after", 2)).await.unwrap();
    let producer = Producer::new(ProducerConfig {
        client: server.client_config(),
        ..ProducerConfig::default()
    })
    .await
    .unwrap();
    producer
        .send(ProducerRecord::new("orders", "v31").partition(0))
        .await
        .unwrap();
    producer.close().await.unwrap();
    server.stop();

    // A second start reads the Raft log (no second import) and still has it all.
    let server = Server::start_in(&data, &settings).unwrap();
    check(&server, &orders_id, &compacted_id, 31).await;
    let admin = Admin::connect(server.client_config()).await.unwrap();
    let topics: BTreeMap<String, usize> = admin
        .list_topics()
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.name, t.partitions.len()))
        .collect();
    assert_eq!(topics.get("after"), Some(&2));
    server.stop();
}
