//! The controller state machine: requests in, records and replies out (see the crate docs).

use crate::election::{self, Election};
use crate::placement::{self, Candidate, Load};
use crate::policy;
use crate::reassignment;
use crate::{ControllerError, MutationQuotaRef};
use auth::acl::{AccessControlEntry, AclBinding, AclBindingFilter, ResourcePattern};
use metadata::image::format_id;
use metadata::{
    AclEntry, BrokerRegistration, Endpoint, MetadataDelta, MetadataImage, MetadataRecord,
    PartitionRegistration, TopicImage,
};
use model::acl::{AclOperation, PatternType, PermissionType, ResourceType};
use model::{ErrorCode, NodeId, TopicConfig, TopicId};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

/// What the controller is configured with.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// This node's id (for logs).
    pub node_id: NodeId,
    /// The configured `cluster.id`; the first active controller writes it (or a generated one).
    pub cluster_id: Option<String>,
    /// `num.partitions`: partitions of a topic created without a count.
    pub num_partitions: i32,
    /// `default.replication.factor`.
    pub default_replication_factor: i16,
    /// `broker.session.timeout.ms`: a broker without a heartbeat for this long is fenced.
    pub broker_session_timeout_ms: i64,
    /// Broker-level config keys, to validate topic overrides and resolve topic defaults
    /// (`unclean.leader.election.enable`).
    pub broker_props: BTreeMap<String, String>,
    /// Producer ids handed to a broker per AllocateProducerIds.
    pub producer_id_block_size: i64,
    /// `max.broker.partitions` (KIP-578): partitions a broker may host.
    pub max_broker_partitions: i64,
    /// Why `max_broker_partitions` is lower than configured (the open-file limit), named in
    /// the refusal.
    pub max_broker_partitions_note: Option<String>,
    /// `auto.leader.rebalance.enable` (Kafka's default: true): every
    /// `leader.imbalance.check.interval.seconds` the active controller moves leadership back
    /// to each partition's preferred (first) replica where it may lead.
    pub auto_leader_rebalance: bool,
    /// `leader.imbalance.check.interval.seconds`, in ms (Kafka's default: 300 s).
    pub leader_imbalance_check_interval_ms: i64,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            node_id: 1,
            cluster_id: None,
            num_partitions: 1,
            default_replication_factor: 1,
            broker_session_timeout_ms: 9000,
            broker_props: BTreeMap::new(),
            producer_id_block_size: 1000,
            max_broker_partitions: i64::from(i32::MAX),
            max_broker_partitions_note: None,
            auto_leader_rebalance: true,
            leader_imbalance_check_interval_ms: 300_000,
        }
    }
}

/// Who asked: clients, or a broker on its own behalf (internal topics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Client,
    Broker,
}

/// A topic named by name or by id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopicRef {
    Name(String),
    Id(TopicId),
}

/// A topic to create. `partitions` / `replication_factor` of -1 mean the defaults; a non-empty
/// `assignment` lists the replicas of each partition instead.
#[derive(Clone, Debug, Default)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub assignment: Vec<Vec<NodeId>>,
    pub configs: BTreeMap<String, String>,
}

/// A created (or, with validate_only, validated) topic.
#[derive(Clone, Debug, PartialEq)]
pub struct CreatedTopic {
    pub id: TopicId,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// What a config change applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigResource {
    Topic(String),
    /// A group's overrides (config resource type GROUP); the group need not exist.
    Group(String),
    /// Dynamic broker configs (config resource type BROKER): a broker id, or "" for the
    /// cluster-wide default.
    Broker(String),
}

/// Config changes of one resource: keys to a new value or `None` to remove the override; with
/// `replace_all`, overrides not named are removed (legacy AlterConfigs).
#[derive(Clone, Debug)]
pub struct ConfigChange {
    pub resource: ConfigResource,
    pub changes: BTreeMap<String, Option<String>>,
    pub replace_all: bool,
}

/// A broker's registration request (Kafka's BrokerRegistration).
#[derive(Clone, Debug)]
pub struct RegisterBroker {
    pub node_id: NodeId,
    pub cluster_id: String,
    pub incarnation_id: String,
    pub endpoints: Vec<Endpoint>,
    pub rack: Option<String>,
    /// The epoch of this broker's previous registration, if it shut down cleanly (-1 if not):
    /// lets a restart re-register at once instead of waiting out the old session.
    pub previous_broker_epoch: i64,
}

/// The controller's answer to a heartbeat (Kafka's BrokerHeartbeatResponse).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub is_caught_up: bool,
    pub is_fenced: bool,
    pub should_shut_down: bool,
}

/// One partition's ISR change proposed by its leader (AlterPartition, API 56, v2+: topics by
/// id, as Kafka 4 accepts them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsrChange {
    pub partition: i32,
    /// The leader epoch the leader acts in.
    pub leader_epoch: i32,
    /// The partition epoch the proposal was based on.
    pub partition_epoch: i32,
    /// The proposed ISR, each member with the broker epoch the leader saw for it (-1: not
    /// checked, as AlterPartition v2 sends it).
    pub new_isr: Vec<(NodeId, i64)>,
    /// KIP-704's leader recovery state: 0 RECOVERED, 1 RECOVERING.
    pub leader_recovery_state: i8,
}

/// Applies a request's mutation quota (if any) to one topic's partitions.
fn apply_quota(quota: &MutationQuotaRef, partitions: usize) -> Result<(), ControllerError> {
    match quota {
        Some(q) => q.apply(u32::try_from(partitions).unwrap_or(u32::MAX)),
        None => Ok(()),
    }
}

/// A request to the controller.
#[derive(Clone, Debug)]
pub enum Request {
    CreateTopics {
        topics: Vec<TopicSpec>,
        validate_only: bool,
        origin: Origin,
        quota: MutationQuotaRef,
    },
    DeleteTopics {
        topics: Vec<TopicRef>,
        quota: MutationQuotaRef,
    },
    /// (topic, new total count, replicas of each new partition or empty to place them)
    CreatePartitions {
        topics: Vec<(String, i32, Vec<Vec<NodeId>>)>,
        validate_only: bool,
        origin: Origin,
        quota: MutationQuotaRef,
    },
    AlterConfigs {
        changes: Vec<ConfigChange>,
        validate_only: bool,
        origin: Origin,
    },
    RegisterBroker(RegisterBroker),
    BrokerHeartbeat {
        node_id: NodeId,
        broker_epoch: i64,
        current_metadata_offset: i64,
        want_fence: bool,
        want_shutdown: bool,
    },
    AllocateProducerIds {
        broker_id: NodeId,
        broker_epoch: i64,
    },
    /// ISR changes from a partition leader (Kafka's AlterPartition).
    AlterPartition {
        broker_id: NodeId,
        broker_epoch: i64,
        topics: Vec<(TopicId, Vec<IsrChange>)>,
    },
    /// AlterUserScramCredentials: deletions and upsertions, (user, mechanism code).
    AlterUserScramCredentials {
        deletions: Vec<(String, i8)>,
        upsertions: Vec<ScramUpsertion>,
    },
    /// CreateAcls: bindings the broker already validated (`auth::acl::validate_new_acl`).
    CreateAcls(Vec<AclBinding>),
    /// DeleteAcls: every ACL matching any of the filters goes.
    DeleteAcls(Vec<AclBindingFilter>),
    /// AlterClientQuotas (API 49): per entry, the entity as (type, name) pairs (`None` name:
    /// the default) and the ops, (key, `Some(value)` to set or `None` to remove).
    AlterClientQuotas {
        entries: Vec<QuotaAlteration>,
        validate_only: bool,
    },
    /// ElectLeaders (API 43): PREFERRED or UNCLEAN elections for the named partitions
    /// (topic, partition ids), or for every partition when `None`.
    ElectLeaders {
        election: Election,
        partitions: Option<Vec<(String, Vec<i32>)>>,
    },
    /// AlterPartitionReassignments (API 45, KIP-455): per topic, per partition, the target
    /// replicas, or `None` to cancel the reassignment in progress.
    AlterPartitionReassignments {
        topics: Vec<(String, Vec<PartitionTarget>)>,
        /// v1's `allow_replication_factor_change` (KIP-860; true in v0).
        allow_replication_factor_change: bool,
    },
}

/// One AlterClientQuotas entry: the entity as (type, name) pairs and the ops, (key,
/// `Some(value)` to set or `None` to remove).
pub type QuotaAlteration = (Vec<(String, Option<String>)>, Vec<(String, Option<f64>)>);

/// A SCRAM credential to set: the broker derived the keys from the client's salted password
/// (the controller never sees a password nor does cryptography).
#[derive(Clone, PartialEq, Eq)]
pub struct ScramUpsertion {
    pub name: String,
    /// Kafka's code: 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512; anything else is refused.
    pub mechanism: i8,
    pub iterations: i32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for ScramUpsertion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramUpsertion")
            .field("name", &self.name)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// Kafka's bounds on SCRAM iterations (`ScramMechanism.minIterations`, and
/// `ScramControlManager`'s maximum).
const SCRAM_ITERATIONS: std::ops::RangeInclusive<i32> = 4096..=16384;

/// The answer to a [`Request`], one result per item where the request has several.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    CreateTopics(Vec<Result<CreatedTopic, ControllerError>>),
    /// The deleted topic's name and id.
    DeleteTopics(Vec<Result<(String, TopicId), ControllerError>>),
    CreatePartitions(Vec<Result<(), ControllerError>>),
    AlterConfigs(Vec<Result<(), ControllerError>>),
    /// The new broker epoch.
    RegisterBroker(Result<i64, ControllerError>),
    BrokerHeartbeat(Result<HeartbeatReply, ControllerError>),
    /// (first producer id, block length)
    AllocateProducerIds(Result<(i64, i64), ControllerError>),
    /// Per topic, per partition (in request order): the partition's registration after the
    /// change, or why it was refused. The outer error is the request's (STALE_BROKER_EPOCH).
    AlterPartition(
        Result<Vec<Vec<Result<PartitionRegistration, ControllerError>>>, ControllerError>,
    ),
    /// One result per user named in the request, in first-seen order.
    AlterUserScramCredentials(Vec<(String, Result<(), ControllerError>)>),
    /// One result per binding (creating an ACL that exists succeeds and writes nothing).
    CreateAcls(Vec<Result<(), ControllerError>>),
    /// Per filter, the ACLs it deleted (an ACL matched by an earlier filter of the request is
    /// reported by that one only).
    DeleteAcls(Vec<Vec<AclBinding>>),
    /// One result per entry, in request order.
    AlterClientQuotas(Vec<Result<(), ControllerError>>),
    /// Per topic, per partition: done, or Kafka's error (ELECTION_NOT_NEEDED,
    /// PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
    /// UNKNOWN_TOPIC_OR_PARTITION). For "every partition", partitions whose election was not
    /// needed are left out, as Kafka does.
    ElectLeaders(Vec<ElectionResults>),
    /// Per topic, per partition (in request order): started, completed or cancelled, or
    /// Kafka's error (UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT,
    /// INVALID_REPLICATION_FACTOR, NO_REASSIGNMENT_IN_PROGRESS).
    AlterPartitionReassignments(Vec<PartitionResults>),
}

/// A partition of AlterPartitionReassignments: (index, target replicas or `None` to cancel).
pub type PartitionTarget = (i32, Option<Vec<NodeId>>);

/// One topic's per-partition outcomes: (topic, [(partition, outcome)]).
pub type PartitionResults = (String, Vec<(i32, Result<(), ControllerError>)>);

/// One topic's ElectLeaders results: (topic, [(partition, outcome)]).
pub type ElectionResults = PartitionResults;

/// Records to propose (already applied to the speculative image) and what to answer once they
/// are committed. Empty `records`: nothing to commit, but the reply must still wait until
/// everything proposed before it is committed (it may depend on it).
#[derive(Debug)]
pub struct Decision<T> {
    pub records: Vec<MetadataRecord>,
    pub reply: T,
}

/// The stored form of an ACL.
pub fn acl_entry(b: &AclBinding) -> AclEntry {
    AclEntry {
        resource_type: b.pattern.resource_type.code(),
        resource_name: b.pattern.name.clone(),
        pattern_type: b.pattern.pattern_type.code(),
        principal: b.entry.principal.clone(),
        host: b.entry.host.clone(),
        operation: b.entry.operation.code(),
        permission_type: b.entry.permission.code(),
    }
}

/// An ACL as stored, read back; `None` for codes this build does not know.
pub fn acl_binding(a: &AclEntry) -> Option<AclBinding> {
    Some(AclBinding {
        pattern: ResourcePattern {
            resource_type: ResourceType::from_code(a.resource_type)?,
            name: a.resource_name.clone(),
            pattern_type: PatternType::from_code(a.pattern_type)?,
        },
        entry: AccessControlEntry {
            principal: a.principal.clone(),
            host: a.host.clone(),
            operation: AclOperation::from_code(a.operation)?,
            permission: PermissionType::from_code(a.permission_type)?,
        },
    })
}

/// A tiny deterministic generator (splitmix64) for topic and cluster ids: the runtime seeds it
/// from the OS, a simulation from its seed.
#[derive(Debug, Clone)]
struct Ids(u64);

impl Ids {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn topic_id(&mut self) -> TopicId {
        loop {
            let id = TopicId::from_u128((u128::from(self.next()) << 64) | u128::from(self.next()));
            if id != TopicId::ZERO {
                return id;
            }
        }
    }

    fn cluster_id(&mut self) -> String {
        format!("{:016x}{:016x}", self.next(), self.next())[..22].to_string()
    }
}

/// The controller. See the crate docs for its lifecycle.
#[derive(Debug)]
pub struct Controller {
    config: ControllerConfig,
    committed: Arc<MetadataImage>,
    /// Committed + pending; meaningful only while active.
    speculative: MetadataImage,
    /// Batches proposed and not yet committed, oldest first.
    pending: VecDeque<Vec<MetadataRecord>>,
    active: bool,
    /// Last heartbeat per broker (soft state of the active controller).
    heartbeats: HashMap<NodeId, i64>,
    /// The metadata offset each broker last reported applied in a heartbeat (soft state).
    reported_offsets: HashMap<NodeId, i64>,
    /// Per broker in controlled shutdown: a committed offset at or after the records that
    /// moved its leadership away. It may shut down once every other active broker reported
    /// having applied that far (soft state; Kafka's `controlledShutdownOffset`).
    shutdown_offsets: HashMap<NodeId, i64>,
    /// When automatic preferred-leader balancing next runs (set on the first tick).
    next_rebalance: Option<i64>,
    ids: Ids,
}

impl Controller {
    pub fn new(config: ControllerConfig, seed: u64) -> Controller {
        Controller {
            config,
            committed: Arc::new(MetadataImage::empty()),
            speculative: MetadataImage::empty(),
            pending: VecDeque::new(),
            active: false,
            heartbeats: HashMap::new(),
            reported_offsets: HashMap::new(),
            shutdown_offsets: HashMap::new(),
            next_rebalance: None,
            ids: Ids(seed),
        }
    }

    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    pub fn is_active(&self) -> bool {
        self.active
    }

    /// The committed image the controller last saw.
    pub fn committed(&self) -> &Arc<MetadataImage> {
        &self.committed
    }

    /// The image decisions are made against (committed + pending), while active.
    pub fn speculative(&self) -> &MetadataImage {
        &self.speculative
    }

    /// Batches proposed and not committed yet.
    pub fn pending_batches(&self) -> usize {
        self.pending.len()
    }

    /// Committed batches were applied, giving `image`; `ours` of them were the oldest batches
    /// this controller proposed (the runtime matched their Raft index and term).
    pub fn on_commit(&mut self, image: Arc<MetadataImage>, ours: usize) {
        self.committed = image;
        if !self.active {
            return;
        }
        for _ in 0..ours {
            self.pending.pop_front();
        }
        if self.pending.is_empty() {
            self.speculative = (*self.committed).clone();
        }
    }

    /// This node became the active controller: it is the Raft leader and has applied every
    /// batch committed before its term. Returns the records activation itself needs (the
    /// cluster id of a new cluster).
    pub fn activate(&mut self, now: i64) -> Decision<()> {
        self.active = true;
        self.pending.clear();
        self.speculative = (*self.committed).clone();
        // Every broker gets a fresh session: their heartbeats went to the old controller.
        self.heartbeats = self.committed.brokers.keys().map(|&id| (id, now)).collect();
        self.reported_offsets.clear();
        self.shutdown_offsets.clear();
        tracing::info!(
            node = self.config.node_id,
            offset = self.committed.offset,
            "became the active controller"
        );
        let mut records = Vec::new();
        if self.committed.cluster_id.is_empty() {
            let cluster_id = self
                .config
                .cluster_id
                .clone()
                .unwrap_or_else(|| self.ids.cluster_id());
            self.emit(&mut records, MetadataRecord::ClusterId { cluster_id });
        }
        self.finish(records, ())
    }

    /// Leadership was lost: forget the speculative image; the runtime answers every pending
    /// request with NOT_CONTROLLER.
    pub fn deactivate(&mut self) {
        if self.active {
            tracing::info!(
                node = self.config.node_id,
                "no longer the active controller"
            );
        }
        self.active = false;
        self.pending.clear();
        self.heartbeats.clear();
        self.reported_offsets.clear();
        self.shutdown_offsets.clear();
        self.next_rebalance = None;
        self.speculative = MetadataImage::empty();
    }

    /// The last decision's records could not be proposed: drop them from the speculative image.
    pub fn abandon_last(&mut self) {
        if self.pending.pop_back().is_some() {
            self.rebuild_speculative();
        }
    }

    fn rebuild_speculative(&mut self) {
        let mut image = (*self.committed).clone();
        let mut delta = MetadataDelta::default();
        for batch in &self.pending {
            image.apply_batch(image.offset, batch, &mut delta);
        }
        self.speculative = image;
    }

    /// Applies a record to the speculative image and adds it to the batch being decided.
    fn emit(&mut self, batch: &mut Vec<MetadataRecord>, record: MetadataRecord) {
        if let MetadataRecord::Partition { registration, .. }
        | MetadataRecord::PartitionChange { registration, .. } = &record
        {
            if let Err(e) = registration.check() {
                debug_assert!(
                    false,
                    "controller produced a bad partition: {e}: {record:?}"
                );
                tracing::error!(error = %e, ?record, "refusing to write a bad partition registration");
                return;
            }
        }
        let offset = self.speculative.offset;
        self.speculative
            .apply(offset, &record, &mut MetadataDelta::default());
        batch.push(record);
    }

    fn finish<T>(&mut self, records: Vec<MetadataRecord>, reply: T) -> Decision<T> {
        if !records.is_empty() {
            self.pending.push_back(records.clone());
        }
        Decision { records, reply }
    }

    /// Decides a request. `Err` only when this node is not the active controller.
    pub fn handle(
        &mut self,
        request: Request,
        now: i64,
    ) -> Result<Decision<Reply>, ControllerError> {
        if !self.active {
            return Err(ControllerError::not_controller());
        }
        let mut records = Vec::new();
        let reply = match request {
            Request::CreateTopics {
                topics,
                validate_only,
                origin,
                quota,
            } => Reply::CreateTopics(
                topics
                    .into_iter()
                    .map(|t| self.create_topic(&mut records, t, validate_only, origin, &quota))
                    .collect(),
            ),
            Request::DeleteTopics { topics, quota } => Reply::DeleteTopics(
                topics
                    .into_iter()
                    .map(|t| self.delete_topic(&mut records, t, &quota))
                    .collect(),
            ),
            Request::CreatePartitions {
                topics,
                validate_only,
                origin,
                quota,
            } => Reply::CreatePartitions(
                topics
                    .into_iter()
                    .map(|(name, count, assignment)| {
                        if origin == Origin::Client {
                            policy::check_client_alter(&name, "partition count")?;
                        }
                        self.create_partitions(
                            &mut records,
                            &name,
                            count,
                            assignment,
                            validate_only,
                            &quota,
                        )
                    })
                    .collect(),
            ),
            Request::AlterConfigs {
                changes,
                validate_only,
                origin,
            } => Reply::AlterConfigs(
                changes
                    .into_iter()
                    .map(|c| match c.resource.clone() {
                        ConfigResource::Topic(name) => {
                            if origin == Origin::Client {
                                policy::check_client_alter(&name, "configs")?;
                            }
                            self.alter_configs(&mut records, &name, c, validate_only)
                        }
                        ConfigResource::Group(group) => {
                            self.alter_group_configs(&mut records, &group, c, validate_only)
                        }
                        ConfigResource::Broker(broker) => {
                            self.alter_broker_configs(&mut records, &broker, c, validate_only)
                        }
                    })
                    .collect(),
            ),
            Request::RegisterBroker(r) => {
                Reply::RegisterBroker(self.register_broker(&mut records, r, now))
            }
            Request::AlterUserScramCredentials {
                deletions,
                upsertions,
            } => Reply::AlterUserScramCredentials(self.alter_scram(
                &mut records,
                deletions,
                upsertions,
            )),
            Request::CreateAcls(bindings) => {
                Reply::CreateAcls(self.create_acls(&mut records, bindings))
            }
            Request::ElectLeaders {
                election,
                partitions,
            } => Reply::ElectLeaders(self.elect_leaders(&mut records, election, partitions)),
            Request::AlterPartitionReassignments {
                topics,
                allow_replication_factor_change,
            } => Reply::AlterPartitionReassignments(
                topics
                    .into_iter()
                    .map(|(name, parts)| {
                        let results = parts
                            .into_iter()
                            .map(|(i, target)| {
                                let r = self.reassign(
                                    &mut records,
                                    &name,
                                    i,
                                    target,
                                    allow_replication_factor_change,
                                );
                                (i, r)
                            })
                            .collect();
                        (name, results)
                    })
                    .collect(),
            ),
            Request::DeleteAcls(filters) => {
                Reply::DeleteAcls(self.delete_acls(&mut records, filters))
            }
            Request::AlterClientQuotas {
                entries,
                validate_only,
            } => Reply::AlterClientQuotas(
                entries
                    .into_iter()
                    .map(|(entity, ops)| {
                        self.alter_client_quota(&mut records, entity, ops, validate_only)
                    })
                    .collect(),
            ),
            Request::BrokerHeartbeat {
                node_id,
                broker_epoch,
                current_metadata_offset,
                want_fence,
                want_shutdown,
            } => Reply::BrokerHeartbeat(self.heartbeat(
                &mut records,
                node_id,
                broker_epoch,
                current_metadata_offset,
                want_fence,
                want_shutdown,
                now,
            )),
            Request::AllocateProducerIds {
                broker_id,
                broker_epoch,
            } => Reply::AllocateProducerIds(self.allocate_producer_ids(
                &mut records,
                broker_id,
                broker_epoch,
            )),
            Request::AlterPartition {
                broker_id,
                broker_epoch,
                topics,
            } => Reply::AlterPartition(self.alter_partition(
                &mut records,
                broker_id,
                broker_epoch,
                topics,
            )),
        };
        Ok(self.finish(records, reply))
    }

    /// Fences brokers whose session expired (and moves their leadership away).
    pub fn tick(&mut self, now: i64) -> Decision<()> {
        let mut records = Vec::new();
        if !self.active {
            return Decision { records, reply: () };
        }
        let timeout = self.config.broker_session_timeout_ms;
        let expired: Vec<(NodeId, i64)> = self
            .speculative
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .filter(|b| {
                let last = *self.heartbeats.entry(b.node_id).or_insert(now);
                now - last > timeout
            })
            .map(|b| (b.node_id, b.epoch))
            .collect();
        for (node_id, broker_epoch) in expired {
            tracing::info!(broker = node_id, "broker session expired; fencing it");
            self.emit(
                &mut records,
                MetadataRecord::FenceBroker {
                    node_id,
                    broker_epoch,
                },
            );
            self.move_leadership_away(&mut records, node_id);
        }
        if self.config.auto_leader_rebalance {
            let next = *self
                .next_rebalance
                .get_or_insert(now + self.config.leader_imbalance_check_interval_ms);
            if now >= next {
                self.next_rebalance = Some(now + self.config.leader_imbalance_check_interval_ms);
                self.balance_leaders(&mut records);
            }
        }
        self.finish(records, ())
    }

    /// When [`Controller::tick`] next has something to do.
    pub fn next_deadline(&self) -> Option<i64> {
        if !self.active {
            return None;
        }
        let session = self
            .speculative
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .filter_map(|b| self.heartbeats.get(&b.node_id))
            .map(|last| last + self.config.broker_session_timeout_ms + 1)
            .min();
        let rebalance = self
            .next_rebalance
            .filter(|_| self.config.auto_leader_rebalance);
        match (session, rebalance) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Automatic preferred-leader balancing (Kafka's `maybeBalancePartitionLeaders`): every
    /// partition not led by its first replica gets a PREFERRED election; only those whose
    /// preferred replica may lead (in the ISR, usable) change.
    fn balance_leaders(&mut self, records: &mut Vec<MetadataRecord>) {
        let topics: Vec<Arc<TopicImage>> = self.speculative.topics.values().cloned().collect();
        let mut moved = 0;
        for topic in topics {
            let min_isr = self.min_isr(&topic);
            for (i, p) in topic.partitions.iter().enumerate() {
                if p.replicas.first() == Some(&p.leader) {
                    continue;
                }
                let c = election::change(
                    p,
                    p.isr.clone(),
                    min_isr,
                    |r| self.is_usable(r),
                    Election::Preferred,
                );
                if c.next.leader != p.leader && p.replicas.first() == Some(&c.next.leader) {
                    self.change_partition(records, &topic, i, p, c.next);
                    moved += 1;
                }
            }
        }
        if moved > 0 {
            tracing::info!(
                partitions = moved,
                "leadership moved back to preferred replicas"
            );
        }
    }

    /// ElectLeaders (Kafka's `ReplicationControlManager.electLeaders`).
    fn elect_leaders(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        election: Election,
        partitions: Option<Vec<(String, Vec<i32>)>>,
    ) -> Vec<ElectionResults> {
        match partitions {
            None => {
                let topics: Vec<Arc<TopicImage>> =
                    self.speculative.topics.values().cloned().collect();
                topics
                    .into_iter()
                    .map(|t| {
                        let results = (0..t.partitions.len() as i32)
                            .map(|i| (i, self.elect_leader(records, &t.name, i, election)))
                            .filter(|(_, r)| {
                                !matches!(r, Err(e) if e.code == ErrorCode::ElectionNotNeeded)
                            })
                            .collect();
                        (t.name.to_string(), results)
                    })
                    .collect()
            }
            Some(list) => list
                .into_iter()
                .map(|(name, ids)| {
                    let results = ids
                        .into_iter()
                        .map(|i| (i, self.elect_leader(records, &name, i, election)))
                        .collect();
                    (name, results)
                })
                .collect(),
        }
    }

    fn elect_leader(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        name: &str,
        index: i32,
        election: Election,
    ) -> Result<(), ControllerError> {
        let Some(topic) = self.speculative.topic(name).cloned() else {
            return Err(ControllerError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("No such topic as {name}"),
            ));
        };
        let Some(p) = usize::try_from(index)
            .ok()
            .and_then(|i| topic.partitions.get(i))
        else {
            return Err(ControllerError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("No such partition as {name}-{index}"),
            ));
        };
        let not_needed = match election {
            Election::Preferred => p.replicas.first() == Some(&p.leader),
            Election::Unclean => p.leader >= 0,
            Election::Online => p.leader >= 0,
        };
        if not_needed {
            return Err(ControllerError::new(ErrorCode::ElectionNotNeeded, ""));
        }
        let c = election::change(
            p,
            p.isr.clone(),
            self.min_isr(&topic),
            |r| self.is_usable(r),
            election,
        );
        if c.next == *p {
            return Err(match election {
                Election::Preferred => {
                    ControllerError::new(ErrorCode::PreferredLeaderNotAvailable, "")
                }
                _ => ControllerError::new(ErrorCode::EligibleLeadersNotAvailable, ""),
            });
        }
        if c.unclean {
            tracing::warn!(topic = %name, partition = index, leader = c.next.leader, "unclean leader election (ElectLeaders)");
        }
        let p = p.clone();
        self.change_partition(records, &topic, index as usize, &p, c.next);
        Ok(())
    }

    /// One partition of AlterPartitionReassignments, as Kafka's
    /// `ReplicationControlManager.alterPartitionReassignment` decides it (see
    /// [`crate::reassignment`]): a target replica list starts (or replaces) a reassignment,
    /// completing it at once when it adds no replica; `None` cancels the one in progress.
    fn reassign(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        name: &str,
        index: i32,
        target: Option<Vec<NodeId>>,
        allow_rf_change: bool,
    ) -> Result<(), ControllerError> {
        let Some(topic) = self.speculative.topic(name).cloned() else {
            return Err(ControllerError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("Unable to find a topic named {name}."),
            ));
        };
        let Some(prev) = usize::try_from(index)
            .ok()
            .and_then(|i| topic.partitions.get(i))
            .cloned()
        else {
            return Err(ControllerError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("Unable to find partition {name}:{index}."),
            ));
        };
        let min_isr = self.min_isr(&topic);
        if let Some(target) = &target {
            self.validate_reassignment(target)?;
            if !allow_rf_change {
                let current = prev.replicas.len() - prev.removing_replicas.len();
                if current != target.len() {
                    return Err(ControllerError::new(
                        ErrorCode::InvalidReplicationFactor,
                        format!("The replication factor is changed from {current} to {} but allowReplicationFactorChange is false", target.len()),
                    ));
                }
            }
        }
        let Some(reassignment::Altered { working, unclean }) =
            reassignment::alter(&prev, target.as_deref())
        else {
            // Kafka's `ApiError(NO_REASSIGNMENT_IN_PROGRESS)`: no message.
            return Err(ControllerError::bare(ErrorCode::NoReassignmentInProgress));
        };
        if unclean && !self.unclean_allowed(&topic) {
            return Err(ControllerError::new(
                ErrorCode::InvalidReplicaAssignment,
                format!("Unable to revert the partition assignment of {name}-{index} because it would require an unclean leader election."),
            ));
        }
        let election = if unclean {
            Election::Unclean
        } else {
            Election::Online
        };
        let target_isr = working.isr.clone();
        let c = election::change(
            &working,
            target_isr,
            min_isr,
            |r| self.is_usable(r),
            election,
        );
        if c.unclean {
            tracing::warn!(topic = %name, partition = index, leader = c.next.leader, "unclean leader election (reassignment cancelled)");
        }
        tracing::info!(topic = %name, partition = index, replicas = ?c.next.replicas,
            adding = ?c.next.adding_replicas, removing = ?c.next.removing_replicas,
            leader = c.next.leader, "partition reassignment");
        self.change_partition(records, &topic, index as usize, &prev, c.next);
        Ok(())
    }

    /// Kafka's `validateManualPartitionAssignment` for a reassignment's target: not empty,
    /// every broker registered, none twice.
    fn validate_reassignment(&self, target: &[NodeId]) -> Result<(), ControllerError> {
        let bad = |m: String| Err(ControllerError::new(ErrorCode::InvalidReplicaAssignment, m));
        if target.is_empty() {
            return bad("The manual partition assignment includes an empty replica list.".into());
        }
        let mut sorted = target.to_vec();
        sorted.sort_unstable();
        for (i, b) in sorted.iter().enumerate() {
            if !self.speculative.brokers.contains_key(b) {
                return bad(format!("The manual partition assignment includes broker {b}, but no such broker is registered."));
            }
            if i > 0 && sorted[i - 1] == *b {
                return bad(format!(
                    "The manual partition assignment includes the broker {b} more than once."
                ));
            }
        }
        Ok(())
    }

    fn usable_candidates(&self) -> Vec<Candidate> {
        self.speculative
            .brokers
            .values()
            .filter(|b| b.is_usable())
            .map(|b| Candidate {
                id: b.node_id,
                rack: b.rack.clone(),
            })
            .collect()
    }

    fn is_usable(&self, id: NodeId) -> bool {
        self.speculative
            .brokers
            .get(&id)
            .is_some_and(BrokerRegistration::is_usable)
    }

    fn load(&self) -> Load {
        let mut load = Load::default();
        for t in self.speculative.topics.values() {
            for p in &t.partitions {
                if p.leader >= 0 {
                    *load.leaders.entry(p.leader).or_default() += 1;
                }
                for r in &p.replicas {
                    *load.replicas.entry(*r).or_default() += 1;
                }
            }
        }
        load
    }

    /// Broker-level keys as the cluster sees them: the static config overlaid by the
    /// cluster-wide dynamic defaults (per-broker overrides apply on their own broker only).
    fn broker_props(&self) -> BTreeMap<String, String> {
        model::config::BrokerLayers {
            dynamic_broker: None,
            dynamic_default: self.speculative.broker_configs.get(""),
            static_props: &self.config.broker_props,
        }
        .effective()
    }

    fn unclean_allowed(&self, topic: &TopicImage) -> bool {
        TopicConfig::resolve(&self.broker_props(), &topic.configs)
            .map(|c| c.unclean_leader_election_enable)
            .unwrap_or(false)
    }

    /// The topic's effective `min.insync.replicas` as the controller sees it (topic override,
    /// else the cluster-wide dynamic default, else the static config), for the ELR.
    fn min_isr(&self, topic: &TopicImage) -> usize {
        TopicConfig::resolve(&self.broker_props(), &topic.configs)
            .map(|c| usize::try_from(c.min_insync_replicas).unwrap_or(1))
            .unwrap_or(1)
    }

    /// After a config change: partitions with eligible leader replicas get them recomputed
    /// for the (maybe lowered) `min.insync.replicas` (Kafka does the same): an ISR that
    /// now has enough members empties the ELR, whose members could miss records the HW
    /// passes from now on. Leaderless partitions of a topic that now allows
    /// `unclean.leader.election.enable` get their unclean election at once.
    fn refresh_elr(&mut self, records: &mut Vec<MetadataRecord>) {
        let topics: Vec<Arc<TopicImage>> = self.speculative.topics.values().cloned().collect();
        for topic in topics {
            let min_isr = self.min_isr(&topic);
            let kind = self.election_kind(&topic);
            for (i, p) in topic.partitions.iter().enumerate() {
                if p.elr.is_empty() && p.leader >= 0 {
                    continue;
                }
                let c = election::change(p, p.isr.clone(), min_isr, |r| self.is_usable(r), kind);
                if c.unclean {
                    tracing::warn!(topic = %topic.name, partition = i, leader = c.next.leader, "unclean leader election (config change)");
                }
                self.change_partition(records, &topic, i, p, c.next);
            }
        }
    }

    fn validate_configs(&self, configs: &BTreeMap<String, String>) -> Result<(), ControllerError> {
        for (k, v) in configs {
            TopicConfig::validate(k, v)
                .map_err(|e| ControllerError::new(ErrorCode::InvalidConfig, e.to_string()))?;
        }
        TopicConfig::resolve(&self.broker_props(), configs)
            .map_err(|e| ControllerError::new(ErrorCode::InvalidConfig, e.to_string()))?;
        Ok(())
    }

    /// Checks an explicit assignment: every partition names the same number of distinct,
    /// registered brokers, at least one of them usable.
    fn validate_assignment(&self, assignment: &[Vec<NodeId>]) -> Result<i16, ControllerError> {
        let bad = |m: String| ControllerError::new(ErrorCode::InvalidReplicaAssignment, m);
        let rf = assignment.first().map_or(0, Vec::len);
        for (p, replicas) in assignment.iter().enumerate() {
            if replicas.is_empty() {
                return Err(bad(format!("The manual partition assignment includes an empty replica list for partition {p}.")));
            }
            if replicas.len() != rf {
                return Err(bad(format!("The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {rf} replica(s).", replicas.len())));
            }
            let distinct: BTreeSet<_> = replicas.iter().collect();
            if distinct.len() != replicas.len() {
                return Err(bad(format!("The manual partition assignment includes duplicate replicas for partition {p}.")));
            }
            if let Some(b) = replicas
                .iter()
                .find(|b| !self.speculative.brokers.contains_key(b))
            {
                return Err(bad(format!("The manual partition assignment includes broker {b}, but no such broker is registered.")));
            }
            if !replicas.iter().any(|b| self.is_usable(*b)) {
                return Err(bad(format!("All brokers specified in the manual partition assignment for partition {p} are fenced or in controlled shutdown.")));
            }
        }
        i16::try_from(rf).map_err(|_| bad("too many replicas".into()))
    }

    /// A new partition's registration: usable replicas in sync, the first usable one leading.
    fn new_partition(&self, replicas: Vec<NodeId>) -> PartitionRegistration {
        let leader = replicas
            .iter()
            .copied()
            .find(|r| self.is_usable(*r))
            .unwrap_or(-1);
        let mut reg = PartitionRegistration::new(replicas, leader);
        let usable: Vec<NodeId> = reg
            .replicas
            .iter()
            .copied()
            .filter(|r| self.is_usable(*r))
            .collect();
        if !usable.is_empty() {
            reg.isr = usable;
        }
        reg
    }

    fn create_topic(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        spec: TopicSpec,
        validate_only: bool,
        origin: Origin,
        quota: &MutationQuotaRef,
    ) -> Result<CreatedTopic, ControllerError> {
        // An internal topic that exists is answered as any existing topic (Kafka's answer);
        // the policy refuses a client's creation of one that does not.
        if origin == Origin::Client && !self.speculative.topics.contains_key(spec.name.as_str()) {
            policy::check_client_create(&spec.name)?;
        }
        model::ids::validate_topic_name(&spec.name)
            .map_err(|m| ControllerError::new(ErrorCode::InvalidTopicException, m))?;
        // The metadata log lives in `<data>/__cluster_metadata-0`, as in KRaft: a topic of
        // that name would share its directory.
        if spec.name == "__cluster_metadata" {
            return Err(ControllerError::new(
                ErrorCode::InvalidTopicException,
                "__cluster_metadata is reserved for the cluster metadata log",
            ));
        }
        // Kafka refuses a name that collides with another topic's once '.' and '_' are
        // equated (their metric names would clash).
        let unified = |n: &str| n.replace('.', "_");
        if spec.name.contains(['.', '_']) {
            let name = unified(&spec.name);
            if let Some(other) = self
                .speculative
                .topics
                .keys()
                .find(|o| o.as_ref() != spec.name && unified(o) == name)
            {
                return Err(ControllerError::new(
                    ErrorCode::InvalidTopicException,
                    format!(
                        "Topic '{}' collides with existing topic: {other}",
                        spec.name
                    ),
                ));
            }
        }
        if self.speculative.topics.contains_key(spec.name.as_str()) {
            return Err(ControllerError::new(
                ErrorCode::TopicAlreadyExists,
                format!("Topic '{}' already exists.", spec.name),
            ));
        }
        self.validate_configs(&spec.configs)?;
        let assignment = if spec.assignment.is_empty() {
            // Kafka checks the replication factor before the partition count.
            let rf = if spec.replication_factor == -1 {
                self.config.default_replication_factor
            } else {
                spec.replication_factor
            };
            if rf < 1 {
                return Err(ControllerError::new(
                    ErrorCode::InvalidReplicationFactor,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                ));
            }
            let partitions = if spec.partitions == -1 {
                self.config.num_partitions
            } else {
                spec.partitions
            };
            if partitions < 1 {
                return Err(ControllerError::new(
                    ErrorCode::InvalidPartitions,
                    "Number of partitions must be larger than 0.",
                ));
            }
            let candidates = self.usable_candidates();
            policy::check_room(
                &self.speculative,
                &candidates,
                i64::from(partitions) * i64::from(rf),
                self.config.max_broker_partitions,
                self.config.max_broker_partitions_note.as_deref(),
            )?;
            let mut load = self.load();
            placement::place(&candidates, partitions as usize, rf as usize, &mut load)
                .map_err(|m| ControllerError::new(ErrorCode::InvalidReplicationFactor, m))?
        } else {
            self.validate_assignment(&spec.assignment)?;
            spec.assignment.clone()
        };
        policy::check_partition_caps(
            &self.speculative,
            &assignment,
            self.config.max_broker_partitions,
            self.config.max_broker_partitions_note.as_deref(),
        )?;
        // As Kafka: the quota is taken once the topic passed every check, validate-only too.
        apply_quota(quota, assignment.len())?;
        let rf = assignment.first().map_or(0, Vec::len) as i16;
        let id = self.ids.topic_id();
        let created = CreatedTopic {
            id,
            partitions: assignment.len() as i32,
            replication_factor: rf,
            configs: spec.configs.clone(),
        };
        if validate_only {
            return Ok(created);
        }
        let topic_id = format_id(id);
        self.emit(
            records,
            MetadataRecord::Topic {
                name: spec.name.clone(),
                topic_id: topic_id.clone(),
            },
        );
        for (p, replicas) in assignment.into_iter().enumerate() {
            let registration = self.new_partition(replicas);
            self.emit(
                records,
                MetadataRecord::Partition {
                    topic_id: topic_id.clone(),
                    partition: p as i32,
                    registration,
                },
            );
        }
        for (key, value) in spec.configs {
            self.emit(
                records,
                MetadataRecord::TopicConfig {
                    topic_id: topic_id.clone(),
                    key,
                    value: Some(value),
                },
            );
        }
        Ok(created)
    }

    fn delete_topic(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        topic: TopicRef,
        quota: &MutationQuotaRef,
    ) -> Result<(String, TopicId), ControllerError> {
        let found = match &topic {
            // Kafka's `new ApiError(UNKNOWN_TOPIC_OR_PARTITION)`: the error's default text.
            TopicRef::Name(n) => self.speculative.topic(n).cloned().ok_or_else(|| {
                let e = ErrorCode::UnknownTopicOrPartition;
                ControllerError::new(e, e.default_message())
            })?,
            TopicRef::Id(id) => self.speculative.topic_by_id(*id).cloned().ok_or_else(|| {
                ControllerError::new(ErrorCode::UnknownTopicId, "Topic id not found.")
            })?,
        };
        if found.is_internal() {
            return Err(ControllerError::new(
                ErrorCode::InvalidTopicException,
                format!("Topic '{}' is internal and cannot be deleted.", found.name),
            ));
        }
        apply_quota(quota, found.partitions.len())?;
        self.emit(
            records,
            MetadataRecord::RemoveTopic {
                topic_id: format_id(found.id),
            },
        );
        Ok((found.name.to_string(), found.id))
    }

    fn existing_topic(&self, name: &str) -> Result<Arc<TopicImage>, ControllerError> {
        self.speculative.topic(name).cloned().ok_or_else(|| {
            ControllerError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("Topic '{name}' does not exist."),
            )
        })
    }

    fn create_partitions(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        name: &str,
        count: i32,
        assignment: Vec<Vec<NodeId>>,
        validate_only: bool,
        quota: &MutationQuotaRef,
    ) -> Result<(), ControllerError> {
        // Kafka answers a missing topic with `ApiError(UNKNOWN_TOPIC_OR_PARTITION)`: no message.
        let topic = self
            .existing_topic(name)
            .map_err(|e| ControllerError::bare(e.code))?;
        let current = topic.partitions.len() as i32;
        if count < current {
            return Err(ControllerError::new(
                ErrorCode::InvalidPartitions,
                format!("The topic {name} currently has {current} partition(s); {count} would not be an increase."),
            ));
        }
        if count == current {
            return Err(ControllerError::new(
                ErrorCode::InvalidPartitions,
                format!("Topic already has {current} partition(s)."),
            ));
        }
        let added = (count - current) as usize;
        if !assignment.is_empty() && assignment.len() != added {
            return Err(ControllerError::new(
                ErrorCode::InvalidReplicaAssignment,
                format!(
                    "Increasing the number of partitions by {added} but {} assignments provided.",
                    assignment.len()
                ),
            ));
        }
        // As Kafka: the quota is taken before the new partitions are placed.
        apply_quota(quota, added)?;
        let rf = topic.partitions.first().map_or(1, |p| p.replicas.len());
        let new = if assignment.is_empty() {
            let candidates = self.usable_candidates();
            policy::check_room(
                &self.speculative,
                &candidates,
                (added * rf) as i64,
                self.config.max_broker_partitions,
                self.config.max_broker_partitions_note.as_deref(),
            )?;
            let mut load = self.load();
            placement::place(&candidates, added, rf, &mut load)
                .map_err(|m| ControllerError::new(ErrorCode::InvalidReplicationFactor, m))?
        } else {
            self.validate_assignment(&assignment)?;
            assignment
        };
        policy::check_partition_caps(
            &self.speculative,
            &new,
            self.config.max_broker_partitions,
            self.config.max_broker_partitions_note.as_deref(),
        )?;
        if validate_only {
            return Ok(());
        }
        let topic_id = format_id(topic.id);
        for (i, replicas) in new.into_iter().enumerate() {
            let registration = self.new_partition(replicas);
            self.emit(
                records,
                MetadataRecord::Partition {
                    topic_id: topic_id.clone(),
                    partition: current + i as i32,
                    registration,
                },
            );
        }
        Ok(())
    }

    fn alter_configs(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        name: &str,
        change: ConfigChange,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let topic = self.existing_topic(name)?;
        let mut next = if change.replace_all {
            BTreeMap::new()
        } else {
            topic.configs.clone()
        };
        for (k, v) in &change.changes {
            match v {
                Some(v) => {
                    TopicConfig::validate(k, v).map_err(|e| {
                        ControllerError::new(ErrorCode::InvalidConfig, e.to_string())
                    })?;
                    next.insert(k.clone(), v.clone());
                }
                None => {
                    if model::config::topic_config_def(k).is_none() {
                        return Err(ControllerError::new(
                            ErrorCode::InvalidConfig,
                            format!("Unknown topic config name: {k}"),
                        ));
                    }
                    next.remove(k);
                }
            }
        }
        TopicConfig::resolve(&self.broker_props(), &next)
            .map_err(|e| ControllerError::new(ErrorCode::InvalidConfig, e.to_string()))?;
        if validate_only {
            return Ok(());
        }
        for (key, value) in config_diff(&topic.configs, &next) {
            let topic_id = format_id(topic.id);
            self.emit(
                records,
                MetadataRecord::TopicConfig {
                    topic_id,
                    key,
                    value,
                },
            );
        }
        self.refresh_elr(records);
        Ok(())
    }

    /// Kafka's `ScramControlManager.alterCredentials`: a user named twice for the same
    /// mechanism fails as a whole (DUPLICATE_RESOURCE), as does a user with any bad item;
    /// other users' changes apply.
    /// One AlterClientQuotas entry as Kafka's `ClientQuotaControlManager` decides it: the
    /// entity and every op are checked first (INVALID_REQUEST, nothing written); a key named
    /// twice is INVALID_REQUEST; removing a quota that is not set writes nothing.
    fn alter_client_quota(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        entity: Vec<(String, Option<String>)>,
        ops: Vec<(String, Option<f64>)>,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        use auth::quota::{validate_quota_value, QuotaEntity};
        let invalid = |m: String| ControllerError::new(ErrorCode::InvalidRequest, m);
        let parsed =
            QuotaEntity::from_pairs(entity.iter().map(|(t, n)| (t.as_str(), n.as_deref())))
                .map_err(invalid)?;
        let mut seen = std::collections::BTreeSet::new();
        for (key, value) in &ops {
            if !seen.insert(key.as_str()) {
                return Err(invalid(format!(
                    "Duplicate quota key {key} not updating quota for entity {entity:?}"
                )));
            }
            if !parsed.accepts_key(key) {
                return Err(invalid(format!("Invalid configuration key {key}")));
            }
            if let Some(v) = value {
                validate_quota_value(&parsed, key, *v).map_err(invalid)?;
            }
        }
        if validate_only {
            return Ok(());
        }
        let entity = parsed.to_pairs();
        let current = self
            .speculative
            .client_quotas
            .get(&entity)
            .cloned()
            .unwrap_or_default();
        for (key, value) in ops {
            if value.is_none() && !current.contains_key(&key) {
                continue;
            }
            if value.is_some() && current.get(&key) == value.as_ref() {
                continue;
            }
            self.emit(
                records,
                MetadataRecord::ClientQuota {
                    entity: entity.clone(),
                    key,
                    value,
                },
            );
        }
        Ok(())
    }

    /// CreateAcls as Kafka's `AclControlManager` decides it: an ACL that exists already (or
    /// earlier in the request) succeeds without a record; a new one gets a fresh id.
    fn create_acls(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        bindings: Vec<AclBinding>,
    ) -> Vec<Result<(), ControllerError>> {
        bindings
            .into_iter()
            .map(|b| {
                let entry = acl_entry(&b);
                if self.speculative.acls.values().any(|a| *a == entry) {
                    return Ok(());
                }
                let id = format_id(self.ids.topic_id());
                self.emit(
                    records,
                    MetadataRecord::AccessControlEntry { id, acl: entry },
                );
                Ok(())
            })
            .collect()
    }

    /// DeleteAcls: removes every ACL that matches a filter (Kafka's
    /// `AclBindingFilter.matches`); ACLs stored with codes this build cannot read are never
    /// matched (nothing writes them).
    fn delete_acls(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        filters: Vec<AclBindingFilter>,
    ) -> Vec<Vec<AclBinding>> {
        filters
            .into_iter()
            .map(|filter| {
                let doomed: Vec<(String, AclBinding)> = self
                    .speculative
                    .acls
                    .iter()
                    .filter_map(|(id, a)| Some((id.clone(), acl_binding(a)?)))
                    .filter(|(_, b)| filter.matches(b))
                    .collect();
                doomed
                    .into_iter()
                    .map(|(id, b)| {
                        self.emit(records, MetadataRecord::RemoveAccessControlEntry { id });
                        b
                    })
                    .collect()
            })
            .collect()
    }

    fn alter_scram(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        deletions: Vec<(String, i8)>,
        upsertions: Vec<ScramUpsertion>,
    ) -> Vec<(String, Result<(), ControllerError>)> {
        // As Kafka 4: a user named twice in one request (even for two mechanisms) is
        // DUPLICATE_RESOURCE; tools alter one mechanism per request.
        let mut users: Vec<String> = Vec::new();
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for name in deletions
            .iter()
            .map(|(n, _)| n)
            .chain(upsertions.iter().map(|u| &u.name))
        {
            if !users.contains(name) {
                users.push(name.clone());
            }
            *seen.entry(name.clone()).or_default() += 1;
        }
        let mut results: BTreeMap<String, Result<(), ControllerError>> = BTreeMap::new();
        let fail = |results: &mut BTreeMap<String, Result<(), ControllerError>>,
                    name: &str,
                    code: ErrorCode,
                    message: &str| {
            results
                .entry(name.to_string())
                .or_insert_with(|| Err(ControllerError::new(code, message)));
        };
        for (name, n) in &seen {
            if *n > 1 {
                fail(
                    &mut results,
                    name,
                    ErrorCode::DuplicateResource,
                    "A user credential cannot be altered twice in the same request",
                );
            }
        }
        for name in &users {
            if name.is_empty() {
                fail(
                    &mut results,
                    name,
                    ErrorCode::UnacceptableCredential,
                    "Username must not be empty",
                );
            }
        }
        for (name, m) in &deletions {
            if !(1..=2).contains(m) {
                fail(
                    &mut results,
                    name,
                    ErrorCode::UnsupportedSaslMechanism,
                    "Unknown SCRAM mechanism",
                );
            } else if !self
                .speculative
                .scram_credentials
                .contains_key(&(name.clone(), *m))
            {
                fail(
                    &mut results,
                    name,
                    ErrorCode::ResourceNotFound,
                    "Attempt to delete a user credential that does not exist",
                );
            }
        }
        for u in &upsertions {
            if !(1..=2).contains(&u.mechanism) {
                fail(
                    &mut results,
                    &u.name,
                    ErrorCode::UnsupportedSaslMechanism,
                    "Unknown SCRAM mechanism",
                );
            } else if u.iterations < *SCRAM_ITERATIONS.start() {
                fail(
                    &mut results,
                    &u.name,
                    ErrorCode::UnacceptableCredential,
                    "Too few iterations",
                );
            } else if u.iterations > *SCRAM_ITERATIONS.end() {
                fail(
                    &mut results,
                    &u.name,
                    ErrorCode::UnacceptableCredential,
                    "Too many iterations",
                );
            } else if u.salt.is_empty() || u.stored_key.is_empty() || u.server_key.is_empty() {
                fail(
                    &mut results,
                    &u.name,
                    ErrorCode::UnacceptableCredential,
                    "Salt and salted password must not be empty",
                );
            }
        }
        for (name, m) in deletions {
            if results.contains_key(&name) {
                continue;
            }
            self.emit(
                records,
                MetadataRecord::RemoveUserScramCredential { name, mechanism: m },
            );
        }
        for u in upsertions {
            if results.contains_key(&u.name) {
                continue;
            }
            self.emit(
                records,
                MetadataRecord::UserScramCredential {
                    name: u.name,
                    mechanism: u.mechanism,
                    salt: u.salt,
                    stored_key: u.stored_key,
                    server_key: u.server_key,
                    iterations: u.iterations,
                },
            );
        }
        users
            .into_iter()
            .map(|name| {
                let r = results.remove(&name).unwrap_or(Ok(()));
                (name, r)
            })
            .collect()
    }

    fn alter_group_configs(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        group: &str,
        change: ConfigChange,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let current = self
            .speculative
            .group_configs
            .get(group)
            .cloned()
            .unwrap_or_default();
        let mut next = if change.replace_all {
            BTreeMap::new()
        } else {
            current.clone()
        };
        for (k, v) in &change.changes {
            if model::group_config::group_config_def(k).is_none() {
                return Err(ControllerError::new(
                    ErrorCode::InvalidConfig,
                    format!("Unknown group config name: {k}"),
                ));
            }
            match v {
                Some(v) => next.insert(k.clone(), v.clone()),
                None => next.remove(k),
            };
        }
        model::group_config::validate(&next, &self.config.broker_props)
            .map_err(|e| ControllerError::new(ErrorCode::InvalidConfig, e.to_string()))?;
        if validate_only {
            return Ok(());
        }
        for (key, value) in config_diff(&current, &next) {
            let group = group.to_string();
            self.emit(records, MetadataRecord::GroupConfig { group, key, value });
        }
        Ok(())
    }

    /// Dynamic broker configs, checked as Kafka checks them: the resource name is empty or a
    /// broker id; a value of the wrong type or range, or a key that cannot change at runtime,
    /// is INVALID_REQUEST (Kafka's answer for BROKER resources, KAFKA-13609); keys Moldau does
    /// not know are kept, as Kafka keeps them for plugins.
    fn alter_broker_configs(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        broker: &str,
        change: ConfigChange,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        if !broker.is_empty() && broker.parse::<u32>().is_err() {
            return Err(ControllerError::new(
                ErrorCode::InvalidRequest,
                format!("Unable to parse broker name {broker}"),
            ));
        }
        let current = self
            .speculative
            .broker_configs
            .get(broker)
            .cloned()
            .unwrap_or_default();
        let mut next = if change.replace_all {
            BTreeMap::new()
        } else {
            current.clone()
        };
        for (k, v) in &change.changes {
            match v {
                Some(_) if broker.is_empty() && model::config::is_per_broker_config(k) => {
                    return Err(ControllerError::new(
                        ErrorCode::InvalidRequest,
                        format!("Cannot update {k} at default cluster level, broker id must be specified"),
                    ));
                }
                Some(v) => {
                    model::config::validate_dynamic_broker_config(k, v).map_err(|e| {
                        ControllerError::new(ErrorCode::InvalidRequest, e.to_string())
                    })?;
                    next.insert(k.clone(), v.clone());
                }
                None => {
                    next.remove(k);
                }
            }
        }
        elr_min_isr_rule(broker, &change, &current, &next)?;
        if validate_only {
            return Ok(());
        }
        for (key, value) in config_diff(&current, &next) {
            let broker = broker.to_string();
            self.emit(records, MetadataRecord::BrokerConfig { broker, key, value });
        }
        self.refresh_elr(records);
        Ok(())
    }

    fn register_broker(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        req: RegisterBroker,
        now: i64,
    ) -> Result<i64, ControllerError> {
        let cluster_id = &self.speculative.cluster_id;
        if !cluster_id.is_empty() && *cluster_id != req.cluster_id {
            return Err(ControllerError::new(
                ErrorCode::InconsistentClusterId,
                format!(
                    "Expected cluster ID {cluster_id}, but got cluster ID {}",
                    req.cluster_id
                ),
            ));
        }
        if let Some(existing) = self.speculative.brokers.get(&req.node_id) {
            let last = self
                .heartbeats
                .get(&req.node_id)
                .copied()
                .unwrap_or(i64::MIN / 2);
            let session_alive = now - last <= self.config.broker_session_timeout_ms;
            let same_process = existing.incarnation_id == req.incarnation_id;
            let clean_restart = req.previous_broker_epoch == existing.epoch;
            if !existing.fenced && session_alive && !same_process && !clean_restart {
                return Err(ControllerError::new(
                    ErrorCode::DuplicateBrokerRegistration,
                    format!(
                        "Another broker is registered with that broker id ({}); its session expires within {} ms.",
                        req.node_id, self.config.broker_session_timeout_ms
                    ),
                ));
            }
        }
        let broker_epoch = self.speculative.next_broker_epoch();
        self.emit(
            records,
            MetadataRecord::RegisterBroker {
                node_id: req.node_id,
                incarnation_id: req.incarnation_id,
                broker_epoch,
                endpoints: req.endpoints,
                rack: req.rack,
                fenced: true,
            },
        );
        // A new incarnation starts fenced: whatever the old one led must move.
        self.move_leadership_away(records, req.node_id);
        self.heartbeats.insert(req.node_id, now);
        Ok(broker_epoch)
    }

    #[allow(clippy::too_many_arguments)]
    fn heartbeat(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        node_id: NodeId,
        broker_epoch: i64,
        current_metadata_offset: i64,
        want_fence: bool,
        want_shutdown: bool,
        now: i64,
    ) -> Result<HeartbeatReply, ControllerError> {
        let Some(broker) = self.speculative.brokers.get(&node_id).cloned() else {
            return Err(ControllerError::new(
                ErrorCode::BrokerIdNotRegistered,
                format!("Broker {node_id} is not registered."),
            ));
        };
        if broker.epoch != broker_epoch {
            return Err(ControllerError::new(
                ErrorCode::StaleBrokerEpoch,
                format!(
                    "Expected broker epoch {}, but got broker epoch {broker_epoch}",
                    broker.epoch
                ),
            ));
        }
        self.heartbeats.insert(node_id, now);
        self.reported_offsets
            .insert(node_id, current_metadata_offset);
        // Whether the broker has applied the log up to its own registration (which is
        // committed: the broker learnt its epoch from the committed reply).
        let caught_up = self
            .committed
            .brokers
            .get(&node_id)
            .filter(|b| b.epoch == broker_epoch)
            .is_some_and(|b| current_metadata_offset >= b.registered_offset);
        let broker_led_any = self.leads_any(node_id);
        let mut should_shut_down = false;
        if want_shutdown {
            // Kafka's controlled shutdown (BrokerHeartbeatManager): leadership moves away
            // first while the broker stays unfenced, listed in Metadata and serving, so clients
            // get NOT_LEADER_OR_FOLLOWER with the new leader (KIP-951) instead of a closed
            // connection; the broker may stop (it is fenced then) only once it leads nothing and
            // every other active broker has applied the move, so no Metadata answer anywhere
            // still names it as a leader.
            if !broker.fenced {
                let first = !broker.in_controlled_shutdown;
                if first {
                    self.emit(
                        records,
                        MetadataRecord::BrokerControlledShutdown {
                            node_id,
                            broker_epoch,
                        },
                    );
                    self.move_leadership_away(records, node_id);
                }
                if (first && !broker_led_any) || self.may_shut_down(node_id) {
                    self.emit(
                        records,
                        MetadataRecord::FenceBroker {
                            node_id,
                            broker_epoch,
                        },
                    );
                    self.shutdown_offsets.remove(&node_id);
                    should_shut_down = true;
                }
            } else {
                should_shut_down = true;
            }
        } else if want_fence {
            if !broker.fenced {
                self.emit(
                    records,
                    MetadataRecord::FenceBroker {
                        node_id,
                        broker_epoch,
                    },
                );
                self.move_leadership_away(records, node_id);
            }
        } else if broker.fenced && caught_up && !broker.in_controlled_shutdown {
            self.emit(
                records,
                MetadataRecord::UnfenceBroker {
                    node_id,
                    broker_epoch,
                },
            );
            self.elect_offline_partitions(records, node_id);
        }
        let is_fenced = self
            .speculative
            .brokers
            .get(&node_id)
            .is_none_or(|b| b.fenced);
        Ok(HeartbeatReply {
            is_caught_up: caught_up,
            is_fenced,
            should_shut_down,
        })
    }

    /// Whether `node` leads a partition in the speculative image.
    fn leads_any(&self, node: NodeId) -> bool {
        self.speculative
            .topics
            .values()
            .any(|t| t.partitions.iter().any(|p| p.leader == node))
    }

    /// A broker in controlled shutdown may stop once it leads nothing, the records that moved
    /// its leadership are committed, and every other active (unfenced, not shutting down)
    /// broker has reported applying them (Kafka's `lowestActiveOffset` rule).
    fn may_shut_down(&mut self, node: NodeId) -> bool {
        if self.leads_any(node)
            || !self
                .committed
                .brokers
                .get(&node)
                .is_some_and(|b| b.in_controlled_shutdown)
        {
            return false;
        }
        let committed = self.committed.offset;
        let needed = *self.shutdown_offsets.entry(node).or_insert(committed);
        self.speculative
            .brokers
            .values()
            .filter(|b| b.node_id != node && b.is_usable())
            .all(|b| {
                self.reported_offsets
                    .get(&b.node_id)
                    .is_some_and(|&o| o >= needed)
            })
    }

    fn allocate_producer_ids(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        broker_id: NodeId,
        broker_epoch: i64,
    ) -> Result<(i64, i64), ControllerError> {
        match self.speculative.brokers.get(&broker_id) {
            None => {
                return Err(ControllerError::new(
                    ErrorCode::BrokerIdNotRegistered,
                    format!("Broker {broker_id} is not registered."),
                ))
            }
            Some(b) if b.epoch != broker_epoch => {
                return Err(ControllerError::new(
                    ErrorCode::StaleBrokerEpoch,
                    format!("Expected broker epoch {}, but got {broker_epoch}", b.epoch),
                ))
            }
            Some(_) => {}
        }
        let start = self.speculative.next_producer_id;
        let len = self.config.producer_id_block_size;
        self.emit(
            records,
            MetadataRecord::ProducerIds {
                broker_id,
                broker_epoch,
                next_producer_id: start + len,
            },
        );
        Ok((start, len))
    }

    /// AlterPartition as Kafka's controller decides it: the request's broker epoch must be the
    /// registered one (else STALE_BROKER_EPOCH for all of it); each partition's change is
    /// checked on its own (see [`Controller::check_isr_change`]) and, when valid, written as a
    /// PartitionChange with the partition epoch bumped (the leader and its epoch stay).
    fn alter_partition(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        broker_id: NodeId,
        broker_epoch: i64,
        topics: Vec<(TopicId, Vec<IsrChange>)>,
    ) -> Result<Vec<Vec<Result<PartitionRegistration, ControllerError>>>, ControllerError> {
        match self.speculative.brokers.get(&broker_id) {
            None => {
                return Err(ControllerError::new(
                    ErrorCode::StaleBrokerEpoch,
                    format!("No broker registration found for broker {broker_id}"),
                ))
            }
            Some(b) if b.epoch != broker_epoch => {
                return Err(ControllerError::new(
                    ErrorCode::StaleBrokerEpoch,
                    format!(
                        "Expected broker epoch {}, but got broker epoch {broker_epoch}",
                        b.epoch
                    ),
                ))
            }
            Some(_) => {}
        }
        let mut out = Vec::with_capacity(topics.len());
        for (topic_id, changes) in topics {
            let Some(topic) = self.speculative.topic_by_id(topic_id).cloned() else {
                let e = ControllerError::new(
                    ErrorCode::UnknownTopicId,
                    format!("Unknown topic id {}", format_id(topic_id)),
                );
                out.push(changes.iter().map(|_| Err(e.clone())).collect());
                continue;
            };
            let mut results = Vec::with_capacity(changes.len());
            for change in changes {
                let index = change.partition;
                let current = usize::try_from(index)
                    .ok()
                    .and_then(|i| topic.partitions.get(i).cloned());
                let Some(prev) = current else {
                    results.push(Err(ControllerError::new(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("Unknown partition {}-{index}", topic.name),
                    )));
                    continue;
                };
                if let Err(e) = self.check_isr_change(broker_id, &prev, &change) {
                    tracing::info!(topic = %topic.name, partition = index, broker = broker_id,
                        error = %e, "refusing an ISR change");
                    if e.code == ErrorCode::IneligibleReplica {
                        // The request was based on the current partition epoch. Bumping it
                        // (nothing else changes) makes every other copy of the request stale
                        // (INVALID_UPDATE_VERSION) before the leader reads the refusal, so the
                        // leader can stop counting the refused members for the HW as soon as
                        // it sees the new epoch, instead of when the partition next changes
                        // (for a member refused while shutting down: when it came back, the
                        // HW of every partition it had fetched stalled meanwhile).
                        self.bump_partition_epoch(records, &topic, index as usize, &prev);
                    }
                    results.push(Err(e));
                    continue;
                }
                let target: Vec<NodeId> = change.new_isr.iter().map(|(id, _)| *id).collect();
                // The leader is in the new ISR (checked): it stays; the ELR follows the ISR.
                let leader = prev.leader;
                let next = election::change(
                    &prev,
                    target,
                    self.min_isr(&topic),
                    |r| r == leader || self.is_usable(r),
                    Election::Online,
                )
                .next;
                if next == prev {
                    // Nothing changes: no record, the current state is the answer.
                    results.push(Ok(prev));
                    continue;
                }
                self.change_partition(records, &topic, index as usize, &prev, next);
                let now = self
                    .speculative
                    .topic_by_id(topic_id)
                    .and_then(|t| t.partitions.get(index as usize).cloned());
                results.push(now.ok_or_else(|| {
                    ControllerError::new(
                        ErrorCode::UnknownServerError,
                        "the ISR change could not be written",
                    )
                }));
            }
            out.push(results);
        }
        Ok(out)
    }

    /// Kafka's checks of one partition's AlterPartition data, in Kafka's order: a leader or
    /// partition epoch newer than this controller knows is NOT_CONTROLLER (this node is
    /// probably behind); an older leader epoch is FENCED_LEADER_EPOCH; a request from a
    /// broker that is not the leader is INVALID_REQUEST; an older partition epoch is
    /// INVALID_UPDATE_VERSION; an ISR that is not a duplicate-free subset of the replicas, or
    /// leaves out the leader, is INVALID_REQUEST (so is RECOVERING, which Moldau's unclean
    /// elections never set); an ISR member that is unregistered, fenced, shutting down or of
    /// another broker epoch than the leader saw is INELIGIBLE_REPLICA.
    fn check_isr_change(
        &self,
        broker_id: NodeId,
        prev: &PartitionRegistration,
        change: &IsrChange,
    ) -> Result<(), ControllerError> {
        let refuse = |code, message: String| Err(ControllerError::new(code, message));
        if change.leader_epoch > prev.leader_epoch || change.partition_epoch > prev.partition_epoch
        {
            return refuse(
                ErrorCode::NotController,
                format!(
                    "The request's epochs (leader {}, partition {}) are newer than this controller's ({}, {}).",
                    change.leader_epoch, change.partition_epoch, prev.leader_epoch, prev.partition_epoch
                ),
            );
        }
        if change.leader_epoch < prev.leader_epoch {
            return refuse(
                ErrorCode::FencedLeaderEpoch,
                format!(
                    "The current leader epoch is {}, not {}.",
                    prev.leader_epoch, change.leader_epoch
                ),
            );
        }
        if broker_id != prev.leader {
            return refuse(
                ErrorCode::InvalidRequest,
                format!("The current leader is {}, not {broker_id}.", prev.leader),
            );
        }
        if change.partition_epoch < prev.partition_epoch {
            return refuse(
                ErrorCode::InvalidUpdateVersion,
                format!(
                    "The current partition epoch is {}, not {}.",
                    prev.partition_epoch, change.partition_epoch
                ),
            );
        }
        let ids: Vec<NodeId> = change.new_isr.iter().map(|(id, _)| *id).collect();
        let mut seen = std::collections::BTreeSet::new();
        if ids.is_empty()
            || !ids
                .iter()
                .all(|r| seen.insert(*r) && prev.replicas.contains(r))
        {
            return refuse(
                ErrorCode::InvalidRequest,
                format!("Invalid ISR {ids:?} for replicas {:?}.", prev.replicas),
            );
        }
        if !ids.contains(&prev.leader) {
            return refuse(
                ErrorCode::InvalidRequest,
                format!(
                    "The ISR {ids:?} does not include the leader {}.",
                    prev.leader
                ),
            );
        }
        if change.leader_recovery_state != 0 {
            return refuse(
                ErrorCode::InvalidRequest,
                "The leader recovery state cannot change from RECOVERED to RECOVERING.".into(),
            );
        }
        let ineligible: Vec<String> = change
            .new_isr
            .iter()
            .filter_map(|(id, epoch)| {
                let why = match self.speculative.brokers.get(id) {
                    None => "not registered".to_string(),
                    Some(b) if b.in_controlled_shutdown => "shutting down".to_string(),
                    Some(b) if b.fenced => "fenced".to_string(),
                    Some(b) if *epoch != -1 && b.epoch != *epoch => format!(
                        "broker epoch mismatch: requested={epoch} VS expected={}",
                        b.epoch
                    ),
                    Some(_) => return None,
                };
                Some(format!("{id} ({why})"))
            })
            .collect();
        if !ineligible.is_empty() {
            return refuse(
                ErrorCode::IneligibleReplica,
                format!(
                    "Ineligible replicas in the new ISR: {}.",
                    ineligible.join(", ")
                ),
            );
        }
        Ok(())
    }

    /// A broker is fenced, shutting down or restarting: take it out of every ISR it is in
    /// (into the ELR where the ISR falls below `min.insync.replicas`, KIP-966; an ISR may
    /// become empty, its last member then eligible) and give the partitions it led a new
    /// leader: from the ISR, else the ELR, else (only where `unclean.leader.election.enable`)
    /// any usable replica. See [`election`].
    fn move_leadership_away(&mut self, records: &mut Vec<MetadataRecord>, lost: NodeId) {
        let topics: Vec<Arc<TopicImage>> = self.speculative.topics.values().cloned().collect();
        for topic in topics {
            let kind = self.election_kind(&topic);
            let min_isr = self.min_isr(&topic);
            for (i, p) in topic.partitions.iter().enumerate() {
                if !p.isr.contains(&lost) && p.leader != lost {
                    continue;
                }
                let target = p.isr.iter().copied().filter(|&r| r != lost).collect();
                let c =
                    election::change(p, target, min_isr, |r| r != lost && self.is_usable(r), kind);
                if c.unclean {
                    tracing::warn!(topic = %topic.name, partition = i, leader = c.next.leader, "unclean leader election");
                }
                self.change_partition(records, &topic, i, p, c.next);
            }
        }
    }

    /// ONLINE, or UNCLEAN where the topic allows it.
    fn election_kind(&self, topic: &TopicImage) -> Election {
        if self.unclean_allowed(topic) {
            Election::Unclean
        } else {
            Election::Online
        }
    }

    /// A broker was unfenced: partitions without a leader get one if it (or another usable
    /// replica) may lead: an ISR member, else an ELR member when the ISR is empty, else
    /// (unclean) any.
    fn elect_offline_partitions(&mut self, records: &mut Vec<MetadataRecord>, back: NodeId) {
        let topics: Vec<Arc<TopicImage>> = self.speculative.topics.values().cloned().collect();
        for topic in topics {
            let kind = self.election_kind(&topic);
            let min_isr = self.min_isr(&topic);
            for (i, p) in topic.partitions.iter().enumerate() {
                if p.leader != -1 || !p.replicas.contains(&back) {
                    continue;
                }
                let c = election::change(
                    p,
                    p.isr.clone(),
                    min_isr,
                    |r| r == back || self.is_usable(r),
                    kind,
                );
                if c.unclean {
                    tracing::warn!(topic = %topic.name, partition = i, leader = c.next.leader, "unclean leader election");
                }
                self.change_partition(records, &topic, i, p, c.next);
            }
        }
    }

    /// A PartitionChange that only bumps the partition epoch.
    fn bump_partition_epoch(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        topic: &TopicImage,
        index: usize,
        prev: &PartitionRegistration,
    ) {
        let mut next = prev.clone();
        next.partition_epoch = prev.partition_epoch + 1;
        self.emit_partition_change(records, topic, index, next);
    }

    /// Emits a PartitionChange if `next` differs from `prev`, with the partition epoch bumped,
    /// and the leader epoch where `election::bumps_leader_epoch` says (a new leader, a
    /// replica removed).
    fn change_partition(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        topic: &TopicImage,
        index: usize,
        prev: &PartitionRegistration,
        mut next: PartitionRegistration,
    ) {
        if next == *prev {
            return;
        }
        if election::bumps_leader_epoch(prev, &next) {
            next.leader_epoch = prev.leader_epoch + 1;
        }
        next.partition_epoch = prev.partition_epoch + 1;
        self.emit_partition_change(records, topic, index, next);
    }

    fn emit_partition_change(
        &mut self,
        records: &mut Vec<MetadataRecord>,
        topic: &TopicImage,
        index: usize,
        registration: PartitionRegistration,
    ) {
        self.emit(
            records,
            MetadataRecord::PartitionChange {
                topic_id: format_id(topic.id),
                partition: index as i32,
                registration,
            },
        );
    }
}

/// Eligible leader replicas (KIP-966, always on in Moldau as in a new Kafka 4.4 cluster) need
/// every broker to agree on which partitions are under `min.insync.replicas`, so Kafka's
/// controller refuses a per-broker value and the removal of the cluster-wide one
/// (KAFKA-16540; INVALID_CONFIG, after the values' own checks).
fn elr_min_isr_rule(
    broker: &str,
    change: &ConfigChange,
    current: &BTreeMap<String, String>,
    next: &BTreeMap<String, String>,
) -> Result<(), ControllerError> {
    const KEY: &str = "min.insync.replicas";
    let named = change.changes.get(KEY);
    if !broker.is_empty() && (named.is_some() || current.get(KEY) != next.get(KEY)) {
        return Err(ControllerError::new(
            ErrorCode::InvalidConfig,
            format!("Broker-level {KEY} cannot be altered while ELR is enabled."),
        ));
    }
    let removed = named.is_some_and(Option::is_none)
        || (current.contains_key(KEY) && !next.contains_key(KEY));
    if broker.is_empty() && removed {
        return Err(ControllerError::new(
            ErrorCode::InvalidConfig,
            format!("Cluster-level {KEY} cannot be removed while ELR is enabled."),
        ));
    }
    Ok(())
}

/// What turns config set `current` into `next`: keys to set (`Some`), then keys to remove.
fn config_diff(
    current: &BTreeMap<String, String>,
    next: &BTreeMap<String, String>,
) -> Vec<(String, Option<String>)> {
    let set = next
        .iter()
        .filter(|(k, v)| current.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), Some(v.clone())));
    let removed = current
        .keys()
        .filter(|k| !next.contains_key(*k))
        .map(|k| (k.clone(), None));
    set.chain(removed).collect()
}
