//! ListOffsets (earliest, latest, by timestamp, max timestamp), DeleteRecords, and
//! OffsetForLeaderEpoch (where an epoch of the leader's log ends: followers and KIP-320
//! consumers truncate or validate by it).

use super::code;
use crate::authz::Access;
use crate::state::BrokerState;
use model::acl::AclOperation;
use model::ErrorCode;
use protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, ListOffsetsRequest, ListOffsetsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};
use std::sync::Arc;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;
const EARLIEST_PENDING_UPLOAD: i64 = -6;

/// Kafka's check of a request's current leader epoch against the partition's: an older epoch
/// is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH, -1 skips the check.
pub fn check_leader_epoch(requested: i32, current: i32) -> Option<ErrorCode> {
    match requested {
        -1 => None,
        e if e < current => Some(ErrorCode::FencedLeaderEpoch),
        e if e > current => Some(ErrorCode::UnknownLeaderEpoch),
        _ => None,
    }
}

pub fn list_offsets(
    state: &Arc<BrokerState>,
    access: &Access,
    req: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let read_committed = req.isolation_level == 1;
    let mut seen = std::collections::HashSet::new();
    let topics: Vec<ListOffsetsTopicResponse> = req
        .topics
        .into_iter()
        .map(|t| {
            // A partition asked for twice gets one INVALID_REQUEST entry, as in Kafka.
            let mut duplicates = std::collections::HashSet::new();
            for p in &t.partitions {
                if !seen.insert((t.name.0.clone(), p.partition_index)) {
                    duplicates.insert(p.partition_index);
                }
            }
            let mut answered = std::collections::HashSet::new();
            let denied = !access.allows_topic(AclOperation::Describe, &t.name.0);
            let partitions = t
                .partitions
                .into_iter()
                .filter(|p| answered.insert(p.partition_index))
                .map(|p| {
                    let mut r = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1);
                    if denied {
                        return r.with_error_code(code(ErrorCode::TopicAuthorizationFailed));
                    }
                    if duplicates.contains(&p.partition_index) {
                        return r.with_error_code(code(ErrorCode::InvalidRequest));
                    }
                    // Specs newer than the request's version (MAX_TIMESTAMP needs v7+,
                    // EARLIEST_LOCAL v8+, LATEST_TIERED v9+, EARLIEST_PENDING_UPLOAD v11+).
                    if (p.timestamp == MAX_TIMESTAMP && version < 7)
                        || (p.timestamp == EARLIEST_LOCAL && version < 8)
                        || (p.timestamp == LATEST_TIERED && version < 9)
                        || p.timestamp == EARLIEST_PENDING_UPLOAD
                    {
                        return r.with_error_code(code(ErrorCode::UnsupportedVersion));
                    }
                    // A negative spec Kafka does not know: it answers as for a spec newer
                    // than the request's version, before it looks the partition up (an
                    // unknown topic or partition gets UNSUPPORTED_VERSION too).
                    if p.timestamp < EARLIEST_PENDING_UPLOAD {
                        return r.with_error_code(code(ErrorCode::UnsupportedVersion));
                    }
                    let partition = match state.leader_partition(&t.name.0, p.partition_index) {
                        Ok(p) => p,
                        Err(e) => return r.with_error_code(code(e)),
                    };
                    if version >= 4 {
                        if let Some(e) =
                            check_leader_epoch(p.current_leader_epoch, partition.leader_epoch())
                        {
                            return r.with_error_code(code(e));
                        }
                    }
                    let latest = if read_committed {
                        partition.last_stable_offset()
                    } else {
                        partition.high_watermark()
                    };
                    let found = match p.timestamp {
                        LATEST => Some((latest, -1)),
                        EARLIEST | EARLIEST_LOCAL => Some((partition.log.log_start_offset(), -1)),
                        LATEST_TIERED => Some((-1, -1)),
                        MAX_TIMESTAMP => partition.log.max_timestamp().filter(|(o, _)| *o < latest),
                        ts if ts >= 0 => partition
                            .log
                            .offset_for_timestamp(ts)
                            .filter(|(o, _)| *o < latest),
                        // A negative spec Kafka does not know: it answers as for a spec
                        // newer than the request's version.
                        _ => {
                            return r.with_error_code(code(ErrorCode::UnsupportedVersion));
                        }
                    };
                    match found {
                        // Nothing found: offset, timestamp and leader epoch all -1.
                        Some((offset, ts)) if offset >= 0 => {
                            r = r.with_offset(offset).with_timestamp(ts);
                            if version >= 4 {
                                r = r.with_leader_epoch(partition.leader_epoch());
                            }
                        }
                        _ => {}
                    }
                    r
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    // Kafka groups its answer by topic: a topic named twice is one entry, a topic without
    // partitions none.
    let mut merged: Vec<ListOffsetsTopicResponse> = Vec::new();
    for t in topics {
        match merged.iter_mut().find(|m| m.name == t.name) {
            Some(m) => m.partitions.extend(t.partitions),
            None => merged.push(t),
        }
    }
    merged.retain(|t| !t.partitions.is_empty());
    ListOffsetsResponse::default().with_topics(merged)
}

pub fn delete_records(
    state: &Arc<BrokerState>,
    access: &Access,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    // Kafka reads the request into a map: a topic named twice is answered once, a partition
    // named twice once, with its last offset.
    let mut wanted: Vec<(protocol::messages::TopicName, Vec<(i32, i64)>)> = Vec::new();
    for t in req.topics {
        let slot = match wanted.iter().position(|(n, _)| *n == t.name) {
            Some(i) => i,
            None => {
                wanted.push((t.name.clone(), Vec::new()));
                wanted.len() - 1
            }
        };
        let partitions = &mut wanted[slot].1;
        for p in t.partitions {
            match partitions.iter_mut().find(|(i, _)| *i == p.partition_index) {
                Some(e) => e.1 = p.offset,
                None => partitions.push((p.partition_index, p.offset)),
            }
        }
    }
    let topics = wanted
        .into_iter()
        .map(|(name, partitions)| {
            let denied = !access.allows_topic(AclOperation::Delete, &name.0);
            let partitions = partitions
                .into_iter()
                .map(|(index, wanted_offset)| {
                    let r = DeleteRecordsPartitionResult::default()
                        .with_partition_index(index)
                        .with_low_watermark(-1);
                    if denied {
                        return r.with_error_code(code(ErrorCode::TopicAuthorizationFailed));
                    }
                    let partition = match state.leader_partition(&name.0, index) {
                        Ok(p) => p,
                        Err(e) => return r.with_error_code(code(e)),
                    };
                    // Records of a compacted (not also deleting) topic are kept by key: Kafka
                    // refuses to delete them.
                    let policy = partition.log.config().cleanup_policy;
                    if policy.compact && !policy.delete {
                        return r.with_error_code(code(ErrorCode::PolicyViolation));
                    }
                    let hw = partition.high_watermark();
                    // -1 means "up to the high watermark".
                    let offset = if wanted_offset == -1 {
                        hw
                    } else {
                        wanted_offset
                    };
                    if offset < 0 || offset > hw {
                        return r.with_error_code(code(ErrorCode::OffsetOutOfRange));
                    }
                    match partition.log.delete_records_before(offset) {
                        Ok(low) => {
                            partition.clamp_high_watermark();
                            r.with_low_watermark(low)
                        }
                        Err(e) => r.with_error_code(code(e.error_code())),
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}

/// OffsetForLeaderEpoch: for each partition, the largest epoch at or below the one asked for
/// and where it ends in this leader's log (Kafka's UNDEFINED answers when the log knows no
/// such epoch). Only the leader answers, with `current_leader_epoch` fencing.
pub fn offset_for_leader_epoch(
    state: &Arc<BrokerState>,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let topics =
        req.topics
            .into_iter()
            .map(|t| {
                let partitions =
                    t.partitions
                        .into_iter()
                        .map(|p| {
                            let r = EpochEndOffset::default()
                                .with_partition(p.partition)
                                .with_leader_epoch(-1)
                                .with_end_offset(-1);
                            let answer = state.replicas.lookup(&t.topic.0, p.partition).and_then(
                                |partition| {
                                    let current = (p.current_leader_epoch >= 0)
                                        .then_some(p.current_leader_epoch);
                                    partition.offset_for_leader_epoch(current, p.leader_epoch)
                                },
                            );
                            match answer {
                                Ok(e) => r.with_leader_epoch(e.epoch).with_end_offset(e.end_offset),
                                Err(e) => r.with_error_code(code(e)),
                            }
                        })
                        .collect();
                OffsetForLeaderTopicResult::default()
                    .with_topic(t.topic)
                    .with_partitions(partitions)
            })
            .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
