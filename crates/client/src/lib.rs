//! Moldau's native Kafka client for Rust: pure Rust, async (tokio), speaking the Kafka wire
//! protocol to Moldau or any Kafka broker.
//!
//! - [`Producer`]: batching per partition (`linger_ms`, `batch_size`), compression, acks
//!   0/1/all, retries with backoff within a delivery timeout, the Java client's partitioner
//!   (murmur2 of the key, sticky for null keys).
//! - [`Consumer`]: `assign` + `seek` (offset, beginning, end, timestamp) or `subscribe` with a
//!   group (classic protocol with range and cooperative-sticky assignors, or KIP-848's
//!   consumer protocol with `group_protocol: GroupProtocol::Consumer`), commits,
//!   pause/resume, pipelined fetches, and a `Stream` of records.
//! - [`Admin`]: topics, partitions, configs, groups and their offsets, records, cluster,
//!   transactions (list, describe, producers of a partition, abort a hanging one).
//! - Transactions (KIP-98/KIP-447): a [`Producer`] with `transactional_id` has
//!   `init_transactions`, `begin_transaction`, `send_offsets_to_transaction`,
//!   `commit_transaction` and `abort_transaction`; a consumer with `isolation_level: 1`
//!   (read_committed) sees only committed records. See the consume-transform-produce loop
//!   below.
//!
//! Errors are one [`Error`] type that keeps Kafka's error codes and says whether a call may
//! be retried; retriable errors are retried internally where the client can do so safely.
//!
//! ```no_run
//! # async fn f() -> Result<(), client::Error> {
//! use client::*;
//! let config = ClientConfig::new("127.0.0.1:9092");
//! let admin = Admin::connect(config.clone()).await?;
//! admin.create_topic(NewTopic::new("events", 3)).await?;
//! let producer = Producer::new(ProducerConfig { client: config.clone(), ..Default::default() }).await?;
//! producer.send(ProducerRecord::new("events", "hello").key("user-1")).await?;
//! let mut consumer = Consumer::new(ConsumerConfig {
//!     client: config,
//!     group_id: Some("readers".into()),
//!     auto_offset_reset: OffsetReset::Earliest,
//!     ..Default::default()
//! }).await?;
//! consumer.subscribe(&["events"])?;
//! let records = consumer.poll(std::time::Duration::from_secs(5)).await?;
//! # Ok(()) }
//! ```
//!
//! Exactly-once copy of `orders` to `orders-copy` (consume, transform, produce):
//!
//! ```no_run
//! # async fn f() -> Result<(), client::Error> {
//! use client::*;
//! use std::collections::BTreeMap;
//! let producer = Producer::new(ProducerConfig {
//!     client: ClientConfig::new("127.0.0.1:9092"),
//!     transactional_id: Some("copy-orders".into()),
//!     ..ProducerConfig::default()
//! }).await?;
//! producer.init_transactions().await?; // fences an older producer with this id
//! let mut consumer = Consumer::new(ConsumerConfig {
//!     client: ClientConfig::new("127.0.0.1:9092"),
//!     group_id: Some("copier".into()),
//!     enable_auto_commit: false,
//!     isolation_level: 1, // read_committed
//!     ..Default::default()
//! }).await?;
//! consumer.subscribe(&["orders"])?;
//! loop {
//!     let records = consumer.poll(std::time::Duration::from_secs(1)).await?;
//!     if records.is_empty() { continue; }
//!     producer.begin_transaction()?;
//!     let mut offsets = BTreeMap::new();
//!     for r in &records {
//!         producer.enqueue(ProducerRecord::new("orders-copy", r.value.clone().unwrap_or_default())).await?;
//!         offsets.insert((r.topic.to_string(), r.partition), r.offset + 1);
//!     }
//!     let group = consumer.consumer_group_metadata().expect("a group member");
//!     producer.send_offsets_to_transaction(&offsets, &group).await?;
//!     producer.commit_transaction().await?; // or abort_transaction()
//! }
//! # }
//! ```

// Tests may unwrap: a panic there is a test failure, which is the point.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod admin;
mod admin_quota;
mod admin_reassign;
mod admin_security;
mod admin_txn;
mod cluster;
mod conn;
mod consumer;
mod error;
mod group;
mod group_consumer;
mod guard;
mod link;
mod partitioner;
mod producer;
mod rpc;
mod security;
mod transaction;

pub use admin::{
    Admin, ConfigEntry, ConfigOp, GroupDescription, GroupListing, GroupMemberDescription, NewTopic,
    QuorumInfo, QuorumVoter, ResourceType,
};
pub use admin_quota::{ClientQuotas, QuotaEntity, QuotaMatch, QuotaOp};
pub use admin_reassign::OngoingReassignment;
pub use admin_security::{ScramUpsert, UserScramCredentials};
pub use auth::ScramMechanism;

/// The ACL vocabulary of [`Admin::create_acls`], [`Admin::describe_acls`] and
/// [`Admin::delete_acls`] (Kafka's names and wire codes).
pub mod acl {
    pub use auth::acl::{
        AccessControlEntry, AclBinding, AclBindingFilter, PatternFilter, ResourcePattern,
        CLUSTER_NAME, WILDCARD,
    };
    pub use model::acl::{AclOperation, PatternType, PermissionType, ResourceType};
}
pub use admin_txn::{ProducerDescription, TransactionDescription, TransactionListing};
pub use cluster::{BrokerInfo, Client, ClientConfig, ClusterInfo, PartitionInfo, TopicInfo};
pub use consumer::{
    Consumer, ConsumerConfig, ConsumerRecord, OffsetReset, RecordStream, SeekTo, TopicPartition,
};
pub use error::{Error, Result};
pub use group::{
    assign_cooperative_sticky, assign_range, decode_assignment, decode_subscription,
    encode_assignment, encode_subscription, Assignor, RebalanceListener, Subscription,
};
pub use group_consumer::GroupProtocol;
pub use link::NodeLink;
pub use model::ErrorCode;
pub use partitioner::{murmur2, partition_for_key, Partitioner};
pub use producer::{
    Acks, DeliveryCallback, DeliveryFuture, Producer, ProducerConfig, ProducerRecord,
    RecordMetadata,
};
pub use record::Compression;
pub use rpc::Rpc;
pub use security::{SaslCredentials, Security, TlsSettings};
pub use transaction::ConsumerGroupMetadata;
