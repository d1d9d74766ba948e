//! `Replica`: one partition replica's replication state (role, epochs, ISR, follower
//! progress, high watermark, pending acks) and the decisions Kafka's leader and follower make.

use std::collections::{BTreeMap, BTreeSet};

use model::{ErrorCode, LeaderEpoch, NodeId, Offset};

use crate::types::*;

/// The replication state of one partition replica on this broker.
///
/// Lifecycle: created when the broker hosts the partition (role none, HW from the HW
/// checkpoint clamped to the log), then driven by `apply_metadata` (committed partition
/// state), `on_log_changed` (after every append, fsync progress, truncation), `fetch`
/// (followers' and consumers' fetches, as leader), `on_fetch_response` (as follower),
/// `on_alter_partition_response` and `tick`. Single-threaded: the runtime serialises calls
/// per partition (one lock or one task).
#[derive(Debug)]
pub struct Replica {
    config: ReplicaConfig,
    /// The committed partition state this replica acts on (never goes back).
    state: Option<PartitionState>,
    role: Role,
    hw: Offset,
    /// The highest HW this replica reached as the partition's only replica, where the HW
    /// moves with the log end, ahead of the fsync. Once the replica set grows (a
    /// reassignment), the HW may stay past the durable end up to here until the fsync the
    /// leader then asks for completes; meanwhile followers are told the durable end.
    single_replica_hw: Offset,
    /// Fetch ids grow over the replica's whole life, so an answer to a fetch of an earlier
    /// leadership can never be taken for the current one.
    next_fetch_id: u64,
}

/// How soon a follower fetches again when the leader answered UNKNOWN_LEADER_EPOCH (it has
/// not applied our newer epoch yet), instead of the full fetch backoff.
const LEADER_BEHIND_RETRY_MS: i64 = 20;

#[derive(Debug)]
enum Role {
    None,
    Leader(Leader),
    Follower(Follower),
}

#[derive(Debug)]
struct Leader {
    /// The LEO when this leadership began: a follower must reach it to rejoin the ISR.
    epoch_start_offset: Offset,
    followers: BTreeMap<NodeId, Progress>,
    /// An ISR change sent to the controller and not answered yet (one at a time).
    pending: Option<PendingIsr>,
    /// Members of refused proposals based on the current partition epoch: another copy of
    /// such a request (a retry, a delayed duplicate) may still be committed once the reason
    /// for the refusal is gone, so they count for the HW until a newer partition epoch is
    /// known (then no request based on the old one can apply).
    unresolved: BTreeSet<NodeId>,
    /// acks=all waits: (required offset, id) -> deadline.
    acks: BTreeMap<(Offset, AckId), i64>,
}

#[derive(Debug)]
struct Progress {
    /// The follower's durable log end, as of its last fetch in this epoch; None until then.
    fetch_offset: Option<Offset>,
    last_caught_up_ms: i64,
    last_fetch_ms: i64,
    /// The leader's LEO at the follower's last fetch.
    last_fetch_leader_leo: Offset,
}

#[derive(Debug)]
struct PendingIsr {
    request: AlterPartitionRequest,
    sent_ms: i64,
    /// The outcome is unknown and only the metadata image can tell: not retried.
    awaiting_metadata: bool,
}

#[derive(Debug)]
struct Follower {
    leader: NodeId,
    /// The leader's HW from its last answer in this epoch, if any.
    leader_hw: Option<Offset>,
    fetch: FetchState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FetchState {
    /// Nothing in flight: fetch as soon as the log is durable.
    Ready,
    InFlight {
        fetch_id: u64,
        sent_ms: i64,
    },
    /// The last answer asked the runtime to append or truncate; waiting for `on_log_changed`.
    AwaitingLog,
    Backoff {
        until_ms: i64,
    },
}

impl Replica {
    /// A replica with no role yet. `hw` is the recovered high watermark (Kafka's
    /// replication-offset-checkpoint); it is clamped to the log.
    pub fn new(config: ReplicaConfig, hw: Offset, log: &impl LogView) -> Replica {
        let hw = hw.clamp(log.log_start_offset(), log.log_end_offset());
        Replica {
            config,
            state: None,
            role: Role::None,
            hw,
            single_replica_hw: 0,
            next_fetch_id: 1,
        }
    }

    pub fn high_watermark(&self) -> Offset {
        self.hw
    }

    /// A changed `min.insync.replicas` (topic or broker default, applied without a restart):
    /// whether it changed (then the caller lets the replica act on it: `on_log_changed`).
    pub fn set_min_insync_replicas(&mut self, min_insync_replicas: usize) -> bool {
        let changed = self.config.min_insync_replicas != min_insync_replicas;
        self.config.min_insync_replicas = min_insync_replicas;
        changed
    }

    pub fn leader_epoch(&self) -> Option<LeaderEpoch> {
        self.state.as_ref().map(|s| s.leader_epoch)
    }

    pub fn partition_state(&self) -> Option<&PartitionState> {
        self.state.as_ref()
    }

    pub fn is_leader(&self) -> bool {
        matches!(self.role, Role::Leader(_))
    }

    pub fn is_follower(&self) -> bool {
        matches!(self.role, Role::Follower(_))
    }

    /// The ISR the HW is computed over: the committed ISR plus any member a pending
    /// expansion adds (a pending shrink still counts the leaving member), as KIP-497 says,
    /// plus the members of refused proposals that might still be committed.
    pub fn maximal_isr(&self) -> Vec<NodeId> {
        let mut isr: BTreeSet<NodeId> = self
            .state
            .as_ref()
            .map(|s| s.isr.iter().copied().collect())
            .unwrap_or_default();
        if let Role::Leader(l) = &self.role {
            if let Some(p) = &l.pending {
                isr.extend(p.request.new_isr.iter().copied());
            }
            isr.extend(l.unresolved.iter().copied());
        }
        isr.into_iter().collect()
    }

    /// Applies the partition's committed state from the metadata image: becomes leader,
    /// follower or nothing. Stale states (an older leader or partition epoch) are ignored.
    pub fn apply_metadata(
        &mut self,
        now_ms: i64,
        new: PartitionState,
        log: &impl LogView,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let me = self.config.node_id;
        if let Some(old) = &self.state {
            if (new.leader_epoch, new.partition_epoch) < (old.leader_epoch, old.partition_epoch)
                || (new.leader_epoch == old.leader_epoch
                    && new.partition_epoch == old.partition_epoch)
            {
                return out;
            }
        }
        let new_epoch = self.state.as_ref().map(|s| s.leader_epoch) != Some(new.leader_epoch);
        let hosted = new.replicas.contains(&me);
        match new.leader {
            Some(l) if l == me && hosted => {
                if new_epoch || !self.is_leader() {
                    // Still the leader, in a new epoch (the controller bumps it when a replica
                    // leaves the replica set): the acks=all appends waiting here stay. They
                    // are in this leader's log, which the new epoch continues, and are
                    // answered once the HW passes them (Kafka's delayed produces wait on the
                    // HW alone).
                    let waiting = match &mut self.role {
                        Role::Leader(l) => std::mem::take(&mut l.acks),
                        _ => BTreeMap::new(),
                    };
                    self.become_leader(now_ms, &new, log, &mut out);
                    if let Role::Leader(l) = &mut self.role {
                        l.acks = waiting;
                    }
                    self.state = Some(new);
                } else {
                    // Same leadership, new partition epoch: an ISR or replica-set change.
                    self.state = Some(new);
                    if let Role::Leader(lead) = &mut self.role {
                        lead.pending = None;
                        lead.unresolved.clear();
                        let state = self.state.as_ref().expect("state set above");
                        lead.followers.retain(|id, _| state.replicas.contains(id));
                        for &r in &state.replicas {
                            if r != me {
                                lead.followers.entry(r).or_insert(Progress {
                                    fetch_offset: None,
                                    last_caught_up_ms: 0,
                                    last_fetch_ms: 0,
                                    last_fetch_leader_leo: -1,
                                });
                            }
                        }
                    }
                }
                self.leader_progress(now_ms, log, &mut out);
            }
            Some(l) if hosted => {
                if new_epoch || !matches!(&self.role, Role::Follower(f) if f.leader == l) {
                    self.fail_acks(ErrorCode::NotLeaderOrFollower, &mut out);
                    self.role = Role::Follower(Follower {
                        leader: l,
                        leader_hw: None,
                        fetch: FetchState::Ready,
                    });
                    self.state = Some(new);
                    if self.config.mutation == Mutation::TruncateToHw
                        && self.hw < log.log_end_offset()
                    {
                        // Pre-KIP-101: truncate to the HW on becoming a follower.
                        if let Role::Follower(f) = &mut self.role {
                            f.fetch = FetchState::AwaitingLog;
                        }
                        out.push(Action::Truncate { offset: self.hw });
                        return out;
                    }
                    self.follower_next(now_ms, log, &mut out);
                } else {
                    self.state = Some(new);
                }
            }
            _ => {
                self.fail_acks(ErrorCode::NotLeaderOrFollower, &mut out);
                self.role = Role::None;
                self.state = Some(new);
            }
        }
        out
    }

    fn become_leader(
        &mut self,
        now_ms: i64,
        new: &PartitionState,
        log: &impl LogView,
        out: &mut Vec<Action>,
    ) {
        let me = self.config.node_id;
        let leo = log.log_end_offset();
        let followers = new
            .replicas
            .iter()
            .filter(|&&r| r != me)
            .map(|&r| {
                (
                    r,
                    Progress {
                        fetch_offset: None,
                        // ISR members get a full lag period to show up (Kafka does the same).
                        last_caught_up_ms: if new.isr.contains(&r) { now_ms } else { 0 },
                        last_fetch_ms: 0,
                        last_fetch_leader_leo: -1,
                    },
                )
            })
            .collect();
        self.role = Role::Leader(Leader {
            epoch_start_offset: leo,
            followers,
            pending: None,
            unresolved: BTreeSet::new(),
            acks: BTreeMap::new(),
        });
        out.push(Action::AssignLeaderEpoch {
            epoch: new.leader_epoch,
            start_offset: leo,
        });
    }

    /// The local log changed: an append (leader or replicated), fsync progress, a
    /// truncation. Recomputes the HW (leader) or sends the next fetch (follower).
    pub fn on_log_changed(&mut self, now_ms: i64, log: &impl LogView) -> Vec<Action> {
        let mut out = Vec::new();
        match &mut self.role {
            Role::Leader(_) => self.leader_progress(now_ms, log, &mut out),
            Role::Follower(f) => {
                if f.fetch == FetchState::AwaitingLog {
                    f.fetch = FetchState::Ready;
                }
                // After a restart at the leader's log start, nothing below it exists.
                if self.hw < log.log_start_offset() {
                    self.hw = log.log_start_offset();
                    out.push(Action::HighWatermark(self.hw));
                }
                self.follower_learn_hw(log, &mut out);
                self.follower_next(now_ms, log, &mut out);
            }
            Role::None => {}
        }
        self.check(log);
        out
    }

    /// Before a produce's append: Kafka's checks. NOT_LEADER_OR_FOLLOWER unless leader;
    /// NOT_ENOUGH_REPLICAS for acks=all when the committed ISR is below
    /// `min.insync.replicas`.
    pub fn check_produce(&self, acks_all: bool) -> Result<LeaderEpoch, ErrorCode> {
        let (Role::Leader(_), Some(state)) = (&self.role, &self.state) else {
            return Err(ErrorCode::NotLeaderOrFollower);
        };
        if acks_all && state.isr.len() < effective_min_isr(&self.config, state) {
            return Err(ErrorCode::NotEnoughReplicas);
        }
        Ok(state.leader_epoch)
    }

    /// After an acks=all append ending at `next_offset` (last offset + 1): waits until the
    /// HW reaches it (and, on a single replica, until it is on disk), or `deadline_ms`
    /// (REQUEST_TIMED_OUT). May complete at once.
    pub fn wait_for_ack(
        &mut self,
        id: AckId,
        next_offset: Offset,
        deadline_ms: i64,
        log: &impl LogView,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let Role::Leader(l) = &mut self.role else {
            out.push(Action::AckDone {
                id,
                error: ErrorCode::NotLeaderOrFollower,
            });
            return out;
        };
        l.acks.insert((next_offset, id), deadline_ms);
        if log.durable_offset() < next_offset {
            out.push(Action::Flush {
                offset: log.log_end_offset(),
            });
        }
        self.complete_acks(log, &mut out);
        out
    }

    /// Whether this replica is the partition's only replica (replication factor 1): then
    /// nothing is copied anywhere, and the HW moves to the log end with every append, as
    /// it did before replication (and as Kafka does); acks=all still waits for the
    /// group-committed fsync of its batch. Consumers may see a record a crash then takes
    /// (an acks=1 record, never an acknowledged acks=all one).
    pub fn is_single_replica(&self) -> bool {
        self.state
            .as_ref()
            .is_some_and(|s| s.replicas.len() == 1 && s.replicas[0] == self.config.node_id)
    }

    /// Answers one partition of a Fetch (a follower's when `replica_id` is set, else a
    /// consumer's), as Kafka's leader does: epoch fencing, leadership, divergence, range;
    /// a follower's fetch also records its (durable) progress.
    pub fn fetch(
        &mut self,
        now_ms: i64,
        req: FetchRequest,
        log: &impl LogView,
    ) -> (FetchAnswer, Vec<Action>) {
        let mut out = Vec::new();
        let mut answer = FetchAnswer {
            error: ErrorCode::None,
            high_watermark: self.answered_hw(req.replica_id, log),
            log_start_offset: log.log_start_offset(),
            log_end_offset: log.log_end_offset(),
            current_leader: self.current_leader(),
            diverging_epoch: None,
            read: None,
        };
        if let Err(e) = self.check_epoch_and_leadership(req.current_leader_epoch) {
            answer.error = e;
            return (answer, out);
        }
        let checks = self.config.mutation != Mutation::NoEpochChecks;
        if let Some(r) = req.replica_id {
            let is_replica = self
                .state
                .as_ref()
                .is_some_and(|s| s.replicas.contains(&r) && r != self.config.node_id);
            if !is_replica {
                answer.error = ErrorCode::NotLeaderOrFollower;
                return (answer, out);
            }
        }
        if let (Some(last), true) = (req.last_fetched_epoch, checks) {
            let end = log.end_offset_for_epoch(last);
            if end.is_undefined() {
                answer.error = ErrorCode::OffsetOutOfRange;
                return (answer, out);
            }
            // Moldau, stronger than Kafka: a follower whose last epoch is older than anything
            // this log still has (retention removed it: the answer ends at or before the
            // log start) holds records here nobody can vouch for; it is told to diverge and
            // restarts at this log's start.
            let unverifiable = req.replica_id.is_some()
                && end.end_offset <= log.log_start_offset()
                && req.fetch_offset >= end.end_offset;
            if end.epoch < last || end.end_offset < req.fetch_offset || unverifiable {
                // No progress is recorded for a diverging follower: its log past
                // `end.end_offset` is not this leader's.
                answer.diverging_epoch = Some(end);
                return (answer, out);
            }
        }
        if req.fetch_offset < log.log_start_offset() || req.fetch_offset > log.log_end_offset() {
            answer.error = ErrorCode::OffsetOutOfRange;
            return (answer, out);
        }
        match req.replica_id {
            Some(r) => {
                self.record_follower_fetch(
                    now_ms,
                    r,
                    req.fetch_offset,
                    req.isr_eligible,
                    log,
                    &mut out,
                );
                answer.high_watermark = self.answered_hw(req.replica_id, log);
                answer.read = Some(ReadRange {
                    from: req.fetch_offset,
                    upper_bound: log.log_end_offset(),
                });
            }
            None => {
                answer.read = Some(ReadRange {
                    from: req.fetch_offset,
                    upper_bound: self.hw,
                });
            }
        }
        self.check(log);
        (answer, out)
    }

    /// The HW a fetch is answered with: a follower is never told more than this leader holds
    /// on disk (past it only while a replica set that grew from one waits for its fsync: a
    /// crash could still take that tail, and a follower must never truncate below its HW
    /// after a clean election).
    fn answered_hw(&self, replica_id: Option<NodeId>, log: &impl LogView) -> Offset {
        match replica_id {
            Some(_) => self
                .hw
                .min(log.durable_offset().max(log.log_start_offset())),
            None => self.hw,
        }
    }

    /// OffsetForLeaderEpoch (API 23) for one partition, on the leader.
    pub fn offset_for_leader_epoch(
        &self,
        current_leader_epoch: Option<LeaderEpoch>,
        epoch: LeaderEpoch,
        log: &impl LogView,
    ) -> Result<EpochEndOffset, ErrorCode> {
        self.check_epoch_and_leadership(current_leader_epoch)?;
        Ok(log.end_offset_for_epoch(epoch))
    }

    fn check_epoch_and_leadership(&self, current: Option<LeaderEpoch>) -> Result<(), ErrorCode> {
        let mine = self.state.as_ref().map(|s| s.leader_epoch);
        if let (Some(theirs), Some(mine), false) = (
            current,
            mine,
            self.config.mutation == Mutation::NoEpochChecks,
        ) {
            if theirs < mine {
                return Err(ErrorCode::FencedLeaderEpoch);
            }
            if theirs > mine {
                return Err(ErrorCode::UnknownLeaderEpoch);
            }
        }
        if !self.is_leader() {
            return Err(ErrorCode::NotLeaderOrFollower);
        }
        Ok(())
    }

    fn current_leader(&self) -> Option<(NodeId, LeaderEpoch)> {
        let s = self.state.as_ref()?;
        Some((s.leader?, s.leader_epoch))
    }

    fn record_follower_fetch(
        &mut self,
        now_ms: i64,
        id: NodeId,
        fetch_offset: Offset,
        isr_eligible: bool,
        log: &impl LogView,
        out: &mut Vec<Action>,
    ) {
        let leo = log.log_end_offset();
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        let Some(p) = l.followers.get_mut(&id) else {
            return;
        };
        // Kafka's lastCaughtUpTime: now if the follower reached the LEO; the previous fetch's
        // time if it reached the LEO of then.
        if fetch_offset >= leo {
            p.last_caught_up_ms = p.last_caught_up_ms.max(now_ms);
        } else if p.last_fetch_leader_leo >= 0 && fetch_offset >= p.last_fetch_leader_leo {
            p.last_caught_up_ms = p.last_caught_up_ms.max(p.last_fetch_ms);
        }
        p.last_fetch_ms = now_ms;
        p.last_fetch_leader_leo = leo;
        p.fetch_offset = Some(fetch_offset);
        self.leader_progress(now_ms, log, out);
        if isr_eligible {
            self.maybe_expand_isr(now_ms, id, out);
        }
    }

    /// Leader: recompute the HW, complete acks, propose an ISR expansion, ask for a flush
    /// (a single replica only for a waiting acks=all append: its HW does not wait for disk).
    fn leader_progress(&mut self, _now_ms: i64, log: &impl LogView, out: &mut Vec<Action>) {
        let leo = log.log_end_offset();
        let durable = log.durable_offset();
        let flush = durable < leo
            && (!self.is_single_replica()
                || matches!(&self.role, Role::Leader(l)
                    // The largest waiting offset: the first ones may be durable already
                    // (answered just below), and nothing else would ask for the rest.
                    if l.acks.keys().next_back().is_some_and(|(required, _)| *required > durable)));
        if flush {
            out.push(Action::Flush { offset: leo });
        }
        if let Some(candidate) = self.hw_candidate(log) {
            if candidate > self.hw {
                self.hw = candidate;
                out.push(Action::HighWatermark(candidate));
            }
        }
        if self.is_single_replica() {
            self.single_replica_hw = self.single_replica_hw.max(self.hw);
        }
        self.complete_acks(log, out);
    }

    /// The smallest durable log end over the maximal ISR; None while a member's progress
    /// in this epoch is unknown or the committed ISR is below `min.insync.replicas`.
    fn hw_candidate(&self, log: &impl LogView) -> Option<Offset> {
        let Role::Leader(l) = &self.role else {
            return None;
        };
        let state = self.state.as_ref()?;
        if self.config.mutation == Mutation::HwFromLeaderLeo {
            return Some(log.log_end_offset());
        }
        if state.isr.len() < effective_min_isr(&self.config, state) {
            return None; // KIP-966
        }
        if self.is_single_replica() {
            return Some(log.log_end_offset());
        }
        let mut hw = log.durable_offset().min(log.log_end_offset());
        for id in self.maximal_isr() {
            if id == self.config.node_id {
                continue;
            }
            hw = hw.min(l.followers.get(&id)?.fetch_offset?);
        }
        Some(hw)
    }

    fn complete_acks(&mut self, log: &impl LogView, out: &mut Vec<Action>) {
        // A single replica's HW does not wait for disk; its acks=all answers do, also once
        // the replica set has grown while that HW is still past the durable end (every other
        // leader's HW is durable anyway).
        let hw = self.hw.min(log.durable_offset());
        let isr_ok = self
            .state
            .as_ref()
            .is_some_and(|s| s.isr.len() >= effective_min_isr(&self.config, s));
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        while let Some(entry) = l.acks.first_entry() {
            let (required, id) = *entry.key();
            if required <= hw {
                entry.remove();
                out.push(Action::AckDone {
                    id,
                    error: ErrorCode::None,
                });
            } else if !isr_ok {
                // The ISR shrank below min.insync.replicas after the append: the HW cannot
                // reach it until the ISR grows back.
                entry.remove();
                out.push(Action::AckDone {
                    id,
                    error: ErrorCode::NotEnoughReplicasAfterAppend,
                });
            } else {
                break;
            }
        }
    }

    fn fail_acks(&mut self, error: ErrorCode, out: &mut Vec<Action>) {
        if let Role::Leader(l) = &mut self.role {
            for (_, id) in std::mem::take(&mut l.acks).into_keys() {
                out.push(Action::AckDone { id, error });
            }
        }
    }

    /// Proposes adding follower `id` to the ISR if its fetch just now reached the HW. Only
    /// on that follower's fetch, as Kafka's `maybeExpandIsr` (called from
    /// `updateFollowerFetchState`): progress remembered from before a follower was taken out
    /// of the ISR (fenced, shut down, killed) must not bring it back; re-proposing it on every
    /// input made a leader whose dead follower had been caught up (an idle partition) propose
    /// it again and again, each refusal (INELIGIBLE_REPLICA) keeping it counted for the HW,
    /// so the HW never moved again.
    fn maybe_expand_isr(&mut self, now_ms: i64, id: NodeId, out: &mut Vec<Action>) {
        let hw = self.hw;
        let Some(state) = &self.state else { return };
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        if l.pending.is_some() {
            return;
        }
        let joins = !state.isr.contains(&id)
            && l.followers.get(&id).is_some_and(|p| {
                p.fetch_offset
                    .is_some_and(|o| o >= hw && o >= l.epoch_start_offset)
            });
        if joins {
            let mut isr = state.isr.clone();
            isr.push(id);
            isr.sort_unstable();
            Self::propose(l, state, &self.config, isr, now_ms, out);
        }
    }

    fn propose(
        l: &mut Leader,
        state: &PartitionState,
        config: &ReplicaConfig,
        new_isr: Vec<NodeId>,
        now_ms: i64,
        out: &mut Vec<Action>,
    ) {
        let request = AlterPartitionRequest {
            broker_id: config.node_id,
            leader_epoch: state.leader_epoch,
            partition_epoch: state.partition_epoch,
            new_isr,
        };
        out.push(Action::AlterPartition(request.clone()));
        l.pending = Some(PendingIsr {
            request,
            sent_ms: now_ms,
            awaiting_metadata: false,
        });
    }

    /// The controller answered `request` (the runtime passes back the request it sent; a
    /// retry is the same request). A committed state of this leadership with a newer
    /// partition epoch is adopted. A refusal (INELIGIBLE_REPLICA, INVALID_REQUEST,
    /// OPERATION_NOT_ATTEMPTED) ends the pending change so another can be proposed, but its
    /// members keep counting for the HW until a newer partition epoch is known (a delayed
    /// copy of the request may still be committed once the refusal's reason is gone: the
    /// simulation found that with a broker unfenced in between); an error that
    /// leaves it open (INVALID_UPDATE_VERSION or FENCED_LEADER_EPOCH: an earlier copy may
    /// have been committed) keeps the maximal ISR until the metadata image brings the truth,
    /// as Kafka does; anything else is retried.
    pub fn on_alter_partition_response(
        &mut self,
        now_ms: i64,
        request: &AlterPartitionRequest,
        result: AlterPartitionResult,
        log: &impl LogView,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let me = self.config.node_id;
        let Role::Leader(l) = &mut self.role else {
            return out;
        };
        match result {
            Ok(new) => {
                let cur = self
                    .state
                    .as_ref()
                    .map(|s| (s.leader_epoch, s.partition_epoch));
                if cur.is_some_and(|(le, pe)| new.leader_epoch == le && new.partition_epoch > pe)
                    && new.leader == Some(me)
                {
                    if l.pending
                        .as_ref()
                        .is_some_and(|p| p.request.partition_epoch < new.partition_epoch)
                    {
                        l.pending = None;
                    }
                    l.unresolved.clear();
                    self.state = Some(new);
                }
            }
            Err(e) => {
                if let Some(p) = l.pending.as_mut().filter(|p| p.request == *request) {
                    match e {
                        ErrorCode::IneligibleReplica
                        | ErrorCode::InvalidRequest
                        | ErrorCode::OperationNotAttempted => {
                            // This copy was refused, but the proposal may yet be
                            // committed by another copy: its members keep counting.
                            l.unresolved.extend(p.request.new_isr.iter().copied());
                            l.pending = None;
                        }
                        ErrorCode::InvalidUpdateVersion | ErrorCode::FencedLeaderEpoch => {
                            p.awaiting_metadata = true;
                        }
                        _ => {}
                    }
                }
            }
        }
        self.leader_progress(now_ms, log, &mut out);
        self.check(log);
        out
    }

    /// Time passes: ISR shrink (leader), AlterPartition retry, ack deadlines, fetch
    /// timeouts and backoff (follower).
    pub fn tick(&mut self, now_ms: i64, log: &impl LogView) -> Vec<Action> {
        let mut out = Vec::new();
        let leo = log.log_end_offset();
        match &mut self.role {
            Role::Leader(l) => {
                let expired: Vec<(Offset, AckId)> = l
                    .acks
                    .iter()
                    .filter(|(_, &d)| d <= now_ms)
                    .map(|(k, _)| *k)
                    .collect();
                for k in expired {
                    l.acks.remove(&k);
                    out.push(Action::AckDone {
                        id: k.1,
                        error: ErrorCode::RequestTimedOut,
                    });
                }
                if let Some(p) = &mut l.pending {
                    if !p.awaiting_metadata
                        && now_ms - p.sent_ms >= self.config.alter_partition_retry_ms
                    {
                        p.sent_ms = now_ms;
                        out.push(Action::AlterPartition(p.request.clone()));
                    }
                } else if let Some(state) = &self.state {
                    let lag = self.config.replica_lag_time_max_ms;
                    let out_of_sync: Vec<NodeId> = state
                        .isr
                        .iter()
                        .copied()
                        .filter(|id| {
                            l.followers.get(id).is_some_and(|p| {
                                p.fetch_offset != Some(leo) && now_ms - p.last_caught_up_ms > lag
                            })
                        })
                        .collect();
                    if !out_of_sync.is_empty() {
                        let isr = state
                            .isr
                            .iter()
                            .copied()
                            .filter(|id| !out_of_sync.contains(id))
                            .collect();
                        Self::propose(l, state, &self.config, isr, now_ms, &mut out);
                    }
                }
            }
            Role::Follower(f) => match f.fetch {
                FetchState::InFlight { sent_ms, .. }
                    if now_ms - sent_ms >= self.config.fetch_timeout_ms =>
                {
                    f.fetch = FetchState::Ready;
                    self.follower_next(now_ms, log, &mut out);
                }
                FetchState::Backoff { until_ms } if now_ms >= until_ms => {
                    f.fetch = FetchState::Ready;
                    self.follower_next(now_ms, log, &mut out);
                }
                _ => {}
            },
            Role::None => {}
        }
        out
    }

    /// Follower: send the next fetch if nothing is in flight and everything appended is
    /// durable (progress is reported only past what is on disk); else ask for the fsync.
    fn follower_next(&mut self, now_ms: i64, log: &impl LogView, out: &mut Vec<Action>) {
        let leo = log.log_end_offset();
        let Some(epoch) = self.state.as_ref().map(|s| s.leader_epoch) else {
            return;
        };
        let Role::Follower(f) = &mut self.role else {
            return;
        };
        if f.fetch != FetchState::Ready {
            return;
        }
        if log.durable_offset() < leo {
            out.push(Action::Flush { offset: leo });
            return;
        }
        let fetch_id = self.next_fetch_id;
        self.next_fetch_id += 1;
        f.fetch = FetchState::InFlight {
            fetch_id,
            sent_ms: now_ms,
        };
        let last_fetched_epoch = if self.config.mutation == Mutation::TruncateToHw {
            None
        } else {
            log.latest_epoch()
        };
        out.push(Action::Fetch(FetchPlan {
            fetch_id,
            leader: f.leader,
            request: FetchRequest {
                replica_id: Some(self.config.node_id),
                fetch_offset: leo,
                current_leader_epoch: Some(epoch),
                last_fetched_epoch,
                isr_eligible: true,
            },
        }));
    }

    fn follower_learn_hw(&mut self, log: &impl LogView, out: &mut Vec<Action>) {
        let Role::Follower(f) = &self.role else {
            return;
        };
        let Some(leader_hw) = f.leader_hw else {
            return;
        };
        // Durable: this replica's HW never covers what a crash could take from it.
        let hw = leader_hw
            .min(log.durable_offset())
            .min(log.log_end_offset());
        // A new leader's HW may lag what this replica learned from the previous one; the HW
        // only moves forward here (it is a lower bound of the committed prefix either way).
        if hw > self.hw {
            self.hw = hw;
            out.push(Action::HighWatermark(hw));
        }
    }

    /// Follower: the leader answered fetch `fetch_id`. Stale or duplicate answers are
    /// ignored.
    pub fn on_fetch_response(
        &mut self,
        now_ms: i64,
        fetch_id: u64,
        resp: FetchResponse,
        log: &impl LogView,
    ) -> Vec<Action> {
        let mut out = Vec::new();
        let hw = self.hw;
        let backoff = self.config.fetch_backoff_ms;
        let Role::Follower(f) = &mut self.role else {
            return out;
        };
        if !matches!(f.fetch, FetchState::InFlight { fetch_id: id, .. } if id == fetch_id) {
            return out;
        }
        let leo = log.log_end_offset();
        if let Some(diverging) = resp.diverging_epoch {
            f.fetch = FetchState::AwaitingLog;
            let leader_start = resp.log_start_offset;
            if !diverging.is_undefined() && diverging.end_offset <= leader_start {
                // The leader knows no epoch as old as ours (retention removed it), so its
                // answer cannot say where our records below its log start stop matching.
                // Kafka truncates to that start and keeps those records unverified; Moldau
                // restarts at the leader's start instead, so replicas agree on every offset
                // they hold below their HW. Nothing below it is readable on the leader.
                self.lower_hw_for_truncation(leader_start, &mut out);
                out.push(Action::TruncateFullyAndStartAt {
                    offset: leader_start,
                });
                return out;
            }
            let target = truncation_offset(diverging, hw, log);
            self.lower_hw_for_truncation(target.min(leo), &mut out);
            // Even at the log end: the truncation also drops epoch-cache entries that start
            // there (this replica led an epoch briefly and wrote nothing), which would
            // otherwise make it diverge forever (Kafka's truncateTo does the same).
            out.push(Action::Truncate {
                offset: target.min(leo),
            });
            return out;
        }
        match resp.error {
            ErrorCode::None => {
                f.leader_hw = Some(
                    f.leader_hw
                        .map_or(resp.high_watermark, |h| h.max(resp.high_watermark)),
                );
                if resp.has_records {
                    f.fetch = FetchState::AwaitingLog;
                    out.push(Action::AppendFetched);
                } else {
                    f.fetch = FetchState::Ready;
                    self.follower_learn_hw(log, &mut out);
                    self.follower_next(now_ms, log, &mut out);
                }
            }
            ErrorCode::OffsetOutOfRange if resp.log_start_offset >= 0 => {
                f.fetch = FetchState::AwaitingLog;
                if resp.log_end_offset < leo {
                    // A leader shorter than this follower: its records past the leader's end
                    // were never committed, unless an unclean election happened.
                    self.lower_hw_for_truncation(resp.log_end_offset.max(0), &mut out);
                    out.push(Action::Truncate {
                        offset: resp.log_end_offset,
                    });
                } else if leo < resp.log_start_offset {
                    // Behind the leader's log start (retention deleted what it needed):
                    // restart from there.
                    out.push(Action::TruncateFullyAndStartAt {
                        offset: resp.log_start_offset,
                    });
                } else {
                    f.fetch = FetchState::Backoff {
                        until_ms: now_ms + backoff,
                    };
                }
            }
            ErrorCode::UnknownLeaderEpoch => {
                // The leader has not applied the metadata that made it leader in our epoch
                // yet (brokers apply it at slightly different times); it will within
                // moments. Backing off `replica.fetch.backoff.ms` (1 s) here held the new
                // leader's HW, and every acks=all answer, for that long after each leader
                // change (a SIGTERM's controlled shutdown).
                f.fetch = FetchState::Backoff {
                    until_ms: now_ms + backoff.min(LEADER_BEHIND_RETRY_MS),
                };
            }
            _ => {
                f.fetch = FetchState::Backoff {
                    until_ms: now_ms + backoff,
                };
            }
        }
        out
    }

    /// Before a follower's truncation to `offset`: if that is below its HW, records this
    /// replica counted as committed are not on its leader. Only an unclean election (or a
    /// broken peer) does that; the leader the controller chose is followed, as Kafka's
    /// fetcher does (it truncates below the HW with a warning): the HW drops to `offset`
    /// first (so it never exceeds the LEO) and the runtime logs the loss loudly. Never a
    /// panic: bytes from a peer must not crash the broker.
    fn lower_hw_for_truncation(&mut self, offset: Offset, out: &mut Vec<Action>) {
        if offset >= self.hw {
            return;
        }
        out.push(Action::TruncatingBelowHighWatermark {
            offset,
            high_watermark: self.hw,
        });
        self.hw = offset;
        out.push(Action::HighWatermark(offset));
    }

    /// Dense invariant checks, after every input.
    fn check(&self, log: &impl LogView) {
        assert!(
            self.hw <= log.log_end_offset(),
            "replica {}: HW {} above LEO {}",
            self.config.node_id,
            self.hw,
            log.log_end_offset()
        );
        if let (Role::Leader(l), Some(state)) = (&self.role, &self.state) {
            assert_eq!(state.leader, Some(self.config.node_id));
            assert!(l.epoch_start_offset >= 0);
        }
        if self.config.mutation == Mutation::None && !self.is_single_replica() {
            assert!(
                self.hw
                    <= log
                        .durable_offset()
                        .max(log.log_start_offset())
                        .max(self.single_replica_hw),
                "replica {}: HW {} past its durable end {}",
                self.config.node_id,
                self.hw,
                log.durable_offset()
            );
        }
    }
}

/// `min.insync.replicas`, but never more than the replication factor (Kafka's
/// effectiveMinIsr, the same rule the controller's ELR follows: `model::config::effective_min_isr`).
fn effective_min_isr(config: &ReplicaConfig, state: &PartitionState) -> usize {
    model::config::effective_min_isr(config.min_insync_replicas, state.replicas.len())
}

/// Where a follower truncates given the leader's answer for its last epoch (the diverging
/// epoch of a Fetch response, or an OffsetForLeaderEpoch answer), as Kafka's fetcher
/// decides: by the epoch lineage, never by the HW alone (the HW is only the fallback for a
/// leader that knows no epochs at all).
pub fn truncation_offset(leader: EpochEndOffset, hw: Offset, log: &impl LogView) -> Offset {
    let leo = log.log_end_offset();
    if leader.is_undefined() {
        return hw.min(leo);
    }
    let mine = log.end_offset_for_epoch(leader.epoch);
    if mine.is_undefined() {
        return leader.end_offset.min(leo);
    }
    if mine.epoch != leader.epoch {
        // This log has no batch of the leader's epoch: cut to the end of the largest epoch
        // below it that it has, then ask again with that epoch.
        return mine.end_offset.min(leo);
    }
    leader.end_offset.min(mine.end_offset).min(leo)
}
