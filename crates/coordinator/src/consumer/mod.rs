//! Consumer-protocol groups (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe, the
//! group epoch and target assignment computed by a server-side assignor, per-member
//! reconciliation, subscription regexes, static membership, session and revocation
//! timeouts, offset commit/fetch validation by member epoch, and persistence in Kafka's
//! consumer group record types. Sans-IO like the classic coordinator: these are methods of
//! [`GroupCoordinator`], which owns both kinds of group (one group id is one kind at a time)
//! and keeps every group's committed offsets.
//!
//! How a heartbeat flows (Kafka's `GroupMetadataManager.consumerGroupHeartbeat`):
//! 1. validate the request; find or create the group (an empty classic group converts);
//!    find or create the member (epoch checks, static member replacement);
//! 2. update the member's subscription; if it changed, or the subscribed topics changed in
//!    the metadata, recompute the subscription metadata and bump the group epoch;
//! 3. if the group epoch is past the target assignment epoch, run the assignor;
//! 4. reconcile the member toward its target (revoke first, then take free partitions).
//!
//! Every state change is a record (`records`) applied to the group as it is emitted; replay
//! applies the same records, so a reloaded group is the group that wrote them.

pub mod assignor;
mod classic;
pub mod group;
pub mod reconcile;
pub mod records;
pub mod regex;
pub mod topics;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use model::config::MigrationPolicy;
use model::{ErrorCode, TopicId};
use protocol::messages::consumer_group_describe_response::{self as describe, DescribedGroup};
use protocol::messages::consumer_group_heartbeat_response::{
    Assignment as HbAssignment, TopicPartitions as HbTopicPartitions,
};
use protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, TopicName,
};
use protocol::ResponseKind;

use self::assignor::{MemberSpec, TopicSpec};
pub use self::group::{ConsumerGroup, ConsumerGroupState, Member, MemberTimers, PersistedGroup};
use self::records::{Assignment, CgRecord, MemberState, ResolvedRegex, TopicMetadata};
use self::regex::TopicRegex;
pub use self::topics::{TopicInfo, TopicsImage};
use crate::coordinator::EmptyGroupId;
use crate::group::s;
use crate::{GroupCoordinator, Output, Record, RequestContext, TopicVisibility};

/// Epoch a member sends to leave the group.
pub const LEAVE_GROUP_MEMBER_EPOCH: i32 = -1;
/// Epoch a static member sends to leave temporarily (it keeps its assignment until its
/// session expires or it rejoins).
pub const LEAVE_GROUP_STATIC_MEMBER_EPOCH: i32 = -2;

/// The Kafka `AclOperation` bits a consumer group supports (READ, DELETE, DESCRIBE,
/// DESCRIBE_CONFIGS, ALTER_CONFIGS), reported when asked without an authorizer.
const GROUP_AUTHORIZED_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11);

/// Every consumer group of this coordinator and what they need from the cluster.
#[derive(Debug, Default)]
pub struct ConsumerGroups {
    pub(crate) groups: BTreeMap<String, ConsumerGroup>,
    pub(crate) topics: TopicsImage,
    /// Bumped on every new topics image (the `Version` of regex records).
    topics_version: i64,
    /// Per-group config overrides (config resource GROUP): `consumer.session.timeout.ms`
    /// and `consumer.heartbeat.interval.ms` replace the broker's for that group.
    group_configs: BTreeMap<String, BTreeMap<String, String>>,
    regexes: HashMap<String, TopicRegex>,
}

/// The partitions (by topic name) a member committing with an older epoch may commit, and
/// the error the others get (STALE_MEMBER_EPOCH; ILLEGAL_GENERATION for a classic member).
pub(crate) struct HeldPartitions(std::collections::HashSet<(String, i32)>, ErrorCode);

impl HeldPartitions {
    /// None when `partition` may be committed, else its error.
    pub(crate) fn refuses(&self, topic: &str, partition: i32) -> Option<ErrorCode> {
        (!self.0.contains(&(topic.to_string(), partition))).then_some(self.1)
    }
}

/// A commit with an older member epoch: the partitions held since that epoch, and the error
/// of the others.
pub(crate) type OlderEpochCommit = (Vec<(TopicId, i32)>, ErrorCode);

/// A heartbeat failure: the error and Kafka's message for it.
type HbError = (ErrorCode, String);

fn err<T>(code: ErrorCode, msg: impl Into<String>) -> Result<T, HbError> {
    Err((code, msg.into()))
}

/// What a heartbeat asked for, taken from the request.
struct HeartbeatParams {
    group_id: String,
    member_id: String,
    epoch: i32,
    instance_id: Option<String>,
    rack_id: Option<String>,
    rebalance_timeout_ms: i32,
    names: Option<Vec<String>>,
    regex: Option<String>,
    assignor: Option<String>,
    owned: Option<Vec<(TopicId, Vec<i32>)>>,
}

impl ConsumerGroups {
    pub fn group(&self, id: &str) -> Option<&ConsumerGroup> {
        self.groups.get(id)
    }

    pub fn contains(&self, id: &str) -> bool {
        self.groups.contains_key(id)
    }

    /// Every consumer group, ordered by id.
    pub fn groups(&self) -> impl Iterator<Item = &ConsumerGroup> {
        self.groups.values()
    }

    /// Compiles (and caches) a subscription regex.
    fn regex(&mut self, pattern: &str) -> Result<&TopicRegex, String> {
        if !self.regexes.contains_key(pattern) {
            let r = TopicRegex::compile(pattern)?;
            // The cache only needs the patterns in use; drop it wholesale when it grows.
            if self.regexes.len() > 10_000 {
                self.regexes.clear();
            }
            self.regexes.insert(pattern.to_string(), r);
        }
        self.regexes
            .get(pattern)
            .ok_or_else(|| "regex cache".to_string())
    }

    /// The topics a regex matches now, of those `visible` (Kafka resolves a group's regexes
    /// with the principal of the heartbeat that triggers the resolution, and drops every
    /// match that principal may not DESCRIBE; the member is not told).
    fn resolve(&mut self, pattern: &str, visible: TopicVisibility) -> BTreeSet<String> {
        let topics = self.topics.clone();
        match self.regex(pattern) {
            Ok(r) => topics
                .iter()
                // As Kafka: internal topics match too (a regex naming
                // `__consumer_offsets` gets it).
                .filter(|t| r.matches(&t.name) && visible.sees(&t.name))
                .map(|t| t.name.clone())
                .collect(),
            Err(_) => BTreeSet::new(),
        }
    }

    /// The subscription metadata of a group's subscribed topics, from the topics image.
    fn subscription_metadata(&self, g: &ConsumerGroup) -> BTreeMap<String, TopicMetadata> {
        g.subscribed_topic_counts()
            .into_keys()
            .filter_map(|name| {
                let t = self.topics.by_name(&name)?;
                Some((
                    name,
                    TopicMetadata {
                        id: t.id,
                        name: t.name.clone(),
                        partitions: t.partitions,
                        racks: (0..t.partitions)
                            .filter_map(|p| {
                                let r = t.racks_of(p);
                                (!r.is_empty()).then(|| (p, r.to_vec()))
                            })
                            .collect(),
                    },
                ))
            })
            .collect()
    }
}

/// Appends a record to the output and applies it to the group.
pub(crate) fn emit(g: &mut ConsumerGroup, rec: CgRecord, out: &mut Output) {
    if let CgRecord::GroupEpoch { epoch: Some(e), .. } = &rec {
        if *e > g.epoch {
            out.stats.consumer_rebalances += 1;
        }
    }
    let (key, value) = rec.encode();
    out.records.push(Record {
        partition: g.partition,
        key,
        value,
    });
    if let Err(e) = g.apply(&rec) {
        // Only a bug can make a live record contradict the state it was computed from.
        tracing::error!(group = %g.id, error = %e, "consumer group record does not apply");
        debug_assert!(false, "live record does not apply: {e}");
    }
}

fn to_uuid(id: &TopicId) -> uuid::Uuid {
    uuid::Uuid::from_bytes(id.0)
}

fn from_uuid(id: &uuid::Uuid) -> TopicId {
    TopicId(*id.as_bytes())
}

fn count(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}

impl GroupCoordinator {
    /// The consumer groups (read-only), for tests and the runtime.
    pub fn consumer_groups(&self) -> &ConsumerGroups {
        &self.consumer
    }

    /// Hands in the cluster's topics (call when the metadata image changes). Groups
    /// subscribed to a changed topic recompute their subscription at their next heartbeat
    /// (and regexes are resolved again).
    pub fn set_topics(&mut self, topics: TopicsImage) {
        let changed: BTreeSet<String> = topics
            .changed_names(&self.consumer.topics)
            .into_iter()
            .collect();
        if changed.is_empty() && !self.consumer.topics.is_empty() {
            return;
        }
        self.consumer.topics = topics;
        self.consumer.topics_version += 1;
        for g in self.consumer.groups.values_mut() {
            let subscribed = g.subscribed_topic_counts();
            if !g.regexes.is_empty() || changed.iter().any(|t| subscribed.contains_key(t)) {
                g.metadata_stale = true;
            }
        }
    }

    /// The ACLs changed (call when the authorizer's ACLs change): what a group's regexes
    /// resolve to depends on the DESCRIBE grants of the principal that resolved them, so
    /// every group with regexes resolves them again at its next heartbeat. Kafka notices
    /// only at its next refresh (`group.consumer.regex.refresh.interval.ms`, 10 minutes);
    /// Moldau does not keep a revoked topic assigned that long.
    pub fn acls_changed(&mut self) {
        for g in self.consumer.groups.values_mut() {
            if !g.regexes.is_empty() {
                g.metadata_stale = true;
            }
        }
    }

    /// Hands in the groups' config overrides (call when they change).
    pub fn set_group_configs(&mut self, configs: BTreeMap<String, BTreeMap<String, String>>) {
        self.consumer.group_configs = configs;
    }

    fn group_int(&self, gid: &str, key: &str, broker: i32) -> i32 {
        self.consumer
            .group_configs
            .get(gid)
            .and_then(|c| c.get(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(broker)
    }

    /// The session timeout of a consumer group's members (group override or broker's).
    pub(crate) fn session_timeout_ms(&self, gid: &str) -> i32 {
        self.group_int(
            gid,
            "consumer.session.timeout.ms",
            self.config.consumer.session_timeout_ms,
        )
    }

    /// The heartbeat interval a consumer group's members get.
    pub(crate) fn heartbeat_interval_ms(&self, gid: &str) -> i32 {
        self.group_int(
            gid,
            "consumer.heartbeat.interval.ms",
            self.config.consumer.heartbeat_interval_ms,
        )
    }

    /// ConsumerGroupHeartbeat (v0-v1). Answered immediately (after its records are durable).
    pub fn consumer_group_heartbeat(
        &mut self,
        ctx: &RequestContext,
        req: ConsumerGroupHeartbeatRequest,
        now_ms: i64,
    ) -> Output {
        let mut out = Output::default();
        let resp = match self.cg_heartbeat(ctx, req, now_ms, &mut out) {
            Ok(r) => r,
            Err((code, msg)) => {
                let mut r = ConsumerGroupHeartbeatResponse::default();
                r.error_code = code.code();
                r.error_message = Some(s(&msg));
                r
            }
        };
        out.responses
            .push((ctx.token, ResponseKind::ConsumerGroupHeartbeat(resp)));
        out
    }

    fn cg_heartbeat(
        &mut self,
        ctx: &RequestContext,
        req: ConsumerGroupHeartbeatRequest,
        now: i64,
        out: &mut Output,
    ) -> Result<ConsumerGroupHeartbeatResponse, HbError> {
        let p = HeartbeatParams {
            group_id: req.group_id.0.to_string(),
            member_id: req.member_id.to_string(),
            epoch: req.member_epoch,
            instance_id: req.instance_id.as_deref().map(str::to_string),
            rack_id: req.rack_id.as_deref().map(str::to_string),
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            names: req
                .subscribed_topic_names
                .as_ref()
                .map(|v| v.iter().map(|t| t.0.to_string()).collect()),
            regex: if ctx.api_version >= 1 {
                req.subscribed_topic_regex.as_deref().map(str::to_string)
            } else {
                None
            },
            assignor: req.server_assignor.as_deref().map(str::to_string),
            owned: req.topic_partitions.as_ref().map(|tps| {
                tps.iter()
                    .map(|tp| (from_uuid(&tp.topic_id), tp.partitions.clone()))
                    .collect()
            }),
        };
        // Kafka's `throwIfEmptyString`: INVALID_REQUEST, not INVALID_GROUP_ID (checked against
        // Kafka 4.4 by crates/conformance).
        if p.group_id.trim().is_empty() {
            return err(ErrorCode::InvalidRequest, "GroupId can't be empty.");
        }
        if let Some(e) = self.validate(&p.group_id, EmptyGroupId::Invalid) {
            return err(e, e.name());
        }
        self.validate_heartbeat(ctx.api_version, &p)?;
        if p.epoch == LEAVE_GROUP_MEMBER_EPOCH || p.epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
            return self.cg_leave(&p, now, out);
        }
        self.cg_join_or_heartbeat(ctx, p, now, out)
    }

    /// Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid` (4.x).
    fn validate_heartbeat(&mut self, version: i16, p: &HeartbeatParams) -> Result<(), HbError> {
        let invalid = |m: &str| err(ErrorCode::InvalidRequest, m);
        if (version >= 1 || p.epoch > 0 || p.epoch == LEAVE_GROUP_MEMBER_EPOCH)
            && p.member_id.trim().is_empty()
        {
            return invalid("MemberId can't be empty.");
        }
        if p.instance_id
            .as_deref()
            .is_some_and(|i| i.trim().is_empty())
        {
            return invalid("InstanceId can't be empty.");
        }
        if p.rack_id.as_deref().is_some_and(|r| r.trim().is_empty()) {
            return invalid("RackId can't be empty.");
        }
        if p.epoch == 0 {
            if p.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if p.owned.as_ref().is_none_or(|o| !o.is_empty()) {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
            if p.names.is_none() && p.regex.is_none() {
                return invalid(
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
                );
            }
        } else if p.epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
            if p.instance_id.is_none() {
                return invalid("InstanceId can't be null.");
            }
        } else if p.epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH {
            return invalid("MemberEpoch is invalid.");
        }
        if let Some(a) = &p.assignor {
            if !self.config.consumer.assignors.iter().any(|c| c == a) {
                return err(
                    ErrorCode::UnsupportedAssignor,
                    format!(
                        "ServerAssignor {a} is not supported. Supported assignors: {}.",
                        self.config.consumer.assignors.join(", ")
                    ),
                );
            }
        }
        if let Some(r) = p.regex.as_deref().filter(|r| !r.is_empty()) {
            if let Err(m) = self.consumer.regex(r) {
                return err(ErrorCode::InvalidRegularExpression, m);
            }
        }
        Ok(())
    }

    /// Finds the consumer group of a joining member, creating it (or converting a classic
    /// group) when `create`.
    fn consumer_group_for_join(
        &mut self,
        group_id: &str,
        create: bool,
        now: i64,
        out: &mut Output,
    ) -> Result<(), HbError> {
        if self.consumer.groups.contains_key(group_id) {
            return Ok(());
        }
        if !create {
            return err(
                ErrorCode::GroupIdNotFound,
                format!("Consumer group {group_id} not found."),
            );
        }
        if let Some(classic) = self.groups.get(group_id) {
            if !classic.members.is_empty() {
                if !self.can_upgrade(group_id) {
                    return err(
                        ErrorCode::GroupIdNotFound,
                        format!("Group {group_id} is not a consumer group."),
                    );
                }
                self.upgrade_classic_group(group_id, now, out);
                return Ok(());
            }
            // An empty classic group becomes a consumer group (its offsets stay).
            self.retire_empty_classic_group(group_id, out);
        }
        let partition = self.partition_for(group_id);
        self.consumer.groups.insert(
            group_id.to_string(),
            ConsumerGroup::new(group_id, partition),
        );
        tracing::info!(group = %group_id, "created consumer group");
        Ok(())
    }

    fn cg_join_or_heartbeat(
        &mut self,
        ctx: &RequestContext,
        p: HeartbeatParams,
        now: i64,
        out: &mut Output,
    ) -> Result<ConsumerGroupHeartbeatResponse, HbError> {
        let create = p.epoch == 0;
        self.consumer_group_for_join(&p.group_id, create, now, out)?;
        let member_id = if p.member_id.is_empty() {
            self.ids.uuid()
        } else {
            p.member_id.clone()
        };
        let max_size = self.config.consumer.max_size.max(0) as usize;
        let Some(g) = self.consumer.groups.get(&p.group_id) else {
            return err(ErrorCode::GroupIdNotFound, "group vanished");
        };
        if g.members.len() >= max_size && !g.members.contains_key(&member_id) {
            return err(
                ErrorCode::GroupMaxSizeReached,
                format!(
                    "The consumer group has reached its maximum capacity of {max_size} members."
                ),
            );
        }
        let owned = p.owned.as_deref();
        // The member before this heartbeat (a new one is empty at epoch 0).
        let (old, replaced) = match &p.instance_id {
            None => match g.members.get(&member_id) {
                Some(m) => {
                    check_epoch(m, p.epoch, owned)?;
                    (m.clone(), None)
                }
                None if create => (Member::new(&member_id), None),
                None => {
                    return err(
                        ErrorCode::UnknownMemberId,
                        format!(
                            "Member {member_id} is not a member of group {}.",
                            p.group_id
                        ),
                    )
                }
            },
            Some(instance) => match (g.static_member(instance), create) {
                (None, true) => match g.members.get(&member_id) {
                    Some(m) => (m.clone(), None),
                    None => (Member::new(&member_id), None),
                },
                (Some(existing), true) => {
                    if !existing.uses_classic() && existing.epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
                    {
                        return err(
                            ErrorCode::UnreleasedInstanceId,
                            format!(
                                "Static member {member_id} with instance id {instance} cannot join the group because the instance id is owned by {} member.",
                                existing.id
                            ),
                        );
                    }
                    let mut m = existing.clone();
                    m.id = member_id.clone();
                    m.epoch = 0;
                    m.previous_epoch = 0;
                    (m, Some(existing.id.clone()))
                }
                (None, false) => {
                    return err(
                        ErrorCode::UnknownMemberId,
                        format!("Instance id {instance} is unknown."),
                    )
                }
                (Some(existing), false) => {
                    if existing.id != member_id {
                        return err(
                            ErrorCode::FencedInstanceId,
                            format!(
                                "Static member {member_id} with instance id {instance} was fenced by member {}.",
                                existing.id
                            ),
                        );
                    }
                    check_epoch(existing, p.epoch, owned)?;
                    (existing.clone(), None)
                }
            },
        };
        let is_new = !g.members.contains_key(&old.id) || replaced.is_some();
        let gid = p.group_id.clone();
        let g = self
            .consumer
            .groups
            .get_mut(&gid)
            .ok_or((ErrorCode::GroupIdNotFound, String::new()))?;
        // A static member taking over an instance id: the old member's records go, the new
        // member inherits its target and current assignment (no rebalance).
        if let Some(old_id) = &replaced {
            let target = g.target.get(old_id).cloned().unwrap_or_default();
            remove_member_records(g, old_id, out);
            emit(
                g,
                CgRecord::Member {
                    group: gid.clone(),
                    member: member_id.clone(),
                    value: Some(old.meta.clone()),
                },
                out,
            );
            emit(
                g,
                CgRecord::TargetMember {
                    group: gid.clone(),
                    member: member_id.clone(),
                    value: Some(target),
                },
                out,
            );
            emit(
                g,
                CgRecord::Current {
                    group: gid.clone(),
                    member: member_id.clone(),
                    value: Some(old.current()),
                },
                out,
            );
            g.timers.remove(old_id);
        }
        // 1. The member's subscription.
        let mut meta = old.meta.clone();
        if let Some(i) = &p.instance_id {
            meta.instance_id = Some(i.clone());
        }
        if let Some(r) = &p.rack_id {
            meta.rack_id = Some(r.clone());
        }
        if p.rebalance_timeout_ms != -1 {
            meta.rebalance_timeout_ms = p.rebalance_timeout_ms;
        }
        if let Some(a) = &p.assignor {
            meta.server_assignor = Some(a.clone());
        }
        if let Some(names) = &p.names {
            let mut names = names.clone();
            names.sort();
            names.dedup();
            meta.subscribed_topic_names = names;
        }
        if let Some(r) = &p.regex {
            meta.subscribed_topic_regex = (!r.is_empty()).then(|| r.clone());
        }
        meta.client_id = ctx.client_id.to_string();
        meta.client_host = ctx.client_host.to_string();
        meta.classic = None;
        let subscription_changed = meta.subscribed_topic_names != old.meta.subscribed_topic_names
            || meta.subscribed_topic_regex != old.meta.subscribed_topic_regex;
        let mut bump = g.epoch == 0;
        if meta != old.meta || (is_new && replaced.is_none()) {
            emit(
                g,
                CgRecord::Member {
                    group: gid.clone(),
                    member: member_id.clone(),
                    value: Some(meta.clone()),
                },
                out,
            );
        }
        bump |= subscription_changed || (is_new && replaced.is_none());
        let old_regex = if replaced.is_some() {
            None
        } else {
            old.meta.subscribed_topic_regex.clone()
        };
        let visible = ctx.visible_topics;
        self.finish_member_update(&gid, &member_id, old_regex, bump, visible, now, out);
        // 3. Reconcile the member toward its target.
        let g = self
            .consumer
            .groups
            .get_mut(&gid)
            .ok_or((ErrorCode::GroupIdNotFound, String::new()))?;
        let before = g.members.get(&member_id).map(|m| m.assigned.clone());
        reconcile_member(g, &member_id, owned, now, out);
        let session_ms = i64::from(self.session_timeout_ms(&gid));
        let interval_ms = self.heartbeat_interval_ms(&gid);
        let Some(g) = self.consumer.groups.get_mut(&gid) else {
            return err(ErrorCode::GroupIdNotFound, "group vanished");
        };
        let Some(m) = g.members.get(&member_id) else {
            return err(ErrorCode::UnknownMemberId, "member vanished");
        };
        g.timers
            .entry(member_id.clone())
            .or_default()
            .session_deadline_ms = now.saturating_add(session_ms);
        let mut resp = ConsumerGroupHeartbeatResponse::default();
        resp.member_id = Some(s(&member_id));
        resp.member_epoch = m.epoch;
        resp.heartbeat_interval_ms = interval_ms;
        let full = p.epoch == 0
            || (p.rebalance_timeout_ms != -1 && p.names.is_some() && p.owned.is_some());
        if full || before.as_ref() != Some(&m.assigned) || is_new {
            resp.assignment = Some(hb_assignment(&m.assigned));
        }
        Ok(resp)
    }

    /// Steps 2 and 3 of a heartbeat after the member's metadata record: regexes (resolved
    /// to the topics `visible` to the heartbeat's principal), the subscription metadata and
    /// group epoch, and the target assignment.
    #[allow(clippy::too_many_arguments)]
    fn finish_member_update(
        &mut self,
        gid: &str,
        member_id: &str,
        old_regex: Option<String>,
        mut bump: bool,
        visible: TopicVisibility,
        now: i64,
        out: &mut Output,
    ) {
        let version = self.consumer.topics_version;
        let Some(g) = self.consumer.groups.get(gid) else {
            return;
        };
        let new_regex = g
            .members
            .get(member_id)
            .and_then(|m| m.meta.subscribed_topic_regex.clone());
        let stale = g.metadata_stale;
        let users = g.regex_users();
        let mut regex_records = Vec::new();
        // A regex nobody uses any more is deleted.
        if let Some(old) = old_regex.filter(|o| Some(o) != new_regex.as_ref()) {
            if !users.contains_key(old.as_str()) && g.regexes.contains_key(&old) {
                regex_records.push(CgRecord::Regex {
                    group: gid.to_string(),
                    regex: old,
                    value: None,
                });
            }
        }
        // Regexes new to the group, and every regex when topics changed, are resolved.
        let mut to_resolve: Vec<String> = Vec::new();
        if let Some(r) = &new_regex {
            if !g.regexes.contains_key(r) {
                to_resolve.push(r.clone());
            }
        }
        if stale {
            to_resolve.extend(
                g.regexes
                    .keys()
                    .filter(|r| users.contains_key(r.as_str()))
                    .cloned(),
            );
        }
        let existing: BTreeMap<String, ResolvedRegex> = g.regexes.clone();
        for r in to_resolve {
            let topics = self.consumer.resolve(&r, visible);
            if existing.get(&r).is_none_or(|e| e.topics != topics) {
                regex_records.push(CgRecord::Regex {
                    group: gid.to_string(),
                    regex: r,
                    value: Some(ResolvedRegex {
                        topics,
                        version,
                        timestamp_ms: now,
                    }),
                });
            }
        }
        let metadata = {
            let Some(g) = self.consumer.groups.get_mut(gid) else {
                return;
            };
            for rec in regex_records {
                bump = true;
                emit(g, rec, out);
            }
            if !(bump || stale) {
                None
            } else {
                Some(())
            }
        };
        if metadata.is_some() {
            let Some(g) = self.consumer.groups.get(gid) else {
                return;
            };
            let new = self.consumer.subscription_metadata(g);
            let Some(g) = self.consumer.groups.get_mut(gid) else {
                return;
            };
            g.metadata_stale = false;
            if new != g.subscription_metadata {
                bump = true;
                emit(
                    g,
                    CgRecord::SubscriptionMetadata {
                        group: gid.to_string(),
                        topics: Some(new),
                    },
                    out,
                );
            }
            if bump {
                let epoch = next_group_epoch(g.epoch);
                emit(
                    g,
                    CgRecord::GroupEpoch {
                        group: gid.to_string(),
                        epoch: Some(epoch),
                    },
                    out,
                );
                tracing::info!(group = %gid, epoch, "bumped group epoch");
            }
        }
        self.maybe_update_target(gid, out);
    }

    /// Computes a new target assignment when the group epoch moved past it.
    pub(crate) fn maybe_update_target(&mut self, gid: &str, out: &mut Output) {
        let Some(g) = self.consumer.groups.get(gid) else {
            return;
        };
        if g.epoch <= g.assignment_epoch || g.members.is_empty() {
            if g.members.is_empty() && g.epoch > g.assignment_epoch {
                let epoch = g.epoch;
                if let Some(g) = self.consumer.groups.get_mut(gid) {
                    emit(
                        g,
                        CgRecord::TargetEpoch {
                            group: gid.to_string(),
                            epoch: Some(epoch),
                        },
                        out,
                    );
                }
            }
            return;
        }
        let assignor = g
            .preferred_assignor(&self.config.consumer.assignors)
            .or_else(|| self.config.consumer.assignors.first().cloned())
            .unwrap_or_else(|| "uniform".to_string());
        let started = std::time::Instant::now();
        let new_target = compute_target(g, &self.consumer.topics, &assignor);
        let epoch = g.epoch;
        tracing::info!(group = %gid, epoch, assignor = %assignor, members = g.members.len(),
            elapsed_us = started.elapsed().as_micros() as u64, "computed target assignment");
        let Some(g) = self.consumer.groups.get_mut(gid) else {
            return;
        };
        for (member, a) in new_target {
            if g.target.get(&member) != Some(&a) {
                emit(
                    g,
                    CgRecord::TargetMember {
                        group: gid.to_string(),
                        member,
                        value: Some(a),
                    },
                    out,
                );
            }
        }
        emit(
            g,
            CgRecord::TargetEpoch {
                group: gid.to_string(),
                epoch: Some(epoch),
            },
            out,
        );
    }

    /// A member leaves (epoch -1) or a static member leaves for now (epoch -2).
    fn cg_leave(
        &mut self,
        p: &HeartbeatParams,
        now: i64,
        out: &mut Output,
    ) -> Result<ConsumerGroupHeartbeatResponse, HbError> {
        let gid = p.group_id.clone();
        let Some(g) = self.consumer.groups.get_mut(&gid) else {
            return err(
                ErrorCode::GroupIdNotFound,
                format!("Consumer group {gid} not found."),
            );
        };
        let mut resp = ConsumerGroupHeartbeatResponse::default();
        resp.member_id = Some(s(&p.member_id));
        resp.member_epoch = p.epoch;
        let member_id = match &p.instance_id {
            None => {
                if !g.members.contains_key(&p.member_id) {
                    return err(
                        ErrorCode::UnknownMemberId,
                        format!("Member {} is not a member of group {gid}.", p.member_id),
                    );
                }
                p.member_id.clone()
            }
            Some(instance) => {
                let Some(m) = g.static_member(instance) else {
                    return err(
                        ErrorCode::UnknownMemberId,
                        format!("Instance id {instance} is unknown."),
                    );
                };
                if m.id != p.member_id {
                    return err(
                        ErrorCode::FencedInstanceId,
                        format!(
                            "Static member {} with instance id {instance} was fenced by member {}.",
                            p.member_id, m.id
                        ),
                    );
                }
                if p.epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
                    let mut c = m.current();
                    c.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH;
                    c.pending_revocation.clear();
                    let id = m.id.clone();
                    emit(
                        g,
                        CgRecord::Current {
                            group: gid.clone(),
                            member: id.clone(),
                            value: Some(c),
                        },
                        out,
                    );
                    if let Some(t) = g.timers.get_mut(&id) {
                        t.rebalance_deadline = None;
                    }
                    tracing::info!(group = %gid, member = %id, instance = %instance, "static member left temporarily");
                    resp.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH;
                    return Ok(resp);
                }
                m.id.clone()
            }
        };
        tracing::info!(group = %gid, member = %member_id, "member left the consumer group");
        self.fence_member(&gid, &member_id, now, out);
        Ok(resp)
    }

    /// Removes a member (left, session expired, revocation timed out): its records are
    /// deleted, the subscription metadata recomputed and the group epoch bumped, so the next
    /// heartbeat computes a new target. A group left with only classic members may turn back
    /// into a classic group.
    pub(crate) fn fence_member(&mut self, gid: &str, member_id: &str, now: i64, out: &mut Output) {
        if self.should_downgrade(gid, member_id) {
            self.downgrade_to_classic(gid, member_id, now, out);
            return;
        }
        let Some(g) = self.consumer.groups.get_mut(gid) else {
            return;
        };
        let Some(m) = g.members.get(member_id).cloned() else {
            return;
        };
        remove_member_records(g, member_id, out);
        if let Some(r) = &m.meta.subscribed_topic_regex {
            if !g.regex_users().contains_key(r.as_str()) && g.regexes.contains_key(r) {
                emit(
                    g,
                    CgRecord::Regex {
                        group: gid.to_string(),
                        regex: r.clone(),
                        value: None,
                    },
                    out,
                );
            }
        }
        let Some(g) = self.consumer.groups.get(gid) else {
            return;
        };
        let metadata = self.consumer.subscription_metadata(g);
        let Some(g) = self.consumer.groups.get_mut(gid) else {
            return;
        };
        if metadata != g.subscription_metadata {
            emit(
                g,
                CgRecord::SubscriptionMetadata {
                    group: gid.to_string(),
                    topics: Some(metadata),
                },
                out,
            );
        }
        let epoch = g.epoch + 1;
        emit(
            g,
            CgRecord::GroupEpoch {
                group: gid.to_string(),
                epoch: Some(epoch),
            },
            out,
        );
        tracing::info!(group = %gid, member = %member_id, epoch, "member fenced");
        if g.members.is_empty() {
            // Nobody will heartbeat: settle the (empty) target now.
            self.maybe_update_target(gid, out);
        }
    }

    /// ConsumerGroupDescribe (v0-v1).
    pub fn consumer_group_describe(
        &mut self,
        ctx: &RequestContext,
        req: ConsumerGroupDescribeRequest,
        _now_ms: i64,
    ) -> Output {
        let mut out = Output::default();
        let mut resp = ConsumerGroupDescribeResponse::default();
        for id in &req.group_ids {
            let group_id = id.0.to_string();
            let mut dg = DescribedGroup::default();
            dg.group_id = id.clone();
            if let Some(e) = self.validate(&group_id, EmptyGroupId::Invalid) {
                // Kafka's `getErrorDescribedGroupList` sets the code alone (null message).
                dg.error_code = e.code();
            } else if let Some(g) = self.consumer.groups.get(&group_id) {
                dg.group_state = s(g.state().name());
                dg.group_epoch = g.epoch;
                dg.assignment_epoch = g.assignment_epoch;
                dg.assignor_name = s(&g
                    .preferred_assignor(&self.config.consumer.assignors)
                    .or_else(|| self.config.consumer.assignors.first().cloned())
                    .unwrap_or_default());
                if req.include_authorized_operations {
                    dg.authorized_operations = GROUP_AUTHORIZED_OPERATIONS;
                }
                let topics = &self.consumer.topics;
                for m in g.members.values() {
                    let mut dm = describe::Member::default();
                    dm.member_id = s(&m.id);
                    dm.instance_id = m.meta.instance_id.as_deref().map(s);
                    dm.rack_id = m.meta.rack_id.as_deref().map(s);
                    dm.member_epoch = m.epoch;
                    dm.client_id = s(&m.meta.client_id);
                    dm.client_host = s(&m.meta.client_host);
                    dm.subscribed_topic_names = m
                        .meta
                        .subscribed_topic_names
                        .iter()
                        .map(|t| TopicName(s(t)))
                        .collect();
                    // Kafka describes a member without a regex with "", not null.
                    dm.subscribed_topic_regex = Some(s(m
                        .meta
                        .subscribed_topic_regex
                        .as_deref()
                        .unwrap_or_default()));
                    dm.assignment = describe_assignment(&m.assigned, topics);
                    dm.target_assignment = describe_assignment(
                        g.target.get(&m.id).unwrap_or(&Assignment::new()),
                        topics,
                    );
                    if ctx.api_version >= 1 {
                        dm.member_type = if m.uses_classic() { 0 } else { 1 };
                    }
                    dg.members.push(dm);
                }
            } else {
                dg.error_code = ErrorCode::GroupIdNotFound.code();
                dg.error_message = Some(s(&if self
                    .groups
                    .get(&group_id)
                    .is_some_and(|c| c.protocol_type.is_some())
                {
                    format!("Group {group_id} is not a consumer group.")
                } else {
                    format!("Group {group_id} not found.")
                }));
            }
            resp.groups.push(dg);
        }
        out.responses
            .push((ctx.token, ResponseKind::ConsumerGroupDescribe(resp)));
        out
    }

    // ---- time ---------------------------------------------------------------------------

    /// Fences members whose session expired or who did not revoke within their rebalance
    /// timeout (or, classic members, did not rejoin or sync in time).
    pub(crate) fn tick_consumer_groups(&mut self, now: i64, out: &mut Output) {
        let mut doomed: Vec<(String, String, &'static str)> = Vec::new();
        for g in self.consumer.groups.values() {
            if !self.owned_partitions.contains(&g.partition) {
                continue;
            }
            for (id, t) in &g.timers {
                let reason = if t.session_deadline_ms <= now {
                    Some("the member session expired")
                } else if t.join_deadline_ms.is_some_and(|d| d <= now) {
                    Some("the classic member failed to rejoin within the rebalance timeout")
                } else if t.sync_deadline_ms.is_some_and(|d| d <= now) {
                    Some("the classic member failed to sync within the rebalance timeout")
                } else if let Some((d, epoch)) = t.rebalance_deadline {
                    let still = g.members.get(id).is_some_and(|m| {
                        m.epoch == epoch && m.state == MemberState::UnrevokedPartitions
                    });
                    (d <= now && still)
                        .then_some("it failed to revoke partitions within the rebalance timeout")
                } else {
                    None
                };
                if let Some(r) = reason {
                    doomed.push((g.id.clone(), id.clone(), r));
                }
            }
        }
        for (gid, mid, reason) in doomed {
            tracing::info!(group = %gid, member = %mid, "member fenced because {reason}");
            self.fence_member(&gid, &mid, now, out);
        }
        // Stale rebalance timers of members that moved on.
        for g in self.consumer.groups.values_mut() {
            for (id, t) in g.timers.iter_mut() {
                if let Some((d, epoch)) = t.rebalance_deadline {
                    let still = g.members.get(id).is_some_and(|m| {
                        m.epoch == epoch && m.state == MemberState::UnrevokedPartitions
                    });
                    if !still || d <= now {
                        t.rebalance_deadline = None;
                    }
                }
            }
        }
    }

    /// The earliest consumer group timer.
    pub(crate) fn consumer_next_deadline(&self) -> Option<i64> {
        self.consumer
            .groups
            .values()
            .filter(|g| self.owned_partitions.contains(&g.partition))
            .flat_map(|g| g.timers.values().map(MemberTimers::next_deadline))
            .min()
    }

    /// Starts the timers of the consumer groups of a loaded partition.
    pub(crate) fn load_consumer_groups(&mut self, partition: i32, now: i64) {
        let sessions: HashMap<String, i64> = self
            .consumer
            .groups
            .keys()
            .map(|gid| (gid.clone(), i64::from(self.session_timeout_ms(gid))))
            .collect();
        for g in self
            .consumer
            .groups
            .values_mut()
            .filter(|g| g.partition == partition)
        {
            g.timers.clear();
            g.metadata_stale = true;
            let session = sessions.get(&g.id).copied().unwrap_or(45_000);
            for m in g.members.values() {
                let s = m
                    .meta
                    .classic
                    .as_ref()
                    .map_or(session, |c| i64::from(c.session_timeout_ms));
                let mut t = MemberTimers {
                    session_deadline_ms: now.saturating_add(s),
                    ..MemberTimers::default()
                };
                if m.state == MemberState::UnrevokedPartitions {
                    t.rebalance_deadline = Some((
                        now.saturating_add(i64::from(m.meta.rebalance_timeout_ms.max(0))),
                        m.epoch,
                    ));
                }
                g.timers.insert(m.id.clone(), t);
            }
        }
    }

    /// Replays one consumer group record (`Ok(false)`: not one).
    pub(crate) fn replay_consumer_record(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<bool, crate::Error> {
        let Some(rec) = CgRecord::decode(key, value)? else {
            return Ok(false);
        };
        let gid = rec.group().to_string();
        if let CgRecord::GroupEpoch { epoch: None, .. } = rec {
            self.consumer.groups.remove(&gid);
            return Ok(true);
        }
        if !self.consumer.groups.contains_key(&gid) {
            if value.is_none() {
                return Ok(true);
            }
            // A classic group of the same id was converted (its tombstone came first);
            // offsets stay with the classic entry, which holds every group's offsets.
            let partition = self.partition_for(&gid);
            self.consumer
                .groups
                .insert(gid.clone(), ConsumerGroup::new(&gid, partition));
        }
        if let Some(g) = self.consumer.groups.get_mut(&gid) {
            g.apply(&rec)?;
        }
        Ok(true)
    }

    /// Tombstones for everything a consumer group has in the log (its offsets aside).
    pub(crate) fn consumer_group_tombstones(&mut self, gid: &str, out: &mut Output) {
        let Some(g) = self.consumer.groups.get_mut(gid) else {
            return;
        };
        let members: Vec<String> = g.members.keys().cloned().collect();
        for m in &members {
            emit(
                g,
                CgRecord::Current {
                    group: gid.to_string(),
                    member: m.clone(),
                    value: None,
                },
                out,
            );
        }
        for m in g.target.keys().cloned().collect::<Vec<_>>() {
            emit(
                g,
                CgRecord::TargetMember {
                    group: gid.to_string(),
                    member: m,
                    value: None,
                },
                out,
            );
        }
        emit(
            g,
            CgRecord::TargetEpoch {
                group: gid.to_string(),
                epoch: None,
            },
            out,
        );
        for m in members {
            emit(
                g,
                CgRecord::Member {
                    group: gid.to_string(),
                    member: m,
                    value: None,
                },
                out,
            );
        }
        for r in g.regexes.keys().cloned().collect::<Vec<_>>() {
            emit(
                g,
                CgRecord::Regex {
                    group: gid.to_string(),
                    regex: r,
                    value: None,
                },
                out,
            );
        }
        emit(
            g,
            CgRecord::SubscriptionMetadata {
                group: gid.to_string(),
                topics: None,
            },
            out,
        );
        emit(
            g,
            CgRecord::GroupEpoch {
                group: gid.to_string(),
                epoch: None,
            },
            out,
        );
        self.consumer.groups.remove(gid);
    }

    // ---- the classic APIs on consumer groups ---------------------------------------------

    /// OffsetCommit/TxnOffsetCommit checks of a consumer group (None: not a consumer group):
    /// the request's error, and when a member commits with an epoch older than its current
    /// one, the partitions it may still commit (KIP-1251). When the commit may proceed, the
    /// group's offsets entry exists.
    pub(crate) fn consumer_offset_commit_check(
        &mut self,
        gid: &str,
        member_id: &str,
        instance_id: Option<&str>,
        epoch: i32,
        transactional: bool,
        api_version: i16,
    ) -> Option<(Option<ErrorCode>, Option<HeldPartitions>)> {
        let g = self.consumer.groups.get(gid)?;
        match g.validate_offset_commit(member_id, instance_id, epoch, transactional, api_version) {
            Err(e) => Some((Some(e), None)),
            Ok(held) => {
                let held = held.map(|(parts, refusal)| {
                    let topics = &self.consumer.topics;
                    HeldPartitions(
                        parts
                            .into_iter()
                            .filter_map(|(t, p)| topics.by_id(&t).map(|i| (i.name.clone(), p)))
                            .collect(),
                        refusal,
                    )
                });
                self.consumer_offsets_holder(gid);
                Some((None, held))
            }
        }
    }

    /// OffsetFetch v9 member checks of a consumer group.
    pub(crate) fn consumer_offset_fetch_check(
        &self,
        gid: &str,
        version: i16,
        req: &protocol::messages::offset_fetch_request::OffsetFetchRequestGroup,
    ) -> Option<ErrorCode> {
        if version < 9 {
            return None;
        }
        self.consumer
            .groups
            .get(gid)?
            .validate_offset_fetch(req.member_id.as_deref(), req.member_epoch)
    }

    /// Makes sure a consumer group has its offsets entry; returns the topics its members
    /// subscribe to (None: not a consumer group).
    pub(crate) fn consumer_offsets_holder(&mut self, gid: &str) -> Option<BTreeSet<String>> {
        let g = self.consumer.groups.get(gid)?;
        let topics = g.subscribed_topics();
        let partition = g.partition;
        self.groups
            .entry(gid.to_string())
            .or_insert_with(|| crate::group::Group::new(gid, partition));
        Some(topics)
    }

    /// The subscribed topics of every loaded consumer group.
    pub(crate) fn consumer_subscribed_topics(&self) -> HashMap<String, BTreeSet<String>> {
        self.consumer
            .groups
            .values()
            .filter(|g| self.owned_partitions.contains(&g.partition))
            .map(|g| (g.id.clone(), g.subscribed_topics()))
            .collect()
    }

    /// Deletes empty consumer groups that have no committed offsets left.
    pub(crate) fn expire_empty_consumer_groups(&mut self, out: &mut Output) {
        let doomed: Vec<String> = self
            .consumer
            .groups
            .values()
            .filter(|g| self.owned_partitions.contains(&g.partition))
            .filter(|g| g.is_empty() && !self.groups.contains_key(&g.id))
            .map(|g| g.id.clone())
            .collect();
        for gid in doomed {
            tracing::info!(group = %gid, "removing empty consumer group without offsets");
            self.consumer_group_tombstones(&gid, out);
        }
    }

    /// ListGroups entries of the consumer groups.
    pub(crate) fn list_consumer_groups(
        &self,
        version: i16,
        states: &[String],
    ) -> Vec<protocol::messages::list_groups_response::ListedGroup> {
        self.consumer
            .groups
            .values()
            .filter(|g| self.owned_partitions.contains(&g.partition))
            .filter_map(|g| {
                let state = g.state().name();
                if !states.is_empty() && !states.iter().any(|s| s == &state.to_lowercase()) {
                    return None;
                }
                let mut lg = protocol::messages::list_groups_response::ListedGroup::default();
                lg.group_id = protocol::messages::GroupId(s(&g.id));
                lg.protocol_type = s("consumer");
                if version >= 4 {
                    lg.group_state = s(state);
                }
                if version >= 5 {
                    lg.group_type = s("consumer");
                }
                Some(lg)
            })
            .collect()
    }

    /// DeleteGroups of a consumer group: only when empty; its offsets and records go.
    pub(crate) fn delete_consumer_group(&mut self, gid: &str, out: &mut Output) -> ErrorCode {
        if !self
            .consumer
            .groups
            .get(gid)
            .is_some_and(ConsumerGroup::is_empty)
        {
            return ErrorCode::NonEmptyGroup;
        }
        if let Some(holder) = self.groups.remove(gid) {
            for (t, p) in holder.offsets.keys() {
                out.records.push(Record {
                    partition: holder.partition,
                    key: crate::records::encode_offset_key(gid, t, *p),
                    value: None,
                });
            }
        }
        self.consumer_group_tombstones(gid, out);
        tracing::info!(group = %gid, "consumer group deleted");
        ErrorCode::None
    }

    /// The migration policy for online (non-empty) conversions.
    fn migration_policy(&self) -> MigrationPolicy {
        self.config.consumer.migration_policy
    }
}

/// Kafka's `throwIfConsumerGroupMemberEpochIsInvalid`: a member may come back with its
/// previous epoch (the response with the new one was lost) only while it owns a subset of
/// its assignment.
fn check_epoch(m: &Member, received: i32, owned: reconcile::Owned<'_>) -> Result<(), HbError> {
    if received > m.epoch {
        return err(
            ErrorCode::FencedMemberEpoch,
            format!(
                "The consumer group member has a greater member epoch ({received}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
                m.epoch
            ),
        );
    }
    if received < m.epoch {
        let subset = owned.is_some_and(|owned| {
            owned.iter().all(|(t, parts)| {
                m.assigned
                    .get(t)
                    .is_some_and(|set| parts.iter().all(|p| set.contains(p)))
            })
        });
        if received != m.previous_epoch || !subset {
            return err(
                ErrorCode::FencedMemberEpoch,
                format!(
                    "The consumer group member has a smaller member epoch ({received}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
                    m.epoch
                ),
            );
        }
    }
    Ok(())
}

/// Tombstones for one member (current assignment, target, metadata; in Kafka's order).
fn remove_member_records(g: &mut ConsumerGroup, member_id: &str, out: &mut Output) {
    let gid = g.id.clone();
    emit(
        g,
        CgRecord::Current {
            group: gid.clone(),
            member: member_id.to_string(),
            value: None,
        },
        out,
    );
    emit(
        g,
        CgRecord::TargetMember {
            group: gid.clone(),
            member: member_id.to_string(),
            value: None,
        },
        out,
    );
    emit(
        g,
        CgRecord::Member {
            group: gid,
            member: member_id.to_string(),
            value: None,
        },
        out,
    );
}

/// Moves one member toward its target and (re)arms its revocation timer.
pub(crate) fn reconcile_member(
    g: &mut ConsumerGroup,
    member_id: &str,
    owned: reconcile::Owned<'_>,
    now: i64,
    out: &mut Output,
) {
    let Some(m) = g.members.get(member_id) else {
        return;
    };
    if m.is_reconciled_to(g.assignment_epoch) {
        return;
    }
    let empty = Assignment::new();
    let target = g.target.get(member_id).unwrap_or(&empty);
    let epoch_of = |t: &TopicId, p: i32| g.partition_epoch(t, p);
    let Some(next) = reconcile::reconcile(m, g.assignment_epoch, target, owned, &epoch_of) else {
        return;
    };
    let rebalance_ms = i64::from(m.meta.rebalance_timeout_ms.max(0));
    let classic = m.uses_classic();
    let unrevoked = next.state == MemberState::UnrevokedPartitions;
    let epoch = next.member_epoch;
    tracing::debug!(group = %g.id, member = %member_id, epoch, state = next.state.name(),
        assigned = count(&next.assigned), revoking = count(&next.pending_revocation), "member reconciled");
    emit(
        g,
        CgRecord::Current {
            group: g.id.clone(),
            member: member_id.to_string(),
            value: Some(next),
        },
        out,
    );
    if !classic {
        let t = g.timers.entry(member_id.to_string()).or_default();
        t.rebalance_deadline = unrevoked.then(|| (now.saturating_add(rebalance_ms), epoch));
    }
}

/// Runs the assignor over a group's members and subscribed topics.
fn compute_target(
    g: &ConsumerGroup,
    topics: &TopicsImage,
    assignor: &str,
) -> BTreeMap<String, Assignment> {
    let mut specs: BTreeMap<TopicId, TopicSpec<'_>> = BTreeMap::new();
    for t in g.subscription_metadata.values() {
        let racks = topics
            .by_id(&t.id)
            .map_or(&[][..], |info| info.racks.as_slice());
        specs.insert(
            t.id,
            TopicSpec {
                partitions: t.partitions,
                racks,
            },
        );
    }
    let members: Vec<MemberSpec<'_>> = g
        .members
        .values()
        .map(|m| MemberSpec {
            id: &m.id,
            instance_id: m.meta.instance_id.as_deref(),
            rack: m.meta.rack_id.as_deref(),
            topics: g
                .member_topics(&m.meta)
                .iter()
                .filter_map(|name| g.subscription_metadata.get(name).map(|t| t.id))
                .collect(),
            current: g.target.get(&m.id),
        })
        .collect();
    match assignor::assign(assignor, &members, &specs) {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(group = %g.id, error = %e, "assignor failed; keeping the current target");
            g.target.clone()
        }
    }
}

fn hb_assignment(a: &Assignment) -> HbAssignment {
    let mut out = HbAssignment::default();
    out.topic_partitions = a
        .iter()
        .map(|(t, parts)| {
            let mut tp = HbTopicPartitions::default();
            tp.topic_id = to_uuid(t);
            tp.partitions = parts.iter().copied().collect();
            tp
        })
        .collect();
    out
}

fn describe_assignment(a: &Assignment, topics: &TopicsImage) -> describe::Assignment {
    let mut out = describe::Assignment::default();
    out.topic_partitions = a
        .iter()
        .map(|(t, parts)| {
            let mut tp = describe::TopicPartitions::default();
            tp.topic_id = to_uuid(t);
            tp.topic_name = TopicName(s(topics.by_id(t).map_or("", |i| i.name.as_str())));
            tp.partitions = parts.iter().copied().collect();
            tp
        })
        .collect();
    out
}

/// Which kind a group id currently is, for ListGroups and the CLI.
pub fn group_type_name(consumer: bool) -> &'static str {
    if consumer {
        "consumer"
    } else {
        "classic"
    }
}

impl ConsumerGroup {
    /// Kafka's `validateOffsetCommit` for consumer groups. `Ok(None)`: every partition may
    /// be committed; `Ok(Some((held, error)))`: an older member epoch (KIP-1251) may commit
    /// only the partitions the member holds since that epoch or earlier; the others get
    /// `error` (STALE_MEMBER_EPOCH, or ILLEGAL_GENERATION for a classic member).
    pub(crate) fn validate_offset_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        epoch: i32,
        transactional: bool,
        api_version: i16,
    ) -> Result<Option<OlderEpochCommit>, ErrorCode> {
        if epoch < 0 && self.members.is_empty() {
            return Ok(None);
        }
        // A transactional producer that sends only the group id (no member metadata).
        if transactional && epoch == -1 && member_id.is_empty() && instance_id.is_none() {
            return Ok(None);
        }
        let Some(m) = self.members.get(member_id) else {
            return Err(ErrorCode::UnknownMemberId);
        };
        if !transactional && !m.uses_classic() && api_version < 9 {
            return Err(ErrorCode::UnsupportedVersion);
        }
        let stale = if m.uses_classic() {
            ErrorCode::IllegalGeneration
        } else {
            ErrorCode::StaleMemberEpoch
        };
        match epoch.cmp(&m.epoch) {
            std::cmp::Ordering::Equal => Ok(None),
            std::cmp::Ordering::Greater => Err(stale),
            // The member has not heard of its newer epoch yet: what it held then, it still
            // holds, and may commit.
            std::cmp::Ordering::Less => Ok(Some((
                m.assigned
                    .iter()
                    .chain(m.pending_revocation.iter())
                    .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
                    .filter(|tp| m.epochs.get(tp).is_some_and(|e| *e <= epoch))
                    .collect(),
                stale,
            ))),
        }
    }

    /// Kafka's `validateOffsetFetch` for consumer groups (OffsetFetch v9 member fields).
    pub(crate) fn validate_offset_fetch(
        &self,
        member_id: Option<&str>,
        epoch: i32,
    ) -> Option<ErrorCode> {
        if member_id.is_none() && epoch < 0 {
            return None;
        }
        let Some(m) = member_id.and_then(|id| self.members.get(id)) else {
            return Some(ErrorCode::UnknownMemberId);
        };
        (epoch != m.epoch).then_some(if m.uses_classic() {
            ErrorCode::IllegalGeneration
        } else {
            ErrorCode::StaleMemberEpoch
        })
    }

    /// The topics any member subscribes to (offsets of these never expire while the group
    /// has members).
    pub(crate) fn subscribed_topics(&self) -> BTreeSet<String> {
        self.subscribed_topic_counts().into_keys().collect()
    }
}

/// The group epoch after a bump. A group that has none yet (created by this heartbeat) gets
/// epoch 2, as Kafka 4.4 does: its first `ConsumerGroupMetadata` record carries epoch 2 for a
/// member subscribing by name, to a topic that does not exist, or alone (seen with Kafka's
/// `DumpLogSegments --offsets-decoder` on the reference kit's `__consumer_offsets`), and every
/// later bump adds one. So the first member's epoch, the assignment epoch and every later
/// epoch are the ones Kafka's clients and tools see.
pub(crate) fn next_group_epoch(epoch: i32) -> i32 {
    if epoch == 0 {
        2
    } else {
        epoch.saturating_add(1)
    }
}
