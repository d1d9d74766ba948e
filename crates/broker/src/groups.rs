//! The group coordinator's runtime: routes group requests into the sans-IO
//! `GroupCoordinator`, appends the records it emits to `__consumer_offsets`, waits for them
//! to be durable, then delivers the responses (some of them delayed) to their connections.
//!
//! `__consumer_offsets` is created through the controller on the first FindCoordinator for a
//! group (as Kafka does), with `offsets.topic.num.partitions` partitions, `cleanup.policy=compact`
//! and the internal-topic replication factor. The coordinator follows partition leadership as
//! the committed metadata publishes it ([`Groups::on_metadata`]): a partition this broker comes
//! to lead is replayed and loaded before its groups are served; one it stops leading is
//! unloaded (its groups answer NOT_COORDINATOR). FindCoordinator answers with the partition's
//! leader from the same committed image on every broker.

use crate::handlers::{Ctx, Reply};
use crate::internal_replay::{replay_partition, Replayed};
use crate::state::BrokerState;
use crate::txn_partition::Verification;
use bytes::Bytes;
use coordinator::{
    CoordinatorConfig, CoordinatorNode, GroupCoordinator, Output, RequestContext, TopicInfo,
    TopicVisibility, TopicsImage,
};
use metadata::{MetadataDelta, MetadataImage};
use model::acl::AclOperation as Op;
use model::ErrorCode;
use protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use protocol::messages::{OffsetCommitResponse, OffsetDeleteResponse, TopicName};
use protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use protocol::{RequestKind, ResponseKind};
use record::{BatchBuilder, Compression, NewRecord};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The config overrides `__consumer_offsets` always has, as in Kafka: compacted (its records
/// are the latest state per key), the producer's compression, 100 MiB segments.
fn offsets_topic_configs() -> BTreeMap<String, String> {
    let mut configs = BTreeMap::new();
    configs.insert("cleanup.policy".to_string(), "compact".to_string());
    configs.insert("compression.type".to_string(), "producer".to_string());
    configs.insert("segment.bytes".to_string(), "104857600".to_string());
    configs
}

/// The startup check of an existing `__consumer_offsets` (clients cannot change it, but an
/// older Moldau let them, and files can be edited): config overrides that differ from the
/// broker's are put back (a `delete` policy or a short retention would drop committed offsets);
/// a partition count other than `offsets.topic.num.partitions` is kept and used, as Kafka
/// does, because every group's records live in the partition that count chose (changing it
/// would orphan them). Both are logged loudly.
fn check_offsets_topic(state: &Arc<BrokerState>, topic: &metadata::TopicImage) {
    let want = offsets_topic_configs();
    if topic.configs != want {
        let changes: BTreeMap<String, Option<String>> = want
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        let replaced = topic.configs.clone();
        let state2 = state.clone();
        state.tasks.spawn(async move {
            let request = controller::Request::AlterConfigs {
                changes: vec![controller::ConfigChange {
                    resource: controller::ConfigResource::Topic(OFFSETS_TOPIC.to_string()),
                    changes,
                    replace_all: true,
                }],
                validate_only: false,
                origin: controller::Origin::Broker,
            };
            match state2.controller_call(request).await {
                Ok(controller::Reply::AlterConfigs(r)) if r.iter().all(Result::is_ok) => {
                    tracing::warn!(?replaced, "{OFFSETS_TOPIC} had config overrides that could lose committed offsets; restored the broker's settings");
                }
                other => {
                    tracing::error!(?other, "could not restore the settings of {OFFSETS_TOPIC}")
                }
            }
        });
    }
    let partitions = topic.partitions.len() as i32;
    if partitions != state.config.offsets_topic_num_partitions {
        tracing::warn!(
            partitions,
            configured = state.config.offsets_topic_num_partitions,
            "{OFFSETS_TOPIC} exists with a partition count other than offsets.topic.num.partitions; \
             using the existing count (changing it would orphan committed offsets)"
        );
    }
}

/// How long a coordinator write waits for the high watermark before its request is answered
/// COORDINATOR_NOT_AVAILABLE (Kafka's `offsets.commit.timeout.ms` default).
const WRITE_TIMEOUT_MS: i64 = 5_000;

/// A request waiting for its response: where to send it and the `__consumer_offsets`
/// partitions of the groups it names (the response waits until their HW reaches the log end
/// as it was when the response was produced, so nothing uncommitted is ever answered).
struct Pending {
    tx: oneshot::Sender<ResponseKind>,
    partitions: Vec<i32>,
}

/// The KIP-890 verification guard a TxnOffsetCommit holds on its group's `__consumer_offsets`
/// partition from before its transaction coordinator is asked until its batch is appended
/// (KAFKA-17754): a marker for the producer written in between voids it, and the append is
/// refused. `guard` is `None` when the producer already had a transaction open there (then
/// that transaction must still be open at the append). Released when dropped.
struct TxnOffsetsGuard {
    partition: Arc<crate::replica::Partition>,
    producer_id: i64,
    producer_epoch: i16,
    guard: Option<u64>,
}

impl Drop for TxnOffsetsGuard {
    fn drop(&mut self) {
        if let Some(g) = self.guard {
            self.partition.end_verification(self.producer_id, g);
        }
    }
}

/// Owns the coordinator and the routes of its pending responses.
pub struct Groups {
    coordinator: Mutex<GroupCoordinator>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_token: AtomicU64,
    /// Wakes the timer task when a call may have moved the next deadline earlier.
    wake: Notify,
    /// `__consumer_offsets` partitions loaded into the coordinator (the ones this broker
    /// leads), each with the leader epoch it was loaded at: a new epoch is a new load, even
    /// when this broker led the partition before (another leader may have written it since).
    loaded: Mutex<BTreeMap<i32, i32>>,
    /// Serialises the loads and unloads (the metadata loader and reloads after a failed
    /// write).
    follow: Mutex<()>,
    /// Whether the existing `__consumer_offsets` was checked (once per process).
    checked: AtomicBool,
    /// The metadata image offset the coordinator's topics view was built from.
    topics_offset: std::sync::atomic::AtomicI64,
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups").finish()
    }
}

impl Groups {
    pub fn new(config: &model::BrokerConfig) -> Groups {
        Groups {
            coordinator: Mutex::new(GroupCoordinator::new(CoordinatorConfig::from_broker(
                config,
            ))),
            pending: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(1),
            wake: Notify::new(),
            loaded: Mutex::new(BTreeMap::new()),
            follow: Mutex::new(()),
            checked: AtomicBool::new(false),
            topics_offset: std::sync::atomic::AtomicI64::new(i64::MIN),
        }
    }

    /// Copies of every group this broker coordinates (for metrics).
    pub fn snapshot(&self) -> Vec<coordinator::GroupSnapshot> {
        self.lock().snapshot()
    }

    /// Every group coordinated here (classic and consumer) with its state, for metrics.
    pub fn summaries(&self) -> Vec<coordinator::GroupSummary> {
        self.lock().summaries()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GroupCoordinator> {
        self.coordinator.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands the coordinator the cluster's topics and the group config overrides when the
    /// metadata image moved (consumer groups assign partitions by topic id, follow partition
    /// changes, and take their session timeout and heartbeat interval from group configs).
    fn refresh_topics(&self, state: &BrokerState, c: &mut GroupCoordinator) {
        let image = state.image();
        if self.topics_offset.load(Ordering::Acquire) == image.offset {
            return;
        }
        let topics = TopicsImage::new(image.topics.values().map(|t| {
            TopicInfo {
                id: t.id,
                name: t.name.to_string(),
                partitions: t.partitions.len() as i32,
                racks: t
                    .partitions
                    .iter()
                    .map(|p| {
                        let mut racks: Vec<String> = p
                            .replicas
                            .iter()
                            .filter_map(|b| image.brokers.get(b).and_then(|b| b.rack.clone()))
                            .collect();
                        racks.sort();
                        racks.dedup();
                        racks
                    })
                    .collect(),
                internal: t.is_internal(),
            }
        }));
        c.set_topics(topics);
        c.set_group_configs(image.group_configs.clone());
        self.topics_offset.store(image.offset, Ordering::Release);
    }

    fn loaded(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, i32>> {
        self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Follows a committed image: loads the `__consumer_offsets` partitions this broker now
    /// leads, unloads the ones it no longer leads, and drops the committed offsets of deleted
    /// topics. Runs on the metadata loader, before the image's offset counts as applied.
    pub fn on_metadata(
        self: &Arc<Self>,
        state: &Arc<BrokerState>,
        image: &MetadataImage,
        delta: &MetadataDelta,
    ) {
        if let Some(t) = image.topic(OFFSETS_TOPIC) {
            let n = t.partitions.len() as i32;
            {
                // Set once, before any partition is loaded: the count of the topic that
                // exists decides where groups live (it never changes: internal topics refuse
                // CreatePartitions).
                let mut c = self.lock();
                if c.config().offsets_topic_num_partitions != n {
                    c.set_offsets_topic_partitions(n);
                }
            }
            state.txns.set_offsets_topic_partitions(n);
            let leads_any = t.partitions.iter().any(|p| p.leader == state.node_id);
            if leads_any && !self.checked.swap(true, Ordering::AcqRel) {
                check_offsets_topic(state, t);
            }
        }
        let leading = self.follow_leadership(state, image);
        let deleted: Vec<&str> = delta
            .deleted_topics
            .values()
            .map(|t| t.name.as_ref())
            .collect();
        if !deleted.is_empty() {
            self.topics_deleted(state, &deleted);
        }
        if delta.acls_changed || delta.full {
            // What a regex subscription resolved to depends on the DESCRIBE grants of the
            // principal that resolved it.
            self.lock().acls_changed();
        }
        if leading || delta.group_configs_changed {
            self.wake.notify_one();
        }
    }

    /// The `__consumer_offsets` partitions this broker leads in `image` and their leader
    /// epochs (only those hosted here, at the epoch the local replica follows).
    fn leading(state: &BrokerState, image: &MetadataImage) -> BTreeMap<i32, i32> {
        let Some(t) = image.topic(OFFSETS_TOPIC) else {
            return BTreeMap::new();
        };
        t.partitions
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                p.leader == state.node_id
                    && state
                        .replicas
                        .get(OFFSETS_TOPIC, *i as i32)
                        .is_some_and(|r| r.is_leader() && r.leader_epoch() == p.leader_epoch)
            })
            .map(|(i, p)| (i as i32, p.leader_epoch))
            .collect()
    }

    /// Makes the loaded partitions those this broker leads in `image`, each at its current
    /// leader epoch: a partition led at another epoch than the one loaded (or no longer led)
    /// is unloaded first (its groups answer NOT_COORDINATOR, parked requests are failed),
    /// then replayed afresh. Returns whether this broker leads any.
    fn follow_leadership(
        self: &Arc<Self>,
        state: &Arc<BrokerState>,
        image: &MetadataImage,
    ) -> bool {
        let _follow = self.follow.lock().unwrap_or_else(|e| e.into_inner());
        let leading = Self::leading(state, image);
        let loaded = self.loaded().clone();
        for (p, epoch) in &loaded {
            if leading.get(p) == Some(epoch) {
                continue;
            }
            let mut c = self.lock();
            let out = c.unload_partition(*p);
            self.loaded().remove(p);
            tracing::info!(
                partition = p,
                epoch,
                now = ?leading.get(p),
                "unloaded {OFFSETS_TOPIC} partition (no longer its leader at this epoch)"
            );
            self.persist_and_route(state, out);
        }
        for (p, epoch) in &leading {
            if loaded.get(p) == Some(epoch) {
                continue;
            }
            if let Err(e) = self.load_partition(state, *p, *epoch) {
                tracing::error!(partition = p, error = ?e, "loading {OFFSETS_TOPIC} partition failed; its groups stay unavailable");
                continue;
            }
            tracing::info!(partition = p, epoch, "loaded {OFFSETS_TOPIC} partition");
        }
        !leading.is_empty()
    }

    /// Replays one `__consumer_offsets` partition into the coordinator and marks it loaded
    /// at `epoch` (all under the coordinator lock: its groups are served only once loaded,
    /// and a marker completing transactional offsets there is applied after the replay).
    fn load_partition(&self, state: &BrokerState, p: i32, epoch: i32) -> Result<(), ErrorCode> {
        let now = state.clock.now_ms();
        let mut c = self.lock();
        self.refresh_topics(state, &mut c);
        c.begin_loading(p);
        let Some(partition) = state.replicas.get(OFFSETS_TOPIC, p) else {
            tracing::error!(partition = p, "{OFFSETS_TOPIC} partition is not hosted");
            return Err(ErrorCode::CoordinatorNotAvailable);
        };
        replay_partition(&partition, OFFSETS_TOPIC, p, |entry| match entry {
            // A transaction marker: the producer's offsets commit or vanish.
            Replayed::Marker {
                producer_id,
                commit,
            } => c.complete_txn(producer_id, p, commit),
            Replayed::Record {
                offset,
                producer_id,
                key,
                value,
            } => {
                let replayed = match producer_id {
                    Some(pid) => c.replay_txn(pid, &key, value.as_deref()),
                    None => c.replay(&key, value.as_deref()),
                };
                if let Err(e) = replayed {
                    tracing::warn!(partition = p, offset, error = %e, "skipping unreadable {OFFSETS_TOPIC} record");
                }
            }
        })?;
        c.load_partition(p, now);
        self.loaded().insert(p, epoch);
        Ok(())
    }

    /// After a failed local append to partition `p` the coordinator's memory may be ahead of
    /// the log: unload the partition and load it again from the log (if this broker still
    /// leads it), so what is served is what was written.
    fn reload_later(self: &Arc<Self>, state: &Arc<BrokerState>, p: i32, epoch: i32) {
        let (this, state) = (self.clone(), state.clone());
        state.clone().tasks.spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            {
                let _follow = this.follow.lock().unwrap_or_else(|e| e.into_inner());
                let mut c = this.lock();
                if this.loaded().get(&p) != Some(&epoch) {
                    return;
                }
                tracing::warn!(
                    partition = p,
                    "reloading {OFFSETS_TOPIC} partition after a failed write"
                );
                let out = c.unload_partition(p);
                this.loaded().remove(&p);
                this.persist_and_route(&state, out);
            }
            let image = state.image();
            this.follow_leadership(&state, &image);
        });
    }

    /// Creates `__consumer_offsets` through the controller, if it does not exist yet.
    async fn create_offsets_topic(state: &BrokerState) -> Result<(), ErrorCode> {
        if state.image().topic(OFFSETS_TOPIC).is_some() {
            return Ok(());
        }
        let rf = state.config.internal_topic_replication_factor(
            state.config.offsets_topic_replication_factor,
            state.config.offsets_topic_replication_factor_set,
        );
        let request = controller::Request::CreateTopics {
            topics: vec![controller::TopicSpec {
                name: OFFSETS_TOPIC.to_string(),
                partitions: state.config.offsets_topic_num_partitions,
                replication_factor: rf,
                assignment: Vec::new(),
                configs: offsets_topic_configs(),
            }],
            validate_only: false,
            origin: controller::Origin::Broker,
            quota: None,
        };
        let result = match state.controller_call(request).await {
            Ok(controller::Reply::CreateTopics(mut r)) if !r.is_empty() => r.remove(0).map(|_| ()),
            Ok(_) => return Err(ErrorCode::CoordinatorNotAvailable),
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => {
                tracing::info!(replication_factor = rf, "created {OFFSETS_TOPIC}");
                Ok(())
            }
            Err(e) if e.code == ErrorCode::TopicAlreadyExists => Ok(()),
            Err(e) => {
                tracing::warn!(error = %e, "creating {OFFSETS_TOPIC} failed");
                Err(ErrorCode::CoordinatorNotAvailable)
            }
        }
    }

    /// The broker that coordinates a group: the leader of its `__consumer_offsets` partition
    /// in the committed image, with its endpoint on `listener`.
    fn locate(
        state: &BrokerState,
        listener: &str,
        key: &str,
    ) -> Result<CoordinatorNode, ErrorCode> {
        let image = state.image();
        let topic = image
            .topic(OFFSETS_TOPIC)
            .ok_or(ErrorCode::CoordinatorNotAvailable)?;
        let p = coordinator::partition_for(key, topic.partitions.len() as i32);
        let leader = topic.partitions.get(p as usize).map_or(-1, |p| p.leader);
        let endpoint = image
            .brokers
            .get(&leader)
            .filter(|b| !b.fenced)
            .and_then(|b| b.endpoint(listener))
            .ok_or(ErrorCode::CoordinatorNotAvailable)?;
        Ok(CoordinatorNode {
            node_id: leader,
            host: endpoint.host.clone(),
            port: endpoint.port,
        })
    }

    /// Handles one group API request.
    pub fn handle(
        self: &Arc<Self>,
        state: &Arc<BrokerState>,
        ctx: Ctx,
        client_id: &str,
        client_host: &str,
        body: RequestKind,
    ) -> Reply {
        if let RequestKind::TxnOffsetCommit(r) = &body {
            // v5+ adds the group's partition (transaction version 2); older versions verify.
            let how = if ctx.version >= 5 {
                Verification::Add
            } else {
                Verification::Verify
            };
            let guard = self.txn_offsets_guard(state, r, how);
            let node = state.txns.remote_coordinator(state, &r.transactional_id.0);
            // v5+ is transaction version 2 (KIP-890 part 2): the client sent no
            // AddOffsetsToTxn, this coordinator adds the group's partition itself.
            if node.is_some() || ctx.version >= 5 {
                return self.txn_offset_commit_asked(
                    state,
                    ctx,
                    client_id,
                    client_host,
                    body,
                    node,
                    guard,
                );
            }
            return self.handle_verified(state, ctx, client_id, client_host, body, None, guard);
        }
        self.handle_verified(state, ctx, client_id, client_host, body, None, None)
    }

    /// Takes the verification guard of a TxnOffsetCommit on its group's partition (before
    /// the transaction coordinator is asked), if this broker hosts that partition.
    fn txn_offsets_guard(
        &self,
        state: &BrokerState,
        r: &TxnOffsetCommitRequest,
        how: Verification,
    ) -> Option<TxnOffsetsGuard> {
        let p = self.lock().partition_for(&r.group_id.0);
        let partition = state.replicas.get(OFFSETS_TOPIC, p)?;
        let guard = partition.begin_verification(r.producer_id.0, r.producer_epoch, how);
        Some(TxnOffsetsGuard {
            partition,
            producer_id: r.producer_id.0,
            producer_epoch: r.producer_epoch,
            guard,
        })
    }

    /// A TxnOffsetCommit that asks its transaction coordinator first (on broker `node`, or
    /// this broker's for None): KIP-890 verification (AddPartitionsToTxn v5, verify only), or
    /// for v5+ requests (transaction version 2) the add of the group's partition; then the
    /// request is handled with that answer.
    #[allow(clippy::too_many_arguments)]
    fn txn_offset_commit_asked(
        self: &Arc<Self>,
        state: &Arc<BrokerState>,
        ctx: Ctx,
        client_id: &str,
        client_host: &str,
        body: RequestKind,
        node: Option<i32>,
        guard: Option<TxnOffsetsGuard>,
    ) -> Reply {
        let RequestKind::TxnOffsetCommit(r) = &body else {
            return self.handle_verified(state, ctx, client_id, client_host, body, None, guard);
        };
        let partition = self.lock().partition_for(&r.group_id.0);
        let tp: BTreeSet<(String, i32)> = [(OFFSETS_TOPIC.to_string(), partition)]
            .into_iter()
            .collect();
        let (txn_id, pid, epoch) = (
            r.transactional_id.0.to_string(),
            r.producer_id.0,
            r.producer_epoch,
        );
        let verify_only = ctx.version < 5;
        let (this, state) = (self.clone(), state.clone());
        let (client_id, client_host) = (client_id.to_string(), client_host.to_string());
        Reply::Later(Box::pin(async move {
            let answers = state
                .txns
                .ask(&state, node, &txn_id, pid, epoch, &tp, verify_only)
                .await;
            let verdict = match answers.into_values().find(|e| *e != ErrorCode::None) {
                None => Ok(()),
                Some(e) => Err(e),
            };
            this.handle_verified(
                &state,
                ctx,
                &client_id,
                &client_host,
                body,
                Some(verdict),
                guard,
            )
            .into_frame()
            .await
        }))
    }

    /// Handles one group API request; `verified` is a TxnOffsetCommit's KIP-890 answer when
    /// a remote coordinator already gave it, `guard` its verification guard.
    #[allow(clippy::too_many_arguments)]
    fn handle_verified(
        self: &Arc<Self>,
        state: &Arc<BrokerState>,
        ctx: Ctx,
        client_id: &str,
        client_host: &str,
        body: RequestKind,
        verified: Option<Result<(), ErrorCode>>,
        guard: Option<TxnOffsetsGuard>,
    ) -> Reply {
        if let RequestKind::FindCoordinator(req) = body {
            let state = state.clone();
            return Reply::Later(Box::pin(async move {
                let key_type = if ctx.version >= 1 { req.key_type } else { 0 };
                match key_type {
                    0 => {
                        let _ = Groups::create_offsets_topic(&state).await;
                    }
                    1 => {
                        let _ = state.txns.create_state_topic(&state).await;
                    }
                    _ => {}
                }
                let listener = ctx.listener.clone();
                let resp = coordinator::find_coordinator(&req, ctx.version, |key_type, key| {
                    if key_type == 1 {
                        return state.txns.locate(&state, &listener, key);
                    }
                    Groups::locate(&state, &listener, key)
                });
                ctx.encode(ResponseKind::FindCoordinator(resp))
            }));
        }
        // "All topics" (null) exists from OffsetFetch v2 on; Kafka cannot parse a null list at
        // v1 and closes the connection.
        if let RequestKind::OffsetFetch(r) = &body {
            if ctx.version < 2 && r.topics.is_none() {
                tracing::debug!("OffsetFetch v{} with null topics: closing", ctx.version);
                return Reply::Close;
            }
        }
        // Kafka checks OffsetCommit, OffsetDelete and TxnOffsetCommit against the cluster's
        // metadata before the coordinator sees them (KafkaApis): partitions of unknown topics,
        // or past a topic's partition count, get UNKNOWN_TOPIC_OR_PARTITION and nothing is
        // stored for them.
        let (body, unknown) = split_unknown_partitions(&state.image(), body);
        if let (RequestKind::TxnOffsetCommit(r), false) = (&body, unknown.is_empty()) {
            if r.topics.is_empty() {
                let resp = merge_txn_offset_commit(unknown, TxnOffsetCommitResponse::default());
                return ctx.ready(ResponseKind::TxnOffsetCommit(resp));
            }
        }
        if let (RequestKind::OffsetCommit(r), false) = (&body, unknown.is_empty()) {
            if r.topics.is_empty() {
                // Nothing left for the coordinator: Kafka answers without it (no group
                // checks, no group created).
                let resp = merge_offset_commit(unknown, OffsetCommitResponse::default());
                return ctx.ready(ResponseKind::OffsetCommit(resp));
            }
        }
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        // The one authorization a group request needs beyond `authz::gate`: which topics the
        // principal may DESCRIBE, for the subscription regexes a heartbeat resolves (Kafka's
        // `filterTopicDescribeAuthorizedTopics`). Decided here, lazily, topic by topic.
        let access = ctx.access.clone();
        let may_describe = |topic: &str| access.allows_topic(Op::Describe, topic);
        let rctx = RequestContext {
            token,
            api_version: ctx.version,
            client_id,
            client_host,
            visible_topics: if access.enabled() {
                TopicVisibility::only(&may_describe)
            } else {
                TopicVisibility::ALL
            },
        };
        let now = state.clock.now_ms();
        // KIP-890: a transactional offset commit goes ahead only if the group's partition is
        // part of the producer's ongoing transaction.
        let body = match body {
            RequestKind::TxnOffsetCommit(r) => {
                match self.verify_txn_offsets(state, &r, ctx.version, verified) {
                    Ok(()) => RequestKind::TxnOffsetCommit(r),
                    Err(e) => {
                        let resp = txn_offset_commit_error(&r, e);
                        return ctx.ready(ResponseKind::TxnOffsetCommit(merge_txn_offset_commit(
                            unknown, resp,
                        )));
                    }
                }
            }
            other => other,
        };
        {
            let mut c = self.lock();
            self.refresh_topics(state, &mut c);
            let partitions = group_partitions(&c, &body);
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(token, Pending { tx, partitions });
            let out = match body {
                RequestKind::JoinGroup(r) => c.join_group(&rctx, r, now),
                RequestKind::SyncGroup(r) => c.sync_group(&rctx, r, now),
                RequestKind::Heartbeat(r) => c.heartbeat(&rctx, r, now),
                RequestKind::LeaveGroup(r) => c.leave_group(&rctx, r, now),
                RequestKind::OffsetCommit(r) => c.offset_commit(&rctx, r, now),
                RequestKind::OffsetFetch(r) => c.offset_fetch(&rctx, r, now),
                RequestKind::OffsetDelete(r) => c.offset_delete(&rctx, r, now),
                RequestKind::ListGroups(r) => c.list_groups(&rctx, r, now),
                RequestKind::DescribeGroups(r) => c.describe_groups(&rctx, r, now),
                RequestKind::DeleteGroups(r) => c.delete_groups(&rctx, r, now),
                RequestKind::ConsumerGroupHeartbeat(r) => c.consumer_group_heartbeat(&rctx, r, now),
                RequestKind::ConsumerGroupDescribe(r) => c.consumer_group_describe(&rctx, r, now),
                RequestKind::TxnOffsetCommit(r) => c.txn_offset_commit(&rctx, r, now),
                other => {
                    tracing::error!("not a group request: {other:?}");
                    Output::default()
                }
            };
            self.persist_and_route_guarded(state, out, guard.as_ref());
        }
        self.wake.notify_one();
        let cancel = state.cancel.clone();
        Reply::Later(Box::pin(async move {
            // A delayed JoinGroup can wait for a whole rebalance; shutdown must not wait for it.
            let resp = tokio::select! {
                r = rx => r,
                _ = cancel.cancelled() => return None,
            };
            match resp {
                Ok(ResponseKind::OffsetCommit(r)) if !unknown.is_empty() => {
                    ctx.encode(ResponseKind::OffsetCommit(merge_offset_commit(unknown, r)))
                }
                Ok(ResponseKind::OffsetDelete(r)) if !unknown.is_empty() => {
                    ctx.encode(ResponseKind::OffsetDelete(merge_offset_delete(unknown, r)))
                }
                Ok(ResponseKind::TxnOffsetCommit(r)) if !unknown.is_empty() => {
                    let r = merge_txn_offset_commit(unknown, r);
                    ctx.encode(ResponseKind::TxnOffsetCommit(r))
                }
                Ok(resp) => ctx.encode(resp),
                // Dropped: the records could not be persisted.
                Err(_) => None,
            }
        }))
    }

    /// Appends the output's records (called with the coordinator lock held, so records reach
    /// the log in the order the coordinator emitted them), then delivers its responses once
    /// the high watermark of their groups' partitions reaches the log end (Kafka's coordinator
    /// writes complete at acks=-1: replicated to the ISR, on disk; a response that wrote
    /// nothing still waits for earlier writes it may have read). A failed append or wait
    /// answers with Kafka's error for the request.
    fn persist_and_route(self: &Arc<Self>, state: &Arc<BrokerState>, out: Output) {
        self.persist_and_route_guarded(state, out, None);
    }

    /// [`Groups::persist_and_route`] for a TxnOffsetCommit's step: its transactional batch
    /// is appended only if its verification `guard` still holds (KAFKA-17754).
    fn persist_and_route_guarded(
        self: &Arc<Self>,
        state: &Arc<BrokerState>,
        out: Output,
        guard: Option<&TxnOffsetsGuard>,
    ) {
        crate::metrics::METRICS.group_events(&out.stats);
        // One batch per partition for plain records; one transactional batch (the producer's
        // id and epoch, no sequence) per TxnOffsetCommit.
        let mut by_partition: BTreeMap<i32, Vec<NewRecord>> = BTreeMap::new();
        let now = state.clock.now_ms();
        for r in out.records {
            by_partition
                .entry(r.partition)
                .or_default()
                .push(NewRecord::new(Some(r.key), r.value, now));
        }
        // (partition, batch, the producer of a transactional batch)
        let mut batches: Vec<(i32, BatchBuilder, Option<i64>)> = Vec::new();
        for (p, records) in by_partition {
            let mut builder = BatchBuilder::new(Compression::None);
            for r in records {
                builder.push(r);
            }
            batches.push((p, builder, None));
        }
        for t in out.txn_records {
            let mut builder = BatchBuilder::new(Compression::None)
                .producer(t.producer_id, t.producer_epoch, record::NO_SEQUENCE)
                .transactional(true);
            for r in t.records {
                builder.push(NewRecord::new(Some(r.key), r.value, now));
            }
            batches.push((t.partition, builder, Some(t.producer_id)));
        }
        let loaded = self.loaded().clone();
        // Partitions whose append failed, with the error their requests get.
        let mut failed: BTreeMap<i32, ErrorCode> = BTreeMap::new();
        let mut appended = false;
        for (p, builder, txn_producer) in batches {
            if failed.contains_key(&p) {
                continue;
            }
            let (partition, epoch) = match (state.replicas.get(OFFSETS_TOPIC, p), loaded.get(&p)) {
                (Some(partition), Some(&epoch)) => (partition, epoch),
                _ => {
                    failed.insert(p, ErrorCode::NotLeaderOrFollower);
                    continue;
                }
            };
            let guarded = guard
                .filter(|g| txn_producer == Some(g.producer_id) && g.partition.tp.partition == p);
            let result = match builder.build() {
                Ok(batch) => match guarded {
                    Some(g) => partition.append_txn_offsets(
                        batch,
                        epoch,
                        g.producer_id,
                        g.producer_epoch,
                        g.guard,
                    ),
                    None => partition.append_as_coordinator(batch, epoch),
                },
                Err(e) => {
                    tracing::error!(partition = p, error = %e, "building a {OFFSETS_TOPIC} batch failed");
                    Err(ErrorCode::UnknownServerError)
                }
            };
            match result {
                Ok(_) => appended = true,
                Err(e) => {
                    tracing::error!(partition = p, error = %e.name(), "writing {OFFSETS_TOPIC} failed");
                    failed.insert(p, e);
                    if e != ErrorCode::NotLeaderOrFollower {
                        // The coordinator changed its state for records the log refused.
                        self.reload_later(state, p, epoch);
                    }
                }
            }
        }
        if appended {
            state.notify_data();
        }
        let mut routes = Vec::with_capacity(out.responses.len());
        {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            for (token, resp) in out.responses {
                if let Some(Pending { tx, partitions }) = pending.remove(&token) {
                    routes.push((tx, resp, partitions));
                }
            }
        }
        // One wait per partition the responses depend on: until its HW reaches its log end
        // as it is now (after this output's appends).
        let mut waits: BTreeMap<i32, tokio::sync::oneshot::Receiver<ErrorCode>> = BTreeMap::new();
        for p in routes.iter().flat_map(|(_, _, ps)| ps.iter()) {
            if failed.contains_key(p) || waits.contains_key(p) {
                continue;
            }
            match state.replicas.get(OFFSETS_TOPIC, *p) {
                None => {
                    failed.insert(*p, ErrorCode::NotLeaderOrFollower);
                }
                Some(partition) => {
                    let end = partition.log.log_end_offset();
                    if !partition.is_committed(end) {
                        waits.insert(*p, partition.wait_for_ack(end, WRITE_TIMEOUT_MS));
                    }
                }
            }
        }
        let deliver =
            move |routes: Vec<(oneshot::Sender<ResponseKind>, ResponseKind, Vec<i32>)>,
                  errors: &BTreeMap<i32, ErrorCode>| {
                for (tx, resp, partitions) in routes {
                    let resp = match partitions.iter().find_map(|p| errors.get(p)) {
                        None => resp,
                        Some(e) => failed_response(resp, append_error(*e)),
                    };
                    let _ = tx.send(resp);
                }
            };
        if waits.is_empty() {
            deliver(routes, &failed);
            return;
        }
        state.tasks.spawn(async move {
            let mut errors = failed;
            for (p, rx) in waits {
                let e = rx.await.unwrap_or(ErrorCode::NotLeaderOrFollower);
                if e != ErrorCode::None {
                    tracing::debug!(partition = p, error = %e.name(), "{OFFSETS_TOPIC} write not committed");
                    errors.insert(p, e);
                }
            }
            deliver(routes, &errors);
        });
    }

    /// KIP-890 verification of a TxnOffsetCommit: the group's `__consumer_offsets` partition
    /// must be in the producer's ongoing transaction (`verified`: the answer a remote
    /// coordinator gave, else the local coordinator is asked). Errors as Kafka maps them for
    /// this API.
    fn verify_txn_offsets(
        &self,
        state: &BrokerState,
        r: &TxnOffsetCommitRequest,
        version: i16,
        verified: Option<Result<(), ErrorCode>>,
    ) -> Result<(), ErrorCode> {
        let verdict = verified.unwrap_or_else(|| {
            let partition = self.lock().partition_for(&r.group_id.0);
            let tp = [(OFFSETS_TOPIC.to_string(), partition)]
                .into_iter()
                .collect();
            state.txns.verify(
                &r.transactional_id.0,
                r.producer_id.0,
                r.producer_epoch,
                &tp,
            )
        });
        verdict.map_err(|e| match e {
            ErrorCode::ProducerFenced => ErrorCode::InvalidProducerEpoch,
            ErrorCode::TransactionAbortable if version < 4 => ErrorCode::InvalidTxnState,
            ErrorCode::ConcurrentTransactions
            | ErrorCode::NotCoordinator
            | ErrorCode::CoordinatorNotAvailable
            | ErrorCode::CoordinatorLoadInProgress => ErrorCode::CoordinatorNotAvailable,
            e => e,
        })
    }

    /// A transaction marker is durable on `__consumer_offsets` partition `partition`: the
    /// producer's transactional offsets there are committed (or dropped on abort).
    pub fn complete_txn(&self, producer_id: i64, partition: i32, commit: bool) {
        self.lock().complete_txn(producer_id, partition, commit);
    }

    /// Drops committed offsets of deleted topics (tombstones in `__consumer_offsets`).
    pub fn topics_deleted(self: &Arc<Self>, state: &Arc<BrokerState>, topics: &[&str]) {
        if self.loaded().is_empty() || topics.is_empty() {
            return;
        }
        let mut c = self.lock();
        let out = c.delete_topic_offsets(topics);
        self.persist_and_route(state, out);
    }

    /// Drives the coordinator's timers (session expiry, rebalance completion, offset
    /// retention) until the broker stops.
    pub async fn run_timers(self: Arc<Self>, state: Arc<BrokerState>) {
        loop {
            let now = state.clock.now_ms();
            let next = self.lock().next_deadline();
            let wait_ms = next.map_or(1000, |d| (d - now).clamp(0, 1000));
            tokio::select! {
                _ = state.cancel.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(wait_ms as u64)) => {}
            }
            let now = state.clock.now_ms();
            let mut c = self.lock();
            if c.next_deadline().is_some_and(|d| d <= now) {
                let out = c.tick(now);
                self.persist_and_route(&state, out);
            }
        }
    }
}

/// Partitions a request named that the cluster does not have, by topic, in request order.
type UnknownPartitions = Vec<(TopicName, Vec<i32>)>;

/// Moves the partitions of `$topics` (request topics with `name` and `partitions`) that
/// `$image` does not have into `$unknown`, dropping topics left empty.
macro_rules! take_unknown {
    ($image:expr, $topics:expr, $unknown:expr) => {{
        for t in $topics.iter_mut() {
            let count = $image.topic(&t.name).map_or(0, |i| i.partitions.len());
            let (known, missing): (Vec<_>, Vec<_>) = std::mem::take(&mut t.partitions)
                .into_iter()
                .partition(|p| usize::try_from(p.partition_index).is_ok_and(|i| i < count));
            if !missing.is_empty() {
                let indexes = missing.iter().map(|p| p.partition_index).collect();
                $unknown.push((t.name.clone(), indexes));
            }
            t.partitions = known;
        }
        $topics.retain(|t| !t.partitions.is_empty());
    }};
}

/// Takes the partitions of unknown topics (or past a topic's partition count) out of an
/// OffsetCommit, OffsetDelete or TxnOffsetCommit request; other requests pass unchanged.
fn split_unknown_partitions(
    image: &metadata::MetadataImage,
    body: RequestKind,
) -> (RequestKind, UnknownPartitions) {
    let mut unknown = Vec::new();
    let body = match body {
        RequestKind::OffsetCommit(mut r) => {
            take_unknown!(image, r.topics, unknown);
            RequestKind::OffsetCommit(r)
        }
        RequestKind::OffsetDelete(mut r) => {
            take_unknown!(image, r.topics, unknown);
            RequestKind::OffsetDelete(r)
        }
        RequestKind::TxnOffsetCommit(mut r) => {
            take_unknown!(image, r.topics, unknown);
            RequestKind::TxnOffsetCommit(r)
        }
        other => other,
    };
    (body, unknown)
}

/// The unknown partitions first (UNKNOWN_TOPIC_OR_PARTITION), then the coordinator's topics,
/// merged by topic name as Kafka's response builders do.
macro_rules! merge_unknown {
    ($unknown:expr, $coordinator_topics:expr, $topic:ty, $partition:ty) => {{
        let mut topics: Vec<$topic> = Vec::new();
        let error = ErrorCode::UnknownTopicOrPartition.code();
        for (name, parts) in $unknown {
            let partitions = parts.into_iter().map(|p| {
                <$partition>::default()
                    .with_partition_index(p)
                    .with_error_code(error)
            });
            match topics.iter_mut().find(|t| t.name == name) {
                Some(t) => t.partitions.extend(partitions),
                None => topics.push(
                    <$topic>::default()
                        .with_name(name)
                        .with_partitions(partitions.collect()),
                ),
            }
        }
        for t in $coordinator_topics {
            match topics.iter_mut().find(|u| u.name == t.name) {
                Some(u) => u.partitions.extend(t.partitions),
                None => topics.push(t),
            }
        }
        topics
    }};
}

fn merge_offset_commit(
    unknown: UnknownPartitions,
    coordinator: OffsetCommitResponse,
) -> OffsetCommitResponse {
    let topics = merge_unknown!(
        unknown,
        coordinator.topics,
        OffsetCommitResponseTopic,
        OffsetCommitResponsePartition
    );
    OffsetCommitResponse::default()
        .with_throttle_time_ms(coordinator.throttle_time_ms)
        .with_topics(topics)
}

fn merge_txn_offset_commit(
    unknown: UnknownPartitions,
    coordinator: TxnOffsetCommitResponse,
) -> TxnOffsetCommitResponse {
    let topics = merge_unknown!(
        unknown,
        coordinator.topics,
        TxnOffsetCommitResponseTopic,
        TxnOffsetCommitResponsePartition
    );
    TxnOffsetCommitResponse::default()
        .with_throttle_time_ms(coordinator.throttle_time_ms)
        .with_topics(topics)
}

/// A group-level error replaces everything (Kafka's `OffsetDeleteResponse.Builder.merge`).
fn merge_offset_delete(
    unknown: UnknownPartitions,
    coordinator: OffsetDeleteResponse,
) -> OffsetDeleteResponse {
    if coordinator.error_code != 0 {
        return coordinator;
    }
    let topics = merge_unknown!(
        unknown,
        coordinator.topics,
        OffsetDeleteResponseTopic,
        OffsetDeleteResponsePartition
    );
    OffsetDeleteResponse::default()
        .with_throttle_time_ms(coordinator.throttle_time_ms)
        .with_topics(topics)
}

/// A TxnOffsetCommit response with `e` on every partition.
pub(crate) fn txn_offset_commit_error(
    r: &TxnOffsetCommitRequest,
    e: ErrorCode,
) -> TxnOffsetCommitResponse {
    let topics = r
        .topics
        .iter()
        .map(|t| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(e.code())
                        })
                        .collect(),
                )
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// The `__consumer_offsets` partitions of the groups a request names (none for ListGroups).
fn group_partitions(c: &GroupCoordinator, body: &RequestKind) -> Vec<i32> {
    let ids: Vec<&str> = match body {
        RequestKind::JoinGroup(r) => vec![&r.group_id.0],
        RequestKind::SyncGroup(r) => vec![&r.group_id.0],
        RequestKind::Heartbeat(r) => vec![&r.group_id.0],
        RequestKind::LeaveGroup(r) => vec![&r.group_id.0],
        RequestKind::OffsetCommit(r) => vec![&r.group_id.0],
        RequestKind::OffsetDelete(r) => vec![&r.group_id.0],
        RequestKind::TxnOffsetCommit(r) => vec![&r.group_id.0],
        RequestKind::ConsumerGroupHeartbeat(r) => vec![&r.group_id.0],
        RequestKind::OffsetFetch(r) if r.groups.is_empty() => vec![&r.group_id.0],
        RequestKind::OffsetFetch(r) => r.groups.iter().map(|g| g.group_id.0.as_str()).collect(),
        RequestKind::DescribeGroups(r) => r.groups.iter().map(|g| g.0.as_str()).collect(),
        RequestKind::DeleteGroups(r) => r.groups_names.iter().map(|g| g.0.as_str()).collect(),
        RequestKind::ConsumerGroupDescribe(r) => r.group_ids.iter().map(|g| g.0.as_str()).collect(),
        _ => Vec::new(),
    };
    let mut partitions: Vec<i32> = ids.into_iter().map(|id| c.partition_for(id)).collect();
    partitions.sort_unstable();
    partitions.dedup();
    partitions
}

/// The error a group request gets when its coordinator write failed or was not replicated
/// in time (Kafka's `GroupCoordinatorService.normalizeException`).
fn append_error(e: ErrorCode) -> ErrorCode {
    match e {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend
        | ErrorCode::RequestTimedOut => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower
        | ErrorCode::FencedLeaderEpoch
        | ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
        // A TxnOffsetCommit whose transaction a marker ended after its verification.
        ErrorCode::InvalidTxnState => ErrorCode::InvalidTxnState,
        _ => ErrorCode::UnknownServerError,
    }
}

/// `resp` with error `e` in place of what the coordinator answered (its write did not
/// commit): every error field the response has is set, its payload left as it is.
fn failed_response(resp: ResponseKind, e: ErrorCode) -> ResponseKind {
    let code = e.code();
    match resp {
        ResponseKind::OffsetCommit(mut r) => {
            for p in r.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                p.error_code = code;
            }
            ResponseKind::OffsetCommit(r)
        }
        ResponseKind::TxnOffsetCommit(mut r) => {
            for p in r.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                p.error_code = code;
            }
            ResponseKind::TxnOffsetCommit(r)
        }
        ResponseKind::OffsetFetch(mut r) => {
            r.error_code = code;
            for g in r.groups.iter_mut() {
                g.error_code = code;
                g.topics.clear();
            }
            r.topics.clear();
            ResponseKind::OffsetFetch(r)
        }
        ResponseKind::JoinGroup(mut r) => {
            r.error_code = code;
            ResponseKind::JoinGroup(r)
        }
        ResponseKind::SyncGroup(mut r) => {
            r.error_code = code;
            r.assignment = Bytes::new();
            ResponseKind::SyncGroup(r)
        }
        ResponseKind::Heartbeat(mut r) => {
            r.error_code = code;
            ResponseKind::Heartbeat(r)
        }
        ResponseKind::LeaveGroup(mut r) => {
            r.error_code = code;
            ResponseKind::LeaveGroup(r)
        }
        ResponseKind::OffsetDelete(mut r) => {
            r.error_code = code;
            r.topics.clear();
            ResponseKind::OffsetDelete(r)
        }
        ResponseKind::DeleteGroups(mut r) => {
            for g in r.results.iter_mut() {
                g.error_code = code;
            }
            ResponseKind::DeleteGroups(r)
        }
        ResponseKind::DescribeGroups(mut r) => {
            for g in r.groups.iter_mut() {
                g.error_code = code;
                g.members.clear();
            }
            ResponseKind::DescribeGroups(r)
        }
        ResponseKind::ConsumerGroupHeartbeat(mut r) => {
            r.error_code = code;
            r.error_message = None;
            r.assignment = None;
            ResponseKind::ConsumerGroupHeartbeat(r)
        }
        ResponseKind::ConsumerGroupDescribe(mut r) => {
            for g in r.groups.iter_mut() {
                g.error_code = code;
                g.members.clear();
            }
            ResponseKind::ConsumerGroupDescribe(r)
        }
        other => other,
    }
}
