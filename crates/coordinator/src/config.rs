//! The coordinator's settings, taken from the broker config (Kafka's names and defaults).

use model::config::ConsumerGroupSettings;
use model::BrokerConfig;

/// Settings of the group coordinator. `Default` matches Kafka's defaults.
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    /// `offsets.topic.num.partitions`: decides which partition holds a group.
    pub offsets_topic_num_partitions: i32,
    /// `offsets.retention.minutes` in ms.
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms`.
    pub offsets_retention_check_interval_ms: i64,
    /// `offset.metadata.max.bytes`: longer commit metadata gets OFFSET_METADATA_TOO_LARGE.
    pub offset_metadata_max_bytes: usize,
    pub group_min_session_timeout_ms: i32,
    pub group_max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of an empty group
    /// waits for more members.
    pub group_initial_rebalance_delay_ms: i32,
    /// `group.max.size`.
    pub group_max_size: usize,
    /// How long a new member's JoinGroup may wait before it is dropped (Kafka: 5 minutes).
    pub new_member_join_timeout_ms: i64,
    /// Consumer-protocol (KIP-848) groups: `group.consumer.*`.
    pub consumer: ConsumerGroupSettings,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            offsets_topic_num_partitions: 50,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1000,
            offsets_retention_check_interval_ms: 600_000,
            offset_metadata_max_bytes: 4096,
            group_min_session_timeout_ms: 6_000,
            group_max_session_timeout_ms: 1_800_000,
            group_initial_rebalance_delay_ms: 3_000,
            group_max_size: i32::MAX as usize,
            new_member_join_timeout_ms: 5 * 60 * 1000,
            consumer: ConsumerGroupSettings::default(),
        }
    }
}

impl CoordinatorConfig {
    /// The coordinator settings of a broker config; keys the broker config lacks keep Kafka's
    /// defaults.
    pub fn from_broker(b: &BrokerConfig) -> Self {
        CoordinatorConfig {
            offsets_topic_num_partitions: b.offsets_topic_num_partitions,
            offsets_retention_ms: i64::from(b.offsets_retention_minutes) * 60_000,
            group_min_session_timeout_ms: b.group_min_session_timeout_ms,
            group_max_session_timeout_ms: b.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms: b.group_initial_rebalance_delay_ms,
            consumer: b.consumer_groups.clone(),
            ..CoordinatorConfig::default()
        }
    }
}
