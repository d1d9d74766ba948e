//! The node's shared state: config, the committed metadata image (swapped whenever the metadata
//! quorum publishes one), hosted partitions, the link to the active controller, the clock, and
//! the background jobs (retention, flush, compaction) that keep logs in shape.
//!
//! Metadata flows one way: the quorum applies committed records and publishes `(image, delta)`;
//! [`BrokerState::apply_publication`] (run by the metadata loader, one publication at a time)
//! makes the replica manager and the group coordinator follow it, then swaps the image handlers
//! read and advances the applied offset that requests wait on. Nothing else changes hosted
//! partitions.

use crate::bootstrap::METADATA_DIR;
use crate::controller_link::ControllerLink;
use crate::groups::Groups;
use crate::log_dirs::{self, OffsetCheckpoint};
use crate::replica::{Partition, ReplicaManager};
use crate::replicator::{Event, ReplicationContext};
use crate::txn::Transactions;
use crate::BrokerError;
use controller::{ControllerError, Reply, Request};
use metadata::image::format_id;
use metadata::{Endpoint, MetadataDelta, MetadataImage, PartitionRegistration, TopicImage};
use model::{BrokerConfig, ErrorCode, TopicConfig, TopicId, TopicPartition};
use quorum::{Publication, QuorumHandle};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use storage::{Clock, SystemClock};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The file in a partition directory naming the topic id it belongs to (as Kafka's
/// `partition.metadata`): a directory of a deleted topic is never reused for a new topic of
/// the same name.
const PARTITION_METADATA: &str = "partition.metadata";
/// Producer ids in a block (the controller's `producer_id_block_size`).
const PRODUCER_ID_BLOCK: i64 = 1000;
/// How long a request waits for this node to apply the metadata change it caused.
const APPLY_WAIT: Duration = Duration::from_secs(30);

/// Producer ids handed out from the blocks the controller allocates to this broker
/// (AllocateProducerIds, as Kafka's RPCProducerIdManager): the next block is fetched when the
/// current one is 90% used, so handing out an id rarely waits.
#[derive(Debug, Default)]
struct ProducerIdBlocks {
    next: i64,
    end: i64,
    prefetched: Option<(i64, i64)>,
    fetching: bool,
}

/// Everything request handlers share. Lives as long as the node, behind an `Arc`.
pub struct BrokerState {
    pub config: BrokerConfig,
    pub node_id: i32,
    /// The advertised host and port of the client listener.
    pub host: String,
    pub port: i32,
    /// Every advertised broker endpoint (one per broker listener).
    pub endpoints: Vec<Endpoint>,
    pub data_dir: PathBuf,
    image: RwLock<Arc<MetadataImage>>,
    /// The effective broker-level keys: the static config overlaid by the committed dynamic
    /// broker configs (cluster default, then this broker's own); topic defaults resolve here.
    broker_props: RwLock<Arc<BTreeMap<String, String>>>,
    /// Bumped after every change of `broker_props` (tasks that read a dynamic key wait on it).
    broker_props_version: watch::Sender<u64>,
    /// The brokers that may join an ISR (registered, unfenced, not in controlled shutdown),
    /// published before hosted partitions apply an image (the image itself is published
    /// after them): a leader must never propose a follower for the ISR from an older view of
    /// the brokers than its partition state (Kafka's `isReplicaIsrEligible`).
    isr_eligible: RwLock<Arc<BTreeSet<i32>>>,
    /// The offset of the last image this node applied (hosted partitions follow it).
    applied: watch::Sender<i64>,
    pub replicas: ReplicaManager,
    pub groups: Arc<Groups>,
    pub txns: Arc<Transactions>,
    pub clock: Arc<dyn Clock>,
    /// Bumped whenever a high watermark moves; Fetch long-polls wait on it.
    pub data_version: Arc<watch::Sender<u64>>,
    /// Replication settings, acks=all waits and the replicas' event queue.
    pub replication: Arc<ReplicationContext>,
    replication_events: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Event>>>,
    pub cancel: CancellationToken,
    pub tasks: TaskTracker,
    /// The active controller, local or remote.
    pub controller: ControllerLink,
    /// How this broker secures its connections to other brokers (see `peers`).
    pub inter_broker_security: client::Security,
    /// The TLS listeners' acceptors, by listener name (reloaded by [`BrokerState::refresh_tls`]).
    pub tls: BTreeMap<String, Arc<crate::tls::ListenerTls>>,
    /// This node's quorum member, when it is a controller voter.
    pub quorum: Option<QuorumHandle>,
    cluster_id: quorum::transport::SharedClusterId,
    /// The broker epoch of this broker's registration (-1 before it registered).
    pub broker_epoch: AtomicI64,
    /// Set once the broker is registered and unfenced.
    pub serving: AtomicBool,
    producer_ids: Arc<Mutex<ProducerIdBlocks>>,
    producer_ids_ready: Arc<tokio::sync::Notify>,
    strays_checked: AtomicBool,
    /// Serialises publications (one image at a time, in order).
    publish_lock: Mutex<()>,
    /// The data directory's recovery-point checkpoint (see `log_dirs`).
    pub recovery_points: OffsetCheckpoint,
    /// The data directory's high-watermark checkpoint (see `log_dirs`).
    pub high_watermarks: OffsetCheckpoint,
    /// The broker-wide budget of request bytes (`queued.max.request.bytes`): a permit per
    /// byte of every frame being read or handled (see `connection`).
    pub request_budget: Arc<tokio::sync::Semaphore>,
    pub request_budget_bytes: usize,
    /// The pool that runs every log's group-commit fsyncs (`log.io.threads` threads).
    pub flusher: Arc<storage::Flusher>,
    /// The ACL authorizer over the applied image's ACLs; `None` without
    /// `authorizer.class.name`. Rebuilt (never mutated) when a publication changes ACLs.
    authorizer: RwLock<Option<Arc<auth::acl::Authorizer>>>,
    /// Client quotas of the applied image, and their rate sensors.
    pub quotas: crate::quotas::ClientQuotas,
    /// The replication throttles (KIP-73) of the effective broker configs.
    pub replication_quotas: crate::quotas::ReplicationQuotas,
    /// Open client connections per address and in total (`conn_limits`).
    pub connections: Arc<crate::conn_limits::ConnectionCounts>,
}

impl std::fmt::Debug for BrokerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerState")
            .field("node_id", &self.node_id)
            .finish()
    }
}

/// What [`BrokerState::new`] needs besides the config.
pub struct StateParts {
    pub host: String,
    pub port: i32,
    pub endpoints: Vec<Endpoint>,
    pub controller: ControllerLink,
    pub inter_broker_security: client::Security,
    /// The TLS listeners' acceptors, by listener name.
    pub tls: BTreeMap<String, Arc<crate::tls::ListenerTls>>,
    pub quorum: Option<QuorumHandle>,
    /// The cluster id this node sends to the quorum (learnt from the committed image).
    pub cluster_id: quorum::transport::SharedClusterId,
    pub cancel: CancellationToken,
    pub tasks: TaskTracker,
}

impl BrokerState {
    pub fn new(config: BrokerConfig, parts: StateParts) -> Result<Arc<BrokerState>, BrokerError> {
        let data_dir = PathBuf::from(&config.data_dir);
        std::fs::create_dir_all(&data_dir).map_err(|source| BrokerError::DataDir {
            path: data_dir.display().to_string(),
            source,
        })?;
        let recovery_points = OffsetCheckpoint::load(&data_dir, storage::RECOVERY_POINT_FILE);
        let high_watermarks = OffsetCheckpoint::load(&data_dir, storage::HIGH_WATERMARK_FILE);
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
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let data_version = Arc::new(watch::Sender::new(0));
        let (replication, replication_events) =
            ReplicationContext::new(&config, clock.clone(), data_version.clone());
        Ok(Arc::new(BrokerState {
            flusher,
            recovery_points,
            high_watermarks,
            request_budget: Arc::new(tokio::sync::Semaphore::new(request_budget_bytes)),
            request_budget_bytes,
            node_id: config.node_id,
            host: parts.host,
            port: parts.port,
            endpoints: parts.endpoints,
            data_dir,
            image: RwLock::new(Arc::new(MetadataImage::empty())),
            broker_props: RwLock::new(Arc::new(config.props.clone())),
            broker_props_version: watch::Sender::new(0),
            isr_eligible: RwLock::new(Arc::new(BTreeSet::new())),
            applied: watch::Sender::new(-1),
            replicas: ReplicaManager::default(),
            groups: Arc::new(Groups::new(&config)),
            txns: Arc::new(Transactions::new(&config)),
            clock,
            data_version,
            replication,
            replication_events: Mutex::new(Some(replication_events)),
            cancel: parts.cancel,
            tasks: parts.tasks,
            controller: parts.controller,
            inter_broker_security: parts.inter_broker_security,
            tls: parts.tls,
            quorum: parts.quorum,
            cluster_id: parts.cluster_id,
            broker_epoch: AtomicI64::new(-1),
            serving: AtomicBool::new(false),
            producer_ids: Arc::new(Mutex::new(ProducerIdBlocks::default())),
            producer_ids_ready: Arc::new(tokio::sync::Notify::new()),
            strays_checked: AtomicBool::new(false),
            publish_lock: Mutex::new(()),
            authorizer: RwLock::new(authorizer_for(&config, &MetadataImage::empty())),
            quotas: crate::quotas::ClientQuotas::new(&config),
            replication_quotas: crate::quotas::ReplicationQuotas::new(&config),
            connections: Default::default(),
            config,
        }))
    }

    /// The authorizer of the applied image, when ACLs are enforced.
    pub fn authorizer(&self) -> Option<Arc<auth::acl::Authorizer>> {
        self.authorizer
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The committed metadata image this node has applied.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The offset of the last applied image.
    pub fn applied_offset(&self) -> i64 {
        *self.applied.borrow()
    }

    /// Waits until this node has applied the metadata log up to `offset` (so a request that
    /// changed metadata is answered only when a Metadata request here sees the change).
    pub async fn wait_applied(&self, offset: i64) -> bool {
        let mut rx = self.applied.subscribe();
        let result =
            tokio::time::timeout(APPLY_WAIT, rx.wait_for(|applied| *applied >= offset)).await;
        matches!(result, Ok(Ok(_)))
    }

    /// Whether this node is the active controller.
    pub fn is_active_controller(&self) -> bool {
        self.quorum
            .as_ref()
            .is_some_and(|q| q.leadership().borrow().active)
    }

    /// The id of the active controller, as this node knows it (-1 if unknown).
    pub fn controller_id(&self) -> i32 {
        self.controller.leader_id().map_or(-1, |id| id as i32)
    }

    /// The hosted partition, if this broker leads it: NOT_LEADER_OR_FOLLOWER when another
    /// broker does (or nobody does right now), UNKNOWN_TOPIC_OR_PARTITION when it does not exist.
    pub fn leader_partition(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Arc<Partition>, ErrorCode> {
        match self.replicas.lookup(topic, partition) {
            Ok(p) if p.is_leader() => Ok(p),
            Ok(_) => Err(ErrorCode::NotLeaderOrFollower),
            Err(ErrorCode::KafkaStorageError) => Err(ErrorCode::KafkaStorageError),
            Err(_) => {
                let image = self.image();
                let exists = image
                    .topic(topic)
                    .is_some_and(|t| image.partition(t.id, partition).is_some());
                Err(if exists {
                    ErrorCode::NotLeaderOrFollower
                } else {
                    ErrorCode::UnknownTopicOrPartition
                })
            }
        }
    }

    /// Whether broker `id` may be proposed for an ISR (see the field).
    pub fn isr_eligible(&self, id: i32) -> bool {
        self.isr_eligible
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&id)
    }

    /// Reloads the TLS listeners whose stores changed: another file named by the dynamic
    /// `listener.name.<listener>.ssl.*.location`, or the same file with new contents. A store
    /// that cannot be loaded is logged and the listener keeps its current certificate.
    pub fn refresh_tls(&self) {
        if self.tls.is_empty() {
            return;
        }
        let props = self.broker_props();
        let initial = !self.serving.load(std::sync::atomic::Ordering::Acquire);
        for (listener, tls) in &self.tls {
            match tls.refresh(&props, initial) {
                Ok(true) => tracing::info!(%listener, "TLS stores reloaded"),
                Ok(false) => {}
                Err(e) => tracing::error!(
                    %listener,
                    error = %e,
                    "TLS stores not reloaded; the listener keeps its current certificate"
                ),
            }
        }
    }

    /// The effective broker-level keys (static config overlaid by dynamic broker configs).
    pub fn broker_props(&self) -> Arc<BTreeMap<String, String>> {
        self.broker_props
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The effective log config of a topic (overrides were validated when written).
    pub fn topic_config(&self, topic: &TopicImage) -> TopicConfig {
        TopicConfig::resolve(&self.broker_props(), &topic.configs)
            .unwrap_or_else(|e| {
                tracing::warn!(topic = %topic.name, error = %e, "invalid stored topic config; using defaults");
                TopicConfig::default()
            })
    }

    /// Wakes Fetch long-polls: some high watermark moved.
    pub fn notify_data(&self) {
        self.data_version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Serialises changes to the hosted partitions (applying a publication, re-opening
    /// offline logs).
    pub(crate) fn reconcile_guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.publish_lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cluster id this node belongs to: the committed image's once it has one, else the
    /// configured `cluster.id` (or the data dir's), else empty (a new cluster's first start).
    pub fn known_cluster_id(&self) -> String {
        self.cluster_id
            .read()
            .map(|c| c.clone())
            .unwrap_or_default()
    }

    /// Makes this node follow a committed image: hosted partitions (open, lead or follow,
    /// reconfigure, delete), the group coordinator, then the image handlers read. Called by
    /// the metadata loader, one publication at a time.
    pub fn apply_publication(self: &Arc<Self>, publication: Publication) {
        let _guard = self.reconcile_guard();
        let Publication { image, delta } = publication;
        if !image.cluster_id.is_empty() {
            if let Ok(mut c) = self.cluster_id.write() {
                if *c != image.cluster_id {
                    *c = image.cluster_id.clone();
                }
            }
        }
        let broker_configs_changed = delta.full || delta.broker_configs_changed;
        if broker_configs_changed {
            let props = image
                .broker_layers(self.node_id, &self.config.props)
                .effective();
            self.replication_quotas.update(&props);
            // A lowered max.connections closes the least recently active connections over it,
            // as Kafka's processors do while `maxConnectionsExceeded`.
            let max_connections = crate::conn_limits::Limits::from_props(&props).max_connections;
            let told = self.connections.close_excess(max_connections);
            if told > 0 {
                tracing::info!(
                    max_connections,
                    closing = told,
                    "max.connections lowered under the open connections: closing the least recently active"
                );
            }
            *self.broker_props.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(props);
            self.broker_props_version
                .send_modify(|v| *v = v.wrapping_add(1));
            self.refresh_tls();
        }
        if self.config.roles.broker && !delta.full {
            self.count_isr_changes(&image, &delta);
        }
        if delta.full || !delta.changed_brokers.is_empty() {
            let eligible = image
                .brokers
                .values()
                .filter(|b| b.is_usable())
                .map(|b| b.node_id)
                .collect();
            *self.isr_eligible.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(eligible);
        }
        if self.config.roles.broker {
            self.apply_partitions(&image, &delta);
            // A full publication already reconfigured every topic.
            if broker_configs_changed && !delta.full {
                self.reconfigure_partitions(&image);
            }
        }
        if delta.quotas_changed || delta.full {
            self.quotas.update(&image);
            self.connections.set_ip_quotas(&image);
        }
        if delta.acls_changed || delta.full {
            let authorizer = authorizer_for(&self.config, &image);
            *self.authorizer.write().unwrap_or_else(|e| e.into_inner()) = authorizer;
        }
        *self.image.write().unwrap_or_else(|e| e.into_inner()) = image.clone();
        if self.config.roles.broker {
            self.groups.on_metadata(self, &image, &delta);
            self.txns.on_metadata(self, &image, &delta);
        }
        self.applied.send_replace(image.offset);
    }

    /// Counts committed ISR changes of the partitions this broker leads, whoever asked for them
    /// (its own AlterPartition, or the controller removing a fenced broker), as Kafka's
    /// `IsrShrinksPerSec` / `IsrExpandsPerSec` do on the leader.
    fn count_isr_changes(&self, image: &MetadataImage, delta: &MetadataDelta) {
        let before = self.image();
        for (topic_id, partition) in &delta.changed_partitions {
            let (Some(old), Some(new)) = (
                before.partition(*topic_id, *partition),
                image.partition(*topic_id, *partition),
            ) else {
                continue;
            };
            if new.leader != self.node_id {
                continue;
            }
            let shrunk = old.isr.iter().filter(|r| !new.isr.contains(r)).count();
            let expanded = new.isr.iter().filter(|r| !old.isr.contains(r)).count();
            crate::metrics::METRICS.isr_changes(shrunk > 0, expanded > 0);
        }
    }

    /// Applies changed dynamic broker configs (topic defaults) to every hosted partition,
    /// without a restart: each log reads its config on every append, roll and retention pass.
    fn reconfigure_partitions(&self, image: &MetadataImage) {
        for p in self.replicas.all() {
            if let Some(topic) = image.topic_by_id(p.topic_id) {
                p.update_config(self.topic_config(topic));
            }
        }
        tracing::info!("dynamic broker configs applied to the hosted partitions");
    }

    fn apply_partitions(&self, image: &MetadataImage, delta: &MetadataDelta) {
        // Topics whose deletion is committed: their data goes.
        for (id, topic) in &delta.deleted_topics {
            for p in self.replicas.all() {
                if p.topic_id == *id {
                    tracing::info!(partition = %p.tp, topic = %topic.name, "deleting partition of a deleted topic");
                    self.drop_partition(&p, true);
                }
            }
        }
        // Offline partitions whose topic's deletion is committed: their data may go.
        // First, so a recreated topic of the same name never has its new directory removed.
        for o in self.replicas.all_offline() {
            let gone = match image.topic(&o.tp.topic) {
                Some(t) => t.id != o.topic_id,
                None => delta.deleted_topics.contains_key(&o.topic_id),
            };
            if gone {
                self.replicas.clear_offline(&o.tp);
                let dir = self.data_dir.join(o.tp.dir_name());
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    tracing::error!(partition = %o.tp, error = %e, "deleting the directory of an offline partition failed");
                }
            }
        }
        let mut touched: BTreeSet<TopicId> = BTreeSet::new();
        if delta.full {
            touched.extend(image.topics.values().map(|t| t.id));
            // A snapshot replaced what this node knew: partitions it no longer lists may have
            // been deleted or never existed here; set them aside, never delete.
            for p in self.replicas.all() {
                let known = image.partition(p.topic_id, p.tp.partition).is_some()
                    && image.topic(&p.tp.topic).is_some_and(|t| t.id == p.topic_id);
                if !known {
                    tracing::warn!(partition = %p.tp, "hosted partition unknown to the new metadata snapshot; setting it aside");
                    self.drop_partition(&p, false);
                }
            }
        } else {
            touched.extend(delta.created_topics.iter().copied());
            touched.extend(delta.changed_partitions.iter().map(|(t, _)| *t));
            touched.extend(delta.changed_configs.iter().copied());
        }
        let mut leadership_moved = false;
        let mut to_open = Vec::new();
        for id in touched {
            let Some(topic) = image.topic_by_id(id) else {
                continue;
            };
            let config = self.topic_config(topic);
            for (i, reg) in topic.partitions.iter().enumerate() {
                let index = i as i32;
                let hosted = self.replicas.get(&topic.name, index);
                let mine = reg.replicas.contains(&self.node_id);
                if let Some(existing) = &hosted {
                    if existing.topic_id != topic.id {
                        // The name now belongs to a new topic: the old one's deletion is
                        // committed (the image maps the name to another id).
                        self.drop_partition(existing, true);
                    } else if !mine {
                        // Reassigned away by a committed change. The replica learns it first:
                        // acks=all produces still waiting on it are answered
                        // NOT_LEADER_OR_FOLLOWER (the client retries on the new leader)
                        // instead of never, which held back every later answer on their
                        // connections until the client's request timeout.
                        existing.apply_metadata(partition_state(reg));
                        self.drop_partition(existing, true);
                        leadership_moved = true;
                        continue;
                    } else {
                        existing.update_config(config.clone());
                        let (lead, epoch) = (existing.is_leader(), existing.leader_epoch());
                        existing.apply_metadata(partition_state(reg));
                        if existing.is_leader() != lead || existing.leader_epoch() != epoch {
                            leadership_moved = true;
                        }
                        continue;
                    }
                }
                if !mine {
                    continue;
                }
                let tp = TopicPartition::new(topic.name.clone(), index);
                if self
                    .replicas
                    .offline_partition(&tp)
                    .is_some_and(|o| o.topic_id == topic.id)
                {
                    // Offline: left alone here (re-opening re-scans and re-logs the damage).
                    continue;
                }
                if let Err(e) = self.claim_partition_dir(&tp, topic.id) {
                    tracing::error!(partition = %tp, error = %e, "preparing the partition directory failed");
                    continue;
                }
                let lead = reg.leader == self.node_id;
                to_open.push((tp, topic.id, reg.leader_epoch, lead, config.clone()));
            }
        }
        // Thousands of new partitions take a few fsyncs each: opened on `log.io.threads`
        // threads at once.
        if !to_open.is_empty() {
            let opened: Vec<(TopicPartition, TopicId)> =
                to_open.iter().map(|o| (o.0.clone(), o.1)).collect();
            log_dirs::open_partitions(self, to_open);
            for (tp, id) in opened {
                if let (Some(p), Some(reg)) = (
                    self.replicas.get(&tp.topic, tp.partition),
                    image.partition(id, tp.partition),
                ) {
                    p.apply_metadata(partition_state(reg));
                }
            }
            leadership_moved = true;
        }
        if leadership_moved {
            self.notify_data();
        }
    }

    /// Makes sure a partition's directory belongs to this topic id (writing the marker for a
    /// directory that has none); a directory left by an older topic of the same name is set
    /// aside.
    fn claim_partition_dir(
        &self,
        tp: &TopicPartition,
        topic_id: TopicId,
    ) -> Result<(), BrokerError> {
        let dir = self.data_dir.join(tp.dir_name());
        let marker = dir.join(PARTITION_METADATA);
        let wanted = format_id(topic_id);
        let io_err = |source: std::io::Error| BrokerError::DataDir {
            path: marker.display().to_string(),
            source,
        };
        if let Ok(text) = std::fs::read_to_string(&marker) {
            let stored = text
                .lines()
                .find_map(|l| l.strip_prefix("topic_id:"))
                .map(str::trim);
            if stored.is_some_and(|s| s != wanted) {
                self.rename_stray(&dir, &tp.dir_name());
            } else {
                return Ok(());
            }
        }
        std::fs::create_dir_all(&dir).map_err(io_err)?;
        let tmp = dir.join(format!("{PARTITION_METADATA}.tmp"));
        std::fs::write(&tmp, format!("version: 0\ntopic_id: {wanted}\n"))
            .and_then(|()| std::fs::rename(&tmp, &marker))
            .map_err(io_err)
    }

    /// Closes a hosted partition; deletes its directory only for a committed deletion
    /// (`delete`), else renames it aside.
    fn drop_partition(&self, p: &Arc<Partition>, delete: bool) {
        self.replicas.remove(&p.tp);
        if delete {
            if let Err(e) = p.log.delete_dir() {
                tracing::error!(partition = %p.tp, error = %e, "deleting partition directory failed");
            }
        } else {
            if let Err(e) = p.log.close() {
                tracing::warn!(partition = %p.tp, error = %e, "closing partition failed");
            }
            self.rename_stray(&self.data_dir.join(p.tp.dir_name()), &p.tp.dir_name());
        }
        self.notify_data();
    }

    fn rename_stray(&self, dir: &Path, name: &str) {
        let stray = format!("{name}.{}-stray", uuid::Uuid::new_v4().simple());
        match std::fs::rename(dir, self.data_dir.join(&stray)) {
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

    /// Renames aside partition directories the committed metadata does not assign to this
    /// broker (`<dir>.<uuid>-stray`, as Kafka names stray logs) and reports them. They are
    /// never deleted: only a committed topic deletion deletes data, and a directory can be
    /// unknown for other reasons (metadata restored from a backup or cut by an operator).
    ///
    /// Runs once, after the broker registered and caught up with the metadata log: a node's
    /// own copy of the log may lag the quorum at start (topics created while it was down are
    /// not in it yet), and such a lagging image must never decide what is unknown.
    pub fn set_aside_stray_dirs(&self) {
        if self.strays_checked.swap(true, Ordering::AcqRel) {
            return;
        }
        let _guard = self.reconcile_guard();
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
                self.rename_stray(&entry.path(), &name);
            }
        }
    }

    /// Submits a request to the active controller (wherever it is) and waits until this node
    /// applied what it committed.
    pub async fn controller_call(&self, request: Request) -> Result<Reply, ControllerError> {
        let answer = self.controller.submit(request).await;
        if answer.result.is_ok() && !self.wait_applied(answer.offset).await {
            return Err(ControllerError::new(
                ErrorCode::RequestTimedOut,
                "the change was committed but this broker has not applied it yet",
            ));
        }
        answer.result
    }

    /// Creates a topic on first use, if `auto.create.topics.enable` allows; `quota`: the
    /// controller mutation quota of the client it is created for (this node must then be the
    /// active controller, which applies it).
    pub async fn auto_create(
        &self,
        name: &str,
        quota: controller::MutationQuotaRef,
    ) -> Result<Arc<TopicImage>, ControllerError> {
        let request = Request::CreateTopics {
            topics: vec![controller::TopicSpec {
                name: name.to_string(),
                partitions: -1,
                replication_factor: -1,
                assignment: Vec::new(),
                configs: Default::default(),
            }],
            validate_only: false,
            origin: controller::Origin::Broker,
            quota,
        };
        let result = match self.controller_call(request).await? {
            Reply::CreateTopics(mut r) if !r.is_empty() => r.remove(0).map(|_| ()),
            other => Err(ControllerError::new(
                ErrorCode::UnknownServerError,
                format!("unexpected controller reply {other:?}"),
            )),
        };
        match result {
            Ok(()) => tracing::info!(topic = name, "auto-created topic"),
            // Another request created it first: that's success for us.
            Err(e) if e.code == ErrorCode::TopicAlreadyExists => {}
            Err(e) => return Err(e),
        }
        self.image().topic(name).cloned().ok_or_else(|| {
            ControllerError::new(ErrorCode::LeaderNotAvailable, "topic not yet visible")
        })
    }

    /// Hands out a new producer id at once from this broker's block, or fails with a
    /// retriable error (COORDINATOR_LOAD_IN_PROGRESS) while a new block is being fetched.
    /// Ids are never reused.
    pub fn next_producer_id_now(&self) -> Result<i64, ErrorCode> {
        let mut p = self.producer_ids.lock().unwrap_or_else(|e| e.into_inner());
        if p.next >= p.end {
            if let Some((start, end)) = p.prefetched.take() {
                p.next = start;
                p.end = end;
            }
        }
        let result = if p.next < p.end {
            let id = p.next;
            p.next += 1;
            Ok(id)
        } else {
            Err(ErrorCode::CoordinatorLoadInProgress)
        };
        let low = p.prefetched.is_none() && (p.end - p.next) * 10 < PRODUCER_ID_BLOCK;
        if low && !p.fetching {
            p.fetching = true;
            drop(p);
            self.fetch_producer_ids();
        }
        result
    }

    fn fetch_producer_ids(&self) {
        let controller = self.controller.clone();
        let blocks = self.producer_ids.clone();
        let ready = self.producer_ids_ready.clone();
        let request = Request::AllocateProducerIds {
            broker_id: self.node_id,
            broker_epoch: self.broker_epoch.load(Ordering::Acquire),
        };
        self.tasks.spawn(async move {
            let block = match controller.submit(request).await.result {
                Ok(Reply::AllocateProducerIds(Ok((start, len)))) => Some((start, start + len)),
                other => {
                    tracing::warn!(?other, "allocating a producer id block failed");
                    None
                }
            };
            {
                let mut p = blocks.lock().unwrap_or_else(|e| e.into_inner());
                p.fetching = false;
                if block.is_some() {
                    p.prefetched = block;
                }
            }
            ready.notify_waiters();
        });
    }

    /// Asks the controller for a producer id block ahead of need (a broker that just
    /// registered fetches one, so its first InitProducerId does not wait).
    pub fn prefetch_producer_ids(&self) {
        let mut p = self.producer_ids.lock().unwrap_or_else(|e| e.into_inner());
        if p.next >= p.end && p.prefetched.is_none() && !p.fetching {
            p.fetching = true;
            drop(p);
            self.fetch_producer_ids();
        }
    }

    /// Waits (a bounded while) until a producer id can be handed out without waiting.
    pub async fn wait_producer_ids(&self) {
        for _ in 0..50 {
            let ready = self.producer_ids_ready.notified();
            {
                let p = self.producer_ids.lock().unwrap_or_else(|e| e.into_inner());
                if p.next < p.end || p.prefetched.is_some() {
                    return;
                }
            }
            self.prefetch_producer_ids();
            let _ = tokio::time::timeout(Duration::from_millis(200), ready).await;
        }
    }

    /// Hands out a new producer id, waiting (a bounded while) for a block when needed.
    pub async fn allocate_producer_id(&self) -> Result<i64, ErrorCode> {
        let mut last = ErrorCode::CoordinatorLoadInProgress;
        for _ in 0..50 {
            let ready = self.producer_ids_ready.notified();
            match self.next_producer_id_now() {
                Ok(id) => return Ok(id),
                Err(e) => last = e,
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), ready).await;
        }
        Err(last)
    }

    /// Starts the periodic jobs: flush.ms checks, retention, compaction.
    pub fn start_background(self: &Arc<Self>) {
        let events = self
            .replication_events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(events) = events {
            self.tasks
                .spawn(crate::replicator::run(self.clone(), events));
        }
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
        self.spawn_cleaner();
    }

    /// `log.cleaner.backoff.ms` in force: the effective (possibly dynamic) value, else the
    /// static one.
    fn cleaner_backoff(&self) -> Duration {
        let ms = self
            .broker_props()
            .get(model::config::CLEANER_BACKOFF_MS)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(self.config.log_cleaner_backoff_ms);
        Duration::from_millis(ms.max(10) as u64)
    }

    /// The cleaner: a compaction pass over every hosted partition, then a pause of
    /// `log.cleaner.backoff.ms`. The key is dynamic (as Kafka's cleaner, which restarts its
    /// threads when it changes): the pause is re-read before each wait, and a committed change
    /// of the value ends the current wait with a pass at once.
    fn spawn_cleaner(self: &Arc<Self>) {
        let state = self.clone();
        self.tasks.spawn(async move {
            let mut changes = state.broker_props_version.subscribe();
            loop {
                let backoff = state.cleaner_backoff();
                let pause = tokio::time::sleep(backoff);
                tokio::pin!(pause);
                loop {
                    tokio::select! {
                        _ = state.cancel.cancelled() => return,
                        _ = &mut pause => break,
                        // `state` owns the sender, so this never ends in an error.
                        Ok(()) = changes.changed() => {
                            if state.cleaner_backoff() != backoff {
                                tracing::info!(
                                    backoff_ms = state.cleaner_backoff().as_millis() as u64,
                                    "log.cleaner.backoff.ms changed: cleaning now"
                                );
                                break;
                            }
                        }
                    }
                }
                state
                    .run_on_every_partition("compaction", |p| p.log.run_compaction().map(|_| ()))
                    .await;
            }
        });
    }

    fn spawn_periodic(
        self: &Arc<Self>,
        name: &'static str,
        period: Duration,
        job: fn(&Arc<Partition>) -> Result<(), storage::StorageError>,
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
                state.run_on_every_partition(name, job).await;
            }
        });
    }

    /// Runs a log job over every hosted partition on the blocking pool.
    async fn run_on_every_partition(
        &self,
        name: &'static str,
        job: fn(&Arc<Partition>) -> Result<(), storage::StorageError>,
    ) {
        let partitions = self.replicas.all();
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

    /// Flushes every log, writes clean-shutdown markers and the recovery-point and
    /// high-watermark checkpoints.
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
        log_dirs::write_high_watermarks(self);
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }
}

/// A partition's committed registration as the replication core sees it.
pub fn partition_state(reg: &PartitionRegistration) -> replication::PartitionState {
    replication::PartitionState {
        leader: (reg.leader >= 0).then_some(reg.leader),
        leader_epoch: reg.leader_epoch,
        partition_epoch: reg.partition_epoch,
        replicas: reg.replicas.clone(),
        isr: reg.isr.clone(),
    }
}

/// The authorizer for `image`'s ACLs, when `authorizer.class.name` switches ACLs on.
fn authorizer_for(
    config: &BrokerConfig,
    image: &MetadataImage,
) -> Option<Arc<auth::acl::Authorizer>> {
    let a = config.security.authorizer.as_ref()?;
    let acls: Vec<auth::acl::AclBinding> = image
        .acls
        .values()
        .filter_map(controller::acl_binding)
        .collect();
    Some(Arc::new(auth::acl::Authorizer::new(
        &a.super_users,
        a.allow_everyone_if_no_acl_found,
        &acls,
    )))
}
