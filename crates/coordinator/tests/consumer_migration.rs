//! Classic and consumer groups side by side (KIP-848 migration): an empty group changes kind
//! when a member of the other protocol joins (offsets kept), a non-empty classic group is
//! upgraded online and works as a mixed group (classic members through
//! JoinGroup/SyncGroup/Heartbeat), and is downgraded back when its last consumer-protocol
//! member leaves; `group.consumer.migration.policy` gates the online conversions.

#![allow(clippy::unwrap_used)]

mod consumer_common;

use std::collections::BTreeSet;

use consumer_common::*;
use model::config::MigrationPolicy;
use model::ErrorCode;

/// Runs a classic client through join + sync in a classic group.
fn classic_round(h: &mut H, clients: &mut [&mut ClassicClient]) {
    // Joins that overlap a completed rebalance are told to rejoin: retry until all sync.
    for _ in 0..5 {
        let joins: Vec<u64> = clients.iter_mut().map(|c| c.start_join(h)).collect();
        h.advance(1);
        let syncs: Vec<Option<u64>> = clients
            .iter_mut()
            .zip(joins)
            .map(|(c, t)| c.finish_join(h, t))
            .collect();
        h.advance(1);
        let mut ok = true;
        for (c, s) in clients.iter_mut().zip(syncs) {
            ok &= s.is_some_and(|s| c.finish_sync(h, s) == ErrorCode::None);
        }
        if ok {
            return;
        }
    }
    panic!("classic members never synced");
}

fn has_classic_tombstone(h: &H, group: &str) -> bool {
    let key = coordinator::records::encode_group_key(group);
    h.log.iter().any(|r| r.key == key && r.value.is_none())
}

#[test]
fn empty_classic_group_becomes_a_consumer_group_and_back_keeping_offsets() {
    let mut h = H::new(topics(&[("t", 2)]));
    let mut old = ClassicClient::new("g", &["t"]);
    classic_round(&mut h, &mut [&mut old]);
    assert_eq!(old.owned_set().len(), 2);
    assert_eq!(
        h.commit("g", &old.member_id.clone(), old.generation, "t", 0, 42),
        ErrorCode::None
    );
    assert_eq!(
        h.classic_leave("g", &old.member_id.clone()),
        ErrorCode::None
    );
    assert_eq!(
        h.list(5, &[]),
        vec![("g".into(), "Empty".into(), "classic".into())]
    );

    // A consumer-protocol member joins the empty classic group: it converts.
    let mut c = Client::new("g", "m", &["t"]);
    for _ in 0..3 {
        assert_eq!(c.heartbeat(&mut h), ErrorCode::None);
    }
    assert_eq!(count(&c.owned), 2);
    assert!(has_classic_tombstone(&h, "g"));
    assert_eq!(
        h.list(5, &[]),
        vec![("g".into(), "Stable".into(), "consumer".into())]
    );
    assert_eq!(h.fetch("g", Some("m"), c.epoch, "t", 0), Ok(42));
    assert_eq!(h.commit("g", "m", c.epoch, "t", 1, 7), ErrorCode::None);
    h.check_replay();

    // It leaves; a classic member joins the empty consumer group: it converts back.
    c.leave(&mut h);
    let mut back = ClassicClient::new("g", &["t"]);
    classic_round(&mut h, &mut [&mut back]);
    assert_eq!(back.owned_set().len(), 2);
    assert_eq!(
        h.list(5, &[]),
        vec![("g".into(), "Stable".into(), "classic".into())]
    );
    assert!(h.c.consumer_groups().group("g").is_none());
    assert_eq!(h.fetch("g", None, -1, "t", 0), Ok(42));
    assert_eq!(h.fetch("g", None, -1, "t", 1), Ok(7));
    h.check_replay();
}

/// Drives classic clients of a mixed group: heartbeat, rejoin on REBALANCE_IN_PROGRESS.
fn drive_classic(h: &mut H, c: &mut ClassicClient) {
    if !c.in_group {
        let t = c.start_join(h);
        if let Some(s) = c.finish_join(h, t) {
            c.finish_sync(h, s);
        }
        return;
    }
    match h.classic_heartbeat("g", &c.member_id.clone(), c.generation) {
        ErrorCode::None => {}
        ErrorCode::RebalanceInProgress => {
            let t = c.start_join(h);
            if let Some(s) = c.finish_join(h, t) {
                let e = c.finish_sync(h, s);
                assert!(
                    matches!(e, ErrorCode::None | ErrorCode::RebalanceInProgress),
                    "{e:?}"
                );
            }
        }
        e => {
            c.in_group = false;
            c.owned.clear();
            panic!("classic heartbeat failed: {e:?}");
        }
    }
}

fn assert_disjoint_cover(parts: Vec<Vec<(model::TopicId, i32)>>, total: usize) {
    let mut all = BTreeSet::new();
    for p in parts {
        for x in p {
            assert!(all.insert(x), "partition {x:?} owned twice");
        }
    }
    assert_eq!(all.len(), total);
}

#[test]
fn non_empty_classic_group_upgrades_online_and_downgrades_back() {
    let mut h = H::new(topics(&[("t", 6)]));
    let mut a = ClassicClient::new("g", &["t"]);
    let mut b = ClassicClient::new("g", &["t"]);
    classic_round(&mut h, &mut [&mut a, &mut b]);
    assert_disjoint_cover(vec![a.owned_set(), b.owned_set()], 6);
    let (g0, a_before) = (a.generation, a.owned_set());

    // A consumer-protocol member joins: the group is upgraded with a and b as classic members.
    let mut c = Client::new("g", "c", &["t"]);
    assert_eq!(c.heartbeat(&mut h), ErrorCode::None);
    assert!(has_classic_tombstone(&h, "g"));
    let g = h.c.consumer_groups().group("g").expect("upgraded");
    assert_eq!(g.members.len(), 3);
    assert!(g.members[&a.member_id].uses_classic());
    let d = h.describe("g");
    assert_eq!(d.members.iter().filter(|m| m.member_type == 0).count(), 2);

    // Everyone converges: classic members rejoin on REBALANCE_IN_PROGRESS.
    for _ in 0..8 {
        drive_classic(&mut h, &mut a);
        drive_classic(&mut h, &mut b);
        assert_eq!(c.heartbeat(&mut h), ErrorCode::None);
    }
    let c_owned: Vec<_> = c
        .owned
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
        .collect();
    assert_disjoint_cover(vec![a.owned_set(), b.owned_set(), c_owned.clone()], 6);
    assert_eq!(h.describe("g").group_state.as_str(), "Stable");
    // Commits of a classic member (Kafka 4.4): its generation, exactly; an older one only for
    // the partitions it holds since then (KIP-1251), else ILLEGAL_GENERATION.
    let a_id = a.member_id.clone();
    let a_now = h.c.consumer_groups().group("g").unwrap().members[&a_id].epoch;
    assert!(a_now > g0, "the classic member rejoined after the upgrade");
    let (_, kept) = a
        .owned_set()
        .into_iter()
        .find(|tp| a_before.contains(tp))
        .expect("the sticky assignor lets a keep some of its partitions");
    let (_, elsewhere) = c_owned[0];
    assert_eq!(h.commit("g", &a_id, a_now, "t", kept, 1), ErrorCode::None);
    assert_eq!(h.commit("g", &a_id, g0, "t", kept, 2), ErrorCode::None);
    assert_eq!(
        h.commit("g", &a_id, g0, "t", elsewhere, 3),
        ErrorCode::IllegalGeneration
    );
    assert_eq!(
        h.commit("g", &a_id, a_now + 1, "t", kept, 4),
        ErrorCode::IllegalGeneration
    );
    h.check_replay();

    // The last consumer-protocol member leaves: back to a classic group that rebalances.
    assert_eq!(c.leave(&mut h), ErrorCode::None);
    assert!(h.c.consumer_groups().group("g").is_none());
    assert_eq!(h.list(5, &[])[0].2, "classic");
    let ta = a.start_join(&mut h);
    let tb = b.start_join(&mut h);
    h.advance(1);
    let sa = a.finish_join(&mut h, ta).unwrap();
    let sb = b.finish_join(&mut h, tb).unwrap();
    assert_eq!(a.finish_sync(&mut h, sa), ErrorCode::None);
    assert_eq!(b.finish_sync(&mut h, sb), ErrorCode::None);
    assert_disjoint_cover(vec![a.owned_set(), b.owned_set()], 6);
    h.check_replay();
}

#[test]
fn cooperative_classic_members_revoke_before_partitions_move() {
    let mut h = H::new(topics(&[("t", 4)]));
    let mut c = Client::new("g", "c", &["t"]);
    for _ in 0..3 {
        c.heartbeat(&mut h);
    }
    assert_eq!(count(&c.owned), 4);
    // A cooperative classic member joins the consumer group (mixed).
    let mut k = ClassicClient::new("g", &["t"]);
    k.cooperative = true;
    for _ in 0..8 {
        drive_classic(&mut h, &mut k);
        assert_eq!(c.heartbeat(&mut h), ErrorCode::None);
        let c_owned: Vec<_> = c
            .owned
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
            .collect();
        let mut all = BTreeSet::new();
        for x in c_owned.into_iter().chain(k.owned_set()) {
            assert!(all.insert(x), "{x:?} owned twice");
        }
    }
    assert_eq!(k.owned_set().len(), 2);
    assert_eq!(count(&c.owned), 2);
    // The classic member leaves with LeaveGroup.
    assert_eq!(h.classic_leave("g", &k.member_id.clone()), ErrorCode::None);
    for _ in 0..3 {
        c.heartbeat(&mut h);
    }
    assert_eq!(count(&c.owned), 4);
    h.check_replay();
}

#[test]
fn disabled_policy_refuses_online_upgrade() {
    let mut cfg = test_config();
    cfg.consumer.migration_policy = MigrationPolicy::Disabled;
    let mut h = H::with_config(cfg, topics(&[("t", 2)]));
    let mut a = ClassicClient::new("g", &["t"]);
    classic_round(&mut h, &mut [&mut a]);
    let r = h.hb(&Hb::join("g", "c", &["t"]));
    assert_eq!(r.error_code, ErrorCode::GroupIdNotFound.code());
    // The classic group is untouched.
    assert_eq!(
        h.classic_heartbeat("g", &a.member_id.clone(), a.generation),
        ErrorCode::None
    );
}

#[test]
fn classic_errors_in_a_consumer_group() {
    let mut h = H::new(topics(&[("t", 2)]));
    let mut c = Client::new("g", "c", &["t"]);
    c.heartbeat(&mut h);
    // Heartbeat/SyncGroup of unknown or consumer-protocol members.
    assert_eq!(
        h.classic_heartbeat("g", "nobody", 1),
        ErrorCode::UnknownMemberId
    );
    assert_eq!(h.classic_heartbeat("g", "c", 1), ErrorCode::UnknownMemberId);
    let t = h.classic_sync("g", "c", 1, &[]);
    assert_eq!(
        h.sync_resp(t).unwrap().error_code,
        ErrorCode::UnknownMemberId.code()
    );
    // A JoinGroup with another protocol type is refused.
    let t = h.token(5);
    let ctx = h.ctx(t, 5);
    let mut r = protocol::messages::JoinGroupRequest::default();
    r.group_id = protocol::messages::GroupId(sb("g"));
    r.session_timeout_ms = 10_000;
    r.rebalance_timeout_ms = 10_000;
    r.protocol_type = sb("connect");
    let out = h.c.join_group(&ctx, r, h.now);
    h.absorb(out);
    assert_eq!(
        h.join_resp(t).unwrap().error_code,
        ErrorCode::InconsistentGroupProtocol.code()
    );
    // A classic member with a wrong generation.
    let mut k = ClassicClient::new("g", &["t"]);
    drive_classic(&mut h, &mut k);
    assert_eq!(
        h.classic_heartbeat("g", &k.member_id.clone(), k.generation + 5),
        ErrorCode::IllegalGeneration
    );
}
