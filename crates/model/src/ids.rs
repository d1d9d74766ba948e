//! Identifiers: offsets, epochs, producer ids, topic ids and topic-partitions.

use std::fmt;
use std::sync::Arc;

/// A position in a partition log. Kafka uses signed 64-bit offsets; -1 means "none".
pub type Offset = i64;
/// A broker (node) id.
pub type NodeId = i32;
/// The epoch of a partition's leadership; it only ever grows.
pub type LeaderEpoch = i32;
/// The id the broker hands an idempotent or transactional producer.
pub type ProducerId = i64;
/// The epoch of a producer id; bumped to fence older instances.
pub type ProducerEpoch = i16;

/// Kafka's UNDEFINED_EPOCH: no leader epoch is known.
pub const UNDEFINED_EPOCH: LeaderEpoch = -1;
/// Kafka's UNDEFINED_EPOCH_OFFSET: no end offset is known.
pub const UNDEFINED_EPOCH_OFFSET: Offset = -1;

/// OffsetForLeaderEpoch's answer (and a Fetch response's diverging epoch): the largest epoch
/// <= the requested one that a log knows and the offset where it ends (where the next epoch
/// starts, or the log end for the latest); `UNDEFINED` when nothing is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochEndOffset {
    pub epoch: LeaderEpoch,
    pub end_offset: Offset,
}

impl EpochEndOffset {
    pub const UNDEFINED: EpochEndOffset = EpochEndOffset {
        epoch: UNDEFINED_EPOCH,
        end_offset: UNDEFINED_EPOCH_OFFSET,
    };

    pub fn is_undefined(&self) -> bool {
        self.epoch == UNDEFINED_EPOCH || self.end_offset == UNDEFINED_EPOCH_OFFSET
    }
}

/// A topic id: a random v4 UUID assigned at creation, never reused.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TopicId(pub [u8; 16]);

impl TopicId {
    /// The all-zero id Kafka uses to mean "no id".
    pub const ZERO: TopicId = TopicId([0; 16]);

    /// A fresh random id (never the zero id).
    pub fn random() -> TopicId {
        loop {
            let id = TopicId(*uuid::Uuid::new_v4().as_bytes());
            if id != TopicId::ZERO {
                return id;
            }
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == TopicId::ZERO
    }

    pub fn as_u128(&self) -> u128 {
        u128::from_be_bytes(self.0)
    }

    pub fn from_u128(v: u128) -> TopicId {
        TopicId(v.to_be_bytes())
    }

    /// Parses the hyphenated UUID form written by `Display`.
    pub fn parse(s: &str) -> Option<TopicId> {
        uuid::Uuid::parse_str(s)
            .ok()
            .map(|u| TopicId(*u.as_bytes()))
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&uuid::Uuid::from_bytes(self.0), f)
    }
}

impl fmt::Debug for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicId({self})")
    }
}

/// A topic name and a partition index.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: Arc<str>,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// The directory name Kafka uses for this partition's log: `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Kafka's rules for a legal topic name: 1..=249 chars of `[a-zA-Z0-9._-]`, not `.` or `..`.
/// The error is Kafka's text (`Topic.validate`), e.g. "Topic name is invalid: the empty string
/// is not allowed".
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    let reason = if name.is_empty() {
        "the empty string is not allowed".to_string()
    } else if name == "." || name == ".." {
        format!("'{name}' is not allowed")
    } else if name.len() > 249 {
        format!("the length of '{name}' is longer than the max allowed length 249")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    {
        format!(
            "'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
        )
    } else {
        return Ok(());
    };
    Err(format!("Topic name is invalid: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_id_round_trips_through_display() {
        let id = TopicId::random();
        assert!(!id.is_zero());
        assert_eq!(TopicId::parse(&id.to_string()), Some(id));
        assert_eq!(TopicId::from_u128(id.as_u128()), id);
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_eu-west").is_ok());
        assert_eq!(
            validate_topic_name(""),
            Err("Topic name is invalid: the empty string is not allowed".into())
        );
        assert_eq!(
            validate_topic_name("a b"),
            Err(
                "Topic name is invalid: 'a b' contains one or more characters other than \
                 ASCII alphanumerics, '.', '_' and '-'"
                    .into()
            )
        );
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a/b").is_err());
        assert!(validate_topic_name(&"x".repeat(250)).is_err());
    }
}
