//! The partitions this broker hosts: their logs, leader epochs, leadership and high watermarks.
//!
//! A partition is hosted on every broker among its replicas; only the leader (per the committed
//! metadata image) serves produce and fetch. Until partition replication lands, no data is copied
//! to followers, and the leader's high watermark follows its log end offset after every append,
//! as in Kafka with one in-sync replica.

use model::{ErrorCode, TopicConfig, TopicId, TopicPartition};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use storage::Log;

/// One hosted partition.
pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: TopicId,
    pub log: Arc<Log>,
    leader_epoch: AtomicI32,
    /// Whether this broker leads the partition (per the committed metadata).
    leader: AtomicBool,
    /// Offsets below it are committed and visible to consumers. *Invariant:* HW <= LEO.
    high_watermark: AtomicI64,
    /// KIP-890 verification of transactional writes, serialised with transaction markers.
    pub txn: crate::txn_partition::TxnGuards,
    /// The topic's bytes/records in/out counters (shared by its partitions).
    pub stats: Arc<crate::metrics::TopicStats>,
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
    pub fn new(
        tp: TopicPartition,
        topic_id: TopicId,
        log: Log,
        leader_epoch: i32,
        is_leader: bool,
    ) -> Partition {
        let leo = log.log_end_offset();
        Partition {
            stats: crate::metrics::METRICS.topic(&tp.topic),
            tp,
            topic_id,
            log: Arc::new(log),
            leader_epoch: AtomicI32::new(leader_epoch),
            leader: AtomicBool::new(is_leader),
            high_watermark: AtomicI64::new(leo),
            txn: Default::default(),
        }
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    /// Whether this broker is the partition's leader.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Acquire)
    }

    /// Applies the committed leadership. *Invariant:* the leader epoch never goes back.
    pub fn set_leadership(&self, leader_epoch: i32, is_leader: bool) {
        let prev = self.leader_epoch.fetch_max(leader_epoch, Ordering::AcqRel);
        debug_assert!(prev <= leader_epoch || !is_leader, "leader epoch went back");
        self.leader.store(is_leader, Ordering::Release);
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

    /// Moves the high watermark up to the log end offset (single replica: every appended
    /// batch is on every in-sync replica).
    pub fn advance_high_watermark(&self) -> i64 {
        let leo = self.log.log_end_offset();
        let prev = self.high_watermark.fetch_max(leo, Ordering::AcqRel);
        debug_assert!(prev.max(leo) <= self.log.log_end_offset());
        prev.max(leo)
    }

    /// After a truncation or log-start move, pull the HW back within the log.
    pub fn clamp_high_watermark(&self) {
        let leo = self.log.log_end_offset();
        let start = self.log.log_start_offset();
        self.high_watermark
            .store(self.high_watermark().min(leo).max(start), Ordering::Release);
    }
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
            p.log.update_config(config);
        }
    }
}
