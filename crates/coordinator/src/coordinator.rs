//! `GroupCoordinator`: every classic group this broker coordinates, the request handlers
//! (validation, group lookup/creation, per-version responses), offsets, admin APIs, replay of
//! `__consumer_offsets`, offset retention and partition ownership.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::BuildHasher;

use bytes::Bytes;
use model::acl::ResourceType;
use model::ErrorCode;
use protocol::messages::delete_groups_response::DeletableGroupResult;
use protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use protocol::messages::find_coordinator_response::Coordinator;
use protocol::messages::leave_group_response::MemberResponse;
use protocol::messages::list_groups_response::ListedGroup;
use protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use protocol::messages::{
    BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, LeaveGroupRequest, LeaveGroupResponse,
    ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse,
    SyncGroupRequest, TopicName, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use protocol::{RequestKind, ResponseKind};

use crate::consumer::ConsumerGroups;
use crate::group::{s, Env, Group, GroupState, JoinParams, JoinResult, Pending, SyncResult};
use crate::records::{self, OffsetValue, RecordKey};
use crate::{CoordinatorConfig, Error, GroupSnapshot, Output, Record, RequestContext, TxnRecords};

/// Kafka's partition of `__consumer_offsets` for a group:
/// `Utils.abs(groupId.hashCode) % partitions`, with Java's UTF-16 `String.hashCode`.
pub fn partition_for(group_id: &str, num_partitions: i32) -> i32 {
    let mut h: i32 = 0;
    for unit in group_id.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    // Kafka's Utils.abs maps i32::MIN to 0 rather than overflowing.
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % num_partitions.max(1)
}

/// One topic of an offset fetch: partitions with their committed offset, if any, and the
/// error to report for the partition (UNSTABLE_OFFSET_COMMIT while a transaction holds an
/// offset for it and the client asked for stable offsets).
type FetchedTopic<'a> = (String, Vec<FetchedPartition<'a>>);
type FetchedPartition<'a> = (i32, Option<&'a OffsetValue>, ErrorCode);

/// Where a coordinator is, for FindCoordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordinatorNode {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// Answers FindCoordinator (v0-v3 single key, v4+ batched keys). `locate(key_type, key)`
/// says which broker coordinates a key (key type 0 = group, 1 = transactional id), usually
/// the leader of `partition_for(key)` of the internal topic. Unknown key types get
/// INVALID_REQUEST; the empty group id has a coordinator like any other, as in Kafka 4.x.
pub fn find_coordinator(
    req: &FindCoordinatorRequest,
    version: i16,
    mut locate: impl FnMut(i8, &str) -> Result<CoordinatorNode, ErrorCode>,
) -> FindCoordinatorResponse {
    let key_type = if version >= 1 { req.key_type } else { 0 };
    let mut lookup = |key: &str| -> Result<CoordinatorNode, ErrorCode> {
        match key_type {
            0 | 1 => locate(key_type, key),
            _ => Err(ErrorCode::InvalidRequest),
        }
    };
    let mut resp = FindCoordinatorResponse::default();
    if version >= 4 {
        resp.coordinators = req
            .coordinator_keys
            .iter()
            .map(|key| {
                let mut c = Coordinator::default();
                c.key = key.clone();
                match lookup(key) {
                    Ok(n) => {
                        c.node_id = BrokerId(n.node_id);
                        c.host = s(&n.host);
                        c.port = n.port;
                    }
                    Err(e) => {
                        c.node_id = BrokerId(-1);
                        c.port = -1;
                        c.error_code = e.code();
                        // Kafka's `prepareErrorResponse`: the error's default text.
                        c.error_message = Some(s(e.default_message()));
                    }
                }
                c
            })
            .collect();
    } else {
        // Kafka's `createFindCoordinatorResponse` (v1-v3) sets the error's default text, also
        // on success: "NONE".
        let error = match lookup(&req.key) {
            Ok(n) => {
                resp.node_id = BrokerId(n.node_id);
                resp.host = s(&n.host);
                resp.port = n.port;
                ErrorCode::None
            }
            Err(e) => {
                resp.error_code = e.code();
                resp.node_id = BrokerId(-1);
                resp.port = -1;
                e
            }
        };
        if version >= 1 {
            resp.error_message = Some(s(error.default_message()));
        }
    }
    resp
}

/// Produces unique, unguessable member ids (`<client id>-<uuid-like>`) without a uuid crate.
#[derive(Debug)]
pub(crate) struct MemberIdGenerator {
    state: u64,
}

impl MemberIdGenerator {
    fn new() -> Self {
        // RandomState is seeded from the OS per process: ids differ across restarts.
        MemberIdGenerator {
            state: RandomState::new().hash_one(0x6d6f_6c64_6175u64),
        }
    }

    fn next_u64(&mut self) -> u64 {
        // splitmix64
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A random UUID in its text form (consumer-protocol member ids).
    pub(crate) fn uuid(&mut self) -> String {
        let a = self.next_u64();
        let b = self.next_u64();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }

    fn member_id(&mut self, prefix: &str) -> String {
        let a = self.next_u64();
        let b = self.next_u64();
        format!(
            "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }
}

/// All classic groups this broker coordinates and their committed offsets.
///
/// Single-threaded: every method takes `&mut self`, the current time, and returns an
/// [`Output`]. Groups live in memory; their durable form is the records of
/// `__consumer_offsets`, rebuilt with [`GroupCoordinator::replay`]. Only groups whose
/// partition was loaded with [`GroupCoordinator::load_partition`] are served.
#[derive(Debug)]
pub struct GroupCoordinator {
    pub(crate) config: CoordinatorConfig,
    /// Classic groups, and the committed offsets of every group (a consumer group's offsets
    /// live in an entry here without members).
    pub(crate) groups: BTreeMap<String, Group>,
    /// Consumer-protocol (KIP-848) groups.
    pub(crate) consumer: ConsumerGroups,
    pub(crate) owned_partitions: BTreeSet<i32>,
    /// Partitions being replayed: their groups answer COORDINATOR_LOAD_IN_PROGRESS.
    loading_partitions: BTreeSet<i32>,
    next_retention_check_ms: Option<i64>,
    pub(crate) ids: MemberIdGenerator,
    /// Counts offset records in `__consumer_offsets` order (replayed, then written), to
    /// order transactional offsets against plain commits.
    record_seq: u64,
}

/// One group in [`GroupCoordinator::summaries`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSummary {
    pub group_id: String,
    /// `classic` or `consumer` (Kafka's group types).
    pub protocol: &'static str,
    /// The state as ListGroups reports it (`Stable`, `Empty`, `Assigning`, ...).
    pub state: &'static str,
    pub members: usize,
}

/// Which validation an API applies to the group id (Kafka's `isValidGroupId`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum EmptyGroupId {
    Allowed,
    Invalid,
}

impl GroupCoordinator {
    pub fn new(config: CoordinatorConfig) -> Self {
        GroupCoordinator {
            config,
            groups: BTreeMap::new(),
            consumer: ConsumerGroups::default(),
            owned_partitions: BTreeSet::new(),
            loading_partitions: BTreeSet::new(),
            next_retention_check_ms: None,
            record_seq: 0,
            ids: MemberIdGenerator::new(),
        }
    }

    pub fn config(&self) -> &CoordinatorConfig {
        &self.config
    }

    /// Uses the partition count of the `__consumer_offsets` that exists, which may differ
    /// from `offsets.topic.num.partitions` (as Kafka does: the groups' records are where that
    /// count put them). Call before replaying or loading any partition.
    pub fn set_offsets_topic_partitions(&mut self, partitions: i32) {
        debug_assert!(self.owned_partitions.is_empty() && self.groups.is_empty());
        self.config.offsets_topic_num_partitions = partitions.max(1);
    }

    /// The `__consumer_offsets` partition of a group.
    pub fn partition_for(&self, group_id: &str) -> i32 {
        partition_for(group_id, self.config.offsets_topic_num_partitions)
    }

    /// Marks a partition as being replayed (optional): until `load_partition`, its groups
    /// answer COORDINATOR_LOAD_IN_PROGRESS (clients retry) instead of NOT_COORDINATOR.
    pub fn begin_loading(&mut self, partition: i32) {
        self.loading_partitions.insert(partition);
    }

    /// Starts serving the groups of a partition, after its records were replayed. Members
    /// loaded from the log get a fresh session from `now_ms`.
    pub fn load_partition(&mut self, partition: i32, now_ms: i64) {
        self.loading_partitions.remove(&partition);
        self.owned_partitions.insert(partition);
        for g in self
            .groups
            .values_mut()
            .filter(|g| g.partition == partition)
        {
            for m in g.members.values_mut() {
                m.heartbeat_deadline_ms = now_ms.saturating_add(i64::from(m.session_timeout_ms));
            }
        }
        self.load_consumer_groups(partition, now_ms);
        if self.next_retention_check_ms.is_none() {
            self.next_retention_check_ms =
                Some(now_ms.saturating_add(self.config.offsets_retention_check_interval_ms));
        }
    }

    /// Stops serving a partition (another broker became its leader): parked requests get
    /// NOT_COORDINATOR and the groups are dropped from memory. Their state lives on in the
    /// log, where the new coordinator replays it.
    pub fn unload_partition(&mut self, partition: i32) -> Output {
        let mut out = Output::default();
        self.owned_partitions.remove(&partition);
        self.loading_partitions.remove(&partition);
        let ids: Vec<String> = self
            .groups
            .values()
            .filter(|g| g.partition == partition)
            .map(|g| g.id.clone())
            .collect();
        for id in ids {
            if let Some(mut g) = self.groups.remove(&id) {
                let mut env = Env {
                    cfg: &self.config,
                    now: 0,
                    out: &mut out,
                };
                g.fail_all_pending(ErrorCode::NotCoordinator, &mut env);
            }
        }
        self.consumer.groups.retain(|_, g| g.partition != partition);
        out
    }

    /// Whether this coordinator serves the group's partition.
    pub fn is_coordinator_for(&self, group_id: &str) -> bool {
        self.owned_partitions
            .contains(&self.partition_for(group_id))
    }

    pub(crate) fn validate(&self, group_id: &str, empty: EmptyGroupId) -> Option<ErrorCode> {
        if group_id.is_empty() && empty == EmptyGroupId::Invalid {
            Some(ErrorCode::InvalidGroupId)
        } else if self
            .loading_partitions
            .contains(&self.partition_for(group_id))
        {
            Some(ErrorCode::CoordinatorLoadInProgress)
        } else if !self.is_coordinator_for(group_id) {
            Some(ErrorCode::NotCoordinator)
        } else {
            None
        }
    }

    /// A copy of one group's state.
    pub fn group(&self, group_id: &str) -> Option<GroupSnapshot> {
        self.groups.get(group_id).map(Group::snapshot)
    }

    /// Copies of every group, ordered by id.
    pub fn snapshot(&self) -> Vec<GroupSnapshot> {
        self.groups.values().map(Group::snapshot).collect()
    }

    /// Every group this coordinator serves, classic and consumer protocol, with its state and
    /// member count (what metrics report; consumer groups' offset entries are not groups).
    pub fn summaries(&self) -> Vec<GroupSummary> {
        let owned = |p: i32| self.owned_partitions.contains(&p);
        let classic = self
            .groups
            .values()
            .filter(|g| owned(g.partition) && !self.consumer.contains(&g.id))
            .map(|g| GroupSummary {
                group_id: g.id.clone(),
                protocol: "classic",
                state: g.state.name(),
                members: g.members.len(),
            });
        let consumer = self
            .consumer
            .groups
            .values()
            .filter(|g| owned(g.partition))
            .map(|g| GroupSummary {
                group_id: g.id.clone(),
                protocol: "consumer",
                state: g.state().name(),
                members: g.members.len(),
            });
        classic.chain(consumer).collect()
    }

    /// Runs `f` on a group with an environment, then its timers.
    fn with_group<R>(
        &mut self,
        group_id: &str,
        now_ms: i64,
        out: &mut Output,
        f: impl FnOnce(&mut Group, &mut Env, &mut MemberIdGenerator) -> R,
    ) -> Option<R> {
        let g = self.groups.get_mut(group_id)?;
        let mut env = Env {
            cfg: &self.config,
            now: now_ms,
            out,
        };
        let r = f(g, &mut env, &mut self.ids);
        g.poll(&mut env);
        Some(r)
    }

    // ---- JoinGroup ------------------------------------------------------------------------

    /// JoinGroup (v0-v9). The response is often delayed until the rebalance completes; it
    /// then comes out of a later call or `tick`.
    pub fn join_group(
        &mut self,
        ctx: &RequestContext,
        req: JoinGroupRequest,
        now_ms: i64,
    ) -> Output {
        let mut out = Output::default();
        let pending = Pending {
            token: ctx.token,
            version: ctx.api_version,
        };
        let group_id = req.group_id.0.to_string();
        let member_id = req.member_id.to_string();
        let fail = |cfg: &CoordinatorConfig, out: &mut Output, e: ErrorCode| {
            let mut env = Env {
                cfg,
                now: now_ms,
                out,
            };
            env.respond_join(pending, JoinResult::error(&member_id, e));
        };
        if let Some(e) = self.validate(&group_id, EmptyGroupId::Invalid) {
            fail(&self.config, &mut out, e);
            return out;
        }
        let session = req.session_timeout_ms;
        if session < self.config.group_min_session_timeout_ms
            || session > self.config.group_max_session_timeout_ms
        {
            fail(&self.config, &mut out, ErrorCode::InvalidSessionTimeout);
            return out;
        }
        if self.consumer.contains(&group_id) {
            if self
                .consumer
                .group(&group_id)
                .is_some_and(|g| !g.is_empty())
            {
                self.join_consumer_group(pending, ctx, &req, now_ms, &mut out);
                return out;
            }
            self.retire_empty_consumer_group(&group_id, &mut out);
        }
        let is_unknown = member_id.is_empty();
        if !self.groups.contains_key(&group_id) {
            if !is_unknown {
                fail(&self.config, &mut out, ErrorCode::UnknownMemberId);
                return out;
            }
            let partition = self.partition_for(&group_id);
            self.groups
                .insert(group_id.clone(), Group::new(&group_id, partition));
        }
        let params = JoinParams {
            instance_id: if ctx.api_version >= 5 {
                req.group_instance_id.as_deref().map(str::to_string)
            } else {
                None
            },
            client_id: ctx.client_id.to_string(),
            client_host: ctx.client_host.to_string(),
            // v0 has no rebalance timeout: Kafka uses the session timeout.
            rebalance_timeout_ms: if ctx.api_version == 0 {
                session
            } else {
                req.rebalance_timeout_ms
            },
            session_timeout_ms: session,
            protocol_type: req.protocol_type.to_string(),
            protocols: req
                .protocols
                .into_iter()
                .map(|p| (p.name.to_string(), p.metadata))
                .collect(),
        };
        // KIP-394: dynamic members of v4+ first get a member id and must rejoin with it.
        let require_known_member_id = ctx.api_version >= 4 && params.instance_id.is_none();
        let max_size = self.config.group_max_size;
        self.with_group(&group_id, now_ms, &mut out, |g, env, ids| {
            if !g.accepts_joining_member(&member_id, max_size) {
                g.remove_member_and_update_group(&member_id, env);
                env.respond_join(
                    pending,
                    JoinResult::error("", ErrorCode::GroupMaxSizeReached),
                );
            } else if is_unknown {
                join_new_member(g, &params, require_known_member_id, pending, env, ids);
            } else {
                g.join_current_member(&member_id, &params, pending, env);
            }
        });
        out
    }

    // ---- SyncGroup ------------------------------------------------------------------------

    /// SyncGroup (v0-v5). A follower's response waits for the leader's assignment.
    pub fn sync_group(
        &mut self,
        ctx: &RequestContext,
        req: SyncGroupRequest,
        now_ms: i64,
    ) -> Output {
        let mut out = Output::default();
        let pending = Pending {
            token: ctx.token,
            version: ctx.api_version,
        };
        let group_id = req.group_id.0.to_string();
        // v5+ must name the protocol type and name (KafkaApis checks before the coordinator).
        let missing_protocol =
            ctx.api_version >= 5 && (req.protocol_type.is_none() || req.protocol_name.is_none());
        let error = missing_protocol
            .then_some(ErrorCode::InconsistentGroupProtocol)
            .or_else(|| self.validate(&group_id, EmptyGroupId::Invalid));
        if error.is_none() && self.consumer.contains(&group_id) {
            self.sync_consumer_group(pending, &req, now_ms, &mut out);
            return out;
        }
        let error = error.or_else(|| {
            (!self.groups.contains_key(&group_id)).then_some(ErrorCode::UnknownMemberId)
        });
        if let Some(mut e) = error {
            if e == ErrorCode::CoordinatorLoadInProgress {
                // The rebalance state was lost with the old coordinator: have the member rejoin.
                // (Older clients do not expect COORDINATOR_LOAD_IN_PROGRESS here.)
                e = ErrorCode::RebalanceInProgress;
            }
            let mut env = Env {
                cfg: &self.config,
                now: now_ms,
                out: &mut out,
            };
            env.respond_sync(pending, SyncResult::error(e));
            return out;
        }
        let v = ctx.api_version;
        let instance_id = if v >= 3 {
            req.group_instance_id.as_deref().map(str::to_string)
        } else {
            None
        };
        let ptype = if v >= 5 {
            req.protocol_type.as_deref().map(str::to_string)
        } else {
            None
        };
        let pname = if v >= 5 {
            req.protocol_name.as_deref().map(str::to_string)
        } else {
            None
        };
        let assignments: Vec<(String, Bytes)> = req
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect();
        let member_id = req.member_id.to_string();
        self.with_group(&group_id, now_ms, &mut out, |g, env, _| {
            g.sync(
                &member_id,
                instance_id.as_deref(),
                req.generation_id,
                (ptype.as_deref(), pname.as_deref()),
                assignments,
                pending,
                env,
            );
        });
        out
    }

    // ---- Heartbeat ------------------------------------------------------------------------

    /// Heartbeat (v0-v4). Answered immediately.
    pub fn heartbeat(
        &mut self,
        ctx: &RequestContext,
        req: HeartbeatRequest,
        now_ms: i64,
    ) -> Output {
        let mut out = Output::default();
        let group_id = req.group_id.0.to_string();
        let instance_id = if ctx.api_version >= 3 {
            req.group_instance_id.as_deref().map(str::to_string)
        } else {
            None
        };
        let member_id = req.member_id.to_string();
        let error = match self.validate(&group_id, EmptyGroupId::Invalid) {
            // Kafka answers heartbeats blindly while the group is loading.
            Some(ErrorCode::CoordinatorLoadInProgress) => ErrorCode::None,
            Some(e) => e,
            None if self.consumer.contains(&group_id) => {
                self.heartbeat_consumer_group(&req, ctx.api_version, now_ms)
            }
            None => self
                .with_group(&group_id, now_ms, &mut out, |g, env, _| {
                    g.heartbeat(
                        &member_id,
                        instance_id.as_deref(),
                        req.generation_id,
                        env.now,
                    )
                })
                .unwrap_or(ErrorCode::UnknownMemberId),
        };
        let mut resp = HeartbeatResponse::default();
        resp.error_code = error.code();
        out.responses
            .push((ctx.token, ResponseKind::Heartbeat(resp)));
        out
    }

    // ---- LeaveGroup -----------------------------------------------------------------------

    /// LeaveGroup (v0-v5; v3+ leaves several members at once, also by group.instance.id).
    pub fn leave_group(
        &mut self,
        ctx: &RequestContext,
        req: LeaveGroupRequest,
        now_ms: i64,
    ) -> Output {
        let mut out = Output::default();
        let v = ctx.api_version;
        let group_id = req.group_id.0.to_string();
        let leaving: Vec<(String, Option<String>)> = if v >= 3 {
            req.members
                .iter()
                .map(|m| {
                    (
                        m.member_id.to_string(),
                        m.group_instance_id.as_deref().map(str::to_string),
                    )
                })
                .collect()
        } else {
            vec![(req.member_id.to_string(), None)]
        };
        let (top, members): (ErrorCode, Vec<ErrorCode>) =
            match self.validate(&group_id, EmptyGroupId::Invalid) {
                Some(e) => (e, Vec::new()),
                None if self.consumer.contains(&group_id) => (
                    ErrorCode::None,
                    self.leave_consumer_group(&group_id, &leaving, now_ms, &mut out),
                ),
                None => {
                    let r = self.with_group(&group_id, now_ms, &mut out, |g, env, _| {
                        leaving
                            .iter()
                            .map(|(m, i)| g.leave(m, i.as_deref(), env))
                            .collect::<Vec<_>>()
                    });
                    match r {
                        Some(errors) => (ErrorCode::None, errors),
                        None => (
                            ErrorCode::None,
                            vec![ErrorCode::UnknownMemberId; leaving.len()],
                        ),
                    }
                }
            };
        let mut resp = LeaveGroupResponse::default();
        if v >= 3 {
            resp.error_code = top.code();
            resp.members = leaving
                .iter()
                .zip(members.iter())
                .map(|((m, i), e)| {
                    let mut r = MemberResponse::default();
                    r.member_id = s(m);
                    r.group_instance_id = i.as_deref().map(s);
                    r.error_code = e.code();
                    r
                })
                .collect();
        } else {
            // One member, no per-member list: its error is the response's error.
            let e = if top != ErrorCode::None {
                top
            } else {
                members.first().copied().unwrap_or(ErrorCode::None)
            };
            resp.error_code = e.code();
        }
        out.responses
            .push((ctx.token, ResponseKind::LeaveGroup(resp)));
        out
    }

    // ---- OffsetCommit ---------------------------------------------------------------------

    /// OffsetCommit (v2-v9). Members of the current generation commit; so do consumers
    /// without a membership (generation -1, whatever member id they name) while the group
    /// is empty.
    pub fn offset_commit(
        &mut self,
        ctx: &RequestContext,
        req: OffsetCommitRequest,
        now_ms: i64,
    ) -> Output {
        let mut out = Output::default();
        let v = ctx.api_version;
        let group_id = req.group_id.0.to_string();
        let member_id = req.member_id.to_string();
        let generation = req.generation_id_or_member_epoch;
        let instance_id = if v >= 7 {
            req.group_instance_id.as_deref().map(str::to_string)
        } else {
            None
        };
        let mut error = self.validate(&group_id, EmptyGroupId::Allowed);
        // Consumer groups check member epochs; their offsets live in a classic entry.
        let (consumer, held) = match error
            .is_none()
            .then(|| {
                self.consumer_offset_commit_check(
                    &group_id,
                    &member_id,
                    instance_id.as_deref(),
                    generation,
                    false,
                    v,
                )
            })
            .flatten()
        {
            Some((e, held)) => (Some(e), held),
            None => (None, None),
        };
        if let Some(e) = consumer {
            error = e;
        } else if error.is_none() && !self.groups.contains_key(&group_id) {
            if generation < 0 {
                // A simple consumer using Kafka only for offset storage.
                let partition = self.partition_for(&group_id);
                self.groups
                    .insert(group_id.clone(), Group::new(&group_id, partition));
            } else if v >= 9 {
                // KIP-848 versions name the missing group (Kafka 4.x).
                error = Some(ErrorCode::GroupIdNotFound);
            } else {
                error = Some(ErrorCode::IllegalGeneration);
            }
        }
        if error.is_none() && consumer.is_none() {
            error = self.groups.get_mut(&group_id).and_then(|g| {
                g.validate_offset_commit(
                    &member_id,
                    instance_id.as_deref(),
                    generation,
                    false,
                    now_ms,
                )
            });
        }
        // v2-v4 carry a retention time; -1 means the broker's retention.
        let expire = (v <= 4 && req.retention_time_ms >= 0)
            .then(|| now_ms.saturating_add(req.retention_time_ms));
        let max_metadata = self.config.offset_metadata_max_bytes;
        let mut resp = OffsetCommitResponse::default();
        for t in req.topics {
            let topic = t.name.0.to_string();
            let mut rt = OffsetCommitResponseTopic::default();
            rt.name = t.name.clone();
            for p in t.partitions {
                let metadata = p.committed_metadata.as_deref().unwrap_or("").to_string();
                let refused = held
                    .as_ref()
                    .and_then(|h| h.refuses(&topic, p.partition_index));
                let e = match (error, refused) {
                    (Some(e), _) => e,
                    (None, _) if metadata.len() > max_metadata => ErrorCode::OffsetMetadataTooLarge,
                    (None, Some(e)) => e,
                    (None, None) => {
                        let value = OffsetValue {
                            offset: p.committed_offset,
                            leader_epoch: if v >= 6 { p.committed_leader_epoch } else { -1 },
                            metadata,
                            commit_timestamp_ms: now_ms,
                            expire_timestamp_ms: expire,
                        };
                        if let Some(g) = self.groups.get_mut(&group_id) {
                            out.records.push(Record {
                                partition: g.partition,
                                key: records::encode_offset_key(
                                    &group_id,
                                    &topic,
                                    p.partition_index,
                                ),
                                value: Some(records::encode_offset_value(&value)),
                            });
                            self.record_seq += 1;
                            out.stats.offset_commits += 1;
                            g.commit_offset(
                                (topic.clone(), p.partition_index),
                                value,
                                self.record_seq,
                            );
                        }
                        ErrorCode::None
                    }
                };
                let mut rp = OffsetCommitResponsePartition::default();
                rp.partition_index = p.partition_index;
                rp.error_code = e.code();
                rt.partitions.push(rp);
            }
            resp.topics.push(rt);
        }
        self.with_group(&group_id, now_ms, &mut out, |_, _, _| ());
        out.responses
            .push((ctx.token, ResponseKind::OffsetCommit(resp)));
        out
    }

    // ---- OffsetFetch ----------------------------------------------------------------------

    /// The committed offsets of one group: `topics: None` means all of them.
    fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<Vec<(String, Vec<i32>)>>,
        require_stable: bool,
    ) -> Result<Vec<FetchedTopic<'_>>, ErrorCode> {
        if let Some(e) = self.validate(group_id, EmptyGroupId::Allowed) {
            return Err(e);
        }
        let group = self.groups.get(group_id);
        let entry = |t: &str, p: i32| -> (i32, Option<&OffsetValue>, ErrorCode) {
            let key = (t.to_string(), p);
            if require_stable && group.is_some_and(|g| g.has_pending_txn_offset(&key)) {
                return (p, None, ErrorCode::UnstableOffsetCommit);
            }
            (p, group.and_then(|g| g.offsets.get(&key)), ErrorCode::None)
        };
        Ok(match topics {
            Some(topics) => topics
                .into_iter()
                .map(|(t, parts)| {
                    let parts = parts.into_iter().map(|p| entry(&t, p)).collect();
                    (t, parts)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, Vec<FetchedPartition<'_>>> = BTreeMap::new();
                if let Some(g) = group {
                    for (t, p) in g.offsets.keys() {
                        by_topic.entry(t.clone()).or_default().push(entry(t, *p));
                    }
                }
                by_topic.into_iter().collect()
            }
        })
    }

    /// OffsetFetch (v1-v9; v8+ fetches several groups). Answered immediately.
    pub fn offset_fetch(
        &mut self,
        ctx: &RequestContext,
        req: OffsetFetchRequest,
        _now_ms: i64,
    ) -> Output {
        let mut out = Output::default();
        let v = ctx.api_version;
        let mut resp = OffsetFetchResponse::default();
        if v >= 8 {
            for g in &req.groups {
                let group_id = g.group_id.0.to_string();
                let topics = g.topics.as_ref().map(|ts| {
                    ts.iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                        .collect()
                });
                let mut rg = OffsetFetchResponseGroup::default();
                rg.group_id = g.group_id.clone();
                // v9: members of consumer groups fetch with their member epoch.
                if let Some(e) = self.consumer_offset_fetch_check(&group_id, v, g) {
                    rg.error_code = e.code();
                    resp.groups.push(rg);
                    continue;
                }
                match self.fetch_offsets(&group_id, topics, req.require_stable) {
                    Ok(topics) => {
                        rg.topics = topics
                            .into_iter()
                            .map(|(t, parts)| {
                                let mut rt = OffsetFetchResponseTopics::default();
                                rt.name = TopicName(s(&t));
                                rt.partitions = parts
                                    .into_iter()
                                    .map(|(p, o, e)| {
                                        let mut rp = OffsetFetchResponsePartitions::default();
                                        rp.partition_index = p;
                                        rp.error_code = e.code();
                                        rp.committed_offset = o.map_or(-1, |o| o.offset);
                                        rp.committed_leader_epoch =
                                            o.map_or(-1, |o| o.leader_epoch);
                                        rp.metadata =
                                            Some(s(o.map_or("", |o| o.metadata.as_str())));
                                        rp
                                    })
                                    .collect();
                                rt
                            })
                            .collect();
                    }
                    Err(e) => rg.error_code = e.code(),
                }
                resp.groups.push(rg);
            }
        } else {
            let group_id = req.group_id.0.to_string();
            let requested: Option<Vec<(String, Vec<i32>)>> = req.topics.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                    .collect()
            });
            let partition = |p: i32, o: Option<&OffsetValue>, e: ErrorCode| {
                let mut rp = OffsetFetchResponsePartition::default();
                rp.partition_index = p;
                rp.committed_offset = o.map_or(-1, |o| o.offset);
                if v >= 5 {
                    rp.committed_leader_epoch = o.map_or(-1, |o| o.leader_epoch);
                }
                rp.metadata = Some(s(o.map_or("", |o| o.metadata.as_str())));
                rp.error_code = e.code();
                rp
            };
            let require_stable = v >= 7 && req.require_stable;
            match self.fetch_offsets(&group_id, requested.clone(), require_stable) {
                Ok(topics) => {
                    resp.topics = topics
                        .into_iter()
                        .map(|(t, parts)| {
                            let mut rt = OffsetFetchResponseTopic::default();
                            rt.name = TopicName(s(&t));
                            rt.partitions = parts
                                .into_iter()
                                .map(|(p, o, e)| partition(p, o, e))
                                .collect();
                            rt
                        })
                        .collect();
                }
                Err(e) => {
                    if v >= 2 {
                        resp.error_code = e.code();
                    } else {
                        // v1 has no top-level error: every partition carries it.
                        resp.topics = requested
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(t, parts)| {
                                let mut rt = OffsetFetchResponseTopic::default();
                                rt.name = TopicName(s(&t));
                                rt.partitions =
                                    parts.into_iter().map(|p| partition(p, None, e)).collect();
                                rt
                            })
                            .collect();
                    }
                }
            }
        }
        out.responses
            .push((ctx.token, ResponseKind::OffsetFetch(resp)));
        out
    }

    // ---- OffsetDelete ---------------------------------------------------------------------

    /// OffsetDelete (v0): deletes offsets of an empty group, or of topics a consumer group is
    /// not subscribed to (else GROUP_SUBSCRIBED_TO_TOPIC).
    pub fn offset_delete(
        &mut self,
        ctx: &RequestContext,
        req: OffsetDeleteRequest,
        _now_ms: i64,
    ) -> Output {
        let mut out = Output::default();
        let group_id = req.group_id.0.to_string();
        let mut resp = OffsetDeleteResponse::default();
        // A consumer group protects the topics its members subscribe to.
        let consumer_subscribed = self.consumer_offsets_holder(&group_id);
        let group_error = self.validate(&group_id, EmptyGroupId::Invalid).or_else(|| {
            (!self.groups.contains_key(&group_id)).then_some(ErrorCode::GroupIdNotFound)
        });
        let group_error = match (group_error, self.groups.get_mut(&group_id)) {
            (None, Some(g)) => {
                let subscribed = match g.state {
                    _ if consumer_subscribed.is_some() => consumer_subscribed,
                    GroupState::Empty => Some(BTreeSet::new()),
                    _ if g.protocol_type.as_deref() == Some("consumer") => {
                        Some(g.subscribed_topics.clone().unwrap_or_default())
                    }
                    _ => None,
                };
                match subscribed {
                    None => Some(ErrorCode::NonEmptyGroup),
                    Some(subscribed) => {
                        for t in &req.topics {
                            let topic = t.name.0.to_string();
                            let mut rt = OffsetDeleteResponseTopic::default();
                            rt.name = t.name.clone();
                            for p in &t.partitions {
                                let e = if subscribed.contains(&topic) {
                                    ErrorCode::GroupSubscribedToTopic
                                } else {
                                    if g.offsets
                                        .remove(&(topic.clone(), p.partition_index))
                                        .is_some()
                                    {
                                        out.records.push(Record {
                                            partition: g.partition,
                                            key: records::encode_offset_key(
                                                &group_id,
                                                &topic,
                                                p.partition_index,
                                            ),
                                            value: None,
                                        });
                                    }
                                    ErrorCode::None
                                };
                                let mut rp = OffsetDeleteResponsePartition::default();
                                rp.partition_index = p.partition_index;
                                rp.error_code = e.code();
                                rt.partitions.push(rp);
                            }
                            resp.topics.push(rt);
                        }
                        None
                    }
                }
            }
            (e, _) => e,
        };
        if let Some(e) = group_error {
            resp.error_code = e.code();
            resp.topics.clear();
        }
        out.responses
            .push((ctx.token, ResponseKind::OffsetDelete(resp)));
        out
    }

    // ---- ListGroups / DescribeGroups / DeleteGroups -----------------------------------------

    /// ListGroups (v0-v5; v4 filters by state, v5 by type: these are all "classic").
    pub fn list_groups(
        &mut self,
        ctx: &RequestContext,
        req: ListGroupsRequest,
        _now_ms: i64,
    ) -> Output {
        let mut out = Output::default();
        let v = ctx.api_version;
        let states: Vec<String> = if v >= 4 {
            req.states_filter.iter().map(|s| s.to_lowercase()).collect()
        } else {
            Vec::new()
        };
        let types: Vec<String> = if v >= 5 {
            req.types_filter.iter().map(|s| s.to_lowercase()).collect()
        } else {
            Vec::new()
        };
        let mut resp = ListGroupsResponse::default();
        if !self.loading_partitions.is_empty() {
            resp.error_code = ErrorCode::CoordinatorLoadInProgress.code();
        }
        if types.is_empty() || types.iter().any(|t| t == "classic") {
            for g in self
                .groups
                .values()
                .filter(|g| self.owned_partitions.contains(&g.partition))
                .filter(|g| !self.consumer.contains(&g.id))
            {
                let state = g.state.name();
                if !states.is_empty() && !states.iter().any(|s| s == &state.to_lowercase()) {
                    continue;
                }
                let mut lg = ListedGroup::default();
                lg.group_id = GroupId(s(&g.id));
                lg.protocol_type = s(g.protocol_type.as_deref().unwrap_or(""));
                if v >= 4 {
                    lg.group_state = s(state);
                }
                if v >= 5 {
                    lg.group_type = s("classic");
                }
                resp.groups.push(lg);
            }
        }
        if types.is_empty() || types.iter().any(|t| t == "consumer") {
            resp.groups.extend(self.list_consumer_groups(v, &states));
        }
        out.responses
            .push((ctx.token, ResponseKind::ListGroups(resp)));
        out
    }

    /// DescribeGroups (v0-v6). Member metadata is shown only when Stable, assignments in
    /// every state, as in Kafka 4.x.
    pub fn describe_groups(
        &mut self,
        ctx: &RequestContext,
        req: DescribeGroupsRequest,
        _now_ms: i64,
    ) -> Output {
        let mut out = Output::default();
        let v = ctx.api_version;
        let mut resp = DescribeGroupsResponse::default();
        for id in &req.groups {
            let group_id = id.0.to_string();
            let mut dg = DescribedGroup::default();
            dg.group_id = id.clone();
            if let Some(e) = self.validate(&group_id, EmptyGroupId::Allowed) {
                dg.error_code = e.code();
            } else if self.consumer.contains(&group_id) {
                // As Kafka: a consumer group is described by ConsumerGroupDescribe.
                dg.group_state = s(GroupState::Dead.name());
                if v >= 6 {
                    dg.error_code = ErrorCode::GroupIdNotFound.code();
                    dg.error_message =
                        Some(s(&format!("Group {group_id} is not a classic group.")));
                }
            } else if let Some(g) = self.groups.get(&group_id) {
                let stable = g.state == GroupState::Stable;
                dg.group_state = s(g.state.name());
                dg.protocol_type = s(g.protocol_type.as_deref().unwrap_or(""));
                dg.protocol_data = s(if stable {
                    g.protocol_name.as_deref().unwrap_or("")
                } else {
                    ""
                });
                let snapshot = g.snapshot();
                dg.members = snapshot
                    .members
                    .into_iter()
                    .map(|m| {
                        let mut dm = DescribedGroupMember::default();
                        dm.member_id = s(&m.member_id);
                        if v >= 4 {
                            dm.group_instance_id = m.group_instance_id.as_deref().map(s);
                        }
                        dm.client_id = s(&m.client_id);
                        dm.client_host = s(&m.client_host);
                        // Kafka 4.x shows the current assignment in every state and the
                        // member metadata only when Stable.
                        if stable {
                            dm.member_metadata = m.metadata;
                        }
                        dm.member_assignment = m.assignment;
                        dm
                    })
                    .collect();
            } else if v >= 6 {
                dg.error_code = ErrorCode::GroupIdNotFound.code();
                dg.error_message = Some(s(&format!("Group {group_id} not found.")));
            } else {
                dg.group_state = s(GroupState::Dead.name());
            }
            // Kafka fills the field only for groups described without error; with no
            // authorizer the set is every operation a group supports.
            if v >= 3 && req.include_authorized_operations && dg.error_code == 0 {
                dg.authorized_operations = ResourceType::Group.all_operations_bitfield();
            }
            resp.groups.push(dg);
        }
        out.responses
            .push((ctx.token, ResponseKind::DescribeGroups(resp)));
        out
    }

    /// DeleteGroups (v0-v2): only empty groups; their offsets and metadata get tombstones.
    pub fn delete_groups(
        &mut self,
        ctx: &RequestContext,
        req: DeleteGroupsRequest,
        _now_ms: i64,
    ) -> Output {
        let mut out = Output::default();
        let mut resp = DeleteGroupsResponse::default();
        let mut seen = BTreeSet::new();
        // A group named twice is answered once, as Kafka does.
        for id in req.groups_names.iter().filter(|g| seen.insert(g.0.clone())) {
            let group_id = id.0.to_string();
            let e = match self.validate(&group_id, EmptyGroupId::Allowed) {
                Some(e) => e,
                None if self.consumer.contains(&group_id) => {
                    self.delete_consumer_group(&group_id, &mut out)
                }
                None => match self.groups.get(&group_id).map(|g| g.state) {
                    None => ErrorCode::GroupIdNotFound,
                    Some(GroupState::Empty) => {
                        if let Some(g) = self.groups.remove(&group_id) {
                            out.records.extend(tombstones(&g));
                            tracing::info!(group = %group_id, "group deleted");
                        }
                        ErrorCode::None
                    }
                    Some(_) => ErrorCode::NonEmptyGroup,
                },
            };
            let mut r = DeletableGroupResult::default();
            r.group_id = id.clone();
            r.error_code = e.code();
            resp.results.push(r);
        }
        out.responses
            .push((ctx.token, ResponseKind::DeleteGroups(resp)));
        out
    }

    /// Runs a group API request; gives back requests of other APIs. FindCoordinator is not
    /// handled here (see [`find_coordinator`]): it needs the cluster's view of leaders.
    // The request is moved back once per call; boxing it would cost every caller an
    // allocation for no gain.
    #[allow(clippy::result_large_err)]
    pub fn handle(
        &mut self,
        ctx: &RequestContext,
        request: RequestKind,
        now_ms: i64,
    ) -> Result<Output, RequestKind> {
        Ok(match request {
            RequestKind::JoinGroup(r) => self.join_group(ctx, r, now_ms),
            RequestKind::SyncGroup(r) => self.sync_group(ctx, r, now_ms),
            RequestKind::Heartbeat(r) => self.heartbeat(ctx, r, now_ms),
            RequestKind::LeaveGroup(r) => self.leave_group(ctx, r, now_ms),
            RequestKind::OffsetCommit(r) => self.offset_commit(ctx, r, now_ms),
            RequestKind::OffsetFetch(r) => self.offset_fetch(ctx, r, now_ms),
            RequestKind::OffsetDelete(r) => self.offset_delete(ctx, r, now_ms),
            RequestKind::ListGroups(r) => self.list_groups(ctx, r, now_ms),
            RequestKind::DescribeGroups(r) => self.describe_groups(ctx, r, now_ms),
            RequestKind::DeleteGroups(r) => self.delete_groups(ctx, r, now_ms),
            RequestKind::TxnOffsetCommit(r) => self.txn_offset_commit(ctx, r, now_ms),
            RequestKind::ConsumerGroupHeartbeat(r) => self.consumer_group_heartbeat(ctx, r, now_ms),
            RequestKind::ConsumerGroupDescribe(r) => self.consumer_group_describe(ctx, r, now_ms),
            other => return Err(other),
        })
    }

    /// Drops the committed offsets of deleted topics (Kafka's `handleDeletedPartitions`):
    /// tombstones in `records`; no responses.
    pub fn delete_topic_offsets(&mut self, topics: &[&str]) -> Output {
        let mut out = Output::default();
        for g in self.groups.values_mut() {
            if !self.owned_partitions.contains(&g.partition) {
                continue;
            }
            let doomed: Vec<(String, i32)> = g
                .offsets
                .keys()
                .filter(|(t, _)| topics.contains(&t.as_str()))
                .cloned()
                .collect();
            for (topic, partition) in doomed {
                g.remove_offset(&(topic.clone(), partition));
                out.records.push(Record {
                    partition: g.partition,
                    key: records::encode_offset_key(&g.id, &topic, partition),
                    value: None,
                });
            }
        }
        out
    }

    // ---- transactions -------------------------------------------------------------------------

    /// TxnOffsetCommit (v0-v5): offsets committed inside a producer's transaction. They are
    /// written as a transactional batch of the producer ([`Output::txn_records`]) and stay
    /// pending (invisible to OffsetFetch, which reports UNSTABLE_OFFSET_COMMIT to clients that
    /// require stable offsets) until [`GroupCoordinator::complete_txn`]. The runtime has
    /// already checked, with the transaction coordinator, that the producer's transaction
    /// contains the group's partition (KIP-890), so a stale epoch never gets here.
    pub fn txn_offset_commit(
        &mut self,
        ctx: &RequestContext,
        req: TxnOffsetCommitRequest,
        now_ms: i64,
    ) -> Output {
        let mut out = Output::default();
        let v = ctx.api_version;
        let group_id = req.group_id.0.to_string();
        let (member_id, generation, instance_id) = if v >= 3 {
            (
                req.member_id.to_string(),
                req.generation_id,
                req.group_instance_id.as_deref().map(str::to_string),
            )
        } else {
            (String::new(), -1, None)
        };
        let mut error = self.validate(&group_id, EmptyGroupId::Invalid);
        // Consumer groups: the generation is the member epoch (Kafka's validateOffsetCommit).
        let (consumer, held) = match error
            .is_none()
            .then(|| {
                self.consumer_offset_commit_check(
                    &group_id,
                    &member_id,
                    instance_id.as_deref(),
                    generation,
                    true,
                    v,
                )
            })
            .flatten()
        {
            Some((e, held)) => (Some(e), held),
            None => (None, None),
        };
        if let Some(e) = consumer {
            error = e;
        } else if error.is_none() && !self.groups.contains_key(&group_id) {
            if generation < 0 {
                let partition = self.partition_for(&group_id);
                self.groups
                    .insert(group_id.clone(), Group::new(&group_id, partition));
            } else if v >= 9 {
                // KIP-848 versions name the missing group (Kafka 4.x).
                error = Some(ErrorCode::GroupIdNotFound);
            } else {
                error = Some(ErrorCode::IllegalGeneration);
            }
        }
        if error.is_none() && consumer.is_none() {
            error = self.groups.get_mut(&group_id).and_then(|g| {
                g.validate_offset_commit(
                    &member_id,
                    instance_id.as_deref(),
                    generation,
                    true,
                    now_ms,
                )
            });
        }
        let max_metadata = self.config.offset_metadata_max_bytes;
        let producer_id = req.producer_id.0;
        let mut resp = TxnOffsetCommitResponse::default();
        let mut records = Vec::new();
        for t in req.topics {
            let topic = t.name.0.to_string();
            let mut rt = TxnOffsetCommitResponseTopic::default();
            rt.name = t.name.clone();
            for p in t.partitions {
                let metadata = p.committed_metadata.as_deref().unwrap_or("").to_string();
                let refused = held
                    .as_ref()
                    .and_then(|h| h.refuses(&topic, p.partition_index));
                let e = match (error, refused) {
                    (Some(e), _) => e,
                    (None, _) if metadata.len() > max_metadata => ErrorCode::OffsetMetadataTooLarge,
                    (None, Some(e)) => e,
                    (None, None) => {
                        let value = OffsetValue {
                            offset: p.committed_offset,
                            leader_epoch: if v >= 2 { p.committed_leader_epoch } else { -1 },
                            metadata,
                            commit_timestamp_ms: now_ms,
                            expire_timestamp_ms: None,
                        };
                        if let Some(g) = self.groups.get_mut(&group_id) {
                            records.push(Record {
                                partition: g.partition,
                                key: records::encode_offset_key(
                                    &group_id,
                                    &topic,
                                    p.partition_index,
                                ),
                                value: Some(records::encode_offset_value(&value)),
                            });
                            self.record_seq += 1;
                            g.pending_txn.entry(producer_id).or_default().insert(
                                (topic.clone(), p.partition_index),
                                (value, self.record_seq),
                            );
                        }
                        ErrorCode::None
                    }
                };
                let mut rp = TxnOffsetCommitResponsePartition::default();
                rp.partition_index = p.partition_index;
                rp.error_code = e.code();
                rt.partitions.push(rp);
            }
            resp.topics.push(rt);
        }
        if !records.is_empty() {
            let partition = self.partition_for(&group_id);
            out.txn_records.push(TxnRecords {
                producer_id,
                producer_epoch: req.producer_epoch,
                partition,
                records,
            });
        }
        self.with_group(&group_id, now_ms, &mut out, |_, _, _| ());
        out.responses
            .push((ctx.token, ResponseKind::TxnOffsetCommit(resp)));
        out
    }

    /// A transaction marker was written to `__consumer_offsets` partition `partition` for
    /// `producer_id` (or replayed): its pending offsets in that partition's groups become
    /// committed (commit) or are dropped (abort). A marker for a producer without pending
    /// offsets changes nothing.
    pub fn complete_txn(&mut self, producer_id: i64, partition: i32, commit: bool) {
        for g in self
            .groups
            .values_mut()
            .filter(|g| g.partition == partition)
        {
            if g.complete_txn(producer_id, commit) {
                tracing::debug!(group = %g.id, producer_id, commit, "transactional offsets completed");
            }
        }
    }

    /// Applies one record of a transactional batch of `producer_id` while loading: a
    /// pending transactional offset until the producer's marker is replayed.
    pub fn replay_txn(
        &mut self,
        producer_id: i64,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), Error> {
        match (records::decode_key(key)?, value) {
            (
                RecordKey::Offset {
                    group,
                    topic,
                    partition,
                },
                Some(v),
            ) => {
                let v = records::decode_offset_value(v)?;
                self.record_seq += 1;
                let seq = self.record_seq;
                self.group_entry(&group)
                    .pending_txn
                    .entry(producer_id)
                    .or_default()
                    .insert((topic, partition), (v, seq));
                Ok(())
            }
            // Kafka writes only offsets transactionally; anything else replays as usual.
            _ => self.replay(key, value),
        }
    }

    // ---- time ---------------------------------------------------------------------------------

    /// Expires sessions and pending members, completes rebalances whose members all joined or
    /// whose timeout passed, drops members that never synced, and every
    /// `offsets.retention.check.interval.ms` expires offsets (tombstones in `records`).
    pub fn tick(&mut self, now_ms: i64) -> Output {
        let mut out = Output::default();
        for g in self.groups.values_mut() {
            if !self.owned_partitions.contains(&g.partition) {
                continue;
            }
            let mut env = Env {
                cfg: &self.config,
                now: now_ms,
                out: &mut out,
            };
            g.poll(&mut env);
        }
        self.tick_consumer_groups(now_ms, &mut out);
        if self.next_retention_check_ms.is_some_and(|t| t <= now_ms) {
            self.expire_offsets(now_ms, &mut out);
            self.next_retention_check_ms =
                Some(now_ms.saturating_add(self.config.offsets_retention_check_interval_ms.max(1)));
        }
        out
    }

    /// When `tick` should run next (None: nothing scheduled).
    pub fn next_deadline(&self) -> Option<i64> {
        self.groups
            .values()
            .filter(|g| self.owned_partitions.contains(&g.partition))
            .filter_map(Group::next_deadline)
            .chain(self.next_retention_check_ms)
            .chain(self.consumer_next_deadline())
            .min()
    }

    /// Kafka's offset retention (KIP-211): offsets of an empty group expire
    /// `offsets.retention.minutes` after the group became empty; offsets of a group that never
    /// had members (simple consumers) after their commit; offsets of a stable consumer group
    /// for topics it no longer subscribes to after their commit. An explicit expire timestamp
    /// (OffsetCommit v2-v4) wins. Empty groups left without offsets are deleted.
    fn expire_offsets(&mut self, now_ms: i64, out: &mut Output) {
        let retention = self.config.offsets_retention_ms;
        let mut dead = Vec::new();
        // Consumer groups: offsets of subscribed topics stay; others expire after their
        // commit (Kafka's ConsumerGroup offset expiration condition).
        let consumer_subscribed = self.consumer_subscribed_topics();
        for g in self.groups.values_mut() {
            if !self.owned_partitions.contains(&g.partition) {
                continue;
            }
            let rule: Option<(Option<i64>, BTreeSet<String>)> = match (&g.protocol_type, g.state) {
                _ if consumer_subscribed.contains_key(&g.id) => {
                    consumer_subscribed.get(&g.id).map(|t| (None, t.clone()))
                }
                (Some(_), GroupState::Empty) => Some((g.state_timestamp_ms, BTreeSet::new())),
                (Some(t), GroupState::Stable) if t == "consumer" => {
                    g.subscribed_topics.clone().map(|topics| (None, topics))
                }
                (None, _) => Some((None, BTreeSet::new())),
                _ => None,
            };
            if let Some((base, subscribed)) = rule {
                let expired: Vec<(String, i32)> = g
                    .offsets
                    .iter()
                    .filter(|((t, _), _)| !subscribed.contains(t))
                    .filter(|(_, o)| match o.expire_timestamp_ms {
                        Some(at) => now_ms >= at,
                        None => now_ms - base.unwrap_or(o.commit_timestamp_ms) >= retention,
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                for (topic, partition) in expired {
                    g.remove_offset(&(topic.clone(), partition));
                    out.records.push(Record {
                        partition: g.partition,
                        key: records::encode_offset_key(&g.id, &topic, partition),
                        value: None,
                    });
                }
            }
            if g.state == GroupState::Empty
                && g.offsets.is_empty()
                && g.pending_members.is_empty()
                && g.pending_txn.is_empty()
            {
                dead.push(g.id.clone());
            }
        }
        for id in dead {
            if consumer_subscribed.contains_key(&id) {
                // Only the offsets holder of a consumer group: it has no record of its own.
                self.groups.remove(&id);
                continue;
            }
            if let Some(g) = self.groups.remove(&id) {
                tracing::info!(group = %id, "removing empty group without offsets");
                out.records.push(Record {
                    partition: g.partition,
                    key: records::encode_group_key(&id),
                    value: None,
                });
            }
        }
        self.expire_empty_consumer_groups(out);
    }

    // ---- replay -------------------------------------------------------------------------------

    /// Applies one `__consumer_offsets` record (in log order) while rebuilding state on start or
    /// failover, before `load_partition`. Tombstones delete; unknown record types are skipped.
    pub fn replay(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        if self.replay_consumer_record(key, value)? {
            return Ok(());
        }
        match records::decode_key(key)? {
            RecordKey::Offset {
                group,
                topic,
                partition,
            } => match value {
                Some(v) => {
                    let v = records::decode_offset_value(v)?;
                    self.record_seq += 1;
                    let seq = self.record_seq;
                    self.group_entry(&group)
                        .commit_offset((topic, partition), v, seq);
                }
                None => {
                    if let Some(g) = self.groups.get_mut(&group) {
                        g.remove_offset(&(topic, partition));
                        if g.offsets.is_empty()
                            && g.members.is_empty()
                            && g.protocol_type.is_none()
                            && g.pending_txn.is_empty()
                        {
                            self.groups.remove(&group);
                        }
                    }
                }
            },
            RecordKey::Group { group } => match value {
                Some(v) => {
                    let v = records::decode_group_value(v)?;
                    self.group_entry(&group).load_metadata(v);
                }
                None => {
                    let keep = self
                        .groups
                        .get(&group)
                        .is_some_and(|g| !g.offsets.is_empty());
                    if keep {
                        let partition = self.partition_for(&group);
                        if let Some(g) = self.groups.get_mut(&group) {
                            let offsets = std::mem::take(&mut g.offsets);
                            *g = Group::new(&group, partition);
                            g.offsets = offsets;
                        }
                    } else {
                        self.groups.remove(&group);
                    }
                }
            },
            RecordKey::Unknown { version } => {
                tracing::debug!(version, "skipping unknown __consumer_offsets record type");
            }
        }
        Ok(())
    }

    fn group_entry(&mut self, group_id: &str) -> &mut Group {
        let partition = self.partition_for(group_id);
        self.groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::new(group_id, partition))
    }
}

/// Tombstones for everything a group has in the log.
fn tombstones(g: &Group) -> Vec<Record> {
    let mut v: Vec<Record> = g
        .offsets
        .keys()
        .map(|(t, p)| Record {
            partition: g.partition,
            key: records::encode_offset_key(&g.id, t, *p),
            value: None,
        })
        .collect();
    v.push(Record {
        partition: g.partition,
        key: records::encode_group_key(&g.id),
        value: None,
    });
    v
}

/// Kafka's `doNewMemberJoinGroup`: a member without a member id joins.
fn join_new_member(
    g: &mut Group,
    p: &JoinParams,
    require_known_member_id: bool,
    pending: Pending,
    env: &mut Env,
    ids: &mut MemberIdGenerator,
) {
    if !g.supports_protocols(&p.protocol_type, &p.protocols) {
        env.respond_join(
            pending,
            JoinResult::error("", ErrorCode::InconsistentGroupProtocol),
        );
        return;
    }
    let new_id = ids.member_id(p.instance_id.as_deref().unwrap_or(&p.client_id));
    match &p.instance_id {
        Some(instance) => match g.static_members.get(instance).cloned() {
            Some(old) => {
                tracing::info!(group = %g.id, instance = %instance, old = %old, new = %new_id, "static member rejoins");
                g.update_static_member_and_rebalance(&old, new_id, p, pending, env);
            }
            None => g.add_member_and_rebalance(new_id, p, pending, env),
        },
        None if require_known_member_id => {
            g.pending_members.insert(
                new_id.clone(),
                env.now.saturating_add(i64::from(p.session_timeout_ms)),
            );
            env.respond_join(
                pending,
                JoinResult::error(&new_id, ErrorCode::MemberIdRequired),
            );
        }
        None => g.add_member_and_rebalance(new_id, p, pending, env),
    }
}
