//! Replication's I/O: what the sans-IO [`replication::Replica`] of each hosted partition asks
//! for and cannot do under its lock. One event loop per broker receives the events
//! [`crate::replica::Partition`] emits and runs them:
//! - `Fetch`: handed to the fetcher task of the leader's broker. A fetcher gathers the fetch
//!   plans of every partition it follows from that leader into one Fetch request (Kafka's
//!   Fetch with `replica_id` = this broker, v12: current leader epoch, last fetched epoch,
//!   diverging epoch in the answer), long-polls, and feeds each partition's answer back to
//!   its replica (which appends, truncates, and asks for the next fetch once the appended
//!   records are on disk);
//! - `Flush`: waits for the log's group-committed fsync, then tells the replica (the leader
//!   counts its own durable end in the HW; a follower fetches on only after an fsync, so its
//!   next fetch offset is durable progress: acks=all means on disk on every ISR member);
//! - `AlterPartition`: the leader's ISR change goes to the active controller (KIP-497); the
//!   replica uses the new ISR once the controller answers with it (or the image shows it).
//!
//! A fetcher leaves out the partitions its broker's follower throttle holds back (KIP-73,
//! Kafka's `shouldFollowerThrottle`: a replica the topic's
//! `follower.replication.throttled.replicas` names, not in sync with the leader's HW of its
//! last answer, while `follower.replication.throttled.rate` is exceeded) and records the
//! bytes fetched for throttled replicas; the leader's side is in `handlers::fetch`.
//!
//! A ticker drives `Replica::tick` (ISR shrink, acks=all timeouts, fetch retries).
//! acks=all waits are oneshot channels completed by the replica's `AckDone` actions.

use crate::replica::Partition;
use crate::state::BrokerState;
use model::{BrokerConfig, ErrorCode, NodeId, TopicConfig};
use protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use protocol::messages::{BrokerId, FetchRequest, TopicName};
use replication::{AlterPartitionRequest, FetchPlan, ReplicaConfig};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use storage::Clock;
use tokio::sync::{mpsc, oneshot, watch};

/// How often every replica's `tick` runs.
const TICK_MS: u64 = 100;
/// Bytes a follower asks for per partition and per Fetch (Kafka's `replica.fetch.max.bytes`
/// and `replica.fetch.response.max.bytes` defaults).
const REPLICA_FETCH_PARTITION_BYTES: i32 = 1024 * 1024;
const REPLICA_FETCH_RESPONSE_BYTES: i32 = 10 * 1024 * 1024;

/// What a partition's replica asks the event loop for.
pub enum Event {
    Fetch {
        partition: Arc<Partition>,
        plan: FetchPlan,
    },
    Flush {
        partition: Arc<Partition>,
        offset: i64,
    },
    AlterPartition {
        partition: Arc<Partition>,
        request: AlterPartitionRequest,
    },
}

/// Shared by every hosted partition: settings, the clock, acks=all waits, the event queue
/// and the data-version signal Fetch long-polls wait on. Lives as long as the broker.
pub struct ReplicationContext {
    node_id: NodeId,
    replica_lag_time_max_ms: i64,
    replica_fetch_wait_max_ms: i64,
    replica_fetch_backoff_ms: i64,
    clock: Arc<dyn Clock>,
    data_version: Arc<watch::Sender<u64>>,
    acks: Mutex<HashMap<u64, oneshot::Sender<ErrorCode>>>,
    next_ack: AtomicU64,
    events: mpsc::UnboundedSender<Event>,
}

impl std::fmt::Debug for ReplicationContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicationContext")
            .field("node_id", &self.node_id)
            .finish()
    }
}

impl ReplicationContext {
    /// The context and the receiving end of its event queue (for [`run`]).
    pub fn new(
        config: &BrokerConfig,
        clock: Arc<dyn Clock>,
        data_version: Arc<watch::Sender<u64>>,
    ) -> (Arc<ReplicationContext>, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let ctx = ReplicationContext {
            node_id: config.node_id,
            replica_lag_time_max_ms: config.replica_lag_time_max_ms,
            replica_fetch_wait_max_ms: config.replica_fetch_wait_max_ms,
            replica_fetch_backoff_ms: config.replica_fetch_backoff_ms,
            clock,
            data_version,
            acks: Mutex::new(HashMap::new()),
            next_ack: AtomicU64::new(1),
            events: tx,
        };
        (Arc::new(ctx), rx)
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// The replica settings of a partition with this log config.
    pub fn replica_config(&self, topic: &TopicConfig) -> ReplicaConfig {
        let mut c = ReplicaConfig::new(self.node_id);
        c.replica_lag_time_max_ms = self.replica_lag_time_max_ms;
        // Resolved per topic (override, then the broker's `min.insync.replicas`).
        c.min_insync_replicas = topic.min_insync_replicas.max(1) as usize;
        c.fetch_backoff_ms = self.replica_fetch_backoff_ms;
        // A fetch long-polls up to replica.fetch.wait.max.ms; give it that plus slack.
        c.fetch_timeout_ms = self.replica_fetch_wait_max_ms + 30_000;
        c
    }

    /// Wakes Fetch long-polls: a high watermark or a log end moved.
    pub fn notify_data(&self) {
        self.data_version.send_modify(|v| *v = v.wrapping_add(1));
    }

    pub fn send(&self, event: Event) {
        // The receiver lives as long as the broker; after shutdown events are moot.
        let _ = self.events.send(event);
    }

    pub fn register_ack(&self) -> (u64, oneshot::Receiver<ErrorCode>) {
        let id = self.next_ack.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.acks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        (id, rx)
    }

    pub fn complete_ack(&self, id: u64, error: ErrorCode) {
        let tx = self
            .acks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        if let Some(tx) = tx {
            let _ = tx.send(error);
        }
    }
}

/// The event loop and the ticker; returns when the broker shuts down.
pub async fn run(state: Arc<BrokerState>, mut events: mpsc::UnboundedReceiver<Event>) {
    let mut fetchers: HashMap<NodeId, mpsc::UnboundedSender<(Arc<Partition>, FetchPlan)>> =
        HashMap::new();
    let mut ticker = tokio::time::interval(Duration::from_millis(TICK_MS));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let event = tokio::select! {
            _ = state.cancel.cancelled() => return,
            _ = ticker.tick() => {
                for p in state.replicas.all() {
                    p.tick();
                }
                continue;
            }
            e = events.recv() => match e {
                Some(e) => e,
                None => return,
            },
        };
        match event {
            Event::Fetch { partition, plan } => {
                let mut job = Some((partition, plan));
                if let Some(tx) = fetchers.get(&plan.leader) {
                    if let Err(mpsc::error::SendError(j)) = tx.send(job.take().expect("set")) {
                        job = Some(j);
                    }
                }
                if let Some(job) = job {
                    let (tx, rx) = mpsc::unbounded_channel();
                    let _ = tx.send(job);
                    fetchers.insert(plan.leader, tx);
                    state
                        .tasks
                        .spawn(run_fetcher(state.clone(), plan.leader, rx));
                }
            }
            Event::Flush { partition, offset } => {
                state.tasks.spawn(async move {
                    let result = partition.log.wait_durable(offset - 1).await;
                    partition
                        .flush_in_flight
                        .store(false, std::sync::atomic::Ordering::Release);
                    match result {
                        // The log moved under the wait (truncated): nothing to wait for.
                        Ok(()) | Err(storage::StorageError::OffsetOutOfRange { .. }) => {
                            partition.advance_high_watermark()
                        }
                        Err(e) => {
                            tracing::error!(partition = %partition.tp, error = %e, "fsync failed; log offline")
                        }
                    }
                });
            }
            Event::AlterPartition { partition, request } => {
                let state = state.clone();
                state.tasks.clone().spawn(async move {
                    let result = alter_partition(&state, &partition, &request).await;
                    partition.on_alter_partition_response(&request, result);
                });
            }
        }
    }
}

/// A follower's fetcher for the partitions led by `leader`: one Fetch at a time, carrying
/// every partition whose replica asked to fetch.
async fn run_fetcher(
    state: Arc<BrokerState>,
    leader: NodeId,
    mut jobs: mpsc::UnboundedReceiver<(Arc<Partition>, FetchPlan)>,
) {
    let mut link: Option<client::NodeLink> = None;
    let mut backoff = Duration::from_millis(50);
    // Partitions whose last answer carried records: each asks to fetch again only once what
    // it appended is durable. The next fetch waits for them (bounded by
    // `replica.fetch.wait.max.ms`), so it carries their new offsets: sent without them, it
    // would park at the leader (nothing new for the others) and their progress, which the
    // leader's HW waits for (acks=all, coordinator writes), would wait for that long poll.
    let mut appending: std::collections::HashSet<(String, i32)> = Default::default();
    // KIP-73: plans of throttled replicas held back while this broker's follower throttle is
    // exceeded, and the leader's HW in each partition's last answer (whether it is in sync).
    let mut held: HashMap<(String, i32), (Arc<Partition>, FetchPlan)> = HashMap::new();
    let mut leader_hw: HashMap<(String, i32), i64> = HashMap::new();
    let throttle_backoff =
        Duration::from_millis(state.config.replica_fetch_backoff_ms.clamp(10, 10_000) as u64);
    loop {
        let first = if held.is_empty() {
            tokio::select! {
                _ = state.cancel.cancelled() => return,
                j = jobs.recv() => match j {
                    Some(j) => Some(j),
                    None => return,
                },
            }
        } else {
            // Kafka's fetcher, with nothing it may fetch, waits `replica.fetch.backoff.ms`.
            tokio::select! {
                _ = state.cancel.cancelled() => return,
                _ = tokio::time::sleep(throttle_backoff) => None,
                j = jobs.recv() => match j {
                    Some(j) => Some(j),
                    None => return,
                },
            }
        };
        let mut batch: HashMap<(String, i32), (Arc<Partition>, FetchPlan)> =
            std::mem::take(&mut held);
        let mut add = |(p, plan): (Arc<Partition>, FetchPlan)| {
            batch.insert((p.tp.topic.to_string(), p.tp.partition), (p, plan));
        };
        if let Some(first) = first {
            add(first);
        }
        while let Ok(j) = jobs.try_recv() {
            add(j);
        }
        let gather_until = tokio::time::Instant::now()
            + Duration::from_millis(state.config.replica_fetch_wait_max_ms.max(0) as u64);
        while appending.iter().any(|k| !batch.contains_key(k)) {
            tokio::select! {
                _ = state.cancel.cancelled() => return,
                _ = tokio::time::sleep_until(gather_until) => break,
                j = jobs.recv() => match j {
                    Some((p, plan)) => {
                        batch.insert((p.tp.topic.to_string(), p.tp.partition), (p, plan));
                    }
                    None => return,
                },
            }
        }
        appending.clear();
        // Kafka's `shouldFollowerThrottle`: a throttled replica that is not in sync (behind
        // the leader's HW of its last answer) is left out while the throttle is exceeded.
        let follower = crate::quotas::ReplicationSide::Follower;
        if batch.values().any(|(p, _)| p.follower_throttled())
            && state.replication_quotas.is_exceeded(follower)
        {
            let keys: Vec<_> = batch
                .iter()
                .filter(|(k, (p, plan))| {
                    let in_sync = leader_hw
                        .get(*k)
                        .is_some_and(|hw| plan.request.fetch_offset >= *hw);
                    p.follower_throttled() && !in_sync
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in keys {
                if let Some(job) = batch.remove(&k) {
                    held.insert(k, job);
                }
            }
        }
        if batch.is_empty() {
            continue;
        }
        if link.as_ref().is_none_or(|l| l.is_closed()) {
            link = connect(&state, leader).await;
        }
        let Some(l) = &link else {
            fail_all(batch, ErrorCode::NetworkException);
            tokio::select! {
                _ = state.cancel.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_millis(1000));
            continue;
        };
        backoff = Duration::from_millis(50);
        let request = build_request(&state, &batch);
        let response = tokio::select! {
            _ = state.cancel.cancelled() => return,
            r = l.call(&request) => r,
        };
        match response {
            Ok(resp) => {
                let mut throttled_bytes = 0;
                for topic in resp.responses {
                    for pd in topic.partitions {
                        let key = (topic.topic.0.to_string(), pd.partition_index);
                        let Some((p, plan)) = batch.remove(&key) else {
                            continue;
                        };
                        let diverging =
                            (pd.diverging_epoch.epoch >= 0).then_some(model::EpochEndOffset {
                                epoch: pd.diverging_epoch.epoch,
                                end_offset: pd.diverging_epoch.end_offset,
                            });
                        let records = pd.records.filter(|r| !r.is_empty());
                        if let Some(r) = &records {
                            if p.follower_throttled() {
                                throttled_bytes += r.len();
                            }
                        }
                        if pd.error_code == 0 && pd.high_watermark >= 0 {
                            leader_hw.insert(key.clone(), pd.high_watermark);
                        } else {
                            leader_hw.remove(&key);
                        }
                        if records.is_some() {
                            appending.insert(key.clone());
                        }
                        let answer = replication::FetchResponse {
                            error: ErrorCode::from_code(pd.error_code),
                            high_watermark: pd.high_watermark,
                            log_start_offset: pd.log_start_offset,
                            // Fetch answers carry no log end; "unknown" must never look
                            // shorter than this log (that is only an unclean leader).
                            log_end_offset: i64::MAX,
                            diverging_epoch: diverging,
                            has_records: records.is_some(),
                        };
                        p.on_fetch_response(plan.fetch_id, answer, records);
                    }
                }
                // Kafka's `processPartitionData`: every throttled partition's bytes count.
                state
                    .replication_quotas
                    .record(crate::quotas::ReplicationSide::Follower, throttled_bytes);
                // Partitions the answer left out are asked again.
                fail_all(batch, ErrorCode::UnknownServerError);
            }
            Err(e) => {
                tracing::debug!(leader, error = %e, "replica fetch failed");
                link = None;
                fail_all(batch, ErrorCode::NetworkException);
            }
        }
    }
}

fn fail_all(batch: HashMap<(String, i32), (Arc<Partition>, FetchPlan)>, error: ErrorCode) {
    for (_, (p, plan)) in batch {
        let answer = replication::FetchResponse {
            error,
            high_watermark: -1,
            log_start_offset: -1,
            log_end_offset: i64::MAX,
            diverging_epoch: None,
            has_records: false,
        };
        p.on_fetch_response(plan.fetch_id, answer, None);
    }
}

fn build_request(
    state: &BrokerState,
    batch: &HashMap<(String, i32), (Arc<Partition>, FetchPlan)>,
) -> FetchRequest {
    let mut topics: HashMap<&str, Vec<FetchPartition>> = HashMap::new();
    for ((topic, index), (_, plan)) in batch {
        let r = &plan.request;
        topics.entry(topic.as_str()).or_default().push(
            FetchPartition::default()
                .with_partition(*index)
                .with_fetch_offset(r.fetch_offset)
                .with_current_leader_epoch(r.current_leader_epoch.unwrap_or(-1))
                .with_last_fetched_epoch(r.last_fetched_epoch.unwrap_or(-1))
                .with_log_start_offset(-1)
                .with_partition_max_bytes(REPLICA_FETCH_PARTITION_BYTES),
        );
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(state.node_id))
        .with_max_wait_ms(state.config.replica_fetch_wait_max_ms as i32)
        .with_min_bytes(1)
        .with_max_bytes(REPLICA_FETCH_RESPONSE_BYTES)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(
            topics
                .into_iter()
                .map(|(name, partitions)| {
                    FetchTopic::default()
                        .with_topic(TopicName(protocol::StrBytes::from_string(name.to_string())))
                        .with_partitions(partitions)
                })
                .collect(),
        )
}

/// Connects to `leader`'s inter-broker listener, as named in the committed metadata (a
/// connection of its own: a long-poll would hold up anything queued behind it).
async fn connect(state: &BrokerState, leader: NodeId) -> Option<client::NodeLink> {
    let timeout_ms = (state.config.replica_fetch_wait_max_ms as u64) + 30_000;
    crate::peers::connect(state, leader, timeout_ms).await
}

/// Sends a leader's ISR proposal to the active controller; the answer in the replication
/// core's terms (the registration it committed, or Kafka's error).
async fn alter_partition(
    state: &BrokerState,
    partition: &Partition,
    request: &AlterPartitionRequest,
) -> replication::AlterPartitionResult {
    let call = controller::Request::AlterPartition {
        broker_id: request.broker_id,
        broker_epoch: state.broker_epoch.load(Ordering::Acquire),
        topics: vec![(
            partition.topic_id,
            vec![controller::IsrChange {
                partition: partition.tp.partition,
                leader_epoch: request.leader_epoch,
                partition_epoch: request.partition_epoch,
                // Members by id only (broker epoch -1: not checked), as AlterPartition v2.
                new_isr: request.new_isr.iter().map(|id| (*id, -1)).collect(),
                leader_recovery_state: 0,
            }],
        )],
    };
    let answer = match state.controller_call(call).await {
        Ok(controller::Reply::AlterPartition(Ok(topics))) => topics
            .into_iter()
            .next()
            .and_then(|t| t.into_iter().next())
            .unwrap_or_else(|| {
                Err(controller::ControllerError::new(
                    ErrorCode::UnknownServerError,
                    "empty AlterPartition answer",
                ))
            }),
        Ok(controller::Reply::AlterPartition(Err(e))) | Err(e) => Err(e),
        Ok(_) => Err(controller::ControllerError::new(
            ErrorCode::UnknownServerError,
            "unexpected controller answer",
        )),
    };
    match answer {
        Ok(reg) => {
            tracing::info!(partition = %partition.tp, isr = ?reg.isr, partition_epoch = reg.partition_epoch, "ISR changed");
            let replicas = image_replicas(state, partition).unwrap_or(reg.replicas);
            Ok(replication::PartitionState {
                leader: (reg.leader >= 0).then_some(reg.leader),
                leader_epoch: reg.leader_epoch,
                partition_epoch: reg.partition_epoch,
                replicas,
                isr: reg.isr,
            })
        }
        Err(e) => {
            tracing::debug!(partition = %partition.tp, error = %e, "AlterPartition refused");
            Err(e.code)
        }
    }
}

fn image_replicas(state: &BrokerState, partition: &Partition) -> Option<Vec<NodeId>> {
    state
        .image()
        .partition(partition.topic_id, partition.tp.partition)
        .map(|r| r.replicas.clone())
}
