//! The records of the cluster metadata log. Each is one durable fact about the cluster, in the
//! spirit of KRaft's metadata records (`TopicRecord`, `PartitionRecord`,
//! `PartitionChangeRecord`, `RegisterBrokerRecord`, `FenceBrokerRecord`, ...).
//!
//! Records are replicated by the Raft quorum in batches (one batch per Raft entry) and applied
//! in log order by every node. A record carries full new state where Kafka carries optional
//! fields (a `PartitionChange` holds the whole new registration): applying it needs no
//! lookup that could go wrong, and the log reads as a history.

use serde::{Deserialize, Serialize};

/// One network endpoint of a broker: a named listener with its security protocol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// The listener name (`PLAINTEXT`, `INTERNAL`, ...).
    pub name: String,
    pub host: String,
    pub port: i32,
    /// `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`.
    pub security_protocol: String,
}

/// A partition's replicas and leadership, as Kafka's `PartitionRegistration`.
///
/// *Invariants* (checked by the controller before it writes one, and by the simulation):
/// `leader` is -1 or a member of `isr`; `isr` and `elr` are disjoint subsets of `replicas`,
/// not both empty (an empty ISR, KIP-966, only with no leader); `leader_epoch` grows
/// whenever the leader changes; `partition_epoch` grows on every change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRegistration {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// KIP-966 eligible leader replicas: members that left the ISR while it was below
    /// `min.insync.replicas` (the high watermark cannot pass what they hold); with an empty
    /// ISR the next leader comes from here. Empty while the ISR has `min.insync.replicas`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elr: Vec<i32>,
    /// Replicas being removed by a reassignment (still in `replicas` until it completes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing_replicas: Vec<i32>,
    /// Replicas being added by a reassignment (already in `replicas`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding_replicas: Vec<i32>,
    /// The leader's node id, -1 when the partition has no leader.
    pub leader: i32,
    pub leader_epoch: i32,
    /// Bumped on every change; AlterPartition requests name the epoch they were based on.
    pub partition_epoch: i32,
}

impl PartitionRegistration {
    /// A new partition: every replica in sync, the first live one leading, epochs at 0.
    pub fn new(replicas: Vec<i32>, leader: i32) -> PartitionRegistration {
        PartitionRegistration {
            isr: replicas.clone(),
            elr: Vec::new(),
            replicas,
            removing_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            leader,
            leader_epoch: 0,
            partition_epoch: 0,
        }
    }

    /// Whether the registration is well-formed (see the type's invariants).
    pub fn check(&self) -> Result<(), String> {
        if self.replicas.is_empty() {
            return Err("no replicas".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        if !self.replicas.iter().all(|r| seen.insert(*r)) {
            return Err(format!("duplicate replicas {:?}", self.replicas));
        }
        if self.isr.is_empty() && self.elr.is_empty() {
            return Err("empty ISR and ELR".into());
        }
        if let Some(r) = self.isr.iter().find(|r| !self.replicas.contains(r)) {
            return Err(format!("ISR member {r} is not a replica"));
        }
        if let Some(r) = self.elr.iter().find(|r| !self.replicas.contains(r)) {
            return Err(format!("ELR member {r} is not a replica"));
        }
        if let Some(r) = self
            .adding_replicas
            .iter()
            .chain(&self.removing_replicas)
            .find(|r| !self.replicas.contains(r))
        {
            return Err(format!("reassigned replica {r} is not a replica"));
        }
        if let Some(r) = self
            .adding_replicas
            .iter()
            .find(|r| self.removing_replicas.contains(r))
        {
            return Err(format!("{r} is both being added and removed"));
        }
        if let Some(r) = self.elr.iter().find(|r| self.isr.contains(r)) {
            return Err(format!("{r} is in both the ISR and the ELR"));
        }
        if self.leader != -1 && !self.isr.contains(&self.leader) {
            return Err(format!(
                "leader {} is not in the ISR {:?}",
                self.leader, self.isr
            ));
        }
        Ok(())
    }
}

/// One ACL as stored, in Kafka's wire codes (resource type, pattern type, operation and
/// permission type): the `auth` crate gives them meaning, this crate only keeps them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AclEntry {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    /// `Type:name`, e.g. `User:alice`.
    pub principal: String,
    /// `*` or an address.
    pub host: String,
    pub operation: i8,
    pub permission_type: i8,
}

/// A client quota entity as stored: (entity type, name) pairs sorted by type, `None` names
/// standing for the default (`<default>`). The `auth` crate gives them meaning.
pub type QuotaEntityKey = Vec<(String, Option<String>)>;

/// One change to cluster metadata. Records are applied in log order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum MetadataRecord {
    /// The cluster's id, written once by the first active controller.
    ClusterId { cluster_id: String },
    /// A broker registered (first start or restart: a new incarnation and broker epoch).
    /// A registration starts fenced unless `fenced` says otherwise.
    RegisterBroker {
        node_id: i32,
        /// A UUID the broker picks at each process start.
        incarnation_id: String,
        broker_epoch: i64,
        endpoints: Vec<Endpoint>,
        rack: Option<String>,
        fenced: bool,
    },
    /// The broker missed its session (or finished a controlled shutdown): it leads nothing
    /// and is not listed to clients until it is unfenced.
    FenceBroker { node_id: i32, broker_epoch: i64 },
    /// The broker caught up with the metadata log and heartbeats: it may lead partitions.
    UnfenceBroker { node_id: i32, broker_epoch: i64 },
    /// The broker asked to shut down: leadership moves away from it.
    BrokerControlledShutdown { node_id: i32, broker_epoch: i64 },
    /// A topic exists (its partitions follow as `Partition` records).
    Topic { name: String, topic_id: String },
    /// A new partition of a topic.
    Partition {
        topic_id: String,
        partition: i32,
        #[serde(flatten)]
        registration: PartitionRegistration,
    },
    /// A partition's replicas, ISR or leadership changed: the whole new registration.
    PartitionChange {
        topic_id: String,
        partition: i32,
        #[serde(flatten)]
        registration: PartitionRegistration,
    },
    /// A topic config override was set (`Some`) or removed (`None`).
    TopicConfig {
        topic_id: String,
        key: String,
        value: Option<String>,
    },
    /// A topic and its partitions were deleted.
    RemoveTopic { topic_id: String },
    /// A group config override (config resource type GROUP) was set (`Some`) or removed
    /// (`None`). Groups need not exist to have configs, as in Kafka.
    GroupConfig {
        group: String,
        key: String,
        value: Option<String>,
    },
    /// A dynamic broker config (config resource type BROKER) was set (`Some`) or removed
    /// (`None`): `broker` is a broker id, or empty for the cluster-wide default (Kafka's
    /// `ConfigRecord` with resource type BROKER).
    BrokerConfig {
        broker: String,
        key: String,
        value: Option<String>,
    },
    /// A user's SCRAM credential for one mechanism (Kafka's `UserScramCredentialRecord`):
    /// never the password, only what SCRAM verifies with. `mechanism` is Kafka's code
    /// (1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512).
    UserScramCredential {
        name: String,
        mechanism: i8,
        salt: Vec<u8>,
        stored_key: Vec<u8>,
        server_key: Vec<u8>,
        iterations: i32,
    },
    /// A user's SCRAM credential for one mechanism was deleted.
    RemoveUserScramCredential { name: String, mechanism: i8 },
    /// An ACL (Kafka's `AccessControlEntryRecord`), under an id the controller picked.
    AccessControlEntry {
        id: String,
        #[serde(flatten)]
        acl: AclEntry,
    },
    /// An ACL was deleted (Kafka's `RemoveAccessControlEntryRecord`).
    RemoveAccessControlEntry { id: String },
    /// A client quota of an entity was set (`Some`) or removed (`None`) (Kafka's
    /// `ClientQuotaRecord`). `entity` is (entity type, name) sorted by type: `user`,
    /// `client-id` or `ip`, the name `None` for the default entity.
    ClientQuota {
        entity: QuotaEntityKey,
        key: String,
        value: Option<f64>,
    },
    /// A block of producer ids was handed to a broker; ids below `next_producer_id` are used.
    ProducerIds {
        broker_id: i32,
        broker_epoch: i64,
        next_producer_id: i64,
    },
}

/// The version byte in front of every encoded batch and snapshot.
const FORMAT_V1: u8 = 1;

/// Why bytes from the log or the network are not a record batch.
#[derive(Debug, thiserror::Error)]
#[error("undecodable metadata batch: {0}")]
pub struct DecodeError(pub String);

/// Encodes a batch of records (one Raft entry, or a snapshot's contents).
pub fn encode_batch(records: &[MetadataRecord]) -> Vec<u8> {
    let mut out = vec![FORMAT_V1];
    // Serialising plain data to a Vec cannot fail; an error here would be a bug in the types.
    if let Err(e) = serde_json::to_writer(&mut out, records) {
        unreachable!("metadata records always serialise: {e}");
    }
    out
}

/// Decodes a batch written by [`encode_batch`]. An empty slice is the empty batch (Raft's
/// leader no-op entries carry no data).
pub fn decode_batch(bytes: &[u8]) -> Result<Vec<MetadataRecord>, DecodeError> {
    match bytes.split_first() {
        None => Ok(Vec::new()),
        Some((&FORMAT_V1, json)) => {
            serde_json::from_slice(json).map_err(|e| DecodeError(e.to_string()))
        }
        Some((v, _)) => Err(DecodeError(format!("unknown format version {v}"))),
    }
}
