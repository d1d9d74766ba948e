//! Consumer groups with the classic protocol: finding the coordinator, join/sync, heartbeats
//! in the background, the range and cooperative-sticky assignors, rebalance callbacks, and
//! offset commit/fetch.
//!
//! Ownership: a `GroupMember` lives inside its `Consumer` and is driven from `poll` (joins and
//! syncs happen on the application's task, as in the Java client). Heartbeats run in a task
//! the member owns; it only raises flags (rejoin, find coordinator) that the next `poll` acts
//! on, and it is aborted before each join and when the member is dropped.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use protocol::messages::join_group_request::JoinGroupRequestProtocol;
use protocol::messages::leave_group_request::MemberIdentity;
use protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use protocol::messages::{
    FindCoordinatorRequest, GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
    OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
};
use tokio::task::JoinHandle;

use crate::cluster::{sb, topic_name, Client};
use crate::consumer::{Consumer, TopicPartition};
use crate::error::{Error, Result};
use model::ErrorCode;

/// A partition assignment strategy (`partition.assignment.strategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Assignor {
    /// Java's `RangeAssignor` (eager): per topic, contiguous ranges by member id.
    Range,
    /// Java's `CooperativeStickyAssignor`: balanced, keeps owned partitions, and moves a
    /// partition only after its owner gave it up (incremental rebalancing).
    CooperativeSticky,
}

impl Assignor {
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::CooperativeSticky => "cooperative-sticky",
        }
    }

    pub fn from_name(s: &str) -> Option<Assignor> {
        match s {
            "range" => Some(Assignor::Range),
            "cooperative-sticky" => Some(Assignor::CooperativeSticky),
            _ => None,
        }
    }
}

/// Callbacks around rebalances, called from `poll` on the application's task.
pub trait RebalanceListener: Send {
    /// Partitions taken away; commit their progress here if needed.
    fn on_partitions_revoked(&mut self, _partitions: &[TopicPartition]) {}
    /// Partitions newly assigned.
    fn on_partitions_assigned(&mut self, _partitions: &[TopicPartition]) {}
}

const FLAG_REJOIN: u8 = 1;
const FLAG_COORDINATOR: u8 = 2;
const FLAG_RESET_MEMBER: u8 = 4;

/// Membership state of a subscribed consumer.
pub struct GroupMember {
    pub(crate) group_id: String,
    pub(crate) topics: Vec<String>,
    pub(crate) listener: Option<Box<dyn RebalanceListener>>,
    pub(crate) coordinator: Option<i32>,
    pub(crate) member_id: String,
    /// The generation (classic) or member epoch (consumer protocol).
    pub(crate) generation: i32,
    protocol: Option<Assignor>,
    pub(crate) joined: bool,
    /// The consumer protocol's state (`group.protocol=consumer`).
    pub(crate) consumer: Option<crate::group_consumer::ConsumerMembership>,
    flags: Arc<AtomicU8>,
    heartbeat: Option<JoinHandle<()>>,
    last_commit: Instant,
    /// When `poll` last ran, in ms since `created`; the heartbeat task leaves the group when
    /// it is older than `max_poll_interval_ms`, as the Java client does.
    last_poll_ms: Arc<AtomicU64>,
    created: Instant,
    /// Partition counts of the subscribed topics when the assignment was made; a change
    /// (partitions added) triggers a rebalance.
    partition_counts: BTreeMap<String, usize>,
    last_metadata_check: Instant,
}

impl std::fmt::Debug for GroupMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupMember")
            .field("group_id", &self.group_id)
            .field("member_id", &self.member_id)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
    }
}

impl GroupMember {
    pub(crate) fn new(
        group_id: String,
        topics: Vec<String>,
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> GroupMember {
        GroupMember {
            group_id,
            topics,
            listener,
            coordinator: None,
            member_id: String::new(),
            generation: -1,
            protocol: None,
            joined: false,
            consumer: None,
            flags: Arc::new(AtomicU8::new(0)),
            heartbeat: None,
            last_commit: Instant::now(),
            last_poll_ms: Arc::new(AtomicU64::new(0)),
            created: Instant::now(),
            partition_counts: BTreeMap::new(),
            last_metadata_check: Instant::now(),
        }
    }
}

/// The coordinator of `group_id`.
pub(crate) async fn find_coordinator(client: &Client, group_id: &str) -> Result<i32> {
    find_coordinator_of(client, group_id, 0).await
}

/// The coordinator of `key`: a group (`key_type` 0) or a transactional id (1). Retriable
/// errors (the coordinator's topic being created or loaded) are retried a while.
pub(crate) async fn find_coordinator_of(client: &Client, key: &str, key_type: i8) -> Result<i32> {
    let mut last = None;
    for attempt in 0..20 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(client.config().retry_backoff_ms * 2)).await;
        }
        let conn = client.conn_any().await?;
        let mut req = FindCoordinatorRequest::default().with_key(sb(key));
        if conn.version::<FindCoordinatorRequest>()? >= 1 {
            req.key_type = key_type;
        } else if key_type != 0 {
            return Err(Error::UnsupportedVersion(
                "FindCoordinator for transactions".into(),
            ));
        }
        match conn.send(&req).await {
            Ok(resp) => match Error::check_msg(resp.error_code, resp.error_message.as_deref()) {
                Ok(()) => return Ok(resp.node_id.0),
                Err(e) if e.is_retriable() => last = Some(e),
                Err(e) => return Err(e),
            },
            Err(e) if e.is_retriable() => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or(Error::Closed))
}

async fn coordinator(c: &mut Consumer) -> Result<i32> {
    let Some(g) = c.group.as_mut() else {
        let gid = c
            .config
            .group_id
            .clone()
            .ok_or_else(|| Error::Config("no group_id".into()))?;
        return find_coordinator(&c.client, &gid).await;
    };
    if g.flags.fetch_and(!FLAG_COORDINATOR, Ordering::AcqRel) & FLAG_COORDINATOR != 0 {
        g.coordinator = None;
    }
    if let Some(n) = g.coordinator {
        return Ok(n);
    }
    let n = find_coordinator(&c.client, &g.group_id).await?;
    if let Some(g) = c.group.as_mut() {
        g.coordinator = Some(n);
    }
    Ok(n)
}

/// Runs whatever the group needs before records may be returned: (re)join and sync when
/// required, and auto-commit when due.
pub(crate) async fn drive(c: &mut Consumer) -> Result<()> {
    if c.config.group_protocol == crate::group_consumer::GroupProtocol::Consumer {
        if c.group.is_some() {
            crate::group_consumer::drive(c).await?;
        }
        return auto_commit(c).await;
    }
    let needs_join = {
        let Some(g) = c.group.as_mut() else {
            return Ok(());
        };
        g.last_poll_ms
            .store(g.created.elapsed().as_millis() as u64, Ordering::Release);
        let flags = g.flags.load(Ordering::Acquire);
        !g.joined || flags & (FLAG_REJOIN | FLAG_RESET_MEMBER) != 0
    };
    if needs_join {
        let mut attempts = 0;
        loop {
            match join(c).await {
                Ok(()) => break,
                Err(e) if e.is_retriable() || is_rebalance_error(&e) => {
                    attempts += 1;
                    if attempts > 50 {
                        return Err(e);
                    }
                    tracing::debug!(error = %e, "rejoining group");
                    if matches!(
                        e.code(),
                        Some(ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable)
                    ) || !matches!(e, Error::Broker { .. })
                    {
                        if let Some(g) = c.group.as_mut() {
                            g.coordinator = None;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(c.client.config().retry_backoff_ms))
                        .await;
                }
                Err(e) => return Err(e),
            }
        }
    }
    check_partition_counts(c).await;
    auto_commit(c).await
}

async fn auto_commit(c: &mut Consumer) -> Result<()> {
    let due = c.config.enable_auto_commit
        && c.group.as_ref().is_some_and(|g| {
            g.last_commit.elapsed() >= Duration::from_millis(c.config.auto_commit_interval_ms)
        });
    if due {
        if let Some(g) = c.group.as_mut() {
            g.last_commit = Instant::now();
        }
        if let Err(e) = commit_positions(c, None).await {
            tracing::warn!(error = %e, "auto-commit failed");
        }
    }
    Ok(())
}

/// Once a second, compares the subscribed topics' partition counts (from cached metadata,
/// refreshed every `metadata_max_age_ms`) with those at the last assignment; a topic that
/// grew needs a rebalance so its new partitions get consumed.
async fn check_partition_counts(c: &mut Consumer) {
    let topics = match c.group.as_mut() {
        Some(g) if g.joined && g.last_metadata_check.elapsed() >= Duration::from_secs(1) => {
            g.last_metadata_check = Instant::now();
            g.topics.clone()
        }
        _ => return,
    };
    let counts = current_counts(&c.client, &topics).await;
    if let Some(g) = c.group.as_mut() {
        if !counts.is_empty() && counts != g.partition_counts {
            tracing::debug!(?counts, before = ?g.partition_counts, "subscribed partitions changed");
            g.flags.fetch_or(FLAG_REJOIN, Ordering::AcqRel);
        }
    }
}

async fn current_counts(client: &Client, topics: &[String]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for t in topics {
        if let Ok(info) = client.topic(t, false).await {
            out.insert(t.clone(), info.partitions.len());
        }
    }
    out
}

fn is_rebalance_error(e: &Error) -> bool {
    matches!(
        e.code(),
        Some(
            ErrorCode::RebalanceInProgress
                | ErrorCode::UnknownMemberId
                | ErrorCode::IllegalGeneration
                | ErrorCode::MemberIdRequired
        )
    )
}

async fn join(c: &mut Consumer) -> Result<()> {
    let node = coordinator(c).await?;
    let conn = c.client.conn_coordinator(node).await?;
    let cooperative = {
        let Some(g) = c.group.as_mut() else {
            return Ok(());
        };
        if let Some(h) = g.heartbeat.take() {
            h.abort();
        }
        let flags = g.flags.swap(0, Ordering::AcqRel);
        if flags & FLAG_RESET_MEMBER != 0 {
            g.member_id.clear();
            g.generation = -1;
        }
        g.protocol == Some(Assignor::CooperativeSticky)
    };
    let owned = c.assignment();
    // Eager protocol (or the first join): give everything up before joining.
    if !cooperative && !owned.is_empty() {
        if c.config.enable_auto_commit {
            let _ = commit_positions(c, None).await;
        }
        if let Some(l) = c.group.as_mut().and_then(|g| g.listener.as_mut()) {
            l.on_partitions_revoked(&owned);
        }
        c.assign(Vec::new());
    }
    let owned = c.assignment();
    let Some(g) = c.group.as_mut() else {
        return Ok(());
    };
    let protocols: Vec<JoinGroupRequestProtocol> = c
        .config
        .assignors
        .iter()
        .map(|a| {
            JoinGroupRequestProtocol::default()
                .with_name(sb(a.name()))
                .with_metadata(encode_subscription(&g.topics, &owned, g.generation))
        })
        .collect();
    let version = conn.version::<JoinGroupRequest>()?;
    let mut req = JoinGroupRequest::default()
        .with_group_id(GroupId(sb(&g.group_id)))
        .with_session_timeout_ms(c.config.session_timeout_ms)
        .with_member_id(sb(&g.member_id))
        .with_protocol_type(sb("consumer"))
        .with_protocols(protocols);
    if version >= 1 {
        req.rebalance_timeout_ms = c.config.max_poll_interval_ms;
    }
    if version >= 5 {
        req.group_instance_id = c.config.group_instance_id.as_deref().map(sb);
    }
    let wait_ms = c
        .config
        .max_poll_interval_ms
        .max(c.config.session_timeout_ms) as u64
        + 5_000;
    let resp = conn.start(&req).await?.wait_for(wait_ms).await?;
    if resp.error_code == ErrorCode::MemberIdRequired.code() {
        g.member_id = resp.member_id.as_str().to_owned();
        g.flags.fetch_or(FLAG_REJOIN, Ordering::AcqRel);
        return Err(Error::broker(ErrorCode::MemberIdRequired, None));
    }
    if resp.error_code == ErrorCode::UnknownMemberId.code() {
        g.member_id.clear();
    }
    if let Err(e) = Error::check(resp.error_code) {
        g.flags.fetch_or(FLAG_REJOIN, Ordering::AcqRel);
        return Err(e);
    }
    g.member_id = resp.member_id.as_str().to_owned();
    g.generation = resp.generation_id;
    let protocol_name = resp
        .protocol_name
        .as_ref()
        .map(|s| s.as_str().to_owned())
        .unwrap_or_default();
    let protocol = Assignor::from_name(&protocol_name).ok_or_else(|| {
        Error::Protocol(format!("group chose unknown assignor {protocol_name:?}"))
    })?;
    g.protocol = Some(protocol);
    let group_id = g.group_id.clone();
    let member_id = g.member_id.clone();
    let generation = g.generation;
    let assignments = if resp.leader == resp.member_id {
        let mut members = Vec::new();
        for m in &resp.members {
            let sub = decode_subscription(&m.metadata)?;
            members.push((m.member_id.as_str().to_owned(), sub));
        }
        let mut counts = HashMap::new();
        let all_topics: BTreeSet<String> = members
            .iter()
            .flat_map(|(_, s)| s.topics.iter().cloned())
            .collect();
        for t in all_topics {
            match c.client.topic_fresh(&t, false).await {
                Ok(info) => {
                    counts.insert(t, info.partitions.len() as i32);
                }
                Err(e) => {
                    tracing::warn!(topic = %t, error = %e, "assignor: topic metadata unavailable")
                }
            }
        }
        let plan = match protocol {
            Assignor::Range => assign_range(&members, &counts),
            Assignor::CooperativeSticky => assign_cooperative_sticky(&members, &counts),
        };
        plan.into_iter()
            .map(|(m, parts)| {
                SyncGroupRequestAssignment::default()
                    .with_member_id(sb(&m))
                    .with_assignment(encode_assignment(&parts))
            })
            .collect()
    } else {
        Vec::new()
    };
    let sversion = conn.version::<SyncGroupRequest>()?;
    let mut sreq = SyncGroupRequest::default()
        .with_group_id(GroupId(sb(&group_id)))
        .with_generation_id(generation)
        .with_member_id(sb(&member_id))
        .with_assignments(assignments);
    if sversion >= 3 {
        sreq.group_instance_id = c.config.group_instance_id.as_deref().map(sb);
    }
    if sversion >= 5 {
        sreq.protocol_type = Some(sb("consumer"));
        sreq.protocol_name = Some(sb(&protocol_name));
    }
    let sresp = conn.start(&sreq).await?.wait_for(wait_ms).await?;
    let Some(g) = c.group.as_mut() else {
        return Ok(());
    };
    if let Err(e) = Error::check(sresp.error_code) {
        g.flags.fetch_or(FLAG_REJOIN, Ordering::AcqRel);
        if matches!(
            e.code(),
            Some(ErrorCode::UnknownMemberId | ErrorCode::IllegalGeneration)
        ) {
            g.flags.fetch_or(FLAG_RESET_MEMBER, Ordering::AcqRel);
        }
        return Err(e);
    }
    let assigned = decode_assignment(&sresp.assignment)?;
    let new: BTreeSet<TopicPartition> = assigned.into_iter().collect();
    let old: BTreeSet<TopicPartition> = owned.into_iter().collect();
    let revoked: Vec<TopicPartition> = old.difference(&new).cloned().collect();
    let added: Vec<TopicPartition> = new.difference(&old).cloned().collect();
    if !revoked.is_empty() {
        if c.config.enable_auto_commit {
            let _ = commit_positions(c, Some(&revoked)).await;
        }
        if let Some(l) = c.group.as_mut().and_then(|g| g.listener.as_mut()) {
            l.on_partitions_revoked(&revoked);
        }
    }
    c.assign(new.iter().cloned().collect());
    let Some(g) = c.group.as_mut() else {
        return Ok(());
    };
    if let Some(l) = g.listener.as_mut() {
        l.on_partitions_assigned(&added);
    }
    g.joined = true;
    if protocol == Assignor::CooperativeSticky && !revoked.is_empty() {
        // Give the revoked partitions to their new owners in a follow-up rebalance.
        g.flags.fetch_or(FLAG_REJOIN, Ordering::AcqRel);
    }
    let task = Heartbeat {
        client: c.client.clone(),
        node,
        group_id,
        member_id,
        generation,
        instance_id: c.config.group_instance_id.clone(),
        interval: Duration::from_millis(c.config.heartbeat_interval_ms.max(10)),
        flags: g.flags.clone(),
        last_poll_ms: g.last_poll_ms.clone(),
        created: g.created,
        max_poll_interval: Duration::from_millis(c.config.max_poll_interval_ms.max(1) as u64),
    };
    g.last_poll_ms
        .store(g.created.elapsed().as_millis() as u64, Ordering::Release);
    g.heartbeat = Some(tokio::spawn(heartbeat_loop(task)));
    let topics = g.topics.clone();
    let counts = current_counts(&c.client, &topics).await;
    if let Some(g) = c.group.as_mut() {
        g.partition_counts = counts;
    }
    tracing::debug!(generation, assigned = new.len(), "joined group");
    Ok(())
}

/// What the heartbeat task of one generation needs.
struct Heartbeat {
    client: Client,
    node: i32,
    group_id: String,
    member_id: String,
    generation: i32,
    instance_id: Option<String>,
    interval: Duration,
    flags: Arc<AtomicU8>,
    last_poll_ms: Arc<AtomicU64>,
    created: Instant,
    max_poll_interval: Duration,
}

async fn heartbeat_loop(h: Heartbeat) {
    let Heartbeat {
        client,
        node,
        group_id,
        member_id,
        generation,
        instance_id,
        interval,
        flags,
        last_poll_ms,
        created,
        max_poll_interval,
    } = h;
    let mut tick = tokio::time::interval(interval);
    tick.tick().await;
    loop {
        tick.tick().await;
        let since_poll = created
            .elapsed()
            .saturating_sub(Duration::from_millis(last_poll_ms.load(Ordering::Acquire)));
        // Static members rely on the session timeout instead, as in Kafka.
        if since_poll > max_poll_interval && instance_id.is_none() {
            // The application stopped polling: leave so the group can move on without us
            // (Java's max.poll.interval.ms); the next poll rejoins as a new member.
            tracing::warn!(?since_poll, "poll interval exceeded: leaving the group");
            if let Ok(conn) = client.conn_coordinator(node).await {
                let mut req = LeaveGroupRequest::default().with_group_id(GroupId(sb(&group_id)));
                if conn.version::<LeaveGroupRequest>().unwrap_or(0) >= 3 {
                    req.members = vec![MemberIdentity::default().with_member_id(sb(&member_id))];
                } else {
                    req.member_id = sb(&member_id);
                }
                let _ = conn.send(&req).await;
            }
            flags.fetch_or(FLAG_REJOIN | FLAG_RESET_MEMBER, Ordering::AcqRel);
            return;
        }
        let conn = match client.conn_coordinator(node).await {
            Ok(c) => c,
            Err(_) => {
                flags.fetch_or(FLAG_COORDINATOR | FLAG_REJOIN, Ordering::AcqRel);
                return;
            }
        };
        let mut req = HeartbeatRequest::default()
            .with_group_id(GroupId(sb(&group_id)))
            .with_generation_id(generation)
            .with_member_id(sb(&member_id));
        if conn.version::<HeartbeatRequest>().unwrap_or(0) >= 3 {
            req.group_instance_id = instance_id.as_deref().map(sb);
        }
        let code = match conn.send(&req).await {
            Ok(r) => ErrorCode::from_code(r.error_code),
            Err(_) => ErrorCode::CoordinatorNotAvailable,
        };
        match code {
            ErrorCode::None => {}
            // Keep heartbeating (and watching the poll interval) until the next poll rejoins.
            ErrorCode::RebalanceInProgress => {
                flags.fetch_or(FLAG_REJOIN, Ordering::AcqRel);
            }
            ErrorCode::UnknownMemberId
            | ErrorCode::IllegalGeneration
            | ErrorCode::FencedInstanceId => {
                flags.fetch_or(FLAG_REJOIN | FLAG_RESET_MEMBER, Ordering::AcqRel);
                return;
            }
            _ => {
                flags.fetch_or(FLAG_COORDINATOR | FLAG_REJOIN, Ordering::AcqRel);
                return;
            }
        }
    }
}

/// Committed offsets of `tps` for the consumer's group (-1: none).
pub(crate) async fn fetch_committed(
    c: &mut Consumer,
    tps: &[TopicPartition],
) -> Result<BTreeMap<TopicPartition, i64>> {
    let gid = group_id_of(c)?;
    let node = coordinator(c).await?;
    fetch_offsets(&c.client, node, &gid, Some(tps)).await
}

fn group_id_of(c: &Consumer) -> Result<String> {
    c.group
        .as_ref()
        .map(|g| g.group_id.clone())
        .or_else(|| c.config.group_id.clone())
        .ok_or_else(|| Error::Config("no group_id".into()))
}

/// OffsetFetch against coordinator `node`; `None` fetches every partition the group has.
pub(crate) async fn fetch_offsets(
    client: &Client,
    node: i32,
    group_id: &str,
    tps: Option<&[TopicPartition]>,
) -> Result<BTreeMap<TopicPartition, i64>> {
    let topics = tps.map(|tps| {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in tps {
            by_topic.entry(&tp.topic).or_default().push(tp.partition);
        }
        by_topic
            .into_iter()
            .map(|(t, ps)| {
                OffsetFetchRequestTopic::default()
                    .with_name(topic_name(t))
                    .with_partition_indexes(ps)
            })
            .collect()
    });
    let mut last = None;
    for _ in 0..20 {
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(sb(group_id)))
            .with_topics(topics.clone());
        let resp = client.send_coordinator(node, &req).await?;
        match Error::check(resp.error_code) {
            Err(e) if e.is_retriable() => {
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(client.config().retry_backoff_ms)).await;
                continue;
            }
            Err(e) => return Err(e),
            Ok(()) => {}
        }
        let mut out = BTreeMap::new();
        for t in &resp.topics {
            for p in &t.partitions {
                Error::check(p.error_code)?;
                out.insert(
                    TopicPartition::new(t.name.0.as_str(), p.partition_index),
                    p.committed_offset,
                );
            }
        }
        return Ok(out);
    }
    Err(last.unwrap_or(Error::Closed))
}

/// Commits `offsets` for `group_id` at coordinator `node`; generation -1 and an empty member
/// id commit outside any generation (manual assignment, or admin).
pub(crate) async fn commit_offsets(
    client: &Client,
    node: i32,
    group_id: &str,
    generation: i32,
    member_id: &str,
    offsets: &BTreeMap<TopicPartition, i64>,
) -> Result<()> {
    let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for (tp, o) in offsets {
        by_topic.entry(&tp.topic).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(tp.partition)
                .with_committed_offset(*o),
        );
    }
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(sb(group_id)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(sb(member_id))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(topic_name(t))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let resp = client.send_coordinator(node, &req).await?;
    for t in &resp.topics {
        for p in &t.partitions {
            Error::check(p.error_code)?;
        }
    }
    Ok(())
}

/// Commits the consumer's positions (all assigned partitions, or `only` these).
pub(crate) async fn commit_positions(
    c: &mut Consumer,
    only: Option<&[TopicPartition]>,
) -> Result<()> {
    let mut offsets = c.positions();
    if let Some(only) = only {
        offsets.retain(|tp, _| only.contains(tp));
    }
    if offsets.is_empty() {
        return Ok(());
    }
    commit_map(c, &offsets).await
}

pub(crate) async fn commit_map(
    c: &mut Consumer,
    offsets: &BTreeMap<TopicPartition, i64>,
) -> Result<()> {
    let gid = group_id_of(c)?;
    let node = coordinator(c).await?;
    let (generation, member) = c
        .group
        .as_ref()
        .filter(|g| g.joined)
        .map(|g| (g.generation, g.member_id.clone()))
        .unwrap_or((-1, String::new()));
    let r = commit_offsets(&c.client, node, &gid, generation, &member, offsets).await;
    if let Err(e) = &r {
        if let Some(g) = c.group.as_mut() {
            if matches!(
                e.code(),
                Some(ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable)
            ) {
                g.coordinator = None;
            }
            if is_rebalance_error(e) {
                g.flags.fetch_or(FLAG_REJOIN, Ordering::AcqRel);
            }
        }
    }
    r
}

impl Consumer {
    /// Commits the current positions of all assigned partitions and waits for the result.
    pub async fn commit_sync(&mut self) -> Result<()> {
        commit_positions(self, None).await
    }

    /// Commits explicit offsets (the next offset to read, as Kafka stores them).
    pub async fn commit_offsets(&mut self, offsets: &BTreeMap<TopicPartition, i64>) -> Result<()> {
        commit_map(self, offsets).await
    }

    /// Starts a commit of the current positions without waiting; the returned handle yields
    /// its result. Commits issued in order reach the coordinator in order.
    pub async fn commit_async(&mut self) -> Result<JoinHandle<Result<()>>> {
        let offsets = self.positions();
        let gid = group_id_of(self)?;
        let node = coordinator(self).await?;
        let (generation, member) = self
            .group
            .as_ref()
            .filter(|g| g.joined)
            .map(|g| (g.generation, g.member_id.clone()))
            .unwrap_or((-1, String::new()));
        let client = self.client.clone();
        Ok(tokio::spawn(async move {
            commit_offsets(&client, node, &gid, generation, &member, &offsets).await
        }))
    }

    /// The group's committed offsets for `tps`.
    pub async fn committed(
        &mut self,
        tps: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        fetch_committed(self, tps).await
    }

    /// Leaves the group (committing first when auto-commit is on) and stops heartbeats.
    pub async fn close(mut self) -> Result<()> {
        let Some(g) = self.group.as_ref() else {
            return Ok(());
        };
        if !g.joined {
            return Ok(());
        }
        if self.config.enable_auto_commit {
            if let Err(e) = commit_positions(&mut self, None).await {
                tracing::warn!(error = %e, "final commit failed");
            }
        }
        if self.config.group_protocol == crate::group_consumer::GroupProtocol::Consumer {
            return crate::group_consumer::leave(&mut self).await;
        }
        let owned = self.assignment();
        let Some(mut g) = self.group.take() else {
            return Ok(());
        };
        if let Some(h) = g.heartbeat.take() {
            h.abort();
        }
        if let Some(l) = g.listener.as_mut() {
            l.on_partitions_revoked(&owned);
        }
        if self.config.group_instance_id.is_some() {
            // Static members keep their assignment across restarts: don't leave.
            return Ok(());
        }
        let Some(node) = g.coordinator else {
            return Ok(());
        };
        let conn = self.client.conn_coordinator(node).await?;
        let mut req = LeaveGroupRequest::default().with_group_id(GroupId(sb(&g.group_id)));
        if conn.version::<LeaveGroupRequest>()? >= 3 {
            req.members = vec![MemberIdentity::default().with_member_id(sb(&g.member_id))];
        } else {
            req.member_id = sb(&g.member_id);
        }
        let resp = conn.send(&req).await?;
        Error::check(resp.error_code)
    }

    /// The group generation and member id, once joined.
    pub fn group_metadata(&self) -> Option<(i32, String)> {
        self.group
            .as_ref()
            .filter(|g| g.joined)
            .map(|g| (g.generation, g.member_id.clone()))
    }
}

/// A member's subscription as carried in JoinGroup metadata (ConsumerProtocolSubscription).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subscription {
    pub version: i16,
    pub topics: Vec<String>,
    pub user_data: Option<Bytes>,
    pub owned: Vec<TopicPartition>,
    pub generation: i32,
}

fn put_str(out: &mut BytesMut, s: &str) {
    out.put_i16(s.len() as i16);
    out.put_slice(s.as_bytes());
}

fn put_partitions(out: &mut BytesMut, tps: &[TopicPartition]) {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in tps {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    out.put_i32(by_topic.len() as i32);
    for (t, ps) in by_topic {
        put_str(out, t);
        out.put_i32(ps.len() as i32);
        for p in ps {
            out.put_i32(p);
        }
    }
}

/// Encodes a v2 subscription (topics, owned partitions, generation).
pub fn encode_subscription(topics: &[String], owned: &[TopicPartition], generation: i32) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(2);
    out.put_i32(topics.len() as i32);
    for t in topics {
        put_str(&mut out, t);
    }
    out.put_i32(-1);
    put_partitions(&mut out, owned);
    out.put_i32(generation);
    out.freeze()
}

/// Encodes a v0 assignment (what every client version reads).
pub fn encode_assignment(tps: &[TopicPartition]) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(0);
    put_partitions(&mut out, tps);
    out.put_i32(-1);
    out.freeze()
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn need(&self, n: usize) -> Result<()> {
        if self.0.remaining() < n {
            return Err(Error::Protocol("consumer protocol data truncated".into()));
        }
        Ok(())
    }
    fn i16(&mut self) -> Result<i16> {
        self.need(2)?;
        Ok(self.0.get_i16())
    }
    fn i32(&mut self) -> Result<i32> {
        self.need(4)?;
        Ok(self.0.get_i32())
    }
    fn string(&mut self) -> Result<String> {
        let n = self.i16()?;
        if n < 0 {
            return Err(Error::Protocol(
                "null string in consumer protocol data".into(),
            ));
        }
        self.need(n as usize)?;
        let s = String::from_utf8_lossy(&self.0[..n as usize]).into_owned();
        self.0.advance(n as usize);
        Ok(s)
    }
    fn bytes(&mut self) -> Result<Option<Bytes>> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(None);
        }
        self.need(n as usize)?;
        let b = Bytes::copy_from_slice(&self.0[..n as usize]);
        self.0.advance(n as usize);
        Ok(Some(b))
    }
    /// An array count, checked against the bytes left (each element takes >= `min` bytes).
    fn count(&mut self, min: usize) -> Result<usize> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(0);
        }
        if (n as usize).saturating_mul(min) > self.0.remaining() {
            return Err(Error::Protocol(
                "consumer protocol array longer than its data".into(),
            ));
        }
        Ok(n as usize)
    }
    fn partitions(&mut self) -> Result<Vec<TopicPartition>> {
        let mut out = Vec::new();
        for _ in 0..self.count(6)? {
            let t = self.string()?;
            for _ in 0..self.count(4)? {
                let p = self.i32()?;
                out.push(TopicPartition::new(&t, p));
            }
        }
        Ok(out)
    }
}

/// Decodes any version of ConsumerProtocolSubscription (fields of later versions ignored).
pub fn decode_subscription(data: &[u8]) -> Result<Subscription> {
    let mut r = Reader(data);
    let version = r.i16()?;
    let mut topics = Vec::new();
    for _ in 0..r.count(2)? {
        topics.push(r.string()?);
    }
    let user_data = if r.0.is_empty() { None } else { r.bytes()? };
    let owned = if version >= 1 && !r.0.is_empty() {
        r.partitions()?
    } else {
        Vec::new()
    };
    let generation = if version >= 2 && r.0.len() >= 4 {
        r.i32()?
    } else {
        -1
    };
    Ok(Subscription {
        version,
        topics,
        user_data,
        owned,
        generation,
    })
}

/// Decodes any version of ConsumerProtocolAssignment; empty data is an empty assignment.
pub fn decode_assignment(data: &[u8]) -> Result<Vec<TopicPartition>> {
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let mut r = Reader(data);
    let _version = r.i16()?;
    r.partitions()
}

type Plan = BTreeMap<String, Vec<TopicPartition>>;

/// Java's RangeAssignor: for each topic, members subscribed to it (sorted by member id) get
/// contiguous ranges; the first `partitions % members` get one extra.
pub fn assign_range(members: &[(String, Subscription)], partitions: &HashMap<String, i32>) -> Plan {
    let mut plan: Plan = members
        .iter()
        .map(|(m, _)| (m.clone(), Vec::new()))
        .collect();
    let topics: BTreeSet<&String> = members.iter().flat_map(|(_, s)| s.topics.iter()).collect();
    for t in topics {
        let Some(&n) = partitions.get(t) else {
            continue;
        };
        let mut subs: Vec<&String> = members
            .iter()
            .filter(|(_, s)| s.topics.contains(t))
            .map(|(m, _)| m)
            .collect();
        subs.sort();
        let m = subs.len() as i32;
        if m == 0 {
            continue;
        }
        let per = n / m;
        let extra = n % m;
        for (i, member) in subs.into_iter().enumerate() {
            let i = i as i32;
            let start = per * i + i.min(extra);
            let len = per + i32::from(i < extra);
            if let Some(v) = plan.get_mut(member) {
                v.extend((start..start + len).map(|p| TopicPartition::new(t, p)));
            }
        }
    }
    plan
}

/// Cooperative sticky assignment: balanced (counts differ by at most one where subscriptions
/// allow), keeping each member's owned partitions where possible. A partition that must move
/// is left out this round; its owner revokes it and the follow-up rebalance places it.
pub fn assign_cooperative_sticky(
    members: &[(String, Subscription)],
    partitions: &HashMap<String, i32>,
) -> Plan {
    let mut plan: Plan = members
        .iter()
        .map(|(m, _)| (m.clone(), Vec::new()))
        .collect();
    if members.is_empty() {
        return plan;
    }
    // Each member's topics, for O(1) subscription checks (the plan is computed by the group
    // leader for the whole group: 1,000 members over 10,000 partitions must stay cheap).
    let topics_of: HashMap<&str, HashSet<&str>> = members
        .iter()
        .map(|(m, s)| (m.as_str(), s.topics.iter().map(String::as_str).collect()))
        .collect();
    let subscribed = |m: &str, t: &str| topics_of.get(m).is_some_and(|ts| ts.contains(t));
    let mut all: Vec<TopicPartition> = Vec::new();
    let topics: BTreeSet<&String> = members.iter().flat_map(|(_, s)| s.topics.iter()).collect();
    for t in topics {
        if let Some(&n) = partitions.get(t) {
            all.extend((0..n).map(|p| TopicPartition::new(t, p)));
        }
    }
    let exists = |tp: &TopicPartition| {
        tp.partition >= 0
            && partitions
                .get(&*tp.topic)
                .is_some_and(|&n| tp.partition < n)
    };
    // Claims: a partition claimed by exactly one member that still subscribes to its topic.
    let mut claims: HashMap<&TopicPartition, usize> = HashMap::new();
    for (_, s) in members {
        for tp in &s.owned {
            *claims.entry(tp).or_default() += 1;
        }
    }
    let total = all.len();
    let floor = total / members.len();
    let mut extras = total % members.len();
    let mut owner: HashSet<TopicPartition> = HashSet::new();
    let mut previous_owner: HashMap<TopicPartition, String> = HashMap::new();
    for (m, s) in members {
        let mut keep: Vec<TopicPartition> = s
            .owned
            .iter()
            .filter(|tp| {
                exists(tp) && subscribed(m, &tp.topic) && claims.get(*tp).is_some_and(|&c| c == 1)
            })
            .cloned()
            .collect();
        keep.sort();
        for tp in &keep {
            previous_owner.insert(tp.clone(), m.clone());
        }
        let mut limit = floor;
        if keep.len() > floor && extras > 0 {
            limit += 1;
            extras -= 1;
        }
        keep.truncate(limit);
        for tp in keep {
            owner.insert(tp.clone());
            if let Some(v) = plan.get_mut(m) {
                v.push(tp);
            }
        }
    }
    // Hand out the rest to the least-loaded subscribed member (ties: the smallest member id),
    // walking members in (load, id) order until one subscribes to the partition's topic.
    let mut by_load: BTreeSet<(usize, String)> =
        plan.iter().map(|(m, v)| (v.len(), m.clone())).collect();
    for tp in &all {
        if owner.contains(tp) {
            continue;
        }
        let target = by_load
            .iter()
            .find(|(_, m)| subscribed(m, &tp.topic))
            .cloned();
        if let Some((load, m)) = target {
            by_load.remove(&(load, m.clone()));
            by_load.insert((load + 1, m.clone()));
            owner.insert(tp.clone());
            if let Some(v) = plan.get_mut(&m) {
                v.push(tp.clone());
            }
        }
    }
    // Withhold partitions moving away from a member that still owns them.
    for (m, v) in plan.iter_mut() {
        v.retain(|tp| previous_owner.get(tp).is_none_or(|prev| prev == m));
        v.sort();
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(topics: &[&str], owned: &[(&str, i32)]) -> Subscription {
        Subscription {
            version: 2,
            topics: topics.iter().map(|s| s.to_string()).collect(),
            user_data: None,
            owned: owned
                .iter()
                .map(|(t, p)| TopicPartition::new(t, *p))
                .collect(),
            generation: 1,
        }
    }

    #[test]
    fn subscription_and_assignment_round_trip() {
        let owned = vec![TopicPartition::new("a", 1), TopicPartition::new("b", 0)];
        let enc = encode_subscription(&["a".into(), "b".into()], &owned, 7);
        let s = decode_subscription(&enc).unwrap();
        assert_eq!(s.topics, vec!["a", "b"]);
        assert_eq!(s.owned, owned);
        assert_eq!(s.generation, 7);
        assert_eq!(
            decode_assignment(&encode_assignment(&owned)).unwrap(),
            owned
        );
        // Hostile counts fail instead of allocating.
        assert!(decode_subscription(&[0, 0, 0x7f, 0xff, 0xff, 0xff]).is_err());
        assert!(decode_assignment(&[0, 0, 0x7f, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn range_matches_java_layout() {
        let members = vec![
            ("m1".to_string(), sub(&["t"], &[])),
            ("m2".to_string(), sub(&["t"], &[])),
            ("m3".to_string(), sub(&["t"], &[])),
        ];
        let counts = HashMap::from([("t".to_string(), 7)]);
        let plan = assign_range(&members, &counts);
        let ps = |m: &str| plan[m].iter().map(|tp| tp.partition).collect::<Vec<_>>();
        assert_eq!(ps("m1"), vec![0, 1, 2]);
        assert_eq!(ps("m2"), vec![3, 4]);
        assert_eq!(ps("m3"), vec![5, 6]);
    }

    #[test]
    fn cooperative_sticky_keeps_owned_and_withholds_moves() {
        let counts = HashMap::from([("t".to_string(), 4)]);
        // m1 owns everything; m2 joins.
        let members = vec![
            (
                "m1".to_string(),
                sub(&["t"], &[("t", 0), ("t", 1), ("t", 2), ("t", 3)]),
            ),
            ("m2".to_string(), sub(&["t"], &[])),
        ];
        let plan = assign_cooperative_sticky(&members, &counts);
        assert_eq!(plan["m1"].len(), 2);
        // The two partitions moving to m2 are withheld until m1 revoked them.
        assert!(plan["m2"].is_empty());
        // Next round: m1 owns 2, m2 none.
        let members = vec![
            ("m1".to_string(), sub(&["t"], &[("t", 0), ("t", 1)])),
            ("m2".to_string(), sub(&["t"], &[])),
        ];
        let plan = assign_cooperative_sticky(&members, &counts);
        assert_eq!(
            plan["m1"].iter().map(|t| t.partition).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(
            plan["m2"].iter().map(|t| t.partition).collect::<Vec<_>>(),
            vec![2, 3]
        );
    }

    #[test]
    fn cooperative_sticky_balances_three_members() {
        let counts = HashMap::from([("t".to_string(), 4)]);
        let members = vec![
            ("a".to_string(), sub(&["t"], &[("t", 0), ("t", 1)])),
            ("b".to_string(), sub(&["t"], &[("t", 2), ("t", 3)])),
            ("c".to_string(), sub(&["t"], &[])),
        ];
        let plan = assign_cooperative_sticky(&members, &counts);
        let sizes: Vec<usize> = plan.values().map(Vec::len).collect();
        assert_eq!(
            sizes.iter().sum::<usize>(),
            3,
            "one partition withheld while it moves"
        );
        assert!(plan["c"].is_empty());
    }

    /// Drives a group through rounds of cooperative rebalancing (each member reports what the
    /// previous round gave it) until nothing is withheld, checking after every round that no
    /// partition has two owners and that members keep what they owned unless it moved away.
    fn converge(
        ids: &[String],
        topics: &[&str],
        counts: &HashMap<String, i32>,
        mut owned: BTreeMap<String, Vec<TopicPartition>>,
    ) -> Plan {
        for _round in 0..3 {
            let members: Vec<(String, Subscription)> = ids
                .iter()
                .map(|m| {
                    let mut s = sub(topics, &[]);
                    s.owned = owned.get(m).cloned().unwrap_or_default();
                    (m.clone(), s)
                })
                .collect();
            let plan = assign_cooperative_sticky(&members, counts);
            let mut seen = HashSet::new();
            for (m, v) in &plan {
                for tp in v {
                    assert!(seen.insert(tp.clone()), "{tp:?} given twice (to {m} too)");
                    // Owned by another member last round: it must have been revoked first.
                    for (other, was) in &owned {
                        assert!(
                            other == m || !was.contains(tp),
                            "{tp:?} moved without revoke"
                        );
                    }
                }
            }
            let total: i32 = counts.values().sum();
            if seen.len() == total as usize {
                return plan;
            }
            owned = plan;
        }
        panic!("cooperative rebalance did not converge in 3 rounds");
    }

    #[test]
    fn cooperative_sticky_at_scale_is_balanced_and_complete() {
        // 1,000 members over 10 topics x 1,000 partitions, as in the assignors benchmark.
        let topics: Vec<String> = (0..10).map(|t| format!("t{t}")).collect();
        let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
        let counts: HashMap<String, i32> = topics.iter().map(|t| (t.clone(), 1000)).collect();
        let ids: Vec<String> = (0..1000).map(|m| format!("member-{m:04}")).collect();
        let plan = converge(&ids, &topic_refs, &counts, BTreeMap::new());
        assert!(plan.values().all(|v| v.len() == 10), "10 partitions each");

        // One member leaves and one joins: everyone else keeps every partition it had.
        let mut ids2: Vec<String> = ids[1..].to_vec();
        ids2.push("member-new".to_string());
        let mut owned = plan.clone();
        owned.remove("member-0000");
        let plan2 = converge(&ids2, &topic_refs, &counts, owned);
        for m in &ids[1..] {
            assert_eq!(plan2[m], plan[m], "{m} kept its partitions");
        }
        assert_eq!(plan2["member-new"], plan["member-0000"]);
    }

    #[test]
    fn cooperative_sticky_with_different_subscriptions_gives_each_topic_to_its_subscribers() {
        let counts = HashMap::from([("a".to_string(), 6), ("b".to_string(), 3)]);
        let members = vec![
            ("m1".to_string(), sub(&["a"], &[])),
            ("m2".to_string(), sub(&["a", "b"], &[])),
            ("m3".to_string(), sub(&["b"], &[])),
        ];
        let plan = assign_cooperative_sticky(&members, &counts);
        assert!(plan["m1"].iter().all(|tp| &*tp.topic == "a"));
        assert!(plan["m3"].iter().all(|tp| &*tp.topic == "b"));
        assert_eq!(plan.values().map(Vec::len).sum::<usize>(), 9);
        // A claimed partition of a topic the member no longer subscribes to is not kept, and
        // a partition claimed by two members (a zombie's stale claim) is kept by neither.
        let members = vec![
            ("m1".to_string(), sub(&["a"], &[("b", 0), ("a", 0)])),
            ("m2".to_string(), sub(&["a", "b"], &[("a", 0)])),
        ];
        let plan = assign_cooperative_sticky(&members, &counts);
        assert!(plan["m1"].iter().all(|tp| &*tp.topic == "a"));
        assert!(
            plan.values()
                .flatten()
                .filter(|tp| **tp == TopicPartition::new("a", 0))
                .count()
                <= 1
        );
    }
}
