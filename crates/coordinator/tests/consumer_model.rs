//! Model test of consumer-protocol (KIP-848) groups: random joins, heartbeats, leaves,
//! crashes (a member stops heartbeating, later a new incarnation joins), subscription
//! changes, topics gaining partitions or appearing, and clock advances. After every step:
//! - a partition has at most one owner in the coordinator, and a member whose epoch is
//!   current never consumes a partition the coordinator gives to someone else;
//! - the group epoch and each member's epoch only grow;
//! - every response encodes at its version.
//!
//! At the end, with every live member heartbeating, every subscribed partition is assigned
//! to exactly one member and each member owns exactly its target; replaying the log
//! rebuilds the same groups.

#![allow(clippy::unwrap_used)]

mod consumer_common;

use std::collections::{BTreeSet, HashMap};

use consumer_common::*;
use model::{ErrorCode, TopicId};
use proptest::prelude::*;

const TOPICS: [&str; 3] = ["a", "b", "c"];

#[derive(Clone, Debug)]
enum Op {
    Heartbeat(usize),
    Leave(usize),
    Crash(usize),
    Subscribe(usize, u8),
    AddPartitions(usize, i32),
    Advance(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..5usize).prop_map(Op::Heartbeat),
        1 => (0..5usize).prop_map(Op::Leave),
        1 => (0..5usize).prop_map(Op::Crash),
        1 => (0..5usize, 1u8..8).prop_map(|(k, m)| Op::Subscribe(k, m)),
        1 => (0..3usize, 1i32..4).prop_map(|(t, n)| Op::AddPartitions(t, n)),
        3 => (0i64..20_000).prop_map(Op::Advance),
    ]
}

fn names(mask: u8) -> Vec<String> {
    TOPICS
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, t)| t.to_string())
        .collect()
}

struct World {
    h: H,
    clients: Vec<Client>,
    /// Whether each client process runs (a crashed one stays silent until it restarts).
    alive: Vec<bool>,
    incarnation: Vec<u32>,
    partitions: [i32; 3],
    group_epoch: i32,
    member_epochs: HashMap<String, i32>,
    /// KIP-1251: the assignment epoch of each (member, partition) held at the last check.
    held_since: HashMap<(String, TopicId, i32), i32>,
}

impl World {
    fn new(static_members: bool) -> World {
        let partitions = [3, 2, 4];
        let h = H::new(Self::image(&partitions));
        let clients = (0..5)
            .map(|k| {
                let mut c = Client::new("g", &format!("m{k}-0"), &["a", "b"]);
                if static_members && k % 2 == 0 {
                    c.instance = Some(format!("inst-{k}"));
                }
                c
            })
            .collect();
        World {
            h,
            clients,
            alive: vec![true; 5],
            incarnation: vec![0; 5],
            partitions,
            group_epoch: 0,
            member_epochs: HashMap::new(),
            held_since: HashMap::new(),
        }
    }

    fn image(p: &[i32; 3]) -> coordinator::TopicsImage {
        topics(&[("a", p[0]), ("b", p[1]), ("c", p[2])])
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Heartbeat(k) => {
                if !self.alive[k] {
                    // A crashed process restarts with a new member id.
                    self.alive[k] = true;
                    self.incarnation[k] += 1;
                    let c = &mut self.clients[k];
                    c.member_id = format!("m{k}-{}", self.incarnation[k]);
                    c.joined = false;
                    c.owned.clear();
                    c.epoch = 0;
                }
                let e = self.clients[k].heartbeat(&mut self.h);
                assert!(
                    matches!(
                        e,
                        ErrorCode::None
                            | ErrorCode::FencedMemberEpoch
                            | ErrorCode::UnknownMemberId
                            | ErrorCode::UnreleasedInstanceId
                    ),
                    "unexpected {e:?}"
                );
            }
            Op::Leave(k) => {
                if self.alive[k] && self.clients[k].joined {
                    let e = self.clients[k].leave(&mut self.h);
                    assert!(
                        matches!(e, ErrorCode::None | ErrorCode::UnknownMemberId),
                        "{e:?}"
                    );
                }
            }
            Op::Crash(k) => {
                self.alive[k] = false;
            }
            Op::Subscribe(k, mask) => {
                self.clients[k].names = names(mask);
            }
            Op::AddPartitions(t, n) => {
                self.partitions[t] += n;
                let image = Self::image(&self.partitions);
                self.h.set_topics(image);
            }
            Op::Advance(ms) => {
                self.h.advance(ms);
            }
        }
    }

    fn check(&mut self) -> Result<(), TestCaseError> {
        let Some(g) = self.h.c.consumer_groups().group("g") else {
            return Ok(());
        };
        prop_assert!(g.epoch >= self.group_epoch, "group epoch went back");
        self.group_epoch = g.epoch;
        for (id, m) in &g.members {
            if let Some(prev) = self.member_epochs.get(id) {
                prop_assert!(
                    m.epoch >= *prev || m.epoch < 0,
                    "member {id} epoch went back"
                );
            }
            if m.epoch >= 0 {
                self.member_epochs.insert(id.clone(), m.epoch);
            }
        }
        // One owner per partition (the coordinator's view), consistent with the members.
        let mut seen = BTreeSet::new();
        for m in g.members.values() {
            for a in [&m.assigned, &m.pending_revocation] {
                for (t, ps) in a {
                    for p in ps {
                        prop_assert!(seen.insert((*t, *p)), "partition {p} owned twice");
                        prop_assert_eq!(g.partition_owner(t, *p), Some(m.id.as_str()));
                    }
                }
            }
        }
        // KIP-1251: every held partition has an assignment epoch, no newer than the member's
        // epoch, and it stays the same for as long as the member keeps the partition.
        let mut held_since = HashMap::new();
        for m in g.members.values() {
            let held: BTreeSet<(TopicId, i32)> = [&m.assigned, &m.pending_revocation]
                .into_iter()
                .flat_map(|a| {
                    a.iter()
                        .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
                })
                .collect();
            let with_epoch: BTreeSet<(TopicId, i32)> = m.epochs.keys().copied().collect();
            prop_assert_eq!(&held, &with_epoch, "member {} assignment epochs", &m.id);
            for ((t, p), e) in &m.epochs {
                if m.epoch >= 0 {
                    prop_assert!(
                        *e <= m.epoch,
                        "partition {p} assigned at {e} > member epoch"
                    );
                }
                let key = (m.id.clone(), *t, *p);
                if let Some(before) = self.held_since.get(&key) {
                    prop_assert_eq!(*before, *e, "partition {} kept but its epoch changed", p);
                }
                held_since.insert(key, *e);
            }
        }
        self.held_since = held_since;
        // A client whose membership is current only consumes what the coordinator says it
        // owns (zombies with an old epoch or a removed member id are fenced on commit).
        for (k, c) in self.clients.iter().enumerate() {
            if !self.alive[k] || !c.joined {
                continue;
            }
            let Some(m) = g.members.get(&c.member_id) else {
                continue;
            };
            if m.epoch != c.epoch {
                continue;
            }
            for (t, ps) in &c.owned {
                for p in ps {
                    prop_assert_eq!(
                        g.partition_owner(t, *p),
                        Some(c.member_id.as_str()),
                        "client {} consumes {} which the coordinator gives to someone else",
                        c.member_id,
                        p
                    );
                }
            }
        }
        Ok(())
    }

    /// Every live client heartbeats until nothing changes; then checks full coverage.
    fn settle(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..12 {
            for k in 0..self.clients.len() {
                if self.alive[k] {
                    self.apply(&Op::Heartbeat(k));
                    self.check()?;
                }
            }
        }
        let Some(g) = self.h.c.consumer_groups().group("g") else {
            return Ok(());
        };
        let live: Vec<&Client> = self
            .clients
            .iter()
            .enumerate()
            .filter(|(k, c)| self.alive[*k] && c.joined)
            .map(|(_, c)| c)
            .collect();
        // Crashed members still count until their session expires; only check coverage
        // when every member is live.
        if g.members.len() != live.len() {
            return Ok(());
        }
        prop_assert_eq!(g.state(), coordinator::ConsumerGroupState::Stable);
        let mut subscribed = BTreeSet::new();
        for c in &live {
            for t in &c.names {
                subscribed.insert(t.clone());
            }
        }
        let mut want = BTreeSet::new();
        for (i, t) in TOPICS.iter().enumerate() {
            if subscribed.contains(*t) {
                for p in 0..self.partitions[i] {
                    want.insert((tid(t), p));
                }
            }
        }
        let owned: Vec<_> = live.iter().map(|c| &c.owned).collect();
        let got = union(&owned);
        prop_assert_eq!(got, want, "every subscribed partition is assigned once");
        for c in &live {
            let m = &g.members[&c.member_id];
            prop_assert_eq!(&m.assigned, &c.owned);
            prop_assert_eq!(g.target.get(&c.member_id), Some(&c.owned));
            for t in c.owned.keys() {
                let name = TOPICS.iter().find(|n| tid(n) == *t).unwrap();
                prop_assert!(
                    c.names.iter().any(|x| x == name),
                    "assigned an unsubscribed topic"
                );
            }
        }
        Ok(())
    }
}

fn run(ops: Vec<Op>, static_members: bool) -> Result<(), TestCaseError> {
    let mut w = World::new(static_members);
    for op in &ops {
        w.apply(op);
        w.check()?;
    }
    // Let crashed members' sessions expire while the others keep heartbeating.
    for _ in 0..12 {
        w.h.advance(i64::from(HEARTBEAT_MS));
        for k in 0..w.clients.len() {
            if w.alive[k] {
                w.apply(&Op::Heartbeat(k));
                w.check()?;
            }
        }
    }
    w.settle()?;
    w.h.check_replay();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn dynamic_members(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, false)?;
    }

    #[test]
    fn static_and_dynamic_members(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, true)?;
    }
}

/// A deterministic long run with a seeded generator, larger than the proptest cases.
#[test]
fn seeded_long_run() {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut ops = Vec::new();
    for _ in 0..600 {
        let k = next(5) as usize;
        ops.push(match next(16) {
            0..=7 => Op::Heartbeat(k),
            8 => Op::Leave(k),
            9 => Op::Crash(k),
            10 => Op::Subscribe(k, 1 + next(7) as u8),
            11 => Op::AddPartitions(next(3) as usize, 1),
            _ => Op::Advance(next(20_000) as i64),
        });
    }
    run(ops.clone(), false).unwrap();
    run(ops, true).unwrap();
}
