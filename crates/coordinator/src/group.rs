//! One classic group: its membership state machine (Empty, PreparingRebalance,
//! CompletingRebalance, Stable; Dead groups are dropped from memory), its timers as plain
//! deadlines, and its committed offsets.
//!
//! The transitions follow Kafka's classic GroupCoordinator: a rebalance waits for every member
//! to rejoin (or the rebalance timeout), the first empty-group rebalance waits
//! `group.initial.rebalance.delay.ms` (extended while members keep arriving), the leader's
//! SyncGroup carries the assignment that every member's SyncGroup returns, and members that do
//! not heartbeat within their session timeout are removed. Nothing here does I/O or reads a
//! clock: the caller passes `now` in an [`Env`] and collects responses and records in it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use indexmap::IndexMap;
use model::ErrorCode;
use protocol::messages::join_group_response::JoinGroupResponseMember;
use protocol::messages::{JoinGroupResponse, SyncGroupResponse};
use protocol::{ResponseKind, StrBytes};

use crate::records::{self, GroupValue, MemberValue, OffsetValue};
use crate::{CoordinatorConfig, Output, Record, RequestToken};

/// A producer's offsets committed in its open transaction: partition -> (offset, record
/// position).
pub(crate) type PendingOffsets = BTreeMap<(String, i32), (OffsetValue, u64)>;

/// The states of a classic group, with Kafka's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka reports in ListGroups and DescribeGroups.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A request waiting for its response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    pub token: RequestToken,
    pub version: i16,
}

/// What the caller passes into every transition: the config, the time, and where to put
/// responses and records.
pub(crate) struct Env<'a> {
    pub cfg: &'a CoordinatorConfig,
    pub now: i64,
    pub out: &'a mut Output,
}

impl Env<'_> {
    fn respond(&mut self, token: RequestToken, response: ResponseKind) {
        self.out.responses.push((token, response));
    }

    pub fn respond_join(&mut self, p: Pending, r: JoinResult) {
        self.respond(
            p.token,
            ResponseKind::JoinGroup(join_response(p.version, r)),
        );
    }

    pub fn respond_sync(&mut self, p: Pending, r: SyncResult) {
        self.respond(
            p.token,
            ResponseKind::SyncGroup(sync_response(p.version, r)),
        );
    }
}

/// The fields of a JoinGroup response before they are fitted to a version.
#[derive(Debug, Default)]
pub(crate) struct JoinResult {
    pub error: Option<ErrorCode>,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Only for the leader: every member's id, instance id and metadata.
    pub members: Vec<(String, Option<String>, Bytes)>,
    pub skip_assignment: bool,
}

impl JoinResult {
    pub fn error(member_id: &str, error: ErrorCode) -> Self {
        JoinResult {
            error: Some(error),
            generation: -1,
            member_id: member_id.to_string(),
            ..JoinResult::default()
        }
    }
}

/// The fields of a SyncGroup response.
#[derive(Debug, Default)]
pub(crate) struct SyncResult {
    pub error: Option<ErrorCode>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub fn error(error: ErrorCode) -> Self {
        SyncResult {
            error: Some(error),
            ..SyncResult::default()
        }
    }
}

pub(crate) fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn code(e: Option<ErrorCode>) -> i16 {
    e.unwrap_or(ErrorCode::None).code()
}

/// Builds a JoinGroup response that encodes at `version`.
pub(crate) fn join_response(version: i16, r: JoinResult) -> JoinGroupResponse {
    let mut resp = JoinGroupResponse::default();
    resp.error_code = code(r.error);
    resp.generation_id = r.generation;
    if version >= 7 {
        resp.protocol_type = r.protocol_type.as_deref().map(s);
    }
    // Before v7 the protocol name is not nullable; Kafka sends "" for none. From v7 Kafka
    // answers null for a selected protocol named "" too.
    resp.protocol_name = match r.protocol_name {
        Some(p) if version >= 7 && p.is_empty() => None,
        Some(p) => Some(s(&p)),
        None if version < 7 => Some(StrBytes::default()),
        None => None,
    };
    resp.leader = s(&r.leader);
    if version >= 9 {
        resp.skip_assignment = r.skip_assignment;
    }
    resp.member_id = s(&r.member_id);
    resp.members = r
        .members
        .into_iter()
        .map(|(id, instance, metadata)| {
            let mut m = JoinGroupResponseMember::default();
            m.member_id = s(&id);
            if version >= 5 {
                m.group_instance_id = instance.as_deref().map(s);
            }
            m.metadata = metadata;
            m
        })
        .collect();
    resp
}

/// Builds a SyncGroup response that encodes at `version`.
pub(crate) fn sync_response(version: i16, r: SyncResult) -> SyncGroupResponse {
    let mut resp = SyncGroupResponse::default();
    resp.error_code = code(r.error);
    if version >= 5 {
        resp.protocol_type = r.protocol_type.as_deref().map(s);
        resp.protocol_name = r.protocol_name.as_deref().map(s);
    }
    resp.assignment = r.assignment;
    resp
}

/// What a joining member sent.
#[derive(Clone, Debug)]
pub(crate) struct JoinParams {
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
}

/// A member of a group.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocol_type: String,
    /// In the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub awaiting_join: Option<Pending>,
    pub awaiting_sync: Option<Pending>,
    /// Joined but has not yet received its first JoinGroup response.
    pub is_new: bool,
    pub heartbeat_deadline_ms: i64,
}

impl Member {
    fn metadata(&self, protocol: Option<&str>) -> Bytes {
        protocol
            .and_then(|p| self.protocols.iter().find(|(n, _)| n == p))
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    /// When the session of this member expires; None while a JoinGroup or SyncGroup of an
    /// established member is parked here (Kafka: awaiting members satisfy heartbeats).
    pub fn session_deadline(&self) -> Option<i64> {
        if !self.is_new && (self.awaiting_join.is_some() || self.awaiting_sync.is_some()) {
            None
        } else {
            Some(self.heartbeat_deadline_ms)
        }
    }

    fn heartbeat(&mut self, now: i64) {
        self.heartbeat_deadline_ms = now.saturating_add(i64::from(self.session_timeout_ms));
    }
}

/// The timer of a PreparingRebalance group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JoinTimer {
    /// The first rebalance of an empty group: waits the whole delay even when all joined.
    Initial { delay_ms: i64, remaining_ms: i64 },
    /// Completes when every member has rejoined, or at the deadline.
    Regular,
}

/// A classic group and its offsets. Owned by the `GroupCoordinator`; single-threaded.
#[derive(Debug)]
pub(crate) struct Group {
    pub id: String,
    /// The `__consumer_offsets` partition holding this group.
    pub partition: i32,
    pub state: GroupState,
    pub state_timestamp_ms: Option<i64>,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: IndexMap<String, Member>,
    /// group.instance.id -> member id.
    pub static_members: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, with their expiry.
    pub pending_members: IndexMap<String, i64>,
    /// Members of the current generation that have not sent SyncGroup yet.
    pub pending_sync: BTreeSet<String>,
    pub sync_deadline_ms: Option<i64>,
    pub join_deadline_ms: Option<i64>,
    pub join_timer: JoinTimer,
    pub new_member_added: bool,
    pub subscribed_topics: Option<BTreeSet<String>>,
    pub offsets: BTreeMap<(String, i32), OffsetValue>,
    /// The position (in `__consumer_offsets` record order) of each committed offset's record,
    /// so a transactional offset only replaces an older one when its transaction commits.
    pub offset_seq: HashMap<(String, i32), u64>,
    /// Offsets committed inside open transactions (TxnOffsetCommit), by producer id: they
    /// become committed offsets when the transaction commits, and vanish if it aborts.
    pub pending_txn: BTreeMap<i64, PendingOffsets>,
}

impl Group {
    pub fn new(id: &str, partition: i32) -> Group {
        Group {
            id: id.to_string(),
            partition,
            state: GroupState::Empty,
            state_timestamp_ms: None,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: IndexMap::new(),
            static_members: HashMap::new(),
            pending_members: IndexMap::new(),
            pending_sync: BTreeSet::new(),
            sync_deadline_ms: None,
            join_deadline_ms: None,
            join_timer: JoinTimer::Regular,
            new_member_added: false,
            subscribed_topics: None,
            offsets: BTreeMap::new(),
            offset_seq: HashMap::new(),
            pending_txn: BTreeMap::new(),
        }
    }

    fn transition(&mut self, state: GroupState, now: i64) {
        tracing::debug!(group = %self.id, from = self.state.name(), to = state.name(), "group state");
        self.state = state;
        self.state_timestamp_ms = Some(now);
    }

    pub fn is_leader(&self, member_id: &str) -> bool {
        self.leader.as_deref() == Some(member_id)
    }

    fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }

    fn num_awaiting_join(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.awaiting_join.is_some())
            .count()
    }

    fn all_joined(&self) -> bool {
        self.pending_members.is_empty() && self.num_awaiting_join() == self.members.len()
    }

    /// Kafka's `acceptJoiningMember`: enforces `group.max.size`.
    pub fn accepts_joining_member(&self, member_id: &str, max: usize) -> bool {
        match self.state {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                self.members
                    .get(member_id)
                    .is_some_and(|m| m.awaiting_join.is_some())
                    || self.num_awaiting_join() < max
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.members.contains_key(member_id) || self.members.len() < max
            }
        }
    }

    pub fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.state == GroupState::Empty {
            !protocol_type.is_empty() && !protocols.is_empty()
        } else {
            self.protocol_type.as_deref() == Some(protocol_type)
                && protocols.iter().any(|(name, _)| {
                    self.members
                        .values()
                        .all(|m| m.protocols.iter().any(|(n, _)| n == name))
                })
        }
    }

    /// The protocol every member supports that most members prefer (ties: first seen).
    pub fn select_protocol(&self) -> Option<String> {
        let supported = |name: &str| {
            self.members
                .values()
                .all(|m| m.protocols.iter().any(|(n, _)| n == name))
        };
        let mut votes: IndexMap<&str, usize> = IndexMap::new();
        for m in self.members.values() {
            if let Some((name, _)) = m.protocols.iter().find(|(n, _)| supported(n)) {
                *votes.entry(name.as_str()).or_insert(0) += 1;
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for (name, count) in votes {
            if best.is_none_or(|(_, c)| count > c) {
                best = Some((name, count));
            }
        }
        best.map(|(n, _)| n.to_string())
    }

    fn compute_subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if self.protocol_type.as_deref() != Some("consumer") || self.members.is_empty() {
            return None;
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = BTreeSet::new();
        for m in self.members.values() {
            topics.extend(records::subscription_topics(&m.metadata(Some(protocol)))?);
        }
        Some(topics)
    }

    /// Every member's id, instance id and metadata for the selected protocol (the leader's
    /// JoinGroup response).
    fn leader_view(&self) -> Vec<(String, Option<String>, Bytes)> {
        let p = self.protocol_name.as_deref();
        self.members
            .values()
            .map(|m| (m.id.clone(), m.instance_id.clone(), m.metadata(p)))
            .collect()
    }

    fn join_result_for(&self, member_id: &str, with_members: bool) -> JoinResult {
        JoinResult {
            error: None,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members: if with_members {
                self.leader_view()
            } else {
                Vec::new()
            },
            skip_assignment: false,
        }
    }

    /// Kafka's `validateCurrentMember`.
    pub fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Option<ErrorCode> {
        if let Some(instance) = instance_id {
            match self.static_members.get(instance) {
                Some(current) if current != member_id => return Some(ErrorCode::FencedInstanceId),
                Some(_) => {}
                None => return Some(ErrorCode::UnknownMemberId),
            }
        }
        if !self.members.contains_key(member_id) {
            return Some(ErrorCode::UnknownMemberId);
        }
        None
    }

    // ---- membership changes -------------------------------------------------------------

    fn add_member(&mut self, member: Member) {
        if self.members.is_empty() {
            self.protocol_type = Some(member.protocol_type.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(member.id.clone());
        }
        if let Some(instance) = &member.instance_id {
            self.static_members
                .insert(instance.clone(), member.id.clone());
        }
        self.pending_members.shift_remove(&member.id);
        self.members.insert(member.id.clone(), member);
    }

    /// Removes a member, answering any request it has parked here.
    pub fn remove_member(&mut self, member_id: &str, env: &mut Env) -> Option<Member> {
        let mut m = self.members.shift_remove(member_id)?;
        if let Some(p) = m.awaiting_join.take() {
            env.respond_join(p, JoinResult::error("", ErrorCode::UnknownMemberId));
        }
        if let Some(p) = m.awaiting_sync.take() {
            env.respond_sync(p, SyncResult::error(ErrorCode::UnknownMemberId));
        }
        if let Some(instance) = &m.instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        if self.is_leader(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
        self.pending_members.shift_remove(member_id);
        self.pending_sync.remove(member_id);
        Some(m)
    }

    /// Kafka's `removeMemberAndUpdateGroup`.
    pub fn remove_member_and_update_group(&mut self, member_id: &str, env: &mut Env) {
        if self.remove_member(member_id, env).is_none() {
            return;
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.maybe_prepare_rebalance(env)
            }
            // PreparingRebalance: poll() completes the join if everyone left has rejoined.
            _ => {}
        }
    }

    pub fn add_member_and_rebalance(
        &mut self,
        id: String,
        p: &JoinParams,
        pending: Pending,
        env: &mut Env,
    ) {
        if self.state == GroupState::PreparingRebalance && self.generation == 0 {
            self.new_member_added = true;
        }
        let member = Member {
            id,
            instance_id: p.instance_id.clone(),
            client_id: p.client_id.clone(),
            client_host: p.client_host.clone(),
            rebalance_timeout_ms: p.rebalance_timeout_ms,
            session_timeout_ms: p.session_timeout_ms,
            protocol_type: p.protocol_type.clone(),
            protocols: p.protocols.clone(),
            assignment: Bytes::new(),
            awaiting_join: Some(pending),
            awaiting_sync: None,
            is_new: true,
            // A new member cannot heartbeat before its JoinGroup returns, so it gets the
            // longer new-member timeout instead of its session timeout.
            heartbeat_deadline_ms: env.now.saturating_add(env.cfg.new_member_join_timeout_ms),
        };
        self.add_member(member);
        self.maybe_prepare_rebalance(env);
    }

    /// Kafka's `updateMember` + `maybePrepareRebalance`.
    pub fn update_member_and_rebalance(
        &mut self,
        member_id: &str,
        p: &JoinParams,
        pending: Pending,
        env: &mut Env,
    ) {
        self.update_member(member_id, p, pending, env);
        self.maybe_prepare_rebalance(env);
    }

    fn update_member(&mut self, member_id: &str, p: &JoinParams, pending: Pending, env: &mut Env) {
        let Some(m) = self.members.get_mut(member_id) else {
            return;
        };
        m.protocols = p.protocols.clone();
        m.rebalance_timeout_ms = p.rebalance_timeout_ms;
        m.session_timeout_ms = p.session_timeout_ms;
        m.client_id = p.client_id.clone();
        m.client_host = p.client_host.clone();
        // A client only re-sends JoinGroup after giving up on the earlier one; answer that one
        // so no token is left without a response.
        if let Some(old) = m.awaiting_join.replace(pending) {
            env.respond_join(
                old,
                JoinResult::error(member_id, ErrorCode::RebalanceInProgress),
            );
        }
    }

    /// A known static member rejoined with an unknown member id: it takes over the old member
    /// (which is fenced) and, in Stable, keeps the group stable when the selected protocol
    /// does not change (Kafka's `updateStaticMemberAndRebalance`).
    pub fn update_static_member_and_rebalance(
        &mut self,
        old_id: &str,
        new_id: String,
        p: &JoinParams,
        pending: Pending,
        env: &mut Env,
    ) {
        let current_leader = self.leader.clone();
        let Some(mut m) = self.members.shift_remove(old_id) else {
            env.respond_join(pending, JoinResult::error("", ErrorCode::UnknownMemberId));
            return;
        };
        // The old incarnation is fenced: answer whatever it has parked here.
        if let Some(old) = m.awaiting_join.take() {
            env.respond_join(old, JoinResult::error(old_id, ErrorCode::FencedInstanceId));
        }
        if let Some(old) = m.awaiting_sync.take() {
            env.respond_sync(old, SyncResult::error(ErrorCode::FencedInstanceId));
        }
        m.id = new_id.clone();
        m.heartbeat(env.now);
        self.members.insert(new_id.clone(), m);
        if let Some(instance) = &p.instance_id {
            self.static_members.insert(instance.clone(), new_id.clone());
        }
        if self.is_leader(old_id) {
            self.leader = Some(new_id.clone());
        }
        if self.pending_sync.remove(old_id) {
            self.pending_sync.insert(new_id.clone());
        }
        self.update_member(&new_id, p, pending, env);

        match self.state {
            GroupState::Stable => {
                if self.select_protocol() == self.protocol_name {
                    // No rebalance: persist the new member id and answer right away.
                    let records = self.metadata_record(env.now);
                    env.out.records.push(records);
                    let is_leader = self.is_leader(&new_id);
                    let Some(m) = self.members.get_mut(&new_id) else {
                        return;
                    };
                    let Some(p) = m.awaiting_join.take() else {
                        return;
                    };
                    let mut r = self.join_result_for(&new_id, false);
                    if is_leader && p.version >= 9 {
                        // KIP-814: the leader learns it leads but must not reassign.
                        r.members = self.leader_view();
                        r.skip_assignment = true;
                    } else {
                        // Older clients: report the previous leader id so a rejoining leader
                        // does not compute an assignment a Stable group would never deliver.
                        r.leader = current_leader.unwrap_or_default();
                    }
                    env.respond_join(p, r);
                } else {
                    self.maybe_prepare_rebalance(env);
                }
            }
            // The old id may already be in the leader's assignment: rebalance.
            GroupState::CompletingRebalance => self.prepare_rebalance(env),
            GroupState::PreparingRebalance => {}
            GroupState::Empty | GroupState::Dead => {
                // Not reachable (a static member implies members); answer defensively.
                if let Some(m) = self.members.get_mut(&new_id) {
                    if let Some(p) = m.awaiting_join.take() {
                        env.respond_join(p, JoinResult::error(&new_id, ErrorCode::UnknownMemberId));
                    }
                }
            }
        }
    }

    // ---- rebalance ------------------------------------------------------------------------

    pub fn maybe_prepare_rebalance(&mut self, env: &mut Env) {
        if matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty
        ) {
            self.prepare_rebalance(env);
        }
    }

    pub fn prepare_rebalance(&mut self, env: &mut Env) {
        if self.state == GroupState::CompletingRebalance {
            self.reset_and_propagate_assignment_error(ErrorCode::RebalanceInProgress, env);
        }
        self.pending_sync.clear();
        self.sync_deadline_ms = None;
        let rebalance_timeout = self.rebalance_timeout_ms();
        if self.state == GroupState::Empty {
            let delay = i64::from(env.cfg.group_initial_rebalance_delay_ms.max(0));
            self.join_timer = JoinTimer::Initial {
                delay_ms: delay,
                remaining_ms: (rebalance_timeout - delay).max(0),
            };
            self.join_deadline_ms = Some(env.now.saturating_add(delay));
        } else {
            self.join_timer = JoinTimer::Regular;
            self.join_deadline_ms = Some(env.now.saturating_add(rebalance_timeout));
        }
        self.transition(GroupState::PreparingRebalance, env.now);
        tracing::info!(group = %self.id, generation = self.generation, "preparing to rebalance");
    }

    fn propagate_assignment(&mut self, error: Option<ErrorCode>, env: &mut Env) {
        let (ptype, pname) = if error.is_none() {
            (self.protocol_type.clone(), self.protocol_name.clone())
        } else {
            (None, None)
        };
        for m in self.members.values_mut() {
            if let Some(p) = m.awaiting_sync.take() {
                env.respond_sync(
                    p,
                    SyncResult {
                        error,
                        protocol_type: ptype.clone(),
                        protocol_name: pname.clone(),
                        assignment: m.assignment.clone(),
                    },
                );
                m.heartbeat(env.now);
            }
        }
    }

    fn reset_and_propagate_assignment_error(&mut self, error: ErrorCode, env: &mut Env) {
        for m in self.members.values_mut() {
            m.assignment = Bytes::new();
        }
        self.propagate_assignment(Some(error), env);
    }

    fn maybe_elect_new_joined_leader(&mut self) -> bool {
        let Some(leader) = self.leader.clone() else {
            return false;
        };
        if self
            .members
            .get(&leader)
            .is_some_and(|m| m.awaiting_join.is_some())
        {
            return true;
        }
        match self
            .members
            .values()
            .find(|m| m.awaiting_join.is_some())
            .map(|m| m.id.clone())
        {
            Some(id) => {
                self.leader = Some(id);
                true
            }
            None => false,
        }
    }

    /// Kafka's `onCompleteJoin`.
    fn complete_join(&mut self, env: &mut Env) {
        let not_rejoined: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && m.instance_id.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in not_rejoined {
            tracing::info!(group = %self.id, member = %id, "removing member that did not rejoin");
            self.remove_member(&id, env);
        }
        if !self.maybe_elect_new_joined_leader() && !self.members.is_empty() {
            // Only static members that have not rejoined are left: wait another rebalance
            // timeout (their sessions will expire meanwhile if they are gone).
            // At least 1ms so a zero rebalance timeout cannot make the runtime spin.
            self.join_timer = JoinTimer::Regular;
            self.join_deadline_ms =
                Some(env.now.saturating_add(self.rebalance_timeout_ms().max(1)));
            return;
        }
        self.join_deadline_ms = None;
        self.generation = self.generation.wrapping_add(1);
        if self.members.is_empty() {
            self.protocol_name = None;
            self.subscribed_topics = None;
            self.transition(GroupState::Empty, env.now);
            let record = self.metadata_record(env.now);
            env.out.records.push(record);
            return;
        }
        self.protocol_name = self.select_protocol();
        self.subscribed_topics = self.compute_subscribed_topics();
        self.transition(GroupState::CompletingRebalance, env.now);
        env.out.stats.classic_rebalances += 1;
        tracing::info!(group = %self.id, generation = self.generation, members = self.members.len(), "group rebalanced");
        let leader_view = self.leader_view();
        let base = self.join_result_for("", false);
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let is_leader = self.is_leader(&id);
            let Some(m) = self.members.get_mut(&id) else {
                continue;
            };
            if let Some(p) = m.awaiting_join.take() {
                env.respond_join(
                    p,
                    JoinResult {
                        error: None,
                        generation: base.generation,
                        protocol_type: base.protocol_type.clone(),
                        protocol_name: base.protocol_name.clone(),
                        leader: base.leader.clone(),
                        member_id: id.clone(),
                        members: if is_leader {
                            leader_view.clone()
                        } else {
                            Vec::new()
                        },
                        skip_assignment: false,
                    },
                );
            }
            m.heartbeat(env.now);
            m.is_new = false;
            self.pending_sync.insert(id);
        }
        self.sync_deadline_ms = Some(env.now.saturating_add(self.rebalance_timeout_ms()));
    }

    fn fire_join_timer(&mut self, env: &mut Env) {
        match self.join_timer {
            JoinTimer::Initial {
                delay_ms,
                remaining_ms,
            } if self.new_member_added && remaining_ms != 0 => {
                // Members keep arriving: wait another delay, within the rebalance timeout.
                self.new_member_added = false;
                let delay = i64::from(env.cfg.group_initial_rebalance_delay_ms).min(remaining_ms);
                self.join_timer = JoinTimer::Initial {
                    delay_ms: delay,
                    remaining_ms: (remaining_ms - delay_ms).max(0),
                };
                self.join_deadline_ms = Some(env.now.saturating_add(delay));
            }
            _ => self.complete_join(env),
        }
    }

    fn expire_pending_sync(&mut self, env: &mut Env) {
        self.sync_deadline_ms = None;
        if !matches!(
            self.state,
            GroupState::CompletingRebalance | GroupState::Stable
        ) || self.pending_sync.is_empty()
        {
            return;
        }
        let missing: Vec<String> = std::mem::take(&mut self.pending_sync).into_iter().collect();
        for id in &missing {
            tracing::info!(group = %self.id, member = %id, "removing member that did not sync");
            self.remove_member(id, env);
        }
        self.prepare_rebalance(env);
    }

    /// Runs every timer that is due at `env.now` and completes a join whose members have all
    /// rejoined. Idempotent.
    pub fn poll(&mut self, env: &mut Env) {
        // Each pass can make more work due (a removal completes a join, ...); a handful of
        // passes always reaches a fixed point because every step moves a deadline forward or
        // removes something.
        for _ in 0..16 {
            let now = env.now;
            let mut changed = false;
            let expired: Vec<String> = self
                .pending_members
                .iter()
                .filter(|(_, d)| **d <= now)
                .map(|(id, _)| id.clone())
                .collect();
            for id in expired {
                self.pending_members.shift_remove(&id);
                changed = true;
            }
            let expired: Vec<String> = self
                .members
                .values()
                .filter(|m| m.session_deadline().is_some_and(|d| d <= now))
                .map(|m| m.id.clone())
                .collect();
            for id in expired {
                tracing::info!(group = %self.id, member = %id, "member session expired");
                self.remove_member_and_update_group(&id, env);
                changed = true;
            }
            if self.state == GroupState::PreparingRebalance {
                if self.join_timer == JoinTimer::Regular && self.all_joined() {
                    self.complete_join(env);
                    changed = true;
                } else if self.join_deadline_ms.is_some_and(|d| d <= now) {
                    self.fire_join_timer(env);
                    changed = true;
                }
            }
            if let Some(d) = self.sync_deadline_ms {
                if self.pending_sync.is_empty() {
                    self.sync_deadline_ms = None;
                } else if d <= now {
                    self.expire_pending_sync(env);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
    }

    /// The earliest time `poll` has something to do.
    pub fn next_deadline(&self) -> Option<i64> {
        let members = self.members.values().filter_map(Member::session_deadline);
        let pending = self.pending_members.values().copied();
        let join = if self.state == GroupState::PreparingRebalance {
            self.join_deadline_ms
        } else {
            None
        };
        let sync = if self.pending_sync.is_empty() {
            None
        } else {
            self.sync_deadline_ms
        };
        members.chain(pending).chain(join).chain(sync).min()
    }

    // ---- requests -------------------------------------------------------------------------

    /// A current member (known member id) joins: Kafka's `doCurrentMemberJoinGroup`.
    pub fn join_current_member(
        &mut self,
        member_id: &str,
        p: &JoinParams,
        pending: Pending,
        env: &mut Env,
    ) {
        if !self.supports_protocols(&p.protocol_type, &p.protocols) {
            env.respond_join(
                pending,
                JoinResult::error(member_id, ErrorCode::InconsistentGroupProtocol),
            );
            return;
        }
        if self.pending_members.contains_key(member_id) {
            if p.instance_id.is_some() {
                env.respond_join(
                    pending,
                    JoinResult::error(member_id, ErrorCode::UnknownMemberId),
                );
                return;
            }
            self.add_member_and_rebalance(member_id.to_string(), p, pending, env);
            return;
        }
        if let Some(e) = self.validate_member(member_id, p.instance_id.as_deref()) {
            env.respond_join(pending, JoinResult::error(member_id, e));
            return;
        }
        let matches = self
            .members
            .get(member_id)
            .is_some_and(|m| m.protocols == p.protocols);
        match self.state {
            GroupState::PreparingRebalance => {
                self.update_member_and_rebalance(member_id, p, pending, env)
            }
            GroupState::CompletingRebalance => {
                if matches {
                    // The member missed its JoinGroup response: send it again.
                    let r = self.join_result_for(member_id, self.is_leader(member_id));
                    env.respond_join(pending, r);
                } else {
                    self.update_member_and_rebalance(member_id, p, pending, env);
                }
            }
            GroupState::Stable => {
                if self.is_leader(member_id) || !matches {
                    // The leader rejoining forces a rebalance (e.g. for topic metadata changes).
                    self.update_member_and_rebalance(member_id, p, pending, env);
                } else {
                    let r = self.join_result_for(member_id, false);
                    env.respond_join(pending, r);
                }
            }
            GroupState::Empty | GroupState::Dead => {
                env.respond_join(
                    pending,
                    JoinResult::error(member_id, ErrorCode::UnknownMemberId),
                );
            }
        }
    }

    /// Kafka's `doSyncGroup` after the group was found.
    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol: (Option<&str>, Option<&str>),
        assignments: Vec<(String, Bytes)>,
        pending: Pending,
        env: &mut Env,
    ) {
        let (ptype, pname) = protocol;
        let error = self.validate_member(member_id, instance_id).or_else(|| {
            if generation != self.generation {
                Some(ErrorCode::IllegalGeneration)
            } else if ptype.is_some_and(|t| self.protocol_type.as_deref() != Some(t))
                || pname.is_some_and(|n| self.protocol_name.as_deref() != Some(n))
            {
                Some(ErrorCode::InconsistentGroupProtocol)
            } else {
                None
            }
        });
        if let Some(e) = error {
            env.respond_sync(pending, SyncResult::error(e));
            return;
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => {
                env.respond_sync(pending, SyncResult::error(ErrorCode::UnknownMemberId))
            }
            GroupState::PreparingRebalance => {
                env.respond_sync(pending, SyncResult::error(ErrorCode::RebalanceInProgress))
            }
            GroupState::CompletingRebalance => {
                if let Some(m) = self.members.get_mut(member_id) {
                    if let Some(old) = m.awaiting_sync.replace(pending) {
                        env.respond_sync(old, SyncResult::error(ErrorCode::RebalanceInProgress));
                    }
                }
                self.pending_sync.remove(member_id);
                if self.is_leader(member_id) {
                    let mut map: HashMap<String, Bytes> = assignments.into_iter().collect();
                    for m in self.members.values_mut() {
                        m.assignment = map.remove(&m.id).unwrap_or_default();
                    }
                    // Persisted before any SyncGroup response goes out (Output contract).
                    let record = self.metadata_record(env.now);
                    env.out.records.push(record);
                    self.propagate_assignment(None, env);
                    self.transition(GroupState::Stable, env.now);
                }
            }
            GroupState::Stable => {
                self.pending_sync.remove(member_id);
                let (ptype, pname) = (self.protocol_type.clone(), self.protocol_name.clone());
                if let Some(m) = self.members.get_mut(member_id) {
                    let assignment = m.assignment.clone();
                    m.heartbeat(env.now);
                    env.respond_sync(
                        pending,
                        SyncResult {
                            error: None,
                            protocol_type: ptype,
                            protocol_name: pname,
                            assignment,
                        },
                    );
                }
            }
        }
    }

    /// Kafka's heartbeat handling after the group was found.
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: i64,
    ) -> ErrorCode {
        if let Some(e) = self.validate_member(member_id, instance_id) {
            return e;
        }
        if generation != self.generation {
            return ErrorCode::IllegalGeneration;
        }
        let state = self.state;
        let Some(m) = self.members.get_mut(member_id) else {
            return ErrorCode::UnknownMemberId;
        };
        match state {
            GroupState::Empty | GroupState::Dead => ErrorCode::UnknownMemberId,
            GroupState::CompletingRebalance | GroupState::Stable => {
                m.heartbeat(now);
                ErrorCode::None
            }
            GroupState::PreparingRebalance => {
                m.heartbeat(now);
                ErrorCode::RebalanceInProgress
            }
        }
    }

    /// One member of a LeaveGroup request; returns its error.
    pub fn leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        env: &mut Env,
    ) -> ErrorCode {
        if member_id.is_empty() {
            // Administrative removal by group.instance.id.
            match instance_id
                .and_then(|i| self.static_members.get(i))
                .cloned()
            {
                Some(current) => {
                    self.remove_member_and_update_group(&current, env);
                    ErrorCode::None
                }
                None => ErrorCode::UnknownMemberId,
            }
        } else if self.pending_members.shift_remove(member_id).is_some() {
            ErrorCode::None
        } else if let Some(e) = self.validate_member(member_id, instance_id) {
            e
        } else {
            tracing::info!(group = %self.id, member = %member_id, "member left");
            self.remove_member_and_update_group(member_id, env);
            ErrorCode::None
        }
    }

    /// Kafka's `validateOffsetCommit` for classic groups (OffsetCommit and TxnOffsetCommit).
    /// A dead group is not available. Generation -1 while the group is empty is a commit
    /// from outside group management (the admin client, a simple consumer) and is stored
    /// whatever member id it names. Otherwise a request naming a member (or a generation)
    /// must come from a current member of the current generation; one naming nobody may
    /// commit only while the group is empty, except transactional commits, which older
    /// clients send without member information in any state and which are not refused
    /// during a rebalance.
    pub fn validate_offset_commit(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        transactional: bool,
        now: i64,
    ) -> Option<ErrorCode> {
        if self.state == GroupState::Dead {
            return Some(ErrorCode::CoordinatorNotAvailable);
        }
        if generation < 0 && self.state == GroupState::Empty {
            return None;
        }
        if generation >= 0 || !member_id.is_empty() || instance_id.is_some() {
            if let Some(e) = self.validate_member(member_id, instance_id) {
                return Some(e);
            }
            if generation != self.generation {
                return Some(ErrorCode::IllegalGeneration);
            }
        } else if !transactional && self.state != GroupState::Empty {
            // Only members may commit while the group has members.
            return Some(ErrorCode::UnknownMemberId);
        }
        match self.state {
            GroupState::CompletingRebalance if !transactional => {
                Some(ErrorCode::RebalanceInProgress)
            }
            GroupState::CompletingRebalance => None,
            GroupState::Stable | GroupState::PreparingRebalance => {
                if let Some(m) = self.members.get_mut(member_id) {
                    m.heartbeat(now);
                }
                None
            }
            GroupState::Empty | GroupState::Dead => None,
        }
    }

    /// Whether an open transaction holds an offset for the partition.
    pub fn has_pending_txn_offset(&self, key: &(String, i32)) -> bool {
        self.pending_txn.values().any(|m| m.contains_key(key))
    }

    /// Sets a committed offset written at record position `seq`.
    pub fn commit_offset(&mut self, key: (String, i32), value: OffsetValue, seq: u64) {
        self.offset_seq.insert(key.clone(), seq);
        self.offsets.insert(key, value);
    }

    /// Removes a committed offset.
    pub fn remove_offset(&mut self, key: &(String, i32)) -> Option<OffsetValue> {
        self.offset_seq.remove(key);
        self.offsets.remove(key)
    }

    /// Ends a producer's transaction for this group: on commit its offsets replace older
    /// committed ones; on abort they are dropped. True if it had any.
    pub fn complete_txn(&mut self, producer_id: i64, commit: bool) -> bool {
        let Some(pending) = self.pending_txn.remove(&producer_id) else {
            return false;
        };
        if commit {
            for (key, (value, seq)) in pending {
                let newer = self.offset_seq.get(&key).is_none_or(|&cur| cur < seq);
                if newer {
                    self.commit_offset(key, value, seq);
                }
            }
        }
        true
    }

    // ---- persistence ----------------------------------------------------------------------

    /// The GroupMetadata record of the group as it is now.
    pub fn metadata_record(&self, now: i64) -> Record {
        let p = self.protocol_name.as_deref();
        let value = GroupValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol_name.clone(),
            leader: self.leader.clone().filter(|_| !self.members.is_empty()),
            current_state_timestamp_ms: Some(self.state_timestamp_ms.unwrap_or(now)),
            members: self
                .members
                .values()
                .map(|m| MemberValue {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: m.metadata(p),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        };
        Record {
            partition: self.partition,
            key: records::encode_group_key(&self.id),
            value: Some(records::encode_group_value(&value)),
        }
    }

    /// Replaces the membership with a replayed GroupMetadata record (offsets stay).
    pub fn load_metadata(&mut self, v: GroupValue) {
        self.generation = v.generation;
        self.protocol_type = Some(v.protocol_type).filter(|t| !t.is_empty());
        self.protocol_name = v.protocol;
        self.leader = v.leader;
        self.state_timestamp_ms = v.current_state_timestamp_ms;
        self.members.clear();
        self.static_members.clear();
        self.pending_members.clear();
        self.pending_sync.clear();
        self.sync_deadline_ms = None;
        self.join_deadline_ms = None;
        let ptype = self.protocol_type.clone().unwrap_or_default();
        let pname = self.protocol_name.clone().unwrap_or_default();
        for m in v.members {
            if let Some(i) = &m.group_instance_id {
                self.static_members.insert(i.clone(), m.member_id.clone());
            }
            self.members.insert(
                m.member_id.clone(),
                Member {
                    id: m.member_id,
                    instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    protocol_type: ptype.clone(),
                    protocols: vec![(pname.clone(), m.subscription)],
                    assignment: m.assignment,
                    awaiting_join: None,
                    awaiting_sync: None,
                    is_new: false,
                    heartbeat_deadline_ms: i64::MAX,
                },
            );
        }
        if self
            .leader
            .as_ref()
            .is_some_and(|l| !self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.state = if self.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        };
        self.subscribed_topics = self.compute_subscribed_topics();
    }

    /// Answers every parked request with `error` (the group moves to another coordinator).
    pub fn fail_all_pending(&mut self, error: ErrorCode, env: &mut Env) {
        for m in self.members.values_mut() {
            if let Some(p) = m.awaiting_join.take() {
                env.respond_join(p, JoinResult::error(&m.id, error));
            }
            if let Some(p) = m.awaiting_sync.take() {
                env.respond_sync(p, SyncResult::error(error));
            }
        }
    }

    pub fn snapshot(&self) -> GroupSnapshot {
        let p = self.protocol_name.as_deref();
        GroupSnapshot {
            group_id: self.id.clone(),
            state: self.state,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().filter(|_| !self.members.is_empty()),
            members: self
                .members
                .values()
                .map(|m| MemberSnapshot {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    metadata: m.metadata(p),
                    assignment: m.assignment.clone(),
                })
                .collect(),
            offsets: self
                .offsets
                .iter()
                .map(|((topic, partition), v)| OffsetSnapshot {
                    topic: topic.clone(),
                    partition: *partition,
                    offset: v.offset,
                    leader_epoch: v.leader_epoch,
                    metadata: v.metadata.clone(),
                    commit_timestamp_ms: v.commit_timestamp_ms,
                    expire_timestamp_ms: v.expire_timestamp_ms,
                })
                .collect(),
        }
    }
}

/// A read-only copy of a group, for tests, admin tools and debugging.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSnapshot {
    pub group_id: String,
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: Vec<MemberSnapshot>,
    pub offsets: Vec<OffsetSnapshot>,
}

/// A member in a [`GroupSnapshot`]; `metadata` is for the selected protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberSnapshot {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// A committed offset in a [`GroupSnapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetSnapshot {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    pub expire_timestamp_ms: Option<i64>,
}
