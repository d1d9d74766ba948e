//! Consumer-protocol (KIP-848) groups request by request: joining and reconciling, leaving,
//! session and revocation timeouts, static membership, regex subscriptions, Kafka's errors,
//! offsets by member epoch, the group type in ListGroups/DescribeGroups, and conversions
//! between classic and consumer groups. Every test also checks that replaying the log
//! rebuilds the same groups.

#![allow(clippy::unwrap_used)]

mod consumer_common;

use consumer_common::*;
use coordinator::ConsumerGroupState;
use model::ErrorCode;

fn settle(h: &mut H, clients: &mut [Client]) {
    for _ in 0..6 {
        for c in clients.iter_mut() {
            assert_eq!(c.heartbeat(h), ErrorCode::None);
        }
    }
}

#[test]
fn three_members_share_six_partitions_without_overlap() {
    let mut h = H::new(topics(&[("t", 6)]));
    let mut clients: Vec<Client> = (0..3)
        .map(|i| Client::new("g", &format!("m{i}"), &["t"]))
        .collect();
    // The first member gets everything at once.
    assert_eq!(clients[0].heartbeat(&mut h), ErrorCode::None);
    assert_eq!(count(&clients[0].owned), 6);
    // Kafka 4.4 starts a new group at epoch 2 (see `next_group_epoch`).
    assert_eq!(clients[0].epoch, 2);
    settle(&mut h, &mut clients);
    let owned: Vec<_> = clients.iter().map(|c| &c.owned).collect();
    assert_eq!(union(&owned).len(), 6);
    for c in &clients {
        assert_eq!(count(&c.owned), 2, "{}", c.member_id);
    }
    let d = h.describe("g");
    assert_eq!(d.error_code, 0);
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.group_epoch, 4);
    assert_eq!(d.assignment_epoch, 4);
    assert_eq!(d.assignor_name.as_str(), "uniform");
    assert_eq!(d.members.len(), 3);
    for m in &d.members {
        assert_eq!(m.member_epoch, 4);
        assert_eq!(m.member_type, 1);
        assert_eq!(m.assignment.topic_partitions[0].topic_name.0.as_str(), "t");
    }
    h.check_replay();
}

#[test]
fn a_new_group_starts_at_epoch_two_as_in_kafka_4_4() {
    // Kafka 4.4 writes the first ConsumerGroupMetadata record of a group with epoch 2, whether
    // its first member subscribes to a topic that exists or not; each later change adds one.
    let mut h = H::new(topics(&[("t", 2)]));
    let r = h.hb(&Hb::join("g", "a", &["t"]));
    assert_eq!((r.error_code, r.member_epoch), (0, 2));
    let r = h.hb(&Hb::join("g2", "a", &["nosuch"]));
    assert_eq!((r.error_code, r.member_epoch), (0, 2));
    let d = h.describe("g");
    assert_eq!((d.group_epoch, d.assignment_epoch), (2, 2));
    assert_eq!(h.hb(&Hb::join("g", "b", &["t"])).error_code, 0);
    assert_eq!(h.describe("g").group_epoch, 3);
    h.check_replay();
}

#[test]
fn partitions_move_only_after_revocation() {
    let mut h = H::new(topics(&[("t", 4)]));
    let mut a = Client::new("g", "a", &["t"]);
    a.heartbeat(&mut h);
    assert_eq!(count(&a.owned), 4);
    // b joins: its target partitions are still a's, so it gets nothing yet.
    let mut b = Client::new("g", "b", &["t"]);
    b.heartbeat(&mut h);
    assert_eq!(count(&b.owned), 0);
    assert_eq!(b.epoch, 3);
    // a keeps its epoch while revoking (this client revokes at once).
    let before = a.epoch;
    a.heartbeat(&mut h);
    assert_eq!(
        a.epoch, before,
        "epoch moves only after the revocation is acknowledged"
    );
    assert_eq!(count(&a.owned), 2);
    a.heartbeat(&mut h);
    assert_eq!(a.epoch, 3);
    b.heartbeat(&mut h);
    assert_eq!(count(&b.owned), 2);
    union(&[&a.owned, &b.owned]);
    h.check_replay();
}

#[test]
fn a_member_that_does_not_revoke_is_fenced_after_its_rebalance_timeout() {
    let mut h = H::new(topics(&[("t", 2)]));
    let mut a = Client::new("g", "a", &["t"]);
    a.heartbeat(&mut h);
    let mut b = Client::new("g", "b", &["t"]);
    b.heartbeat(&mut h);
    // a is told to revoke but keeps reporting its old partitions.
    let mut hb = Hb::join("g", "a", &["t"]);
    hb.epoch = a.epoch;
    hb.owned = Some(owned_list(&a.owned));
    let r = h.hb(&hb);
    assert_eq!(r.error_code, 0);
    let r = h.hb(&hb);
    assert_eq!(r.error_code, 0);
    assert!(
        h.c.consumer_groups().group("g").unwrap().members["a"].state
            == coordinator::consumer::records::MemberState::UnrevokedPartitions
    );
    h.advance(i64::from(REBALANCE_MS) + 1);
    assert!(!h
        .c
        .consumer_groups()
        .group("g")
        .unwrap()
        .members
        .contains_key("a"));
    // b now gets everything.
    settle(&mut h, std::slice::from_mut(&mut b));
    assert_eq!(count(&b.owned), 2);
    h.check_replay();
}

#[test]
fn session_expiry_moves_partitions() {
    let mut h = H::new(topics(&[("t", 6)]));
    let mut clients: Vec<Client> = (0..3)
        .map(|i| Client::new("g", &format!("m{i}"), &["t"]))
        .collect();
    settle(&mut h, &mut clients);
    let dead = clients.pop().unwrap();
    // The survivors keep heartbeating; the dead one does not.
    for _ in 0..10 {
        h.advance(i64::from(HEARTBEAT_MS));
        for c in clients.iter_mut() {
            assert_eq!(c.heartbeat(&mut h), ErrorCode::None);
        }
    }
    let g = h.c.consumer_groups().group("g").unwrap();
    assert!(!g.members.contains_key(&dead.member_id));
    settle(&mut h, &mut clients);
    assert_eq!(count(&clients[0].owned) + count(&clients[1].owned), 6);
    union(&[&clients[0].owned, &clients[1].owned]);
    // The fenced member is told so.
    let mut zombie = dead;
    assert_eq!(zombie.heartbeat(&mut h), ErrorCode::UnknownMemberId);
    h.check_replay();
}

#[test]
fn leaving_bumps_the_epoch_and_frees_partitions() {
    let mut h = H::new(topics(&[("t", 4)]));
    let mut clients: Vec<Client> = (0..2)
        .map(|i| Client::new("g", &format!("m{i}"), &["t"]))
        .collect();
    settle(&mut h, &mut clients);
    let epoch = h.c.consumer_groups().group("g").unwrap().epoch;
    assert_eq!(clients[1].leave(&mut h), ErrorCode::None);
    assert_eq!(h.c.consumer_groups().group("g").unwrap().epoch, epoch + 1);
    settle(&mut h, &mut clients[..1]);
    assert_eq!(count(&clients[0].owned), 4);
    assert_eq!(clients[0].leave(&mut h), ErrorCode::None);
    assert_eq!(h.describe("g").group_state.as_str(), "Empty");
    h.check_replay();
}

#[test]
fn request_validation_follows_kafka() {
    let mut h = H::new(topics(&[("t", 1)]));
    let cases: Vec<(Hb, ErrorCode)> = vec![
        (
            {
                let mut x = Hb::join("g", "", &["t"]);
                x.version = 1;
                x
            },
            ErrorCode::InvalidRequest,
        ),
        (
            {
                let mut x = Hb::join("g", "m", &["t"]);
                x.rebalance_timeout_ms = -1;
                x
            },
            ErrorCode::InvalidRequest,
        ),
        (
            {
                let mut x = Hb::join("g", "m", &["t"]);
                x.owned = None;
                x
            },
            ErrorCode::InvalidRequest,
        ),
        (
            {
                let mut x = Hb::join("g", "m", &["t"]);
                x.names = None;
                x
            },
            ErrorCode::InvalidRequest,
        ),
        (
            {
                let mut x = Hb::join("g", "m", &["t"]);
                x.instance = Some(" ".into());
                x
            },
            ErrorCode::InvalidRequest,
        ),
        (
            {
                let mut x = Hb::join("g", "m", &["t"]);
                x.rack = Some("".into());
                x
            },
            ErrorCode::InvalidRequest,
        ),
        (
            {
                let mut x = Hb::join("g", "m", &["t"]);
                x.epoch = -3;
                x
            },
            ErrorCode::InvalidRequest,
        ),
        (
            {
                let mut x = Hb::join("g", "m", &["t"]);
                x.epoch = -2;
                x
            },
            ErrorCode::InvalidRequest,
        ),
        (
            {
                let mut x = Hb::join("g", "m", &["t"]);
                x.assignor = Some("sticky".into());
                x
            },
            ErrorCode::UnsupportedAssignor,
        ),
        (
            {
                let mut x = Hb::join("g", "m", &[]);
                x.regex = Some("(".into());
                x
            },
            ErrorCode::InvalidRegularExpression,
        ),
        (Hb::join("", "m", &["t"]), ErrorCode::InvalidRequest),
        (
            {
                let mut x = Hb::join("g", "m", &["t"]);
                x.epoch = 3;
                x
            },
            ErrorCode::GroupIdNotFound,
        ),
    ];
    for (hb, want) in cases {
        let r = h.hb(&hb);
        assert_eq!(ErrorCode::from_code(r.error_code), want, "{hb:?}");
        assert!(r.error_message.is_some());
    }
    // v0 lets the coordinator pick the member id.
    let mut v0 = Hb::join("g", "", &["t"]);
    v0.version = 0;
    let r = h.hb(&v0);
    assert_eq!(r.error_code, 0);
    let id = r.member_id.unwrap().to_string();
    assert_eq!(id.len(), 36, "{id}");
    // Epochs ahead or behind (without owning a subset) are fenced.
    let mut hb = Hb::join("g", &id, &["t"]);
    hb.version = 0;
    hb.epoch = 5;
    assert_eq!(h.hb(&hb).error_code, ErrorCode::FencedMemberEpoch.code());
    // Unknown members.
    let mut hb = Hb::join("g", "nobody", &["t"]);
    hb.epoch = 1;
    assert_eq!(h.hb(&hb).error_code, ErrorCode::UnknownMemberId.code());
    h.check_replay();
}

#[test]
fn the_previous_epoch_is_accepted_when_the_response_was_lost() {
    let mut h = H::new(topics(&[("t", 2)]));
    let mut a = Client::new("g", "a", &["t"]);
    a.heartbeat(&mut h);
    let mut b = Client::new("g", "b", &["t"]);
    b.heartbeat(&mut h);
    a.heartbeat(&mut h); // revokes
    let old = a.epoch;
    a.heartbeat(&mut h); // moves to epoch 2
    assert!(a.epoch > old);
    // The response carrying the new epoch was "lost": the member retries with the old one
    // and a subset of its partitions.
    let mut hb = Hb::join("g", "a", &["t"]);
    hb.epoch = old;
    hb.owned = Some(owned_list(&a.owned));
    let r = h.hb(&hb);
    assert_eq!(r.error_code, 0);
    assert_eq!(r.member_epoch, a.epoch);
    // Without partitions it is fenced.
    hb.owned = None;
    assert_eq!(h.hb(&hb).error_code, ErrorCode::FencedMemberEpoch.code());
}

#[test]
fn group_max_size_is_enforced() {
    let mut cfg = test_config();
    cfg.consumer.max_size = 2;
    let mut h = H::with_config(cfg, topics(&[("t", 3)]));
    for m in ["a", "b"] {
        assert_eq!(h.hb(&Hb::join("g", m, &["t"])).error_code, 0);
    }
    let r = h.hb(&Hb::join("g", "c", &["t"]));
    assert_eq!(r.error_code, ErrorCode::GroupMaxSizeReached.code());
    // Existing members still heartbeat.
    let mut hb = Hb::join("g", "a", &["t"]);
    hb.epoch = 2;
    hb.owned = Some(Vec::new());
    assert_eq!(h.hb(&hb).error_code, 0);
}

#[test]
fn static_member_keeps_its_partitions_across_a_restart() {
    let mut h = H::new(topics(&[("t", 4)]));
    let mut a = Client::new("g", "a1", &["t"]);
    a.instance = Some("inst-a".into());
    let mut b = Client::new("g", "b1", &["t"]);
    b.instance = Some("inst-b".into());
    let mut clients = vec![a, b];
    settle(&mut h, &mut clients);
    let before = clients[0].owned.clone();
    let epoch = h.c.consumer_groups().group("g").unwrap().epoch;
    // A second process with the same instance id cannot join while the first is in.
    let mut dup = Hb::join("g", "a2", &["t"]);
    dup.instance = Some("inst-a".into());
    assert_eq!(
        h.hb(&dup).error_code,
        ErrorCode::UnreleasedInstanceId.code()
    );
    // The first leaves temporarily (epoch -2): its partitions stay reserved.
    let mut leave = Hb::join("g", "a1", &["t"]);
    leave.epoch = -2;
    leave.instance = Some("inst-a".into());
    let r = h.hb(&leave);
    assert_eq!((r.error_code, r.member_epoch), (0, -2));
    // A wrong member id for the instance is fenced.
    let mut wrong = Hb::join("g", "zz", &["t"]);
    wrong.epoch = 3;
    wrong.instance = Some("inst-a".into());
    assert_eq!(h.hb(&wrong).error_code, ErrorCode::FencedInstanceId.code());
    // The restarted process (new member id) gets the same partitions, no rebalance.
    let r = h.hb(&dup);
    assert_eq!(r.error_code, 0);
    assert_eq!(resp_assignment(&r).unwrap(), before);
    assert_eq!(h.c.consumer_groups().group("g").unwrap().epoch, epoch);
    assert!(!h
        .c
        .consumer_groups()
        .group("g")
        .unwrap()
        .members
        .contains_key("a1"));
    h.check_replay();
}

#[test]
fn static_member_that_left_is_removed_after_its_session() {
    let mut h = H::new(topics(&[("t", 2)]));
    let mut a = Client::new("g", "a", &["t"]);
    a.instance = Some("i".into());
    let mut b = Client::new("g", "b", &["t"]);
    let mut both = vec![a, b.clone()];
    settle(&mut h, &mut both);
    let mut leave = Hb::join("g", "a", &["t"]);
    leave.epoch = -2;
    leave.instance = Some("i".into());
    assert_eq!(h.hb(&leave).error_code, 0);
    b = both.pop().unwrap();
    for _ in 0..12 {
        h.advance(i64::from(HEARTBEAT_MS));
        assert_eq!(b.heartbeat(&mut h), ErrorCode::None);
    }
    settle(&mut h, std::slice::from_mut(&mut b));
    assert_eq!(count(&b.owned), 2);
    h.check_replay();
}

#[test]
fn regex_subscriptions_follow_topic_creation() {
    let mut h = H::new(topics(&[("orders-eu", 2), ("payments", 2)]));
    let mut c = Client::new("g", "m", &[]);
    c.regex = Some("orders-.*".into());
    settle(&mut h, std::slice::from_mut(&mut c));
    assert_eq!(count(&c.owned), 2);
    let epoch = h.c.consumer_groups().group("g").unwrap().epoch;
    // A new matching topic is picked up at the next heartbeat.
    h.set_topics(topics(&[
        ("orders-eu", 2),
        ("payments", 2),
        ("orders-us", 3),
    ]));
    settle(&mut h, std::slice::from_mut(&mut c));
    assert_eq!(count(&c.owned), 5);
    assert!(h.c.consumer_groups().group("g").unwrap().epoch > epoch);
    let d = h.describe("g");
    assert_eq!(
        d.members[0].subscribed_topic_regex.as_deref(),
        Some("orders-.*")
    );
    // As Kafka: internal topics match too.
    h.set_topics(topics(&[("orders-eu", 2), ("__consumer_offsets", 50)]));
    let mut all = Client::new("g2", "x", &[]);
    all.regex = Some("^__consumer_offsets$".into());
    settle(&mut h, std::slice::from_mut(&mut all));
    assert_eq!(count(&all.owned), 50);
    h.check_replay();
}

/// Kafka resolves a group's regexes with the principal of the heartbeat that triggers the
/// resolution and keeps only the topics that principal may DESCRIBE
/// (`filterTopicDescribeAuthorizedTopics`); the member is told nothing, it gets no partitions
/// of the others. Moldau applies an ACL change at the next heartbeat.
#[test]
fn regexes_resolve_only_to_topics_the_principal_may_describe() {
    let mut h = H::new(topics(&[
        ("orders-eu", 2),
        ("orders-us", 3),
        ("payments", 2),
    ]));
    let resolved = |h: &H| -> Vec<String> {
        let g = h.c.consumer_groups().group("g").unwrap();
        g.regexes["orders-.*"].topics.iter().cloned().collect()
    };
    let sees = |topics: &[&str]| Some(topics.iter().map(|t| t.to_string()).collect());
    let mut alice = Client::new("g", "alice", &[]);
    alice.regex = Some("orders-.*".into());
    alice.sees = sees(&["orders-eu", "payments"]);
    settle(&mut h, std::slice::from_mut(&mut alice));
    assert_eq!(resolved(&h), ["orders-eu"]);
    assert!(alice.owned.keys().all(|t| *t == tid("orders-eu")));
    assert_eq!(count(&alice.owned), 2);

    // A grant is applied at the next heartbeat.
    alice.sees = sees(&["orders-eu", "orders-us"]);
    h.c.acls_changed();
    settle(&mut h, std::slice::from_mut(&mut alice));
    assert_eq!(resolved(&h), ["orders-eu", "orders-us"]);
    assert_eq!(count(&alice.owned), 5);

    // So is a revocation: the member gives up what its principal may no longer see.
    alice.sees = sees(&["orders-us"]);
    h.c.acls_changed();
    settle(&mut h, std::slice::from_mut(&mut alice));
    assert_eq!(resolved(&h), ["orders-us"]);
    assert!(alice.owned.keys().all(|t| *t == tid("orders-us")));
    assert_eq!(count(&alice.owned), 3);

    // The resolution is the group's, made by the principal of the heartbeat that resolves
    // it, as in Kafka: bob, who may see every topic, joins with the same regex, which is
    // already resolved and is not resolved again for him...
    let mut bob = Client::new("g", "bob", &[]);
    bob.regex = Some("orders-.*".into());
    let mut both = vec![bob, alice];
    settle(&mut h, &mut both);
    assert_eq!(resolved(&h), ["orders-us"]);
    // ...until the next resolution, which bob's heartbeat triggers.
    h.c.acls_changed();
    settle(&mut h, &mut both);
    assert_eq!(resolved(&h), ["orders-eu", "orders-us"]);
    let owned: Vec<_> = both.iter().map(|c| &c.owned).collect();
    assert_eq!(union(&owned).len(), 5);
    h.check_replay();
}

#[test]
fn subscription_changes_and_new_partitions_rebalance() {
    let mut h = H::new(topics(&[("a", 2), ("b", 2)]));
    let mut c1 = Client::new("g", "c1", &["a"]);
    let mut c2 = Client::new("g", "c2", &["a", "b"]);
    let mut clients = vec![c1.clone(), c2.clone()];
    settle(&mut h, &mut clients);
    let total: usize = clients.iter().map(|c| count(&c.owned)).sum();
    assert_eq!(total, 4);
    // c1 switches to b only.
    clients[0].names = vec!["b".into()];
    settle(&mut h, &mut clients);
    assert!(clients[0].owned.keys().all(|t| *t == tid("b")));
    // a gets more partitions.
    h.set_topics(topics(&[("a", 5), ("b", 2)]));
    settle(&mut h, &mut clients);
    let total: usize = clients.iter().map(|c| count(&c.owned)).sum();
    assert_eq!(total, 7);
    c1 = clients.remove(0);
    c2 = clients.remove(0);
    union(&[&c1.owned, &c2.owned]);
    h.check_replay();
}

#[test]
fn range_assignor_when_members_ask_for_it() {
    let mut h = H::new(topics(&[("t", 4)]));
    for m in ["b", "a"] {
        let mut hb = Hb::join("g", m, &["t"]);
        hb.assignor = Some("range".into());
        h.hb(&hb);
    }
    let d = h.describe("g");
    assert_eq!(d.assignor_name.as_str(), "range");
    let a = d
        .members
        .iter()
        .find(|m| m.member_id.as_str() == "a")
        .unwrap();
    assert_eq!(
        a.target_assignment.topic_partitions[0].partitions,
        vec![0, 1]
    );
}

#[test]
fn offsets_are_fenced_by_member_epoch() {
    let mut h = H::new(topics(&[("t", 2)]));
    let mut c = Client::new("g", "m", &["t"]);
    settle(&mut h, std::slice::from_mut(&mut c));
    let epoch = c.epoch;
    assert_eq!(h.commit("g", "m", epoch, "t", 0, 42), ErrorCode::None);
    assert_eq!(
        h.commit("g", "m", epoch - 1, "t", 0, 43),
        ErrorCode::StaleMemberEpoch
    );
    assert_eq!(
        h.commit("g", "x", epoch, "t", 0, 43),
        ErrorCode::UnknownMemberId
    );
    assert_eq!(
        h.commit_v(8, "g", "m", epoch, "t", 0, 43),
        ErrorCode::UnsupportedVersion
    );
    // Admin-style commits (epoch -1) only when the group is empty.
    assert_eq!(
        h.commit("g", "", -1, "t", 0, 43),
        ErrorCode::UnknownMemberId
    );
    assert_eq!(h.fetch("g", Some("m"), epoch, "t", 0), Ok(42));
    assert_eq!(h.fetch("g", None, -1, "t", 0), Ok(42));
    assert_eq!(
        h.fetch("g", Some("m"), epoch + 1, "t", 0),
        Err(ErrorCode::StaleMemberEpoch)
    );
    assert_eq!(
        h.fetch("g", Some("x"), epoch, "t", 0),
        Err(ErrorCode::UnknownMemberId)
    );
    c.leave(&mut h);
    assert_eq!(h.commit("g", "", -1, "t", 1, 7), ErrorCode::None);
    assert_eq!(h.fetch("g", None, -1, "t", 1), Ok(7));
    h.check_replay();
}

#[test]
fn an_older_member_epoch_commits_the_partitions_held_since_then() {
    // KIP-1251: a member that has not yet heard of its new epoch may still commit, with its
    // old epoch, the partitions it held at that epoch and still holds; nothing else.
    let mut h = H::new(topics(&[("t", 4)]));
    let mut ab = vec![Client::new("g", "a", &["t"])];
    ab[0].heartbeat(&mut h);
    assert_eq!(ab[0].epoch, 2);
    ab.push(Client::new("g", "b", &["t"]));
    settle(&mut h, &mut ab);
    let (mut a, mut b) = (ab[0].clone(), ab[1].clone());
    assert_eq!((a.epoch, b.epoch), (3, 3));
    let kept: Vec<i32> = a.owned.values().flatten().copied().collect();
    let moved: Vec<i32> = b.owned.values().flatten().copied().collect();
    assert_eq!((kept.len(), moved.len()), (2, 2));
    // a held `kept` since epoch 2: its epoch-2 commits of them are accepted.
    assert_eq!(h.commit("g", "a", 2, "t", kept[0], 10), ErrorCode::None);
    assert_eq!(h.commit("g", "a", 3, "t", kept[1], 11), ErrorCode::None);
    // What moved to b is not a's any more, whatever the epoch.
    assert_eq!(
        h.commit("g", "a", 2, "t", moved[0], 12),
        ErrorCode::StaleMemberEpoch
    );
    // b got its partitions at epoch 3: epoch 2 is too old for them, 4 is from the future.
    assert_eq!(h.commit("g", "b", 3, "t", moved[0], 13), ErrorCode::None);
    assert_eq!(
        h.commit("g", "b", 2, "t", moved[0], 14),
        ErrorCode::StaleMemberEpoch
    );
    assert_eq!(
        h.commit("g", "b", 4, "t", moved[0], 14),
        ErrorCode::StaleMemberEpoch
    );
    // b leaves; a takes everything at epoch 4: its old partitions keep epoch 2.
    assert_eq!(b.leave(&mut h), ErrorCode::None);
    settle(&mut h, std::slice::from_mut(&mut a));
    assert_eq!((a.epoch, count(&a.owned)), (4, 4));
    assert_eq!(h.commit("g", "a", 2, "t", kept[0], 20), ErrorCode::None);
    assert_eq!(
        h.commit("g", "a", 3, "t", moved[1], 21),
        ErrorCode::StaleMemberEpoch
    );
    assert_eq!(h.commit("g", "a", 4, "t", moved[1], 22), ErrorCode::None);
    assert_eq!(h.fetch("g", None, -1, "t", kept[0]), Ok(20));
    assert_eq!(h.fetch("g", None, -1, "t", moved[0]), Ok(13));
    assert_eq!(h.fetch("g", None, -1, "t", moved[1]), Ok(22));
    // The epochs survive a reload.
    h.check_replay();
}

#[test]
fn transactional_commits_follow_kafka_validation() {
    let mut h = H::new(topics(&[("t", 2)]));
    let mut c = Client::new("g", "m", &["t"]);
    settle(&mut h, std::slice::from_mut(&mut c));
    let epoch = c.epoch;
    assert_eq!(
        h.txn_commit("g", "m", None, epoch, ("t", 0, 5)),
        ErrorCode::None
    );
    // A producer that sends only the group id (no member, generation -1, no instance) may
    // commit into a group with members, as Kafka allows.
    assert_eq!(
        h.txn_commit("g", "", None, -1, ("t", 1, 6)),
        ErrorCode::None
    );
    // With an instance id it must be a member.
    assert_eq!(
        h.txn_commit("g", "", Some("i"), -1, ("t", 1, 7)),
        ErrorCode::UnknownMemberId
    );
    assert_eq!(
        h.txn_commit("g", "m", None, epoch + 1, ("t", 0, 8)),
        ErrorCode::StaleMemberEpoch
    );
    h.check_replay();
}

#[test]
fn list_and_describe_report_the_group_type() {
    let mut h = H::new(topics(&[("t", 1)]));
    let mut c = Client::new("cg", "m", &["t"]);
    settle(&mut h, std::slice::from_mut(&mut c));
    // A simple (classic) group holding offsets.
    assert_eq!(h.commit("simple", "", -1, "t", 0, 1), ErrorCode::None);
    let all = h.list(5, &[]);
    assert!(
        all.contains(&("cg".into(), "Stable".into(), "consumer".into())),
        "{all:?}"
    );
    assert!(
        all.contains(&("simple".into(), "Empty".into(), "classic".into())),
        "{all:?}"
    );
    assert_eq!(h.list(5, &["consumer"]).len(), 1);
    assert_eq!(h.list(5, &["classic"]).len(), 1);
    assert_eq!(h.list(4, &[]).len(), 2);
    // ConsumerGroupDescribe on a classic group, DescribeGroups on a consumer group: as Kafka.
    let d = h.describe("simple");
    assert_eq!(d.error_code, ErrorCode::GroupIdNotFound.code());
    assert_eq!(
        h.describe("nope").error_code,
        ErrorCode::GroupIdNotFound.code()
    );
    assert_eq!(
        h.c.consumer_groups().group("cg").unwrap().state(),
        ConsumerGroupState::Stable
    );
}

#[test]
fn group_configs_override_session_timeout_and_heartbeat_interval() {
    let mut h = H::new(topics(&[("t", 1)]));
    let overrides = [(
        "g".to_string(),
        [
            (
                "consumer.session.timeout.ms".to_string(),
                "9000".to_string(),
            ),
            (
                "consumer.heartbeat.interval.ms".to_string(),
                "700".to_string(),
            ),
        ]
        .into_iter()
        .collect(),
    )]
    .into_iter()
    .collect();
    h.c.set_group_configs(overrides);
    let r = h.hb(&Hb::join("g", "m", &["t"]));
    assert_eq!(r.heartbeat_interval_ms, 700);
    let other = h.hb(&Hb::join("other", "m", &["t"]));
    assert_eq!(other.heartbeat_interval_ms, HEARTBEAT_MS);
    h.advance(9_001);
    assert!(h.c.consumer_groups().group("g").unwrap().members.is_empty());
    assert_eq!(
        h.c.consumer_groups().group("other").unwrap().members.len(),
        1
    );
}
