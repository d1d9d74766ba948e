//! One metadata quorum node as a sans-IO state machine: raft-rs's `RawNode` over a
//! [`RaftStore`], the [`Controller`], and the committed [`MetadataImage`].
//!
//! The runtime feeds it time ([`MetadataNode::tick`]), peers' messages
//! ([`MetadataNode::step`]) and requests ([`MetadataNode::submit`]), and drives its I/O:
//!
//! ```text
//! while node.poll_io() {       // takes raft's Ready and writes it to the disk (not synced)
//!     node.sync()?;            // fsync: Raft's persistence point
//!     node.finish(now);        // sends (as output), applies committed batches, answers
//! }
//! let out = node.take_output(); // messages to send, answers, the new image and its delta
//! ```
//!
//! Messages leave only after the writes they depend on are synced (persist before send).
//! Committed batches are applied in log order to the image; a request is answered when the
//! batch its decision proposed commits (with the offset to wait for), or NOT_CONTROLLER when
//! leadership is lost first. The controller is *active* from the moment this node, as leader,
//! has applied an entry of its own term (so everything committed before is in its image).

use crate::disk::Disk;
use crate::store::{RaftStore, StoreError};
use controller::{Controller, ControllerConfig, ControllerError, Reply, Request};
use metadata::{decode_batch, encode_batch, MetadataDelta, MetadataImage, MetadataRecord};
use model::ErrorCode;
use raft::eraftpb::{Entry, EntryType, Message, Snapshot};
use raft::{RawNode, Ready, StateRole};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// Names a request so its answer can be routed back; chosen by the runtime.
pub type Token = u64;

/// How a node runs.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub node_id: u64,
    /// The controller voters (`controller.quorum.voters`).
    pub voters: Vec<u64>,
    /// Ticks without a leader before a follower campaigns (at least; see `max_election_tick`).
    pub election_tick: usize,
    /// Election timeouts are drawn from `[election_tick, max_election_tick)`.
    pub max_election_tick: usize,
    pub heartbeat_tick: usize,
    /// Bytes of committed batches after which the image is snapshotted and the log cut.
    pub snapshot_after_bytes: u64,
    pub controller: ControllerConfig,
    /// Seeds the controller's id generator.
    pub seed: u64,
}

/// The answer to a submitted request: the controller's reply (or why there is none) and the
/// metadata offset a broker must have applied before it answers its client.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub token: Token,
    pub result: Result<Reply, ControllerError>,
    pub offset: i64,
}

/// A new committed image and what changed since the previous publication.
#[derive(Debug, Clone)]
pub struct Publication {
    pub image: Arc<MetadataImage>,
    pub delta: MetadataDelta,
}

/// What the runtime must do after driving the node.
#[derive(Debug, Default)]
pub struct Output {
    pub messages: Vec<Message>,
    pub answers: Vec<Answer>,
    pub published: Option<Publication>,
}

/// Committed entries (or the snapshot that replaces them) for an observer.
#[derive(Debug, Clone, Default)]
pub struct CommittedRead {
    pub snapshot: Option<Snapshot>,
    pub entries: Vec<Entry>,
    /// The highest offset applied here; everything up to it is committed.
    pub high_watermark: u64,
    pub leader_id: u64,
    pub term: u64,
}

/// A voter's progress as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoterProgress {
    pub id: u64,
    /// The leader's knowledge of the voter's log end (its matched index); -1 if unknown.
    pub log_end: i64,
}

/// The quorum as this node sees it (DescribeQuorum).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumStatus {
    pub node_id: u64,
    pub leader_id: u64,
    pub term: u64,
    pub is_leader: bool,
    pub commit_index: u64,
    pub applied: u64,
    pub last_index: u64,
    /// Filled on the leader only.
    pub voters: Vec<VoterProgress>,
}

struct Proposal {
    term: u64,
    answer: Option<(Token, Reply)>,
}

/// See the module docs.
pub struct MetadataNode<D: Disk> {
    config: NodeConfig,
    raw: RawNode<RaftStore<D>>,
    controller: Controller,
    image: Arc<MetadataImage>,
    applied: u64,
    applied_term: u64,
    proposals: BTreeMap<u64, Proposal>,
    /// Answers without records, released once the barrier offset is applied.
    waiting: VecDeque<(u64, Token, Reply)>,
    active_term: Option<u64>,
    ready: Option<Ready>,
    out: Output,
    bytes_since_snapshot: u64,
    failed: Option<String>,
}

impl<D: Disk> std::fmt::Debug for MetadataNode<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataNode")
            .field("node_id", &self.config.node_id)
            .field("applied", &self.applied)
            .finish()
    }
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    #[error("metadata snapshot or committed entry {index} is undecodable: {reason}")]
    Undecodable { index: u64, reason: String },
    #[error("start the quorum thread: {0}")]
    Thread(String),
}

impl<D: Disk> MetadataNode<D> {
    /// Opens the node on its disk and rebuilds the committed image (snapshot + committed log).
    /// A node that is the only voter campaigns at once: a one-node cluster needs no election.
    pub fn new(config: NodeConfig, disk: D, logger: &slog::Logger) -> Result<Self, NodeError> {
        let store = RaftStore::open(disk, &config.voters)?;
        let snap = store.latest_snapshot().clone();
        let snap_index = snap.get_metadata().index;
        let commit = store.hard_state().commit;
        let mut image = if snap_index > 0 {
            let records = decode_batch(&snap.data).map_err(|e| NodeError::Undecodable {
                index: snap_index,
                reason: e.to_string(),
            })?;
            MetadataImage::from_snapshot(snap_index as i64, &records)
        } else {
            MetadataImage::empty()
        };
        let mut applied_term = snap.get_metadata().term;
        let mut delta = MetadataDelta::default();
        for e in store.entries_between(snap_index + 1, commit + 1, u64::MAX) {
            if e.entry_type == EntryType::EntryNormal {
                let records = decode_batch(&e.data).map_err(|err| NodeError::Undecodable {
                    index: e.index,
                    reason: err.to_string(),
                })?;
                image.apply_batch(e.index as i64, &records, &mut delta);
            }
            image.offset = e.index as i64;
            applied_term = e.term;
        }
        let applied = commit.max(snap_index);
        let raft_config = raft::Config {
            id: config.node_id,
            election_tick: config.election_tick,
            heartbeat_tick: config.heartbeat_tick,
            min_election_tick: config.election_tick,
            max_election_tick: config.max_election_tick.max(config.election_tick + 1),
            applied,
            check_quorum: true,
            pre_vote: true,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            ..Default::default()
        };
        let mut raw = RawNode::new(&raft_config, store, logger)?;
        if config.voters == [config.node_id] {
            raw.campaign()?;
        }
        let image = Arc::new(image);
        let mut controller = Controller::new(config.controller.clone(), config.seed);
        controller.on_commit(image.clone(), 0);
        let out = Output {
            published: Some(Publication {
                image: image.clone(),
                delta: MetadataDelta {
                    full: true,
                    ..MetadataDelta::default()
                },
            }),
            ..Output::default()
        };
        Ok(MetadataNode {
            config,
            raw,
            controller,
            image,
            applied,
            applied_term,
            proposals: BTreeMap::new(),
            waiting: VecDeque::new(),
            active_term: None,
            ready: None,
            out,
            bytes_since_snapshot: 0,
            failed: None,
        })
    }

    pub fn node_id(&self) -> u64 {
        self.config.node_id
    }

    /// The committed image.
    pub fn image(&self) -> &Arc<MetadataImage> {
        &self.image
    }

    pub fn applied(&self) -> u64 {
        self.applied
    }

    pub fn controller(&self) -> &Controller {
        &self.controller
    }

    /// Whether this node is the active controller.
    pub fn is_active(&self) -> bool {
        self.active_term.is_some()
    }

    /// Why the node stopped working (a failed disk write, an undecodable committed entry).
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    pub fn leader_id(&self) -> Option<u64> {
        Some(self.raw.raft.leader_id).filter(|&l| l != raft::INVALID_ID)
    }

    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    /// The index of the last entry in this node's Raft log (committed or not).
    pub fn last_index(&self) -> u64 {
        self.raw.raft.raft_log.last_index()
    }

    /// Takes what the last calls produced.
    pub fn take_output(&mut self) -> Output {
        std::mem::take(&mut self.out)
    }

    fn answer(&mut self, token: Token, result: Result<Reply, ControllerError>, offset: i64) {
        self.out.answers.push(Answer {
            token,
            result,
            offset,
        });
    }

    fn fail(&mut self, reason: String) {
        if self.failed.is_none() {
            tracing::error!(node = self.config.node_id, %reason, "metadata quorum node stopped");
            self.failed = Some(reason);
        }
        self.deactivate();
    }

    fn deactivate(&mut self) {
        if self.active_term.take().is_none() && self.proposals.is_empty() && self.waiting.is_empty()
        {
            return;
        }
        self.controller.deactivate();
        let offset = self.image.offset;
        let proposals = std::mem::take(&mut self.proposals);
        for p in proposals.into_values() {
            if let Some((token, _)) = p.answer {
                self.answer(token, Err(ControllerError::not_controller()), offset);
            }
        }
        while let Some((_, token, _)) = self.waiting.pop_front() {
            self.answer(token, Err(ControllerError::not_controller()), offset);
        }
    }

    fn check_leadership(&mut self) {
        if let Some(term) = self.active_term {
            if self.raw.raft.state != StateRole::Leader || self.raw.raft.term != term {
                self.deactivate();
            }
        }
    }

    /// Proposes a decision's records; `answer` goes out when they commit.
    fn propose(&mut self, records: Vec<MetadataRecord>, answer: Option<(Token, Reply)>) {
        let data = encode_batch(&records);
        let before = self.raw.raft.raft_log.last_index();
        match self.raw.propose(Vec::new(), data) {
            Ok(()) if self.raw.raft.raft_log.last_index() > before => {
                let index = self.raw.raft.raft_log.last_index();
                let term = self.raw.raft.term;
                self.proposals.insert(index, Proposal { term, answer });
            }
            result => {
                tracing::debug!(?result, "proposal dropped");
                self.controller.abandon_last();
                if let Some((token, _)) = answer {
                    let offset = self.image.offset;
                    self.answer(token, Err(ControllerError::not_controller()), offset);
                }
            }
        }
    }

    /// Decides a request; its answer comes out (in [`Output::answers`]) once it is settled.
    pub fn submit(&mut self, token: Token, request: Request, now: i64) {
        let offset = self.image.offset;
        if self.failed.is_some() {
            let e = ControllerError::new(
                ErrorCode::KafkaStorageError,
                "the metadata log of this controller failed",
            );
            return self.answer(token, Err(e), offset);
        }
        if self.active_term.is_none() {
            return self.answer(token, Err(ControllerError::not_controller()), offset);
        }
        match self.controller.handle(request, now) {
            Err(e) => self.answer(token, Err(e), offset),
            Ok(d) if d.records.is_empty() => match self.proposals.keys().next_back() {
                None => self.answer(token, Ok(d.reply), offset),
                Some(&barrier) => self.waiting.push_back((barrier, token, d.reply)),
            },
            Ok(d) => self.propose(d.records, Some((token, d.reply))),
        }
    }

    /// One tick of logical time (elections, heartbeats) and the controller's timers.
    pub fn tick(&mut self, now: i64) {
        if self.failed.is_some() {
            return;
        }
        self.raw.tick();
        self.check_leadership();
        if self.active_term.is_some() {
            let d = self.controller.tick(now);
            if !d.records.is_empty() {
                self.propose(d.records, None);
            }
        }
    }

    /// A message from a peer.
    pub fn step(&mut self, msg: Message) {
        if self.failed.is_some() {
            return;
        }
        // A leader's heartbeat commits up to what this voter acknowledged. Beyond this log's
        // end, the log lost entries it had acknowledged (deleted, truncated, restored from an
        // old copy): Raft's safety rests on them, so this voter stops rather than vote or
        // serve (raft-rs would panic here).
        let last = self.raw.raft.raft_log.last_index();
        if msg.get_msg_type() == raft::eraftpb::MessageType::MsgHeartbeat && msg.commit > last {
            self.fail(format!(
                "the metadata log of this voter ends at offset {last}, but leader {} says it acknowledged offset {}: entries it acknowledged were lost (a deleted, truncated or restored metadata dir); restore this node's data dir (a voter cannot rejoin with less than it acknowledged)",
                msg.from, msg.commit
            ));
            return;
        }
        if let Err(e) = self.raw.step(msg) {
            tracing::debug!(error = %e, "raft step");
        }
        self.check_leadership();
    }

    /// Takes raft's pending Ready, if any, and writes it to the disk (unsynced). Returns
    /// whether there is I/O to finish with [`MetadataNode::sync`] and [`MetadataNode::finish`].
    pub fn poll_io(&mut self) -> bool {
        if self.ready.is_some() {
            return true;
        }
        if self.failed.is_some() || !self.raw.has_ready() {
            return false;
        }
        let rd = self.raw.ready();
        let store = self.raw.mut_store();
        let mut result = Ok(());
        if !rd.snapshot().is_empty() {
            result = store.apply_snapshot(rd.snapshot().clone());
        }
        if result.is_ok() && !rd.entries().is_empty() {
            result = store.append(rd.entries());
        }
        if let (Ok(()), Some(hs)) = (&result, rd.hs()) {
            result = store.set_hard_state(hs);
        }
        if let Err(e) = result {
            self.fail(e.to_string());
            return false;
        }
        self.ready = Some(rd);
        true
    }

    /// Makes the writes of [`MetadataNode::poll_io`] durable.
    pub fn sync(&mut self) -> bool {
        if let Err(e) = self.raw.mut_store().sync() {
            self.fail(e.to_string());
            return false;
        }
        true
    }

    /// After the sync: releases messages, applies committed entries, answers requests.
    pub fn finish(&mut self, now: i64) {
        let Some(mut rd) = self.ready.take() else {
            return;
        };
        if self.failed.is_some() {
            return;
        }
        self.out.messages.extend(rd.take_messages());
        self.out.messages.extend(rd.take_persisted_messages());
        if !rd.snapshot().is_empty() {
            let snap = rd.snapshot().clone();
            self.load_snapshot(&snap);
        }
        let committed = rd.take_committed_entries();
        self.apply_committed(committed);
        let mut light = self.raw.advance(rd);
        if let Some(commit) = light.commit_index() {
            self.raw.mut_store().set_commit(commit);
        }
        self.out.messages.extend(light.take_messages());
        let committed = light.take_committed_entries();
        self.apply_committed(committed);
        self.raw.advance_apply();
        // A snapshot is one message: count it as delivered at once. If it is lost, the
        // follower rejects the appends that follow and the leader sends it again.
        let snapshots_to: Vec<u64> = self
            .out
            .messages
            .iter()
            .filter(|m| m.msg_type == raft::eraftpb::MessageType::MsgSnapshot)
            .map(|m| m.to)
            .collect();
        for to in snapshots_to {
            self.raw.report_snapshot(to, raft::SnapshotStatus::Finish);
        }
        self.check_leadership();
        self.maybe_activate(now);
        self.maybe_snapshot();
    }

    /// Drives all pending I/O with a disk that syncs in place (production and simple tests).
    pub fn run_io(&mut self, now: i64) {
        while self.poll_io() {
            if !self.sync() {
                return;
            }
            self.finish(now);
        }
    }

    fn maybe_activate(&mut self, now: i64) {
        let term = self.raw.raft.term;
        if self.raw.raft.state == StateRole::Leader
            && self.active_term != Some(term)
            && self.applied_term == term
            && self.failed.is_none()
        {
            self.active_term = Some(term);
            let d = self.controller.activate(now);
            if !d.records.is_empty() {
                self.propose(d.records, None);
            }
        }
    }

    fn publish(&mut self, delta: MetadataDelta) {
        match &mut self.out.published {
            Some(p) => {
                p.image = self.image.clone();
                p.delta.merge(delta);
            }
            None => {
                self.out.published = Some(Publication {
                    image: self.image.clone(),
                    delta,
                })
            }
        }
    }

    fn load_snapshot(&mut self, snap: &Snapshot) {
        let meta = snap.get_metadata();
        let records = match decode_batch(&snap.data) {
            Ok(r) => r,
            Err(e) => {
                return self.fail(format!(
                    "metadata snapshot at {} is undecodable: {e}",
                    meta.index
                ))
            }
        };
        self.image = Arc::new(MetadataImage::from_snapshot(meta.index as i64, &records));
        self.applied = meta.index;
        self.applied_term = meta.term;
        self.bytes_since_snapshot = 0;
        self.controller.on_commit(self.image.clone(), 0);
        self.publish(MetadataDelta {
            full: true,
            ..MetadataDelta::default()
        });
    }

    fn apply_committed(&mut self, entries: Vec<Entry>) {
        if entries.iter().all(|e| e.index <= self.applied) {
            return;
        }
        let mut image = (*self.image).clone();
        let mut delta = MetadataDelta::default();
        let mut ours = 0;
        for e in entries {
            if e.index <= self.applied {
                continue;
            }
            if e.entry_type == EntryType::EntryNormal {
                match decode_batch(&e.data) {
                    Ok(records) => image.apply_batch(e.index as i64, &records, &mut delta),
                    Err(err) => {
                        return self.fail(format!(
                            "committed metadata entry {} is undecodable: {err}",
                            e.index
                        ))
                    }
                }
            }
            image.offset = e.index as i64;
            self.applied = e.index;
            self.applied_term = e.term;
            self.bytes_since_snapshot += e.data.len() as u64;
            if let Some(p) = self.proposals.remove(&e.index) {
                if p.term == e.term {
                    ours += 1;
                    if let Some((token, reply)) = p.answer {
                        self.answer(token, Ok(reply), e.index as i64);
                    }
                } else if let Some((token, _)) = p.answer {
                    self.answer(
                        token,
                        Err(ControllerError::not_controller()),
                        e.index as i64,
                    );
                }
            }
            while self.waiting.front().is_some_and(|(b, _, _)| *b <= e.index) {
                if let Some((_, token, reply)) = self.waiting.pop_front() {
                    self.answer(token, Ok(reply), e.index as i64);
                }
            }
        }
        self.image = Arc::new(image);
        self.controller.on_commit(self.image.clone(), ours);
        self.publish(delta);
    }

    fn maybe_snapshot(&mut self) {
        if self.bytes_since_snapshot < self.config.snapshot_after_bytes
            || self.applied <= self.raw.store().snapshot_index()
        {
            return;
        }
        let data = encode_batch(&self.image.to_records());
        let applied = self.applied;
        if let Err(e) = self.raw.mut_store().create_snapshot(applied, data.into()) {
            return self.fail(e.to_string());
        }
        self.bytes_since_snapshot = 0;
        tracing::debug!(
            node = self.config.node_id,
            index = applied,
            "metadata snapshot taken"
        );
    }

    /// Committed entries from `from` on (or the snapshot that replaces them) for an observer.
    pub fn read_committed(&self, from: u64, max_bytes: u64) -> CommittedRead {
        let store = self.raw.store();
        let snap_index = store.snapshot_index();
        let mut read = CommittedRead {
            high_watermark: self.applied,
            leader_id: self.raw.raft.leader_id,
            term: self.raw.raft.term,
            ..CommittedRead::default()
        };
        if snap_index > 0 && from <= snap_index {
            read.snapshot = Some(store.latest_snapshot().clone());
        } else {
            read.entries = store.entries_between(from.max(1), self.applied + 1, max_bytes);
        }
        read
    }

    /// The quorum as this node sees it.
    pub fn status(&self) -> QuorumStatus {
        let raft = &self.raw.raft;
        let is_leader = raft.state == StateRole::Leader;
        let mut voters: Vec<VoterProgress> = if is_leader {
            raft.prs()
                .iter()
                .map(|(id, p)| VoterProgress {
                    id: *id,
                    log_end: if *id == self.config.node_id {
                        raft.raft_log.last_index() as i64
                    } else {
                        p.matched as i64
                    },
                })
                .collect()
        } else {
            self.config
                .voters
                .iter()
                .map(|id| VoterProgress {
                    id: *id,
                    log_end: -1,
                })
                .collect()
        };
        voters.sort_by_key(|v| v.id);
        QuorumStatus {
            node_id: self.config.node_id,
            leader_id: raft.leader_id,
            term: raft.term,
            is_leader,
            commit_index: raft.raft_log.committed,
            applied: self.applied,
            last_index: raft.raft_log.last_index(),
            voters,
        }
    }
}
