//! Test harness: drives a `GroupCoordinator` with a fake clock, records every output, checks
//! that each token is answered at most once and that every response encodes at its version.
#![allow(dead_code, clippy::unwrap_used, clippy::type_complexity)]

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use coordinator::{
    CoordinatorConfig, GroupCoordinator, GroupState, Output, Record, RequestContext, TxnRecords,
};
use protocol::messages::join_group_request::JoinGroupRequestProtocol;
use protocol::messages::leave_group_request::MemberIdentity;
use protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use protocol::messages::*;
use protocol::{ResponseKind, StrBytes};

pub const PARTITIONS: i32 = 4;
pub const SESSION_MS: i32 = 10_000;
pub const REBALANCE_MS: i32 = 30_000;

pub fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A ConsumerProtocolSubscription v0 for these topics.
pub fn subscription(topics: &[&str]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
    }
    b.put_i32(-1);
    b.freeze()
}

pub fn test_config() -> CoordinatorConfig {
    CoordinatorConfig {
        offsets_topic_num_partitions: PARTITIONS,
        group_initial_rebalance_delay_ms: 0,
        ..CoordinatorConfig::default()
    }
}

pub struct H {
    pub c: GroupCoordinator,
    pub now: i64,
    next: u64,
    pub log: Vec<Record>,
    /// Transactional batches written (TxnOffsetCommit), in order.
    pub txn_log: Vec<TxnRecords>,
    pub answers: HashMap<u64, ResponseKind>,
    pub versions: HashMap<u64, i16>,
}

impl H {
    pub fn new() -> H {
        H::with_config(test_config())
    }

    pub fn with_config(cfg: CoordinatorConfig) -> H {
        let mut c = GroupCoordinator::new(cfg);
        for p in 0..PARTITIONS {
            c.load_partition(p, 0);
        }
        H {
            c,
            now: 0,
            next: 1,
            log: Vec::new(),
            txn_log: Vec::new(),
            answers: HashMap::new(),
            versions: HashMap::new(),
        }
    }

    fn token(&mut self, version: i16) -> u64 {
        let t = self.next;
        self.next += 1;
        self.versions.insert(t, version);
        t
    }

    pub fn absorb(&mut self, out: Output) {
        self.log.extend(out.records);
        self.txn_log.extend(out.txn_records);
        for (t, r) in out.responses {
            let v = self.versions[&t];
            let mut buf = BytesMut::new();
            assert!(
                r.encode(&mut buf, v).is_ok(),
                "response for token {t} does not encode at v{v}: {r:?}"
            );
            assert!(
                self.answers.insert(t, r).is_none(),
                "token {t} answered twice"
            );
        }
    }

    pub fn advance(&mut self, ms: i64) {
        self.now += ms;
        let out = self.c.tick(self.now);
        self.absorb(out);
    }

    pub fn answered(&self, t: u64) -> bool {
        self.answers.contains_key(&t)
    }

    pub fn join_resp(&self, t: u64) -> Option<&JoinGroupResponse> {
        match self.answers.get(&t) {
            Some(ResponseKind::JoinGroup(r)) => Some(r),
            None => None,
            Some(other) => panic!("not a join response: {other:?}"),
        }
    }

    pub fn sync_resp(&self, t: u64) -> Option<&SyncGroupResponse> {
        match self.answers.get(&t) {
            Some(ResponseKind::SyncGroup(r)) => Some(r),
            None => None,
            Some(other) => panic!("not a sync response: {other:?}"),
        }
    }

    /// Sends a JoinGroup; returns its token.
    pub fn join_with(
        &mut self,
        group: &str,
        member: &str,
        instance: Option<&str>,
        version: i16,
        protocols: &[(&str, Bytes)],
    ) -> u64 {
        let t = self.token(version);
        let mut r = JoinGroupRequest::default();
        r.group_id = GroupId(sb(group));
        r.session_timeout_ms = SESSION_MS;
        r.rebalance_timeout_ms = if version >= 1 { REBALANCE_MS } else { -1 };
        r.member_id = sb(member);
        r.group_instance_id = instance.map(sb);
        r.protocol_type = sb("consumer");
        r.protocols = protocols
            .iter()
            .map(|(n, m)| {
                let mut p = JoinGroupRequestProtocol::default();
                p.name = sb(n);
                p.metadata = m.clone();
                p
            })
            .collect();
        let ctx = RequestContext {
            token: t,
            api_version: version,
            client_id: "client",
            client_host: "/127.0.0.1",
            visible_topics: coordinator::TopicVisibility::ALL,
        };
        let out = self.c.join_group(&ctx, r, self.now);
        self.absorb(out);
        t
    }

    /// JoinGroup v5 with the "range" protocol subscribing to `topics`.
    pub fn join(&mut self, group: &str, member: &str, instance: Option<&str>) -> u64 {
        self.join_with(
            group,
            member,
            instance,
            5,
            &[("range", subscription(&["t1"]))],
        )
    }

    /// A dynamic member's first join including the KIP-394 member-id round; returns the
    /// member id and the token of the second (pending or answered) join.
    pub fn join_new(&mut self, group: &str) -> (String, u64) {
        let t = self.join(group, "", None);
        let r = self.join_resp(t).expect("first join answered at once");
        assert_eq!(r.error_code, 79, "MEMBER_ID_REQUIRED");
        let id = r.member_id.to_string();
        assert!(!id.is_empty());
        let t2 = self.join(group, &id, None);
        (id, t2)
    }

    pub fn sync_with(
        &mut self,
        group: &str,
        member: &str,
        instance: Option<&str>,
        generation: i32,
        version: i16,
        assignments: &[(&str, &[u8])],
    ) -> u64 {
        let t = self.token(version);
        let mut r = SyncGroupRequest::default();
        r.group_id = GroupId(sb(group));
        r.generation_id = generation;
        r.member_id = sb(member);
        r.group_instance_id = instance.map(sb);
        if version >= 5 {
            // Mandatory from v5 on (Kafka answers INCONSISTENT_GROUP_PROTOCOL without them).
            r.protocol_type = Some(sb("consumer"));
            r.protocol_name = Some(sb("range"));
        }
        r.assignments = assignments
            .iter()
            .map(|(m, a)| {
                let mut x = SyncGroupRequestAssignment::default();
                x.member_id = sb(m);
                x.assignment = Bytes::copy_from_slice(a);
                x
            })
            .collect();
        let ctx = RequestContext {
            token: t,
            api_version: version,
            client_id: "client",
            client_host: "/127.0.0.1",
            visible_topics: coordinator::TopicVisibility::ALL,
        };
        let out = self.c.sync_group(&ctx, r, self.now);
        self.absorb(out);
        t
    }

    pub fn sync(
        &mut self,
        group: &str,
        member: &str,
        generation: i32,
        assignments: &[(&str, &[u8])],
    ) -> u64 {
        self.sync_with(group, member, None, generation, 3, assignments)
    }

    pub fn heartbeat(
        &mut self,
        group: &str,
        member: &str,
        instance: Option<&str>,
        generation: i32,
    ) -> i16 {
        let t = self.token(3);
        let mut r = HeartbeatRequest::default();
        r.group_id = GroupId(sb(group));
        r.generation_id = generation;
        r.member_id = sb(member);
        r.group_instance_id = instance.map(sb);
        let ctx = RequestContext {
            token: t,
            api_version: 3,
            client_id: "client",
            client_host: "/127.0.0.1",
            visible_topics: coordinator::TopicVisibility::ALL,
        };
        let out = self.c.heartbeat(&ctx, r, self.now);
        self.absorb(out);
        match &self.answers[&t] {
            ResponseKind::Heartbeat(r) => r.error_code,
            other => panic!("{other:?}"),
        }
    }

    pub fn leave(
        &mut self,
        group: &str,
        members: &[(&str, Option<&str>)],
        version: i16,
    ) -> LeaveGroupResponse {
        let t = self.token(version);
        let mut r = LeaveGroupRequest::default();
        r.group_id = GroupId(sb(group));
        if version >= 3 {
            r.members = members
                .iter()
                .map(|(m, i)| {
                    let mut x = MemberIdentity::default();
                    x.member_id = sb(m);
                    x.group_instance_id = i.map(sb);
                    x
                })
                .collect();
        } else {
            r.member_id = sb(members[0].0);
        }
        let ctx = RequestContext {
            token: t,
            api_version: version,
            client_id: "client",
            client_host: "/127.0.0.1",
            visible_topics: coordinator::TopicVisibility::ALL,
        };
        let out = self.c.leave_group(&ctx, r, self.now);
        self.absorb(out);
        match &self.answers[&t] {
            ResponseKind::LeaveGroup(r) => r.clone(),
            other => panic!("{other:?}"),
        }
    }

    pub fn commit_with(
        &mut self,
        group: &str,
        member: &str,
        generation: i32,
        version: i16,
        offsets: &[(&str, i32, i64, &str)],
    ) -> OffsetCommitResponse {
        let t = self.token(version);
        let mut r = OffsetCommitRequest::default();
        r.group_id = GroupId(sb(group));
        r.generation_id_or_member_epoch = generation;
        r.member_id = sb(member);
        let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
        for (topic, p, o, meta) in offsets {
            let mut part = OffsetCommitRequestPartition::default();
            part.partition_index = *p;
            part.committed_offset = *o;
            part.committed_metadata = Some(sb(meta));
            if version >= 6 {
                part.committed_leader_epoch = 3;
            }
            match topics.iter_mut().find(|t| t.name.0.as_str() == *topic) {
                Some(t) => t.partitions.push(part),
                None => {
                    let mut t = OffsetCommitRequestTopic::default();
                    t.name = TopicName(sb(topic));
                    t.partitions.push(part);
                    topics.push(t);
                }
            }
        }
        r.topics = topics;
        let ctx = RequestContext {
            token: t,
            api_version: version,
            client_id: "client",
            client_host: "/127.0.0.1",
            visible_topics: coordinator::TopicVisibility::ALL,
        };
        let out = self.c.offset_commit(&ctx, r, self.now);
        self.absorb(out);
        match &self.answers[&t] {
            ResponseKind::OffsetCommit(r) => r.clone(),
            other => panic!("{other:?}"),
        }
    }

    pub fn commit(
        &mut self,
        group: &str,
        member: &str,
        generation: i32,
        offsets: &[(&str, i32, i64)],
    ) -> Vec<i16> {
        let o: Vec<(&str, i32, i64, &str)> =
            offsets.iter().map(|(t, p, o)| (*t, *p, *o, "")).collect();
        let r = self.commit_with(group, member, generation, 8, &o);
        r.topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect()
    }

    /// TxnOffsetCommit of producer `pid`: the partition error codes.
    #[allow(clippy::too_many_arguments)]
    pub fn txn_commit(
        &mut self,
        group: &str,
        pid: i64,
        epoch: i16,
        version: i16,
        member: &str,
        generation: i32,
        offsets: &[(&str, i32, i64)],
    ) -> Vec<i16> {
        let t = self.token(version);
        let mut r = TxnOffsetCommitRequest::default();
        r.transactional_id = TransactionalId(sb("tx"));
        r.group_id = GroupId(sb(group));
        r.producer_id = ProducerId(pid);
        r.producer_epoch = epoch;
        if version >= 3 {
            r.member_id = sb(member);
            r.generation_id = generation;
        }
        let mut topics: Vec<txn_offset_commit_request::TxnOffsetCommitRequestTopic> = Vec::new();
        for (tn, p, o) in offsets {
            let mut part = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default();
            part.partition_index = *p;
            part.committed_offset = *o;
            match topics.iter_mut().find(|x| x.name.0.as_str() == *tn) {
                Some(x) => x.partitions.push(part),
                None => {
                    let mut x = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default();
                    x.name = TopicName(sb(tn));
                    x.partitions.push(part);
                    topics.push(x);
                }
            }
        }
        r.topics = topics;
        let ctx = RequestContext {
            token: t,
            api_version: version,
            client_id: "client",
            client_host: "/127.0.0.1",
            visible_topics: coordinator::TopicVisibility::ALL,
        };
        let out = self.c.txn_offset_commit(&ctx, r, self.now);
        self.absorb(out);
        match &self.answers[&t] {
            ResponseKind::TxnOffsetCommit(r) => r
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    /// OffsetFetch v7 with require_stable: (offset, error) per requested partition.
    pub fn fetch_stable(&mut self, group: &str, topics: &[(&str, &[i32])]) -> Vec<(i64, i16)> {
        let t = self.token(7);
        let mut r = OffsetFetchRequest::default();
        r.group_id = GroupId(sb(group));
        r.require_stable = true;
        r.topics = Some(
            topics
                .iter()
                .map(|(n, ps)| {
                    let mut x = OffsetFetchRequestTopic::default();
                    x.name = TopicName(sb(n));
                    x.partition_indexes = ps.to_vec();
                    x
                })
                .collect(),
        );
        let resp = self.run_fetch(t, 7, r);
        resp.topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (p.committed_offset, p.error_code))
            })
            .collect()
    }

    /// OffsetFetch v1-v7 of one group (`topics: None` = all, v2+).
    pub fn fetch(
        &mut self,
        group: &str,
        version: i16,
        topics: Option<&[(&str, &[i32])]>,
    ) -> OffsetFetchResponse {
        let t = self.token(version);
        let mut r = OffsetFetchRequest::default();
        r.group_id = GroupId(sb(group));
        r.topics = topics.map(|ts| {
            ts.iter()
                .map(|(n, ps)| {
                    let mut x = OffsetFetchRequestTopic::default();
                    x.name = TopicName(sb(n));
                    x.partition_indexes = ps.to_vec();
                    x
                })
                .collect()
        });
        self.run_fetch(t, version, r)
    }

    /// OffsetFetch v8+ of several groups.
    pub fn fetch_groups(
        &mut self,
        groups: &[(&str, Option<&[(&str, &[i32])]>)],
    ) -> OffsetFetchResponse {
        let t = self.token(8);
        let mut r = OffsetFetchRequest::default();
        r.groups = groups
            .iter()
            .map(|(g, topics)| {
                let mut x = OffsetFetchRequestGroup::default();
                x.group_id = GroupId(sb(g));
                x.topics = topics.map(|ts| {
                    ts.iter()
                        .map(|(n, ps)| {
                            let mut y = OffsetFetchRequestTopics::default();
                            y.name = TopicName(sb(n));
                            y.partition_indexes = ps.to_vec();
                            y
                        })
                        .collect()
                });
                x
            })
            .collect();
        self.run_fetch(t, 8, r)
    }

    fn run_fetch(&mut self, t: u64, version: i16, r: OffsetFetchRequest) -> OffsetFetchResponse {
        let ctx = RequestContext {
            token: t,
            api_version: version,
            client_id: "client",
            client_host: "/127.0.0.1",
            visible_topics: coordinator::TopicVisibility::ALL,
        };
        let out = self.c.offset_fetch(&ctx, r, self.now);
        self.absorb(out);
        match &self.answers[&t] {
            ResponseKind::OffsetFetch(r) => r.clone(),
            other => panic!("{other:?}"),
        }
    }

    /// Calls an admin API: `f` gets the coordinator, a context and the time.
    pub fn admin(
        &mut self,
        version: i16,
        f: impl FnOnce(&mut GroupCoordinator, &RequestContext, i64) -> Output,
    ) -> ResponseKind {
        let t = self.token(version);
        let ctx = RequestContext {
            token: t,
            api_version: version,
            client_id: "admin",
            client_host: "/127.0.0.1",
            visible_topics: coordinator::TopicVisibility::ALL,
        };
        let out = f(&mut self.c, &ctx, self.now);
        self.absorb(out);
        self.answers[&t].clone()
    }

    /// Brings `n` dynamic members of `group` to Stable through the full join/sync dance.
    /// Returns (member ids, generation, leader id).
    pub fn stable_group(&mut self, group: &str, n: usize) -> (Vec<String>, i32, String) {
        let mut members: Vec<(String, u64)> = (0..n).map(|_| self.join_new(group)).collect();
        for _ in 0..(2 * n + 4) {
            let g = self.c.group(group).unwrap();
            let done = g.state == GroupState::CompletingRebalance
                && members.iter().all(|(_, t)| {
                    self.join_resp(*t)
                        .is_some_and(|r| r.generation_id == g.generation)
                });
            if done {
                break;
            }
            for (m, t) in members.iter_mut() {
                let stale = self.join_resp(*t).is_some_and(|r| {
                    g.state == GroupState::PreparingRebalance || r.generation_id != g.generation
                });
                if stale {
                    *t = self.join(group, m, None);
                }
            }
        }
        let first = self.join_resp(members[0].1).expect("joined").clone();
        let generation = first.generation_id;
        let leader = first.leader.to_string();
        let ids: Vec<String> = members.into_iter().map(|(m, _)| m).collect();
        let mut sync_tokens = Vec::new();
        for m in ids.iter().filter(|m| **m != leader) {
            sync_tokens.push(self.sync(group, m, generation, &[]));
        }
        let assignments: Vec<(String, Vec<u8>)> = ids
            .iter()
            .map(|m| (m.clone(), format!("a-{m}").into_bytes()))
            .collect();
        let a: Vec<(&str, &[u8])> = assignments
            .iter()
            .map(|(m, a)| (m.as_str(), a.as_slice()))
            .collect();
        sync_tokens.push(self.sync(group, &leader, generation, &a));
        for t in sync_tokens {
            assert_eq!(self.sync_resp(t).map(|r| r.error_code), Some(0));
        }
        assert_eq!(self.c.group(group).unwrap().state, GroupState::Stable);
        (ids, generation, leader)
    }
}
