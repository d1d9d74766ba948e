//! Classic and consumer groups side by side (KIP-848's migration): an empty group changes
//! kind when a member of the other protocol joins; a non-empty classic group is upgraded
//! online when a consumer-protocol member joins (`group.consumer.migration.policy`), and a
//! consumer group whose last consumer-protocol member leaves is downgraded back. Meanwhile
//! classic members live in the consumer group (a mixed group): JoinGroup, SyncGroup,
//! Heartbeat and LeaveGroup are served from the consumer group's state, the member's
//! generation is its member epoch, and REBALANCE_IN_PROGRESS makes it rejoin to reconcile.

use bytes::Bytes;
use model::{ErrorCode, TopicId};
use protocol::messages::{HeartbeatRequest, JoinGroupRequest, SyncGroupRequest};

use super::group::{ConsumerGroup, Member, MemberTimers};
use super::records::{
    decode_subscription, encode_assignment, Assignment, CgRecord, ClassicMemberMetadata,
    MemberState,
};
use super::{emit, reconcile_member, remove_member_records};
use crate::group::{Env, Group, JoinResult, Pending, SyncResult};
use crate::records::{self, GroupValue, MemberValue};
use crate::{GroupCoordinator, Output, Record, RequestContext};

/// The partitions of a classic assignment (`ConsumerProtocolAssignment`), as topic names.
fn decode_assignment(bytes: &[u8]) -> Option<Vec<(String, Vec<i32>)>> {
    // The assignment has the subscription's layout up to the owned partitions: version,
    // then [topic, [partition]].
    let mut fake = Vec::with_capacity(bytes.len() + 4);
    fake.extend_from_slice(&1i16.to_be_bytes());
    // topics: none, user data: null, then the assignment's topic array as "owned".
    fake.extend_from_slice(&0i32.to_be_bytes());
    fake.extend_from_slice(&(-1i32).to_be_bytes());
    fake.extend_from_slice(bytes.get(2..)?);
    let sub = decode_subscription(&fake)?;
    Some(sub.owned)
}

/// Moves a group's committed (and pending transactional) offsets to another entry.
fn move_offsets(from: &mut Group, to: &mut Group) {
    to.offsets = std::mem::take(&mut from.offsets);
    to.offset_seq = std::mem::take(&mut from.offset_seq);
    to.pending_txn = std::mem::take(&mut from.pending_txn);
}

impl GroupCoordinator {
    fn topic_id(&self, name: &str) -> Option<TopicId> {
        self.consumer.topics.by_name(name).map(|t| t.id)
    }

    fn to_assignment(&self, topics: &[(String, Vec<i32>)]) -> Assignment {
        let mut a = Assignment::new();
        for (t, parts) in topics {
            if let Some(id) = self.topic_id(t) {
                a.entry(id).or_default().extend(parts.iter().copied());
            }
        }
        a
    }

    fn to_owned_list(&self, topics: &[(String, Vec<i32>)]) -> Vec<(TopicId, Vec<i32>)> {
        topics
            .iter()
            .filter_map(|(t, parts)| self.topic_id(t).map(|id| (id, parts.clone())))
            .collect()
    }

    fn to_named(&self, a: &Assignment) -> Vec<(String, Vec<i32>)> {
        a.iter()
            .filter_map(|(id, parts)| {
                let t = self.consumer.topics.by_id(id)?;
                Some((t.name.clone(), parts.iter().copied().collect()))
            })
            .collect()
    }

    /// An empty classic group turns into a consumer group: its GroupMetadata record is
    /// deleted; its committed offsets stay (the classic entry keeps holding them).
    pub(crate) fn retire_empty_classic_group(&mut self, gid: &str, out: &mut Output) {
        let Some(g) = self.groups.get_mut(gid) else {
            return;
        };
        if g.protocol_type.is_some() || g.generation > 0 {
            out.records.push(Record {
                partition: g.partition,
                key: records::encode_group_key(gid),
                value: None,
            });
        }
        let mut fresh = Group::new(gid, g.partition);
        move_offsets(g, &mut fresh);
        *g = fresh;
        if g.offsets.is_empty() && g.pending_txn.is_empty() {
            self.groups.remove(gid);
        }
        tracing::info!(group = %gid, "empty classic group converted to a consumer group");
    }

    /// Whether a non-empty classic group may be upgraded online.
    pub(crate) fn can_upgrade(&self, gid: &str) -> bool {
        let Some(g) = self.groups.get(gid) else {
            return false;
        };
        let policy = self.migration_policy();
        if !policy.upgrade_enabled() {
            tracing::info!(group = %gid, "cannot upgrade the classic group: the online upgrade is disabled");
            return false;
        }
        if g.protocol_type.as_deref() != Some("consumer") {
            tracing::info!(group = %gid, "cannot upgrade the classic group: it does not use the consumer protocol");
            return false;
        }
        if g.members.len() > self.config.consumer.max_size.max(0) as usize {
            return false;
        }
        let p = g.protocol_name.as_deref();
        g.members.values().all(|m| {
            let meta = p
                .and_then(|p| m.protocols.iter().find(|(n, _)| n == p))
                .map(|(_, b)| b.clone())
                .unwrap_or_default();
            decode_subscription(&meta).is_some()
                && (m.assignment.is_empty() || decode_assignment(&m.assignment).is_some())
        })
    }

    /// Converts a non-empty classic group into a consumer group whose members use the
    /// classic protocol; parked JoinGroup/SyncGroup requests are told to rejoin.
    pub(crate) fn upgrade_classic_group(&mut self, gid: &str, now: i64, out: &mut Output) {
        let Some(mut classic) = self.groups.remove(gid) else {
            return;
        };
        {
            let mut env = Env {
                cfg: &self.config,
                now,
                out,
            };
            classic.fail_all_pending(ErrorCode::RebalanceInProgress, &mut env);
        }
        out.records.push(Record {
            partition: classic.partition,
            key: records::encode_group_key(gid),
            value: None,
        });
        let generation = classic.generation;
        let protocol = classic.protocol_name.clone();
        let mut g = ConsumerGroup::new(gid, classic.partition);
        let mut members = Vec::new();
        for m in classic.members.values() {
            let meta = protocol
                .as_deref()
                .and_then(|p| m.protocols.iter().find(|(n, _)| n == p))
                .map(|(_, b)| b.clone())
                .unwrap_or_default();
            let sub = decode_subscription(&meta).unwrap_or_default();
            let assigned =
                self.to_assignment(&decode_assignment(&m.assignment).unwrap_or_default());
            let mut member = Member::new(&m.id);
            member.meta.instance_id = m.instance_id.clone();
            member.meta.rack_id = sub.rack_id.clone();
            member.meta.client_id = m.client_id.clone();
            member.meta.client_host = m.client_host.clone();
            let mut names = sub.topics.clone();
            names.sort();
            names.dedup();
            member.meta.subscribed_topic_names = names;
            member.meta.rebalance_timeout_ms = m.rebalance_timeout_ms;
            member.meta.classic = Some(ClassicMemberMetadata {
                session_timeout_ms: m.session_timeout_ms,
                protocols: m.protocols.clone(),
            });
            member.epoch = generation;
            member.previous_epoch = generation;
            member.assigned = assigned;
            members.push(member);
        }
        // Drop partitions two members claim (a broken classic assignment): first wins.
        let mut seen = std::collections::HashSet::new();
        for m in &mut members {
            for (t, parts) in m.assigned.iter_mut() {
                parts.retain(|p| seen.insert((*t, *p)));
            }
            m.assigned.retain(|_, parts| !parts.is_empty());
            // Held since the classic generation (KIP-1251 assignment epochs).
            m.epochs = m
                .assigned
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| ((*t, *p), generation)))
                .collect();
        }
        for m in &members {
            emit(
                &mut g,
                CgRecord::Member {
                    group: gid.to_string(),
                    member: m.id.clone(),
                    value: Some(m.meta.clone()),
                },
                out,
            );
        }
        emit(
            &mut g,
            CgRecord::GroupEpoch {
                group: gid.to_string(),
                epoch: Some(generation),
            },
            out,
        );
        for m in &members {
            emit(
                &mut g,
                CgRecord::TargetMember {
                    group: gid.to_string(),
                    member: m.id.clone(),
                    value: Some(m.assigned.clone()),
                },
                out,
            );
        }
        emit(
            &mut g,
            CgRecord::TargetEpoch {
                group: gid.to_string(),
                epoch: Some(generation),
            },
            out,
        );
        for m in &members {
            emit(
                &mut g,
                CgRecord::Current {
                    group: gid.to_string(),
                    member: m.id.clone(),
                    value: Some(m.current()),
                },
                out,
            );
            let session = m.meta.classic.as_ref().map_or(0, |c| c.session_timeout_ms);
            g.timers.insert(
                m.id.clone(),
                MemberTimers {
                    session_deadline_ms: now.saturating_add(i64::from(session)),
                    ..MemberTimers::default()
                },
            );
        }
        g.subscription_metadata = Default::default();
        self.consumer.groups.insert(gid.to_string(), g);
        // The classic entry keeps holding the offsets.
        if !classic.offsets.is_empty() || !classic.pending_txn.is_empty() {
            let mut holder = Group::new(gid, classic.partition);
            move_offsets(&mut classic, &mut holder);
            self.groups.insert(gid.to_string(), holder);
        }
        tracing::info!(group = %gid, members = members.len(), generation, "classic group upgraded to a consumer group");
    }

    /// Kafka's `validateOnlineDowngradeWithFencedMember`: the last consumer-protocol member
    /// leaves a group of classic members.
    pub(crate) fn should_downgrade(&self, gid: &str, leaving: &str) -> bool {
        let Some(g) = self.consumer.groups.get(gid) else {
            return false;
        };
        let Some(m) = g.members.get(leaving) else {
            return false;
        };
        let classic = g.members.values().filter(|m| m.uses_classic()).count();
        !m.uses_classic()
            && classic == g.members.len() - 1
            && g.members.len() > 1
            && self.migration_policy().downgrade_enabled()
            && g.members.len() - 1 <= self.config.group_max_size
    }

    /// Converts a consumer group of classic members back into a classic group (after its
    /// last consumer-protocol member left) and starts a rebalance there.
    pub(crate) fn downgrade_to_classic(
        &mut self,
        gid: &str,
        leaving: &str,
        now: i64,
        out: &mut Output,
    ) {
        let Some(cg) = self.consumer.groups.get(gid).cloned() else {
            return;
        };
        self.consumer_group_tombstones(gid, out);
        let members: Vec<&Member> = cg
            .members
            .values()
            .filter(|m| m.id != leaving && m.uses_classic())
            .collect();
        // The protocol every member supports that most prefer.
        let mut g = Group::new(gid, cg.partition);
        let value = GroupValue {
            protocol_type: "consumer".to_string(),
            generation: cg.epoch,
            protocol: None,
            leader: members.first().map(|m| m.id.clone()),
            current_state_timestamp_ms: Some(now),
            members: members
                .iter()
                .map(|m| {
                    let c = m.meta.classic.as_ref();
                    MemberValue {
                        member_id: m.id.clone(),
                        group_instance_id: m.meta.instance_id.clone(),
                        client_id: m.meta.client_id.clone(),
                        client_host: m.meta.client_host.clone(),
                        rebalance_timeout_ms: m.meta.rebalance_timeout_ms,
                        session_timeout_ms: c.map_or(0, |c| c.session_timeout_ms),
                        subscription: Bytes::new(),
                        assignment: Bytes::new(),
                    }
                })
                .collect(),
        };
        g.load_metadata(value);
        for m in &members {
            if let (Some(gm), Some(c)) = (g.members.get_mut(&m.id), m.meta.classic.as_ref()) {
                gm.protocols = c.protocols.clone();
                gm.heartbeat_deadline_ms = now.saturating_add(i64::from(c.session_timeout_ms));
            }
        }
        g.protocol_name = g.select_protocol();
        let version = |m: &Member, p: Option<&str>| -> i16 {
            m.meta
                .classic
                .as_ref()
                .and_then(|c| c.protocols.iter().find(|(n, _)| Some(n.as_str()) == p))
                .and_then(|(_, meta)| decode_subscription(meta))
                .map_or(0, |s| s.version)
        };
        let pname = g.protocol_name.clone();
        for m in &members {
            let target = cg.target.get(&m.id).cloned().unwrap_or_default();
            let bytes = encode_assignment(version(m, pname.as_deref()), &self.to_named(&target));
            if let Some(gm) = g.members.get_mut(&m.id) {
                gm.assignment = bytes;
            }
        }
        g.subscribed_topics = None;
        if let Some(mut holder) = self.groups.remove(gid) {
            move_offsets(&mut holder, &mut g);
        }
        out.records.push(g.metadata_record(now));
        {
            let mut env = Env {
                cfg: &self.config,
                now,
                out,
            };
            g.prepare_rebalance(&mut env);
        }
        self.groups.insert(gid.to_string(), g);
        tracing::info!(group = %gid, "consumer group downgraded to a classic group");
    }

    // ---- classic members of a consumer group ----------------------------------------------

    /// JoinGroup of a classic member into a consumer group (Kafka's
    /// `classicGroupJoinToConsumerGroup`). Answered right away: the member gets its epoch
    /// as the generation and no member list (it never leads); SyncGroup brings its partitions.
    pub(crate) fn join_consumer_group(
        &mut self,
        pending: Pending,
        ctx: &RequestContext,
        req: &JoinGroupRequest,
        now: i64,
        out: &mut Output,
    ) {
        let (client_id, client_host) = (ctx.client_id, ctx.client_host);
        let gid = req.group_id.0.to_string();
        let respond = |out: &mut Output, cfg, r: JoinResult| {
            let mut env = Env { cfg, now, out };
            env.respond_join(pending, r);
        };
        let instance_id = if pending.version >= 5 {
            req.group_instance_id.as_deref().map(str::to_string)
        } else {
            None
        };
        let unknown = req.member_id.is_empty();
        let member_id = if unknown {
            self.ids.uuid()
        } else {
            req.member_id.to_string()
        };
        let protocols: Vec<(String, Bytes)> = req
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect();
        let max = self.config.consumer.max_size.max(0) as usize;
        let Some(g) = self.consumer.groups.get(&gid) else {
            return;
        };
        if g.members.len() >= max && !g.members.contains_key(&member_id) {
            respond(
                out,
                &self.config,
                JoinResult::error("", ErrorCode::GroupMaxSizeReached),
            );
            return;
        }
        // Kafka's supportsClassicProtocols.
        let classic_members: Vec<&Member> =
            g.members.values().filter(|m| m.uses_classic()).collect();
        let supported = req.protocol_type.as_str() == "consumer"
            && !protocols.is_empty()
            && (classic_members.is_empty()
                || protocols.iter().any(|(name, _)| {
                    classic_members.iter().all(|m| {
                        m.meta
                            .classic
                            .as_ref()
                            .is_some_and(|c| c.protocols.iter().any(|(n, _)| n == name))
                    })
                }));
        if !supported {
            respond(
                out,
                &self.config,
                JoinResult::error(&member_id, ErrorCode::InconsistentGroupProtocol),
            );
            return;
        }
        if unknown && pending.version >= 4 && instance_id.is_none() {
            respond(
                out,
                &self.config,
                JoinResult::error(&member_id, ErrorCode::MemberIdRequired),
            );
            return;
        }
        let Some(sub) = decode_subscription(&protocols[0].1) else {
            respond(
                out,
                &self.config,
                JoinResult::error(&member_id, ErrorCode::InconsistentGroupProtocol),
            );
            return;
        };
        // The member before this join.
        let (old, replaced) = match &instance_id {
            None => (
                g.members
                    .get(&member_id)
                    .cloned()
                    .unwrap_or_else(|| Member::new(&member_id)),
                None,
            ),
            Some(instance) => match g.static_member(instance) {
                None if unknown || g.members.contains_key(&member_id) => (
                    g.members
                        .get(&member_id)
                        .cloned()
                        .unwrap_or_else(|| Member::new(&member_id)),
                    None,
                ),
                None => {
                    respond(
                        out,
                        &self.config,
                        JoinResult::error(&member_id, ErrorCode::UnknownMemberId),
                    );
                    return;
                }
                Some(existing) if unknown => {
                    let mut m = existing.clone();
                    m.id = member_id.clone();
                    m.epoch = 0;
                    m.previous_epoch = 0;
                    (m, Some(existing.id.clone()))
                }
                Some(existing) if existing.id != member_id => {
                    respond(
                        out,
                        &self.config,
                        JoinResult::error(&member_id, ErrorCode::FencedInstanceId),
                    );
                    return;
                }
                Some(existing) => (existing.clone(), None),
            },
        };
        let owned = self.to_owned_list(&sub.owned);
        let Some(g) = self.consumer.groups.get_mut(&gid) else {
            return;
        };
        if let Some(old_id) = &replaced {
            let target = g.target.get(old_id).cloned().unwrap_or_default();
            remove_member_records(g, old_id, out);
            for rec in [
                CgRecord::Member {
                    group: gid.clone(),
                    member: member_id.clone(),
                    value: Some(old.meta.clone()),
                },
                CgRecord::TargetMember {
                    group: gid.clone(),
                    member: member_id.clone(),
                    value: Some(target),
                },
                CgRecord::Current {
                    group: gid.clone(),
                    member: member_id.clone(),
                    value: Some(old.current()),
                },
            ] {
                emit(g, rec, out);
            }
            g.timers.remove(old_id);
        }
        let mut meta = old.meta.clone();
        if let Some(i) = &instance_id {
            meta.instance_id = Some(i.clone());
        }
        if let Some(r) = &sub.rack_id {
            meta.rack_id = Some(r.clone());
        }
        if req.rebalance_timeout_ms != -1 {
            meta.rebalance_timeout_ms = req.rebalance_timeout_ms;
        }
        let mut names = sub.topics.clone();
        names.sort();
        names.dedup();
        meta.subscribed_topic_names = names;
        meta.client_id = client_id.to_string();
        meta.client_host = client_host.to_string();
        meta.classic = Some(ClassicMemberMetadata {
            session_timeout_ms: req.session_timeout_ms,
            protocols: protocols.clone(),
        });
        let is_new = !g.members.contains_key(&member_id);
        let changed = meta.subscribed_topic_names != old.meta.subscribed_topic_names;
        if meta != old.meta || is_new {
            emit(
                g,
                CgRecord::Member {
                    group: gid.clone(),
                    member: member_id.clone(),
                    value: Some(meta),
                },
                out,
            );
        }
        self.finish_member_update(
            &gid,
            &member_id,
            None,
            changed || (is_new && replaced.is_none()),
            ctx.visible_topics,
            now,
            out,
        );
        let Some(g) = self.consumer.groups.get_mut(&gid) else {
            return;
        };
        reconcile_member(g, &member_id, Some(&owned), now, out);
        let Some(m) = g.members.get(&member_id) else {
            return;
        };
        let t = g.timers.entry(member_id.clone()).or_default();
        t.session_deadline_ms = now.saturating_add(i64::from(req.session_timeout_ms));
        t.join_deadline_ms = None;
        t.sync_deadline_ms = Some(now.saturating_add(i64::from(req.rebalance_timeout_ms.max(0))));
        let r = JoinResult {
            error: None,
            generation: m.epoch,
            protocol_type: Some("consumer".to_string()),
            protocol_name: Some(protocols[0].0.clone()),
            leader: String::new(),
            member_id: member_id.clone(),
            members: Vec::new(),
            skip_assignment: false,
        };
        respond(out, &self.config, r);
    }

    /// Finds a classic member of a consumer group (Kafka's `validateConsumerGroupMember` +
    /// `throwIfMemberDoesNotUseClassicProtocol`).
    fn classic_member<'a>(
        g: &'a ConsumerGroup,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<&'a Member, ErrorCode> {
        let m = match instance_id {
            None => g.members.get(member_id).ok_or(ErrorCode::UnknownMemberId)?,
            Some(i) => {
                let m = g.static_member(i).ok_or(ErrorCode::UnknownMemberId)?;
                if m.id != member_id {
                    return Err(ErrorCode::FencedInstanceId);
                }
                m
            }
        };
        if !m.uses_classic() {
            return Err(ErrorCode::UnknownMemberId);
        }
        Ok(m)
    }

    /// SyncGroup of a classic member of a consumer group: its current assignment.
    pub(crate) fn sync_consumer_group(
        &mut self,
        pending: Pending,
        req: &SyncGroupRequest,
        now: i64,
        out: &mut Output,
    ) {
        let gid = req.group_id.0.to_string();
        let v = pending.version;
        let instance = if v >= 3 {
            req.group_instance_id.as_deref()
        } else {
            None
        };
        let ptype = if v >= 5 {
            req.protocol_type.as_deref()
        } else {
            None
        };
        let pname = if v >= 5 {
            req.protocol_name.as_deref()
        } else {
            None
        };
        let result = (|| {
            let g = self
                .consumer
                .groups
                .get(&gid)
                .ok_or(ErrorCode::UnknownMemberId)?;
            if g.is_empty() {
                return Err(ErrorCode::UnknownMemberId);
            }
            let m = Self::classic_member(g, &req.member_id, instance)?;
            if req.generation_id != m.epoch {
                return Err(ErrorCode::IllegalGeneration);
            }
            let first = m
                .meta
                .classic
                .as_ref()
                .and_then(|c| c.protocols.first())
                .cloned()
                .unwrap_or_default();
            if ptype.is_some_and(|t| t != "consumer") || pname.is_some_and(|n| n != first.0) {
                return Err(ErrorCode::InconsistentGroupProtocol);
            }
            if g.epoch > m.epoch && m.state != MemberState::UnrevokedPartitions {
                return Err(ErrorCode::RebalanceInProgress);
            }
            let version = decode_subscription(&first.1).map_or(0, |s| s.version);
            Ok((
                m.id.clone(),
                encode_assignment(version, &self.to_named(&m.assigned)),
                m.epoch,
            ))
        })();
        let mut env = Env {
            cfg: &self.config,
            now,
            out,
        };
        match result {
            Ok((member_id, assignment, _)) => {
                if let Some(g) = self.consumer.groups.get_mut(&gid) {
                    let session = g
                        .members
                        .get(&member_id)
                        .and_then(|m| m.meta.classic.as_ref())
                        .map_or(0, |c| c.session_timeout_ms);
                    let t = g.timers.entry(member_id).or_default();
                    t.sync_deadline_ms = None;
                    t.session_deadline_ms = now.saturating_add(i64::from(session));
                }
                env.respond_sync(
                    pending,
                    SyncResult {
                        error: None,
                        protocol_type: ptype.map(str::to_string),
                        protocol_name: pname.map(str::to_string),
                        assignment,
                    },
                );
            }
            Err(e) => {
                if e == ErrorCode::RebalanceInProgress {
                    self.arm_join_deadline(&gid, &req.member_id, now);
                }
                let mut env = Env {
                    cfg: &self.config,
                    now,
                    out,
                };
                env.respond_sync(pending, SyncResult::error(e));
            }
        }
    }

    fn arm_join_deadline(&mut self, gid: &str, member_id: &str, now: i64) {
        if let Some(g) = self.consumer.groups.get_mut(gid) {
            let timeout = g
                .members
                .get(member_id)
                .map_or(0, |m| m.meta.rebalance_timeout_ms.max(0));
            if g.members.contains_key(member_id) {
                let t = g.timers.entry(member_id.to_string()).or_default();
                t.join_deadline_ms
                    .get_or_insert(now.saturating_add(i64::from(timeout)));
            }
        }
    }

    /// Heartbeat of a classic member of a consumer group: REBALANCE_IN_PROGRESS when it
    /// must rejoin to reconcile.
    pub(crate) fn heartbeat_consumer_group(
        &mut self,
        req: &HeartbeatRequest,
        version: i16,
        now: i64,
    ) -> ErrorCode {
        let gid = req.group_id.0.to_string();
        let instance = if version >= 3 {
            req.group_instance_id.as_deref()
        } else {
            None
        };
        let Some(g) = self.consumer.groups.get(&gid) else {
            return ErrorCode::UnknownMemberId;
        };
        let m = match Self::classic_member(g, &req.member_id, instance) {
            Ok(m) => m,
            Err(e) => return e,
        };
        if req.generation_id != m.epoch {
            return ErrorCode::IllegalGeneration;
        }
        let waiting = m.state == MemberState::UnreleasedPartitions && {
            let empty = Assignment::new();
            let target = g.target.get(&m.id).unwrap_or(&empty);
            target.iter().any(|(t, parts)| {
                parts.iter().any(|p| {
                    !m.assigned.get(t).is_some_and(|a| a.contains(p))
                        && g.partition_epoch(t, *p) != -1
                })
            })
        };
        let rejoin = m.epoch < g.epoch
            || m.state == MemberState::UnrevokedPartitions
            || (m.state == MemberState::UnreleasedPartitions && !waiting);
        let id = m.id.clone();
        let session = m.meta.classic.as_ref().map_or(0, |c| c.session_timeout_ms);
        if let Some(g) = self.consumer.groups.get_mut(&gid) {
            g.timers.entry(id.clone()).or_default().session_deadline_ms =
                now.saturating_add(i64::from(session));
        }
        if rejoin {
            self.arm_join_deadline(&gid, &id, now);
            ErrorCode::RebalanceInProgress
        } else {
            ErrorCode::None
        }
    }

    /// LeaveGroup for classic members of a consumer group: one error per leaving member.
    pub(crate) fn leave_consumer_group(
        &mut self,
        gid: &str,
        leaving: &[(String, Option<String>)],
        now: i64,
        out: &mut Output,
    ) -> Vec<ErrorCode> {
        let mut results = Vec::with_capacity(leaving.len());
        let mut removed = false;
        for (member_id, instance) in leaving {
            let Some(g) = self.consumer.groups.get_mut(gid) else {
                results.push(ErrorCode::UnknownMemberId);
                continue;
            };
            let found = match instance {
                None => g
                    .members
                    .get(member_id)
                    .ok_or(ErrorCode::UnknownMemberId)
                    .map(|m| m.id.clone()),
                Some(i) => match g.static_member(i) {
                    None => Err(ErrorCode::UnknownMemberId),
                    // Admin removal names only the instance id.
                    Some(m) if !member_id.is_empty() && m.id != *member_id => {
                        Err(ErrorCode::FencedInstanceId)
                    }
                    Some(m) => Ok(m.id.clone()),
                },
            };
            let found = found.and_then(|id| {
                if g.members.get(&id).is_some_and(Member::uses_classic) {
                    Ok(id)
                } else {
                    Err(ErrorCode::UnknownMemberId)
                }
            });
            match found {
                Ok(id) => {
                    tracing::info!(group = %gid, member = %id, "classic member left the consumer group");
                    remove_member_records(g, &id, out);
                    removed = true;
                    results.push(ErrorCode::None);
                }
                Err(e) => results.push(e),
            }
        }
        if removed {
            let Some(g) = self.consumer.groups.get(gid) else {
                return results;
            };
            let metadata = self.consumer.subscription_metadata(g);
            if let Some(g) = self.consumer.groups.get_mut(gid) {
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
                if g.members.is_empty() {
                    self.maybe_update_target(gid, out);
                }
            }
        }
        let _ = now;
        results
    }

    /// A classic JoinGroup for an empty consumer group: the consumer group goes, a classic
    /// group takes its place (its offsets stay).
    pub(crate) fn retire_empty_consumer_group(&mut self, gid: &str, out: &mut Output) {
        if self
            .consumer
            .groups
            .get(gid)
            .is_some_and(ConsumerGroup::is_empty)
        {
            self.consumer_group_tombstones(gid, out);
            tracing::info!(group = %gid, "empty consumer group converted to a classic group");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_assignment_bytes_decode() {
        let a = encode_assignment(1, &[("t".into(), vec![0, 2])]);
        assert_eq!(
            decode_assignment(&a),
            Some(vec![("t".to_string(), vec![0, 2])])
        );
        assert_eq!(decode_assignment(&[0]), None);
    }
}
