//! Produce: validate and append each partition's batches in request order, then answer
//! (acks=1), wait for the group-committed fsync (acks=all), or stay silent (acks=0).
//!
//! A transactional producer's first batch on a partition is verified with its transaction
//! coordinator (KIP-890 part 1). When that coordinator is on another broker, the request's
//! partitions are verified first with one AddPartitionsToTxn (v4+, verify only) and appended
//! afterwards; the connection reads nothing else meanwhile (`Reply::Serial`), so its appends
//! keep the order they were sent in, as Kafka's muted channels do. Transaction version 2
//! (Produce v12+) has the coordinator add the partitions the same way, acks=0 included (its
//! failure closes the connection once known).

use super::{code, from_uuid, Ctx, Reply, Settled};
use crate::replica::Partition;
use crate::state::BrokerState;
use crate::txn_partition::{TxnAppendError, Verification};
use bytes::Bytes;
use model::ErrorCode;
use protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use protocol::messages::{ProduceRequest, ProduceResponse};
use protocol::ResponseKind;
use record::BatchHeader;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use storage::AppendInfo;

/// A partition's append outcome, waiting (for acks=all) on durability of `last_offset`.
struct Appended {
    topic: usize,
    slot: usize,
    partition: Arc<Partition>,
    last_offset: i64,
}

/// How a transactional producer's first batch on a partition is verified.
enum Verifier {
    /// With this broker's transaction coordinator.
    Local,
    /// With a coordinator on another broker, already asked: its answer per partition, and
    /// the guard each partition took before asking (a marker since then voids the answer).
    Remote {
        answers: HashMap<(String, i32), ErrorCode>,
        guards: HashMap<(String, i32), (Arc<Partition>, u64)>,
        how: Verification,
    },
}

impl Verifier {
    /// Whether the coordinator verified the partition or added it (transaction version 2).
    fn how(&self) -> Verification {
        match self {
            Verifier::Local => Verification::Verify,
            Verifier::Remote { how, .. } => *how,
        }
    }

    fn verify(
        &self,
        state: &BrokerState,
        txn_id: &str,
        pid: i64,
        epoch: i16,
        tp: &BTreeSet<(String, i32)>,
    ) -> Result<(), ErrorCode> {
        match self {
            Verifier::Local => state.txns.verify(txn_id, pid, epoch, tp),
            Verifier::Remote {
                answers, guards, ..
            } => {
                for key in tp {
                    match answers.get(key) {
                        Some(ErrorCode::None) => {}
                        Some(e) => return Err(*e),
                        // It had an open transaction when the request came in, closed since.
                        None => return Err(ErrorCode::TransactionAbortable),
                    }
                    if !guards
                        .get(key)
                        .is_some_and(|(p, g)| p.verification_alive(pid, *g))
                    {
                        return Err(ErrorCode::TransactionAbortable);
                    }
                }
                Ok(())
            }
        }
    }
}

pub fn produce(state: &Arc<BrokerState>, ctx: Ctx, mut req: ProduceRequest) -> Reply {
    let corrupt = corrupt_first_batch(&req);
    merge_repeated(&mut req, ctx.version);
    if let Some(why) = corrupt {
        return corrupt_request(ctx, req, why);
    }
    match req.transactional_id.as_ref() {
        Some(txn_id) => {
            let node = state.txns.remote_coordinator(state, txn_id.as_str());
            // Produce v12+ in a transaction is transaction version 2 (KIP-890 part 2): this
            // leader adds the partitions to the transaction itself, as Kafka's
            // AddPartitionsToTxnManager does for that version.
            let add = ctx.version >= 12;
            if node.is_some() || add {
                produce_asked(state, ctx, req, node, add)
            } else {
                produce_with(state, ctx, req, &Verifier::Local)
            }
        }
        _ => produce_with(state, ctx, req, &Verifier::Local),
    }
}

/// Kafka's request handler reads the first batch header of every partition before any
/// other check (`RequestUtils.hasTransactionalRecords`, to authorize a transactional id), and
/// a batch its reader cannot read ([`record::first_batch_unreadable`]) fails the whole
/// request with CORRUPT_MESSAGE, whatever its topics (checked against Kafka 4.4 by
/// crates/conformance). Returns the reader's words for the first such batch.
fn corrupt_first_batch(req: &ProduceRequest) -> Option<String> {
    req.topic_data
        .iter()
        .flat_map(|t| t.partition_data.iter())
        .filter_map(|p| p.records.as_deref())
        .find_map(record::first_batch_unreadable)
}

/// The answer to a request [`corrupt_first_batch`] refuses: every partition CORRUPT_MESSAGE
/// with the reader's message, as Kafka's `ProduceRequest.getErrorResponse` (its `ApiError`
/// from the reader's exception); an acks=0 request gets no answer and its connection is
/// closed.
fn corrupt_request(ctx: Ctx, req: ProduceRequest, why: String) -> Reply {
    if req.acks == 0 {
        return Reply::Close;
    }
    let topics = req
        .topic_data
        .into_iter()
        .map(|td| {
            let partitions = td
                .partition_data
                .iter()
                .map(|pd| {
                    let e = ErrorCode::CorruptMessage;
                    // The message field is v8+.
                    let message = e.api_message(&why).filter(|_| ctx.version >= 8);
                    PartitionProduceResponse::default()
                        .with_index(pd.index)
                        .with_error_code(code(e))
                        .with_error_message(message.map(super::str_bytes))
                        .with_base_offset(-1)
                })
                .collect();
            let t = TopicProduceResponse::default().with_partition_responses(partitions);
            if ctx.version >= 13 {
                t.with_topic_id(td.topic_id)
            } else {
                t.with_name(td.name)
            }
        })
        .collect();
    ctx.ready(ResponseKind::Produce(
        ProduceResponse::default().with_responses(topics),
    ))
}

/// Kafka reads a Produce request into a map keyed by topic partition: a partition named
/// twice (in one topic entry or in two entries of the same topic) keeps only its last
/// records, and the answer names it once, under one entry per topic (by name, or by id from
/// v13).
fn merge_repeated(req: &mut ProduceRequest, version: i16) {
    let key = |td: &protocol::messages::produce_request::TopicProduceData| {
        if version >= 13 {
            td.topic_id.to_string()
        } else {
            td.name.0.to_string()
        }
    };
    let mut topics: HashMap<String, usize> = HashMap::new();
    let mut partitions: HashMap<(usize, i32), usize> = HashMap::new();
    let mut merged: Vec<protocol::messages::produce_request::TopicProduceData> =
        Vec::with_capacity(req.topic_data.len());
    for mut td in std::mem::take(&mut req.topic_data) {
        let parts = std::mem::take(&mut td.partition_data);
        let t = *topics.entry(key(&td)).or_insert_with(|| {
            merged.push(td);
            merged.len() - 1
        });
        for pd in parts {
            let list = &mut merged[t].partition_data;
            match partitions.get(&(t, pd.index)) {
                Some(&i) => list[i] = pd,
                None => {
                    partitions.insert((t, pd.index), list.len());
                    list.push(pd);
                }
            }
        }
    }
    req.topic_data = merged;
}

/// A transactional produce that asks its coordinator first (on broker `node`, or this
/// broker's for None; `add`: add the partitions rather than verify them): every partition
/// whose producer has no open transaction here at this epoch takes a guard, one
/// AddPartitionsToTxn asks the coordinator about all of them, then the request is appended
/// as usual with those answers.
fn produce_asked(
    state: &Arc<BrokerState>,
    ctx: Ctx,
    req: ProduceRequest,
    node: Option<i32>,
    add: bool,
) -> Reply {
    let Some(txn_id) = req.transactional_id.as_ref().map(|t| t.to_string()) else {
        return produce_with(state, ctx, req, &Verifier::Local);
    };
    let image = state.image();
    let how = if add {
        Verification::Add
    } else {
        Verification::Verify
    };
    let mut producer: Option<(i64, i16)> = None;
    let mut guards = HashMap::new();
    for td in &req.topic_data {
        let name = if ctx.version >= 13 {
            image
                .topic_by_id(from_uuid(td.topic_id))
                .map(|t| t.name.to_string())
        } else {
            Some(td.name.0.to_string())
        };
        let Some(name) = name else { continue };
        for pd in &td.partition_data {
            let Some(header) = pd
                .records
                .as_ref()
                .and_then(|r| BatchHeader::parse(r).ok())
                .filter(|h| h.is_transactional() && !h.is_control() && h.producer_id >= 0)
            else {
                continue;
            };
            let Ok(partition) = state.leader_partition(&name, pd.index) else {
                continue;
            };
            producer.get_or_insert((header.producer_id, header.producer_epoch));
            if let Some(g) =
                partition.begin_verification(header.producer_id, header.producer_epoch, how)
            {
                guards.insert((name.clone(), pd.index), (partition, g));
            }
        }
    }
    let Some((pid, epoch)) = producer.filter(|_| !guards.is_empty()) else {
        // Nothing to verify: every partition already has the producer's open transaction.
        return produce_with(state, ctx, req, &Verifier::Local);
    };
    let acks = req.acks;
    let (done_tx, done) = tokio::sync::oneshot::channel();
    let (reply_tx, reply_rx) = tokio::sync::oneshot::channel::<Reply>();
    let state = state.clone();
    tokio::spawn(async move {
        let asked: BTreeSet<(String, i32)> = guards.keys().cloned().collect();
        let answers = state
            .txns
            .ask(&state, node, &txn_id, pid, epoch, &asked, !add)
            .await;
        let verifier = Verifier::Remote {
            answers,
            guards,
            how,
        };
        let reply = produce_with(&state, ctx, req, &verifier);
        if let Verifier::Remote { guards, .. } = verifier {
            for (partition, g) in guards.into_values() {
                partition.end_verification(pid, g);
            }
        }
        let settled = if matches!(reply, Reply::Close) {
            Settled::Close
        } else {
            Settled::ReadOn
        };
        let _ = done_tx.send(settled);
        let _ = reply_tx.send(reply);
    });
    if acks == 0 {
        // No answer either way; a failure closes the connection once known.
        return Reply::Serial {
            reply: Box::new(Reply::None),
            done,
        };
    }
    Reply::Serial {
        reply: Box::new(Reply::Later(Box::pin(async move {
            reply_rx.await.ok()?.into_frame().await
        }))),
        done,
    }
}

fn produce_with(
    state: &Arc<BrokerState>,
    ctx: Ctx,
    req: ProduceRequest,
    verifier: &Verifier,
) -> Reply {
    let acks = req.acks;
    let version = ctx.version;
    let image = state.image();
    let mut topics = Vec::with_capacity(req.topic_data.len());
    let mut waits = Vec::new();
    let mut appended_any = false;
    for td in req.topic_data {
        let name = if version >= 13 {
            image
                .topic_by_id(from_uuid(td.topic_id))
                .map(|t| t.name.to_string())
        } else {
            Some(td.name.0.to_string())
        };
        let mut partitions = Vec::with_capacity(td.partition_data.len());
        for pd in td.partition_data {
            let mut r = PartitionProduceResponse::default().with_index(pd.index);
            let err = |r: PartitionProduceResponse, e: ErrorCode| {
                r.with_error_code(code(e)).with_base_offset(-1)
            };
            // Kafka's order: the request handler answers unknown ids, denied and unknown
            // topics and invalid records; the replica manager then refuses the whole rest for
            // bad acks, internal topics, and partitions this broker does not lead.
            let Some(name) = name.as_deref() else {
                partitions.push(err(r, ErrorCode::UnknownTopicId));
                continue;
            };
            if !ctx
                .access
                .allows_topic(model::acl::AclOperation::Write, name)
            {
                partitions.push(err(r, ErrorCode::TopicAuthorizationFailed));
                continue;
            }
            let led = state.leader_partition(name, pd.index);
            if let Err(e @ ErrorCode::UnknownTopicOrPartition) = led {
                partitions.push(err(r, e));
                continue;
            }
            let Some(records) = pd.records else {
                partitions.push(err(r, ErrorCode::CorruptMessage));
                continue;
            };
            if let Some(e) = validate_records(version, &records) {
                partitions.push(err(r, e));
                continue;
            }
            if !(acks == 0 || acks == 1 || acks == -1) {
                partitions.push(err(r, ErrorCode::InvalidRequiredAcks));
                continue;
            }
            if metadata::is_internal_topic(name) {
                partitions.push(err(r, ErrorCode::InvalidTopicException));
                continue;
            }
            let partition = match led {
                Ok(p) => p,
                Err(e) => {
                    partitions.push(err(r, e));
                    continue;
                }
            };
            if has_control_batch(&records) {
                // Transaction markers are the broker's to write (Kafka: INVALID_RECORD).
                partitions.push(err(r, ErrorCode::InvalidRecord));
                continue;
            }
            let txn_id = req.transactional_id.as_ref().map(|t| t.0.as_str());
            let bytes_in = records.len();
            match append(
                state,
                txn_id,
                version,
                &partition,
                records,
                acks == -1,
                verifier,
            ) {
                Ok(info) => {
                    appended_any = true;
                    if !info.duplicate {
                        let n = info.last_offset - info.base_offset + 1;
                        partition.stats.produced(bytes_in, n);
                    }
                    r = r
                        .with_base_offset(info.base_offset)
                        .with_log_append_time_ms(info.log_append_time_ms);
                    if version >= 5 {
                        r = r.with_log_start_offset(info.log_start_offset);
                    }
                    if acks == -1 {
                        waits.push(Appended {
                            topic: topics.len(),
                            slot: partitions.len(),
                            partition,
                            last_offset: info.last_offset,
                        });
                    }
                }
                Err(Rejected {
                    code: ec,
                    message,
                    by_coordinator,
                }) => {
                    tracing::debug!(partition = %partition.tp, error = %message, "produce rejected");
                    r = err(r, ec);
                    // Kafka reports the log start offset with record-validation errors (not
                    // with corrupt or oversized batches, nor with the coordinator's refusal of
                    // a transaction's partition, answered before the log is touched), and the
                    // failing record for timestamp errors.
                    if version >= 5 && !by_coordinator && reports_log_start(ec) {
                        r = r.with_log_start_offset(partition.log.log_start_offset());
                    }
                    if version >= 8 {
                        r = r.with_error_message(Some(super::str_bytes(message.clone())));
                        if ec == ErrorCode::InvalidTimestamp {
                            r = r.with_record_errors(vec![BatchIndexAndErrorMessage::default()
                                .with_batch_index(0)
                                .with_batch_index_error_message(Some(super::str_bytes(message)))]);
                        }
                    }
                }
            }
            partitions.push(r);
        }
        let mut t = TopicProduceResponse::default().with_partition_responses(partitions);
        if version >= 13 {
            t = t.with_topic_id(td.topic_id);
        } else {
            t = t.with_name(td.name);
        }
        topics.push(t);
    }
    if appended_any {
        state.notify_data();
    }
    if acks == 0 {
        // No answer for acks=0; an error closes the connection so the producer notices
        // (Kafka does the same).
        let failed = topics
            .iter()
            .flat_map(|t| t.partition_responses.iter())
            .any(|p| p.error_code != 0);
        if failed {
            return Reply::Close;
        }
        return Reply::None;
    }
    let mut resp = ProduceResponse::default().with_responses(topics);
    if waits.is_empty() {
        super::leader_hints::produce(state, &ctx.listener, version, &mut resp);
        return ctx.ready(ResponseKind::Produce(resp));
    }
    let state = state.clone();
    let waiting = crate::metrics::METRICS.delayed(crate::metrics::Delayed::Produce);
    // acks=all: each partition answers once its high watermark passed the batch, i.e. the
    // batch is on disk on every ISR member (or with the replica's error).
    let timeout_ms = i64::from(req.timeout_ms);
    let ack_waits: Vec<_> = waits
        .into_iter()
        .map(|w| {
            let rx = w.partition.wait_for_ack(w.last_offset + 1, timeout_ms);
            (w, rx)
        })
        .collect();
    Reply::Later(Box::pin(async move {
        let _waiting = waiting;
        let mut resp = resp;
        for (w, rx) in ack_waits {
            let error = rx.await.unwrap_or(ErrorCode::NotLeaderOrFollower);
            if error != ErrorCode::None {
                tracing::debug!(partition = %w.partition.tp, error = %error.name(), "acks=all wait failed");
                if let Some(p) = resp
                    .responses
                    .get_mut(w.topic)
                    .and_then(|t| t.partition_responses.get_mut(w.slot))
                {
                    p.error_code = code(error);
                    p.base_offset = -1;
                }
            }
        }
        super::leader_hints::produce(&state, &ctx.listener, version, &mut resp);
        ctx.encode(ResponseKind::Produce(resp))
    }))
}

/// Whether a client's records hold a control batch (a transaction marker). Reads batch
/// headers only; malformed bytes are left to the log's validation.
fn has_control_batch(records: &[u8]) -> bool {
    record::BatchSplitter::new(records).any(|b| {
        b.is_ok_and(|(_, bytes)| record::BatchHeader::parse(bytes).is_ok_and(|h| h.is_control()))
    })
}

/// Appends a partition's records. Clients may not write control batches, nor transactional
/// batches without a transactional id (INVALID_RECORD). A transactional producer's batches go
/// through KIP-890 verification: the first write of its transaction to this partition is
/// appended only if the coordinator confirms the partition is in the transaction.
fn append(
    state: &BrokerState,
    transactional_id: Option<&str>,
    version: i16,
    partition: &Arc<Partition>,
    records: Bytes,
    acks_all: bool,
    verifier: &Verifier,
) -> Result<AppendInfo, Rejected> {
    let invalid = |m: &str| {
        let ec = if version >= 8 {
            ErrorCode::InvalidRecord
        } else {
            ErrorCode::CorruptMessage
        };
        Rejected::by_log(ec, m.to_string())
    };
    let header = BatchHeader::parse(&records)
        .map_err(|e| Rejected::by_log(e.error_code(), e.to_string()))?;
    if header.is_control() {
        return Err(invalid("clients may not write control batches"));
    }
    let Some(txn_id) = transactional_id else {
        if header.is_transactional() {
            return Err(invalid("a transactional batch needs a transactional id"));
        }
        return partition
            .append_as_leader(records, acks_all)
            .map_err(|(ec, m)| Rejected::by_log(ec, m));
    };
    if !header.is_transactional() || header.producer_id < 0 || header.base_sequence < 0 {
        return Err(invalid(
            "a transactional producer's batches must be transactional, with a producer id and sequence",
        ));
    }
    let (pid, epoch) = (header.producer_id, header.producer_epoch);
    let tp: BTreeSet<(String, i32)> = [(partition.tp.topic.to_string(), partition.tp.partition)]
        .into_iter()
        .collect();
    let abortable = if version >= 11 {
        ErrorCode::TransactionAbortable
    } else {
        ErrorCode::InvalidTxnState
    };
    partition
        .append_transactional(records, pid, epoch, verifier.how(), || {
            verifier.verify(state, txn_id, pid, epoch, &tp)
        })
        .map_err(|e| match e {
            TxnAppendError::Append(e) => Rejected::by_log(e.error_code(), e.to_string()),
            TxnAppendError::NotVerified(None) => Rejected {
                code: abortable,
                message: "the transaction ended while the partition was being verified".into(),
                by_coordinator: true,
            },
            TxnAppendError::NotVerified(Some(e)) => {
                // As Kafka: retriable coordinator trouble becomes NOT_ENOUGH_REPLICAS, which
                // every producer retries without refreshing metadata.
                let mapped = match e {
                    ErrorCode::TransactionAbortable | ErrorCode::InvalidTxnState => abortable,
                    ErrorCode::ProducerFenced => ErrorCode::InvalidProducerEpoch,
                    ErrorCode::ConcurrentTransactions
                    | ErrorCode::CoordinatorLoadInProgress
                    | ErrorCode::CoordinatorNotAvailable
                    | ErrorCode::NotCoordinator => ErrorCode::NotEnoughReplicas,
                    e => e,
                };
                Rejected {
                    code: mapped,
                    message: format!("partition not verified in the transaction ({})", e.name()),
                    by_coordinator: true,
                }
            }
        })
}

/// Why a partition's batch was not appended.
struct Rejected {
    code: ErrorCode,
    message: String,
    /// The transaction coordinator refused the partition (KIP-890 verification): the log
    /// was never reached.
    by_coordinator: bool,
}

impl Rejected {
    fn by_log(code: ErrorCode, message: String) -> Self {
        Rejected {
            code,
            message,
            by_coordinator: false,
        }
    }
}

/// Kafka's `ProduceRequest.validateRecords` (v3+): exactly one record batch (a truncated
/// batch counts as none) of magic 2 (INVALID_RECORD otherwise), and zstd only from v7 on
/// (UNSUPPORTED_COMPRESSION_TYPE). Unknown magic values are left to the log's validation
/// (CORRUPT_MESSAGE), as in Kafka.
fn validate_records(version: i16, records: &bytes::Bytes) -> Option<ErrorCode> {
    let mut batches = record::BatchSplitter::new(records);
    let header = match (batches.next(), batches.next()) {
        (Some(Ok((_, batch))), None) => record::BatchHeader::parse(batch).ok(),
        _ => None,
    };
    let Some(h) = header else {
        return Some(ErrorCode::InvalidRecord);
    };
    if h.magic < record::MAGIC_V2 {
        return Some(ErrorCode::InvalidRecord);
    }
    if version < 7
        && h.magic == record::MAGIC_V2
        && h.compression_id() == record::Compression::Zstd.id()
    {
        return Some(ErrorCode::UnsupportedCompressionType);
    }
    None
}

/// Whether Kafka reports the log start offset with this produce error (record validation and
/// producer-state errors do; corrupt, oversized and routing errors don't).
fn reports_log_start(e: ErrorCode) -> bool {
    matches!(
        e,
        ErrorCode::InvalidRecord
            | ErrorCode::InvalidTimestamp
            | ErrorCode::OutOfOrderSequenceNumber
            | ErrorCode::InvalidProducerEpoch
            | ErrorCode::UnknownProducerId
    )
}
