//! The data directory's partition logs as a whole: opening a partition's log with its recovery
//! point (a log that cannot be opened makes the partition offline, never the broker), Kafka's
//! `recovery-point-offset-checkpoint` and `replication-offset-checkpoint` (the high
//! watermarks, so a restarted replica neither hides what was committed nor exposes what was
//! not), each written periodically and at shutdown, the partition cap
//! derived from the open-file limit, and bringing offline partitions back without a restart.
//!
//! Bringing back: every `log.offline.retry.interval.ms`, a partition whose log went offline
//! because append writes failed and were cut back (a full disk: `OfflineCause::Write`), or
//! whose log could not be opened for an I/O reason (no descriptors, no space), is opened again
//! from its files, with its durable offset as recovery point, once a probe write and fsync
//! in its directory succeed. A log taken offline by a failed fsync is never brought back in
//! the process (see `storage::OfflineCause::Other`); damage on disk is not retried either.

use crate::replica::{OfflinePartition, Partition};
use crate::state::BrokerState;
use model::{TopicConfig, TopicId, TopicPartition};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use storage::{Log, LogOptions, OfflineCause};

/// The partition cap the controller enforces: `max.broker.partitions`, lowered to half the
/// open-file limit when that is smaller (every partition keeps at least its active segment
/// open; the other half is left for connections, older segments and other files), with the
/// reason when lowered. A topic is refused at CreateTopics rather than reported created with
/// logs that cannot be opened.
pub fn partition_cap(config: &model::BrokerConfig) -> (i64, Option<String>) {
    let configured = i64::from(config.max_broker_partitions);
    let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    match nofile {
        Some(n) if (n / 2) < configured as u64 => (
            (n / 2) as i64,
            Some(format!("half the open-file limit of {n}")),
        ),
        _ => (configured, None),
    }
}

/// One of the data directory's offset checkpoints (recovery points, high watermarks) as read
/// at startup, updated by every checkpoint written since. Entries of offline partitions are
/// kept as they were read.
#[derive(Debug, Default)]
pub struct OffsetCheckpoint {
    file: &'static str,
    points: std::sync::Mutex<BTreeMap<String, i64>>,
}

impl OffsetCheckpoint {
    /// Reads `file` in `data_dir`; an unreadable file is reported and read as empty (for
    /// recovery points: recover logs from their last segment; for high watermarks: start
    /// each at its log start, the leader recomputes it).
    pub fn load(data_dir: &std::path::Path, file: &'static str) -> OffsetCheckpoint {
        let points = storage::read_offset_checkpoint(data_dir, file).unwrap_or_else(|e| {
            tracing::warn!(file, error = %e, "cannot read an offset checkpoint; ignoring it");
            BTreeMap::new()
        });
        OffsetCheckpoint {
            file,
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
    is_leader: bool,
    config: TopicConfig,
) {
    let dir = state.data_dir.join(tp.dir_name());
    let options = LogOptions {
        recovery_point: state.recovery_points.get(&tp.dir_name()),
        flusher: Some(state.flusher.clone()),
    };
    match Log::open_with(&dir, config, state.clock.clone(), options) {
        Ok(log) => {
            state.replicas.clear_offline(&tp);
            // No role yet: the caller applies the committed partition state.
            let _ = is_leader;
            let hw = state.high_watermarks.get(&tp.dir_name());
            state.replicas.insert(Arc::new(Partition::new(
                tp,
                topic_id,
                log,
                state.replication.clone(),
                hw,
            )));
        }
        Err(e) => {
            tracing::error!(partition = %tp, error = %e,
                "partition log cannot be opened; the partition is offline (KAFKA_STORAGE_ERROR) and its files are left as they are");
            state.replicas.set_offline(OfflinePartition {
                tp,
                topic_id,
                leader_epoch,
                retryable: matches!(e, storage::StorageError::Io { .. }),
                reason: e.to_string(),
            });
        }
    }
}

/// Opens the logs of `partitions` (see [`open_partition`]) on `log.io.threads` threads.
pub fn open_partitions(
    state: &BrokerState,
    partitions: Vec<(TopicPartition, TopicId, i32, bool, TopicConfig)>,
) {
    let threads = (state.config.log_io_threads.max(1) as usize).min(partitions.len());
    if threads <= 1 {
        for (tp, id, epoch, lead, config) in partitions {
            open_partition(state, tp, id, epoch, lead, config);
        }
        return;
    }
    let queue = std::sync::Mutex::new(partitions);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop();
                let Some((tp, id, epoch, lead, config)) = next else {
                    return;
                };
                open_partition(state, tp, id, epoch, lead, config);
            });
        }
    });
}

/// Writes `checkpoint` with `value` of each hosted partition; offline partitions keep the
/// entry they had; partitions no longer assigned are dropped.
fn write_offsets(state: &BrokerState, checkpoint: &OffsetCheckpoint, value: fn(&Partition) -> i64) {
    let mut points = checkpoint.lock();
    let mut keep: HashSet<String> = HashSet::new();
    for p in state.replicas.all() {
        let name = p.tp.dir_name();
        points.insert(name.clone(), value(&p));
        keep.insert(name);
    }
    for p in state.replicas.all_offline() {
        keep.insert(p.tp.dir_name());
    }
    points.retain(|name, _| keep.contains(name));
    if let Err(e) = storage::write_offset_checkpoint(&state.data_dir, checkpoint.file, &points) {
        tracing::error!(file = checkpoint.file, error = %e, "writing an offset checkpoint failed");
    }
}

/// Writes the recovery-point checkpoint: each hosted log's durable offset.
pub fn write_checkpoint(state: &BrokerState) {
    write_offsets(state, &state.recovery_points, |p| p.log.durable_offset());
}

/// Writes the high-watermark checkpoint (`replication-offset-checkpoint`): each hosted
/// partition's HW. A replica restarts from it (clamped to its recovered log), so a leader
/// whose ISR cannot move the HW yet still serves what was committed, and the HW a client saw
/// does not go back across a restart. An HW only ever covers committed records, so a stale
/// entry is a lower bound, never an exposure.
pub fn write_high_watermarks(state: &BrokerState) {
    write_offsets(state, &state.high_watermarks, |p| p.high_watermark());
}

/// Writes the recovery points every `log.flush.offset.checkpoint.interval.ms` and the high
/// watermarks every `replica.high.watermark.checkpoint.interval.ms`, until shutdown.
pub fn spawn_checkpointer(state: &Arc<BrokerState>) {
    let period = state.config.log_flush_offset_checkpoint_interval_ms;
    spawn_periodic_blocking(state, period, "recovery-point checkpoint", write_checkpoint);
    let period = state.config.replica_high_watermark_checkpoint_interval_ms;
    spawn_periodic_blocking(
        state,
        period,
        "high-watermark checkpoint",
        write_high_watermarks,
    );
}

/// Whether a probe write and fsync succeed in `dir` (writes that failed for lack of space
/// would now work).
fn writes_succeed(dir: &std::path::Path) -> bool {
    use std::io::Write;
    let path = dir.join(".write-probe.tmp");
    let result = std::fs::File::create(&path).and_then(|mut f| {
        f.write_all(&[0u8; 64 * 1024])?;
        f.sync_all()
    });
    let _ = std::fs::remove_file(&path);
    result.is_ok()
}

/// One pass of bringing offline partitions back (see the module docs).
pub fn retry_offline(state: &BrokerState) {
    let _guard = state.reconcile_guard();
    for p in state.replicas.all() {
        if p.log.offline_cause() != Some(OfflineCause::Write) || !writes_succeed(p.log.dir()) {
            continue;
        }
        let options = LogOptions {
            recovery_point: Some(p.log.durable_offset()),
            flusher: Some(state.flusher.clone()),
        };
        let config = (*p.log.config()).clone();
        match Log::open_with(p.log.dir(), config, state.clock.clone(), options) {
            Ok(log) => {
                let back = Arc::new(Partition::new(
                    p.tp.clone(),
                    p.topic_id,
                    log,
                    state.replication.clone(),
                    Some(p.high_watermark()),
                ));
                tracing::warn!(partition = %p.tp, log_end = back.log.log_end_offset(),
                    "partition log re-opened after failed writes; the partition is back online");
                if let Some(reg) = state.image().partition(p.topic_id, p.tp.partition) {
                    back.apply_metadata(crate::state::partition_state(reg));
                }
                state.replicas.insert(back);
                state.notify_data();
            }
            Err(e) => {
                tracing::error!(partition = %p.tp, error = %e, "re-opening an offline partition log failed");
            }
        }
    }
    let image = state.image();
    for o in state.replicas.all_offline() {
        let dir = state.data_dir.join(o.tp.dir_name());
        if !o.retryable || !writes_succeed(&dir) {
            continue;
        }
        let Some(topic) = image.topic(&o.tp.topic).filter(|t| t.id == o.topic_id) else {
            continue;
        };
        let Some(reg) = topic.partitions.get(o.tp.partition as usize) else {
            continue;
        };
        let config = state.topic_config(topic);
        let lead = reg.leader == state.node_id;
        open_partition(
            state,
            o.tp.clone(),
            o.topic_id,
            reg.leader_epoch,
            lead,
            config,
        );
        if state.replicas.get(&o.tp.topic, o.tp.partition).is_some() {
            tracing::warn!(partition = %o.tp, "partition log opened on retry; the partition is back online");
            state.notify_data();
        }
    }
}

/// Runs [`retry_offline`] every `log.offline.retry.interval.ms` until shutdown.
pub fn spawn_offline_retry(state: &Arc<BrokerState>) {
    let period = state.config.log_offline_retry_interval_ms;
    spawn_periodic_blocking(state, period, "offline partition retry", retry_offline);
}

/// Runs the blocking `job` on the blocking pool every `period_ms` (at least 10 ms), first one
/// period after the start, until shutdown; a tick missed while a run is slow is skipped.
fn spawn_periodic_blocking(
    state: &Arc<BrokerState>,
    period_ms: i64,
    what: &'static str,
    job: fn(&BrokerState),
) {
    let period = Duration::from_millis(period_ms.max(10) as u64);
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
            if let Err(e) = tokio::task::spawn_blocking(move || job(&s)).await {
                tracing::error!(error = %e, "{what} task panicked");
            }
        }
    });
}
