//! Fetch: whole batches from each partition up to the high watermark (or LSO), honouring
//! max_bytes / partition_max_bytes with KIP-74's "at least one batch", and long-polling up
//! to max_wait_ms until min_bytes are available.

use super::{code, from_uuid, Ctx, Reply};
use crate::metrics::TopicStats;
use crate::quotas::ReplicationSide;
use crate::state::BrokerState;
use model::ErrorCode;
use protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use protocol::messages::{FetchRequest, FetchResponse, ProducerId, TopicName};
use std::sync::Arc;
use std::time::Duration;

struct PartitionPlan {
    index: i32,
    fetch_offset: i64,
    max_bytes: i32,
    /// KIP-320: -1 = not checked.
    current_leader_epoch: i32,
    /// Fetch v12+: the epoch of the last batch the sender has; -1 = not checked.
    last_fetched_epoch: i32,
}

struct TopicPlan {
    name: TopicName,
    id: uuid::Uuid,
    partitions: Vec<PartitionPlan>,
    /// The requester may not READ the topic: TOPIC_AUTHORIZATION_FAILED for its partitions.
    denied: bool,
}

struct Plan {
    version: i16,
    /// A follower's fetch (its broker id): reads up to the log end and reports its progress.
    replica_id: Option<i32>,
    topics: Vec<TopicPlan>,
    max_bytes: usize,
    min_bytes: usize,
    read_committed: bool,
}

pub fn fetch(state: &Arc<BrokerState>, ctx: Ctx, req: FetchRequest) -> Reply {
    // Moldau keeps no incremental fetch sessions (KIP-227 lets a broker decline them: it
    // answers session id 0 and clients send full requests). A request naming a session is
    // answered as Kafka answers an unknown one.
    // Epoch 0 opens a session and -1 closes one: both are full fetches. A later epoch needs
    // a session this broker would have created.
    if ctx.version >= 7 && req.session_epoch > 0 {
        let resp =
            FetchResponse::default().with_error_code(code(ErrorCode::FetchSessionIdNotFound));
        return match encode(state, ctx, resp) {
            Some(chunks) => Reply::Chunks(chunks),
            None => Reply::Close,
        };
    }
    let replica_id = if ctx.version >= 15 {
        req.replica_state.replica_id.0
    } else {
        req.replica_id.0
    };
    let image = state.image();
    let may_read = |t: &protocol::messages::fetch_request::FetchTopic| {
        let name = if ctx.version >= 13 {
            match image.topic_by_id(from_uuid(t.topic_id)) {
                Some(t) => t.name.to_string(),
                // Unknown ids are answered UNKNOWN_TOPIC_ID.
                None => return true,
            }
        } else {
            t.topic.0.to_string()
        };
        ctx.access
            .allows_topic(model::acl::AclOperation::Read, &name)
    };
    let mut plan = Plan {
        version: ctx.version,
        replica_id: (replica_id >= 0).then_some(replica_id),
        topics: req
            .topics
            .into_iter()
            .map(|t| TopicPlan {
                denied: !may_read(&t),
                name: t.topic,
                id: t.topic_id,
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| PartitionPlan {
                        index: p.partition,
                        fetch_offset: p.fetch_offset,
                        max_bytes: p.partition_max_bytes,
                        current_leader_epoch: p.current_leader_epoch,
                        last_fetched_epoch: p.last_fetched_epoch,
                    })
                    .collect(),
            })
            .collect(),
        // A response never exceeds the broker's `fetch.max.bytes`, whatever the client asks
        // (KIP-74's first batch aside), so one fetch can't pin unbounded memory.
        // A consumer's response is also bounded by what its fetch quota could ever let
        // through at once (Kafka's `maxValueInQuotaWindow`), or it would be throttled forever.
        max_bytes: if req.max_bytes <= 0 {
            state.config.fetch_max_bytes
        } else {
            (req.max_bytes as usize).min(state.config.fetch_max_bytes)
        }
        .min(
            ctx.quota
                .as_ref()
                .filter(|_| replica_id < 0)
                .and_then(|q| state.quotas.max_fetch_bytes(&q.user, &q.client_id))
                .unwrap_or(usize::MAX),
        ),
        min_bytes: req.min_bytes.max(0) as usize,
        read_committed: req.isolation_level == 1,
    };
    plan.min_bytes = plan.min_bytes.min(plan.max_bytes);
    let mut version_rx = state.data_version.subscribe();
    version_rx.borrow_and_update();
    let (resp, bytes, errors, sent) = read(state, &plan);
    if req.max_wait_ms <= 0 || plan.min_bytes == 0 || bytes >= plan.min_bytes || errors {
        let resp = throttle(state, &ctx, &plan, resp, &sent);
        return match encode(state, ctx, resp) {
            Some(chunks) => Reply::Chunks(chunks),
            None => Reply::Later(Box::pin(async { None })),
        };
    }
    let state = state.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(req.max_wait_ms as u64);
    let waiting = crate::metrics::METRICS.delayed(crate::metrics::Delayed::Fetch);
    Reply::LaterChunks(Box::pin(async move {
        let _waiting = waiting;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => break,
                _ = state.cancel.cancelled() => break,
                changed = version_rx.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    version_rx.borrow_and_update();
                    // Any append anywhere wakes every waiting fetch; re-reading is only worth
                    // it when one of this fetch's partitions has data past its offset.
                    if !has_new_data(&state, &plan) {
                        continue;
                    }
                    let (_, bytes, errors, _) = read(&state, &plan);
                    if bytes >= plan.min_bytes.max(1) || errors {
                        break;
                    }
                }
            }
        }
        let (resp, _, _, sent) = read(&state, &plan);
        let resp = throttle(&state, &ctx, &plan, resp, &sent);
        encode(&state, ctx, resp)
    }))
}

/// A consumer's fetch against its consumer byte rate, as Kafka's `handleFetchRequest`: the
/// response's record bytes are recorded; when that puts the client over its quota, the
/// answer is an empty response carrying the throttle time (the bytes are taken back), and
/// the connection is muted for that long (KIP-219). Counts what is sent.
fn throttle(
    state: &BrokerState,
    ctx: &Ctx,
    plan: &Plan,
    mut resp: FetchResponse,
    sent: &Sent,
) -> FetchResponse {
    let Some(q) = ctx.quota.as_ref().filter(|_| plan.replica_id.is_none()) else {
        count_sent(state, sent);
        return resp;
    };
    let kind = auth::quota::QuotaKind::Fetch;
    let mut fetch_throttle = 0;
    if state.quotas.enabled(kind) {
        let size: usize = resp
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
            .sum();
        fetch_throttle = state
            .quotas
            .record(kind, &q.user, &q.client_id, size as f64);
        if fetch_throttle > 0 {
            state
                .quotas
                .unrecord(kind, &q.user, &q.client_id, size as f64);
            resp = FetchResponse::default().with_session_id(resp.session_id);
        }
    }
    if fetch_throttle == 0 {
        count_sent(state, sent);
    }
    let throttle = fetch_throttle.max(q.throttle_ms);
    q.conn.mute_for(fetch_throttle);
    resp.throttle_time_ms = throttle.min(i64::from(i32::MAX)) as i32;
    resp
}

/// The response frame in chunks: record bytes from the log are chunks of their own.
fn encode(state: &BrokerState, ctx: Ctx, mut resp: FetchResponse) -> Option<Vec<bytes::Bytes>> {
    crate::metrics::count_fetch_errors(ctx.api, &resp);
    super::leader_hints::fetch(state, &ctx.listener, ctx.version, &mut resp);
    match protocol::encode_fetch_response(ctx.version, ctx.correlation_id, resp) {
        Ok(chunks) => Some(chunks),
        Err(e) => {
            tracing::error!(error = %e, "response encoding failed; closing connection");
            None
        }
    }
}

/// Whether a requested partition's visible end moved past the fetch offset (or the partition
/// changed under the fetch), i.e. whether a new read could return something.
fn has_new_data(state: &BrokerState, plan: &Plan) -> bool {
    let image = state.image();
    plan.topics.iter().any(|tp| {
        let name = if plan.version >= 13 {
            image.topic_by_id(from_uuid(tp.id)).map(|t| t.name.clone())
        } else {
            Some(tp.name.0.to_string().into())
        };
        let Some(name) = name else { return true };
        tp.partitions
            .iter()
            .any(|pp| match state.leader_partition(&name, pp.index) {
                Ok(p) if plan.replica_id.is_some() => {
                    p.log.log_end_offset() > pp.fetch_offset
                        || p.log.log_start_offset() > pp.fetch_offset
                }
                Ok(p) => {
                    let end = if plan.read_committed {
                        p.last_stable_offset()
                    } else {
                        p.high_watermark()
                    };
                    end > pp.fetch_offset || p.log.log_start_offset() > pp.fetch_offset
                }
                Err(_) => true,
            })
    })
}

/// Bytes and records (offsets spanned) read from each partition, to count once sent, and
/// the record bytes of leader-throttled replicas (KIP-73) a follower's fetch carries.
#[derive(Default)]
struct Sent {
    partitions: Vec<(Arc<TopicStats>, usize, i64)>,
    leader_throttled_bytes: usize,
}

fn count_sent(state: &BrokerState, sent: &Sent) {
    for (stats, bytes, records) in &sent.partitions {
        stats.fetched(*bytes, *records);
    }
    // Kafka's `sizeOfThrottledPartitions`: every throttled partition counts, in-sync
    // followers' too, so the throttle bounds all replication traffic of those replicas.
    state
        .replication_quotas
        .record(ReplicationSide::Leader, sent.leader_throttled_bytes);
}

/// One pass over the requested partitions: the response, its record bytes, whether any
/// partition had an error (errors are answered at once rather than long-polled), and what
/// was read per partition.
fn read(state: &BrokerState, plan: &Plan) -> (FetchResponse, usize, bool, Sent) {
    let mut sent = Sent::default();
    let image = state.image();
    let mut remaining = plan.max_bytes;
    let mut total = 0usize;
    let mut errors = false;
    let mut topics = Vec::with_capacity(plan.topics.len());
    for tp in &plan.topics {
        let name: Option<String> = if plan.version >= 13 {
            image
                .topic_by_id(from_uuid(tp.id))
                .map(|t| t.name.to_string())
        } else {
            Some(tp.name.0.to_string())
        };
        let mut partitions = Vec::with_capacity(tp.partitions.len());
        for pp in &tp.partitions {
            let mut pd = PartitionData::default()
                .with_partition_index(pp.index)
                .with_high_watermark(-1);
            let partition = match name.as_deref() {
                _ if tp.denied => Err(ErrorCode::TopicAuthorizationFailed),
                None => Err(ErrorCode::UnknownTopicId),
                // The replica decides about leadership itself when it checks epochs.
                Some(n) if plan.replica_id.is_some() || pp.current_leader_epoch >= 0 => {
                    state.replicas.lookup(n, pp.index)
                }
                Some(n) => state.leader_partition(n, pp.index),
            };
            // Errors of a partition this broker hosts carry null aborted transactions (Kafka's
            // replica manager answers them); unknown topics and partitions an empty list.
            let replica_error = |e: ErrorCode| {
                PartitionData::default()
                    .with_partition_index(pp.index)
                    .with_high_watermark(-1)
                    .with_error_code(code(e))
                    .with_aborted_transactions(None)
            };
            // The leader epoch is checked before the claimed replica. A fetch from a broker
            // that is not a replica gets UNKNOWN_LEADER_EPOCH when it names an epoch and
            // NOT_LEADER_OR_FOLLOWER when it does not (Kafka 4.4's answers).
            let replica_state = match (&partition, plan.replica_id) {
                (Ok(p), Some(_)) => p.partition_state(),
                _ => None,
            };
            let checked = partition.as_ref().ok().and_then(|p| {
                let not_a_replica = plan.replica_id.is_some_and(|id| {
                    id == state.node_id
                        || !replica_state
                            .as_ref()
                            .is_some_and(|s| s.replicas.contains(&id))
                });
                let from_replica = not_a_replica.then_some(if pp.current_leader_epoch >= 0 {
                    ErrorCode::UnknownLeaderEpoch
                } else {
                    ErrorCode::NotLeaderOrFollower
                });
                super::offsets::check_leader_epoch(pp.current_leader_epoch, p.leader_epoch())
                    .filter(|_| plan.version >= 9)
                    .or(from_replica)
            });
            if let Some(e) = checked {
                errors = true;
                partitions.push(replica_error(e));
                continue;
            }
            let partition = match partition {
                Ok(p) => p,
                Err(e) => {
                    errors = true;
                    partitions.push(pd.with_error_code(code(e)));
                    continue;
                }
            };
            // Followers' fetches, and fetches naming epochs (KIP-320), go through the
            // replica: epoch fencing, divergence, and a follower's progress.
            let mut upper_for_replica = None;
            let mut hw_for_replica = None;
            if plan.replica_id.is_some()
                || pp.current_leader_epoch >= 0
                || pp.last_fetched_epoch >= 0
            {
                let epoch = |e: i32| (e >= 0).then_some(e);
                let answer = partition.answer_fetch(replication::FetchRequest {
                    replica_id: plan.replica_id,
                    fetch_offset: pp.fetch_offset,
                    current_leader_epoch: epoch(pp.current_leader_epoch),
                    last_fetched_epoch: if plan.version >= 12 {
                        epoch(pp.last_fetched_epoch)
                    } else {
                        None
                    },
                    // Kafka's isReplicaIsrEligible: a fenced broker, or one in controlled
                    // shutdown, still fetches for a while but must not be proposed for the
                    // ISR (the controller refuses it). Not from `image`: a new leadership
                    // is applied before the image that brought it is published, so a fetch
                    // in between would judge the brokers by the older image.
                    isr_eligible: plan.replica_id.is_some_and(|r| state.isr_eligible(r)),
                });
                if answer.error != ErrorCode::None {
                    errors = true;
                    pd = pd
                        .with_error_code(code(answer.error))
                        .with_high_watermark(answer.high_watermark);
                    if plan.version >= 5 {
                        pd = pd.with_log_start_offset(answer.log_start_offset);
                    }
                    partitions.push(pd);
                    continue;
                }
                if let Some(d) = answer.diverging_epoch {
                    errors = true;
                    pd = pd
                        .with_high_watermark(answer.high_watermark)
                        .with_diverging_epoch(
                            protocol::messages::fetch_response::EpochEndOffset::default()
                                .with_epoch(d.epoch)
                                .with_end_offset(d.end_offset),
                        );
                    if plan.version >= 5 {
                        pd = pd.with_log_start_offset(answer.log_start_offset);
                    }
                    partitions.push(pd);
                    continue;
                }
                if plan.replica_id.is_some() {
                    upper_for_replica = answer.read.map(|r| r.upper_bound);
                    // A follower is told the replica's answer: never past this leader's
                    // durable end (a replica set that grew from one, before its fsync).
                    hw_for_replica = Some(answer.high_watermark);
                }
            }
            let hw = hw_for_replica.unwrap_or_else(|| partition.high_watermark());
            let lso = partition.last_stable_offset();
            let log_start = partition.log.log_start_offset();
            pd = pd.with_high_watermark(hw);
            if plan.version >= 4 {
                pd = pd.with_last_stable_offset(lso);
            }
            if plan.version >= 5 {
                pd = pd.with_log_start_offset(log_start);
            }
            let upper = match upper_for_replica {
                Some(leo) => leo,
                None if plan.read_committed => lso,
                None => hw,
            };
            // KIP-73, Kafka's `shouldLeaderThrottle`: a follower of a throttled replica that
            // is not in the (committed) ISR gets no records while this broker's leader
            // throttle is exceeded (offsets and HW as usual; it asks again). In-sync
            // followers are never held back, so a throttle cannot shrink the ISR.
            let leader_throttled = plan.replica_id.is_some() && partition.leader_throttled();
            let follower_in_sync = plan
                .replica_id
                .is_some_and(|id| replica_state.as_ref().is_some_and(|s| s.isr.contains(&id)));
            if leader_throttled
                && !follower_in_sync
                && state
                    .replication_quotas
                    .is_exceeded(ReplicationSide::Leader)
            {
                partitions.push(
                    pd.with_records(Some(bytes::Bytes::new()))
                        .with_aborted_transactions(None),
                );
                continue;
            }
            let budget = (pp.max_bytes.max(0) as usize).min(remaining);
            match partition
                .log
                .read(pp.fetch_offset, budget, upper, total == 0)
            {
                Ok(r) => {
                    let n = r.data.len();
                    if n > 0 {
                        sent.partitions.push((
                            partition.stats.clone(),
                            n,
                            r.next_offset - r.first_offset,
                        ));
                    }
                    if leader_throttled {
                        sent.leader_throttled_bytes += n;
                    }
                    total += n;
                    remaining = remaining.saturating_sub(n);
                    if plan.read_committed && plan.version >= 4 {
                        // The aborted transactions overlapping what was read, so the client
                        // can drop their records (it skips control batches itself).
                        let aborted = partition
                            .log
                            .aborted_transactions(pp.fetch_offset, r.next_offset)
                            .into_iter()
                            .map(|a| {
                                AbortedTransaction::default()
                                    .with_producer_id(ProducerId(a.producer_id))
                                    .with_first_offset(a.first_offset)
                            })
                            .collect();
                        pd = pd.with_aborted_transactions(Some(aborted));
                    } else {
                        // Kafka sends null: read_uncommitted clients have nothing to drop.
                        pd = pd.with_aborted_transactions(None);
                    }
                    pd = pd.with_records(Some(r.data));
                    if !plan.read_committed {
                        // Kafka sends null: read_uncommitted clients have nothing to drop.
                        pd = pd.with_aborted_transactions(None);
                    }
                }
                Err(e) => {
                    // An error answer carries no offsets, as Kafka's does.
                    errors = true;
                    pd = replica_error(e.error_code());
                }
            }
            partitions.push(pd);
        }
        let mut t = FetchableTopicResponse::default().with_partitions(partitions);
        if plan.version >= 13 {
            t = t.with_topic_id(tp.id);
        } else {
            t = t.with_topic(tp.name.clone());
        }
        topics.push(t);
    }
    (
        FetchResponse::default().with_responses(merge_topics(topics)),
        total,
        errors,
        sent,
    )
}

/// Kafka builds a Fetch answer from a map of partitions: a topic named twice is answered
/// once, a topic without partitions not at all, and a partition asked twice once (the last).
fn merge_topics(topics: Vec<FetchableTopicResponse>) -> Vec<FetchableTopicResponse> {
    let mut out: Vec<FetchableTopicResponse> = Vec::with_capacity(topics.len());
    for t in topics {
        let slot = out
            .iter_mut()
            .position(|o| o.topic == t.topic && o.topic_id == t.topic_id);
        let target = match slot {
            Some(i) => &mut out[i],
            None => {
                out.push(t.clone().with_partitions(Vec::new()));
                out.last_mut().expect("just pushed")
            }
        };
        for p in t.partitions {
            target
                .partitions
                .retain(|q| q.partition_index != p.partition_index);
            target.partitions.push(p);
        }
    }
    out.retain(|t| !t.partitions.is_empty());
    out
}
