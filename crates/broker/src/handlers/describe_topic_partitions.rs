//! DescribeTopicPartitions (API 75, KIP-966): topics and their partitions with the eligible
//! leader replicas, paginated by a cursor, as Kafka's `DescribeTopicPartitionsRequestHandler`
//! answers it (kafka-topics --describe in Kafka 4.x uses it when the broker offers it).
//!
//! Topics are answered in name order, from the cursor's topic (starting at its partition) on;
//! at most `response_partition_limit` partitions (capped by `max.request.partition.size.limit`,
//! 2000, and at least 1) per answer, and `next_cursor` names where the next answer starts.
//! No topics named: every topic the client may describe (others are left out); named topics
//! the client may not describe answer TOPIC_AUTHORIZATION_FAILED, invalid names
//! INVALID_TOPIC_EXCEPTION, unknown ones UNKNOWN_TOPIC_OR_PARTITION; a cursor with a negative
//! partition, or naming a topic the request does not, is INVALID_REQUEST on every topic, and
//! a topic named "" fails the request with UNKNOWN_SERVER_ERROR on every topic (as Kafka 4.4).

use super::{code, to_uuid, Ctx};
use crate::state::BrokerState;
use metadata::{MetadataImage, TopicImage};
use model::acl::{AclOperation, ResourceType};
use model::ErrorCode;
use protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse,
};

/// Kafka's `max.request.partition.size.limit` default.
const MAX_PARTITIONS: i32 = 2000;

enum Entry {
    Topic(std::sync::Arc<TopicImage>),
    Error(String, ErrorCode),
}

impl Entry {
    fn name(&self) -> &str {
        match self {
            Entry::Topic(t) => &t.name,
            Entry::Error(n, _) => n,
        }
    }
}

pub fn describe(
    state: &BrokerState,
    ctx: &Ctx,
    req: &DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    let image = state.image();
    let describable = |name: &str| ctx.access.allows_topic(AclOperation::Describe, name);
    let (cursor_topic, cursor_partition) = req.cursor.as_ref().map_or((String::new(), 0), |c| {
        (c.topic_name.0.to_string(), c.partition_index)
    });
    // Kafka refuses the whole request (the error on every topic named, in request order)
    // when the cursor's partition is negative or its topic is not among those named
    // (INVALID_REQUEST), and fails it when a topic is named "" (UNKNOWN_SERVER_ERROR).
    let bad_cursor = req.cursor.is_some()
        && (cursor_partition < 0
            || (!req.topics.is_empty() && !req.topics.iter().any(|t| *t.name.0 == *cursor_topic)));
    let refused = if bad_cursor {
        Some(ErrorCode::InvalidRequest)
    } else if req.topics.iter().any(|t| t.name.0.is_empty()) {
        Some(ErrorCode::UnknownServerError)
    } else {
        None
    };
    if let Some(e) = refused {
        return DescribeTopicPartitionsResponse::default().with_topics(
            req.topics
                .iter()
                .map(|t| {
                    DescribeTopicPartitionsResponseTopic::default()
                        .with_error_code(code(e))
                        .with_name(Some(t.name.clone()))
                })
                .collect(),
        );
    }
    let mut entries: Vec<Entry> = if req.topics.is_empty() {
        image
            .topics
            .values()
            .filter(|t| describable(&t.name))
            .map(|t| Entry::Topic(t.clone()))
            .collect()
    } else {
        let mut names: Vec<String> = req.topics.iter().map(|t| t.name.0.to_string()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|n| {
                if !describable(&n) {
                    Entry::Error(n, ErrorCode::TopicAuthorizationFailed)
                } else if model::ids::validate_topic_name(&n).is_err() {
                    Entry::Error(n, ErrorCode::InvalidTopicException)
                } else if let Some(t) = image.topic(&n) {
                    Entry::Topic(t.clone())
                } else {
                    Entry::Error(n, ErrorCode::UnknownTopicOrPartition)
                }
            })
            .collect()
    };
    entries.retain(|e| e.name() >= cursor_topic.as_str());
    entries.sort_by(|a, b| a.name().cmp(b.name()));
    let mut budget = req.response_partition_limit.clamp(1, MAX_PARTITIONS) as usize;
    let mut topics = Vec::new();
    let mut next_cursor = None;
    let mut entries = entries.into_iter().peekable();
    while let Some(entry) = entries.next() {
        let t = match entry {
            Entry::Error(name, e) => {
                let mut t = DescribeTopicPartitionsResponseTopic::default()
                    .with_error_code(code(e))
                    .with_name(Some(super::topic_name(&name)));
                // Kafka hides only what the caller may not describe: an unknown or invalid
                // topic still carries the operations the caller would have on it.
                if e != ErrorCode::TopicAuthorizationFailed {
                    t.topic_authorized_operations =
                        ctx.access.operations(ResourceType::Topic, &name);
                }
                topics.push(t);
                continue;
            }
            Entry::Topic(t) => t,
        };
        if budget == 0 {
            next_cursor = Some(cursor(&t.name, 0));
            break;
        }
        let start = if *t.name == *cursor_topic {
            cursor_partition as usize
        } else {
            0
        };
        let end = t.partitions.len().min(start + budget);
        let partitions: Vec<_> = (start..end)
            .filter_map(|i| Some(partition(state, &image, &t, i, t.partitions.get(i)?)))
            .collect();
        budget -= end.saturating_sub(start);
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(super::topic_name(&t.name)))
                .with_topic_id(to_uuid(t.id))
                .with_is_internal(t.is_internal())
                .with_partitions(partitions)
                .with_topic_authorized_operations(
                    ctx.access.operations(ResourceType::Topic, &t.name),
                ),
        );
        if end < t.partitions.len() {
            next_cursor = Some(cursor(&t.name, end as i32));
            break;
        }
        if budget == 0 {
            // The next topic (if any) starts the next page.
            if let Some(next) = entries.peek() {
                next_cursor = Some(cursor(next.name(), 0));
            }
            break;
        }
    }
    DescribeTopicPartitionsResponse::default()
        .with_topics(topics)
        .with_next_cursor(next_cursor)
}

fn cursor(topic: &str, partition: i32) -> Cursor {
    Cursor::default()
        .with_topic_name(super::topic_name(topic))
        .with_partition_index(partition)
}

fn partition(
    state: &BrokerState,
    image: &MetadataImage,
    t: &TopicImage,
    i: usize,
    p: &metadata::PartitionRegistration,
) -> DescribeTopicPartitionsResponsePartition {
    let ids = |v: &[i32]| v.iter().map(|&n| BrokerId(n)).collect::<Vec<_>>();
    let live = |n: &i32| image.live_brokers().any(|b| b.node_id == *n);
    let mut offline: Vec<i32> = p.replicas.iter().copied().filter(|n| !live(n)).collect();
    let tp = model::TopicPartition::new(t.name.clone(), i as i32);
    if state.replicas.offline_partition(&tp).is_some() && !offline.contains(&state.node_id) {
        offline.push(state.node_id);
    }
    let epoch = state
        .replicas
        .get(&t.name, i as i32)
        .map(|h| h.leader_epoch())
        .unwrap_or(p.leader_epoch);
    DescribeTopicPartitionsResponsePartition::default()
        .with_error_code(if p.leader < 0 {
            code(ErrorCode::LeaderNotAvailable)
        } else {
            0
        })
        .with_partition_index(i as i32)
        .with_leader_id(BrokerId(p.leader))
        .with_leader_epoch(epoch)
        .with_replica_nodes(ids(&p.replicas))
        .with_isr_nodes(ids(&p.isr))
        .with_eligible_leader_replicas(Some(ids(&p.elr)))
        .with_last_known_elr(Some(Vec::new()))
        .with_offline_replicas(ids(&offline))
}
