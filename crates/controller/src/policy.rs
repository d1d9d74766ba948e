//! Rules the controller applies on top of Kafka's own request validation: internal topics
//! belong to the brokers, and a broker hosts at most `max.broker.partitions` partitions.
//!
//! Kafka 4.x lets any client authorized on the cluster create `__consumer_offsets`, change its
//! configs, add partitions to it or delete it (only `__cluster_metadata` is refused, with
//! INVALID_REQUEST); an authorizer is what protects it there. Moldau has no authorizer yet, so
//! it refuses these from clients outright, with the errors Kafka uses for the same kind of
//! refusal:
//! - CreateTopics of an internal topic that does not exist yet: INVALID_REQUEST, "Creation of
//!   internal topic ... is prohibited." (Kafka's answer for `__cluster_metadata`); one that
//!   exists gets TOPIC_ALREADY_EXISTS, as in Kafka.
//! - AlterConfigs / IncrementalAlterConfigs / CreatePartitions on an internal topic:
//!   POLICY_VIOLATION (what Kafka answers when an `alter.config.policy` or
//!   `create.topic.policy` refuses a request).
//! - DeleteTopics: INVALID_TOPIC_EXCEPTION.
//!
//! Brokers acting on their own behalf (creating `__consumer_offsets`, restoring its settings)
//! are [`crate::Origin::Broker`] and pass.
//!
//! The partition cap is KIP-578's `max.broker.partitions`. KIP-578 proposed a new error code
//! that Kafka never added, so clients would not know it; Kafka 4.x answers its own built-in
//! limit on oversized topic operations ("Unable to perform excessively large batch
//! operation.") with POLICY_VIOLATION, and so does Moldau. The cap counts internal topics too
//! and applies to auto-created topics (no back door), as KIP-578 specifies.

use crate::placement::Candidate;
use crate::ControllerError;
use metadata::{is_internal_topic, MetadataImage};
use model::{ErrorCode, NodeId};
use std::collections::BTreeMap;

/// Refuses a client's CreateTopics of an internal topic (the brokers create those).
pub fn check_client_create(name: &str) -> Result<(), ControllerError> {
    if is_internal_topic(name) {
        return Err(ControllerError::new(
            ErrorCode::InvalidRequest,
            format!("Creation of internal topic {name} is prohibited."),
        ));
    }
    Ok(())
}

/// Refuses a client's config change or partition change on an internal topic: the brokers
/// own their settings (`__consumer_offsets` must stay compacted, and its partition count
/// decides which partition holds each group).
pub fn check_client_alter(name: &str, what: &str) -> Result<(), ControllerError> {
    if is_internal_topic(name) {
        return Err(ControllerError::new(
            ErrorCode::PolicyViolation,
            format!("Internal topic {name} is managed by the broker; its {what} cannot be changed by clients."),
        ));
    }
    Ok(())
}

/// Partitions with a replica on each broker.
pub fn partitions_per_broker(image: &MetadataImage) -> BTreeMap<NodeId, i64> {
    let mut out = BTreeMap::new();
    for t in image.topics.values() {
        for p in &t.partitions {
            for r in &p.replicas {
                *out.entry(*r).or_default() += 1;
            }
        }
    }
    out
}

fn refuse(node: NodeId, adding: i64, hosted: i64, max: i64, note: Option<&str>) -> ControllerError {
    let why = note.map(|n| format!(" ({n})")).unwrap_or_default();
    ControllerError::new(
        ErrorCode::PolicyViolation,
        format!(
            "Adding {adding} partition(s) would exceed max.broker.partitions={max}{why} \
             on broker {node}, which hosts {hosted}."
        ),
    )
}

/// A cheap check before placement (nothing is allocated for a request of a million
/// partitions): the usable brokers together must have room for `replicas` more replicas.
pub fn check_room(
    image: &MetadataImage,
    candidates: &[Candidate],
    replicas: i64,
    max: i64,
    note: Option<&str>,
) -> Result<(), ControllerError> {
    if replicas <= 0 {
        return Ok(());
    }
    let hosted = partitions_per_broker(image);
    let room: i64 = candidates
        .iter()
        .map(|c| (max - hosted.get(&c.id).copied().unwrap_or(0)).max(0))
        .sum();
    if replicas > room {
        // Name the broker closest to its cap, as the exact check would.
        let (node, on) = candidates
            .iter()
            .map(|c| (c.id, hosted.get(&c.id).copied().unwrap_or(0)))
            .max_by_key(|(_, n)| *n)
            .unwrap_or((-1, 0));
        let per_broker = replicas / candidates.len().max(1) as i64;
        return Err(refuse(node, per_broker.max(1), on, max, note));
    }
    Ok(())
}

/// The exact check once replicas are placed: no broker goes over the cap.
pub fn check_partition_caps(
    image: &MetadataImage,
    assignment: &[Vec<NodeId>],
    max: i64,
    note: Option<&str>,
) -> Result<(), ControllerError> {
    let mut adding: BTreeMap<NodeId, i64> = BTreeMap::new();
    for replicas in assignment {
        for r in replicas {
            *adding.entry(*r).or_default() += 1;
        }
    }
    let hosted = partitions_per_broker(image);
    for (node, n) in adding {
        let on = hosted.get(&node).copied().unwrap_or(0);
        if on.saturating_add(n) > max {
            return Err(refuse(node, n, on, max, note));
        }
    }
    Ok(())
}
