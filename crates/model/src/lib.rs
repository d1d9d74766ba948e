//! Moldau's shared vocabulary: ids, offsets, Kafka error codes and typed configs. No I/O.

pub mod acl;
pub mod cluster;
pub mod config;
pub mod error;
pub mod group_config;
pub mod ids;
pub mod security;

pub use config::{
    BrokerConfig, CleanupPolicy, ConfigError, ConfigSource, ThrottledReplicas, TimestampType,
    TopicConfig, TransactionSettings,
};
pub use error::ErrorCode;
pub use ids::{
    EpochEndOffset, LeaderEpoch, NodeId, Offset, ProducerEpoch, ProducerId, TopicId,
    TopicPartition, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET,
};
