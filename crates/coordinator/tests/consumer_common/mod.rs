//! Test harness for consumer-protocol (KIP-848) groups: a `GroupCoordinator` with a fake
//! clock and a topics image, simulated members that behave like the Java client and
//! librdkafka (revoke what the coordinator takes away, report what they own), and checks:
//! every response encodes at its version, every token is answered once, replay of the log
//! rebuilds the same groups.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::BytesMut;
use coordinator::consumer::records::Assignment;
use coordinator::consumer::PersistedGroup;
use coordinator::{
    CoordinatorConfig, GroupCoordinator, Output, Record, RequestContext, TopicInfo,
    TopicVisibility, TopicsImage,
};
use model::{ErrorCode, TopicId};
use protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use protocol::messages::*;
use protocol::{ResponseKind, StrBytes};

pub const PARTITIONS: i32 = 4;
pub const SESSION_MS: i32 = 45_000;
pub const HEARTBEAT_MS: i32 = 5_000;
pub const REBALANCE_MS: i32 = 30_000;

pub fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub fn tid(name: &str) -> TopicId {
    let mut id = [0u8; 16];
    for (i, b) in name.bytes().enumerate() {
        id[i % 16] ^= b.wrapping_add(i as u8);
    }
    id[15] = 0x5a;
    TopicId(id)
}

pub fn topics(spec: &[(&str, i32)]) -> TopicsImage {
    TopicsImage::new(spec.iter().map(|(name, n)| TopicInfo {
        id: tid(name),
        name: name.to_string(),
        partitions: *n,
        racks: Vec::new(),
        internal: name.starts_with("__"),
    }))
}

pub fn test_config() -> CoordinatorConfig {
    let mut cfg = CoordinatorConfig {
        offsets_topic_num_partitions: PARTITIONS,
        group_initial_rebalance_delay_ms: 0,
        ..CoordinatorConfig::default()
    };
    cfg.consumer.session_timeout_ms = SESSION_MS;
    cfg.consumer.heartbeat_interval_ms = HEARTBEAT_MS;
    cfg
}

/// A heartbeat request, built field by field.
#[derive(Clone, Debug)]
pub struct Hb {
    pub group: String,
    pub member_id: String,
    pub epoch: i32,
    pub instance: Option<String>,
    pub rack: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub names: Option<Vec<String>>,
    pub regex: Option<String>,
    pub assignor: Option<String>,
    pub owned: Option<Vec<(TopicId, Vec<i32>)>>,
    pub version: i16,
}

impl Hb {
    pub fn join(group: &str, member_id: &str, names: &[&str]) -> Hb {
        Hb {
            group: group.to_string(),
            member_id: member_id.to_string(),
            epoch: 0,
            instance: None,
            rack: None,
            rebalance_timeout_ms: REBALANCE_MS,
            names: Some(names.iter().map(|s| s.to_string()).collect()),
            regex: None,
            assignor: None,
            owned: Some(Vec::new()),
            version: 1,
        }
    }

    pub fn request(&self) -> ConsumerGroupHeartbeatRequest {
        let mut r = ConsumerGroupHeartbeatRequest::default();
        r.group_id = GroupId(sb(&self.group));
        r.member_id = sb(&self.member_id);
        r.member_epoch = self.epoch;
        r.instance_id = self.instance.as_deref().map(sb);
        r.rack_id = self.rack.as_deref().map(sb);
        r.rebalance_timeout_ms = self.rebalance_timeout_ms;
        r.subscribed_topic_names = self
            .names
            .as_ref()
            .map(|v| v.iter().map(|t| TopicName(sb(t))).collect());
        r.subscribed_topic_regex = self.regex.as_deref().map(sb);
        r.server_assignor = self.assignor.as_deref().map(sb);
        r.topic_partitions = self.owned.as_ref().map(|o| {
            o.iter()
                .map(|(t, parts)| {
                    let mut tp = TopicPartitions::default();
                    tp.topic_id = uuid::Uuid::from_bytes(t.0);
                    tp.partitions = parts.clone();
                    tp
                })
                .collect()
        });
        r
    }
}

/// The assignment of a heartbeat response, as an `Assignment`.
pub fn resp_assignment(r: &ConsumerGroupHeartbeatResponse) -> Option<Assignment> {
    r.assignment.as_ref().map(|a| {
        a.topic_partitions
            .iter()
            .map(|tp| {
                (
                    TopicId(*tp.topic_id.as_bytes()),
                    tp.partitions.iter().copied().collect(),
                )
            })
            .collect()
    })
}

pub fn owned_list(a: &Assignment) -> Vec<(TopicId, Vec<i32>)> {
    a.iter()
        .map(|(t, p)| (*t, p.iter().copied().collect()))
        .collect()
}

pub struct H {
    pub c: GroupCoordinator,
    pub now: i64,
    next: u64,
    pub log: Vec<Record>,
    pub answers: HashMap<u64, ResponseKind>,
    pub versions: HashMap<u64, i16>,
    pub topics: TopicsImage,
}

impl H {
    pub fn new(topics: TopicsImage) -> H {
        H::with_config(test_config(), topics)
    }

    pub fn with_config(cfg: CoordinatorConfig, topics: TopicsImage) -> H {
        let mut c = GroupCoordinator::new(cfg);
        c.set_topics(topics.clone());
        for p in 0..PARTITIONS {
            c.load_partition(p, 0);
        }
        H {
            c,
            now: 0,
            next: 1,
            log: Vec::new(),
            answers: HashMap::new(),
            versions: HashMap::new(),
            topics,
        }
    }

    pub fn set_topics(&mut self, topics: TopicsImage) {
        self.topics = topics.clone();
        self.c.set_topics(topics);
    }

    pub fn token(&mut self, version: i16) -> u64 {
        let t = self.next;
        self.next += 1;
        self.versions.insert(t, version);
        t
    }

    pub fn ctx(&self, token: u64, version: i16) -> RequestContext<'static> {
        RequestContext {
            token,
            api_version: version,
            client_id: "client",
            client_host: "/127.0.0.1",
            visible_topics: coordinator::TopicVisibility::ALL,
        }
    }

    pub fn absorb(&mut self, out: Output) {
        self.log.extend(out.records);
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

    pub fn hb(&mut self, hb: &Hb) -> ConsumerGroupHeartbeatResponse {
        self.hb_seeing(hb, None)
    }

    /// A heartbeat from a principal that may DESCRIBE only the topics `sees` names (every
    /// topic for None, as without an authorizer).
    pub fn hb_seeing(
        &mut self,
        hb: &Hb,
        sees: Option<&[String]>,
    ) -> ConsumerGroupHeartbeatResponse {
        let t = self.token(hb.version);
        let may_describe = |topic: &str| sees.is_some_and(|s| s.iter().any(|v| v == topic));
        let ctx = RequestContext {
            visible_topics: match sees {
                Some(_) => TopicVisibility::only(&may_describe),
                None => TopicVisibility::ALL,
            },
            ..self.ctx(t, hb.version)
        };
        let out = self
            .c
            .consumer_group_heartbeat(&ctx, hb.request(), self.now);
        self.absorb(out);
        match self.answers.get(&t) {
            Some(ResponseKind::ConsumerGroupHeartbeat(r)) => r.clone(),
            other => panic!("no heartbeat response: {other:?}"),
        }
    }

    pub fn describe(&mut self, group: &str) -> consumer_group_describe_response::DescribedGroup {
        let t = self.token(1);
        let ctx = self.ctx(t, 1);
        let mut req = ConsumerGroupDescribeRequest::default();
        req.group_ids = vec![GroupId(sb(group))];
        let out = self.c.consumer_group_describe(&ctx, req, self.now);
        self.absorb(out);
        match self.answers.get(&t) {
            Some(ResponseKind::ConsumerGroupDescribe(r)) => r.groups[0].clone(),
            other => panic!("no describe response: {other:?}"),
        }
    }

    pub fn list(&mut self, version: i16, types: &[&str]) -> Vec<(String, String, String)> {
        let t = self.token(version);
        let ctx = self.ctx(t, version);
        let mut req = ListGroupsRequest::default();
        if version >= 5 {
            req.types_filter = types.iter().map(|s| sb(s)).collect();
        }
        let out = self.c.list_groups(&ctx, req, self.now);
        self.absorb(out);
        match self.answers.get(&t) {
            Some(ResponseKind::ListGroups(r)) => r
                .groups
                .iter()
                .map(|g| {
                    (
                        g.group_id.0.to_string(),
                        g.group_state.to_string(),
                        g.group_type.to_string(),
                    )
                })
                .collect(),
            other => panic!("no list response: {other:?}"),
        }
    }

    /// Commits one offset (OffsetCommit v9).
    pub fn commit(
        &mut self,
        group: &str,
        member: &str,
        epoch: i32,
        topic: &str,
        p: i32,
        offset: i64,
    ) -> ErrorCode {
        self.commit_v(9, group, member, epoch, topic, p, offset)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn commit_v(
        &mut self,
        v: i16,
        group: &str,
        member: &str,
        epoch: i32,
        topic: &str,
        p: i32,
        offset: i64,
    ) -> ErrorCode {
        use protocol::messages::offset_commit_request::{
            OffsetCommitRequestPartition, OffsetCommitRequestTopic,
        };
        let t = self.token(v);
        let ctx = self.ctx(t, v);
        let mut req = OffsetCommitRequest::default();
        req.group_id = GroupId(sb(group));
        req.member_id = sb(member);
        req.generation_id_or_member_epoch = epoch;
        let mut rp = OffsetCommitRequestPartition::default();
        rp.partition_index = p;
        rp.committed_offset = offset;
        let mut rt = OffsetCommitRequestTopic::default();
        rt.name = TopicName(sb(topic));
        rt.partitions = vec![rp];
        req.topics = vec![rt];
        let out = self.c.offset_commit(&ctx, req, self.now);
        self.absorb(out);
        match self.answers.get(&t) {
            Some(ResponseKind::OffsetCommit(r)) => {
                ErrorCode::from_code(r.topics[0].partitions[0].error_code)
            }
            other => panic!("no commit response: {other:?}"),
        }
    }

    /// Commits one offset in a transaction (TxnOffsetCommit v3, with member fields).
    pub fn txn_commit(
        &mut self,
        group: &str,
        member: &str,
        instance: Option<&str>,
        epoch: i32,
        (topic, p, offset): (&str, i32, i64),
    ) -> ErrorCode {
        use protocol::messages::txn_offset_commit_request::{
            TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
        };
        let t = self.token(3);
        let ctx = self.ctx(t, 3);
        let mut req = TxnOffsetCommitRequest::default();
        req.transactional_id = TransactionalId(sb("tx"));
        req.group_id = GroupId(sb(group));
        req.producer_id = ProducerId(1);
        req.member_id = sb(member);
        req.group_instance_id = instance.map(sb);
        req.generation_id = epoch;
        let mut rp = TxnOffsetCommitRequestPartition::default();
        rp.partition_index = p;
        rp.committed_offset = offset;
        let mut rt = TxnOffsetCommitRequestTopic::default();
        rt.name = TopicName(sb(topic));
        rt.partitions = vec![rp];
        req.topics = vec![rt];
        let out = self.c.txn_offset_commit(&ctx, req, self.now);
        self.absorb(out);
        match self.answers.get(&t) {
            Some(ResponseKind::TxnOffsetCommit(r)) => {
                ErrorCode::from_code(r.topics[0].partitions[0].error_code)
            }
            other => panic!("no txn commit response: {other:?}"),
        }
    }

    /// Fetches one committed offset (OffsetFetch v9 with member fields).
    pub fn fetch(
        &mut self,
        group: &str,
        member: Option<&str>,
        epoch: i32,
        topic: &str,
        p: i32,
    ) -> Result<i64, ErrorCode> {
        use protocol::messages::offset_fetch_request::{
            OffsetFetchRequestGroup, OffsetFetchRequestTopics,
        };
        let t = self.token(9);
        let ctx = self.ctx(t, 9);
        let mut g = OffsetFetchRequestGroup::default();
        g.group_id = GroupId(sb(group));
        g.member_id = member.map(sb);
        g.member_epoch = epoch;
        let mut rt = OffsetFetchRequestTopics::default();
        rt.name = TopicName(sb(topic));
        rt.partition_indexes = vec![p];
        g.topics = Some(vec![rt]);
        let mut req = OffsetFetchRequest::default();
        req.groups = vec![g];
        let out = self.c.offset_fetch(&ctx, req, self.now);
        self.absorb(out);
        match self.answers.get(&t) {
            Some(ResponseKind::OffsetFetch(r)) => {
                let g = &r.groups[0];
                if g.error_code != 0 {
                    return Err(ErrorCode::from_code(g.error_code));
                }
                Ok(g.topics[0].partitions[0].committed_offset)
            }
            other => panic!("no fetch response: {other:?}"),
        }
    }

    /// The persisted state of every consumer group.
    pub fn persisted(&self) -> BTreeMap<String, PersistedGroup> {
        self.c
            .consumer_groups()
            .groups()
            .map(|g| (g.id.clone(), g.persisted()))
            .collect()
    }

    /// Replays the whole log into a new coordinator and compares the consumer groups.
    pub fn check_replay(&self) {
        let mut fresh = GroupCoordinator::new(test_config());
        fresh.set_topics(self.topics.clone());
        for r in &self.log {
            fresh
                .replay(&r.key, r.value.as_deref())
                .unwrap_or_else(|e| {
                    panic!(
                        "replay {:02x?} {:02x?}: {e}",
                        &r.key[..],
                        r.value.as_deref()
                    )
                });
        }
        let replayed: BTreeMap<String, PersistedGroup> = fresh
            .consumer_groups()
            .groups()
            .map(|g| (g.id.clone(), g.persisted()))
            .collect();
        assert_eq!(
            replayed,
            self.persisted(),
            "replay differs from the live state"
        );
    }
}

/// A simulated consumer-protocol client: it owns what the coordinator last gave it, gives up
/// what the coordinator takes away at once, and reports its partitions on every heartbeat.
#[derive(Clone, Debug)]
pub struct Client {
    pub group: String,
    pub member_id: String,
    pub epoch: i32,
    pub owned: Assignment,
    pub names: Vec<String>,
    pub regex: Option<String>,
    pub instance: Option<String>,
    pub joined: bool,
    /// The topics the member's principal may DESCRIBE (None: every topic, no authorizer).
    pub sees: Option<Vec<String>>,
}

impl Client {
    pub fn new(group: &str, member_id: &str, names: &[&str]) -> Client {
        Client {
            group: group.to_string(),
            member_id: member_id.to_string(),
            epoch: 0,
            owned: Assignment::new(),
            names: names.iter().map(|s| s.to_string()).collect(),
            regex: None,
            instance: None,
            joined: false,
            sees: None,
        }
    }

    /// One heartbeat (a join when not in the group); returns the error, if any.
    pub fn heartbeat(&mut self, h: &mut H) -> ErrorCode {
        let mut hb = Hb::join(&self.group, &self.member_id, &[]);
        hb.names = Some(self.names.clone());
        hb.regex = self.regex.clone();
        hb.instance = self.instance.clone();
        if self.joined {
            hb.epoch = self.epoch;
            hb.owned = Some(owned_list(&self.owned));
        } else {
            self.owned.clear();
            hb.epoch = 0;
        }
        let r = h.hb_seeing(&hb, self.sees.as_deref());
        let e = ErrorCode::from_code(r.error_code);
        match e {
            ErrorCode::None => {
                self.joined = true;
                self.epoch = r.member_epoch;
                if let Some(a) = resp_assignment(&r) {
                    self.owned = a;
                }
            }
            ErrorCode::FencedMemberEpoch | ErrorCode::UnknownMemberId => {
                // Lose everything and rejoin.
                self.joined = false;
                self.owned.clear();
                self.epoch = 0;
            }
            _ => {}
        }
        e
    }

    pub fn leave(&mut self, h: &mut H) -> ErrorCode {
        let mut hb = Hb::join(&self.group, &self.member_id, &[]);
        hb.epoch = -1;
        hb.names = None;
        hb.owned = None;
        hb.rebalance_timeout_ms = -1;
        hb.instance = self.instance.clone();
        let r = h.hb(&hb);
        self.joined = false;
        self.owned.clear();
        self.epoch = 0;
        ErrorCode::from_code(r.error_code)
    }
}

pub fn count(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}

pub fn union(assignments: &[&Assignment]) -> BTreeSet<(TopicId, i32)> {
    let mut all = BTreeSet::new();
    for a in assignments {
        for (t, ps) in a.iter() {
            for p in ps {
                assert!(all.insert((*t, *p)), "partition {p} owned twice");
            }
        }
    }
    all
}

// ---- classic members (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) ------------------------------

/// A ConsumerProtocolSubscription v1 with owned partitions (names, partitions).
pub fn subscription_v1(topics: &[&str], owned: &[(&str, Vec<i32>)]) -> bytes::Bytes {
    use bytes::BufMut;
    let mut b = BytesMut::new();
    b.put_i16(1);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
    }
    b.put_i32(-1);
    b.put_i32(owned.len() as i32);
    for (t, ps) in owned {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
        b.put_i32(ps.len() as i32);
        for p in ps {
            b.put_i32(*p);
        }
    }
    b.freeze()
}

/// The partitions of a ConsumerProtocolAssignment.
pub fn decode_classic_assignment(b: &[u8]) -> Vec<(String, Vec<i32>)> {
    let mut out = Vec::new();
    let rd_i16 = |b: &[u8], at: usize| i16::from_be_bytes([b[at], b[at + 1]]);
    let rd_i32 = |b: &[u8], at: usize| i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    if b.len() < 6 {
        return out;
    }
    let mut at = 2;
    let n = rd_i32(b, at);
    at += 4;
    for _ in 0..n {
        let l = rd_i16(b, at) as usize;
        at += 2;
        let t = String::from_utf8(b[at..at + l].to_vec()).unwrap();
        at += l;
        let np = rd_i32(b, at);
        at += 4;
        let mut ps = Vec::new();
        for _ in 0..np {
            ps.push(rd_i32(b, at));
            at += 4;
        }
        out.push((t, ps));
    }
    out
}

impl H {
    /// JoinGroup v5 (protocol type "consumer"); returns the token.
    pub fn classic_join(
        &mut self,
        group: &str,
        member: &str,
        instance: Option<&str>,
        protocols: &[(&str, bytes::Bytes)],
    ) -> u64 {
        let t = self.token(5);
        let ctx = self.ctx(t, 5);
        let mut r = JoinGroupRequest::default();
        r.group_id = GroupId(sb(group));
        r.session_timeout_ms = 10_000;
        r.rebalance_timeout_ms = REBALANCE_MS;
        r.member_id = sb(member);
        r.group_instance_id = instance.map(sb);
        r.protocol_type = sb("consumer");
        r.protocols = protocols
            .iter()
            .map(|(n, m)| {
                let mut p = join_group_request::JoinGroupRequestProtocol::default();
                p.name = sb(n);
                p.metadata = m.clone();
                p
            })
            .collect();
        let out = self.c.join_group(&ctx, r, self.now);
        self.absorb(out);
        t
    }

    pub fn join_resp(&self, t: u64) -> Option<JoinGroupResponse> {
        match self.answers.get(&t) {
            Some(ResponseKind::JoinGroup(r)) => Some(r.clone()),
            None => None,
            Some(other) => panic!("not a join response: {other:?}"),
        }
    }

    pub fn classic_sync(
        &mut self,
        group: &str,
        member: &str,
        generation: i32,
        assignments: &[(String, bytes::Bytes)],
    ) -> u64 {
        self.classic_sync_p(group, member, generation, "range", assignments)
    }

    pub fn classic_sync_p(
        &mut self,
        group: &str,
        member: &str,
        generation: i32,
        protocol: &str,
        assignments: &[(String, bytes::Bytes)],
    ) -> u64 {
        let t = self.token(5);
        let ctx = self.ctx(t, 5);
        let mut r = SyncGroupRequest::default();
        r.group_id = GroupId(sb(group));
        r.generation_id = generation;
        r.member_id = sb(member);
        r.protocol_type = Some(sb("consumer"));
        r.protocol_name = Some(sb(protocol));
        r.assignments = assignments
            .iter()
            .map(|(m, a)| {
                let mut x = sync_group_request::SyncGroupRequestAssignment::default();
                x.member_id = sb(m);
                x.assignment = a.clone();
                x
            })
            .collect();
        let out = self.c.sync_group(&ctx, r, self.now);
        self.absorb(out);
        t
    }

    pub fn sync_resp(&self, t: u64) -> Option<SyncGroupResponse> {
        match self.answers.get(&t) {
            Some(ResponseKind::SyncGroup(r)) => Some(r.clone()),
            None => None,
            Some(other) => panic!("not a sync response: {other:?}"),
        }
    }

    pub fn classic_heartbeat(&mut self, group: &str, member: &str, generation: i32) -> ErrorCode {
        let t = self.token(3);
        let ctx = self.ctx(t, 3);
        let mut r = HeartbeatRequest::default();
        r.group_id = GroupId(sb(group));
        r.generation_id = generation;
        r.member_id = sb(member);
        let out = self.c.heartbeat(&ctx, r, self.now);
        self.absorb(out);
        match self.answers.get(&t) {
            Some(ResponseKind::Heartbeat(r)) => ErrorCode::from_code(r.error_code),
            other => panic!("no heartbeat response: {other:?}"),
        }
    }

    pub fn classic_leave(&mut self, group: &str, member: &str) -> ErrorCode {
        let t = self.token(3);
        let ctx = self.ctx(t, 3);
        let mut r = LeaveGroupRequest::default();
        r.group_id = GroupId(sb(group));
        let mut m = leave_group_request::MemberIdentity::default();
        m.member_id = sb(member);
        r.members = vec![m];
        let out = self.c.leave_group(&ctx, r, self.now);
        self.absorb(out);
        match self.answers.get(&t) {
            Some(ResponseKind::LeaveGroup(r)) => ErrorCode::from_code(if r.error_code != 0 {
                r.error_code
            } else {
                r.members[0].error_code
            }),
            other => panic!("no leave response: {other:?}"),
        }
    }
}

/// A classic consumer (eager "range" protocol, or cooperative when `cooperative`): it joins,
/// syncs (computing a range assignment when it leads a classic group), heartbeats and
/// rejoins on REBALANCE_IN_PROGRESS.
#[derive(Clone, Debug)]
pub struct ClassicClient {
    pub group: String,
    pub member_id: String,
    pub generation: i32,
    pub topics: Vec<String>,
    pub owned: Vec<(String, Vec<i32>)>,
    pub cooperative: bool,
    pub in_group: bool,
}

impl ClassicClient {
    pub fn new(group: &str, topics: &[&str]) -> ClassicClient {
        ClassicClient {
            group: group.to_string(),
            member_id: String::new(),
            generation: -1,
            topics: topics.iter().map(|s| s.to_string()).collect(),
            owned: Vec::new(),
            cooperative: false,
            in_group: false,
        }
    }

    fn subscription(&self) -> bytes::Bytes {
        let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        if self.cooperative {
            let owned: Vec<(&str, Vec<i32>)> = self
                .owned
                .iter()
                .map(|(t, p)| (t.as_str(), p.clone()))
                .collect();
            subscription_v1(&topics, &owned)
        } else {
            subscription_v1(&topics, &[])
        }
    }

    /// Sends JoinGroup (twice when a member id is required); returns the join token.
    pub fn start_join(&mut self, h: &mut H) -> u64 {
        if !self.cooperative {
            // Eager: give everything up before joining.
            self.owned.clear();
        }
        let name = if self.cooperative {
            "cooperative-sticky"
        } else {
            "range"
        };
        let t = h.classic_join(
            &self.group,
            &self.member_id,
            None,
            &[(name, self.subscription())],
        );
        if let Some(r) = h.join_resp(t) {
            if r.error_code == ErrorCode::MemberIdRequired.code() {
                self.member_id = r.member_id.to_string();
                return h.classic_join(
                    &self.group,
                    &self.member_id,
                    None,
                    &[(name, self.subscription())],
                );
            }
        }
        t
    }

    /// Handles an answered JoinGroup and syncs; the leader of a classic group assigns ranges.
    pub fn finish_join(&mut self, h: &mut H, t: u64) -> Option<u64> {
        let r = h.join_resp(t)?;
        if r.error_code != 0 {
            self.in_group = false;
            return None;
        }
        self.member_id = r.member_id.to_string();
        self.generation = r.generation_id;
        let mut assignments = Vec::new();
        if r.leader == r.member_id && !r.members.is_empty() {
            let ids: Vec<String> = r.members.iter().map(|m| m.member_id.to_string()).collect();
            let mut per: Vec<Vec<(String, Vec<i32>)>> = vec![Vec::new(); ids.len()];
            for t in &self.topics {
                let n = h.topics.by_name(t).map_or(0, |i| i.partitions);
                for p in 0..n {
                    let k = (p as usize) % ids.len();
                    match per[k].iter_mut().find(|(x, _)| x == t) {
                        Some((_, ps)) => ps.push(p),
                        None => per[k].push((t.clone(), vec![p])),
                    }
                }
            }
            for (id, a) in ids.iter().zip(per) {
                assignments.push((id.clone(), encode_assignment_bytes(&a)));
            }
        }
        let protocol = r.protocol_name.as_deref().unwrap_or("").to_string();
        let st = h.classic_sync_p(
            &self.group,
            &self.member_id.clone(),
            self.generation,
            &protocol,
            &assignments,
        );
        Some(st)
    }

    pub fn finish_sync(&mut self, h: &mut H, t: u64) -> ErrorCode {
        let Some(r) = h.sync_resp(t) else {
            return ErrorCode::RequestTimedOut;
        };
        let e = ErrorCode::from_code(r.error_code);
        if e == ErrorCode::None {
            self.owned = decode_classic_assignment(&r.assignment);
            self.in_group = true;
        }
        e
    }

    pub fn owned_set(&self) -> Vec<(TopicId, i32)> {
        let mut v = Vec::new();
        for (t, ps) in &self.owned {
            for p in ps {
                v.push((tid(t), *p));
            }
        }
        v
    }
}

pub fn encode_assignment_bytes(a: &[(String, Vec<i32>)]) -> bytes::Bytes {
    use bytes::BufMut;
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(a.len() as i32);
    for (t, ps) in a {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
        b.put_i32(ps.len() as i32);
        for p in ps {
            b.put_i32(*p);
        }
    }
    b.put_i32(-1);
    b.freeze()
}
