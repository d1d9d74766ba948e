//! The broker's shared state: config, metadata, hosted partitions, the clock, and the
//! background jobs (retention, flush, compaction) that keep logs in shape.

use crate::groups::Groups;
use crate::log_dirs::{self, RecoveryPoints};
use crate::replica::{Partition, ReplicaManager};
use crate::txn::Transactions;
use crate::BrokerError;
use metadata::{
    ControllerError, FileMetadataLog, MetadataImage, MetadataStore, NewTopic, TopicImage,
};
use model::{BrokerConfig, TopicConfig, TopicPartition};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use storage::{Clock, SystemClock};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The directory (inside the data dir) that holds the metadata log, named as KRaft names it.
const METADATA_DIR: &str = "__cluster_metadata-0";

/// Everything request handlers share. Lives as long as the broker, behind an `Arc`.
pub struct BrokerState {
    pub config: BrokerConfig,
    pub node_id: i32,
    /// The advertised host and port.
    pub host: String,
    pub port: i32,
    pub data_dir: PathBuf,
    pub metadata: MetadataStore,
    pub replicas: ReplicaManager,
    pub groups: Arc<Groups>,
    pub txns: Arc<Transactions>,
    pub clock: Arc<dyn Clock>,
    /// Bumped whenever a high watermark moves; Fetch long-polls wait on it.
    pub data_version: watch::Sender<u64>,
    pub cancel: CancellationToken,
    pub tasks: TaskTracker,
    /// Serialises reconciliation of hosted partitions with the metadata image.
    reconcile_lock: std::sync::Mutex<()>,
    /// The data directory's recovery-point checkpoint (see `log_dirs`).
    pub recovery_points: RecoveryPoints,
    /// The broker-wide budget of request bytes (`queued.max.request.bytes`): a permit per
    /// byte of every frame being read or handled (see `connection`).
    pub request_budget: Arc<tokio::sync::Semaphore>,
    pub request_budget_bytes: usize,
    /// The pool that runs every log's group-commit fsyncs (`log.io.threads` threads).
    pub flusher: Arc<storage::Flusher>,
}

impl std::fmt::Debug for BrokerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerState")
            .field("node_id", &self.node_id)
            .finish()
    }
}

impl BrokerState {
    pub fn open(
        config: BrokerConfig,
        host: &str,
        port: i32,
        cancel: CancellationToken,
        tasks: TaskTracker,
    ) -> Result<Arc<BrokerState>, BrokerError> {
        let data_dir = PathBuf::from(&config.data_dir);
        std::fs::create_dir_all(&data_dir).map_err(|source| BrokerError::DataDir {
            path: data_dir.display().to_string(),
            source,
        })?;
        let log = FileMetadataLog::open(&data_dir.join(METADATA_DIR))?;
        let (cap, cap_note) = log_dirs::partition_cap(&config);
        if let Some(note) = &cap_note {
            tracing::warn!(max_broker_partitions = cap, reason = %note, "partition cap lowered");
        }
        let metadata = MetadataStore::open(Box::new(log), config.node_id, config.props.clone())?
            .with_partition_cap(cap, cap_note);
        metadata.register(config.cluster_id.clone(), host, port)?;
        let recovery_points = RecoveryPoints::load(&data_dir);
        let request_budget_bytes = crate::memory::request_budget_bytes(&config);
        tracing::info!(
            queued_max_request_bytes = request_budget_bytes,
            "broker-wide request budget"
        );
        let flusher =
            storage::Flusher::new(config.log_io_threads.max(1) as usize).map_err(|source| {
                BrokerError::DataDir {
                    path: "flusher threads".into(),
                    source,
                }
            })?;
        let state = Arc::new(BrokerState {
            flusher,
            recovery_points,
            request_budget: Arc::new(tokio::sync::Semaphore::new(request_budget_bytes)),
            request_budget_bytes,
            node_id: config.node_id,
            host: host.to_string(),
            port,
            data_dir,
            metadata,
            replicas: ReplicaManager::default(),
            groups: Arc::new(Groups::new(&config)),
            txns: Arc::new(Transactions::new(&config)),
            clock: Arc::new(SystemClock),
            data_version: watch::Sender::new(0),
            cancel,
            tasks,
            config,
            reconcile_lock: std::sync::Mutex::new(()),
        });
        state.reconcile()?;
        state.set_aside_stray_dirs();
        if let Err(e) = state.txns.ensure_loaded(&state, false) {
            tracing::error!(error = ?e, "loading transaction state failed; transaction requests will be retried by clients");
        }
        if let Err(e) = state.groups.ensure_loaded(&state, false) {
            tracing::error!(error = ?e, "loading consumer groups failed; group requests will be retried by clients");
        }
        Ok(state)
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.metadata.image()
    }

    /// The effective log config of a topic (overrides were validated when written).
    pub fn topic_config(&self, topic: &TopicImage) -> TopicConfig {
        self.config
            .topic_config(&topic.configs)
            .unwrap_or_else(|e| {
                tracing::warn!(topic = %topic.name, error = %e, "invalid stored topic config; using defaults");
                TopicConfig::default()
            })
    }

    /// Wakes Fetch long-polls: some high watermark moved.
    pub fn notify_data(&self) {
        self.data_version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Serialises changes to the hosted partitions (reconciliation, re-opening logs).
    pub(crate) fn reconcile_guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.reconcile_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Opens logs for partitions the image assigns to this broker, applies config changes,
    /// and closes and deletes logs of partitions that are gone. New logs are opened on
    /// `log.io.threads` threads at once (thousands of partitions take a few fsyncs each).
    pub fn reconcile(&self) -> Result<(), BrokerError> {
        let _guard = self.reconcile_guard();
        let image = self.image();
        let mut wanted: HashMap<TopicPartition, (model::TopicId, i32, TopicConfig)> =
            HashMap::new();
        for topic in image.topics.values() {
            let config = self.topic_config(topic);
            for (i, p) in topic.partitions.iter().enumerate() {
                if p.replicas.contains(&self.node_id) {
                    let tp = TopicPartition::new(topic.name.clone(), i as i32);
                    wanted.insert(tp, (topic.id, p.leader_epoch, config.clone()));
                }
            }
        }
        let same_topic = |tp: &TopicPartition, id: model::TopicId| {
            wanted.get(tp).is_some_and(|(want, _, _)| *want == id)
        };
        // Gone first (their topic's deletion is committed: their data may go), so a recreated
        // topic never opens the old directory.
        for o in self.replicas.all_offline() {
            if !same_topic(&o.tp, o.topic_id) {
                self.replicas.clear_offline(&o.tp);
                let dir = self.data_dir.join(o.tp.dir_name());
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    tracing::error!(partition = %o.tp, error = %e, "deleting the directory of an offline partition failed");
                }
            }
        }
        for p in self.replicas.all() {
            if !same_topic(&p.tp, p.topic_id) {
                self.drop_partition(&p);
            }
        }
        let mut to_open = Vec::new();
        for (tp, (topic_id, leader_epoch, config)) in wanted {
            if self.replicas.offline_partition(&tp).is_some() {
                // Offline: left alone here (re-opening re-scans and re-logs the damage).
                continue;
            }
            match self.replicas.get(&tp.topic, tp.partition) {
                Some(existing) => existing.log.update_config(config),
                None => to_open.push((tp, topic_id, leader_epoch, config)),
            }
        }
        log_dirs::open_partitions(self, to_open);
        Ok(())
    }

    fn drop_partition(&self, p: &Arc<Partition>) {
        self.replicas.remove(&p.tp);
        if let Err(e) = p.log.delete_dir() {
            tracing::error!(partition = %p.tp, error = %e, "deleting partition directory failed");
        }
        self.notify_data();
    }

    /// Renames aside partition directories the committed metadata does not assign to this
    /// broker (`<dir>.<uuid>-stray`, as Kafka names stray logs) and reports them. They are
    /// never deleted: only a committed topic deletion deletes data, and a directory can be
    /// unknown for other reasons (metadata restored from a backup or cut by an operator).
    fn set_aside_stray_dirs(&self) {
        let hosted: HashSet<String> = self
            .replicas
            .all()
            .iter()
            .map(|p| p.tp.dir_name())
            .chain(self.replicas.all_offline().iter().map(|p| p.tp.dir_name()))
            .collect();
        let Ok(entries) = std::fs::read_dir(&self.data_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            let is_partition_dir = name
                .rsplit_once('-')
                .is_some_and(|(t, p)| !t.is_empty() && p.parse::<u32>().is_ok());
            if entry.path().is_dir()
                && is_partition_dir
                && name != METADATA_DIR
                && !hosted.contains(&name)
            {
                let stray = format!("{name}.{}-stray", uuid::Uuid::new_v4().simple());
                match std::fs::rename(entry.path(), self.data_dir.join(&stray)) {
                    Ok(()) => tracing::warn!(
                        dir = %name,
                        renamed_to = %stray,
                        "partition directory unknown to the committed metadata; renamed aside (not deleted)"
                    ),
                    Err(e) => {
                        tracing::warn!(dir = %name, error = %e, "could not rename a stray partition directory")
                    }
                }
            }
        }
    }

    /// Creates a topic on first use, if `auto.create.topics.enable` allows.
    pub fn auto_create(&self, name: &str) -> Result<Arc<TopicImage>, ControllerError> {
        let created = self.metadata.create_topic(
            NewTopic {
                name: name.to_string(),
                partitions: -1,
                replication_factor: -1,
                configs: Default::default(),
            },
            self.config.num_partitions,
            self.config.default_replication_factor,
            false,
        );
        let topic = match created {
            Ok(t) => t,
            // Another request created it first: that's success for us.
            Err(e) if e.code == model::ErrorCode::TopicAlreadyExists => {
                self.image().topic(name).cloned().ok_or(e)?
            }
            Err(e) => return Err(e),
        };
        self.reconcile_or_log();
        tracing::info!(
            topic = name,
            partitions = topic.partitions.len(),
            "auto-created topic"
        );
        Ok(topic)
    }

    /// Reconciles after a metadata change; a failure to open a log is logged (the partition
    /// stays unavailable and the error is visible in its responses) rather than failing the
    /// request that caused the change.
    pub fn reconcile_or_log(&self) {
        if let Err(e) = self.reconcile() {
            tracing::error!(error = %e, "applying metadata change to local partitions failed");
        }
    }

    /// Starts the periodic jobs: flush.ms checks, retention, compaction.
    pub fn start_background(self: &Arc<Self>) {
        self.tasks
            .spawn(self.groups.clone().run_timers(self.clone()));
        self.tasks.spawn(self.txns.clone().run_timers(self.clone()));
        self.tasks
            .spawn(self.txns.markers.clone().run(self.clone()));
        let every = |ms: i64| Duration::from_millis(ms.max(10) as u64);
        self.spawn_periodic(
            "flush",
            every(self.config.log_flush_scheduler_interval_ms),
            |p| p.log.maybe_flush().map(|_| ()),
        );
        self.spawn_periodic(
            "retention",
            every(self.config.log_retention_check_interval_ms),
            |p| {
                let r = p.log.run_retention().map(|_| ());
                p.clamp_high_watermark();
                r
            },
        );
        log_dirs::spawn_checkpointer(self);
        log_dirs::spawn_offline_retry(self);
        self.spawn_periodic(
            "compaction",
            every(self.config.log_cleaner_backoff_ms),
            |p| p.log.run_compaction().map(|_| ()),
        );
    }

    fn spawn_periodic(
        self: &Arc<Self>,
        name: &'static str,
        period: Duration,
        job: fn(&Partition) -> Result<(), storage::StorageError>,
    ) {
        let state = self.clone();
        self.tasks.spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker.tick().await;
            loop {
                tokio::select! {
                    _ = state.cancel.cancelled() => return,
                    _ = ticker.tick() => {}
                }
                let partitions = state.replicas.all();
                let result = tokio::task::spawn_blocking(move || {
                    for p in partitions {
                        if let Err(e) = job(&p) {
                            tracing::error!(job = name, partition = %p.tp, error = %e, "background log job failed");
                        }
                    }
                })
                .await;
                if let Err(e) = result {
                    tracing::error!(job = name, error = %e, "background log job panicked");
                }
            }
        });
    }

    /// Flushes every log, writes clean-shutdown markers and the recovery-point checkpoint.
    pub fn close_logs(&self) {
        // Each close is a few fsyncs: thousands of partitions close on `log.io.threads`
        // threads at once.
        let partitions = self.replicas.all();
        let threads = (self.config.log_io_threads.max(1) as usize).min(partitions.len().max(1));
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(p) = partitions.get(i) else { return };
                    if let Err(e) = p.log.close() {
                        tracing::error!(partition = %p.tp, error = %e, "closing log failed");
                    }
                });
            }
        });
        log_dirs::write_checkpoint(self);
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }
}
