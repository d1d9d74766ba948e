//! The partition-leader side of transactions: WriteTxnMarkers (a coordinator asks this
//! broker to write COMMIT/ABORT markers) and DescribeProducers (the producers a partition
//! knows, as `kafka-transactions.sh describe-producers` shows them).

use super::{str_bytes, Ctx, Reply};
use crate::state::BrokerState;
use crate::txn_markers::{marker_durable, write_marker, MARKER_WRITE_TIMEOUT_MS};
use model::ErrorCode;
use protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, ProducerId, WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
};
use protocol::ResponseKind;
use record::EndTxnMarker;
use std::sync::Arc;

/// WriteTxnMarkers (v1): appends each marker to each partition this broker leads, answering
/// once they are committed (the HW passed them: acks=-1, as Kafka appends markers). Per partition: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
/// or the log's refusal (INVALID_PRODUCER_EPOCH for an older producer epoch,
/// TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch).
pub fn write_txn_markers(state: &Arc<BrokerState>, ctx: Ctx, req: WriteTxnMarkersRequest) -> Reply {
    let mut results = Vec::with_capacity(req.markers.len());
    // (marker index, topic index, partition index) -> durability wait.
    let mut waits = Vec::new();
    for (mi, m) in req.markers.iter().enumerate() {
        let marker = EndTxnMarker {
            commit: m.transaction_result,
            coordinator_epoch: m.coordinator_epoch,
        };
        let mut topics = Vec::with_capacity(m.topics.len());
        for (ti, t) in m.topics.iter().enumerate() {
            let name = t.name.0.to_string();
            let mut partitions = Vec::with_capacity(t.partition_indexes.len());
            for (pi, &p) in t.partition_indexes.iter().enumerate() {
                let e = match state.leader_partition(&name, p) {
                    Err(e) => e,
                    Ok(partition) => {
                        match write_marker(
                            state,
                            &partition,
                            m.producer_id.0,
                            m.producer_epoch,
                            marker,
                        ) {
                            Ok(info) => {
                                waits.push((
                                    mi,
                                    ti,
                                    pi,
                                    partition,
                                    info.last_offset,
                                    name.clone(),
                                    p,
                                ));
                                ErrorCode::None
                            }
                            Err(e) => {
                                tracing::debug!(topic = %name, partition = p, error = %e, "transaction marker refused");
                                e.error_code()
                            }
                        }
                    }
                };
                partitions.push(
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(p)
                        .with_error_code(e.code()),
                );
            }
            topics.push(
                WritableTxnMarkerTopicResult::default()
                    .with_name(t.name.clone())
                    .with_partitions(partitions),
            );
        }
        results.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(m.producer_id)
                .with_topics(topics),
        );
    }
    let commits: Vec<bool> = req.markers.iter().map(|m| m.transaction_result).collect();
    let pids: Vec<i64> = req.markers.iter().map(|m| m.producer_id.0).collect();
    let state = state.clone();
    let waits: Vec<_> = waits
        .into_iter()
        .map(|(mi, ti, pi, partition, offset, topic, p)| {
            let rx = partition.wait_for_ack(offset + 1, MARKER_WRITE_TIMEOUT_MS);
            (mi, ti, pi, rx, topic, p)
        })
        .collect();
    Reply::Later(Box::pin(async move {
        let mut results = results;
        for (mi, ti, pi, rx, topic, p) in waits {
            let e = match rx.await.unwrap_or(ErrorCode::NotLeaderOrFollower) {
                ErrorCode::None => {
                    marker_durable(&state, &topic, p, pids[mi], commits[mi]);
                    ErrorCode::None
                }
                e => e,
            };
            if let Some(r) = results
                .get_mut(mi)
                .and_then(|m| m.topics.get_mut(ti))
                .and_then(|t| t.partitions.get_mut(pi))
            {
                r.error_code = e.code();
            }
        }
        ctx.encode(ResponseKind::WriteTxnMarkers(
            WriteTxnMarkersResponse::default().with_markers(results),
        ))
    }))
}

/// DescribeProducers (v0): every producer a partition's state knows.
pub fn describe_producers(
    state: &Arc<BrokerState>,
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let image = state.image();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.to_string();
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&p| {
                    let r = PartitionResponse::default().with_partition_index(p);
                    let topic = image.topic(&name);
                    let known =
                        topic.is_some_and(|ti| p >= 0 && (p as usize) < ti.partitions.len());
                    let unknown = ErrorCode::UnknownTopicOrPartition;
                    match state.replicas.get(&name, p) {
                        // As Kafka: a topic its metadata does not know gets the error's
                        // default text; a missing partition of a known one (from its replica
                        // manager) none.
                        _ if topic.is_none() => r
                            .with_error_code(unknown.code())
                            .with_error_message(Some(str_bytes(unknown.default_message()))),
                        _ if !known => r.with_error_code(unknown.code()),
                        None => r.with_error_code(ErrorCode::NotLeaderOrFollower.code()),
                        Some(partition) => r.with_active_producers(
                            partition
                                .log
                                .producers()
                                .into_iter()
                                .map(|s| {
                                    ProducerState::default()
                                        .with_producer_id(ProducerId(s.producer_id))
                                        .with_producer_epoch(i32::from(s.producer_epoch))
                                        .with_last_sequence(s.last_sequence)
                                        .with_last_timestamp(s.last_timestamp)
                                        .with_coordinator_epoch(s.coordinator_epoch)
                                        .with_current_txn_start_offset(s.current_txn_start_offset)
                                })
                                .collect(),
                        ),
                    }
                })
                .collect();
            TopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}
