//! Issue 8 items 1-2 at the process level: a `moldau server` whose metadata log (the Raft log
//! in `__cluster_metadata-0/`) is damaged in the middle refuses to start and deletes nothing;
//! partition directories the committed metadata does not know are renamed aside (`-stray`),
//! never deleted. (The wave-1 `metadata.log` keeps the same rules; its own tests are in the
//! `metadata` crate, and a damaged one is never imported.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "cli_support.rs"]
mod support;

use client::{Acks, Admin, NewTopic, Producer, ProducerConfig, ProducerRecord, TopicPartition};
use std::path::Path;
use support::Server;

const TOPICS: [&str; 6] = ["t0", "t1", "t2", "t3", "t4", "t5"];
const RECORDS: i64 = 20;

/// Creates the topics one by one (one metadata record each) and writes `RECORDS` to each.
async fn populate(server: &Server) {
    let admin = Admin::connect(server.client_config()).await.unwrap();
    for t in TOPICS {
        admin.create_topic(NewTopic::new(t, 1)).await.unwrap();
    }
    let producer = Producer::new(ProducerConfig {
        client: server.client_config(),
        acks: Acks::All,
        ..ProducerConfig::default()
    })
    .await
    .unwrap();
    for t in TOPICS {
        for i in 0..RECORDS {
            producer
                .send(ProducerRecord::new(t, format!("v{i}")))
                .await
                .unwrap();
        }
    }
    producer.close().await.unwrap();
    // A last frame after every victim's: the damaged frames must be mid-log (a damaged last
    // frame is a torn tail, cut at start). A broker that is the last one alive writes no
    // controlled-shutdown record any more, so the log would otherwise end at t5's topic.
    admin.create_topic(NewTopic::new("tail", 1)).await.unwrap();
}

async fn end_offsets(server: &Server, topics: &[&str]) -> Vec<i64> {
    let admin = Admin::connect(server.client_config()).await.unwrap();
    let queries: Vec<_> = topics
        .iter()
        .map(|t| (TopicPartition::new(t, 0), -1))
        .collect();
    let found = admin.list_offsets(&queries).await.unwrap();
    topics
        .iter()
        .map(|t| found[&TopicPartition::new(t, 0)])
        .collect()
}

/// The first segment of the Raft metadata log.
fn segment(data: &Path) -> std::path::PathBuf {
    data.join("__cluster_metadata-0")
        .join("raft-00000000000000000001.log")
}

/// Byte offsets where each frame of a log starts (`[u32 length][u32 crc][body]`).
fn frame_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut pos = 0;
    while pos + 8 <= bytes.len() {
        starts.push(pos);
        let len = u32::from_be_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        pos += 8 + len;
    }
    starts
}

/// The start of the frame that creates `topic`.
fn frame_creating(bytes: &[u8], topic: &str) -> usize {
    let needle = format!("\"name\":\"{topic}\"");
    frame_starts(bytes)
        .into_iter()
        .find(|&s| {
            let len = u32::from_be_bytes(bytes[s..s + 4].try_into().unwrap()) as usize;
            String::from_utf8_lossy(&bytes[s + 8..s + 8 + len]).contains(&needle)
        })
        .expect("frame creating the topic")
}

fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    names
}

/// Every file under `dir` with its size: proves nothing was deleted or cut.
fn tree(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for name in dir_names(dir) {
        let p = dir.join(&name);
        if p.is_dir() && !name.starts_with("__cluster_metadata") {
            for (f, len) in tree(&p) {
                out.push((format!("{name}/{f}"), len));
            }
        } else if p.is_file() {
            out.push((name, p.metadata().unwrap().len()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mid_log_corruption_refuses_to_start_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start_in(&data, &[]).unwrap();
    populate(&server).await;
    server.stop();

    let log = segment(&data);
    let original = std::fs::read(&log).unwrap();
    let before = tree(&data);
    // Mid-log: each victim's frame is followed by valid frames. (t5's creation can be the last
    // frame now that the last live broker writes nothing when it stops, and a damaged last
    // frame is a torn tail, cut by design: crates/quorum/tests/file_disk.rs.)
    for victim in ["t0", "t2", "t4"] {
        let at = frame_creating(&original, victim);
        let mut damaged = original.clone();
        damaged[at + 40] ^= 0x01;
        std::fs::write(&log, &damaged).unwrap();
        let refused = Server::start_in(&data, &[])
            .err()
            .expect("the server refuses to start");
        assert!(!refused.status.success());
        assert!(
            refused.stderr.contains(&log.display().to_string())
                && refused.stderr.contains(&format!("corrupt at byte {at}"))
                && refused.stderr.contains("To recover"),
            "stderr names the file, the offset and a way out:\n{}",
            refused.stderr
        );
        assert_eq!(tree(&data), before, "nothing was deleted or cut ({victim})");
        assert_eq!(std::fs::read(&log).unwrap(), damaged);
    }

    // Repaired (restored from a backup): everything is back.
    std::fs::write(&log, &original).unwrap();
    let server = Server::start_in(&data, &[]).unwrap();
    assert_eq!(end_offsets(&server, &TOPICS).await, vec![RECORDS; 6]);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_partition_dirs_are_renamed_stray_never_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start_in(&data, &[]).unwrap();
    populate(&server).await;
    server.stop();

    // The metadata log is restored from a backup taken before t3 was created: t3..t5 become
    // unknown to the metadata. Their data must survive, renamed aside.
    let log = segment(&data);
    let bytes = std::fs::read(&log).unwrap();
    let cut = frame_creating(&bytes, "t3");
    std::fs::write(&log, &bytes[..cut]).unwrap();
    // And a directory no metadata ever named.
    std::fs::create_dir_all(data.join("orphan-7")).unwrap();
    std::fs::write(data.join("orphan-7").join("keep.me"), b"data").unwrap();
    let sizes: Vec<u64> = ["t3-0", "t4-0", "t5-0"]
        .iter()
        .map(|d| {
            std::fs::metadata(data.join(d).join("00000000000000000000.log"))
                .unwrap()
                .len()
        })
        .collect();

    let server = Server::start_in(&data, &[]).unwrap();
    assert_eq!(end_offsets(&server, &TOPICS[..3]).await, vec![RECORDS; 3]);
    let names = dir_names(&data);
    for (i, d) in ["t3-0", "t4-0", "t5-0", "orphan-7"].iter().enumerate() {
        assert!(
            !names.contains(&d.to_string()),
            "{d} was set aside: {names:?}"
        );
        let stray = names
            .iter()
            .find(|n| n.starts_with(&format!("{d}.")) && n.ends_with("-stray"))
            .unwrap_or_else(|| panic!("{d} renamed with a -stray suffix: {names:?}"));
        if i < 3 {
            let seg = data.join(stray).join("00000000000000000000.log");
            assert_eq!(std::fs::metadata(seg).unwrap().len(), sizes[i]);
        } else {
            assert_eq!(
                std::fs::read(data.join(stray).join("keep.me")).unwrap(),
                b"data"
            );
        }
    }
    server.stop();
}
