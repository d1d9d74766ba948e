//! Model test: random joins, syncs, heartbeats, leaves, commits and clock advances by a few
//! well-behaved (and some misbehaving) clients, checking the coordinator's invariants after
//! every step: one leader per generation, generations only grow, a Stable group's members all
//! have assignments, every request is answered exactly once (eventually), every response
//! encodes at its version.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;

use common::*;
use coordinator::{GroupCoordinator, GroupState};
use model::ErrorCode;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Join(usize),
    Sync(usize),
    Heartbeat(usize),
    Leave(usize),
    Commit(usize),
    Advance(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..6usize).prop_map(Op::Join),
        3 => (0..6usize).prop_map(Op::Sync),
        3 => (0..6usize).prop_map(Op::Heartbeat),
        1 => (0..6usize).prop_map(Op::Leave),
        1 => (0..6usize).prop_map(Op::Commit),
        3 => (0i64..12_000).prop_map(Op::Advance),
    ]
}

#[derive(Clone, Debug, Default)]
struct Client {
    member_id: String,
    generation: i32,
    /// The member list of the last join response, when this client leads.
    members: Vec<String>,
    join: Option<u64>,
    instance: Option<String>,
    sync: Option<u64>,
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut cfg = test_config();
    cfg.group_initial_rebalance_delay_ms = 500;
    cfg.offsets_retention_check_interval_ms = i64::MAX / 4;
    let mut h = H::with_config(cfg);
    // Clients 4 and 5 are two processes configured with the same group.instance.id: they fence
    // each other.
    let mut clients: Vec<Client> = vec![Client::default(); 6];
    for c in &mut clients[4..] {
        c.instance = Some("inst".to_string());
    }
    let mut leaders: HashMap<i32, String> = HashMap::new();
    let mut last_generation = 0;
    let mut sent: Vec<u64> = Vec::new();

    for op in ops {
        match op {
            Op::Join(k) => {
                let c = &mut clients[k];
                if c.join.is_none() && c.sync.is_none() {
                    let t = h.join("g", &c.member_id.clone(), c.instance.clone().as_deref());
                    c.join = Some(t);
                    sent.push(t);
                }
            }
            Op::Sync(k) => {
                let c = &clients[k];
                if c.join.is_none() && c.sync.is_none() && !c.member_id.is_empty() {
                    let assignments: Vec<(String, Vec<u8>)> = c
                        .members
                        .iter()
                        .map(|m| (m.clone(), m.as_bytes().to_vec()))
                        .collect();
                    let a: Vec<(&str, &[u8])> = assignments
                        .iter()
                        .map(|(m, a)| (m.as_str(), a.as_slice()))
                        .collect();
                    let (id, generation, instance) =
                        (c.member_id.clone(), c.generation, c.instance.clone());
                    let t = h.sync_with("g", &id, instance.as_deref(), generation, 3, &a);
                    clients[k].sync = Some(t);
                    sent.push(t);
                }
            }
            Op::Heartbeat(k) => {
                let c = &mut clients[k];
                if !c.member_id.is_empty() {
                    let instance = c.instance.clone();
                    let e =
                        h.heartbeat("g", &c.member_id.clone(), instance.as_deref(), c.generation);
                    if e == ErrorCode::UnknownMemberId.code()
                        || e == ErrorCode::FencedInstanceId.code()
                    {
                        c.member_id.clear();
                    }
                }
            }
            Op::Leave(k) => {
                let c = &mut clients[k];
                if !c.member_id.is_empty() {
                    let instance = c.instance.clone();
                    h.leave("g", &[(&c.member_id.clone(), instance.as_deref())], 3);
                    c.member_id.clear();
                    c.members.clear();
                }
            }
            Op::Commit(k) => {
                let c = &clients[k];
                let (id, generation) = (c.member_id.clone(), c.generation);
                let generation = if id.is_empty() { -1 } else { generation };
                h.commit("g", &id, generation, &[("t", k as i32, 1)]);
            }
            Op::Advance(ms) => h.advance(ms),
        }
        // Deliver answers to the clients.
        for c in clients.iter_mut() {
            if let Some(t) = c.join {
                if let Some(r) = h.join_resp(t).cloned() {
                    c.join = None;
                    if r.error_code == 0 {
                        c.member_id = r.member_id.to_string();
                        c.generation = r.generation_id;
                        let leader = r.leader.to_string();
                        // One member per generation is told it leads. (Followers may be told
                        // a stale leader id: a restarted static member is deliberately given
                        // the previous leader's id so it does not compute an assignment.)
                        if leader == c.member_id {
                            let known = leaders.entry(r.generation_id).or_insert(leader.clone());
                            prop_assert_eq!(&*known, &leader, "two leaders in one generation");
                        }
                        c.members = if leader == c.member_id {
                            r.members.iter().map(|m| m.member_id.to_string()).collect()
                        } else {
                            Vec::new()
                        };
                        if leader == c.member_id {
                            prop_assert!(!r.members.is_empty());
                        }
                    } else if r.error_code == ErrorCode::MemberIdRequired.code() {
                        c.member_id = r.member_id.to_string();
                    } else {
                        c.member_id.clear();
                    }
                }
            }
            if let Some(t) = c.sync {
                if let Some(r) = h.sync_resp(t).cloned() {
                    c.sync = None;
                    if r.error_code == ErrorCode::UnknownMemberId.code()
                        || r.error_code == ErrorCode::FencedInstanceId.code()
                    {
                        c.member_id.clear();
                    }
                }
            }
        }
        // Group invariants.
        if let Some(g) = h.c.group("g") {
            prop_assert!(g.generation >= last_generation, "generation went back");
            last_generation = g.generation;
            match g.state {
                GroupState::Stable => {
                    // Every member has its entry from the leader (a restarted static member
                    // keeps the assignment of the id it replaced).
                    for m in &g.members {
                        prop_assert!(!m.assignment.is_empty(), "member without assignment");
                    }
                    prop_assert!(g.leader.is_some());
                }
                GroupState::CompletingRebalance => {
                    let leader = g.leader.clone().unwrap_or_default();
                    prop_assert!(g.members.iter().any(|m| m.member_id == leader));
                }
                GroupState::Empty => prop_assert!(g.members.is_empty()),
                _ => {}
            }
            // Whenever the group is at rest, the log alone rebuilds it.
            if matches!(g.state, GroupState::Stable | GroupState::Empty) {
                let mut fresh = GroupCoordinator::new(test_config());
                for r in &h.log {
                    prop_assert!(fresh.replay(&r.key, r.value.as_deref()).is_ok());
                }
                match fresh.group("g") {
                    Some(replayed) => prop_assert_eq!(replayed, g),
                    None => prop_assert!(g.generation == 0 && g.offsets.is_empty()),
                }
            }
        }
    }
    // Once everyone is gone, every request has had its answer.
    for _ in 0..200 {
        match h.c.next_deadline() {
            Some(d) if d > h.now + 3_600_000 => break,
            Some(d) => {
                let step = (d - h.now).max(1);
                h.advance(step);
            }
            None => break,
        }
    }
    for t in sent {
        prop_assert!(h.answered(t), "request {} never answered", t);
    }
    if let Some(g) = h.c.group("g") {
        prop_assert_eq!(g.state, GroupState::Empty);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn group_invariants_hold(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops)?;
    }
}
