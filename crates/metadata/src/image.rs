//! The immutable view of cluster metadata that every node builds by applying committed
//! records in log order, and the delta each batch of records makes to it.
//!
//! An image is cheap to share (`Arc`) and never mutated once published: applying records to a
//! clone produces the next image (topics are `Arc`s, so a change copies only what it touches).
//! A snapshot of the image is itself a list of records ([`MetadataImage::to_records`]), so
//! loading a snapshot and replaying the log run the same code.

use crate::record::{AclEntry, Endpoint, MetadataRecord, PartitionRegistration, QuotaEntityKey};
use model::{NodeId, TopicId};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// The name of the group coordinator's internal topic.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// The name of the transaction coordinator's internal topic.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// A registered broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub node_id: NodeId,
    pub incarnation_id: String,
    pub epoch: i64,
    pub endpoints: Vec<Endpoint>,
    pub rack: Option<String>,
    /// Fenced brokers lead nothing and are not shown to clients.
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
    /// The metadata offset of the registration: the broker is caught up once it has applied
    /// the log up to here.
    pub registered_offset: i64,
}

impl BrokerRegistration {
    /// The endpoint of the named listener.
    pub fn endpoint(&self, listener: &str) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| e.name == listener)
    }

    /// Whether new leaders and replicas may be placed on this broker.
    pub fn is_usable(&self) -> bool {
        !self.fenced && !self.in_controlled_shutdown
    }
}

/// A topic: its id, partitions and config overrides.
#[derive(Clone, Debug, PartialEq)]
pub struct TopicImage {
    pub name: Arc<str>,
    pub id: TopicId,
    pub partitions: Vec<PartitionRegistration>,
    pub configs: BTreeMap<String, String>,
}

impl TopicImage {
    /// Internal topics (`__consumer_offsets`, `__transaction_state`) are hidden from
    /// client writes and marked internal in Metadata.
    pub fn is_internal(&self) -> bool {
        is_internal_topic(&self.name)
    }
}

/// Whether a topic name belongs to the brokers themselves.
pub fn is_internal_topic(name: &str) -> bool {
    name == OFFSETS_TOPIC || name == TRANSACTION_STATE_TOPIC
}

/// Parses a topic id as metadata records store it (32 hex digits).
pub fn parse_id(s: &str) -> Option<TopicId> {
    u128::from_str_radix(s, 16).ok().map(TopicId::from_u128)
}

/// Formats a topic id the way metadata records store it.
pub fn format_id(id: TopicId) -> String {
    format!("{:032x}", id.as_u128())
}

/// What a batch of records changed. Publishers use it to touch only what changed; `full`
/// (a snapshot was loaded) means "reconcile everything against the image".
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetadataDelta {
    pub full: bool,
    pub cluster_id_changed: bool,
    pub created_topics: BTreeSet<TopicId>,
    /// Topics deleted, as they were just before (their names and partitions).
    pub deleted_topics: BTreeMap<TopicId, Arc<TopicImage>>,
    /// Partitions created or changed (of topics that still exist).
    pub changed_partitions: BTreeSet<(TopicId, i32)>,
    /// Topics whose config overrides changed.
    pub changed_configs: BTreeSet<TopicId>,
    pub changed_brokers: BTreeSet<NodeId>,
    pub producer_ids_changed: bool,
    pub group_configs_changed: bool,
    pub broker_configs_changed: bool,
    pub acls_changed: bool,
    pub quotas_changed: bool,
}

impl MetadataDelta {
    pub fn is_empty(&self) -> bool {
        *self == MetadataDelta::default()
    }

    /// Folds a later delta into this one.
    pub fn merge(&mut self, later: MetadataDelta) {
        self.full |= later.full;
        self.cluster_id_changed |= later.cluster_id_changed;
        self.producer_ids_changed |= later.producer_ids_changed;
        self.group_configs_changed |= later.group_configs_changed;
        self.broker_configs_changed |= later.broker_configs_changed;
        self.acls_changed |= later.acls_changed;
        self.quotas_changed |= later.quotas_changed;
        for (id, t) in later.deleted_topics {
            self.forget_topic(id, t);
        }
        self.created_topics.extend(later.created_topics);
        self.changed_partitions.extend(later.changed_partitions);
        self.changed_configs.extend(later.changed_configs);
        self.changed_brokers.extend(later.changed_brokers);
    }

    fn forget_topic(&mut self, id: TopicId, before: Arc<TopicImage>) {
        self.changed_partitions.retain(|(t, _)| *t != id);
        self.changed_configs.remove(&id);
        // Created and deleted within one delta: publishers never saw it.
        if !self.created_topics.remove(&id) {
            self.deleted_topics.entry(id).or_insert(before);
        }
    }
}

/// Cluster metadata at one point of the metadata log. Cheap to share (`Arc`), never mutated
/// once published: a change produces a new image.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetadataImage {
    /// The log offset (Raft index) of the last batch applied; -1 for the empty image.
    pub offset: i64,
    pub cluster_id: String,
    pub brokers: BTreeMap<NodeId, BrokerRegistration>,
    pub topics: BTreeMap<Arc<str>, Arc<TopicImage>>,
    pub topic_names: HashMap<TopicId, Arc<str>>,
    /// Producer ids below this were handed out.
    pub next_producer_id: i64,
    /// Config overrides of groups (resource type GROUP), by group id.
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Dynamic broker configs (resource type BROKER) by resource name: a broker id, or ""
    /// for the cluster-wide default.
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// SCRAM credentials by (user, mechanism code).
    pub scram_credentials: BTreeMap<(String, i8), ScramCredentialImage>,
    /// ACLs by the id the controller gave them.
    pub acls: BTreeMap<String, AclEntry>,
    /// Client quotas (Kafka's `ClientQuotaRecord`s) by entity: key -> value.
    pub client_quotas: BTreeMap<QuotaEntityKey, BTreeMap<String, f64>>,
}

/// A user's SCRAM credential for one mechanism, as SCRAM verifies it.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredentialImage {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl std::fmt::Debug for ScramCredentialImage {
    /// Keys stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredentialImage")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl MetadataImage {
    pub fn empty() -> MetadataImage {
        MetadataImage {
            offset: -1,
            ..MetadataImage::default()
        }
    }

    pub fn topic(&self, name: &str) -> Option<&Arc<TopicImage>> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: TopicId) -> Option<&Arc<TopicImage>> {
        self.topic_names.get(&id).and_then(|n| self.topics.get(n))
    }

    /// The partition's registration, if the topic and partition exist.
    pub fn partition(&self, id: TopicId, partition: i32) -> Option<&PartitionRegistration> {
        let p = usize::try_from(partition).ok()?;
        self.topic_by_id(id)?.partitions.get(p)
    }

    /// Brokers clients may use: registered and not fenced.
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values().filter(|b| !b.fenced)
    }

    /// The next broker epoch to hand out: epochs only grow.
    pub fn next_broker_epoch(&self) -> i64 {
        self.brokers
            .values()
            .map(|b| b.epoch + 1)
            .max()
            .unwrap_or(1)
    }

    /// The broker-level config layers of broker `node_id` over its static config.
    pub fn broker_layers<'a>(
        &'a self,
        node_id: NodeId,
        static_props: &'a BTreeMap<String, String>,
    ) -> model::config::BrokerLayers<'a> {
        model::config::BrokerLayers {
            dynamic_broker: self.broker_configs.get(&node_id.to_string()),
            dynamic_default: self.broker_configs.get(""),
            static_props,
        }
    }

    /// Total number of partitions of all topics.
    pub fn partition_count(&self) -> usize {
        self.topics.values().map(|t| t.partitions.len()).sum()
    }

    fn topic_mut(&mut self, id: &str) -> Option<&mut TopicImage> {
        let name = self.topic_names.get(&parse_id(id)?)?.clone();
        self.topics.get_mut(&name).map(Arc::make_mut)
    }

    /// Applies a batch of records committed at `offset`, recording what changed in `delta`.
    pub fn apply_batch(
        &mut self,
        offset: i64,
        records: &[MetadataRecord],
        delta: &mut MetadataDelta,
    ) {
        for r in records {
            self.apply(offset, r, delta);
        }
        self.offset = self.offset.max(offset);
    }

    /// Applies one record of the batch at `offset`. Records that refer to unknown topics or
    /// brokers are ignored: a later record may legitimately follow a deletion, and a record
    /// from the log must never stop a node from applying the rest.
    pub fn apply(&mut self, offset: i64, record: &MetadataRecord, delta: &mut MetadataDelta) {
        match record {
            MetadataRecord::ClusterId { cluster_id } => {
                self.cluster_id = cluster_id.clone();
                delta.cluster_id_changed = true;
            }
            MetadataRecord::RegisterBroker {
                node_id,
                incarnation_id,
                broker_epoch,
                endpoints,
                rack,
                fenced,
            } => {
                self.brokers.insert(
                    *node_id,
                    BrokerRegistration {
                        node_id: *node_id,
                        incarnation_id: incarnation_id.clone(),
                        epoch: *broker_epoch,
                        endpoints: endpoints.clone(),
                        rack: rack.clone(),
                        fenced: *fenced,
                        in_controlled_shutdown: false,
                        registered_offset: offset,
                    },
                );
                delta.changed_brokers.insert(*node_id);
            }
            MetadataRecord::FenceBroker {
                node_id,
                broker_epoch,
            }
            | MetadataRecord::UnfenceBroker {
                node_id,
                broker_epoch,
            }
            | MetadataRecord::BrokerControlledShutdown {
                node_id,
                broker_epoch,
            } => {
                if let Some(b) = self
                    .brokers
                    .get_mut(node_id)
                    .filter(|b| b.epoch == *broker_epoch)
                {
                    match record {
                        MetadataRecord::FenceBroker { .. } => b.fenced = true,
                        MetadataRecord::UnfenceBroker { .. } => b.fenced = false,
                        _ => b.in_controlled_shutdown = true,
                    }
                    delta.changed_brokers.insert(*node_id);
                }
            }
            MetadataRecord::Topic { name, topic_id } => {
                let Some(id) = parse_id(topic_id) else {
                    return;
                };
                let name: Arc<str> = name.as_str().into();
                self.topic_names.insert(id, name.clone());
                self.topics.insert(
                    name.clone(),
                    Arc::new(TopicImage {
                        name,
                        id,
                        partitions: Vec::new(),
                        configs: BTreeMap::new(),
                    }),
                );
                delta.created_topics.insert(id);
            }
            MetadataRecord::Partition {
                topic_id,
                partition,
                registration,
            }
            | MetadataRecord::PartitionChange {
                topic_id,
                partition,
                registration,
            } => {
                let Some(t) = self.topic_mut(topic_id) else {
                    return;
                };
                let Ok(p) = usize::try_from(*partition) else {
                    return;
                };
                match p.cmp(&t.partitions.len()) {
                    std::cmp::Ordering::Less => t.partitions[p] = registration.clone(),
                    std::cmp::Ordering::Equal => t.partitions.push(registration.clone()),
                    std::cmp::Ordering::Greater => return,
                }
                let id = t.id;
                delta.changed_partitions.insert((id, *partition));
            }
            MetadataRecord::TopicConfig {
                topic_id,
                key,
                value,
            } => {
                let Some(t) = self.topic_mut(topic_id) else {
                    return;
                };
                match value {
                    Some(v) => t.configs.insert(key.clone(), v.clone()),
                    None => t.configs.remove(key),
                };
                let id = t.id;
                delta.changed_configs.insert(id);
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                let Some(id) = parse_id(topic_id) else {
                    return;
                };
                if let Some(name) = self.topic_names.remove(&id) {
                    if let Some(t) = self.topics.remove(&name) {
                        delta.forget_topic(id, t);
                    }
                }
            }
            MetadataRecord::GroupConfig { group, key, value } => {
                let configs = self.group_configs.entry(group.clone()).or_default();
                match value {
                    Some(v) => configs.insert(key.clone(), v.clone()),
                    None => configs.remove(key),
                };
                if configs.is_empty() {
                    self.group_configs.remove(group);
                }
                delta.group_configs_changed = true;
            }
            MetadataRecord::BrokerConfig { broker, key, value } => {
                let configs = self.broker_configs.entry(broker.clone()).or_default();
                match value {
                    Some(v) => configs.insert(key.clone(), v.clone()),
                    None => configs.remove(key),
                };
                if configs.is_empty() {
                    self.broker_configs.remove(broker);
                }
                delta.broker_configs_changed = true;
            }
            MetadataRecord::UserScramCredential {
                name,
                mechanism,
                salt,
                stored_key,
                server_key,
                iterations,
            } => {
                self.scram_credentials.insert(
                    (name.clone(), *mechanism),
                    ScramCredentialImage {
                        salt: salt.clone(),
                        stored_key: stored_key.clone(),
                        server_key: server_key.clone(),
                        iterations: *iterations,
                    },
                );
            }
            MetadataRecord::RemoveUserScramCredential { name, mechanism } => {
                self.scram_credentials.remove(&(name.clone(), *mechanism));
            }
            MetadataRecord::AccessControlEntry { id, acl } => {
                self.acls.insert(id.clone(), acl.clone());
                delta.acls_changed = true;
            }
            MetadataRecord::RemoveAccessControlEntry { id } => {
                if self.acls.remove(id).is_some() {
                    delta.acls_changed = true;
                }
            }
            MetadataRecord::ClientQuota { entity, key, value } => {
                let quotas = self.client_quotas.entry(entity.clone()).or_default();
                match value {
                    Some(v) => quotas.insert(key.clone(), *v),
                    None => quotas.remove(key),
                };
                if quotas.is_empty() {
                    self.client_quotas.remove(entity);
                }
                delta.quotas_changed = true;
            }
            MetadataRecord::ProducerIds {
                next_producer_id, ..
            } => {
                self.next_producer_id = self.next_producer_id.max(*next_producer_id);
                delta.producer_ids_changed = true;
            }
        }
    }

    /// The records that rebuild this image from empty: the contents of a snapshot.
    pub fn to_records(&self) -> Vec<MetadataRecord> {
        let mut out = Vec::new();
        if !self.cluster_id.is_empty() {
            out.push(MetadataRecord::ClusterId {
                cluster_id: self.cluster_id.clone(),
            });
        }
        for b in self.brokers.values() {
            out.push(MetadataRecord::RegisterBroker {
                node_id: b.node_id,
                incarnation_id: b.incarnation_id.clone(),
                broker_epoch: b.epoch,
                endpoints: b.endpoints.clone(),
                rack: b.rack.clone(),
                fenced: b.fenced,
            });
            if b.in_controlled_shutdown {
                out.push(MetadataRecord::BrokerControlledShutdown {
                    node_id: b.node_id,
                    broker_epoch: b.epoch,
                });
            }
        }
        for t in self.topics.values() {
            let topic_id = format_id(t.id);
            out.push(MetadataRecord::Topic {
                name: t.name.to_string(),
                topic_id: topic_id.clone(),
            });
            for (i, p) in t.partitions.iter().enumerate() {
                out.push(MetadataRecord::Partition {
                    topic_id: topic_id.clone(),
                    partition: i as i32,
                    registration: p.clone(),
                });
            }
            for (k, v) in &t.configs {
                out.push(MetadataRecord::TopicConfig {
                    topic_id: topic_id.clone(),
                    key: k.clone(),
                    value: Some(v.clone()),
                });
            }
        }
        for (group, configs) in &self.group_configs {
            for (k, v) in configs {
                out.push(MetadataRecord::GroupConfig {
                    group: group.clone(),
                    key: k.clone(),
                    value: Some(v.clone()),
                });
            }
        }
        for (broker, configs) in &self.broker_configs {
            for (k, v) in configs {
                out.push(MetadataRecord::BrokerConfig {
                    broker: broker.clone(),
                    key: k.clone(),
                    value: Some(v.clone()),
                });
            }
        }
        for ((name, mechanism), c) in &self.scram_credentials {
            out.push(MetadataRecord::UserScramCredential {
                name: name.clone(),
                mechanism: *mechanism,
                salt: c.salt.clone(),
                stored_key: c.stored_key.clone(),
                server_key: c.server_key.clone(),
                iterations: c.iterations,
            });
        }
        for (id, acl) in &self.acls {
            out.push(MetadataRecord::AccessControlEntry {
                id: id.clone(),
                acl: acl.clone(),
            });
        }
        for (entity, quotas) in &self.client_quotas {
            for (k, v) in quotas {
                out.push(MetadataRecord::ClientQuota {
                    entity: entity.clone(),
                    key: k.clone(),
                    value: Some(*v),
                });
            }
        }
        if self.next_producer_id > 0 {
            out.push(MetadataRecord::ProducerIds {
                broker_id: -1,
                broker_epoch: -1,
                next_producer_id: self.next_producer_id,
            });
        }
        out
    }

    /// The image a snapshot at `offset` describes. Broker registrations keep the offset at
    /// which they were registered, as far as the snapshot can tell: the snapshot's own.
    pub fn from_snapshot(offset: i64, records: &[MetadataRecord]) -> MetadataImage {
        let mut image = MetadataImage::empty();
        let mut delta = MetadataDelta::default();
        image.apply_batch(offset, records, &mut delta);
        image
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::record::{decode_batch, encode_batch};

    fn sample() -> Vec<MetadataRecord> {
        let id = format_id(TopicId::from_u128(7));
        vec![
            MetadataRecord::ClusterId {
                cluster_id: "c".into(),
            },
            MetadataRecord::RegisterBroker {
                node_id: 1,
                incarnation_id: "i".into(),
                broker_epoch: 3,
                endpoints: vec![Endpoint {
                    name: "PLAINTEXT".into(),
                    host: "h".into(),
                    port: 9092,
                    security_protocol: "PLAINTEXT".into(),
                }],
                rack: None,
                fenced: false,
            },
            MetadataRecord::Topic {
                name: "a".into(),
                topic_id: id.clone(),
            },
            MetadataRecord::Partition {
                topic_id: id.clone(),
                partition: 0,
                registration: PartitionRegistration::new(vec![1], 1),
            },
            MetadataRecord::TopicConfig {
                topic_id: id.clone(),
                key: "retention.ms".into(),
                value: Some("5".into()),
            },
            MetadataRecord::ProducerIds {
                broker_id: 1,
                broker_epoch: 3,
                next_producer_id: 1000,
            },
            MetadataRecord::GroupConfig {
                group: "g".into(),
                key: "consumer.session.timeout.ms".into(),
                value: Some("50000".into()),
            },
            MetadataRecord::BrokerConfig {
                broker: "".into(),
                key: "log.retention.ms".into(),
                value: Some("1000".into()),
            },
            MetadataRecord::BrokerConfig {
                broker: "1".into(),
                key: "message.max.bytes".into(),
                value: Some("2000".into()),
            },
        ]
    }

    #[test]
    fn a_snapshot_rebuilds_the_same_image() {
        let mut image = MetadataImage::empty();
        let mut delta = MetadataDelta::default();
        image.apply_batch(4, &sample(), &mut delta);
        let records = decode_batch(&encode_batch(&image.to_records())).unwrap();
        assert_eq!(MetadataImage::from_snapshot(4, &records), image);
        assert_eq!(image.next_broker_epoch(), 4);
        assert!(delta.broker_configs_changed);
        let static_props = BTreeMap::from([("log.retention.ms".to_string(), "9".to_string())]);
        let effective = image.broker_layers(1, &static_props).effective();
        assert_eq!(effective["log.retention.ms"], "1000");
        assert_eq!(effective["message.max.bytes"], "2000");
        assert!(!image
            .broker_layers(2, &static_props)
            .effective()
            .contains_key("message.max.bytes"));
    }

    #[test]
    fn deltas_forget_topics_created_and_deleted_together() {
        let mut image = MetadataImage::empty();
        let mut delta = MetadataDelta::default();
        image.apply_batch(1, &sample(), &mut delta);
        let id = TopicId::from_u128(7);
        assert!(delta.created_topics.contains(&id));
        image.apply(
            2,
            &MetadataRecord::RemoveTopic {
                topic_id: format_id(id),
            },
            &mut delta,
        );
        assert!(delta.created_topics.is_empty() && delta.deleted_topics.is_empty());
        assert!(delta.changed_partitions.is_empty());
        let mut d2 = MetadataDelta::default();
        let mut image = MetadataImage::empty();
        image.apply_batch(1, &sample(), &mut MetadataDelta::default());
        image.apply(
            2,
            &MetadataRecord::RemoveTopic {
                topic_id: format_id(id),
            },
            &mut d2,
        );
        assert_eq!(d2.deleted_topics[&id].name.as_ref(), "a");
    }

    #[test]
    fn undecodable_batches_are_errors_not_panics() {
        assert!(decode_batch(b"").unwrap().is_empty());
        assert!(decode_batch(b"\x01[{\"type\":\"Nope\"}]").is_err());
        assert!(decode_batch(b"\x02[]").is_err());
        assert!(decode_batch(b"\x01[").is_err());
    }
}
