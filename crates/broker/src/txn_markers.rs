//! Delivery of transaction markers (Kafka's `TransactionMarkerChannelManager`): the
//! coordinator asks for a COMMIT or ABORT marker on every partition of a transaction; this
//! channel writes each one on the partition's leader and reports it back, retrying until it
//! is written or the partition no longer exists.
//!
//! One task drains the queue in rounds: every ready marker whose partition this broker leads
//! is appended at once, then the round waits for their (group-committed) fsync and
//! acknowledges them together. Markers for partitions another broker leads take the
//! inter-broker path: one WriteTxnMarkers request per destination broker and round, sent on
//! its own task over the peer link (`peers`), each partition acknowledged on its own answer.
//! A marker that could not be written (the leader moved, the peer is unreachable, a storage
//! error) is retried with a backoff, its destination looked up again, never dropped; one
//! that a newer producer epoch or coordinator already superseded is not retried (as Kafka).
//! Markers of a `__transaction_state` partition that this broker stopped coordinating (or
//! coordinates at a newer epoch) are dropped: the new coordinator sends them again from its
//! log.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coordinator::{MarkerAck, MarkerRequest};
use model::ErrorCode;
use protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use record::EndTxnMarker;
use storage::{AppendError, AppendInfo};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::groups::OFFSETS_TOPIC;
use crate::replica::Partition;
use crate::state::BrokerState;

/// Longest wait between retries of one marker.
const RETRY_BACKOFF_MAX_MS: u64 = 1_000;
/// First retry wait.
const RETRY_BACKOFF_MIN_MS: u64 = 50;
/// How long a marker append waits for the partition's high watermark (Kafka writes markers
/// with acks=-1 and `request.timeout.ms`).
pub const MARKER_WRITE_TIMEOUT_MS: i64 = 30_000;

/// One marker for one partition.
#[derive(Clone, Debug)]
struct MarkerWork {
    transactional_id: String,
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    txn_partition: i32,
    commit: bool,
    topic: String,
    partition: i32,
    attempts: u32,
    not_before: Option<Instant>,
}

/// Where a marker goes.
enum Destination {
    /// The partition no longer exists: nothing to mark.
    Gone,
    Local(Arc<Partition>),
    /// This broker leads it but has not opened it yet: try again shortly.
    NotReady,
    /// Another broker leads it (node id).
    Remote(i32),
}

/// The queue of markers to deliver; see the module docs.
#[derive(Debug, Default)]
pub struct MarkerChannel {
    queue: Mutex<VecDeque<MarkerWork>>,
    notify: Notify,
}

/// Appends a marker to a partition this broker leads (the coordinator's local path and the
/// WriteTxnMarkers handler share it).
pub fn write_marker(
    state: &BrokerState,
    partition: &Arc<Partition>,
    producer_id: i64,
    producer_epoch: i16,
    marker: EndTxnMarker,
) -> Result<AppendInfo, AppendError> {
    let info = partition.append_txn_marker(producer_id, producer_epoch, marker)?;
    state.notify_data();
    Ok(info)
}

/// After a marker is committed: transactional offsets in `__consumer_offsets` become committed
/// (or are dropped), as Kafka's WriteTxnMarkers handler does.
pub fn marker_durable(
    state: &BrokerState,
    topic: &str,
    partition: i32,
    producer_id: i64,
    commit: bool,
) {
    if topic == OFFSETS_TOPIC {
        state.groups.complete_txn(producer_id, partition, commit);
    }
}

fn destination(state: &BrokerState, topic: &str, partition: i32) -> Destination {
    let image = state.image();
    let Some(p) = image.topic(topic).and_then(|t| {
        usize::try_from(partition)
            .ok()
            .and_then(|i| t.partitions.get(i))
    }) else {
        return Destination::Gone;
    };
    if p.leader == state.node_id {
        match state.replicas.get(topic, partition) {
            Some(local) => Destination::Local(local),
            None => Destination::NotReady,
        }
    } else {
        Destination::Remote(p.leader)
    }
}

impl MarkerChannel {
    /// Queues the markers of one or more transactions, one entry per partition.
    pub fn enqueue(&self, requests: Vec<MarkerRequest>) {
        {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            for r in requests {
                for (topic, partition) in r.partitions {
                    q.push_back(MarkerWork {
                        transactional_id: r.transactional_id.clone(),
                        producer_id: r.producer_id,
                        producer_epoch: r.producer_epoch,
                        coordinator_epoch: r.coordinator_epoch,
                        txn_partition: r.txn_partition,
                        commit: r.commit,
                        topic,
                        partition,
                        attempts: 0,
                        not_before: None,
                    });
                }
            }
        }
        self.notify.notify_one();
    }

    /// Forgets the queued markers of transactions on `__transaction_state` partition `p`.
    pub fn drop_txn_partition(&self, p: i32) {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|w| w.txn_partition != p);
    }

    /// Markers waiting for delivery (for tests and metrics).
    pub fn queued(&self) -> usize {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Puts markers back in the queue after a failed attempt, each with its backoff.
    fn requeue(&self, retry: Vec<MarkerWork>) {
        if retry.is_empty() {
            return;
        }
        let now = Instant::now();
        {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            for mut w in retry {
                w.attempts = w.attempts.saturating_add(1);
                let backoff = (RETRY_BACKOFF_MIN_MS << w.attempts.min(5)).min(RETRY_BACKOFF_MAX_MS);
                w.not_before = Some(now + Duration::from_millis(backoff));
                q.push_back(w);
            }
        }
        self.notify.notify_one();
    }

    /// Delivers markers until the broker stops.
    pub async fn run(self: Arc<Self>, state: Arc<BrokerState>) {
        loop {
            let wait = {
                let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                let now = Instant::now();
                if q.iter().any(|w| w.not_before.is_none_or(|t| t <= now)) {
                    Duration::ZERO
                } else {
                    q.iter()
                        .filter_map(|w| w.not_before)
                        .min()
                        .map_or(Duration::from_secs(1), |t| t.saturating_duration_since(now))
                }
            };
            if !wait.is_zero() {
                tokio::select! {
                    _ = state.cancel.cancelled() => return,
                    _ = self.notify.notified() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            if state.cancel.is_cancelled() {
                return;
            }
            let ready: Vec<MarkerWork> = {
                let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                let now = Instant::now();
                let (ready, later): (VecDeque<_>, VecDeque<_>) = q
                    .drain(..)
                    .partition(|w| w.not_before.is_none_or(|t| t <= now));
                *q = later;
                ready.into()
            };
            if ready.is_empty() {
                continue;
            }
            self.round(&state, ready).await;
        }
    }

    /// One delivery round: append local markers, wait for them to be durable, acknowledge.
    async fn round(self: &Arc<Self>, state: &Arc<BrokerState>, ready: Vec<MarkerWork>) {
        let mut acks: Vec<MarkerWork> = Vec::new();
        let mut remote: BTreeMap<i32, Vec<MarkerWork>> = BTreeMap::new();
        let mut appended: Vec<(MarkerWork, Arc<Partition>, i64)> = Vec::new();
        let mut retry: Vec<MarkerWork> = Vec::new();
        for w in ready {
            if !state.txns.coordinates(w.txn_partition, w.coordinator_epoch) {
                tracing::debug!(transactional_id = %w.transactional_id, "dropping a marker of a transaction this broker no longer coordinates");
                continue;
            }
            match destination(state, &w.topic, w.partition) {
                Destination::Gone => acks.push(w),
                Destination::Local(p) => {
                    let marker = EndTxnMarker {
                        commit: w.commit,
                        coordinator_epoch: w.coordinator_epoch,
                    };
                    match write_marker(state, &p, w.producer_id, w.producer_epoch, marker) {
                        Ok(info) => appended.push((w, p, info.last_offset)),
                        Err(e) => match e.error_code() {
                            // A newer producer epoch or coordinator wrote this partition's
                            // marker: this coordinator is stale (as Kafka, stop sending).
                            ErrorCode::InvalidProducerEpoch
                            | ErrorCode::TransactionCoordinatorFenced => {
                                tracing::warn!(transactional_id = %w.transactional_id, partition = %p.tp, error = %e, "transaction marker fenced; not retrying");
                            }
                            _ => {
                                tracing::warn!(transactional_id = %w.transactional_id, partition = %p.tp, error = %e, "writing a transaction marker failed; retrying");
                                retry.push(w);
                            }
                        },
                    }
                }
                Destination::NotReady => retry.push(w),
                Destination::Remote(node) => remote.entry(node).or_default().push(w),
            }
        }
        for (node, works) in remote {
            tokio::spawn(self.clone().send_remote(state.clone(), node, works));
        }
        // A marker counts once committed (the HW passed it: on disk on every ISR member).
        let waits: Vec<_> = appended
            .into_iter()
            .map(|(w, p, offset)| {
                let rx = p.wait_for_ack(offset + 1, MARKER_WRITE_TIMEOUT_MS);
                (w, p, rx)
            })
            .collect();
        for (w, p, rx) in waits {
            match rx.await.unwrap_or(ErrorCode::NotLeaderOrFollower) {
                ErrorCode::None => {
                    marker_durable(state, &w.topic, w.partition, w.producer_id, w.commit);
                    acks.push(w);
                }
                e => {
                    tracing::warn!(partition = %p.tp, error = %e.name(), "a transaction marker was not committed; retrying");
                    retry.push(w);
                }
            }
        }
        acknowledge(state, acks);
        self.requeue(retry);
    }

    /// Sends the markers of one round for partitions `node` leads as one WriteTxnMarkers
    /// request; acknowledges each partition written, retries the others.
    async fn send_remote(
        self: Arc<Self>,
        state: Arc<BrokerState>,
        node: i32,
        works: Vec<MarkerWork>,
    ) {
        let log_failure = |works: &[MarkerWork], why: &str| {
            for w in works
                .iter()
                .filter(|w| w.attempts == 0 || w.attempts % 20 == 0)
            {
                tracing::warn!(transactional_id = %w.transactional_id, topic = %w.topic,
                    partition = w.partition, leader = node, attempts = w.attempts,
                    "sending a transaction marker failed ({why}); retrying");
            }
        };
        let Some(link) = state.txns.peers.link(&state, node).await else {
            log_failure(&works, "leader unreachable");
            self.requeue(works);
            return;
        };
        let response = match link.call(&marker_request(&works)).await {
            Ok(r) => r,
            Err(e) => {
                state.txns.peers.failed(node, &link).await;
                log_failure(&works, &e.to_string());
                self.requeue(works);
                return;
            }
        };
        let results = marker_results(&response);
        let mut acks = Vec::new();
        let mut retry = Vec::new();
        for w in works {
            match results.get(&(w.producer_id, w.topic.as_str(), w.partition)) {
                Some(ErrorCode::None) => acks.push(w),
                Some(
                    e @ (ErrorCode::InvalidProducerEpoch | ErrorCode::TransactionCoordinatorFenced),
                ) => {
                    tracing::warn!(transactional_id = %w.transactional_id, topic = %w.topic,
                        partition = w.partition, leader = node, error = %e.name(),
                        "transaction marker fenced; not retrying");
                }
                other => {
                    if w.attempts == 0 || w.attempts % 20 == 0 {
                        tracing::warn!(transactional_id = %w.transactional_id, topic = %w.topic,
                            partition = w.partition, leader = node,
                            error = other.map_or("no answer for the partition", |e| e.name()),
                            "transaction marker not written; retrying");
                    }
                    retry.push(w);
                }
            }
        }
        acknowledge(&state, acks);
        self.requeue(retry);
    }
}

/// Tells the coordinator these markers are written.
fn acknowledge(state: &Arc<BrokerState>, acks: Vec<MarkerWork>) {
    if acks.is_empty() {
        return;
    }
    let acks: Vec<MarkerAck> = acks
        .into_iter()
        .map(|w| MarkerAck {
            transactional_id: w.transactional_id,
            producer_id: w.producer_id,
            producer_epoch: w.producer_epoch,
            topic: w.topic,
            partition: w.partition,
        })
        .collect();
    state.txns.marker_written(state, &acks);
}

/// One WriteTxnMarkers request for `works`: a marker per transaction (producer, epoch,
/// result, coordinator epoch), its partitions grouped by topic.
fn marker_request(works: &[MarkerWork]) -> WriteTxnMarkersRequest {
    type Key = (i64, i16, bool, i32);
    let mut by_txn: BTreeMap<Key, BTreeMap<&str, Vec<i32>>> = BTreeMap::new();
    for w in works {
        by_txn
            .entry((
                w.producer_id,
                w.producer_epoch,
                w.commit,
                w.coordinator_epoch,
            ))
            .or_default()
            .entry(w.topic.as_str())
            .or_default()
            .push(w.partition);
    }
    let markers = by_txn
        .into_iter()
        .map(|((pid, epoch, commit, coordinator_epoch), topics)| {
            WritableTxnMarker::default()
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_transaction_result(commit)
                .with_coordinator_epoch(coordinator_epoch)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(t, ps)| {
                            WritableTxnMarkerTopic::default()
                                .with_name(TopicName(t.to_string().into()))
                                .with_partition_indexes(ps)
                        })
                        .collect(),
                )
        })
        .collect();
    WriteTxnMarkersRequest::default().with_markers(markers)
}

/// The error of every partition a WriteTxnMarkers response answers, by (producer id, topic,
/// partition).
fn marker_results(response: &WriteTxnMarkersResponse) -> HashMap<(i64, &str, i32), ErrorCode> {
    let mut out = HashMap::new();
    for m in &response.markers {
        for t in &m.topics {
            for p in &t.partitions {
                out.insert(
                    (m.producer_id.0, t.name.0.as_str(), p.partition_index),
                    ErrorCode::from_code(p.error_code),
                );
            }
        }
    }
    out
}
