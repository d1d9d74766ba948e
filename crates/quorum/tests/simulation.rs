//! Deterministic simulation of the metadata quorum: 3 and 5 voters (raft-rs + the controller,
//! the real `MetadataNode`) on a simulated network and simulated disks, driven through seeded
//! runs with message loss, duplication, delay (reordering), network partitions and
//! crash-restarts (keeping or losing what was written but not synced, including in the middle
//! of a node's I/O). Simulated brokers register, heartbeat, die, restart and shut down while
//! clients create, delete, grow and reconfigure topics.
//!
//! Checked after every step:
//! - the committed log never diverges: every node's committed entries (read as an observer
//!   reads them) agree index by index with every other node's, and snapshots agree with the
//!   log they replace;
//! - committed metadata never goes back: each node's published images have growing offsets
//!   within a process lifetime, and every image equals the reference image (the committed log
//!   replayed) at its offset;
//! - at most one leader per term;
//! - controller invariants on every committed image: a partition's leader is in its ISR and is
//!   an unfenced registered broker, the ISR is a non-empty subset of the replicas, leader and
//!   partition epochs only grow (the leader epoch with every leader change), broker epochs only
//!   grow;
//! - every acknowledged change is in the committed image at the offset it was acknowledged
//!   with; an accepted ISR change (AlterPartition from a simulated leader, from a possibly
//!   stale view, sometimes with a stale leader epoch) is exactly the committed registration
//!   there: same leader and leader epoch, the proposed ISR, every member registered, unfenced
//!   and not shutting down.
//!
//! At the end the network heals, every node restarts, and the cluster must converge: one
//! active controller, identical images everywhere, and a new topic can be created.
//!
//! `MOLDAU_SIM_SEEDS=N` runs N seeds per voter count (CI runs a bounded number);
//! `MOLDAU_SIM_SEED=S` replays one seed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::field_reassign_with_default
)]

use controller::{
    ConfigChange, ConfigResource, ControllerConfig, IsrChange, Origin, Reply, Request, TopicRef,
    TopicSpec,
};
use metadata::{Endpoint, MetadataImage, PartitionRegistration};
use model::{ErrorCode, TopicId};
use quorum::{MemDisk, MetadataNode, NodeConfig, Token};
use raft::eraftpb::Message;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Milliseconds of simulated time per step (and per raft tick).
const STEP_MS: i64 = 10;
const SESSION_TIMEOUT_MS: i64 = 600;
const HEARTBEAT_MS: i64 = 150;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// A structural digest of everything an image holds (except where registrations were read
/// from, which a snapshot cannot tell).
fn digest(image: &MetadataImage) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    image.offset.hash(&mut h);
    image.cluster_id.hash(&mut h);
    image.next_producer_id.hash(&mut h);
    for b in image.brokers.values() {
        (
            b.node_id,
            &b.incarnation_id,
            b.epoch,
            b.fenced,
            b.in_controlled_shutdown,
            &b.rack,
        )
            .hash(&mut h);
        for e in &b.endpoints {
            (&e.name, &e.host, e.port).hash(&mut h);
        }
    }
    for t in image.topics.values() {
        (&t.name, t.id.as_u128(), &t.configs).hash(&mut h);
        for p in &t.partitions {
            (
                &p.replicas,
                &p.isr,
                p.leader,
                p.leader_epoch,
                p.partition_epoch,
            )
                .hash(&mut h);
            (&p.adding_replicas, &p.removing_replicas).hash(&mut h);
        }
    }
    h.finish()
}

/// How hostile a run is.
#[derive(Clone, Debug)]
struct Faults {
    loss: f64,
    duplicate: f64,
    delay_max_steps: u64,
    crash_per_step: f64,
    crash_mid_io: f64,
    partition_per_step: f64,
    snapshot_after_bytes: u64,
}

struct SimNode {
    disk: MemDisk,
    node: Option<MetadataNode<MemDisk>>,
    restart_at: i64,
    /// Offset of the last image published in this process lifetime.
    last_published: i64,
    /// Cursor for reading its committed log.
    read_from: u64,
    /// Last image published (for epoch monotonicity) and its digest.
    last_image: Option<(Arc<MetadataImage>, u64)>,
}

struct SimBroker {
    id: i32,
    incarnation: u64,
    epoch: Option<i64>,
    alive: bool,
    revive_at: i64,
    next_heartbeat: i64,
    shutting_down: bool,
}

#[derive(Clone, Debug)]
enum Expect {
    None,
    Heartbeat(i32),
    Register(i32, u64),
}

struct Sim {
    rng: Rng,
    seed: u64,
    now: i64,
    voters: Vec<u64>,
    nodes: BTreeMap<u64, SimNode>,
    brokers: Vec<SimBroker>,
    faults: Faults,
    /// (deliver at, sequence, message)
    network: BTreeMap<(i64, u64), Message>,
    seq: u64,
    /// Pairs of nodes that cannot talk, while `partition_until`.
    cut: BTreeSet<(u64, u64)>,
    partition_until: i64,
    next_token: Token,
    outstanding: BTreeMap<Token, (u64, Request, Expect)>,
    /// The committed log as observed: index -> (term, data).
    truth: BTreeMap<u64, (u64, bytes::Bytes)>,
    /// The reference image replayed from `truth`, and its digest at each offset.
    reference: MetadataImage,
    ref_next: u64,
    ref_digests: BTreeMap<i64, u64>,
    ref_images: BTreeMap<i64, Arc<MetadataImage>>,
    leaders: BTreeMap<u64, u64>,
    topic_seq: u64,
    acked: u64,
    stats: BTreeMap<&'static str, u64>,
    final_token: Option<Token>,
    final_answer: Option<Result<Reply, controller::ControllerError>>,
}

fn endpoint(id: i32) -> Vec<Endpoint> {
    vec![Endpoint {
        name: "PLAINTEXT".into(),
        host: format!("b{id}"),
        port: 9092,
        security_protocol: "PLAINTEXT".into(),
    }]
}

impl Sim {
    fn new(seed: u64, voter_count: u64) -> Sim {
        let mut rng = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ voter_count);
        let calm = rng.chance(0.15);
        let faults = if calm {
            Faults {
                loss: 0.0,
                duplicate: 0.0,
                delay_max_steps: 1,
                crash_per_step: 0.0,
                crash_mid_io: 0.0,
                partition_per_step: 0.0,
                snapshot_after_bytes: 1 << 30,
            }
        } else {
            Faults {
                loss: rng.below(20) as f64 / 100.0,
                duplicate: rng.below(10) as f64 / 100.0,
                delay_max_steps: 1 + rng.below(8),
                crash_per_step: rng.below(5) as f64 / 1000.0,
                crash_mid_io: rng.below(20) as f64 / 1000.0,
                partition_per_step: rng.below(5) as f64 / 1000.0,
                snapshot_after_bytes: if rng.chance(0.5) {
                    1 + rng.below(4000)
                } else {
                    1 << 30
                },
            }
        };
        let voters: Vec<u64> = (1..=voter_count).collect();
        let mut sim = Sim {
            rng,
            seed,
            now: 0,
            voters: voters.clone(),
            nodes: BTreeMap::new(),
            brokers: (1..=4)
                .map(|id| SimBroker {
                    id,
                    incarnation: 1,
                    epoch: None,
                    alive: true,
                    revive_at: 0,
                    next_heartbeat: 0,
                    shutting_down: false,
                })
                .collect(),
            faults,
            network: BTreeMap::new(),
            seq: 0,
            cut: BTreeSet::new(),
            partition_until: 0,
            next_token: 1,
            outstanding: BTreeMap::new(),
            truth: BTreeMap::new(),
            reference: MetadataImage::empty(),
            ref_next: 1,
            ref_digests: BTreeMap::new(),
            ref_images: BTreeMap::new(),
            leaders: BTreeMap::new(),
            topic_seq: 0,
            acked: 0,
            stats: BTreeMap::new(),
            final_token: None,
            final_answer: None,
        };
        for id in voters {
            sim.nodes.insert(
                id,
                SimNode {
                    disk: MemDisk::new(),
                    node: None,
                    restart_at: 0,
                    last_published: -1,
                    read_from: 1,
                    last_image: None,
                },
            );
            sim.start(id);
        }
        sim
    }

    fn fail(&self, what: String) -> ! {
        panic!(
            "seed {} voters {}: at {} ms: {what}\n(replay: MOLDAU_SIM_SEED={} cargo test -p quorum --test simulation)",
            self.seed,
            self.voters.len(),
            self.now,
            self.seed
        );
    }

    fn node_config(&mut self, id: u64) -> NodeConfig {
        // Per-node election timeouts, redrawn at each start, keep raft-rs's timeouts
        // deterministic while still staggered.
        let election = 10 + self.rng.below(10) as usize;
        NodeConfig {
            node_id: id,
            voters: self.voters.clone(),
            election_tick: election,
            max_election_tick: election + 1,
            heartbeat_tick: 2,
            snapshot_after_bytes: self.faults.snapshot_after_bytes,
            controller: ControllerConfig {
                node_id: id as i32,
                cluster_id: Some("sim-cluster".into()),
                num_partitions: 2,
                default_replication_factor: 2,
                broker_session_timeout_ms: SESSION_TIMEOUT_MS,
                broker_props: BTreeMap::new(),
                producer_id_block_size: 100,
                max_broker_partitions: 1000,
                max_broker_partitions_note: None,
                // Preferred-leader balancing often, so the checks see its elections too.
                auto_leader_rebalance: true,
                leader_imbalance_check_interval_ms: 1_000,
            },
            seed: self.seed ^ (id << 32) ^ self.now as u64,
        }
    }

    fn start(&mut self, id: u64) {
        let config = self.node_config(id);
        let disk = self.nodes[&id].disk.clone();
        let node = MetadataNode::new(config, disk, &quorum::raft_logger(id))
            .unwrap_or_else(|e| self.fail(format!("node {id} failed to restart: {e}")));
        let n = self.nodes.get_mut(&id).unwrap();
        n.node = Some(node);
        n.last_published = -1;
        n.last_image = None;
        self.drive(id);
    }

    fn count(&mut self, what: &'static str) {
        *self.stats.entry(what).or_default() += 1;
    }

    fn crash(&mut self, id: u64, lose_unsynced: bool) {
        self.count(if lose_unsynced {
            "crashes losing unsynced writes"
        } else {
            "crashes keeping unsynced writes"
        });
        let down = 5 + self.rng.below(60) as i64;
        let n = self.nodes.get_mut(&id).unwrap();
        n.node = None;
        n.disk.crash(lose_unsynced);
        n.restart_at = self.now + down * STEP_MS;
        // Requests submitted to it die with it.
        self.outstanding.retain(|_, (node, _, _)| *node != id);
    }

    fn send(&mut self, msg: Message) {
        let (from, to) = (msg.from, msg.to);
        if std::env::var("SIM_TRACE").is_ok() && self.now > 13000 {
            eprintln!(
                "{} send {:?} {}->{} term={} idx={} logterm={} commit={} reject={} n={}",
                self.now,
                msg.msg_type,
                from,
                to,
                msg.term,
                msg.index,
                msg.log_term,
                msg.commit,
                msg.reject,
                msg.entries.len()
            );
        }
        if self.cut.contains(&(from.min(to), from.max(to))) || self.rng.chance(self.faults.loss) {
            return;
        }
        let copies = if self.rng.chance(self.faults.duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let at = self.now + (1 + self.rng.below(self.faults.delay_max_steps) as i64) * STEP_MS;
            self.seq += 1;
            self.network.insert((at, self.seq), msg.clone());
        }
    }

    /// Runs a node's I/O to quiescence (maybe crashing it between a write and its sync).
    fn drive(&mut self, id: u64) {
        loop {
            let now = self.now;
            let crash_roll = self.rng.chance(self.faults.crash_mid_io);
            let lose = self.rng.chance(0.5);
            let Some(node) = self.nodes.get_mut(&id).and_then(|n| n.node.as_mut()) else {
                return;
            };
            if !node.poll_io() {
                break;
            }
            if crash_roll {
                self.count("crashes between a write and its sync");
                self.crash(id, lose);
                return;
            }
            if !node.sync() {
                break;
            }
            node.finish(now);
            self.collect(id);
        }
        self.collect(id);
    }

    fn collect(&mut self, id: u64) {
        let Some(node) = self.nodes.get_mut(&id).and_then(|n| n.node.as_mut()) else {
            return;
        };
        if let Some(f) = node.failure() {
            let f = f.to_string();
            self.fail(format!("node {id} failed: {f}"));
        }
        let out = node.take_output();
        for m in out.messages {
            self.send(m);
        }
        if let Some(p) = out.published {
            self.check_image(id, &p.image);
            let n = self.nodes.get_mut(&id).unwrap();
            if p.image.offset <= n.last_published && n.last_published >= 0 {
                let last = n.last_published;
                self.fail(format!(
                    "node {id} published offset {} after {last}",
                    p.image.offset
                ));
            }
            let prev = n.last_image.replace((p.image.clone(), digest(&p.image)));
            n.last_published = p.image.offset;
            if let Some((prev, _)) = prev {
                self.check_epochs(id, &prev, &p.image);
            }
        }
        for a in out.answers {
            let Some((_, req, expect)) = self.outstanding.remove(&a.token) else {
                self.fail(format!("answer for unknown token {}", a.token));
            };
            match &a.result {
                Err(e) if e.code == ErrorCode::NotController => {
                    self.count("answers: NOT_CONTROLLER")
                }
                Err(_) => self.count("answers: other errors"),
                Ok(_) => self.count("answers: ok"),
            }
            self.check_answer(&req, &a.result, a.offset);
            if self.final_token == Some(a.token) {
                self.final_answer = Some(a.result.clone());
            }
            self.apply_answer(expect, &a.result);
        }
    }

    fn check_image(&self, id: u64, image: &MetadataImage) {
        for t in image.topics.values() {
            for (i, p) in t.partitions.iter().enumerate() {
                if let Err(e) = p.check() {
                    self.fail(format!("node {id}: {}-{i}: {e}: {p:?}", t.name));
                }
                if p.leader != -1 && image.brokers.get(&p.leader).is_none_or(|b| b.fenced) {
                    self.fail(format!(
                        "node {id}: {}-{i} is led by fenced or unknown broker {}",
                        t.name, p.leader
                    ));
                }
            }
        }
    }

    fn check_epochs(&self, id: u64, prev: &MetadataImage, next: &MetadataImage) {
        for t in next.topics.values() {
            let Some(old) = prev.topic_by_id(t.id) else {
                continue;
            };
            for (i, (a, b)) in old.partitions.iter().zip(&t.partitions).enumerate() {
                if b.leader_epoch < a.leader_epoch || b.partition_epoch < a.partition_epoch {
                    self.fail(format!(
                        "node {id}: {}-{i} epochs went back: {a:?} -> {b:?}",
                        t.name
                    ));
                }
                if a.leader != b.leader && b.leader_epoch <= a.leader_epoch {
                    self.fail(format!(
                        "node {id}: {}-{i} leader changed without a new epoch",
                        t.name
                    ));
                }
                if a != b && b.partition_epoch <= a.partition_epoch {
                    self.fail(format!(
                        "node {id}: {}-{i} changed without a new partition epoch",
                        t.name
                    ));
                }
            }
        }
        for (bid, b) in &next.brokers {
            if prev.brokers.get(bid).is_some_and(|p| p.epoch > b.epoch) {
                self.fail(format!("node {id}: broker {bid} epoch went back"));
            }
        }
    }

    fn check_answer(
        &self,
        req: &Request,
        result: &Result<Reply, controller::ControllerError>,
        offset: i64,
    ) {
        let Ok(reply) = result else {
            return;
        };
        // The reference may not have reached the offset yet; checked when it has.
        let Some(image) = self.ref_images.get(&offset).cloned().or_else(|| {
            let (_, img) = self.ref_images.range(..=offset).next_back()?;
            (img.offset == offset).then(|| img.clone())
        }) else {
            return;
        };
        match (req, reply) {
            (
                Request::CreateTopics {
                    validate_only: false,
                    ..
                },
                Reply::CreateTopics(results),
            ) => {
                for r in results.iter().flatten() {
                    if image.topic_by_id(r.id).is_none() {
                        self.fail(format!(
                            "acknowledged topic {:?} missing at offset {offset}",
                            r.id
                        ));
                    }
                }
            }
            (_, Reply::DeleteTopics(results)) => {
                for (name, id) in results.iter().flatten() {
                    if image.topic_by_id(*id).is_some() {
                        self.fail(format!(
                            "acknowledged deletion of {name} not at offset {offset}"
                        ));
                    }
                }
            }
            (
                Request::AlterPartition {
                    broker_id, topics, ..
                },
                Reply::AlterPartition(Ok(results)),
            ) => {
                for ((topic_id, changes), outcomes) in topics.iter().zip(results) {
                    for (change, outcome) in changes.iter().zip(outcomes) {
                        let Ok(reg) = outcome else {
                            continue;
                        };
                        let committed = image.partition(*topic_id, change.partition);
                        let isr: Vec<i32> = change.new_isr.iter().map(|(b, _)| *b).collect();
                        let eligible = reg.isr.iter().all(|b| {
                            image
                                .brokers
                                .get(b)
                                .is_some_and(|b| !b.fenced && !b.in_controlled_shutdown)
                        });
                        if committed != Some(reg)
                            || reg.leader != *broker_id
                            || reg.leader_epoch != change.leader_epoch
                            || reg.isr != isr
                            || !eligible
                        {
                            self.fail(format!(
                                "accepted ISR change {change:?} from {broker_id} answered {reg:?}, committed {committed:?} at offset {offset}"
                            ));
                        }
                    }
                }
            }
            (Request::RegisterBroker(r), Reply::RegisterBroker(Ok(epoch)))
                if image.brokers.get(&r.node_id).map(|b| b.epoch) != Some(*epoch) =>
            {
                self.fail(format!(
                    "acknowledged registration of {} missing at offset {offset}",
                    r.node_id
                ));
            }
            _ => {}
        }
    }

    fn apply_answer(
        &mut self,
        expect: Expect,
        result: &Result<Reply, controller::ControllerError>,
    ) {
        if let Ok(Reply::AlterPartition(r)) = result {
            match r {
                Ok(topics) => {
                    for outcome in topics.iter().flatten() {
                        self.count(match outcome {
                            Ok(_) => "isr changes accepted",
                            Err(e) if e.code == ErrorCode::FencedLeaderEpoch => {
                                "isr changes fenced (stale leader epoch)"
                            }
                            Err(e) if e.code == ErrorCode::IneligibleReplica => {
                                "isr changes with ineligible replicas"
                            }
                            Err(_) => "isr changes refused otherwise",
                        });
                    }
                }
                Err(_) => self.count("isr requests refused (broker epoch)"),
            }
        }
        match (expect, result) {
            (Expect::Register(b, incarnation), Ok(Reply::RegisterBroker(Ok(epoch)))) => {
                let br = &mut self.brokers[b as usize - 1];
                if br.alive && br.incarnation == incarnation {
                    br.epoch = Some(*epoch);
                }
            }
            (Expect::Heartbeat(b), Ok(Reply::BrokerHeartbeat(r))) => {
                let br = &mut self.brokers[b as usize - 1];
                match r {
                    Ok(h) if h.should_shut_down => {
                        br.alive = false;
                        br.shutting_down = false;
                        br.epoch = None;
                        br.revive_at = self.now + 300;
                    }
                    Ok(_) => {}
                    Err(e)
                        if e.code == ErrorCode::StaleBrokerEpoch
                            || e.code == ErrorCode::BrokerIdNotRegistered =>
                    {
                        br.epoch = None
                    }
                    Err(_) => {}
                }
            }
            _ => {}
        }
    }

    /// Reads every node's committed log and checks it against the truth.
    fn observe(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            let Some(node) = self.nodes[&id].node.as_ref() else {
                continue;
            };
            let from = self.nodes[&id].read_from;
            let read = node.read_committed(from, u64::MAX);
            if let Some(snap) = read.snapshot {
                self.count("snapshots read");
                let index = snap.get_metadata().index;
                let records = metadata::decode_batch(&snap.data).unwrap();
                let image = MetadataImage::from_snapshot(index as i64, &records);
                if self.ref_next > index {
                    if let Some(&d) = self.ref_digests.get(&(index as i64)) {
                        if d != digest(&image) {
                            self.fail(format!(
                                "node {id}: snapshot at {index} differs from the log"
                            ));
                        }
                    }
                } else if self.ref_next <= index {
                    // The reference starts from this snapshot.
                    self.reference = image.clone();
                    self.ref_next = index + 1;
                    self.ref_digests.insert(index as i64, digest(&image));
                    self.ref_images.insert(index as i64, Arc::new(image));
                }
                self.nodes.get_mut(&id).unwrap().read_from = index + 1;
                continue;
            }
            for e in read.entries {
                match self.truth.get(&e.index) {
                    Some((term, data)) if *term != e.term || *data != e.data => self.fail(format!(
                        "committed entry {} differs: node {id} has term {} ({} bytes), another had term {term} ({} bytes)",
                        e.index,
                        e.term,
                        e.data.len(),
                        data.len()
                    )),
                    Some(_) => {}
                    None => {
                        self.truth.insert(e.index, (e.term, e.data.clone()));
                    }
                }
                self.nodes.get_mut(&id).unwrap().read_from = e.index + 1;
            }
        }
        while let Some((_, data)) = self.truth.get(&self.ref_next) {
            let records = metadata::decode_batch(data).unwrap();
            let mut delta = metadata::MetadataDelta::default();
            let idx = self.ref_next as i64;
            self.reference.apply_batch(idx, &records, &mut delta);
            self.reference.offset = idx;
            self.ref_digests.insert(idx, digest(&self.reference));
            self.ref_images
                .insert(idx, Arc::new(self.reference.clone()));
            self.ref_next += 1;
        }
        // Every published image equals the reference at its offset.
        for (id, n) in &self.nodes {
            if let Some((img, dig)) = &n.last_image {
                if let Some(&d) = self.ref_digests.get(&img.offset) {
                    if d != *dig {
                        self.fail(format!(
                            "node {id}: image at offset {} differs from the committed log",
                            img.offset
                        ));
                    }
                }
            }
        }
    }

    fn check_leaders(&mut self) {
        for (id, n) in &self.nodes {
            let Some(node) = &n.node else { continue };
            let s = node.status();
            if s.is_leader {
                if let Some(other) = self.leaders.insert(s.term, *id) {
                    if other != *id {
                        self.fail(format!("two leaders in term {}: {other} and {id}", s.term));
                    }
                }
            }
        }
    }

    fn submit(&mut self, target: u64, request: Request, expect: Expect) {
        let now = self.now;
        let token = self.next_token;
        self.next_token += 1;
        let Some(node) = self.nodes.get_mut(&target).and_then(|n| n.node.as_mut()) else {
            return;
        };
        self.outstanding
            .insert(token, (target, request.clone(), expect));
        node.submit(token, request, now);
        self.drive(target);
    }

    fn random_live_node(&mut self) -> Option<u64> {
        let live: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.node.is_some())
            .map(|(id, _)| *id)
            .collect();
        if live.is_empty() {
            return None;
        }
        // Mostly the leader, as a client that follows NOT_CONTROLLER would.
        if self.rng.chance(0.8) {
            if let Some(l) = live
                .iter()
                .find(|id| self.nodes[id].node.as_ref().is_some_and(|n| n.is_active()))
            {
                return Some(*l);
            }
        }
        Some(live[self.rng.below(live.len() as u64) as usize])
    }

    fn client_request(&mut self) {
        let Some(target) = self.random_live_node() else {
            return;
        };
        let image = self.nodes[&target].node.as_ref().unwrap().image().clone();
        let names: Vec<String> = image.topics.keys().map(|k| k.to_string()).collect();
        let pick = |rng: &mut Rng| -> Option<String> {
            (!names.is_empty()).then(|| names[rng.below(names.len() as u64) as usize].clone())
        };
        let request = match self.rng.below(10) {
            0..=3 => {
                self.topic_seq += 1;
                let name = if self.rng.chance(0.2) {
                    pick(&mut self.rng).unwrap_or_else(|| "dup".into())
                } else {
                    format!("t{}", self.topic_seq)
                };
                let mut configs = BTreeMap::new();
                if self.rng.chance(0.3) {
                    configs.insert(
                        "unclean.leader.election.enable".to_string(),
                        "true".to_string(),
                    );
                }
                Request::CreateTopics {
                    topics: vec![TopicSpec {
                        name,
                        partitions: 1 + self.rng.below(3) as i32,
                        replication_factor: 1 + self.rng.below(3) as i16,
                        assignment: Vec::new(),
                        configs,
                    }],
                    validate_only: self.rng.chance(0.1),
                    origin: Origin::Client,
                    quota: None,
                }
            }
            4 => match pick(&mut self.rng) {
                Some(n) => Request::DeleteTopics {
                    topics: vec![TopicRef::Name(n)],
                    quota: None,
                },
                None => return,
            },
            5 => match pick(&mut self.rng) {
                Some(n) => {
                    let count = image.topic(&n).map_or(1, |t| t.partitions.len() as i32) + 1;
                    Request::CreatePartitions {
                        topics: vec![(n, count, Vec::new())],
                        validate_only: false,
                        origin: Origin::Client,
                        quota: None,
                    }
                }
                None => return,
            },
            6 => match pick(&mut self.rng) {
                Some(n) => {
                    let mut changes = BTreeMap::new();
                    changes.insert(
                        "retention.ms".to_string(),
                        Some(format!("{}", 1000 + self.rng.below(9999))),
                    );
                    Request::AlterConfigs {
                        changes: vec![ConfigChange {
                            resource: ConfigResource::Topic(n),
                            changes,
                            replace_all: false,
                        }],
                        validate_only: false,
                        origin: Origin::Client,
                    }
                }
                None => return,
            },
            _ => {
                let b = 1 + self.rng.below(4) as i32;
                match self.brokers[b as usize - 1].epoch {
                    Some(e) => Request::AllocateProducerIds {
                        broker_id: b,
                        broker_epoch: e,
                    },
                    None => return,
                }
            }
        };
        self.submit(target, request, Expect::None);
    }

    fn broker_actions(&mut self, faults: bool) {
        for i in 0..self.brokers.len() {
            let now = self.now;
            let b = &mut self.brokers[i];
            if !b.alive {
                if now >= b.revive_at {
                    b.alive = true;
                    b.incarnation += 1;
                    b.epoch = None;
                    b.next_heartbeat = now;
                }
                continue;
            }
            if now < b.next_heartbeat {
                continue;
            }
            b.next_heartbeat = now + HEARTBEAT_MS;
            let (id, incarnation, epoch) = (b.id, b.incarnation, b.epoch);
            let roll = if faults { self.rng.below(1000) } else { 1000 };
            if roll < 3 {
                // kill -9: stop heartbeating; the controller fences it.
                let b = &mut self.brokers[i];
                b.alive = false;
                b.epoch = None;
                b.revive_at = now + 200 + self.rng.below(1500) as i64;
                continue;
            }
            if roll < 5 && epoch.is_some() {
                self.brokers[i].shutting_down = true;
            }
            let Some(target) = self.random_live_node() else {
                continue;
            };
            match epoch {
                None => {
                    let request = Request::RegisterBroker(controller::RegisterBroker {
                        node_id: id,
                        cluster_id: "sim-cluster".into(),
                        incarnation_id: format!("{id}-{incarnation}"),
                        endpoints: endpoint(id),
                        rack: Some(format!("r{}", id % 2)),
                        previous_broker_epoch: -1,
                    });
                    self.submit(target, request, Expect::Register(id, incarnation));
                }
                Some(e) => {
                    let offset = self.nodes[&target]
                        .node
                        .as_ref()
                        .map_or(0, |n| n.image().offset);
                    let request = Request::BrokerHeartbeat {
                        node_id: id,
                        broker_epoch: e,
                        current_metadata_offset: offset,
                        want_fence: false,
                        want_shutdown: self.brokers[i].shutting_down,
                    };
                    self.submit(target, request, Expect::Heartbeat(id));
                    if faults && self.rng.chance(0.3) {
                        if let Some(request) = self.isr_change(id, e, target) {
                            self.submit(target, request, Expect::None);
                        }
                    }
                }
            }
        }
    }

    /// An ISR change broker `id` proposes for a partition it leads in what `target` has
    /// applied (possibly stale): itself plus a random subset of the other replicas, each with
    /// the broker epoch it saw (or -1), sometimes naming an older leader epoch.
    fn isr_change(&mut self, id: i32, epoch: i64, target: u64) -> Option<Request> {
        let image = self.nodes.get(&target)?.node.as_ref()?.image().clone();
        let led: Vec<(TopicId, i32, PartitionRegistration)> = image
            .topics
            .values()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.leader == id)
                    .map(move |(i, p)| (t.id, i as i32, p.clone()))
            })
            .collect();
        if led.is_empty() {
            return None;
        }
        let (topic_id, index, p) = led[self.rng.below(led.len() as u64) as usize].clone();
        let mut isr = vec![(id, epoch)];
        for r in &p.replicas {
            if *r != id && self.rng.chance(0.6) {
                let seen = if self.rng.chance(0.5) {
                    -1
                } else {
                    image.brokers.get(r).map_or(-1, |b| b.epoch)
                };
                isr.push((*r, seen));
            }
        }
        let stale = i32::from(self.rng.chance(0.1));
        Some(Request::AlterPartition {
            broker_id: id,
            broker_epoch: epoch,
            topics: vec![(
                topic_id,
                vec![IsrChange {
                    partition: index,
                    leader_epoch: p.leader_epoch - stale,
                    partition_epoch: p.partition_epoch,
                    new_isr: isr,
                    leader_recovery_state: 0,
                }],
            )],
        })
    }

    fn step(&mut self, faults: bool) {
        self.now += STEP_MS;
        // Deliver what is due, in a seeded order.
        let due: Vec<(i64, u64)> = self
            .network
            .range(..=(self.now, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        let mut msgs: Vec<Message> = due.iter().filter_map(|k| self.network.remove(k)).collect();
        for i in (1..msgs.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            msgs.swap(i, j);
        }
        for m in msgs {
            let to = m.to;
            if let Some(node) = self.nodes.get_mut(&to).and_then(|n| n.node.as_mut()) {
                node.step(m);
                self.drive(to);
            }
        }
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in &ids {
            let now = self.now;
            // Clocks drift: a node misses a tick now and then. With raft-rs's election
            // timeouts fixed per node (so runs replay), this is what breaks split-vote ties.
            let skip = self.rng.chance(0.1);
            match self.nodes.get_mut(id).unwrap().node.as_mut() {
                Some(_) if skip => {}
                Some(node) => node.tick(now),
                None => {
                    if now >= self.nodes[id].restart_at {
                        self.start(*id);
                    }
                    continue;
                }
            }
            self.drive(*id);
        }
        if faults {
            if self.now >= self.partition_until && !self.cut.is_empty() {
                self.cut.clear();
            }
            if self.cut.is_empty() && self.rng.chance(self.faults.partition_per_step) {
                let side: Vec<u64> = self
                    .voters
                    .iter()
                    .copied()
                    .filter(|_| self.rng.chance(0.5))
                    .collect();
                for a in &self.voters {
                    for b in &self.voters {
                        if a < b && side.contains(a) != side.contains(b) {
                            self.cut.insert((*a, *b));
                        }
                    }
                }
                self.partition_until = self.now + (20 + self.rng.below(150) as i64) * STEP_MS;
                self.count("network partitions");
            }
            if self.rng.chance(self.faults.crash_per_step) {
                let id = self.voters[self.rng.below(self.voters.len() as u64) as usize];
                if self.nodes[&id].node.is_some() {
                    let lose = self.rng.chance(0.5);
                    self.crash(id, lose);
                }
            }
        }
        if faults && self.rng.chance(0.15) {
            self.client_request();
        }
        self.broker_actions(faults);
        self.observe();
        self.check_leaders();
    }

    fn run(&mut self, steps: u64) {
        for _ in 0..steps {
            self.step(true);
        }
        // Heal: no more faults, every node up.
        self.cut.clear();
        self.faults.loss = 0.0;
        self.faults.duplicate = 0.0;
        self.faults.crash_mid_io = 0.0;
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in &ids {
            if self.nodes[id].node.is_none() {
                self.start(*id);
            }
        }
        let mut converged = false;
        let mut stable = 0;
        for _ in 0..3000 {
            self.step(false);
            let active: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|id| self.nodes[id].node.as_ref().is_some_and(|n| n.is_active()))
                .collect();
            let offsets: BTreeSet<i64> = ids
                .iter()
                .map(|id| self.nodes[id].node.as_ref().unwrap().image().offset)
                .collect();
            if active.len() == 1 && offsets.len() == 1 {
                // Stable for a while (a node restarted at heal time may still unseat a leader).
                stable += 1;
                if stable >= 100 {
                    converged = true;
                    break;
                }
            } else {
                stable = 0;
            }
        }
        if !converged {
            let states: Vec<String> = ids
                .iter()
                .map(|id| {
                    let n = self.nodes[id].node.as_ref().unwrap();
                    format!(
                        "{:?} active={} offset={}",
                        n.status(),
                        n.is_active(),
                        n.image().offset
                    )
                })
                .collect();
            self.fail(format!(
                "the cluster did not converge after healing:\n{}",
                states.join("\n")
            ));
        }
        let digests: BTreeSet<u64> = ids
            .iter()
            .map(|id| digest(self.nodes[id].node.as_ref().unwrap().image()))
            .collect();
        if digests.len() != 1 {
            self.fail("converged offsets but different images".into());
        }
        // The healed cluster still takes changes (retried through leader changes, as a
        // client would).
        let name = format!("final-{}", self.topic_seq);
        let mut outcome = None;
        for _ in 0..500 {
            let Some(leader) = ids
                .iter()
                .copied()
                .find(|id| self.nodes[id].node.as_ref().is_some_and(|n| n.is_active()))
            else {
                self.step(false);
                continue;
            };
            let token = self.next_token;
            self.final_token = Some(token);
            self.submit(
                leader,
                Request::CreateTopics {
                    topics: vec![TopicSpec {
                        name: name.clone(),
                        partitions: 1,
                        replication_factor: 1,
                        assignment: Vec::new(),
                        configs: BTreeMap::new(),
                    }],
                    validate_only: false,
                    origin: Origin::Client,
                    quota: None,
                },
                Expect::None,
            );
            for _ in 0..500 {
                if self.final_answer.is_some() {
                    break;
                }
                self.step(false);
            }
            let usable = self.nodes[&leader].node.as_ref().map_or(0, |n| {
                n.image().brokers.values().filter(|b| b.is_usable()).count()
            });
            match self.final_answer.take() {
                Some(Ok(Reply::CreateTopics(r))) if r[0].is_ok() => {
                    outcome = Some(true);
                    break;
                }
                Some(Ok(Reply::CreateTopics(r)))
                    if usable == 0
                        && r[0].as_ref().err().map(|e| e.code)
                            == Some(ErrorCode::InvalidReplicationFactor) =>
                {
                    outcome = Some(false);
                    break;
                }
                Some(Err(e)) if e.code == ErrorCode::NotController => continue,
                other => self.fail(format!(
                    "the healed cluster did not create {name}: {other:?}"
                )),
            }
        }
        if outcome.is_none() {
            self.fail(format!(
                "the healed cluster never answered the creation of {name}"
            ));
        }
        self.acked = self.truth.len() as u64;
        let terms = self.leaders.len() as u64;
        *self.stats.entry("terms with a leader").or_default() += terms;
        for (_, data) in self.truth.values() {
            for r in metadata::decode_batch(data).unwrap() {
                let kind = match r {
                    metadata::MetadataRecord::FenceBroker { .. } => "records: FenceBroker",
                    metadata::MetadataRecord::UnfenceBroker { .. } => "records: UnfenceBroker",
                    metadata::MetadataRecord::BrokerControlledShutdown { .. } => {
                        "records: BrokerControlledShutdown"
                    }
                    metadata::MetadataRecord::RegisterBroker { .. } => "records: RegisterBroker",
                    metadata::MetadataRecord::PartitionChange { .. } => "records: PartitionChange",
                    metadata::MetadataRecord::Topic { .. } => "records: Topic",
                    metadata::MetadataRecord::RemoveTopic { .. } => "records: RemoveTopic",
                    _ => "records: other",
                };
                *self.stats.entry(kind).or_default() += 1;
            }
        }
    }
}

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("MOLDAU_SIM_SEED") {
        return vec![s.parse().expect("MOLDAU_SIM_SEED is a number")];
    }
    let n: u64 = std::env::var("MOLDAU_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    (0..n).collect()
}

fn run_all(voters: u64, steps: u64) {
    if std::env::var("SIM_TRACE").is_ok() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
            .with_test_writer()
            .try_init();
    }
    let started = std::time::Instant::now();
    let mut entries = 0;
    let seeds = seeds();
    let mut stats: BTreeMap<&'static str, u64> = BTreeMap::new();
    for &seed in &seeds {
        let mut sim = Sim::new(seed, voters);
        sim.run(steps);
        entries += sim.acked;
        for (k, v) in sim.stats {
            *stats.entry(k).or_default() += v;
        }
    }
    for (k, v) in &stats {
        eprintln!("  {k}: {v}");
    }
    eprintln!(
        "{voters} voters: {} seeded runs of {steps} steps, {entries} committed entries checked, in {:.1} s",
        seeds.len(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn three_voters_survive_seeded_faults() {
    run_all(3, 1500);
}

#[test]
fn five_voters_survive_seeded_faults() {
    run_all(5, 1500);
}

#[test]
fn topic_ids_are_the_same_everywhere() {
    // Sanity of the harness itself: a calm run converges with the same ids on every node.
    let mut sim = Sim::new(12345, 3);
    sim.run(300);
    for _ in 0..500 {
        let offsets: BTreeSet<i64> = sim
            .nodes
            .values()
            .map(|n| n.node.as_ref().unwrap().image().offset)
            .collect();
        if offsets.len() == 1 {
            break;
        }
        sim.step(false);
    }
    let images: Vec<BTreeMap<String, TopicId>> = sim
        .nodes
        .values()
        .map(|n| {
            n.node
                .as_ref()
                .unwrap()
                .image()
                .topics
                .values()
                .map(|t| (t.name.to_string(), t.id))
                .collect()
        })
        .collect();
    assert!(images.windows(2).all(|w| w[0] == w[1]));
    assert!(!images[0].is_empty());
}
