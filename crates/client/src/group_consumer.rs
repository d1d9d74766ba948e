//! Consumer groups with the consumer protocol of KIP-848 (`group.protocol=consumer`): the
//! broker computes the assignment; the member heartbeats with ConsumerGroupHeartbeat, reports
//! what it owns, and reconciles toward what each response assigns (revoking first).
//!
//! Ownership: a background heartbeat task (owned by the `GroupMember`, aborted when it is
//! dropped) talks to the coordinator and leaves the latest assignment in shared state; `poll`
//! reconciles on the application's task (so rebalance callbacks run there, as in the Java
//! client), then wakes the heartbeat task so the coordinator hears about the new ownership at
//! once instead of one heartbeat interval later.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use protocol::messages::{ConsumerGroupHeartbeatRequest, GroupId};
use tokio::sync::Notify;

use crate::cluster::{sb, topic_name, Client};
use crate::consumer::{Consumer, TopicPartition};
use crate::error::{Error, Result};
use crate::group::{commit_positions, find_coordinator};
use model::ErrorCode;

/// Which group protocol a subscribed consumer speaks (`group.protocol`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GroupProtocol {
    /// JoinGroup/SyncGroup with client-side assignors.
    #[default]
    Classic,
    /// KIP-848: ConsumerGroupHeartbeat with server-side assignors.
    Consumer,
}

impl GroupProtocol {
    pub fn from_name(s: &str) -> Option<GroupProtocol> {
        match s.to_ascii_lowercase().as_str() {
            "classic" => Some(GroupProtocol::Classic),
            "consumer" => Some(GroupProtocol::Consumer),
            _ => None,
        }
    }
}

/// Epoch that leaves the group; a static member leaves "for now" with -2.
const LEAVE_EPOCH: i32 = -1;
const LEAVE_STATIC_EPOCH: i32 = -2;

/// What the heartbeat task and `poll` share.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub member_id: String,
    pub epoch: i32,
    /// The assignment of the latest response that carried one, not yet reconciled.
    pub target: Option<BTreeMap<[u8; 16], BTreeSet<i32>>>,
    /// What the member owns (reported in every heartbeat).
    pub owned: BTreeMap<[u8; 16], BTreeSet<i32>>,
    /// The member lost its membership (fenced, unknown): give everything up and rejoin.
    pub lost: bool,
    /// A non-retriable error: surfaced by the next `poll`.
    pub fatal: Option<Error>,
    /// The coordinator, once found.
    pub coordinator: Option<i32>,
}

/// The consumer-protocol state of a member.
pub(crate) struct ConsumerMembership {
    pub shared: Arc<Mutex<Shared>>,
    pub wake: Arc<Notify>,
    pub task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for ConsumerMembership {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// A new random member id, in Kafka's text form of a UUID (22 base64url characters).
fn new_member_id() -> String {
    crate::cluster::format_uuid(uuid::Uuid::new_v4().as_bytes())
}

fn lock(s: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

impl ConsumerMembership {
    pub fn new() -> ConsumerMembership {
        ConsumerMembership {
            shared: Arc::new(Mutex::new(Shared {
                member_id: new_member_id(),
                ..Shared::default()
            })),
            wake: Arc::new(Notify::new()),
            task: None,
        }
    }
}

/// What the heartbeat task needs from the consumer's config.
struct HeartbeatTask {
    client: Client,
    group_id: String,
    topics: Vec<String>,
    instance_id: Option<String>,
    assignor: Option<String>,
    rebalance_timeout_ms: i32,
    shared: Arc<Mutex<Shared>>,
    wake: Arc<Notify>,
}

fn owned_request(owned: &BTreeMap<[u8; 16], BTreeSet<i32>>) -> Vec<TopicPartitions> {
    owned
        .iter()
        .map(|(id, ps)| {
            TopicPartitions::default()
                .with_topic_id(uuid::Uuid::from_bytes(*id))
                .with_partitions(ps.iter().copied().collect())
        })
        .collect()
}

/// Heartbeats until aborted: joins (epoch 0), then every interval the coordinator gives, and
/// at once when `poll` reconciled.
async fn heartbeat_loop(h: HeartbeatTask) {
    let mut interval = Duration::from_millis(500);
    loop {
        let (member_id, epoch, owned, node) = {
            let s = lock(&h.shared);
            (s.member_id.clone(), s.epoch, s.owned.clone(), s.coordinator)
        };
        let node = match node {
            Some(n) => n,
            None => match find_coordinator(&h.client, &h.group_id).await {
                Ok(n) => {
                    lock(&h.shared).coordinator = Some(n);
                    n
                }
                Err(e) if e.is_retriable() => {
                    tokio::time::sleep(Duration::from_millis(h.client.config().retry_backoff_ms))
                        .await;
                    continue;
                }
                Err(e) => {
                    lock(&h.shared).fatal = Some(e);
                    return;
                }
            },
        };
        let req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(sb(&h.group_id)))
            .with_member_id(sb(&member_id))
            .with_member_epoch(epoch)
            .with_instance_id(h.instance_id.as_deref().map(sb))
            .with_rebalance_timeout_ms(h.rebalance_timeout_ms)
            .with_subscribed_topic_names(Some(h.topics.iter().map(|t| topic_name(t)).collect()))
            .with_server_assignor(h.assignor.as_deref().map(sb))
            .with_topic_partitions(Some(owned_request(&owned)));
        let resp = match h.client.send_coordinator(node, &req).await {
            Ok(r) => r,
            Err(e) if e.is_retriable() || matches!(e, Error::Closed) => {
                lock(&h.shared).coordinator = None;
                tokio::time::sleep(Duration::from_millis(h.client.config().retry_backoff_ms)).await;
                continue;
            }
            Err(e) => {
                lock(&h.shared).fatal = Some(e);
                return;
            }
        };
        let code = ErrorCode::from_code(resp.error_code);
        match code {
            ErrorCode::None => {
                let mut s = lock(&h.shared);
                if s.member_id != member_id {
                    // poll reset the membership meanwhile; this answer is for the old one.
                    continue;
                }
                s.epoch = resp.member_epoch;
                if let Some(a) = &resp.assignment {
                    let mut target: BTreeMap<[u8; 16], BTreeSet<i32>> = BTreeMap::new();
                    for tp in &a.topic_partitions {
                        target
                            .entry(*tp.topic_id.as_bytes())
                            .or_default()
                            .extend(tp.partitions.iter().copied());
                    }
                    if target != s.owned {
                        s.target = Some(target);
                    }
                }
                if resp.heartbeat_interval_ms > 0 {
                    interval = Duration::from_millis(resp.heartbeat_interval_ms as u64);
                }
            }
            ErrorCode::FencedMemberEpoch | ErrorCode::UnknownMemberId => {
                tracing::info!(error = ?code, "consumer group membership lost; rejoining");
                let mut s = lock(&h.shared);
                s.lost = true;
                s.epoch = 0;
                s.target = None;
                // A new identity: the old member may still exist at the coordinator until
                // its session expires, and would fence a rejoin under the same id.
                s.member_id = new_member_id();
                continue;
            }
            ErrorCode::NotCoordinator
            | ErrorCode::CoordinatorNotAvailable
            | ErrorCode::CoordinatorLoadInProgress => {
                lock(&h.shared).coordinator = None;
                tokio::time::sleep(Duration::from_millis(h.client.config().retry_backoff_ms)).await;
                continue;
            }
            e if e.is_retriable() => {
                tokio::time::sleep(Duration::from_millis(h.client.config().retry_backoff_ms)).await;
                continue;
            }
            e => {
                let msg = resp.error_message.as_deref().map(str::to_string);
                tracing::warn!(error = ?e, message = ?msg, "consumer group heartbeat failed");
                lock(&h.shared).fatal = Some(Error::broker(e, msg));
                return;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = h.wake.notified() => {}
        }
    }
}

/// Maps topic ids of the subscribed topics to names (refreshing metadata for unknown ids).
async fn topic_names(
    client: &Client,
    topics: &[String],
    ids: &BTreeSet<[u8; 16]>,
) -> HashMap<[u8; 16], String> {
    let mut out = HashMap::new();
    for fresh in [false, true] {
        for t in topics {
            let info = if fresh {
                client.topic_fresh(t, false).await
            } else {
                client.topic(t, false).await
            };
            if let Ok(info) = info {
                if let Some(id) = crate::cluster::parse_uuid(&info.topic_id) {
                    out.insert(id, t.clone());
                }
            }
        }
        if ids.iter().all(|id| out.contains_key(id)) {
            break;
        }
    }
    out
}

/// Runs the consumer protocol before records are returned: starts heartbeating, surfaces a
/// fatal error, and reconciles the assignment the coordinator gave.
pub(crate) async fn drive(c: &mut Consumer) -> Result<()> {
    let Some(g) = c.group.as_mut() else {
        return Ok(());
    };
    let group_id = g.group_id.clone();
    let topics = g.topics.clone();
    let m = g.consumer.get_or_insert_with(ConsumerMembership::new);
    if m.task.is_none() {
        let task = HeartbeatTask {
            client: c.client.clone(),
            group_id: group_id.clone(),
            topics: topics.clone(),
            instance_id: c.config.group_instance_id.clone(),
            assignor: c.config.group_remote_assignor.clone(),
            rebalance_timeout_ms: c.config.max_poll_interval_ms,
            shared: m.shared.clone(),
            wake: m.wake.clone(),
        };
        m.task = Some(tokio::spawn(heartbeat_loop(task)));
    }
    let shared = m.shared.clone();
    let wake = m.wake.clone();
    let (lost, target, fatal) = {
        let mut s = lock(&shared);
        (std::mem::take(&mut s.lost), s.target.take(), s.fatal.take())
    };
    if let Some(e) = fatal {
        return Err(e);
    }
    if lost {
        let owned = c.assignment();
        if !owned.is_empty() {
            if let Some(l) = c.group.as_mut().and_then(|g| g.listener.as_mut()) {
                l.on_partitions_revoked(&owned);
            }
            c.assign(Vec::new());
        }
        lock(&shared).owned.clear();
        if let Some(g) = c.group.as_mut() {
            g.joined = false;
        }
    }
    if let Some(target) = target {
        reconcile(c, &topics, target).await;
        wake.notify_one();
    }
    let (epoch, member_id) = {
        let s = lock(&shared);
        (s.epoch, s.member_id.clone())
    };
    if let Some(g) = c.group.as_mut() {
        g.generation = epoch;
        g.member_id = member_id;
        g.coordinator = lock(&shared).coordinator;
        if epoch > 0 {
            g.joined = true;
        }
    }
    Ok(())
}

/// Moves the consumer to `target`: revoke (committing first with auto-commit), then assign.
async fn reconcile(c: &mut Consumer, topics: &[String], target: BTreeMap<[u8; 16], BTreeSet<i32>>) {
    let ids: BTreeSet<[u8; 16]> = target.keys().copied().collect();
    let names = topic_names(&c.client, topics, &ids).await;
    let mut new: BTreeSet<TopicPartition> = BTreeSet::new();
    let mut resolved: BTreeMap<[u8; 16], BTreeSet<i32>> = BTreeMap::new();
    for (id, ps) in &target {
        let Some(name) = names.get(id) else {
            tracing::warn!("assigned a topic id the metadata does not know yet");
            continue;
        };
        resolved.insert(*id, ps.clone());
        new.extend(ps.iter().map(|p| TopicPartition::new(name.as_str(), *p)));
    }
    let old: BTreeSet<TopicPartition> = c.assignment().into_iter().collect();
    let revoked: Vec<TopicPartition> = old.difference(&new).cloned().collect();
    let added: Vec<TopicPartition> = new.difference(&old).cloned().collect();
    if !revoked.is_empty() {
        if c.config.enable_auto_commit {
            if let Err(e) = commit_positions(c, Some(&revoked)).await {
                tracing::warn!(error = %e, "commit before revocation failed");
            }
        }
        if let Some(l) = c.group.as_mut().and_then(|g| g.listener.as_mut()) {
            l.on_partitions_revoked(&revoked);
        }
    }
    c.assign(new.into_iter().collect());
    if let Some(g) = c.group.as_mut() {
        if let Some(m) = g.consumer.as_ref() {
            lock(&m.shared).owned = resolved;
        }
        if let Some(l) = g.listener.as_mut() {
            if !added.is_empty() || !revoked.is_empty() {
                l.on_partitions_assigned(&added);
            }
        }
    }
    tracing::debug!(
        revoked = revoked.len(),
        added = added.len(),
        "reconciled assignment"
    );
}

/// Leaves the group: epoch -1 (-2 for a static member, which keeps its partitions reserved
/// until its session expires).
pub(crate) async fn leave(c: &mut Consumer) -> Result<()> {
    let Some(g) = c.group.as_mut() else {
        return Ok(());
    };
    let group_id = g.group_id.clone();
    let Some(mut m) = g.consumer.take() else {
        return Ok(());
    };
    if let Some(t) = m.task.take() {
        t.abort();
    }
    let (member_id, epoch, node) = {
        let s = lock(&m.shared);
        (s.member_id.clone(), s.epoch, s.coordinator)
    };
    let owned = c.assignment();
    if let Some(l) = c.group.as_mut().and_then(|g| g.listener.as_mut()) {
        l.on_partitions_revoked(&owned);
    }
    let (Some(node), true) = (node, epoch > 0) else {
        return Ok(());
    };
    let leave_epoch = if c.config.group_instance_id.is_some() {
        LEAVE_STATIC_EPOCH
    } else {
        LEAVE_EPOCH
    };
    let req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(sb(&group_id)))
        .with_member_id(sb(&member_id))
        .with_member_epoch(leave_epoch)
        .with_instance_id(c.config.group_instance_id.as_deref().map(sb))
        .with_rebalance_timeout_ms(-1);
    let resp = c.client.send_coordinator(node, &req).await?;
    Error::check(resp.error_code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_are_kafka_uuids_and_parse_back() {
        let id = new_member_id();
        assert_eq!(id.len(), 22);
        let bytes = crate::cluster::parse_uuid(&id).unwrap();
        assert_eq!(crate::cluster::format_uuid(&bytes), id);
        for b in [[0u8; 16], [0xff; 16], *b"0123456789abcdef"] {
            assert_eq!(
                crate::cluster::parse_uuid(&crate::cluster::format_uuid(&b)),
                Some(b)
            );
        }
        assert_eq!(crate::cluster::parse_uuid("short"), None);
        assert_eq!(
            GroupProtocol::from_name("CONSUMER"),
            Some(GroupProtocol::Consumer)
        );
    }
}
