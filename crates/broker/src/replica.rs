//! The partitions this broker hosts: their logs and their replication state.
//!
//! A partition is hosted on every broker among its replicas. Each carries the sans-IO
//! [`replication::Replica`] (role, epochs, ISR, follower progress, high watermark, acks=all
//! waits) behind one lock, next to its log; [`Partition::drive`] runs an input through it and
//! carries out the actions it returns (the disk ones at once, under the lock; sending fetches,
//! waiting for fsyncs and talking to the controller through [`crate::replicator`]'s event
//! loop). Readers use lock-free mirrors (leadership, leader epoch, high watermark).

use crate::replicator::{Event, ReplicationContext};
use bytes::Bytes;
use model::{EpochEndOffset, ErrorCode, LeaderEpoch, Offset, TopicConfig, TopicId, TopicPartition};
use replication::{Action, LogView, Replica};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use storage::{AppendInfo, Log};

/// The replication core's view of a log: the values the log keeps in memory.
pub struct LogState<'a>(pub &'a Log);

impl LogView for LogState<'_> {
    fn log_start_offset(&self) -> Offset {
        self.0.log_start_offset()
    }
    fn log_end_offset(&self) -> Offset {
        self.0.log_end_offset()
    }
    fn durable_offset(&self) -> Offset {
        self.0.durable_offset()
    }
    fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.0.latest_epoch()
    }
    fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> EpochEndOffset {
        self.0.end_offset_for_epoch(epoch)
    }
}

/// One hosted partition.
///
/// Concurrency: `replica` is a std mutex held only for one input and the disk actions it
/// causes (appends, truncations, epoch assignments), never across an `.await`; everything
/// else is read through atomics.
pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: TopicId,
    pub log: Arc<Log>,
    replica: Mutex<Replica>,
    ctx: Arc<ReplicationContext>,
    /// Mirrors of the replica's state, for readers without the lock.
    leader_epoch: AtomicI32,
    leader: AtomicBool,
    /// Offsets below it are committed and visible to consumers. *Invariant:* HW <= LEO.
    high_watermark: AtomicI64,
    /// A wait for the log's group-committed fsync is under way (one at a time).
    pub(crate) flush_in_flight: AtomicBool,
    /// KIP-890 verification of transactional writes, serialised with transaction markers.
    pub txn: crate::txn_partition::TxnGuards,
    /// The topic's bytes/records in/out counters (shared by its partitions).
    pub stats: Arc<crate::metrics::TopicStats>,
    /// Whether the topic's `leader.replication.throttled.replicas` /
    /// `follower.replication.throttled.replicas` name this broker's replica (KIP-73), from
    /// the topic config, updated with it.
    leader_throttled: AtomicBool,
    follower_throttled: AtomicBool,
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition")
            .field("tp", &self.tp)
            .field("hw", &self.high_watermark())
            .finish()
    }
}

impl Partition {
    /// A hosted partition with no role yet: `apply_metadata` makes it leader or follower.
    /// Its high watermark starts at `hw` (the high-watermark checkpoint's entry) clamped to
    /// the recovered log, else at the log start (nothing is known to be committed until the
    /// replicas say so; a single replica's is its log end at once).
    pub fn new(
        tp: TopicPartition,
        topic_id: TopicId,
        log: Log,
        ctx: Arc<ReplicationContext>,
        hw: Option<i64>,
    ) -> Partition {
        let topic_config = log.config();
        let config = ctx.replica_config(&topic_config);
        let (leader_throttled, follower_throttled) = throttled(&topic_config, &tp, ctx.node_id());
        let start = log.log_start_offset();
        let replica = Replica::new(config, hw.unwrap_or(start), &LogState(&log));
        let hw = replica.high_watermark();
        Partition {
            stats: crate::metrics::METRICS.topic(&tp.topic),
            tp,
            topic_id,
            log: Arc::new(log),
            replica: Mutex::new(replica),
            ctx,
            leader_epoch: AtomicI32::new(-1),
            leader: AtomicBool::new(false),
            high_watermark: AtomicI64::new(hw),
            flush_in_flight: AtomicBool::new(false),
            txn: Default::default(),
            leader_throttled: AtomicBool::new(leader_throttled),
            follower_throttled: AtomicBool::new(follower_throttled),
        }
    }

    /// Whether what this broker sends as the leader to followers of this partition counts
    /// against its `leader.replication.throttled.rate` (Kafka's leader quota `isThrottled`).
    pub fn leader_throttled(&self) -> bool {
        self.leader_throttled.load(Ordering::Relaxed)
    }

    /// Whether what this broker fetches as a follower of this partition counts against its
    /// `follower.replication.throttled.rate`.
    pub fn follower_throttled(&self) -> bool {
        self.follower_throttled.load(Ordering::Relaxed)
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    /// Whether this broker is the partition's leader.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Acquire)
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
    }

    /// The last stable offset: the high watermark, or the first offset of the oldest open
    /// transaction if that is lower. read_committed fetches stop here.
    pub fn last_stable_offset(&self) -> i64 {
        let hw = self.high_watermark();
        self.log
            .first_unstable_offset()
            .map_or(hw, |first| first.min(hw))
    }

    /// Runs one input through the replica and carries out what it decides. `fetched` holds
    /// the records of the fetch answer being handled (for `AppendFetched`).
    pub fn drive<R>(
        self: &Arc<Self>,
        input: impl FnOnce(&mut Replica, &LogState<'_>, i64) -> (R, Vec<Action>),
        fetched: Option<Bytes>,
    ) -> R {
        let now = self.ctx.now_ms();
        let mut replica = self.replica.lock().unwrap_or_else(|e| e.into_inner());
        let view = LogState(&self.log);
        let (result, actions) = input(&mut replica, &view, now);
        self.execute(&mut replica, actions, fetched, now);
        result
    }

    fn execute(
        self: &Arc<Self>,
        replica: &mut Replica,
        actions: Vec<Action>,
        mut fetched: Option<Bytes>,
        now: i64,
    ) {
        let mut queue: VecDeque<Action> = actions.into();
        let mut hw_moved = false;
        while let Some(action) = queue.pop_front() {
            let view = LogState(&self.log);
            match action {
                Action::HighWatermark(hw) => {
                    self.high_watermark.store(hw, Ordering::Release);
                    hw_moved = true;
                }
                Action::AckDone { id, error } => self.ctx.complete_ack(id, error),
                Action::AlterPartition(request) => self.ctx.send(Event::AlterPartition {
                    partition: self.clone(),
                    request,
                }),
                Action::AssignLeaderEpoch {
                    epoch,
                    start_offset,
                } => {
                    debug_assert_eq!(start_offset, self.log.log_end_offset());
                    if let Err(e) = self.log.assign_leader_epoch(epoch) {
                        tracing::error!(partition = %self.tp, epoch, error = %e, "recording the leader epoch failed");
                    }
                }
                Action::TruncatingBelowHighWatermark {
                    offset,
                    high_watermark,
                } => {
                    tracing::warn!(partition = %self.tp, offset, high_watermark, leader_epoch = replica.leader_epoch(), "truncating below the high watermark: records this replica saw committed are not on the elected leader (an unclean leader election, or a broken peer); following the leader as Kafka does");
                }
                Action::Truncate { offset } => {
                    tracing::info!(partition = %self.tp, offset, log_end = self.log.log_end_offset(), "truncating by the leader epoch lineage");
                    if let Err(e) = self.log.truncate_to(offset) {
                        tracing::error!(partition = %self.tp, offset, error = %e, "truncation failed");
                    }
                    queue.extend(replica.on_log_changed(now, &view));
                }
                Action::TruncateFullyAndStartAt { offset } => {
                    tracing::info!(partition = %self.tp, offset, "restarting the log at the leader's log start");
                    if let Err(e) = self.log.truncate_fully_and_start_at(offset) {
                        tracing::error!(partition = %self.tp, offset, error = %e, "restarting the log failed");
                    }
                    queue.extend(replica.on_log_changed(now, &view));
                }
                Action::AppendFetched => {
                    if let Some(records) = fetched.take() {
                        if let Err(e) = self.log.append_replicated(records) {
                            tracing::warn!(partition = %self.tp, error = %e, "appending replicated records failed");
                        }
                    }
                    queue.extend(replica.on_log_changed(now, &view));
                }
                Action::Flush { offset } => {
                    if !self.flush_in_flight.swap(true, Ordering::AcqRel) {
                        self.ctx.send(Event::Flush {
                            partition: self.clone(),
                            offset,
                        });
                    }
                }
                Action::Fetch(plan) => self.ctx.send(Event::Fetch {
                    partition: self.clone(),
                    plan,
                }),
            }
        }
        self.leader.store(replica.is_leader(), Ordering::Release);
        if let Some(epoch) = replica.leader_epoch() {
            self.leader_epoch.fetch_max(epoch, Ordering::AcqRel);
        }
        if hw_moved {
            self.ctx.notify_data();
        }
    }

    /// A changed topic config (AlterConfigs, dynamic broker defaults): the log's settings and
    /// the replica's `min.insync.replicas`, at once.
    pub fn update_config(self: &Arc<Self>, config: TopicConfig) {
        let min_isr = self.ctx.replica_config(&config).min_insync_replicas;
        let (leader, follower) = throttled(&config, &self.tp, self.ctx.node_id());
        self.leader_throttled.store(leader, Ordering::Relaxed);
        self.follower_throttled.store(follower, Ordering::Relaxed);
        self.log.update_config(config);
        self.drive(
            |r, log, now| {
                if r.set_min_insync_replicas(min_isr) {
                    ((), r.on_log_changed(now, log))
                } else {
                    ((), Vec::new())
                }
            },
            None,
        );
    }

    /// Applies the partition's committed state from the metadata image.
    pub fn apply_metadata(self: &Arc<Self>, state: replication::PartitionState) {
        self.drive(|r, log, now| ((), r.apply_metadata(now, state, log)), None);
    }

    /// The log changed outside a leader append through [`Partition::append_as_leader`] (a
    /// transaction marker, a coordinator's records): lets the replica move the HW.
    pub fn advance_high_watermark(self: &Arc<Self>) {
        self.drive(|r, log, now| ((), r.on_log_changed(now, log)), None);
    }

    /// After a log-start move (DeleteRecords, retention), pull the mirrored HW within the log.
    pub fn clamp_high_watermark(self: &Arc<Self>) {
        self.advance_high_watermark();
        let start = self.log.log_start_offset();
        self.high_watermark.fetch_max(start, Ordering::AcqRel);
    }

    /// A client's append on the leader: Kafka's checks (leadership, min.insync.replicas for
    /// acks=all), the append stamped with the current leader epoch, the HW recomputed; all
    /// under the replica lock, so leadership cannot change in between.
    pub fn append_as_leader(
        self: &Arc<Self>,
        records: Bytes,
        acks_all: bool,
    ) -> Result<AppendInfo, (ErrorCode, String)> {
        self.drive(
            |r, log, now| match r.check_produce(acks_all) {
                Err(e) => (Err((e, e.name().to_string())), Vec::new()),
                Ok(epoch) => match self.log.append(records, epoch) {
                    Ok(info) => (Ok(info), r.on_log_changed(now, log)),
                    Err(e) => (Err((e.error_code(), e.to_string())), Vec::new()),
                },
            },
            None,
        )
    }

    /// A coordinator's append to an internal partition (`__consumer_offsets`,
    /// `__transaction_state`) it serves at `leader_epoch`: refused with
    /// NOT_LEADER_OR_FOLLOWER unless this replica still leads the partition at that very
    /// epoch (checked under the replica lock, so a coordinator that loaded the partition at an
    /// older epoch never writes into a newer leader's log); no `min.insync.replicas` check
    /// before the append, as Kafka's coordinators append (the HW wait that answers the
    /// request carries it).
    pub fn append_as_coordinator(
        self: &Arc<Self>,
        records: Bytes,
        leader_epoch: i32,
    ) -> Result<AppendInfo, ErrorCode> {
        self.drive(
            |r, log, now| {
                if !r.is_leader() || r.leader_epoch() != Some(leader_epoch) {
                    return (Err(ErrorCode::NotLeaderOrFollower), Vec::new());
                }
                match self.log.append_as_coordinator(records, leader_epoch) {
                    Ok(info) => (Ok(info), r.on_log_changed(now, log)),
                    Err(e) => (Err(e.error_code()), Vec::new()),
                }
            },
            None,
        )
    }

    /// Whether every record below `offset` is committed (the HW passed it) and, on a single
    /// replica, on disk: what an acks=all wait for `offset` would resolve with at once.
    pub fn is_committed(&self, offset: i64) -> bool {
        self.high_watermark() >= offset && self.log.durable_offset() >= offset
    }

    /// An acks=all wait: resolves once the HW passes `next_offset` (NONE), or with Kafka's
    /// error (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT).
    pub fn wait_for_ack(
        self: &Arc<Self>,
        next_offset: i64,
        timeout_ms: i64,
    ) -> tokio::sync::oneshot::Receiver<ErrorCode> {
        let (id, rx) = self.ctx.register_ack();
        self.drive(
            |r, log, now| {
                (
                    (),
                    r.wait_for_ack(id, next_offset, now + timeout_ms.max(0), log),
                )
            },
            None,
        );
        rx
    }

    /// Time passed: ISR shrinks, expired acks=all waits, fetch retries.
    pub fn tick(self: &Arc<Self>) {
        self.drive(|r, log, now| ((), r.tick(now, log)), None);
    }

    /// Replica fetches and consumer checks answered by the core (see `replication::Replica::fetch`).
    pub fn answer_fetch(
        self: &Arc<Self>,
        request: replication::FetchRequest,
    ) -> replication::FetchAnswer {
        self.drive(|r, log, now| r.fetch(now, request, log), None)
    }

    /// OffsetForLeaderEpoch on this replica (leaders only, with epoch fencing).
    pub fn offset_for_leader_epoch(
        self: &Arc<Self>,
        current_leader_epoch: Option<LeaderEpoch>,
        epoch: LeaderEpoch,
    ) -> Result<EpochEndOffset, ErrorCode> {
        self.drive(
            |r, log, _| {
                (
                    r.offset_for_leader_epoch(current_leader_epoch, epoch, log),
                    Vec::new(),
                )
            },
            None,
        )
    }

    /// The leader answered this follower's fetch `fetch_id`.
    pub fn on_fetch_response(
        self: &Arc<Self>,
        fetch_id: u64,
        response: replication::FetchResponse,
        records: Option<Bytes>,
    ) {
        self.drive(
            |r, log, now| ((), r.on_fetch_response(now, fetch_id, response, log)),
            records,
        );
    }

    /// The controller answered an AlterPartition.
    pub fn on_alter_partition_response(
        self: &Arc<Self>,
        request: &replication::AlterPartitionRequest,
        result: replication::AlterPartitionResult,
    ) {
        self.drive(
            |r, log, now| ((), r.on_alter_partition_response(now, request, result, log)),
            None,
        );
    }

    /// The committed partition state this replica acts on.
    pub fn partition_state(self: &Arc<Self>) -> Option<replication::PartitionState> {
        self.drive(|r, _, _| (r.partition_state().cloned(), Vec::new()), None)
    }
}

/// Whether a topic config's throttled replica lists name `tp`'s replica on `node`:
/// (leader side, follower side).
fn throttled(config: &TopicConfig, tp: &TopicPartition, node: model::NodeId) -> (bool, bool) {
    (
        config
            .leader_replication_throttled_replicas
            .contains(tp.partition, node),
        config
            .follower_replication_throttled_replicas
            .contains(tp.partition, node),
    )
}

/// A partition assigned to this broker whose log could not be opened (damage below its
/// recovery point, no file descriptors left, an I/O error). Its directory is left exactly as
/// it is; requests for it get KAFKA_STORAGE_ERROR until it is opened.
#[derive(Debug, Clone)]
pub struct OfflinePartition {
    pub tp: TopicPartition,
    pub topic_id: TopicId,
    pub leader_epoch: i32,
    /// Why the log could not be opened.
    pub reason: String,
    /// An I/O error (no file descriptors, no space) that may go away: opening is retried.
    /// Damage on disk is not retried.
    pub retryable: bool,
}

/// The map of hosted partitions, keyed by name and partition index, and of the assigned
/// partitions that are offline.
#[derive(Default)]
pub struct ReplicaManager {
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    offline: RwLock<HashMap<TopicPartition, OfflinePartition>>,
}

impl ReplicaManager {
    /// The hosted partition, or the error a request for it gets: KAFKA_STORAGE_ERROR when it
    /// is offline, UNKNOWN_TOPIC_OR_PARTITION when this broker does not host it.
    pub fn lookup(&self, topic: &str, partition: i32) -> Result<Arc<Partition>, ErrorCode> {
        if let Some(p) = self.get(topic, partition) {
            return Ok(p);
        }
        let tp = TopicPartition::new(topic, partition);
        if self.offline_partition(&tp).is_some() {
            Err(ErrorCode::KafkaStorageError)
        } else {
            Err(ErrorCode::UnknownTopicOrPartition)
        }
    }

    pub fn offline_partition(&self, tp: &TopicPartition) -> Option<OfflinePartition> {
        self.offline
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tp)
            .cloned()
    }

    pub fn set_offline(&self, p: OfflinePartition) {
        self.offline
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(p.tp.clone(), p);
    }

    pub fn clear_offline(&self, tp: &TopicPartition) -> Option<OfflinePartition> {
        self.offline
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(tp)
    }

    pub fn all_offline(&self) -> Vec<OfflinePartition> {
        self.offline
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        let tp = TopicPartition::new(topic, partition);
        self.partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&tp)
            .cloned()
    }

    pub fn insert(&self, p: Arc<Partition>) {
        self.partitions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(p.tp.clone(), p);
    }

    pub fn remove(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.partitions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(tp)
    }

    pub fn all(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    pub fn update_config(&self, tp: &TopicPartition, config: TopicConfig) {
        if let Some(p) = self.get(&tp.topic, tp.partition) {
            p.update_config(config);
        }
    }
}
