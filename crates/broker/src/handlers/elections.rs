//! ElectLeaders (API 43): PREFERRED and UNCLEAN leader elections asked by an administrator
//! (`kafka-leader-election`, `Admin.electLeaders`), decided by the active controller
//! (`controller::election`), as Kafka's `ReplicationControlManager.electLeaders` does.
//! Authorization (ALTER on the cluster) is the request-level gate's (`authz::gate`).

use super::{code, str_bytes};
use crate::state::BrokerState;
use controller::{ControllerError, Election, Reply, Request};
use model::ErrorCode;
use protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};
use std::sync::Arc;

/// Kafka's response to a request refused as a whole (`ElectLeadersRequest.getErrorResponse`):
/// the error at the top (v1+) and on every partition named.
pub fn error_response(
    req: &ElectLeadersRequest,
    error: ErrorCode,
    version: i16,
) -> ElectLeadersResponse {
    error_response_with(req, error, None, version)
}

/// [`error_response`] with a message on every partition (Kafka's `getErrorResponse` puts
/// its `ApiError`'s message there).
fn error_response_with(
    req: &ElectLeadersRequest,
    error: ErrorCode,
    message: Option<&str>,
    version: i16,
) -> ElectLeadersResponse {
    let results = req
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| {
            ReplicaElectionResult::default()
                .with_topic(t.topic.clone())
                .with_partition_result(
                    t.partitions
                        .iter()
                        .map(|&p| {
                            PartitionResult::default()
                                .with_partition_id(p)
                                .with_error_code(code(error))
                                .with_error_message(message.map(str_bytes))
                        })
                        .collect(),
                )
        })
        .collect();
    // v0 has no top-level error: the partitions carry it (a v0 answer with one would not
    // encode, and the connection would close).
    let top = if version >= 1 { code(error) } else { 0 };
    ElectLeadersResponse::default()
        .with_error_code(top)
        .with_replica_election_results(results)
}

/// Runs the elections on the active controller; returns the response and the metadata offset
/// the changes committed at.
pub async fn elect_leaders(
    state: Arc<BrokerState>,
    req: ElectLeadersRequest,
    version: i16,
) -> (ElectLeadersResponse, i64) {
    // v0 has no election type: PREFERRED. Kafka refuses an unknown type as a whole.
    let election = match (version, req.election_type) {
        (0, _) | (_, 0) => Election::Preferred,
        (_, 1) => Election::Unclean,
        (_, t) => {
            let message = format!("Unknown election type {t}");
            let e = ErrorCode::InvalidRequest;
            return (error_response_with(&req, e, Some(&message), version), -1);
        }
    };
    if req.timeout_ms <= 0 {
        return (
            error_response(&req, ErrorCode::RequestTimedOut, version),
            -1,
        );
    }
    let partitions = req.topic_partitions.as_ref().map(|topics| {
        topics
            .iter()
            .map(|t| (t.topic.0.to_string(), t.partitions.clone()))
            .collect()
    });
    let answer = state
        .controller
        .submit(Request::ElectLeaders {
            election,
            partitions,
        })
        .await;
    let results = match answer.result {
        Ok(Reply::ElectLeaders(r)) => r,
        Ok(other) => {
            tracing::error!(?other, "unexpected controller reply to ElectLeaders");
            return (
                error_response(&req, ErrorCode::UnknownServerError, version),
                answer.offset,
            );
        }
        Err(e) => return (error_response(&req, e.code, version), answer.offset),
    };
    let results = results
        .into_iter()
        .map(|(topic, parts)| {
            ReplicaElectionResult::default()
                .with_topic(protocol::messages::TopicName(str_bytes(topic)))
                .with_partition_result(parts.into_iter().map(partition_result).collect())
        })
        .collect();
    (
        ElectLeadersResponse::default().with_replica_election_results(results),
        answer.offset,
    )
}

fn partition_result((id, r): (i32, Result<(), ControllerError>)) -> PartitionResult {
    let p = PartitionResult::default().with_partition_id(id);
    match r {
        // Kafka answers a null message on success (ApiError.NONE has none).
        Ok(()) => p.with_error_message(None),
        // An error's message, else its default text (Kafka's `new ApiError(error)` carries
        // it, e.g. for ELECTION_NOT_NEEDED).
        Err(e) => p
            .with_error_code(code(e.code))
            .with_error_message(Some(str_bytes(e.code.message_or_default(&e.message)))),
    }
}
