//! A one-voter quorum on the real on-disk log: it is the active controller at once, its
//! changes survive restarts (with and without a snapshot cutting the log), and it refuses a
//! voter set other than the one its log was written by.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

use controller::{ControllerConfig, Origin, Reply, Request, TopicSpec};
use metadata::Endpoint;
use quorum::{FileDisk, MetadataNode, NodeConfig, NodeError};
use std::collections::BTreeMap;
use std::path::Path;

fn config(voters: Vec<u64>, snapshot_after_bytes: u64) -> NodeConfig {
    NodeConfig {
        node_id: 1,
        voters,
        election_tick: 10,
        max_election_tick: 15,
        heartbeat_tick: 2,
        snapshot_after_bytes,
        controller: ControllerConfig {
            cluster_id: Some("test-cluster".into()),
            ..ControllerConfig::default()
        },
        seed: 1,
    }
}

fn open(dir: &Path, snapshot_after_bytes: u64) -> MetadataNode<FileDisk> {
    let mut n = MetadataNode::new(
        config(vec![1], snapshot_after_bytes),
        FileDisk::new(dir),
        &quorum::raft_logger(1),
    )
    .unwrap();
    n.run_io(0);
    n
}

fn call(n: &mut MetadataNode<FileDisk>, token: u64, r: Request) -> Reply {
    n.submit(token, r, 0);
    n.run_io(0);
    let out = n.take_output();
    let a = out
        .answers
        .into_iter()
        .find(|a| a.token == token)
        .expect("answered");
    a.result.unwrap()
}

fn create(n: &mut MetadataNode<FileDisk>, token: u64, name: &str) {
    let r = call(
        n,
        token,
        Request::CreateTopics {
            topics: vec![TopicSpec {
                name: name.into(),
                partitions: 3,
                replication_factor: 1,
                assignment: Vec::new(),
                configs: BTreeMap::new(),
            }],
            validate_only: false,
            origin: Origin::Client,
            quota: None,
        },
    );
    assert!(
        matches!(&r, Reply::CreateTopics(v) if v[0].is_ok()),
        "{r:?}"
    );
}

fn register(n: &mut MetadataNode<FileDisk>) {
    let r = call(
        n,
        1000,
        Request::RegisterBroker(controller::RegisterBroker {
            node_id: 1,
            cluster_id: "test-cluster".into(),
            incarnation_id: "i".into(),
            endpoints: vec![Endpoint {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9092,
                security_protocol: "PLAINTEXT".into(),
            }],
            rack: None,
            previous_broker_epoch: -1,
        }),
    );
    let Reply::RegisterBroker(Ok(epoch)) = r else {
        panic!("{r:?}")
    };
    let offset = n.image().offset;
    call(
        n,
        1001,
        Request::BrokerHeartbeat {
            node_id: 1,
            broker_epoch: epoch,
            current_metadata_offset: offset,
            want_fence: false,
            want_shutdown: false,
        },
    );
}

#[test]
fn a_single_voter_is_active_at_once_and_restarts_with_its_metadata() {
    for snapshot_after_bytes in [u64::MAX, 200] {
        let dir = tempfile::tempdir().unwrap();
        let image = {
            let mut n = open(dir.path(), snapshot_after_bytes);
            assert!(n.is_active(), "one voter needs no election");
            assert_eq!(n.image().cluster_id, "test-cluster");
            register(&mut n);
            for i in 0..20 {
                create(&mut n, i, &format!("t{i}"));
            }
            n.image().clone()
        };
        let n = open(dir.path(), snapshot_after_bytes);
        assert!(n.is_active());
        let after = n.image();
        assert_eq!(after.topics.len(), 20);
        for (name, t) in &image.topics {
            assert_eq!(after.topic(name).unwrap().id, t.id);
        }
        assert!(after.offset >= image.offset);
        if snapshot_after_bytes < u64::MAX {
            let files: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                .collect();
            assert!(
                files.iter().any(|f| f.ends_with(".checkpoint")),
                "{files:?}"
            );
        }
    }
}

#[test]
fn a_different_voter_set_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), u64::MAX));
    let err = MetadataNode::new(
        config(vec![1, 2, 3], u64::MAX),
        FileDisk::new(dir.path()),
        &quorum::raft_logger(1),
    )
    .unwrap_err();
    assert!(matches!(err, NodeError::Store(_)), "{err}");
    assert!(
        err.to_string().contains("controller.quorum.voters"),
        "{err}"
    );
}
