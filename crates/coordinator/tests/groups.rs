//! Scenario tests of the group coordinator with a fake clock: membership, rebalances,
//! fencing, static members, offsets, admin APIs, retention and persistence replay.

#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::*;
use coordinator::{find_coordinator, partition_for, CoordinatorNode, GroupCoordinator, GroupState};
use model::ErrorCode;
use protocol::messages::*;
use protocol::{RequestKind, ResponseKind};

const NONE: i16 = 0;

fn code(e: ErrorCode) -> i16 {
    e.code()
}

#[test]
fn partition_for_matches_kafka() {
    // Java: "my-group".hashCode() == 1_507_914_000... checked against Kafka's formula by hand:
    // the partition is abs(hashCode) % n, with Utils.abs(Integer.MIN_VALUE) == 0.
    let h = "my-group"
        .encode_utf16()
        .fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(i32::from(u)));
    assert_eq!(partition_for("my-group", 50), h.abs() % 50);
    assert_eq!(partition_for("", 50), 0);
    // "polygenelubricants".hashCode() == Integer.MIN_VALUE in Java.
    assert_eq!(partition_for("polygenelubricants", 50), 0);
    // Non-ASCII: Java hashes UTF-16 code units.
    let h = "grüppe😀"
        .encode_utf16()
        .fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(i32::from(u)));
    assert_eq!(partition_for("grüppe😀", 7), h.abs() % 7);
}

#[test]
fn single_member_join_with_member_id_round_and_sync() {
    let mut h = H::new();
    let (id, t) = h.join_new("g");
    let r = h
        .join_resp(t)
        .expect("completes at once with no initial delay")
        .clone();
    assert_eq!(r.error_code, NONE);
    assert_eq!(r.generation_id, 1);
    assert_eq!(r.leader.as_str(), id);
    assert_eq!(r.member_id.as_str(), id);
    assert_eq!(r.protocol_name.as_ref().map(|p| p.as_str()), Some("range"));
    assert_eq!(r.members.len(), 1);
    assert!(id.starts_with("client-"));
    let s = h.sync("g", &id, 1, &[(&id, b"assign")]);
    let sr = h.sync_resp(s).unwrap();
    assert_eq!(sr.error_code, NONE);
    assert_eq!(&sr.assignment[..], b"assign");
    let g = h.c.group("g").unwrap();
    assert_eq!(g.state, GroupState::Stable);
    assert_eq!(&g.members[0].assignment[..], b"assign");
    // The assignment was persisted with the SyncGroup.
    assert!(!h.log.is_empty());
}

#[test]
fn old_versions_join_without_member_id_round() {
    let mut h = H::new();
    for v in [0i16, 1, 2, 3] {
        let group = format!("g{v}");
        let t = h.join_with(&group, "", None, v, &[("range", subscription(&["t"]))]);
        let r = h.join_resp(t).unwrap();
        assert_eq!(r.error_code, NONE, "v{v}");
        assert_eq!(r.generation_id, 1);
    }
    // v4+ without an instance id must first get a member id.
    let t = h.join_with("g4", "", None, 4, &[("range", subscription(&["t"]))]);
    let r = h.join_resp(t).unwrap().clone();
    assert_eq!(r.error_code, code(ErrorCode::MemberIdRequired));
    assert_eq!(r.generation_id, -1);
    assert!(!r.member_id.is_empty());
    // The pending member id expires after its session timeout.
    h.advance(i64::from(SESSION_MS));
    let t = h.join_with(
        "g4",
        r.member_id.clone().as_str(),
        None,
        4,
        &[("range", subscription(&["t"]))],
    );
    assert_eq!(
        h.join_resp(t).unwrap().error_code,
        code(ErrorCode::UnknownMemberId)
    );
}

#[test]
fn three_members_join_within_initial_delay_and_sync() {
    let mut cfg = test_config();
    cfg.group_initial_rebalance_delay_ms = 100;
    let mut h = H::with_config(cfg);
    let a = h.join_with("g", "", None, 3, &[("range", subscription(&["t1"]))]);
    h.advance(10);
    let b = h.join_with("g", "", None, 3, &[("range", subscription(&["t2"]))]);
    h.advance(10);
    let c = h.join_with("g", "", None, 3, &[("range", subscription(&["t1", "t3"]))]);
    assert!(!h.answered(a) && !h.answered(b) && !h.answered(c));
    assert_eq!(h.c.next_deadline(), Some(100));
    h.advance(80); // t=100: members kept arriving, so the delay is extended once
    assert!(!h.answered(a));
    assert_eq!(h.c.next_deadline(), Some(200));
    h.advance(100);
    let (ra, rb, rc) = (
        h.join_resp(a).unwrap().clone(),
        h.join_resp(b).unwrap().clone(),
        h.join_resp(c).unwrap().clone(),
    );
    for r in [&ra, &rb, &rc] {
        assert_eq!(r.error_code, NONE);
        assert_eq!(r.generation_id, 1);
        assert_eq!(r.leader, ra.member_id, "the first member leads");
    }
    assert_eq!(ra.members.len(), 3, "the leader sees every member");
    assert!(rb.members.is_empty() && rc.members.is_empty());
    let (ida, idb, idc) = (
        ra.member_id.to_string(),
        rb.member_id.to_string(),
        rc.member_id.to_string(),
    );
    // Followers wait for the leader.
    let sb_ = h.sync("g", &idb, 1, &[]);
    let sc = h.sync("g", &idc, 1, &[]);
    assert!(!h.answered(sb_) && !h.answered(sc));
    let sa = h.sync("g", &ida, 1, &[(&ida, b"A"), (&idb, b"B")]);
    assert_eq!(&h.sync_resp(sa).unwrap().assignment[..], b"A");
    assert_eq!(&h.sync_resp(sb_).unwrap().assignment[..], b"B");
    // A member the leader left out gets an empty assignment, not an error.
    let rc = h.sync_resp(sc).unwrap();
    assert_eq!(rc.error_code, NONE);
    assert!(rc.assignment.is_empty());
    let g = h.c.group("g").unwrap();
    assert_eq!(g.state, GroupState::Stable);
    // subscribed topics of a consumer group are known (used by OffsetDelete).
    let r = h.admin(0, |c, ctx, now| {
        let mut req = OffsetDeleteRequest::default();
        req.group_id = GroupId(sb("g"));
        let mut t = offset_delete_request::OffsetDeleteRequestTopic::default();
        t.name = TopicName(sb("t3"));
        t.partitions
            .push(offset_delete_request::OffsetDeleteRequestPartition::default());
        req.topics.push(t);
        c.offset_delete(ctx, req, now)
    });
    match r {
        ResponseKind::OffsetDelete(r) => assert_eq!(
            r.topics[0].partitions[0].error_code,
            code(ErrorCode::GroupSubscribedToTopic)
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn protocol_selection_across_members() {
    let mut cfg = test_config();
    cfg.group_initial_rebalance_delay_ms = 50;
    let mut h = H::with_config(cfg);
    let m = Bytes::from_static(b"m");
    // Candidates are the protocols everyone supports; among them the most preferred wins.
    let a = h.join_with(
        "g",
        "",
        None,
        3,
        &[("range", m.clone()), ("roundrobin", m.clone())],
    );
    let b = h.join_with(
        "g",
        "",
        None,
        3,
        &[("roundrobin", m.clone()), ("range", m.clone())],
    );
    let c = h.join_with(
        "g",
        "",
        None,
        3,
        &[("roundrobin", m.clone()), ("sticky", m.clone())],
    );
    h.advance(50);
    h.advance(50);
    for t in [a, b, c] {
        let r = h.join_resp(t).unwrap();
        assert_eq!(r.protocol_name.as_ref().unwrap().as_str(), "roundrobin");
    }
    // A protocol nobody in the group supports is rejected, as is another protocol type.
    let d = h.join_with("g", "", None, 3, &[("cooperative-sticky", m.clone())]);
    assert_eq!(
        h.join_resp(d).unwrap().error_code,
        code(ErrorCode::InconsistentGroupProtocol)
    );

    let mut h = H::with_config({
        let mut c = test_config();
        c.group_initial_rebalance_delay_ms = 50;
        c
    });
    let a = h.join_with(
        "g",
        "",
        None,
        3,
        &[("range", m.clone()), ("roundrobin", m.clone())],
    );
    let _ = h.join_with(
        "g",
        "",
        None,
        3,
        &[("roundrobin", m.clone()), ("range", m.clone())],
    );
    let _ = h.join_with(
        "g",
        "",
        None,
        3,
        &[("range", m.clone()), ("roundrobin", m.clone())],
    );
    h.advance(50);
    h.advance(50);
    assert_eq!(
        h.join_resp(a)
            .unwrap()
            .protocol_name
            .as_ref()
            .unwrap()
            .as_str(),
        "range"
    );
}

#[test]
fn join_validation_errors() {
    let mut h = H::new();
    let t = h.join("", "", None);
    assert_eq!(
        h.join_resp(t).unwrap().error_code,
        code(ErrorCode::InvalidGroupId)
    );
    let t = h.join("nope", "someone", None);
    assert_eq!(
        h.join_resp(t).unwrap().error_code,
        code(ErrorCode::UnknownMemberId)
    );
    let mut req_h = H::new();
    let t = req_h.join_with("g", "", None, 7, &[("range", subscription(&["t"]))]);
    let r = req_h.join_resp(t).unwrap();
    assert_eq!(r.error_code, code(ErrorCode::MemberIdRequired));
    // v7: protocol name null on errors; v5: "".
    let t = req_h.join_with("", "", None, 7, &[]);
    assert_eq!(req_h.join_resp(t).unwrap().protocol_name, None);
    let t = req_h.join_with("", "", None, 5, &[]);
    assert_eq!(
        req_h
            .join_resp(t)
            .unwrap()
            .protocol_name
            .as_ref()
            .map(|s| s.as_str()),
        Some("")
    );
    // An empty group needs a protocol type and at least one protocol.
    let t = h.join_with("g", "", None, 3, &[]);
    assert_eq!(
        h.join_resp(t).unwrap().error_code,
        code(ErrorCode::InconsistentGroupProtocol)
    );
    // Session timeout bounds.
    let mut cfg = test_config();
    cfg.group_min_session_timeout_ms = SESSION_MS + 1;
    let mut h = H::with_config(cfg);
    let t = h.join("g", "", None);
    assert_eq!(
        h.join_resp(t).unwrap().error_code,
        code(ErrorCode::InvalidSessionTimeout)
    );
}

#[test]
fn heartbeats_and_generation_fencing() {
    let mut h = H::new();
    let (ids, generation, leader) = h.stable_group("g", 2);
    let follower = ids.iter().find(|m| **m != leader).unwrap().clone();
    assert_eq!(h.heartbeat("g", &follower, None, generation), NONE);
    assert_eq!(
        h.heartbeat("g", &follower, None, generation - 1),
        code(ErrorCode::IllegalGeneration)
    );
    assert_eq!(
        h.heartbeat("g", "ghost", None, generation),
        code(ErrorCode::UnknownMemberId)
    );
    assert_eq!(
        h.heartbeat("other", &follower, None, generation),
        code(ErrorCode::UnknownMemberId)
    );
    assert_eq!(
        h.heartbeat("", &follower, None, generation),
        code(ErrorCode::InvalidGroupId)
    );
    // Commits of an old generation are fenced.
    assert_eq!(
        h.commit("g", &follower, generation - 1, &[("t", 0, 1)]),
        vec![code(ErrorCode::IllegalGeneration)]
    );
    assert_eq!(
        h.commit("g", "ghost", generation, &[("t", 0, 1)]),
        vec![code(ErrorCode::UnknownMemberId)]
    );
    // The leader rejoining starts a rebalance: heartbeats say so, syncs are refused.
    let lt = h.join("g", &leader, None);
    assert!(!h.answered(lt));
    assert_eq!(
        h.c.group("g").unwrap().state,
        GroupState::PreparingRebalance
    );
    assert_eq!(
        h.heartbeat("g", &follower, None, generation),
        code(ErrorCode::RebalanceInProgress)
    );
    let s = h.sync("g", &follower, generation, &[]);
    assert_eq!(
        h.sync_resp(s).unwrap().error_code,
        code(ErrorCode::RebalanceInProgress)
    );
    // Commits are still accepted during PreparingRebalance.
    assert_eq!(
        h.commit("g", &follower, generation, &[("t", 0, 5)]),
        vec![NONE]
    );
    let ft = h.join("g", &follower, None);
    let r = h.join_resp(ft).unwrap().clone();
    assert_eq!(r.generation_id, generation + 1);
    assert!(h.answered(lt));
    // CompletingRebalance: commits get REBALANCE_IN_PROGRESS, syncs of the old generation
    // ILLEGAL_GENERATION.
    assert_eq!(
        h.commit("g", &follower, generation + 1, &[("t", 0, 6)]),
        vec![code(ErrorCode::RebalanceInProgress)]
    );
    let s = h.sync("g", &follower, generation, &[]);
    assert_eq!(
        h.sync_resp(s).unwrap().error_code,
        code(ErrorCode::IllegalGeneration)
    );
    let s = h.sync("g", "ghost", generation + 1, &[]);
    assert_eq!(
        h.sync_resp(s).unwrap().error_code,
        code(ErrorCode::UnknownMemberId)
    );
    // v5 sync with the wrong protocol name.
    let t = h.admin(5, |c, ctx, now| {
        let mut req = SyncGroupRequest::default();
        req.group_id = GroupId(sb("g"));
        req.generation_id = generation + 1;
        req.member_id = sb(&follower);
        req.protocol_type = Some(sb("consumer"));
        req.protocol_name = Some(sb("roundrobin"));
        c.sync_group(ctx, req, now)
    });
    match t {
        ResponseKind::SyncGroup(r) => {
            assert_eq!(r.error_code, code(ErrorCode::InconsistentGroupProtocol))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn follower_rejoin_in_stable_returns_current_generation() {
    let mut h = H::new();
    let (ids, generation, leader) = h.stable_group("g", 2);
    let follower = ids.iter().find(|m| **m != leader).unwrap().clone();
    let t = h.join("g", &follower, None);
    let r = h.join_resp(t).unwrap();
    assert_eq!(r.generation_id, generation);
    assert!(r.members.is_empty());
    assert_eq!(h.c.group("g").unwrap().state, GroupState::Stable);
    // Changed metadata forces a rebalance.
    let t = h.join_with("g", &follower, None, 5, &[("range", subscription(&["t9"]))]);
    assert!(!h.answered(t));
    assert_eq!(
        h.c.group("g").unwrap().state,
        GroupState::PreparingRebalance
    );
}

#[test]
fn batched_leave_by_member_and_instance_id() {
    let mut h = H::new();
    let a = h.join("g", "", Some("inst-a"));
    let ida = h.join_resp(a).unwrap().member_id.to_string();
    let (idb, tb) = h.join_new("g");
    let ra = h.join("g", &ida, Some("inst-a"));
    assert!(h.answered(tb) && h.answered(ra));
    let generation = h.join_resp(tb).unwrap().generation_id;
    let r = h.leave(
        "g",
        &[
            (&idb, None),
            ("", Some("inst-a")),
            ("ghost", None),
            ("", Some("nope")),
        ],
        3,
    );
    assert_eq!(r.error_code, NONE);
    let errors: Vec<i16> = r.members.iter().map(|m| m.error_code).collect();
    assert_eq!(
        errors,
        vec![
            NONE,
            NONE,
            code(ErrorCode::UnknownMemberId),
            code(ErrorCode::UnknownMemberId)
        ]
    );
    assert_eq!(
        r.members[1].group_instance_id.as_ref().map(|s| s.as_str()),
        Some("inst-a")
    );
    let g = h.c.group("g").unwrap();
    assert_eq!(g.state, GroupState::Empty);
    assert!(g.members.is_empty());
    assert_eq!(g.generation, generation + 1);
    // v0-v2: single member, error at top level.
    let r = h.leave("g", &[("ghost", None)], 1);
    assert_eq!(r.error_code, code(ErrorCode::UnknownMemberId));
    let r = h.leave("unknown-group", &[("x", None)], 0);
    assert_eq!(r.error_code, code(ErrorCode::UnknownMemberId));
}

#[test]
fn session_timeout_expiry_triggers_rebalance() {
    let mut h = H::new();
    let (ids, generation, leader) = h.stable_group("g", 2);
    let follower = ids.iter().find(|m| **m != leader).unwrap().clone();
    h.advance(i64::from(SESSION_MS) / 2);
    assert_eq!(h.heartbeat("g", &leader, None, generation), NONE);
    h.advance(i64::from(SESSION_MS) / 2 - 1);
    assert_eq!(h.c.group("g").unwrap().members.len(), 2);
    h.advance(1); // follower's session is over
    let g = h.c.group("g").unwrap();
    assert_eq!(g.members.len(), 1);
    assert_eq!(g.state, GroupState::PreparingRebalance);
    assert_eq!(
        h.heartbeat("g", &leader, None, generation),
        code(ErrorCode::RebalanceInProgress)
    );
    let t = h.join("g", &leader, None);
    let r = h
        .join_resp(t)
        .expect("the only member rejoined: completes at once");
    assert_eq!(r.generation_id, generation + 1);
    assert_eq!(r.members.len(), 1);
    assert_eq!(
        h.heartbeat("g", &follower, None, generation),
        code(ErrorCode::UnknownMemberId)
    );
}

#[test]
fn rebalance_timeout_kicks_members_that_do_not_rejoin() {
    let mut h = H::new();
    let (ids, generation, leader) = h.stable_group("g", 3);
    let lt = h.join("g", &leader, None);
    let others: Vec<String> = ids.iter().filter(|m| **m != leader).cloned().collect();
    let t1 = h.join("g", &others[0], None);
    // others[1] keeps heartbeating but never rejoins.
    let mut elapsed = 0;
    while elapsed < i64::from(REBALANCE_MS) - 1000 {
        h.advance(1000);
        elapsed += 1000;
        assert_eq!(
            h.heartbeat("g", &others[1], None, generation),
            code(ErrorCode::RebalanceInProgress)
        );
    }
    assert!(!h.answered(lt));
    h.advance(1000);
    let r = h.join_resp(lt).unwrap();
    assert_eq!(r.generation_id, generation + 1);
    assert_eq!(r.members.len(), 2);
    assert!(h.answered(t1));
    assert_eq!(
        h.heartbeat("g", &others[1], None, generation),
        code(ErrorCode::UnknownMemberId)
    );
}

#[test]
fn followers_that_never_sync_are_removed() {
    let mut h = H::new();
    let (ids, _, leader) = h.stable_group("g", 2);
    let follower = ids.iter().find(|m| **m != leader).unwrap().clone();
    let lt = h.join("g", &leader, None);
    let ft = h.join("g", &follower, None);
    let generation = h.join_resp(lt).unwrap().generation_id;
    assert!(h.answered(ft));
    let s = h.sync("g", &leader, generation, &[(&leader, b"x")]);
    assert!(h.answered(s));
    assert_eq!(h.heartbeat("g", &follower, None, generation), NONE);
    for _ in 0..5 {
        h.advance(i64::from(REBALANCE_MS) / 6);
        assert_eq!(h.heartbeat("g", &leader, None, generation), NONE);
        // The follower heartbeats (so its session lives) but never sends SyncGroup.
        assert_eq!(h.heartbeat("g", &follower, None, generation), NONE);
    }
    h.advance(i64::from(REBALANCE_MS) / 6);
    let g = h.c.group("g").unwrap();
    assert_eq!(g.members.len(), 1, "the follower never synced");
    assert_eq!(g.state, GroupState::PreparingRebalance);
}

#[test]
fn static_member_restart_keeps_group_stable_and_fences_old_instance() {
    let mut h = H::new();
    let a = h.join("g", "", Some("ia"));
    let old_a = h.join_resp(a).unwrap().member_id.to_string();
    let b = h.join("g", "", Some("ib"));
    assert!(!h.answered(b));
    let a2 = h.join("g", &old_a, Some("ia"));
    let generation = h.join_resp(a2).unwrap().generation_id;
    let old_b = h.join_resp(b).unwrap().member_id.to_string();
    let leader = h.join_resp(a2).unwrap().leader.to_string();
    assert_eq!(leader, old_a);
    let sb_ = h.sync_with("g", &old_b, Some("ib"), generation, 3, &[]);
    let sa = h.sync_with(
        "g",
        &old_a,
        Some("ia"),
        generation,
        3,
        &[(&old_a, b"A"), (&old_b, b"B")],
    );
    assert!(h.answered(sa) && h.answered(sb_));
    let records_before = h.log.len();

    // "ib" restarts: rejoins without member id, gets a new one, no rebalance.
    let b2 = h.join("g", "", Some("ib"));
    let r = h.join_resp(b2).expect("answered at once").clone();
    assert_eq!(r.error_code, NONE);
    assert_eq!(r.generation_id, generation);
    assert_ne!(r.member_id.as_str(), old_b);
    assert!(r.member_id.starts_with("ib-"));
    assert_eq!(r.leader.as_str(), old_a);
    let new_b = r.member_id.to_string();
    assert_eq!(h.c.group("g").unwrap().state, GroupState::Stable);
    assert!(
        h.log.len() > records_before,
        "the new member id is persisted"
    );
    // The restarted instance gets its old assignment.
    let s = h.sync_with("g", &new_b, Some("ib"), generation, 3, &[]);
    assert_eq!(&h.sync_resp(s).unwrap().assignment[..], b"B");
    // The old incarnation is fenced everywhere.
    assert_eq!(
        h.heartbeat("g", &old_b, Some("ib"), generation),
        code(ErrorCode::FencedInstanceId)
    );
    let s = h.sync_with("g", &old_b, Some("ib"), generation, 3, &[]);
    assert_eq!(
        h.sync_resp(s).unwrap().error_code,
        code(ErrorCode::FencedInstanceId)
    );
    let j = h.join("g", &old_b, Some("ib"));
    assert_eq!(
        h.join_resp(j).unwrap().error_code,
        code(ErrorCode::FencedInstanceId)
    );
    let r = h.commit_with("g", &old_b, generation, 8, &[("t", 0, 1, "")]);
    // (v8 carries group_instance_id only when set; without it the member id is unknown)
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        code(ErrorCode::UnknownMemberId)
    );
    assert_eq!(h.heartbeat("g", &new_b, Some("ib"), generation), NONE);
    // Unknown instance id with a member id.
    assert_eq!(
        h.heartbeat("g", &new_b, Some("nope"), generation),
        code(ErrorCode::UnknownMemberId)
    );

    // The static leader restarting: v9 learns it leads but skips the assignment.
    let a3 = h.join_with("g", "", Some("ia"), 9, &[("range", subscription(&["t1"]))]);
    let r = h.join_resp(a3).unwrap().clone();
    assert_eq!(r.error_code, NONE);
    assert!(r.skip_assignment);
    assert_eq!(r.leader, r.member_id);
    assert_eq!(r.members.len(), 2);
    assert_eq!(h.c.group("g").unwrap().state, GroupState::Stable);
    assert_eq!(h.c.group("g").unwrap().generation, generation);
}

#[test]
fn static_member_rejoining_during_rebalance_replaces_the_old_one() {
    let mut h = H::new();
    let a = h.join("g", "", Some("ia"));
    let ida = h.join_resp(a).unwrap().member_id.to_string();
    let (idb, tb) = h.join_new("g");
    let ta = h.join("g", &ida, Some("ia"));
    assert!(h.answered(ta) && h.answered(tb));
    let generation = h.join_resp(ta).unwrap().generation_id;
    let s1 = h.sync("g", &idb, generation, &[]);
    let s2 = h.sync_with("g", &ida, Some("ia"), generation, 3, &[]);
    assert!(h.answered(s1) && h.answered(s2));
    // A rebalance starts; "ia" rejoins with its id, then a second process with the same
    // instance id (unknown member id) takes over: the first one's join is fenced.
    let t1 = h.join("g", &ida, Some("ia"));
    assert!(!h.answered(t1));
    let t2 = h.join("g", "", Some("ia"));
    assert_eq!(
        h.join_resp(t1).unwrap().error_code,
        code(ErrorCode::FencedInstanceId)
    );
    assert!(!h.answered(t2));
    let tb2 = h.join("g", &idb, None);
    assert_eq!(h.join_resp(t2).unwrap().error_code, NONE);
    assert!(h.answered(tb2));
}

#[test]
fn concurrent_rebalances_of_several_groups() {
    let mut h = H::new();
    let (g1, gen1, l1) = h.stable_group("g1", 2);
    let (g2, gen2, l2) = h.stable_group("g2", 3);
    // Both rebalance at once, interleaved.
    let a = h.join("g1", &l1, None);
    let b = h.join("g2", &l2, None);
    let others1: Vec<_> = g1.iter().filter(|m| **m != l1).cloned().collect();
    let others2: Vec<_> = g2.iter().filter(|m| **m != l2).cloned().collect();
    let c = h.join("g2", &others2[0], None);
    assert!(!h.answered(a) && !h.answered(b) && !h.answered(c));
    let d = h.join("g1", &others1[0], None);
    assert_eq!(h.join_resp(a).unwrap().generation_id, gen1 + 1);
    assert!(h.answered(d));
    assert!(!h.answered(b));
    let e = h.join("g2", &others2[1], None);
    assert_eq!(h.join_resp(b).unwrap().generation_id, gen2 + 1);
    assert!(h.answered(c) && h.answered(e));
    assert_eq!(h.join_resp(e).unwrap().leader.as_str(), l2);
}

#[test]
fn offset_commit_and_fetch_across_versions() {
    let mut h = H::new();
    let (ids, generation, _) = h.stable_group("g", 1);
    let m = &ids[0];
    let r = h.commit_with(
        "g",
        m,
        generation,
        8,
        &[("t", 0, 10, "meta"), ("t", 1, 11, ""), ("u", 0, 7, "")],
    );
    assert!(r
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .all(|p| p.error_code == NONE));
    // v1: per partition, unknown offsets are -1.
    let f = h.fetch("g", 1, Some(&[("t", &[0, 2])]));
    assert_eq!(f.topics[0].partitions[0].committed_offset, 10);
    assert_eq!(
        f.topics[0].partitions[0]
            .metadata
            .as_ref()
            .unwrap()
            .as_str(),
        "meta"
    );
    assert_eq!(f.topics[0].partitions[1].committed_offset, -1);
    // v5+: leader epoch; v2+ all topics with null.
    let f = h.fetch("g", 5, None);
    assert_eq!(f.topics.len(), 2);
    assert_eq!(f.topics[0].partitions.len(), 2);
    assert_eq!(f.topics[0].partitions[0].committed_leader_epoch, 3);
    // v8 multi-group, one unknown group.
    h.commit("h", "", -1, &[("x", 0, 1)]);
    let f = h.fetch_groups(&[("g", Some(&[("u", &[0])])), ("h", None), ("missing", None)]);
    assert_eq!(f.groups.len(), 3);
    assert_eq!(f.groups[0].topics[0].partitions[0].committed_offset, 7);
    assert_eq!(f.groups[1].topics[0].name.0.as_str(), "x");
    assert!(f.groups[2].topics.is_empty());
    assert_eq!(f.groups[2].error_code, NONE);
    // Too much metadata.
    let long = "x".repeat(5000);
    let r = h.commit_with("g", m, generation, 8, &[("t", 0, 99, &long)]);
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        code(ErrorCode::OffsetMetadataTooLarge)
    );
    // Old versions encode.
    for v in [2i16, 3, 5, 6, 7, 9] {
        let r = h.commit_with("g", m, generation, v, &[("t", 0, 12, "")]);
        assert_eq!(r.topics[0].partitions[0].error_code, NONE, "v{v}");
    }
    for v in [2i16, 3, 4, 6, 7] {
        let f = h.fetch("g", v, Some(&[("t", &[0])]));
        assert_eq!(f.topics[0].partitions[0].committed_offset, 12, "v{v}");
    }
}

#[test]
fn simple_consumers_commit_without_membership() {
    let mut h = H::new();
    assert_eq!(h.commit("simple", "", -1, &[("t", 0, 42)]), vec![NONE]);
    let g = h.c.group("simple").unwrap();
    assert_eq!(g.state, GroupState::Empty);
    assert_eq!(g.offsets[0].offset, 42);
    // Unknown group with a generation: an old member.
    assert_eq!(
        h.commit("fresh", "m", 3, &[("t", 0, 1)]),
        vec![code(ErrorCode::IllegalGeneration)]
    );
    // A simple commit into a group with members is refused.
    let (members, generation, _) = h.stable_group("busy", 1);
    assert_eq!(
        h.commit("busy", "", -1, &[("t", 0, 1)]),
        vec![code(ErrorCode::UnknownMemberId)]
    );
    // ... whatever member id it names: an unknown one, or a member's own without its
    // generation.
    assert_eq!(
        h.commit("busy", "stranger", -1, &[("t", 0, 1)]),
        vec![code(ErrorCode::UnknownMemberId)]
    );
    assert_eq!(
        h.commit("busy", &members[0], -1, &[("t", 0, 1)]),
        vec![code(ErrorCode::IllegalGeneration)]
    );
    assert_eq!(
        h.commit("busy", &members[0], generation, &[("t", 0, 1)]),
        vec![NONE]
    );
    // Generation -1 with a member id (kafka-python's simple consumer, a member that lost
    // its group) to a group that does not exist, or is empty, is stored as Kafka 4.x does,
    // at every version.
    for v in [2i16, 5, 8, 9] {
        let group = format!("named-{v}");
        let r = h.commit_with(&group, "left-over-member", -1, v, &[("t", 0, 7, "")]);
        assert_eq!(r.topics[0].partitions[0].error_code, NONE, "v{v}");
        let r = h.commit_with(&group, "another", -1, v, &[("t", 0, 8, "")]);
        assert_eq!(r.topics[0].partitions[0].error_code, NONE, "v{v}");
        assert_eq!(h.c.group(&group).unwrap().offsets[0].offset, 8, "v{v}");
    }
    // A generation to a group that does not exist: v9 names the missing group.
    let r = h.commit_with("fresh-9", "m", 3, 9, &[("t", 0, 1, "")]);
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        code(ErrorCode::GroupIdNotFound)
    );
    // Empty group id is allowed for offsets (old clients).
    assert_eq!(h.commit("", "", -1, &[("t", 0, 5)]), vec![NONE]);
}

#[test]
fn delete_groups_only_when_empty() {
    let mut h = H::new();
    h.stable_group("busy", 1);
    h.commit("idle", "", -1, &[("t", 0, 1), ("t", 1, 2)]);
    let before = h.log.len();
    let r = h.admin(2, |c, ctx, now| {
        let mut req = DeleteGroupsRequest::default();
        req.groups_names = vec![
            GroupId(sb("busy")),
            GroupId(sb("idle")),
            GroupId(sb("nope")),
        ];
        c.delete_groups(ctx, req, now)
    });
    let ResponseKind::DeleteGroups(r) = r else {
        panic!()
    };
    let errors: Vec<i16> = r.results.iter().map(|r| r.error_code).collect();
    assert_eq!(
        errors,
        vec![
            code(ErrorCode::NonEmptyGroup),
            NONE,
            code(ErrorCode::GroupIdNotFound)
        ]
    );
    assert!(h.c.group("idle").is_none());
    let tombstones: Vec<_> = h.log[before..]
        .iter()
        .filter(|r| r.value.is_none())
        .collect();
    assert_eq!(tombstones.len(), 3, "two offsets and the group");
}

#[test]
fn offset_delete() {
    let mut h = H::new();
    h.commit("g", "", -1, &[("t", 0, 1), ("t", 1, 2), ("u", 0, 3)]);
    let del = |h: &mut H, group: &str, topic: &str, parts: &[i32]| {
        let r = h.admin(0, |c, ctx, now| {
            let mut req = OffsetDeleteRequest::default();
            req.group_id = GroupId(sb(group));
            let mut t = offset_delete_request::OffsetDeleteRequestTopic::default();
            t.name = TopicName(sb(topic));
            for p in parts {
                let mut x = offset_delete_request::OffsetDeleteRequestPartition::default();
                x.partition_index = *p;
                t.partitions.push(x);
            }
            req.topics.push(t);
            c.offset_delete(ctx, req, now)
        });
        match r {
            ResponseKind::OffsetDelete(r) => r,
            other => panic!("{other:?}"),
        }
    };
    let r = del(&mut h, "g", "t", &[0]);
    assert_eq!(r.error_code, NONE);
    assert_eq!(r.topics[0].partitions[0].error_code, NONE);
    assert_eq!(h.c.group("g").unwrap().offsets.len(), 2);
    assert_eq!(h.log.last().unwrap().value, None);
    let r = del(&mut h, "nope", "t", &[0]);
    assert_eq!(r.error_code, code(ErrorCode::GroupIdNotFound));
    // A stable consumer group: subscribed topics are protected.
    let (ids, generation, _) = h.stable_group("c", 1);
    h.commit("c", &ids[0], generation, &[("t1", 0, 5), ("other", 0, 6)]);
    let r = del(&mut h, "c", "t1", &[0]);
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        code(ErrorCode::GroupSubscribedToTopic)
    );
    let r = del(&mut h, "c", "other", &[0]);
    assert_eq!(r.topics[0].partitions[0].error_code, NONE);
}

#[test]
fn offsets_expire_after_retention_and_empty_groups_go_away() {
    let mut cfg = test_config();
    cfg.offsets_retention_ms = 60_000;
    cfg.offsets_retention_check_interval_ms = 1_000;
    let mut h = H::with_config(cfg);
    h.commit("simple", "", -1, &[("t", 0, 1)]);
    let (ids, generation, _) = h.stable_group("consumers", 1);
    h.commit("consumers", &ids[0], generation, &[("t1", 0, 1)]);
    h.advance(30_000);
    // The consumer leaves: its group's offsets expire 60s after it became empty.
    h.leave("consumers", &[(&ids[0], None)], 3);
    assert_eq!(h.c.group("consumers").unwrap().state, GroupState::Empty);
    h.advance(30_000);
    assert!(
        h.c.group("simple").is_none(),
        "simple consumer offsets expired after 60s"
    );
    let g = h.c.group("consumers").unwrap();
    assert_eq!(g.offsets.len(), 1);
    let before = h.log.len();
    h.advance(30_000);
    assert!(h.c.group("consumers").is_none());
    let tomb: Vec<_> = h.log[before..]
        .iter()
        .filter(|r| r.value.is_none())
        .collect();
    assert_eq!(tomb.len(), 2, "offset and group tombstones");
    // OffsetCommit v2 with an explicit retention time.
    let r = {
        h.admin(2, |c, ctx, now| {
            let mut req = OffsetCommitRequest::default();
            req.group_id = GroupId(sb("old"));
            req.generation_id_or_member_epoch = -1;
            req.retention_time_ms = 5_000;
            let mut tp = offset_commit_request::OffsetCommitRequestTopic::default();
            tp.name = TopicName(sb("t"));
            let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
            p.committed_offset = 3;
            tp.partitions.push(p);
            req.topics.push(tp);
            c.offset_commit(ctx, req, now)
        })
    };
    assert!(matches!(r, ResponseKind::OffsetCommit(_)));
    assert_eq!(
        h.c.group("old").unwrap().offsets[0].expire_timestamp_ms,
        Some(h.now + 5_000)
    );
    h.advance(6_000);
    assert!(h.c.group("old").is_none());
}

#[test]
fn persistence_round_trip() {
    let mut h = H::new();
    h.stable_group("a", 3);
    let (ids, generation, _) = h.stable_group("b", 2);
    h.commit("b", &ids[0], generation, &[("t", 0, 10), ("t", 1, 20)]);
    h.commit("simple", "", -1, &[("x", 3, 33)]);
    h.commit("gone", "", -1, &[("x", 0, 1)]);
    let _ = h.admin(2, |c, ctx, now| {
        let mut req = DeleteGroupsRequest::default();
        req.groups_names = vec![GroupId(sb("gone"))];
        c.delete_groups(ctx, req, now)
    });
    // A static group that is Stable, then its member restarts (new member id, persisted).
    let s = h.join("s", "", Some("inst"));
    let r = h.join_resp(s).unwrap().clone();
    let sy = h.sync_with(
        "s",
        &r.member_id,
        Some("inst"),
        r.generation_id,
        3,
        &[(&r.member_id, b"S")],
    );
    assert!(h.answered(sy));
    let s2 = h.join("s", "", Some("inst"));
    assert_ne!(h.join_resp(s2).unwrap().member_id, r.member_id);
    // A group whose only member left: Empty, generation bumped.
    let (cids, _, _) = h.stable_group("c", 1);
    h.leave("c", &[(&cids[0], None)], 3);
    h.commit("b", &ids[1], generation, &[("t", 0, 11)]);

    let mut fresh = GroupCoordinator::new(test_config());
    for r in &h.log {
        assert_eq!(r.partition, fresh.partition_for(&group_of(r)));
        fresh.replay(&r.key, r.value.as_deref()).unwrap();
    }
    for p in 0..PARTITIONS {
        fresh.load_partition(p, h.now);
    }
    let expected: Vec<_> = h
        .c
        .snapshot()
        .into_iter()
        .filter(|g| matches!(g.state, GroupState::Stable | GroupState::Empty))
        .filter(|g| !(g.state == GroupState::Empty && g.generation == 0 && g.offsets.is_empty()))
        .collect();
    let got: Vec<_> = fresh
        .snapshot()
        .into_iter()
        .filter(|g| expected.iter().any(|e| e.group_id == g.group_id))
        .collect();
    assert_eq!(got, expected);
    assert!(fresh.group("gone").is_none());
    assert!(got
        .iter()
        .any(|g| g.group_id == "c" && g.state == GroupState::Empty));
    // A replayed group keeps working: members heartbeat with their old ids.
    let mut h2 = H::new();
    h2.c = fresh;
    h2.now = h.now;
    assert_eq!(h2.heartbeat("b", &ids[0], None, generation), NONE);
}

fn group_of(r: &coordinator::Record) -> String {
    match coordinator::records::decode_key(&r.key).unwrap() {
        coordinator::records::RecordKey::Offset { group, .. } => group,
        coordinator::records::RecordKey::Group { group } => group,
        other => panic!("{other:?}"),
    }
}

#[test]
fn list_and_describe_groups() {
    let mut h = H::new();
    let (ids, _, leader) = h.stable_group("stable", 2);
    h.commit("simple", "", -1, &[("t", 0, 1)]);
    let list = |h: &mut H, v: i16, states: &[&str], types: &[&str]| {
        let r = h.admin(v, |c, ctx, now| {
            let mut req = ListGroupsRequest::default();
            req.states_filter = states.iter().map(|s| sb(s)).collect();
            req.types_filter = types.iter().map(|s| sb(s)).collect();
            c.list_groups(ctx, req, now)
        });
        let ResponseKind::ListGroups(r) = r else {
            panic!()
        };
        r.groups
            .iter()
            .map(|g| {
                (
                    g.group_id.0.to_string(),
                    g.protocol_type.to_string(),
                    g.group_state.to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        list(&mut h, 0, &[], &[]),
        vec![
            ("simple".to_string(), String::new(), String::new()),
            ("stable".to_string(), "consumer".to_string(), String::new())
        ]
    );
    assert_eq!(
        list(&mut h, 4, &["Stable"], &[]),
        vec![(
            "stable".to_string(),
            "consumer".to_string(),
            "Stable".to_string()
        )]
    );
    assert_eq!(list(&mut h, 5, &[], &["consumer"]), vec![]);
    assert_eq!(list(&mut h, 5, &[], &["Classic"]).len(), 2);

    let describe = |h: &mut H, v: i16, groups: &[&str]| {
        let r = h.admin(v, |c, ctx, now| {
            let mut req = DescribeGroupsRequest::default();
            req.groups = groups.iter().map(|g| GroupId(sb(g))).collect();
            req.include_authorized_operations = v >= 3;
            c.describe_groups(ctx, req, now)
        });
        let ResponseKind::DescribeGroups(r) = r else {
            panic!()
        };
        r.groups
    };
    let d = describe(&mut h, 5, &["stable", "unknown"]);
    assert_eq!(d[0].group_state.as_str(), "Stable");
    assert_eq!(d[0].protocol_data.as_str(), "range");
    assert_eq!(d[0].members.len(), 2);
    let lm = d[0]
        .members
        .iter()
        .find(|m| m.member_id.as_str() == leader)
        .unwrap();
    assert_eq!(&lm.member_assignment[..], format!("a-{leader}").as_bytes());
    assert_eq!(lm.member_metadata, subscription(&["t1"]));
    assert_eq!(lm.client_host.as_str(), "/127.0.0.1");
    assert_eq!(d[1].group_state.as_str(), "Dead");
    assert_eq!(d[1].error_code, NONE);
    // No authorizer: every operation a group supports (READ, DELETE, DESCRIBE,
    // DESCRIBE_CONFIGS, ALTER_CONFIGS), also for a dead group described without error.
    assert_eq!(d[0].authorized_operations, 3400);
    assert_eq!(d[1].authorized_operations, 3400);
    let d = describe(&mut h, 6, &["unknown"]);
    assert_eq!(d[0].error_code, code(ErrorCode::GroupIdNotFound));
    assert_eq!(d[0].authorized_operations, i32::MIN);
    // During a rebalance members are listed without metadata.
    let _ = h.join("stable", &ids[0], None);
    let _ = h.join("stable", &ids[1], None);
    let d = describe(&mut h, 0, &["stable"]);
    assert_eq!(d[0].group_state.as_str(), "CompletingRebalance");
    assert!(d[0].members.iter().all(|m| m.member_metadata.is_empty()));
}

#[test]
fn not_coordinator_and_unload() {
    let mut h = H::new();
    let (id, t) = h.join_new("g");
    assert!(h.answered(t));
    let generation = h.join_resp(t).unwrap().generation_id;
    // A second member's join is parked while the first must rejoin.
    let (_, pending) = h.join_new("g");
    assert!(!h.answered(pending));
    let p = h.c.partition_for("g");
    let out = h.c.unload_partition(p);
    h.absorb(out);
    assert_eq!(
        h.join_resp(pending).unwrap().error_code,
        code(ErrorCode::NotCoordinator)
    );
    assert_eq!(
        h.heartbeat("g", &id, None, generation),
        code(ErrorCode::NotCoordinator)
    );
    let t = h.join("g", "", None);
    assert_eq!(
        h.join_resp(t).unwrap().error_code,
        code(ErrorCode::NotCoordinator)
    );
    let f = h.fetch("g", 1, Some(&[("t", &[0])]));
    assert_eq!(
        f.topics[0].partitions[0].error_code,
        code(ErrorCode::NotCoordinator)
    );
    let f = h.fetch("g", 3, None);
    assert_eq!(f.error_code, code(ErrorCode::NotCoordinator));
}

#[test]
fn find_coordinator_versions() {
    let node = CoordinatorNode {
        node_id: 1,
        host: "broker1".into(),
        port: 9092,
    };
    let locate = |_: i8, _: &str| Ok(node.clone());
    let mut req = FindCoordinatorRequest::default();
    req.key = sb("g");
    for v in 0..=3 {
        let r = find_coordinator(&req, v, locate);
        assert_eq!(
            (r.error_code, r.node_id.0, r.host.as_str(), r.port),
            (0, 1, "broker1", 9092)
        );
        // As Kafka's `createFindCoordinatorResponse`: the error's text, "NONE" on success.
        if v >= 1 {
            assert_eq!(r.error_message.as_deref(), Some("NONE"));
        }
        let mut b = bytes::BytesMut::new();
        assert!(ResponseKind::FindCoordinator(r).encode(&mut b, v).is_ok());
    }
    // Kafka 4.x locates the coordinator of the empty group id like any other.
    req.key = sb("");
    let r = find_coordinator(&req, 1, locate);
    assert_eq!(r.error_code, 0);
    req.key_type = 5;
    let r = find_coordinator(&req, 1, locate);
    assert_eq!(r.error_code, code(ErrorCode::InvalidRequest));
    assert_eq!(
        r.error_message.as_deref(),
        Some(ErrorCode::InvalidRequest.default_message())
    );
    let mut req = FindCoordinatorRequest::default();
    req.coordinator_keys = vec![sb("a"), sb(""), sb("b")];
    for v in 4..=6 {
        let r = find_coordinator(&req, v, |_, k| {
            if k == "b" {
                Err(ErrorCode::CoordinatorNotAvailable)
            } else {
                Ok(node.clone())
            }
        });
        let errors: Vec<i16> = r.coordinators.iter().map(|c| c.error_code).collect();
        assert_eq!(errors, vec![0, 0, code(ErrorCode::CoordinatorNotAvailable)]);
        assert_eq!(
            r.coordinators[2].error_message.as_deref(),
            Some("The coordinator is not available.")
        );
        let mut b = bytes::BytesMut::new();
        assert!(ResponseKind::FindCoordinator(r).encode(&mut b, v).is_ok());
    }
}

#[test]
fn group_max_size_is_enforced() {
    let mut cfg = test_config();
    cfg.group_max_size = 1;
    let mut h = H::with_config(cfg);
    h.stable_group("g", 1);
    let t = h.join("g", "", None);
    assert_eq!(
        h.join_resp(t).unwrap().error_code,
        code(ErrorCode::GroupMaxSizeReached)
    );
}

#[test]
fn every_join_and_sync_version_encodes() {
    let mut h = H::new();
    for v in 0..=9i16 {
        let group = format!("v{v}");
        let mut t = h.join_with(
            &group,
            "",
            Some("i").filter(|_| v >= 5),
            v,
            &[("range", subscription(&["t"]))],
        );
        if h.join_resp(t).unwrap().error_code == code(ErrorCode::MemberIdRequired) {
            let id = h.join_resp(t).unwrap().member_id.to_string();
            t = h.join_with(&group, &id, None, v, &[("range", subscription(&["t"]))]);
        }
        let r = h.join_resp(t).unwrap().clone();
        assert_eq!(r.error_code, NONE, "v{v}");
        let sv = v.min(5);
        let instance = if v >= 5 && sv >= 3 { Some("i") } else { None };
        let s = h.sync_with(
            &group,
            &r.member_id,
            instance,
            r.generation_id,
            sv,
            &[(&r.member_id, b"x")],
        );
        assert_eq!(h.sync_resp(s).unwrap().error_code, NONE, "v{v}");
        if sv == 5 {
            assert_eq!(
                h.sync_resp(s)
                    .unwrap()
                    .protocol_name
                    .as_ref()
                    .unwrap()
                    .as_str(),
                "range"
            );
        }
    }
}

#[test]
fn loading_partitions_answer_load_in_progress() {
    let mut c = GroupCoordinator::new(test_config());
    let p = c.partition_for("g");
    c.begin_loading(p);
    let mut h = H::new();
    h.c = c;
    let t = h.join("g", "", None);
    assert_eq!(
        h.join_resp(t).unwrap().error_code,
        code(ErrorCode::CoordinatorLoadInProgress)
    );
    let s = h.sync("g", "m", 1, &[]);
    assert_eq!(
        h.sync_resp(s).unwrap().error_code,
        code(ErrorCode::RebalanceInProgress)
    );
    assert_eq!(h.heartbeat("g", "m", None, 1), NONE);
    let f = h.fetch("g", 3, None);
    assert_eq!(f.error_code, code(ErrorCode::CoordinatorLoadInProgress));
    h.c.load_partition(p, h.now);
    let (_, t) = h.join_new("g");
    assert_eq!(h.join_resp(t).unwrap().error_code, NONE);
}

#[test]
fn handle_dispatches_group_apis_only() {
    let mut c = GroupCoordinator::new(test_config());
    for p in 0..PARTITIONS {
        c.load_partition(p, 0);
    }
    let ctx = coordinator::RequestContext {
        token: 7,
        api_version: 0,
        client_id: "c",
        client_host: "/h",
        visible_topics: coordinator::TopicVisibility::ALL,
    };
    let out = c
        .handle(
            &ctx,
            RequestKind::ListGroups(ListGroupsRequest::default()),
            0,
        )
        .unwrap();
    assert!(matches!(out.response(7), Some(ResponseKind::ListGroups(_))));
    let back = c.handle(
        &ctx,
        RequestKind::ApiVersions(ApiVersionsRequest::default()),
        0,
    );
    assert!(matches!(back, Err(RequestKind::ApiVersions(_))));
}

#[test]
fn deleted_topics_lose_their_offsets() {
    let mut h = H::new();
    h.commit(
        "g",
        "",
        -1,
        &[("gone", 0, 1), ("gone", 1, 2), ("kept", 0, 3)],
    );
    let out = h.c.delete_topic_offsets(&["gone"]);
    assert_eq!(out.records.len(), 2);
    assert!(out.records.iter().all(|r| r.value.is_none()));
    h.absorb(out);
    let g = h.c.group("g").unwrap();
    assert_eq!(g.offsets.len(), 1);
    assert_eq!(g.offsets[0].topic, "kept");
}

#[test]
fn static_member_session_expiry_removes_it() {
    let mut h = H::new();
    let t = h.join("g", "", Some("i"));
    let r = h.join_resp(t).unwrap().clone();
    let s = h.sync_with(
        "g",
        &r.member_id,
        Some("i"),
        r.generation_id,
        3,
        &[(&r.member_id, b"x")],
    );
    assert!(h.answered(s));
    h.advance(i64::from(SESSION_MS));
    let g = h.c.group("g").unwrap();
    assert!(g.members.is_empty());
    assert_eq!(g.state, GroupState::Empty);
    // The instance id is free again: a new process joins as a new member.
    let t = h.join("g", "", Some("i"));
    assert_eq!(h.join_resp(t).unwrap().error_code, NONE);
    assert_eq!(h.join_resp(t).unwrap().generation_id, r.generation_id + 2);
}
