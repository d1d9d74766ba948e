//! The controller state machine on its own: decisions against the speculative image, commits,
//! leadership loss, registration and fencing, leader elections, placement, ISR changes
//! (AlterPartition).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use auth::acl::{AccessControlEntry, AclBinding, AclBindingFilter, PatternFilter, ResourcePattern};
use controller::{
    ConfigChange, ConfigResource, Controller, ControllerConfig, IsrChange, Origin, RegisterBroker,
    Reply, Request, TopicSpec,
};
use metadata::{Endpoint, MetadataDelta, MetadataImage, MetadataRecord, PartitionRegistration};
use model::acl::{AclOperation, PatternType, PermissionType, ResourceType};
use model::ErrorCode;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A controller plus a log that commits (or drops) what it proposes.
struct Harness {
    c: Controller,
    image: MetadataImage,
    /// Proposed, not committed.
    queue: Vec<Vec<MetadataRecord>>,
    now: i64,
}

impl Harness {
    fn new(config: ControllerConfig) -> Harness {
        let mut h = Harness {
            c: Controller::new(config, 7),
            image: MetadataImage::empty(),
            queue: Vec::new(),
            now: 0,
        };
        h.c.on_commit(Arc::new(h.image.clone()), 0);
        let d = h.c.activate(0);
        h.propose(d.records);
        h.commit_all();
        h
    }

    fn propose(&mut self, records: Vec<MetadataRecord>) {
        if !records.is_empty() {
            self.queue.push(records);
        }
    }

    fn commit_all(&mut self) {
        let n = self.queue.len();
        for batch in std::mem::take(&mut self.queue) {
            let offset = self.image.offset + 1;
            self.image
                .apply_batch(offset, &batch, &mut MetadataDelta::default());
            self.image.offset = offset;
        }
        self.c.on_commit(Arc::new(self.image.clone()), n);
        assert_eq!(self.c.pending_batches(), 0);
        assert_eq!(self.c.speculative(), &self.image);
    }

    fn call(&mut self, r: Request) -> Reply {
        let d = self.c.handle(r, self.now).unwrap();
        self.propose(d.records);
        d.reply
    }

    fn register(&mut self, id: i32, rack: Option<&str>) -> i64 {
        let r = self.call(Request::RegisterBroker(RegisterBroker {
            node_id: id,
            cluster_id: "c".into(),
            incarnation_id: format!("inc-{id}-{}", self.now),
            endpoints: vec![Endpoint {
                name: "PLAINTEXT".into(),
                host: "h".into(),
                port: 9000 + id,
                security_protocol: "PLAINTEXT".into(),
            }],
            rack: rack.map(String::from),
            previous_broker_epoch: -1,
        }));
        self.commit_all();
        let Reply::RegisterBroker(Ok(epoch)) = r else {
            panic!("{r:?}")
        };
        let hb = self.heartbeat(id, epoch, false);
        assert!(!hb.is_fenced, "{hb:?}");
        epoch
    }

    fn heartbeat(&mut self, id: i32, epoch: i64, shutdown: bool) -> controller::HeartbeatReply {
        let offset = self.image.offset;
        let r = self.call(Request::BrokerHeartbeat {
            node_id: id,
            broker_epoch: epoch,
            current_metadata_offset: offset,
            want_fence: false,
            want_shutdown: shutdown,
        });
        self.commit_all();
        let Reply::BrokerHeartbeat(Ok(h)) = r else {
            panic!("{r:?}")
        };
        h
    }

    fn create(&mut self, name: &str, partitions: i32, rf: i16) -> Result<(), ErrorCode> {
        let r = self.call(Request::CreateTopics {
            topics: vec![TopicSpec {
                name: name.into(),
                partitions,
                replication_factor: rf,
                assignment: Vec::new(),
                configs: BTreeMap::new(),
            }],
            validate_only: false,
            origin: Origin::Client,
            quota: None,
        });
        let Reply::CreateTopics(mut results) = r else {
            panic!("{r:?}")
        };
        results.remove(0).map(|_| ()).map_err(|e| e.code)
    }
}

fn config() -> ControllerConfig {
    ControllerConfig {
        cluster_id: Some("c".into()),
        broker_session_timeout_ms: 1000,
        ..ControllerConfig::default()
    }
}

#[test]
fn pending_proposals_are_seen_by_later_requests_and_dropped_with_leadership() {
    let mut h = Harness::new(config());
    h.register(1, None);
    assert_eq!(h.create("a", 1, 1), Ok(()));
    // Not committed yet, but a second creation already sees it.
    assert_eq!(h.create("a", 1, 1), Err(ErrorCode::TopicAlreadyExists));
    assert!(h.c.speculative().topic("a").is_some());
    assert!(h.image.topic("a").is_none());
    // Leadership lost before the commit: the speculative image is gone.
    h.c.deactivate();
    h.queue.clear();
    assert_eq!(
        h.c.handle(
            Request::DeleteTopics {
                topics: vec![],
                quota: None
            },
            0
        )
        .unwrap_err()
        .code,
        ErrorCode::NotController
    );
    let d = h.c.activate(5);
    assert!(d.records.is_empty());
    assert!(h.c.speculative().topic("a").is_none());
    assert_eq!(h.create("a", 1, 1), Ok(()));
    h.commit_all();
    assert!(h.image.topic("a").is_some());
}

#[test]
fn an_abandoned_proposal_leaves_the_speculative_image() {
    let mut h = Harness::new(config());
    h.register(1, None);
    assert_eq!(h.create("a", 1, 1), Ok(()));
    assert_eq!(h.create("b", 1, 1), Ok(()));
    h.queue.pop();
    h.c.abandon_last();
    assert!(h.c.speculative().topic("b").is_none());
    assert!(h.c.speculative().topic("a").is_some());
    h.commit_all();
}

#[test]
fn replicas_and_leaders_spread_and_racks_are_respected() {
    let mut h = Harness::new(config());
    for (id, rack) in [(1, "x"), (2, "y"), (3, "x"), (4, "y")] {
        h.register(id, Some(rack));
    }
    assert_eq!(h.create("t", 8, 2), Ok(()));
    h.commit_all();
    let t = h.image.topic("t").unwrap();
    let mut leaders = BTreeMap::new();
    for p in &t.partitions {
        *leaders.entry(p.leader).or_insert(0) += 1;
        let racks: Vec<i32> = p.replicas.iter().map(|r| r % 2).collect();
        assert_ne!(racks[0], racks[1], "{p:?}");
        assert_eq!(p.isr, p.replicas);
    }
    assert!(leaders.values().all(|&n| n == 2), "{leaders:?}");
    assert_eq!(
        h.create("big", 1, 5),
        Err(ErrorCode::InvalidReplicationFactor)
    );
}

#[test]
fn a_fenced_broker_loses_leadership_to_the_isr_and_stays_eligible_as_the_last_member() {
    let mut h = Harness::new(config());
    let e1 = h.register(1, None);
    let e2 = h.register(2, None);
    assert_eq!(h.create("t", 4, 2), Ok(()));
    assert_eq!(h.create("solo", 2, 1), Ok(()));
    h.commit_all();
    // Broker 2 stops heartbeating.
    h.now = 600;
    h.heartbeat(1, e1, false);
    h.now = 1500;
    let d = h.c.tick(h.now);
    h.propose(d.records);
    h.commit_all();
    assert!(h.image.brokers[&2].fenced);
    for p in &h.image.topic("t").unwrap().partitions {
        assert_eq!(p.leader, 1, "{p:?}");
        assert_eq!(p.isr, vec![1], "{p:?}");
    }
    for p in &h.image.topic("solo").unwrap().partitions {
        if p.replicas == [2] {
            // KIP-966: the ISR empties, its last member is an eligible leader replica.
            assert_eq!(
                (p.leader, p.isr.clone(), p.elr.clone()),
                (-1, vec![], vec![2]),
                "{p:?}"
            );
            assert_eq!(p.leader_epoch, 1);
        }
    }
    // It comes back: a new registration; once caught up it is unfenced and leads its
    // offline partitions again (with a new epoch).
    let e2b = h.register(2, None);
    assert!(e2b > e2);
    for p in &h.image.topic("solo").unwrap().partitions {
        if p.replicas == [2] {
            assert_eq!(p.leader, 2);
            assert_eq!(p.leader_epoch, 2);
            assert_eq!((p.isr.clone(), p.elr.clone()), (vec![2], vec![]));
        }
    }
}

#[test]
fn unclean_election_only_where_enabled() {
    let mut cfg = config();
    cfg.broker_props
        .insert("unclean.leader.election.enable".into(), "true".into());
    let mut h = Harness::new(cfg);
    let e1 = h.register(1, None);
    h.register(2, None);
    let assignment = vec![vec![1, 2]];
    h.call(Request::CreateTopics {
        topics: vec![TopicSpec {
            name: "u".into(),
            partitions: -1,
            replication_factor: -1,
            assignment,
            configs: BTreeMap::new(),
        }],
        validate_only: false,
        origin: Origin::Client,
        quota: None,
    });
    h.commit_all();
    // Broker 2 leaves the ISR (fenced), then broker 1 dies too: unclean election picks 2 when
    // it returns, since only 1 was in the ISR.
    h.now = 1500;
    h.heartbeat(1, e1, false);
    let d = h.c.tick(h.now);
    h.propose(d.records);
    h.commit_all();
    assert_eq!(h.image.topic("u").unwrap().partitions[0].isr, vec![1]);
    h.now = 3000;
    let d = h.c.tick(h.now);
    h.propose(d.records);
    h.commit_all();
    assert_eq!(h.image.topic("u").unwrap().partitions[0].leader, -1);
    h.register(2, None);
    let p = &h.image.topic("u").unwrap().partitions[0];
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
}

/// One BROKER config change; the controller's answer for it.
fn alter_broker(
    h: &mut Harness,
    broker: &str,
    changes: &[(&str, Option<&str>)],
    replace_all: bool,
) -> Result<(), (ErrorCode, String)> {
    let r = h.call(Request::AlterConfigs {
        changes: vec![ConfigChange {
            resource: ConfigResource::Broker(broker.into()),
            changes: changes
                .iter()
                .map(|(k, v)| (k.to_string(), v.map(String::from)))
                .collect(),
            replace_all,
        }],
        validate_only: false,
        origin: Origin::Client,
    });
    h.commit_all();
    let Reply::AlterConfigs(mut results) = r else {
        panic!("{r:?}")
    };
    results.remove(0).map_err(|e| (e.code, e.message))
}

#[test]
fn dynamic_broker_configs_are_checked_as_kafka_checks_them_and_committed() {
    let mut h = Harness::new(config());
    h.register(1, None);
    alter_broker(&mut h, "", &[("log.retention.ms", Some("1000"))], false).unwrap();
    alter_broker(&mut h, "1", &[("message.max.bytes", Some("2000"))], false).unwrap();
    alter_broker(&mut h, "", &[("log.cleaner.backoff.ms", Some("0"))], false).unwrap();
    assert_eq!(h.image.broker_configs[""]["log.cleaner.backoff.ms"], "0");
    // Keys Moldau does not know are kept, as Kafka keeps them.
    alter_broker(&mut h, "", &[("some.plugin.key", Some("x"))], false).unwrap();
    assert_eq!(h.image.broker_configs[""]["log.retention.ms"], "1000");
    assert_eq!(h.image.broker_configs[""]["some.plugin.key"], "x");
    assert_eq!(h.image.broker_configs["1"]["message.max.bytes"], "2000");
    // A listener's keystore changes at runtime, per broker.
    let keystore = "listener.name.ssl.ssl.keystore.location";
    alter_broker(&mut h, "1", &[(keystore, Some("/k.pem"))], false).unwrap();
    assert_eq!(h.image.broker_configs["1"][keystore], "/k.pem");
    // A listener's own connection limit, cluster-wide or per broker (KIP-402).
    let listener_max = "listener.name.external.max.connections";
    alter_broker(&mut h, "", &[(listener_max, Some("100"))], false).unwrap();
    assert_eq!(h.image.broker_configs[""][listener_max], "100");

    // Refusals change nothing: a bad value, a static key, a bad resource name.
    let before = h.image.broker_configs.clone();
    for (broker, key, value) in [
        ("", "message.max.bytes", "abc"),
        ("", "message.max.bytes", "-5"),
        ("", "min.insync.replicas", "0"),
        ("", "log.message.timestamp.type", "Bogus"),
        ("", "log.dirs", "/tmp/x"),
        ("", "log.cleaner.backoff.ms", "-1"),
        ("", "log.cleaner.backoff.ms", "soon"),
        ("1", "node.id", "7"),
        ("", "listener.name.external.max.connections", "-1"),
        ("1", "listener.name.external.max.connections", "many"),
        // Per broker only, as Kafka's per-broker security configs.
        ("", "listener.name.ssl.ssl.keystore.location", "/k.pem"),
        ("1", "listener.name.ssl.ssl.keystore.location", " "),
        // No other listener key changes at runtime: refused rather than stored and ignored.
        ("1", "listener.name.ssl.ssl.client.auth", "required"),
        (
            "1",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms",
            "PLAIN",
        ),
        ("foo", "log.retention.ms", "1"),
        ("-1", "log.retention.ms", "1"),
    ] {
        let e = alter_broker(&mut h, broker, &[(key, Some(value))], false).unwrap_err();
        assert_eq!(
            e.0,
            ErrorCode::InvalidRequest,
            "{broker} {key}={value}: {e:?}"
        );
    }
    assert_eq!(h.image.broker_configs, before);

    // A cluster-wide default feeds topic config checks on the controller.
    alter_broker(
        &mut h,
        "",
        &[("unclean.leader.election.enable", Some("true"))],
        false,
    )
    .unwrap();
    // Removal, and legacy AlterConfigs replacing the whole set.
    alter_broker(&mut h, "1", &[("message.max.bytes", None)], false).unwrap();
    alter_broker(&mut h, "1", &[(keystore, None)], false).unwrap();
    assert!(!h.image.broker_configs.contains_key("1"));
    alter_broker(&mut h, "", &[("log.segment.bytes", Some("1048576"))], true).unwrap();
    assert_eq!(
        h.image.broker_configs[""],
        BTreeMap::from([("log.segment.bytes".to_string(), "1048576".to_string())])
    );

    // Eligible leader replicas need one min.insync.replicas for the whole cluster, as in Kafka
    // 4.4 (KAFKA-16540): a broker's own value, set (also by a legacy replace) or removed, is
    // INVALID_CONFIG; a bad value is still INVALID_REQUEST first; the cluster-wide one may
    // change but not be removed.
    let min_isr = "min.insync.replicas";
    for (value, replace_all) in [(Some("2"), false), (Some("2"), true), (None, false)] {
        let e = alter_broker(&mut h, "1", &[(min_isr, value)], replace_all).unwrap_err();
        assert_eq!(e.0, ErrorCode::InvalidConfig, "{value:?}: {e:?}");
    }
    let e = alter_broker(&mut h, "1", &[(min_isr, Some("0"))], false).unwrap_err();
    assert_eq!(e.0, ErrorCode::InvalidRequest, "{e:?}");
    alter_broker(&mut h, "", &[(min_isr, Some("2"))], false).unwrap();
    assert_eq!(h.image.broker_configs[""][min_isr], "2");
    for replace_all in [false, true] {
        let change: &[(&str, Option<&str>)] = if replace_all {
            &[("log.segment.bytes", Some("1048576"))]
        } else {
            &[(min_isr, None)]
        };
        let e = alter_broker(&mut h, "", change, replace_all).unwrap_err();
        assert_eq!(e.0, ErrorCode::InvalidConfig, "{e:?}");
    }
    assert_eq!(h.image.broker_configs[""][min_isr], "2");
    assert!(!h.image.broker_configs.contains_key("1"));
}

#[test]
fn controlled_shutdown_moves_leadership_and_fences() {
    let mut h = Harness::new(config());
    let e1 = h.register(1, None);
    let e2 = h.register(2, None);
    let e3 = h.register(3, None);
    for (id, e) in [(1, e1), (2, e2), (3, e3)] {
        h.heartbeat(id, e, false);
    }
    assert_eq!(h.create("t", 6, 2), Ok(()));
    h.commit_all();
    assert!(h
        .image
        .topic("t")
        .unwrap()
        .partitions
        .iter()
        .any(|p| p.leader == 2));
    // Leadership moves first; the broker stays unfenced (listed in Metadata, serving
    // NOT_LEADER_OR_FOLLOWER with the new leader) until the others have applied the move.
    let reply = h.heartbeat(2, e2, true);
    assert!(!reply.should_shut_down && !reply.is_fenced, "{reply:?}");
    assert!(h.image.brokers[&2].in_controlled_shutdown);
    assert!(!h.image.brokers[&2].fenced);
    for p in &h.image.topic("t").unwrap().partitions {
        assert!(
            p.leader != 2 && p.leader >= 0 && !p.isr.contains(&2),
            "{p:?}"
        );
    }
    // Brokers 1 and 3 last reported offsets from before the move.
    let reply = h.heartbeat(2, e2, true);
    assert!(!reply.should_shut_down, "{reply:?}");
    h.heartbeat(1, e1, false);
    let reply = h.heartbeat(2, e2, true);
    assert!(
        !reply.should_shut_down,
        "broker 3 has not applied the move: {reply:?}"
    );
    h.heartbeat(3, e3, false);
    let reply = h.heartbeat(2, e2, true);
    assert!(reply.should_shut_down && reply.is_fenced, "{reply:?}");
    assert!(h.image.brokers[&2].fenced);
    // Once fenced, the answer stays "shut down".
    assert!(h.heartbeat(2, e2, true).should_shut_down);
}

#[test]
fn controlled_shutdown_of_a_broker_leading_nothing_is_immediate() {
    let mut h = Harness::new(config());
    let e1 = h.register(1, None);
    h.heartbeat(1, e1, false);
    assert_eq!(h.create("t", 2, 1), Ok(()));
    h.commit_all();
    let e2 = h.register(2, None);
    h.heartbeat(2, e2, false);
    assert!(!h.image.brokers[&2].fenced);
    let reply = h.heartbeat(2, e2, true);
    assert!(reply.should_shut_down && reply.is_fenced, "{reply:?}");
}

#[test]
fn duplicate_registration_waits_for_the_old_session_unless_it_shut_down_cleanly() {
    let mut h = Harness::new(config());
    let e1 = h.register(1, None);
    let r = h.call(Request::RegisterBroker(RegisterBroker {
        node_id: 1,
        cluster_id: "c".into(),
        incarnation_id: "another".into(),
        endpoints: vec![],
        rack: None,
        previous_broker_epoch: -1,
    }));
    assert!(
        matches!(&r, Reply::RegisterBroker(Err(e)) if e.code == ErrorCode::DuplicateBrokerRegistration),
        "{r:?}"
    );
    let r = h.call(Request::RegisterBroker(RegisterBroker {
        node_id: 1,
        cluster_id: "c".into(),
        incarnation_id: "restarted".into(),
        endpoints: vec![],
        rack: None,
        previous_broker_epoch: e1,
    }));
    assert!(matches!(r, Reply::RegisterBroker(Ok(e)) if e > e1), "{r:?}");
    let r = h.call(Request::RegisterBroker(RegisterBroker {
        node_id: 9,
        cluster_id: "other".into(),
        incarnation_id: "x".into(),
        endpoints: vec![],
        rack: None,
        previous_broker_epoch: -1,
    }));
    assert!(
        matches!(&r, Reply::RegisterBroker(Err(e)) if e.code == ErrorCode::InconsistentClusterId),
        "{r:?}"
    );
}

#[test]
fn producer_id_blocks_never_overlap() {
    let mut h = Harness::new(config());
    let e1 = h.register(1, None);
    let e2 = h.register(2, None);
    let mut blocks = Vec::new();
    for (b, e) in [(1, e1), (2, e2), (1, e1)] {
        let r = h.call(Request::AllocateProducerIds {
            broker_id: b,
            broker_epoch: e,
        });
        let Reply::AllocateProducerIds(Ok(block)) = r else {
            panic!("{r:?}")
        };
        blocks.push(block);
    }
    h.commit_all();
    assert_eq!(blocks, vec![(0, 1000), (1000, 1000), (2000, 1000)]);
    assert_eq!(h.image.next_producer_id, 3000);
    let r = h.call(Request::AllocateProducerIds {
        broker_id: 1,
        broker_epoch: e1 - 1,
    });
    assert!(
        matches!(&r, Reply::AllocateProducerIds(Err(e)) if e.code == ErrorCode::StaleBrokerEpoch)
    );
}

type AlterResult =
    Result<Vec<Vec<Result<PartitionRegistration, controller::ControllerError>>>, ErrorCode>;

/// AlterPartition for partition `p` of `topic` from `broker` (id, epoch), naming `epochs`
/// (leader epoch, partition epoch) and the new ISR with the broker epochs it saw.
fn alter(
    h: &mut Harness,
    broker: (i32, i64),
    topic: &str,
    p: i32,
    epochs: (i32, i32),
    isr: &[(i32, i64)],
) -> AlterResult {
    let id = h.c.speculative().topic(topic).unwrap().id;
    let r = h.call(Request::AlterPartition {
        broker_id: broker.0,
        broker_epoch: broker.1,
        topics: vec![(
            id,
            vec![IsrChange {
                partition: p,
                leader_epoch: epochs.0,
                partition_epoch: epochs.1,
                new_isr: isr.to_vec(),
                leader_recovery_state: 0,
            }],
        )],
    });
    let Reply::AlterPartition(r) = r else {
        panic!("{r:?}")
    };
    r.map_err(|e| e.code)
}

/// The one partition's outcome of an [`alter`].
fn outcome(r: AlterResult) -> Result<PartitionRegistration, ErrorCode> {
    r?.remove(0).remove(0).map_err(|e| e.code)
}

/// Three brokers and topic `t` with one partition on all three; returns the brokers' epochs.
fn three_replicas(h: &mut Harness) -> BTreeMap<i32, i64> {
    let epochs: BTreeMap<i32, i64> = (1..=3).map(|id| (id, h.register(id, None))).collect();
    assert_eq!(h.create("t", 1, 3), Ok(()));
    h.commit_all();
    epochs
}

#[test]
fn alter_partition_changes_the_isr_of_a_leader_in_its_epochs() {
    let mut h = Harness::new(config());
    let e = three_replicas(&mut h);
    let p = h.image.topic("t").unwrap().partitions[0].clone();
    let leader = p.leader;
    let others: Vec<i32> = p
        .replicas
        .iter()
        .copied()
        .filter(|r| *r != leader)
        .collect();
    // Shrink to the leader and one follower.
    let isr = [(leader, e[&leader]), (others[0], e[&others[0]])];
    let r = outcome(alter(
        &mut h,
        (leader, e[&leader]),
        "t",
        0,
        (p.leader_epoch, p.partition_epoch),
        &isr,
    ))
    .unwrap();
    assert_eq!(r.isr, vec![leader, others[0]]);
    assert_eq!(
        (r.leader, r.leader_epoch),
        (leader, p.leader_epoch),
        "the leader and its epoch stay"
    );
    assert_eq!(r.partition_epoch, p.partition_epoch + 1);
    h.commit_all();
    assert_eq!(
        h.image.topic("t").unwrap().partitions[0],
        r,
        "committed as answered"
    );
    // The same ISR again: nothing to write, the current state is the answer.
    let again = outcome(alter(
        &mut h,
        (leader, e[&leader]),
        "t",
        0,
        (r.leader_epoch, r.partition_epoch),
        &isr,
    ))
    .unwrap();
    assert_eq!(again, r);
    assert!(h.queue.is_empty(), "no record for an unchanged ISR");
    // Expand back to all three; -1 skips the broker-epoch check (AlterPartition v2).
    let all = [(leader, -1), (others[0], -1), (others[1], -1)];
    let r2 = outcome(alter(
        &mut h,
        (leader, e[&leader]),
        "t",
        0,
        (r.leader_epoch, r.partition_epoch),
        &all,
    ))
    .unwrap();
    assert_eq!(r2.isr.len(), 3);
    assert_eq!(r2.partition_epoch, r.partition_epoch + 1);
    h.commit_all();
    // The change based on the old partition epoch is refused now.
    assert_eq!(
        outcome(alter(
            &mut h,
            (leader, e[&leader]),
            "t",
            0,
            (r.leader_epoch, r.partition_epoch),
            &isr
        )),
        Err(ErrorCode::InvalidUpdateVersion)
    );
    assert!(h.queue.is_empty(), "a refused change writes nothing");
}

#[test]
fn alter_partition_refusals_are_kafkas() {
    let mut h = Harness::new(config());
    let e = three_replicas(&mut h);
    let p = h.image.topic("t").unwrap().partitions[0].clone();
    let l = p.leader;
    let f: Vec<i32> = p.replicas.iter().copied().filter(|r| *r != l).collect();
    let epochs = (p.leader_epoch, p.partition_epoch);
    let me = (l, e[&l]);
    let isr = [(l, e[&l]), (f[0], e[&f[0]])];
    // The requester's broker epoch is stale: the whole request is refused.
    assert_eq!(
        alter(&mut h, (l, e[&l] - 1), "t", 0, epochs, &isr).unwrap_err(),
        ErrorCode::StaleBrokerEpoch
    );
    assert_eq!(
        alter(&mut h, (9, 1), "t", 0, epochs, &isr).unwrap_err(),
        ErrorCode::StaleBrokerEpoch
    );
    // Epochs newer than the controller knows: it is probably not the controller any more.
    assert_eq!(
        outcome(alter(&mut h, me, "t", 0, (epochs.0 + 1, epochs.1), &isr)),
        Err(ErrorCode::NotController)
    );
    assert_eq!(
        outcome(alter(&mut h, me, "t", 0, (epochs.0, epochs.1 + 1), &isr)),
        Err(ErrorCode::NotController)
    );
    // Not the leader.
    let other = (f[0], e[&f[0]]);
    assert_eq!(
        outcome(alter(&mut h, other, "t", 0, epochs, &isr)),
        Err(ErrorCode::InvalidRequest)
    );
    // An ISR without the leader, with a stranger, with a duplicate, or empty.
    for bad in [
        vec![(f[0], e[&f[0]])],
        vec![(l, e[&l]), (7, -1)],
        vec![(l, e[&l]), (l, e[&l])],
        vec![],
    ] {
        assert_eq!(
            outcome(alter(&mut h, me, "t", 0, epochs, &bad)),
            Err(ErrorCode::InvalidRequest),
            "{bad:?}"
        );
    }
    // A member seen at another broker epoch than it has.
    assert_eq!(
        outcome(alter(
            &mut h,
            me,
            "t",
            0,
            epochs,
            &[(l, e[&l]), (f[0], e[&f[0]] + 5)]
        )),
        Err(ErrorCode::IneligibleReplica)
    );
    // The refusal bumped the partition epoch (nothing else changed): another copy of the
    // refused request can never be committed, so the leader may stop counting its members.
    let bumped = h.c.speculative().topic("t").unwrap().partitions[0].clone();
    assert_eq!(bumped.partition_epoch, epochs.1 + 1, "{bumped:?}");
    assert_eq!((bumped.leader, bumped.leader_epoch), (l, epochs.0));
    assert_eq!(
        outcome(alter(
            &mut h,
            me,
            "t",
            0,
            epochs,
            &[(l, e[&l]), (f[0], e[&f[0]])]
        )),
        Err(ErrorCode::InvalidUpdateVersion)
    );
    let epochs = (bumped.leader_epoch, bumped.partition_epoch);
    h.commit_all();
    // RECOVERING is never set by this controller: going there is refused.
    let id = h.image.topic("t").unwrap().id;
    let r = h.call(Request::AlterPartition {
        broker_id: l,
        broker_epoch: e[&l],
        topics: vec![(
            id,
            vec![IsrChange {
                partition: 0,
                leader_epoch: epochs.0,
                partition_epoch: epochs.1,
                new_isr: vec![(l, -1)],
                leader_recovery_state: 1,
            }],
        )],
    });
    let Reply::AlterPartition(Ok(r)) = r else {
        panic!("{r:?}")
    };
    assert_eq!(
        r[0][0].as_ref().unwrap_err().code,
        ErrorCode::InvalidRequest
    );
    // Unknown partition, unknown topic id.
    assert_eq!(
        outcome(alter(&mut h, me, "t", 3, epochs, &isr)),
        Err(ErrorCode::UnknownTopicOrPartition)
    );
    let r = h.call(Request::AlterPartition {
        broker_id: l,
        broker_epoch: e[&l],
        topics: vec![(
            model::TopicId::from_u128(42),
            vec![IsrChange {
                partition: 0,
                leader_epoch: 0,
                partition_epoch: 0,
                new_isr: vec![(l, -1)],
                leader_recovery_state: 0,
            }],
        )],
    });
    let Reply::AlterPartition(Ok(r)) = r else {
        panic!("{r:?}")
    };
    assert_eq!(
        r[0][0].as_ref().unwrap_err().code,
        ErrorCode::UnknownTopicId
    );
    assert!(h.queue.is_empty(), "nothing else refused was written");
    assert_eq!(h.c.speculative(), &h.image);
}

#[test]
fn a_fenced_broker_is_ineligible_and_leaves_the_isr_and_leaders_come_from_the_isr() {
    let mut h = Harness::new(config());
    let e = three_replicas(&mut h);
    let p = h.image.topic("t").unwrap().partitions[0].clone();
    let l = p.leader;
    let f: Vec<i32> = p.replicas.iter().copied().filter(|r| *r != l).collect();
    // Shrink to [leader, f0]: f1 is out of sync.
    let r = outcome(alter(
        &mut h,
        (l, e[&l]),
        "t",
        0,
        (p.leader_epoch, p.partition_epoch),
        &[(l, e[&l]), (f[0], e[&f[0]])],
    ))
    .unwrap();
    h.commit_all();
    // f0 stops heartbeating and is fenced: it leaves the ISR (the leader stays).
    h.now = 600;
    h.heartbeat(l, e[&l], false);
    h.heartbeat(f[1], e[&f[1]], false);
    h.now = 1300;
    h.heartbeat(l, e[&l], false);
    h.heartbeat(f[1], e[&f[1]], false);
    let d = h.c.tick(h.now);
    h.propose(d.records);
    h.commit_all();
    assert!(h.image.brokers[&f[0]].fenced);
    let now = h.image.topic("t").unwrap().partitions[0].clone();
    assert_eq!((now.leader, now.isr.clone()), (l, vec![l]), "{now:?}");
    assert_eq!(
        now.leader_epoch, r.leader_epoch,
        "the leader did not change"
    );
    // The leader cannot add the fenced broker back.
    assert_eq!(
        outcome(alter(
            &mut h,
            (l, e[&l]),
            "t",
            0,
            (now.leader_epoch, now.partition_epoch),
            &[(l, -1), (f[0], -1)]
        )),
        Err(ErrorCode::IneligibleReplica)
    );
    // It adds f1 (on the partition epoch the refusal bumped), then it is fenced itself: the
    // new leader comes from the ISR (f1), never from the fenced f0, which is out of it.
    let r = outcome(alter(
        &mut h,
        (l, e[&l]),
        "t",
        0,
        (now.leader_epoch, now.partition_epoch + 1),
        &[(l, -1), (f[1], -1)],
    ))
    .unwrap();
    h.commit_all();
    h.now = 2000;
    h.heartbeat(f[1], e[&f[1]], false);
    h.now = 2400;
    h.heartbeat(f[1], e[&f[1]], false);
    let d = h.c.tick(h.now);
    h.propose(d.records);
    h.commit_all();
    assert!(h.image.brokers[&l].fenced);
    let after = h.image.topic("t").unwrap().partitions[0].clone();
    assert_eq!(
        (after.leader, after.isr.clone()),
        (f[1], vec![f[1]]),
        "{after:?}"
    );
    assert_eq!(after.leader_epoch, r.leader_epoch + 1);
    // The old leader, with its old leader epoch, is fenced off.
    assert_eq!(
        outcome(alter(
            &mut h,
            (l, e[&l]),
            "t",
            0,
            (r.leader_epoch, r.partition_epoch),
            &[(l, -1)]
        )),
        Err(ErrorCode::FencedLeaderEpoch)
    );
}

fn upsert(name: &str, mechanism: i8, iterations: i32) -> controller::ScramUpsertion {
    controller::ScramUpsertion {
        name: name.into(),
        mechanism,
        iterations,
        salt: b"salt".to_vec(),
        stored_key: b"stored".to_vec(),
        server_key: b"server".to_vec(),
    }
}

/// AlterUserScramCredentials as Kafka's `ScramControlManager` decides it: per user, all or
/// nothing; Kafka's error codes; credentials in the image (and its snapshot) afterwards.
#[test]
fn scram_credentials_are_validated_per_user_and_land_in_the_image() {
    let mut h = Harness::new(ControllerConfig::default());
    let reply = h.call(Request::AlterUserScramCredentials {
        deletions: vec![("dave".into(), 1)],
        upsertions: vec![
            upsert("alice", 1, 4096),
            upsert("bob", 1, 4095),
            upsert("carol", 3, 4096),
            upsert("erin", 1, 16385),
            upsert("frank", 1, 4096),
            upsert("frank", 1, 5000),
            // Two mechanisms of one user in one request: Kafka 4.4 refuses them too.
            upsert("grace", 1, 4096),
            upsert("grace", 2, 4096),
            upsert("", 1, 4096),
        ],
    });
    let Reply::AlterUserScramCredentials(results) = reply else {
        panic!("{reply:?}")
    };
    let codes: Vec<(String, ErrorCode)> = results
        .into_iter()
        .map(|(u, r)| (u, r.err().map_or(ErrorCode::None, |e| e.code)))
        .collect();
    assert_eq!(
        codes,
        [
            ("dave".into(), ErrorCode::ResourceNotFound),
            ("alice".into(), ErrorCode::None),
            ("bob".into(), ErrorCode::UnacceptableCredential),
            ("carol".into(), ErrorCode::UnsupportedSaslMechanism),
            ("erin".into(), ErrorCode::UnacceptableCredential),
            ("frank".into(), ErrorCode::DuplicateResource),
            ("grace".into(), ErrorCode::DuplicateResource),
            ("".into(), ErrorCode::UnacceptableCredential),
        ]
    );
    let second = h.call(Request::AlterUserScramCredentials {
        deletions: vec![],
        upsertions: vec![upsert("alice", 2, 8192)],
    });
    assert!(
        matches!(&second, Reply::AlterUserScramCredentials(r) if r[0].1.is_ok()),
        "{second:?}"
    );
    h.commit_all();
    let users: Vec<(String, i8, i32)> = h
        .image
        .scram_credentials
        .iter()
        .map(|((u, m), c)| (u.clone(), *m, c.iterations))
        .collect();
    // A refused user's changes are not applied (all or nothing per user).
    assert_eq!(
        users,
        [("alice".into(), 1, 4096), ("alice".into(), 2, 8192)]
    );
    let snapshot = MetadataImage::from_snapshot(h.image.offset, &h.image.to_records());
    assert_eq!(snapshot.scram_credentials, h.image.scram_credentials);
    let reply = h.call(Request::AlterUserScramCredentials {
        deletions: vec![("alice".into(), 1)],
        upsertions: vec![],
    });
    assert!(
        matches!(&reply, Reply::AlterUserScramCredentials(r) if r[0].1.is_ok()),
        "{reply:?}"
    );
    h.commit_all();
    assert_eq!(h.image.scram_credentials.len(), 1);
}

fn binding(principal: &str, name: &str, prefixed: bool, op: AclOperation) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern {
            resource_type: ResourceType::Topic,
            name: name.into(),
            pattern_type: if prefixed {
                PatternType::Prefixed
            } else {
                PatternType::Literal
            },
        },
        entry: AccessControlEntry {
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission: PermissionType::Allow,
        },
    }
}

/// CreateAcls and DeleteAcls as Kafka's `AclControlManager` decides them: an ACL that exists
/// (or is created twice in one request) is one record; DeleteAcls removes what each filter
/// matches, an ACL once; ACLs survive a snapshot.
#[test]
fn acls_are_created_once_deleted_by_filter_and_kept_in_snapshots() {
    let mut h = Harness::new(ControllerConfig::default());
    let a = binding("User:alice", "orders-", true, AclOperation::Write);
    let b = binding("User:bob", "orders-eu", false, AclOperation::Read);
    let reply = h.call(Request::CreateAcls(vec![a.clone(), b.clone(), a.clone()]));
    assert!(
        matches!(&reply, Reply::CreateAcls(r) if r.len() == 3 && r.iter().all(Result::is_ok)),
        "{reply:?}"
    );
    h.commit_all();
    assert_eq!(h.image.acls.len(), 2);
    let again = h.call(Request::CreateAcls(vec![b.clone()]));
    assert!(matches!(&again, Reply::CreateAcls(r) if r[0].is_ok()));
    assert!(h.queue.is_empty(), "an existing ACL writes nothing");
    let snapshot = MetadataImage::from_snapshot(h.image.offset, &h.image.to_records());
    assert_eq!(snapshot.acls, h.image.acls);
    let stored: Vec<AclBinding> = h
        .image
        .acls
        .values()
        .filter_map(controller::acl_binding)
        .collect();
    assert!(stored.contains(&a) && stored.contains(&b), "{stored:?}");
    // MATCH on the topic orders-eu matches both; a second filter finds nothing left.
    let matching = AclBindingFilter {
        resource_type: Some(ResourceType::Topic),
        name: Some("orders-eu".into()),
        pattern: PatternFilter::Match,
        ..AclBindingFilter::any()
    };
    let reply = h.call(Request::DeleteAcls(vec![matching, AclBindingFilter::any()]));
    let Reply::DeleteAcls(deleted) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(deleted[0].len(), 2, "{deleted:?}");
    assert!(deleted[1].is_empty(), "{deleted:?}");
    h.commit_all();
    assert!(h.image.acls.is_empty());
}

/// A broker's new incarnation after a clean shutdown, fenced until it catches up.
fn register_fenced(h: &mut Harness, id: i32) -> i64 {
    let r = h.call(Request::RegisterBroker(RegisterBroker {
        node_id: id,
        cluster_id: "c".into(),
        incarnation_id: format!("inc-{id}-{}-again", h.now),
        endpoints: vec![Endpoint {
            name: "PLAINTEXT".into(),
            host: "h".into(),
            port: 9000 + id,
            security_protocol: "PLAINTEXT".into(),
        }],
        rack: None,
        // A clean restart (SIGTERM): registers at once, without waiting out the session.
        previous_broker_epoch: h.image.brokers.get(&id).map_or(-1, |b| b.epoch),
    }));
    h.commit_all();
    let Reply::RegisterBroker(Ok(epoch)) = r else {
        panic!("{r:?}")
    };
    epoch
}

/// KIP-966 (on by default in Kafka 4.4): every replica of an RF=3 partition crashes; the
/// restarts shrink the ISR (a restart is handled as a fence: Moldau's ISR members hold
/// everything committed on disk) into the eligible leader replicas once it is below
/// `min.insync.replicas`, so with min.insync.replicas=2 the partition comes back with 2 of
/// its 3 replicas although the last ISR member never returns; with 1 it waits for that one.
#[test]
fn after_every_replica_crashed_an_eligible_leader_replica_leads_again() {
    let mut h = Harness::new(config());
    for id in 1..=3 {
        h.register(id, None);
    }
    for (name, min_isr) in [("two", "2"), ("one", "1")] {
        let r = h.call(Request::CreateTopics {
            topics: vec![TopicSpec {
                name: name.into(),
                partitions: -1,
                replication_factor: -1,
                assignment: vec![vec![1, 2, 3]],
                configs: BTreeMap::from([("min.insync.replicas".into(), min_isr.into())]),
            }],
            validate_only: false,
            origin: Origin::Client,
            quota: None,
        });
        assert!(
            matches!(r, Reply::CreateTopics(ref v) if v[0].is_ok()),
            "{r:?}"
        );
    }
    h.commit_all();
    let part = |h: &Harness, t: &str| {
        let p = h.image.topic(t).unwrap().partitions[0].clone();
        (p.leader, p.isr, p.elr)
    };
    // All three crash (kill -9: no clean-shutdown epoch, so they cannot register again
    // before their sessions expire). The sessions expire: 1, then 2, then 3 are fenced.
    h.now = 1050;
    let d = h.c.tick(h.now);
    h.propose(d.records);
    h.commit_all();
    assert!(h.image.brokers[&3].fenced);
    assert_eq!(part(&h, "two"), (-1, vec![], vec![2, 3]));
    assert_eq!(part(&h, "one"), (-1, vec![], vec![3]));
    // 1 and 2 restart (new incarnations, fenced until caught up); 3 does not.
    let e1 = register_fenced(&mut h, 1);
    let e2 = register_fenced(&mut h, 2);
    assert_eq!(part(&h, "two"), (-1, vec![], vec![2, 3]));
    // 1 catches up: not eligible for either. 2 catches up: it leads "two" from the ELR.
    assert!(!h.heartbeat(1, e1, false).is_fenced);
    assert_eq!(part(&h, "two"), (-1, vec![], vec![2, 3]));
    assert!(!h.heartbeat(2, e2, false).is_fenced);
    assert_eq!(part(&h, "two"), (2, vec![2], vec![3]));
    assert_eq!(part(&h, "one"), (-1, vec![], vec![3]));
    // 1 catches up with the leader of "two": the ISR reaches 2, the ELR empties.
    let p = h.image.topic("two").unwrap().partitions[0].clone();
    let id = h.image.topic("two").unwrap().id;
    let r = h.call(Request::AlterPartition {
        broker_id: 2,
        broker_epoch: e2,
        topics: vec![(
            id,
            vec![IsrChange {
                partition: 0,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                new_isr: vec![(1, e1), (2, e2)],
                leader_recovery_state: 0,
            }],
        )],
    });
    h.commit_all();
    assert!(matches!(r, Reply::AlterPartition(Ok(_))), "{r:?}");
    assert_eq!(part(&h, "two"), (2, vec![1, 2], vec![]));
    // On "one", 3 comes back and leads.
    let e3 = register_fenced(&mut h, 3);
    assert!(!h.heartbeat(3, e3, false).is_fenced);
    assert_eq!(part(&h, "one"), (3, vec![3], vec![]));
}

/// ElectLeaders (API 43) as Kafka's `ReplicationControlManager.electLeaders` answers it.
#[test]
fn elect_leaders_preferred_and_unclean() {
    use controller::Election;
    let mut h = Harness::new(config());
    for id in 1..=3 {
        h.register(id, None);
    }
    let r = h.call(Request::CreateTopics {
        topics: vec![TopicSpec {
            name: "e".into(),
            partitions: -1,
            replication_factor: -1,
            assignment: vec![vec![1, 2, 3], vec![2, 3, 1]],
            configs: BTreeMap::new(),
        }],
        validate_only: false,
        origin: Origin::Client,
        quota: None,
    });
    assert!(
        matches!(r, Reply::CreateTopics(ref v) if v[0].is_ok()),
        "{r:?}"
    );
    h.commit_all();
    let elect = |h: &mut Harness, election, partitions| {
        let r = h.call(Request::ElectLeaders {
            election,
            partitions,
        });
        h.commit_all();
        let Reply::ElectLeaders(r) = r else {
            panic!("{r:?}")
        };
        r.into_iter()
            .flat_map(|(t, ps)| {
                ps.into_iter()
                    .map(move |(p, r)| (t.clone(), p, r.map_err(|e| e.code)))
            })
            .collect::<Vec<_>>()
    };
    // Everything is led by its preferred replica: nothing to do, and "all partitions" leaves
    // such partitions out.
    assert_eq!(
        elect(
            &mut h,
            Election::Preferred,
            Some(vec![("e".into(), vec![0, 7])])
        ),
        vec![
            ("e".into(), 0, Err(ErrorCode::ElectionNotNeeded)),
            ("e".into(), 7, Err(ErrorCode::UnknownTopicOrPartition))
        ]
    );
    assert_eq!(elect(&mut h, Election::Preferred, None), vec![]);
    assert_eq!(
        elect(
            &mut h,
            Election::Unclean,
            Some(vec![("nope".into(), vec![0])])
        ),
        vec![("nope".into(), 0, Err(ErrorCode::UnknownTopicOrPartition))]
    );
    // Broker 1 restarts: partition 0 moves to 2; once 1 is back (unfenced, but out of the
    // ISR) the preferred election has no valid preferred leader...
    let e1 = register_fenced(&mut h, 1);
    assert_eq!(h.image.topic("e").unwrap().partitions[0].leader, 2);
    assert!(!h.heartbeat(1, e1, false).is_fenced);
    assert_eq!(
        elect(
            &mut h,
            Election::Preferred,
            Some(vec![("e".into(), vec![0])])
        ),
        vec![("e".into(), 0, Err(ErrorCode::PreferredLeaderNotAvailable))]
    );
    // ...until it rejoins the ISR; then it leads again.
    let p = h.image.topic("e").unwrap().partitions[0].clone();
    let id = h.image.topic("e").unwrap().id;
    let r = h.call(Request::AlterPartition {
        broker_id: 2,
        broker_epoch: h.image.brokers[&2].epoch,
        topics: vec![(
            id,
            vec![IsrChange {
                partition: 0,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                new_isr: vec![(2, -1), (3, -1), (1, -1)],
                leader_recovery_state: 0,
            }],
        )],
    });
    h.commit_all();
    assert!(matches!(r, Reply::AlterPartition(Ok(_))), "{r:?}");
    assert_eq!(
        elect(&mut h, Election::Preferred, None),
        vec![("e".into(), 0, Ok(()))]
    );
    let p0 = h.image.topic("e").unwrap().partitions[0].clone();
    assert_eq!((p0.leader, p0.leader_epoch), (1, p.leader_epoch + 1));
    // UNCLEAN: a partition with a leader needs none.
    assert_eq!(
        elect(&mut h, Election::Unclean, Some(vec![("e".into(), vec![1])])),
        vec![("e".into(), 1, Err(ErrorCode::ElectionNotNeeded))]
    );
}

/// An UNCLEAN ElectLeaders brings back a partition whose only eligible replica is gone,
/// whatever `unclean.leader.election.enable` says; with no usable replica it fails.
#[test]
fn unclean_elect_leaders_brings_an_offline_partition_back() {
    use controller::Election;
    let mut h = Harness::new(config());
    for id in 1..=2 {
        h.register(id, None);
    }
    let r = h.call(Request::CreateTopics {
        topics: vec![TopicSpec {
            name: "u".into(),
            partitions: -1,
            replication_factor: -1,
            assignment: vec![vec![1, 2]],
            configs: BTreeMap::new(),
        }],
        validate_only: false,
        origin: Origin::Client,
        quota: None,
    });
    assert!(
        matches!(r, Reply::CreateTopics(ref v) if v[0].is_ok()),
        "{r:?}"
    );
    h.commit_all();
    // 2 restarts (out of the ISR), then 1's session expires: offline, 1 eligible.
    h.now = 500;
    let e2 = register_fenced(&mut h, 2);
    assert!(!h.heartbeat(2, e2, false).is_fenced);
    h.now = 1200;
    h.heartbeat(2, e2, false);
    let d = h.c.tick(h.now);
    h.propose(d.records);
    h.commit_all();
    let p = h.image.topic("u").unwrap().partitions[0].clone();
    assert_eq!(
        (p.leader, p.isr.clone(), p.elr.clone()),
        (-1, vec![], vec![1])
    );
    let r = h.call(Request::ElectLeaders {
        election: Election::Preferred,
        partitions: Some(vec![("u".into(), vec![0])]),
    });
    assert!(
        matches!(&r, Reply::ElectLeaders(v) if v[0].1[0].1.as_ref().is_err_and(|e| e.code == ErrorCode::PreferredLeaderNotAvailable)),
        "{r:?}"
    );
    let r = h.call(Request::ElectLeaders {
        election: Election::Unclean,
        partitions: Some(vec![("u".into(), vec![0])]),
    });
    h.commit_all();
    assert!(
        matches!(&r, Reply::ElectLeaders(v) if v[0].1[0].1.is_ok()),
        "{r:?}"
    );
    let p = h.image.topic("u").unwrap().partitions[0].clone();
    assert_eq!(
        (p.leader, p.isr.clone(), p.elr.clone()),
        (2, vec![2], vec![])
    );
}

/// AlterPartitionReassignments of one partition of `topic`: its outcome.
fn reassign(h: &mut Harness, topic: &str, p: i32, target: Option<&[i32]>) -> Result<(), ErrorCode> {
    let r = h.call(Request::AlterPartitionReassignments {
        topics: vec![(topic.into(), vec![(p, target.map(<[i32]>::to_vec))])],
        allow_replication_factor_change: true,
    });
    let Reply::AlterPartitionReassignments(mut r) = r else {
        panic!("{r:?}")
    };
    r.remove(0).1.remove(0).1.map_err(|e| e.code)
}

/// Topic `name` with one partition on `replicas`, committed.
fn create_assigned(h: &mut Harness, name: &str, replicas: Vec<i32>) {
    let r = h.call(Request::CreateTopics {
        topics: vec![TopicSpec {
            name: name.into(),
            partitions: 1,
            replication_factor: -1,
            assignment: vec![replicas],
            configs: BTreeMap::new(),
        }],
        validate_only: false,
        origin: Origin::Client,
        quota: None,
    });
    assert!(
        matches!(r, Reply::CreateTopics(ref v) if v[0].is_ok()),
        "{r:?}"
    );
    h.commit_all();
}

fn part(h: &Harness, topic: &str) -> PartitionRegistration {
    h.image.topic(topic).unwrap().partitions[0].clone()
}

#[test]
fn a_reassignment_completes_once_the_adding_replicas_are_in_the_isr_and_moves_the_leader() {
    let mut h = Harness::new(config());
    let e: BTreeMap<i32, i64> = (1..=4).map(|id| (id, h.register(id, None))).collect();
    create_assigned(&mut h, "t", vec![1, 2, 3]);
    assert_eq!(part(&h, "t").leader, 1);

    // [1,2,3] -> [2,3,4]: 4 joins as a follower; leader and ISR stay.
    assert_eq!(reassign(&mut h, "t", 0, Some(&[2, 3, 4])), Ok(()));
    h.commit_all();
    let p = part(&h, "t");
    assert_eq!(
        (
            &p.replicas[..],
            &p.adding_replicas[..],
            &p.removing_replicas[..]
        ),
        (&[2, 3, 4, 1][..], &[4][..], &[1][..])
    );
    assert_eq!((p.leader, &p.isr[..]), (1, &[1, 2, 3][..]));

    // The leader's AlterPartition brings 4 in: the reassignment completes, 1 leaves the
    // replicas and the ISR, leadership moves to the first target replica in the ISR.
    let isr = [(1, e[&1]), (2, e[&2]), (3, e[&3]), (4, e[&4])];
    let after = outcome(alter(
        &mut h,
        (1, e[&1]),
        "t",
        0,
        (p.leader_epoch, p.partition_epoch),
        &isr,
    ))
    .unwrap();
    h.commit_all();
    let q = part(&h, "t");
    assert_eq!(after, q);
    assert_eq!(
        (&q.replicas[..], &q.isr[..], q.leader),
        (&[2, 3, 4][..], &[2, 3, 4][..], 2)
    );
    assert!(q.adding_replicas.is_empty() && q.removing_replicas.is_empty());
    assert_eq!(q.leader_epoch, p.leader_epoch + 1);

    // Only removals complete at once: [2,3,4] -> [3,4], the leader 2 goes.
    assert_eq!(reassign(&mut h, "t", 0, Some(&[3, 4])), Ok(()));
    h.commit_all();
    let q = part(&h, "t");
    assert_eq!(
        (&q.replicas[..], &q.isr[..], q.leader),
        (&[3, 4][..], &[3, 4][..], 3)
    );
    assert!(q.adding_replicas.is_empty() && q.removing_replicas.is_empty());

    // [3,4] -> [3]: the leader stays, yet the leader epoch is bumped (Kafka's
    // `triggerLeaderEpochBumpForReplicaReassignmentIfNeeded`), fencing 4's fetches in flight.
    assert_eq!(reassign(&mut h, "t", 0, Some(&[3])), Ok(()));
    h.commit_all();
    let r = part(&h, "t");
    assert_eq!(
        (&r.replicas[..], &r.isr[..], r.leader),
        (&[3][..], &[3][..], 3)
    );
    assert_eq!(r.leader_epoch, q.leader_epoch + 1);
    // Growing does not bump it.
    assert_eq!(reassign(&mut h, "t", 0, Some(&[3, 4])), Ok(()));
    h.commit_all();
    assert_eq!(part(&h, "t").leader_epoch, r.leader_epoch);
}

#[test]
fn a_reassignment_is_cancelled_and_refused_as_kafka_refuses_it() {
    let mut h = Harness::new(config());
    let _e: BTreeMap<i32, i64> = (1..=3).map(|id| (id, h.register(id, None))).collect();
    create_assigned(&mut h, "t", vec![1, 2]);
    let before = part(&h, "t");

    // Refusals.
    assert_eq!(
        reassign(&mut h, "t", 0, None),
        Err(ErrorCode::NoReassignmentInProgress)
    );
    assert_eq!(
        reassign(&mut h, "t", 1, Some(&[1])),
        Err(ErrorCode::UnknownTopicOrPartition)
    );
    assert_eq!(
        reassign(&mut h, "nope", 0, Some(&[1])),
        Err(ErrorCode::UnknownTopicOrPartition)
    );
    for bad in [&[][..], &[1, 1][..], &[1, 9][..]] {
        assert_eq!(
            reassign(&mut h, "t", 0, Some(bad)),
            Err(ErrorCode::InvalidReplicaAssignment),
            "{bad:?}"
        );
    }
    let r = h.call(Request::AlterPartitionReassignments {
        topics: vec![("t".into(), vec![(0, Some(vec![1, 2, 3]))])],
        allow_replication_factor_change: false,
    });
    let Reply::AlterPartitionReassignments(r) = r else {
        panic!("{r:?}")
    };
    assert_eq!(
        r[0].1[0].1.as_ref().unwrap_err().code,
        ErrorCode::InvalidReplicationFactor
    );
    h.commit_all();
    assert_eq!(part(&h, "t"), before);

    // [1,2] -> [1,3] is in progress (3 not in the ISR); the same target again changes nothing.
    assert_eq!(reassign(&mut h, "t", 0, Some(&[1, 3])), Ok(()));
    h.commit_all();
    let p = part(&h, "t");
    assert_eq!(
        (
            &p.replicas[..],
            &p.adding_replicas[..],
            &p.removing_replicas[..]
        ),
        (&[1, 3, 2][..], &[3][..], &[2][..])
    );
    assert_eq!(reassign(&mut h, "t", 0, Some(&[1, 3])), Ok(()));
    h.commit_all();
    assert_eq!(part(&h, "t"), p);

    // Cancelled: back to [1,2], nothing in progress.
    assert_eq!(reassign(&mut h, "t", 0, None), Ok(()));
    h.commit_all();
    let q = part(&h, "t");
    assert_eq!(
        (&q.replicas[..], &q.isr[..], q.leader),
        (&[1, 2][..], &[1, 2][..], 1)
    );
    assert!(q.adding_replicas.is_empty() && q.removing_replicas.is_empty());
    assert_eq!(q.leader_epoch, p.leader_epoch + 1, "3 left the replicas");
    assert_eq!(
        reassign(&mut h, "t", 0, None),
        Err(ErrorCode::NoReassignmentInProgress)
    );
}

/// A quota that grants a fixed number of partitions and remembers what it was asked.
#[derive(Debug)]
struct Allowance {
    left: std::sync::Mutex<u32>,
    asked: std::sync::Mutex<Vec<u32>>,
}

impl controller::MutationQuota for Allowance {
    fn apply(&self, partitions: u32) -> Result<(), controller::ControllerError> {
        self.asked.lock().unwrap().push(partitions);
        let mut left = self.left.lock().unwrap();
        if *left == 0 {
            return Err(controller::ControllerError::new(
                ErrorCode::ThrottlingQuotaExceeded,
                "The throttling quota has been exceeded.",
            ));
        }
        *left = left.saturating_sub(partitions);
        Ok(())
    }
}

/// KIP-599: the controller asks the request's mutation quota for each topic's partitions
/// once the topic passed its checks (a topic refused for another reason costs nothing), and
/// a topic the quota refuses gets THROTTLING_QUOTA_EXCEEDED and writes nothing.
#[test]
fn the_mutation_quota_is_asked_per_topic_after_its_checks() {
    let mut h = Harness::new(config());
    h.register(1, None);
    assert_eq!(h.create("existing", 2, 1), Ok(()));
    h.commit_all();
    let quota = Arc::new(Allowance {
        left: std::sync::Mutex::new(4),
        asked: std::sync::Mutex::new(Vec::new()),
    });
    let q: controller::MutationQuotaRef = Some(quota.clone());
    let spec = |name: &str, partitions| TopicSpec {
        name: name.into(),
        partitions,
        replication_factor: 1,
        assignment: Vec::new(),
        configs: BTreeMap::new(),
    };
    let r = h.call(Request::CreateTopics {
        topics: vec![
            spec("existing", 3),
            spec("a", 5),
            spec("b", 1),
            spec("bad", 0),
        ],
        validate_only: false,
        origin: Origin::Client,
        quota: q.clone(),
    });
    let Reply::CreateTopics(results) = r else {
        panic!("{r:?}")
    };
    let codes: Vec<_> = results
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.code))
        .collect();
    assert_eq!(
        codes,
        vec![
            Some(ErrorCode::TopicAlreadyExists),
            None,
            Some(ErrorCode::ThrottlingQuotaExceeded),
            Some(ErrorCode::InvalidPartitions),
        ]
    );
    assert_eq!(*quota.asked.lock().unwrap(), vec![5, 1]);
    h.commit_all();
    assert!(h.image.topic("a").is_some());
    assert!(h.image.topic("b").is_none());
    // CreatePartitions asks for the partitions added, DeleteTopics for the topic's count.
    *quota.left.lock().unwrap() = 100;
    let r = h.call(Request::CreatePartitions {
        topics: vec![("existing".into(), 5, Vec::new())],
        validate_only: false,
        origin: Origin::Client,
        quota: q.clone(),
    });
    assert!(
        matches!(r, Reply::CreatePartitions(ref v) if v[0].is_ok()),
        "{r:?}"
    );
    h.commit_all();
    let r = h.call(Request::DeleteTopics {
        topics: vec![controller::TopicRef::Name("existing".into())],
        quota: q.clone(),
    });
    assert!(
        matches!(r, Reply::DeleteTopics(ref v) if v[0].is_ok()),
        "{r:?}"
    );
    h.commit_all();
    assert_eq!(*quota.asked.lock().unwrap(), vec![5, 1, 3, 5]);
    *quota.left.lock().unwrap() = 0;
    let r = h.call(Request::DeleteTopics {
        topics: vec![controller::TopicRef::Name("a".into())],
        quota: q,
    });
    assert!(
        matches!(r, Reply::DeleteTopics(ref v) if v[0].as_ref().is_err_and(|e| e.code == ErrorCode::ThrottlingQuotaExceeded)),
        "{r:?}"
    );
    h.commit_all();
    assert!(h.image.topic("a").is_some());
}
