//! AlterPartitionReassignments (API 45) and ListPartitionReassignments (API 46), KIP-455:
//! moving partition replicas between brokers (`kafka-reassign-partitions`,
//! `Admin.alterPartitionReassignments`). The active controller decides
//! (`controller::reassignment`); the brokers then follow the committed replica sets (adding
//! replicas open the partition and fetch from the leader, removed ones delete it).
//! Authorization (ALTER / DESCRIBE on the cluster) is the request-level gate's (`authz::gate`).

use super::{code, str_bytes};
use crate::state::BrokerState;
use controller::{ControllerError, Reply, Request};
use model::ErrorCode;
use protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use std::sync::Arc;

/// Kafka's answer to an AlterPartitionReassignments refused as a whole: the error at the top
/// and on every partition named.
pub fn alter_error_response(
    req: &AlterPartitionReassignmentsRequest,
    error: ErrorCode,
    message: Option<String>,
) -> AlterPartitionReassignmentsResponse {
    let responses = req
        .topics
        .iter()
        .map(|t| {
            ReassignableTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            ReassignablePartitionResponse::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code(error))
                                .with_error_message(message.clone().map(str_bytes))
                        })
                        .collect(),
                )
        })
        .collect();
    // Like Kafka's `getErrorResponse`, the answer keeps `allow_replication_factor_change` at
    // its default (true) whatever the request asked.
    AlterPartitionReassignmentsResponse::default()
        .with_error_code(code(error))
        .with_error_message(message.map(str_bytes))
        .with_responses(responses)
}

/// Kafka's answer to a ListPartitionReassignments refused as a whole.
pub fn list_error_response(error: ErrorCode) -> ListPartitionReassignmentsResponse {
    ListPartitionReassignmentsResponse::default().with_error_code(code(error))
}

/// Starts, replaces or cancels the reassignments on the active controller; returns the
/// response and the metadata offset the changes committed at.
pub async fn alter(
    state: Arc<BrokerState>,
    req: AlterPartitionReassignmentsRequest,
    version: i16,
) -> (AlterPartitionReassignmentsResponse, i64) {
    // Kafka answers a request naming no topic at once, with a default response.
    if req.topics.is_empty() {
        return (AlterPartitionReassignmentsResponse::default(), -1);
    }
    // With its timeout already over the request reaches Kafka's controller expired.
    if req.timeout_ms <= 0 {
        let e = ErrorCode::RequestTimedOut;
        return (alter_error_response(&req, e, None), -1);
    }
    let allow_rf_change = version < 1 || req.allow_replication_factor_change;
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let parts = t
                .partitions
                .iter()
                .map(|p| {
                    let target = p
                        .replicas
                        .as_ref()
                        .map(|rs| rs.iter().map(|b| b.0).collect());
                    (p.partition_index, target)
                })
                .collect();
            (t.name.0.to_string(), parts)
        })
        .collect();
    let answer = state
        .controller
        .submit(Request::AlterPartitionReassignments {
            topics,
            allow_replication_factor_change: allow_rf_change,
        })
        .await;
    let results = match answer.result {
        Ok(Reply::AlterPartitionReassignments(r)) => r,
        Ok(other) => {
            tracing::error!(
                ?other,
                "unexpected controller reply to AlterPartitionReassignments"
            );
            let e = ErrorCode::UnknownServerError;
            return (alter_error_response(&req, e, None), answer.offset);
        }
        Err(e) => {
            let message = e.wire_message().map(str::to_string);
            return (alter_error_response(&req, e.code, message), answer.offset);
        }
    };
    let responses = results
        .into_iter()
        .map(|(topic, parts)| {
            ReassignableTopicResponse::default()
                .with_name(TopicName(str_bytes(topic)))
                .with_partitions(parts.into_iter().map(partition_response).collect())
        })
        .collect();
    let resp = AlterPartitionReassignmentsResponse::default()
        .with_error_message(None)
        .with_allow_replication_factor_change(req.allow_replication_factor_change)
        .with_responses(responses);
    (resp, answer.offset)
}

fn partition_response(
    (id, r): (i32, Result<(), ControllerError>),
) -> ReassignablePartitionResponse {
    let p = ReassignablePartitionResponse::default().with_partition_index(id);
    match r {
        // Kafka answers a null message on success (ApiError.NONE has none).
        Ok(()) => p.with_error_message(None),
        // The message as Kafka's `ApiError` carries it (none for NO_REASSIGNMENT_IN_PROGRESS).
        Err(e) => p
            .with_error_code(code(e.code))
            .with_error_message(e.wire_message().map(str_bytes)),
    }
}

/// The reassignments in progress, from this broker's committed image, as Kafka's
/// `listPartitionReassignments` lists them: every one for a null topic list, else those of
/// the named partitions (unknown topics and partitions not being reassigned are left out).
pub fn list(
    state: &BrokerState,
    req: &ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let image = state.image();
    let ongoing = |index: i32, p: &metadata::PartitionRegistration| {
        controller::reassignment::in_progress(p).then(|| {
            let ids = |v: &[i32]| v.iter().map(|&b| BrokerId(b)).collect::<Vec<_>>();
            OngoingPartitionReassignment::default()
                .with_partition_index(index)
                .with_replicas(ids(&p.replicas))
                .with_adding_replicas(ids(&p.adding_replicas))
                .with_removing_replicas(ids(&p.removing_replicas))
        })
    };
    let topic_entry = |name: &str, partitions: Vec<OngoingPartitionReassignment>| {
        (!partitions.is_empty()).then(|| {
            OngoingTopicReassignment::default()
                .with_name(TopicName(str_bytes(name.to_string())))
                .with_partitions(partitions)
        })
    };
    let topics = match &req.topics {
        None => image
            .topics
            .values()
            .filter_map(|t| {
                let parts = t
                    .partitions
                    .iter()
                    .enumerate()
                    .filter_map(|(i, p)| ongoing(i as i32, p))
                    .collect();
                topic_entry(&t.name, parts)
            })
            .collect(),
        Some(wanted) => wanted
            .iter()
            .filter_map(|w| {
                let t = image.topic(w.name.0.as_str())?;
                let parts = w
                    .partition_indexes
                    .iter()
                    .filter_map(|&i| {
                        let p = usize::try_from(i).ok().and_then(|u| t.partitions.get(u))?;
                        ongoing(i, p)
                    })
                    .collect();
                topic_entry(&t.name, parts)
            })
            .collect(),
    };
    ListPartitionReassignmentsResponse::default()
        .with_error_message(None)
        .with_topics(topics)
}
