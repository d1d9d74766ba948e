//! Rules the controller applies on top of Kafka's own request validation: internal topics
//! belong to the broker, and a broker hosts at most `max.broker.partitions` partitions.
//!
//! Kafka 4.x lets any client authorized on the cluster create `__consumer_offsets`, change its
//! configs, add partitions to it or delete it (only `__cluster_metadata` is refused, with
//! INVALID_REQUEST); an authorizer is what protects it there. Moldau has no authorizer yet, so
//! it refuses these from clients outright, with the errors Kafka uses for the same kind of
//! refusal:
//! - CreateTopics of an internal topic: INVALID_REQUEST, "Creation of internal topic ... is
//!   prohibited." (Kafka's answer for `__cluster_metadata`).
//! - AlterConfigs / IncrementalAlterConfigs / CreatePartitions on an internal topic:
//!   POLICY_VIOLATION (what Kafka answers when an `alter.config.policy` or
//!   `create.topic.policy` refuses a request).
//! - DeleteTopics: INVALID_TOPIC_EXCEPTION (unchanged, see `MetadataStore::delete_topic`).
//!
//! The partition cap is KIP-578's `max.broker.partitions`. KIP-578 proposed a new error code
//! that Kafka never added, so clients would not know it; Kafka 4.x answers its own built-in
//! limit on oversized topic operations ("Unable to perform excessively large batch
//! operation.") with POLICY_VIOLATION, and so does Moldau. The cap counts internal topics too
//! and applies to auto-created topics (no back door), as KIP-578 specifies.

use crate::image::{is_internal_topic, MetadataImage};
use crate::store::ControllerError;
use model::{ErrorCode, NodeId};

/// Refuses a client's CreateTopics of an internal topic (the broker creates those itself).
pub fn check_client_create(name: &str) -> Result<(), ControllerError> {
    if is_internal_topic(name) {
        return Err(ControllerError::new(
            ErrorCode::InvalidRequest,
            format!("Creation of internal topic {name} is prohibited."),
        ));
    }
    Ok(())
}

/// Refuses a client's config change or partition change on an internal topic: the broker
/// owns their settings (`__consumer_offsets` must stay compacted, and its partition count
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

/// Partitions with a replica on `node` in `image`.
pub fn partitions_on(image: &MetadataImage, node: NodeId) -> i64 {
    image
        .topics
        .values()
        .map(|t| {
            t.partitions
                .iter()
                .filter(|p| p.replicas.contains(&node))
                .count() as i64
        })
        .sum()
}

/// Checks that `node` can take `adding` more partitions under `max_partitions`. Called before
/// anything is allocated for the new partitions, so a request for a million partitions costs
/// nothing.
pub fn check_partition_cap(
    image: &MetadataImage,
    node: NodeId,
    adding: i64,
    max_partitions: i64,
    note: Option<&str>,
) -> Result<(), ControllerError> {
    let hosted = partitions_on(image, node);
    if adding > 0 && hosted.saturating_add(adding) > max_partitions {
        let why = note.map(|n| format!(" ({n})")).unwrap_or_default();
        return Err(ControllerError::new(
            ErrorCode::PolicyViolation,
            format!(
                "Adding {adding} partition(s) would exceed max.broker.partitions={max_partitions}{why} \
                 on broker {node}, which hosts {hosted}."
            ),
        ));
    }
    Ok(())
}
