//! The data directory's partition logs as a whole: opening a partition's log with its recovery
//! point (a log that cannot be opened makes the partition offline, never the broker), and
//! Kafka's `recovery-point-offset-checkpoint`, written periodically and at shutdown.

use crate::replica::{OfflinePartition, Partition};
use crate::state::BrokerState;
use model::{TopicConfig, TopicId, TopicPartition};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use storage::Log;

/// The recovery points read from the checkpoint at startup, updated by every checkpoint
/// written since. Entries of offline partitions are kept as they were read.
#[derive(Debug, Default)]
pub struct RecoveryPoints {
    points: std::sync::Mutex<BTreeMap<String, i64>>,
}

impl RecoveryPoints {
    pub fn load(data_dir: &std::path::Path) -> RecoveryPoints {
        let points = storage::read_recovery_points(data_dir).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read the recovery-point checkpoint; recovering logs from their last segment");
            BTreeMap::new()
        });
        RecoveryPoints {
            points: std::sync::Mutex::new(points),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, i64>> {
        self.points.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, dir_name: &str) -> Option<i64> {
        self.lock().get(dir_name).copied()
    }
}

/// Opens the log of an assigned partition and hosts it; when the log cannot be opened the
/// partition is recorded offline with the reason (loudly), and its files are left alone.
pub fn open_partition(
    state: &BrokerState,
    tp: TopicPartition,
    topic_id: TopicId,
    leader_epoch: i32,
    config: TopicConfig,
) {
    let dir = state.data_dir.join(tp.dir_name());
    let rp = state.recovery_points.get(&tp.dir_name());
    match Log::open_recovering(&dir, config, state.clock.clone(), rp) {
        Ok(log) => {
            state.replicas.clear_offline(&tp);
            state
                .replicas
                .insert(Arc::new(Partition::new(tp, topic_id, log, leader_epoch)));
        }
        Err(e) => {
            tracing::error!(partition = %tp, error = %e,
                "partition log cannot be opened; the partition is offline (KAFKA_STORAGE_ERROR) and its files are left as they are");
            state.replicas.set_offline(OfflinePartition {
                tp,
                topic_id,
                leader_epoch,
                reason: e.to_string(),
            });
        }
    }
}

/// Writes the recovery-point checkpoint: each hosted log's durable offset; offline partitions
/// keep the point they had; partitions no longer assigned are dropped.
pub fn write_checkpoint(state: &BrokerState) {
    let mut points = state.recovery_points.lock();
    let mut keep: HashSet<String> = HashSet::new();
    for p in state.replicas.all() {
        let name = p.tp.dir_name();
        points.insert(name.clone(), p.log.durable_offset());
        keep.insert(name);
    }
    for p in state.replicas.all_offline() {
        keep.insert(p.tp.dir_name());
    }
    points.retain(|name, _| keep.contains(name));
    if let Err(e) = storage::write_recovery_points(&state.data_dir, &points) {
        tracing::error!(error = %e, "writing the recovery-point checkpoint failed");
    }
}

/// Writes the checkpoint every `log.flush.offset.checkpoint.interval.ms` until shutdown.
pub fn spawn_checkpointer(state: &Arc<BrokerState>) {
    let period =
        Duration::from_millis(state.config.log_flush_offset_checkpoint_interval_ms.max(10) as u64);
    let st = state.clone();
    state.tasks.spawn(async move {
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = st.cancel.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let s = st.clone();
            if let Err(e) = tokio::task::spawn_blocking(move || write_checkpoint(&s)).await {
                tracing::error!(error = %e, "recovery-point checkpoint task panicked");
            }
        }
    });
}
