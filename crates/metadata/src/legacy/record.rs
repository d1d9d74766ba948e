//! The records of the metadata log. Each is one durable fact about the cluster.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One change to cluster metadata. Records are applied in log order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum MetadataRecord {
    /// The cluster's id, written once when the cluster is formed.
    ClusterId { cluster_id: String },
    /// A broker registered (or re-registered with a new address).
    RegisterBroker {
        node_id: i32,
        host: String,
        port: i32,
        rack: Option<String>,
    },
    /// A topic was created with its partitions and config overrides.
    CreateTopic {
        name: String,
        /// UUID as 32 hex digits.
        topic_id: String,
        partitions: i32,
        replicas: Vec<i32>,
        configs: BTreeMap<String, String>,
    },
    /// A topic's partition count grew to `partitions`.
    CreatePartitions { topic_id: String, partitions: i32 },
    /// A topic's partition leadership changed (a new leader epoch).
    PartitionChange {
        topic_id: String,
        partition: i32,
        leader: i32,
        leader_epoch: i32,
        isr: Vec<i32>,
    },
    /// A topic config override was set (`Some`) or removed (`None`).
    SetTopicConfig {
        topic_id: String,
        key: String,
        value: Option<String>,
    },
    /// A topic was deleted.
    DeleteTopic { topic_id: String },
    /// A group config override (config resource type GROUP) was set (`Some`) or removed
    /// (`None`). Groups need not exist to have configs, as in Kafka.
    SetGroupConfig {
        group: String,
        key: String,
        value: Option<String>,
    },
    /// The highest producer id block handed out so far (producer ids are never reused).
    ProducerIds { next_producer_id: i64 },
}
