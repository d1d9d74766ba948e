//! The immutable view of cluster metadata that handlers read.

use crate::legacy::record::MetadataRecord;
use model::{NodeId, TopicId};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A registered broker.
#[derive(Clone, Debug, PartialEq)]
pub struct BrokerImage {
    pub node_id: NodeId,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// One partition's replicas and leadership.
#[derive(Clone, Debug, PartialEq)]
pub struct PartitionImage {
    pub leader: NodeId,
    pub leader_epoch: i32,
    pub replicas: Vec<NodeId>,
    pub isr: Vec<NodeId>,
}

/// A topic: its id, partitions and config overrides.
#[derive(Clone, Debug, PartialEq)]
pub struct TopicImage {
    pub name: Arc<str>,
    pub id: TopicId,
    pub partitions: Vec<PartitionImage>,
    pub configs: BTreeMap<String, String>,
}

impl TopicImage {
    /// Internal topics (`__consumer_offsets`, `__transaction_state`) are hidden from
    /// client writes and marked internal in Metadata.
    pub fn is_internal(&self) -> bool {
        is_internal_topic(&self.name)
    }
}

/// Whether a topic name belongs to the broker itself.
pub fn is_internal_topic(name: &str) -> bool {
    name == "__consumer_offsets" || name == "__transaction_state"
}

/// Cluster metadata at one point of the metadata log. Cheap to share (`Arc`), never mutated:
/// a change produces a new image.
#[derive(Clone, Debug, Default)]
pub struct MetadataImage {
    /// The offset of the last record applied; -1 for the empty image.
    pub offset: i64,
    pub cluster_id: String,
    pub brokers: BTreeMap<NodeId, BrokerImage>,
    pub topics: BTreeMap<Arc<str>, Arc<TopicImage>>,
    pub topic_names: HashMap<TopicId, Arc<str>>,
    pub next_producer_id: i64,
    /// Config overrides of groups (resource type GROUP), by group id.
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
}

fn parse_id(s: &str) -> TopicId {
    u128::from_str_radix(s, 16)
        .map(TopicId::from_u128)
        .unwrap_or(TopicId::ZERO)
}

/// Formats a topic id the way metadata records store it.
pub fn format_id(id: TopicId) -> String {
    format!("{:032x}", id.as_u128())
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

    fn topic_mut(&mut self, id: &str) -> Option<&mut TopicImage> {
        let name = self.topic_names.get(&parse_id(id))?.clone();
        self.topics.get_mut(&name).map(Arc::make_mut)
    }

    /// Applies one record at `offset`. Records that refer to unknown topics are ignored:
    /// a later record may legitimately follow a deletion.
    pub fn apply(&mut self, offset: i64, record: &MetadataRecord) {
        self.offset = offset;
        match record {
            MetadataRecord::ClusterId { cluster_id } => self.cluster_id = cluster_id.clone(),
            MetadataRecord::RegisterBroker {
                node_id,
                host,
                port,
                rack,
            } => {
                self.brokers.insert(
                    *node_id,
                    BrokerImage {
                        node_id: *node_id,
                        host: host.clone(),
                        port: *port,
                        rack: rack.clone(),
                    },
                );
            }
            MetadataRecord::CreateTopic {
                name,
                topic_id,
                partitions,
                replicas,
                configs,
            } => {
                let id = parse_id(topic_id);
                let name: Arc<str> = name.as_str().into();
                let leader = replicas.first().copied().unwrap_or(-1);
                let partitions = (0..*partitions)
                    .map(|_| PartitionImage {
                        leader,
                        leader_epoch: 0,
                        replicas: replicas.clone(),
                        isr: replicas.clone(),
                    })
                    .collect();
                self.topic_names.insert(id, name.clone());
                self.topics.insert(
                    name.clone(),
                    Arc::new(TopicImage {
                        name,
                        id,
                        partitions,
                        configs: configs.clone(),
                    }),
                );
            }
            MetadataRecord::CreatePartitions {
                topic_id,
                partitions,
            } => {
                if let Some(t) = self.topic_mut(topic_id) {
                    let template = t.partitions.first().cloned().unwrap_or(PartitionImage {
                        leader: -1,
                        leader_epoch: 0,
                        replicas: vec![],
                        isr: vec![],
                    });
                    while (t.partitions.len() as i32) < *partitions {
                        t.partitions.push(PartitionImage {
                            leader_epoch: 0,
                            ..template.clone()
                        });
                    }
                }
            }
            MetadataRecord::PartitionChange {
                topic_id,
                partition,
                leader,
                leader_epoch,
                isr,
            } => {
                if let Some(p) = self
                    .topic_mut(topic_id)
                    .and_then(|t| t.partitions.get_mut(*partition as usize))
                {
                    p.leader = *leader;
                    p.leader_epoch = *leader_epoch;
                    p.isr = isr.clone();
                }
            }
            MetadataRecord::SetTopicConfig {
                topic_id,
                key,
                value,
            } => {
                if let Some(t) = self.topic_mut(topic_id) {
                    match value {
                        Some(v) => {
                            t.configs.insert(key.clone(), v.clone());
                        }
                        None => {
                            t.configs.remove(key);
                        }
                    }
                }
            }
            MetadataRecord::DeleteTopic { topic_id } => {
                if let Some(name) = self.topic_names.remove(&parse_id(topic_id)) {
                    self.topics.remove(&name);
                }
            }
            MetadataRecord::SetGroupConfig { group, key, value } => {
                let configs = self.group_configs.entry(group.clone()).or_default();
                match value {
                    Some(v) => {
                        configs.insert(key.clone(), v.clone());
                    }
                    None => {
                        configs.remove(key);
                    }
                }
                if configs.is_empty() {
                    self.group_configs.remove(group);
                }
            }
            MetadataRecord::ProducerIds { next_producer_id } => {
                self.next_producer_id = self.next_producer_id.max(*next_producer_id);
            }
        }
    }
}
