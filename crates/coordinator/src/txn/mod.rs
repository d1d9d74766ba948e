//! The transaction coordinator (KIP-98, KIP-447, KIP-890 parts 1 and 2) as a sans-IO state
//! machine: requests, write completions, marker acknowledgements and the current time in;
//! responses, `__transaction_state` writes and transaction markers to deliver out.
//!
//! # Driving it (the broker runtime's side)
//! - One [`TransactionCoordinator`] per broker, single-threaded (`&mut self`); wrap it in a
//!   Mutex. Calls that need a producer id or the cluster's partitions take a [`TxnEnv`].
//! - Every call returns a [`TxnOutput`]. Its `writes` must be appended to their
//!   `__transaction_state` partition and made durable (in order), then reported with
//!   [`TransactionCoordinator::write_complete`] (`Ok`, or the error that made the write
//!   fail). A state change becomes visible only then; a failed write rolls it back and the
//!   request gets Kafka's error. While a transactional id has a write in flight, its other
//!   requests get CONCURRENT_TRANSACTIONS, as in Kafka.
//! - `responses` answer requests by [`RequestToken`]; a token not answered yet is waiting for
//!   a write, or parked: a client's AddPartitionsToTxn (v0-3) or AddOffsetsToTxn that finds
//!   its id busy (the previous transaction's markers or completion still being written)
//!   waits up to `park_max_ms` for the id to settle and then runs, instead of getting
//!   CONCURRENT_TRANSACTIONS at once as in Kafka (clients back off 20-100 ms on that, which
//!   caps a producer at a few dozen short transactions a second). Every token is answered
//!   exactly once (NOT_COORDINATOR on unload).
//! - `markers` ask for WriteTxnMarkers to each partition's leader. The runtime retries each
//!   partition until the marker is written (or the partition no longer exists) and reports
//!   it with [`TransactionCoordinator::marker_written`]; once every partition of a
//!   transaction has its marker, the coordinator writes CompleteCommit/CompleteAbort.
//! - Call [`TransactionCoordinator::tick`] at [`TransactionCoordinator::next_deadline`]: it
//!   aborts timed-out transactions (fencing the producer with an epoch bump, as Kafka does),
//!   expires idle transactional ids (`transactional.id.expiration.ms`) and retries failed
//!   completion writes.
//! - Loading follows partition leadership of `__transaction_state`: `begin_loading`,
//!   `replay` every record in log order, `load_partition` (which resends the markers of
//!   transactions that were preparing to commit or abort); `unload_partition` when
//!   leadership moves away.
//!
//! State transitions follow Kafka's `TransactionMetadata`/`TransactionCoordinator`
//! (transaction version 0/1): Empty -> Ongoing (AddPartitionsToTxn/AddOffsetsToTxn) ->
//! PrepareCommit/PrepareAbort (EndTxn) -> CompleteCommit/CompleteAbort (markers written) ->
//! Ongoing or Empty (InitProducerId bumps the epoch). InitProducerId during an Ongoing
//! transaction fences it (PrepareEpochFence, then PrepareAbort with the bumped epoch) and
//! answers CONCURRENT_TRANSACTIONS so the client retries.
//!
//! Transaction version 2 (KIP-890 part 2, EndTxn v5 and the leaders' adds): see
//! [`TransactionCoordinator::end_txn`]; every commit or abort bumps the epoch.

pub mod log;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use model::{BrokerConfig, ErrorCode};
use protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use protocol::messages::list_transactions_response::TransactionState as ListedTransaction;
use protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeTransactionsRequest, DescribeTransactionsResponse,
    EndTxnRequest, EndTxnResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TopicName, TransactionalId,
};
use protocol::{RequestKind, ResponseKind, StrBytes};

use crate::consumer::regex::TopicRegex;
use crate::coordinator::partition_for;
use crate::{Error, RequestContext, RequestToken};
use log::TxnValue;

/// `__consumer_offsets`: the topic AddOffsetsToTxn adds to a transaction.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// `__transaction_state`.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// Kafka's `TransactionState`, with its ids (as stored in the log) and names (as
/// DescribeTransactions and ListTransactions show them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.id() == id)
    }

    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Kafka's `validPreviousStates`: the states a transition into `self` may start from.
    pub fn valid_previous(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[
                Ongoing,
                PrepareEpochFence,
                Empty,
                CompleteCommit,
                CompleteAbort,
            ],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether an idle transactional id in this state may expire.
    fn expiration_allowed(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }
}

/// The coordinator's settings (Kafka's names and defaults).
#[derive(Clone, Debug)]
pub struct TxnConfig {
    /// `transaction.state.log.num.partitions`.
    pub state_log_partitions: i32,
    /// `transaction.max.timeout.ms`.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`.
    pub id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`.
    pub abort_timed_out_interval_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`.
    pub remove_expired_interval_ms: i64,
    /// `offsets.topic.num.partitions`: which `__consumer_offsets` partition a group's
    /// transactional offsets go to.
    pub offsets_topic_partitions: i32,
    /// How long to wait before retrying a failed CompleteCommit/CompleteAbort write.
    pub retry_backoff_ms: i64,
    /// How long an AddPartitionsToTxn (v0-3) or AddOffsetsToTxn that finds its id's previous
    /// transaction still completing (or another write of the id in flight) waits for it
    /// before getting CONCURRENT_TRANSACTIONS; 0 answers at once, as Kafka does.
    pub park_max_ms: i64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            state_log_partitions: 50,
            max_timeout_ms: 900_000,
            id_expiration_ms: 604_800_000,
            abort_timed_out_interval_ms: 10_000,
            remove_expired_interval_ms: 3_600_000,
            offsets_topic_partitions: 50,
            retry_backoff_ms: 100,
            park_max_ms: 500,
        }
    }
}

impl TxnConfig {
    pub fn from_broker(b: &BrokerConfig) -> TxnConfig {
        let t = &b.transactions;
        TxnConfig {
            state_log_partitions: t.state_log_num_partitions,
            max_timeout_ms: t.max_timeout_ms,
            id_expiration_ms: i64::from(t.transactional_id_expiration_ms),
            abort_timed_out_interval_ms: i64::from(t.abort_timed_out_interval_ms),
            remove_expired_interval_ms: i64::from(t.remove_expired_interval_ms),
            offsets_topic_partitions: b.offsets_topic_num_partitions,
            ..TxnConfig::default()
        }
    }
}

/// What the coordinator needs from the world around it.
pub trait TxnEnv {
    /// A producer id never handed out before (from the controller's blocks).
    fn next_producer_id(&mut self) -> Result<i64, ErrorCode>;
    /// Whether the partition exists (AddPartitionsToTxn refuses unknown ones).
    fn partition_exists(&self, topic: &str, partition: i32) -> bool;
}

/// Names one `__transaction_state` write, for [`TransactionCoordinator::write_complete`].
pub type WriteId = u64;

/// A record to append to `__transaction_state` (tombstone when `value` is None).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnWrite {
    pub id: WriteId,
    pub partition: i32,
    pub key: Bytes,
    pub value: Option<Bytes>,
}

/// Transaction markers to write: one COMMIT or ABORT marker on each partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkerRequest {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The leader epoch of the coordinator's `__transaction_state` partition.
    pub coordinator_epoch: i32,
    /// The `__transaction_state` partition of the transaction (markers of a partition that
    /// is unloaded are dropped).
    pub txn_partition: i32,
    pub commit: bool,
    pub partitions: Vec<(String, i32)>,
}

/// A written marker, reported back with [`TransactionCoordinator::marker_written`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkerAck {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub topic: String,
    pub partition: i32,
}

/// What a call produced; see the module docs for the order of things.
#[derive(Debug, Default)]
pub struct TxnOutput {
    pub responses: Vec<(RequestToken, ResponseKind)>,
    pub writes: Vec<TxnWrite>,
    pub markers: Vec<MarkerRequest>,
}

impl TxnOutput {
    pub fn extend(&mut self, other: TxnOutput) {
        self.responses.extend(other.responses);
        self.writes.extend(other.writes);
        self.markers.extend(other.markers);
    }

    /// The response for `token`, if this output has one.
    pub fn response(&self, token: RequestToken) -> Option<&ResponseKind> {
        self.responses
            .iter()
            .find(|(t, _)| *t == token)
            .map(|(_, r)| r)
    }
}

/// A copy of one transactional id's visible state (for tests and tools).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnSnapshot {
    pub transactional_id: String,
    pub value: TxnValue,
    /// Partitions still waiting for their marker (Prepare* states).
    pub markers_pending: BTreeSet<(String, i32)>,
    pub write_in_flight: bool,
}

/// What to do when a pending write completes.
#[derive(Clone, Debug)]
enum Then {
    /// Answer an InitProducerId with the new producer id and epoch.
    InitPid { token: RequestToken, version: i16 },
    /// Answer an AddPartitionsToTxn (v0-3) or AddOffsetsToTxn, or fill one transaction's
    /// result of a batched AddPartitionsToTxn (v4+).
    Added(AddReply),
    /// PrepareCommit/PrepareAbort is durable: answer the EndTxn (if any; none for a timeout
    /// abort) or the fencing InitProducerId (CONCURRENT_TRANSACTIONS), then send markers.
    Prepared {
        reply: Option<(RequestToken, i16, ReplyKind)>,
    },
    /// CompleteCommit/CompleteAbort is durable.
    Completed,
    /// The tombstone of an expired transactional id is durable: forget it.
    Expired,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReplyKind {
    EndTxn,
    InitPid,
}

#[derive(Clone, Debug)]
enum AddReply {
    /// AddPartitionsToTxn v0-3: every requested partition gets the same error.
    Partitions {
        token: RequestToken,
        version: i16,
        topics: Vec<(String, Vec<i32>)>,
    },
    AddOffsets {
        token: RequestToken,
        version: i16,
    },
    /// One transaction (index `slot`) of a batched AddPartitionsToTxn.
    Batch {
        token: RequestToken,
        slot: usize,
    },
}

#[derive(Debug)]
struct Pending {
    write: WriteId,
    target: TxnValue,
    then: Then,
}

/// One transactional id.
#[derive(Debug)]
struct Txn {
    id: String,
    /// Its `__transaction_state` partition.
    partition: i32,
    /// The durable (visible) state.
    value: TxnValue,
    /// False until the first write of a newly created id is durable (removed if it fails).
    persisted: bool,
    pending: Option<Pending>,
    /// In Prepare* states: partitions whose marker is not written yet.
    markers_pending: BTreeSet<(String, i32)>,
    /// A CompleteCommit/CompleteAbort write failed: retry at this time.
    complete_retry_at: Option<i64>,
}

/// Most requests one transactional id may have parked at once; more get
/// CONCURRENT_TRANSACTIONS at once.
const PARKED_PER_ID_MAX: usize = 8;

/// A client's AddPartitionsToTxn (v0-3) or AddOffsetsToTxn that met its id busy (the previous
/// transaction's markers or completion record still being written, or another write in
/// flight). Kafka answers CONCURRENT_TRANSACTIONS and clients retry after a backoff (20 ms in
/// the Java client, `retry.backoff.ms` elsewhere), which bounds a producer to a few dozen
/// small transactions a second; a parked request is run again as soon as the id settles
/// (or answered CONCURRENT_TRANSACTIONS at `until_ms`).
#[derive(Debug)]
struct Parked {
    token: RequestToken,
    version: i16,
    producer_id: i64,
    producer_epoch: i16,
    what: ParkedAdd,
    until_ms: i64,
    /// A partition leader's add (AddPartitionsToTxn v4+, not verify-only: transaction
    /// version 2's implicit add on produce or TxnOffsetCommit): its transaction's slot in the
    /// batched answer.
    slot: Option<usize>,
}

#[derive(Debug)]
enum ParkedAdd {
    Partitions(Vec<(String, Vec<i32>)>),
    Offsets(String),
}

/// A batched AddPartitionsToTxn (v4+) waiting for some of its transactions' writes.
#[derive(Debug)]
struct BatchReply {
    results: Vec<AddPartitionsToTxnResult>,
    waiting: usize,
}

/// Every transactional id this broker coordinates.
///
/// Single-threaded: every method takes `&mut self` and the current time. Visible state only
/// changes when a write completes (or on replay); see the module docs.
#[derive(Debug)]
pub struct TransactionCoordinator {
    config: TxnConfig,
    txns: BTreeMap<String, Txn>,
    /// Owned `__transaction_state` partitions and their coordinator (leader) epochs.
    owned: BTreeMap<i32, i32>,
    loading: BTreeSet<i32>,
    next_write: WriteId,
    /// Which transactional id each in-flight write belongs to.
    writes: HashMap<WriteId, String>,
    batches: HashMap<RequestToken, BatchReply>,
    /// Requests waiting for their transactional id to settle, by id, in arrival order.
    parked: BTreeMap<String, Vec<Parked>>,
    next_abort_check_ms: Option<i64>,
    next_expire_check_ms: Option<i64>,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Kafka converts PRODUCER_FENCED for clients older than KIP-588.
fn for_version(e: ErrorCode, version: i16, fenced_since: i16) -> ErrorCode {
    if e == ErrorCode::ProducerFenced && version < fenced_since {
        ErrorCode::InvalidProducerEpoch
    } else {
        e
    }
}

fn init_pid_response(version: i16, r: Result<(i64, i16), ErrorCode>) -> ResponseKind {
    let mut resp = InitProducerIdResponse::default();
    match r {
        Ok((pid, epoch)) => {
            resp.producer_id = ProducerId(pid);
            resp.producer_epoch = epoch;
        }
        Err(e) => {
            resp.error_code = for_version(e, version, 4).code();
            resp.producer_id = ProducerId(-1);
            resp.producer_epoch = -1;
        }
    }
    ResponseKind::InitProducerId(resp)
}

fn end_txn_response(version: i16, e: ErrorCode, pid_epoch: Option<(i64, i16)>) -> ResponseKind {
    let mut resp = EndTxnResponse::default();
    resp.error_code = for_version(e, version, 2).code();
    if version >= 5 {
        let (pid, epoch) = pid_epoch.unwrap_or((-1, -1));
        resp.producer_id = ProducerId(pid);
        resp.producer_epoch = epoch;
    }
    ResponseKind::EndTxn(resp)
}

fn add_offsets_response(version: i16, e: ErrorCode) -> ResponseKind {
    let mut resp = AddOffsetsToTxnResponse::default();
    resp.error_code = for_version(e, version, 2).code();
    ResponseKind::AddOffsetsToTxn(resp)
}

fn topic_results(
    topics: &[(String, Vec<i32>)],
    mut error: impl FnMut(&str, i32) -> ErrorCode,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|(t, ps)| {
            let mut tr = AddPartitionsToTxnTopicResult::default();
            tr.name = TopicName(s(t));
            tr.results_by_partition = ps
                .iter()
                .map(|p| {
                    let mut pr = AddPartitionsToTxnPartitionResult::default();
                    pr.partition_index = *p;
                    pr.partition_error_code = error(t, *p).code();
                    pr
                })
                .collect();
            tr
        })
        .collect()
}

fn add_partitions_response(
    topics: &[(String, Vec<i32>)],
    error: impl FnMut(&str, i32) -> ErrorCode,
) -> ResponseKind {
    let mut resp = AddPartitionsToTxnResponse::default();
    resp.results_by_topic_v3_and_below = topic_results(topics, error);
    ResponseKind::AddPartitionsToTxn(resp)
}

fn partitions_of(topics: &[(String, Vec<i32>)]) -> BTreeSet<(String, i32)> {
    topics
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
        .collect()
}

/// Maps a failed `__transaction_state` write to what the client sees (Kafka's
/// `TransactionStateManager.appendTransactionToLog`).
fn write_error(e: ErrorCode) -> ErrorCode {
    match e {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend
        | ErrorCode::RequestTimedOut => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
        ErrorCode::MessageTooLarge | ErrorCode::RecordListTooLarge => ErrorCode::UnknownServerError,
        e => e,
    }
}

/// Transaction version 2's per-transaction bump (Kafka's `prepareAbortOrCommit`): the
/// epoch goes up by one; when it is exhausted, the id's next producer id is allocated now
/// and taken on completion.
fn bump_for_end(target: &mut TxnValue, env: &mut dyn TxnEnv) -> Result<(), ErrorCode> {
    if epoch_exhausted(target.producer_epoch) {
        target.next_producer_id = env.next_producer_id()?;
    }
    target.last_producer_epoch = target.producer_epoch;
    target.producer_epoch = target.producer_epoch.saturating_add(1);
    target.client_txn_version = 2;
    Ok(())
}

/// How far an abort the producer did not ask for (a timeout, or a new producer's
/// InitProducerId) moves the epoch: one, and two for a transaction-version-2 transaction, as
/// Kafka (its fence bump, then the per-transaction bump of the abort itself). A version-2
/// retry is recognised by "the epoch is one past the request's", which must not match the
/// fenced producer.
fn fence_bump(cur: &TxnValue) -> i16 {
    if cur.client_txn_version >= 2 {
        2
    } else {
        1
    }
}

/// Kafka's `TransactionMetadata.isEpochExhausted`.
fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

impl TransactionCoordinator {
    pub fn new(config: TxnConfig) -> Self {
        TransactionCoordinator {
            config,
            txns: BTreeMap::new(),
            owned: BTreeMap::new(),
            loading: BTreeSet::new(),
            next_write: 1,
            writes: HashMap::new(),
            batches: HashMap::new(),
            parked: BTreeMap::new(),
            next_abort_check_ms: None,
            next_expire_check_ms: None,
        }
    }

    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    /// Uses the actual partition count of `__transaction_state` (an existing topic keeps its
    /// count, as in Kafka: every id's records live in the partition that count chose).
    pub fn set_state_log_partitions(&mut self, partitions: i32) {
        if partitions > 0 {
            self.config.state_log_partitions = partitions;
        }
    }

    /// Uses the actual partition count of `__consumer_offsets` for AddOffsetsToTxn.
    pub fn set_offsets_topic_partitions(&mut self, partitions: i32) {
        if partitions > 0 {
            self.config.offsets_topic_partitions = partitions;
        }
    }

    /// The `__transaction_state` partition of a transactional id.
    pub fn partition_for(&self, transactional_id: &str) -> i32 {
        partition_for(transactional_id, self.config.state_log_partitions)
    }

    /// The `__consumer_offsets` partition of a group.
    pub fn offsets_partition_for(&self, group_id: &str) -> i32 {
        partition_for(group_id, self.config.offsets_topic_partitions)
    }

    /// Whether this coordinator serves the transactional id's partition.
    pub fn is_coordinator_for(&self, transactional_id: &str) -> bool {
        self.owned
            .contains_key(&self.partition_for(transactional_id))
    }

    /// NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS for ids this broker can't serve now.
    fn ownership_error(&self, transactional_id: &str) -> Option<ErrorCode> {
        let p = self.partition_for(transactional_id);
        if self.loading.contains(&p) {
            Some(ErrorCode::CoordinatorLoadInProgress)
        } else if !self.owned.contains_key(&p) {
            Some(ErrorCode::NotCoordinator)
        } else {
            None
        }
    }

    /// A copy of one transactional id's visible state.
    pub fn transaction(&self, transactional_id: &str) -> Option<TxnSnapshot> {
        self.txns
            .get(transactional_id)
            .filter(|t| t.persisted)
            .map(Txn::snapshot)
    }

    /// Copies of every (persisted) transactional id, ordered by id.
    pub fn snapshot(&self) -> Vec<TxnSnapshot> {
        self.txns
            .values()
            .filter(|t| t.persisted)
            .map(Txn::snapshot)
            .collect()
    }

    fn new_write(&mut self, txn: &str, partition: i32, target: &TxnValue) -> TxnWrite {
        let id = self.next_write;
        self.next_write += 1;
        self.writes.insert(id, txn.to_string());
        TxnWrite {
            id,
            partition,
            key: log::encode_key(txn),
            value: Some(log::encode_value(target)),
        }
    }

    /// Starts a transition of `txn_id` to `target`: the write goes out, the state changes
    /// when it completes.
    fn begin(&mut self, txn_id: &str, target: TxnValue, then: Then, out: &mut TxnOutput) {
        let Some(partition) = self.txns.get(txn_id).map(|t| t.partition) else {
            return;
        };
        if let Some(t) = self.txns.get(txn_id) {
            debug_assert!(
                target.state.valid_previous().contains(&t.value.state)
                    || (target.state == TxnState::Empty && !t.persisted),
                "{:?} -> {:?}",
                t.value.state,
                target.state
            );
        }
        let w = self.new_write(txn_id, partition, &target);
        if let Some(t) = self.txns.get_mut(txn_id) {
            t.pending = Some(Pending {
                write: w.id,
                target,
                then,
            });
        }
        out.writes.push(w);
    }

    // ---- loading --------------------------------------------------------------------------

    /// Marks a partition as being replayed: its ids answer COORDINATOR_LOAD_IN_PROGRESS.
    pub fn begin_loading(&mut self, partition: i32) {
        self.loading.insert(partition);
    }

    /// Applies one `__transaction_state` record (in log order) while loading. Tombstones
    /// forget the id; unknown key types are skipped.
    pub fn replay(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        let Some(id) = log::decode_key(key)? else {
            return Ok(());
        };
        match value {
            None => {
                self.txns.remove(&id);
            }
            Some(v) => {
                let value = log::decode_value(v)?;
                let partition = self.partition_for(&id);
                let t = self.txns.entry(id.clone()).or_insert_with(|| Txn {
                    id: id.clone(),
                    partition,
                    value: value.clone(),
                    persisted: true,
                    pending: None,
                    markers_pending: BTreeSet::new(),
                    complete_retry_at: None,
                });
                t.value = value;
            }
        }
        Ok(())
    }

    /// Starts serving a partition after its records were replayed, at coordinator epoch
    /// `coordinator_epoch` (the partition's leader epoch). Transactions that were preparing
    /// to commit or abort get their markers sent again.
    pub fn load_partition(
        &mut self,
        partition: i32,
        coordinator_epoch: i32,
        now_ms: i64,
    ) -> TxnOutput {
        let mut out = TxnOutput::default();
        self.loading.remove(&partition);
        self.owned.insert(partition, coordinator_epoch);
        let ids: Vec<String> = self
            .txns
            .values()
            .filter(|t| t.partition == partition)
            .map(|t| t.id.clone())
            .collect();
        for id in ids {
            let Some(t) = self.txns.get_mut(&id) else {
                continue;
            };
            if matches!(
                t.value.state,
                TxnState::PrepareCommit | TxnState::PrepareAbort
            ) {
                t.markers_pending = t.value.partitions.clone();
                let m = marker_request(t, coordinator_epoch);
                if m.partitions.is_empty() {
                    // Nothing to mark: complete right away.
                    self.complete(&id, now_ms, &mut out);
                } else {
                    out.markers.push(m);
                }
            }
        }
        self.next_abort_check_ms
            .get_or_insert(now_ms.saturating_add(self.config.abort_timed_out_interval_ms));
        self.next_expire_check_ms
            .get_or_insert(now_ms.saturating_add(self.config.remove_expired_interval_ms));
        out
    }

    /// Stops serving a partition (leadership moved): requests waiting on its ids get
    /// NOT_COORDINATOR and its ids are dropped from memory (the log keeps them).
    pub fn unload_partition(&mut self, partition: i32) -> TxnOutput {
        let mut out = TxnOutput::default();
        self.owned.remove(&partition);
        self.loading.remove(&partition);
        let ids: Vec<String> = self
            .txns
            .values()
            .filter(|t| t.partition == partition)
            .map(|t| t.id.clone())
            .collect();
        for id in ids {
            if let Some(mut t) = self.txns.remove(&id) {
                if let Some(p) = t.pending.take() {
                    self.writes.remove(&p.write);
                    self.fail_pending(p.then, ErrorCode::NotCoordinator, &mut out);
                }
            }
        }
        let parked: Vec<String> = self
            .parked
            .keys()
            .filter(|id| self.partition_for(id) == partition)
            .cloned()
            .collect();
        for id in parked {
            for p in self.parked.remove(&id).unwrap_or_default() {
                // Not owned any more: the run answers NOT_COORDINATOR.
                self.run_add(&id, p, i64::MIN, false, &mut out);
            }
        }
        out
    }

    /// The coordinator epoch of an owned partition.
    pub fn coordinator_epoch(&self, partition: i32) -> Option<i32> {
        self.owned.get(&partition).copied()
    }

    // ---- requests ---------------------------------------------------------------------------

    /// Runs a transaction API request; gives back requests of other APIs.
    #[allow(clippy::result_large_err)]
    pub fn handle(
        &mut self,
        ctx: &RequestContext,
        request: RequestKind,
        now_ms: i64,
        env: &mut dyn TxnEnv,
    ) -> Result<TxnOutput, RequestKind> {
        Ok(match request {
            RequestKind::InitProducerId(r) => self.init_producer_id(ctx, r, now_ms, env),
            RequestKind::AddPartitionsToTxn(r) => self.add_partitions(ctx, r, now_ms, env),
            RequestKind::AddOffsetsToTxn(r) => self.add_offsets(ctx, r, now_ms),
            RequestKind::EndTxn(r) => self.end_txn(ctx, r, now_ms, env),
            RequestKind::DescribeTransactions(r) => self.describe_transactions(ctx, r),
            RequestKind::ListTransactions(r) => self.list_transactions(ctx, r, now_ms),
            other => return Err(other),
        })
    }

    /// InitProducerId with a transactional id (v0-v5). Without one, the runtime hands out a
    /// fresh producer id itself.
    pub fn init_producer_id(
        &mut self,
        ctx: &RequestContext,
        req: InitProducerIdRequest,
        now_ms: i64,
        env: &mut dyn TxnEnv,
    ) -> TxnOutput {
        let mut out = TxnOutput::default();
        let v = ctx.api_version;
        let fail = |out: &mut TxnOutput, e: ErrorCode| {
            out.responses
                .push((ctx.token, init_pid_response(v, Err(e))));
        };
        let Some(txn_id) = req.transactional_id.as_ref().map(|t| t.0.to_string()) else {
            fail(&mut out, ErrorCode::InvalidRequest);
            return out;
        };
        if txn_id.is_empty() {
            fail(&mut out, ErrorCode::InvalidRequest);
            return out;
        }
        let timeout = req.transaction_timeout_ms;
        if timeout <= 0 || timeout > self.config.max_timeout_ms {
            fail(&mut out, ErrorCode::InvalidTransactionTimeout);
            return out;
        }
        if let Some(e) = self.ownership_error(&txn_id) {
            fail(&mut out, e);
            return out;
        }
        // v3+: the producer says which id/epoch it had (-1/-1 for none).
        let expected =
            (v >= 3 && req.producer_id.0 >= 0).then_some((req.producer_id.0, req.producer_epoch));
        if !self.txns.contains_key(&txn_id) {
            let pid = match env.next_producer_id() {
                Ok(p) => p,
                Err(e) => {
                    fail(&mut out, e);
                    return out;
                }
            };
            let partition = self.partition_for(&txn_id);
            self.txns.insert(
                txn_id.clone(),
                Txn {
                    id: txn_id.clone(),
                    partition,
                    value: TxnValue {
                        producer_id: pid,
                        prev_producer_id: -1,
                        next_producer_id: -1,
                        producer_epoch: -1,
                        last_producer_epoch: -1,
                        timeout_ms: timeout,
                        state: TxnState::Empty,
                        partitions: BTreeSet::new(),
                        start_ms: -1,
                        last_update_ms: now_ms,
                        client_txn_version: 0,
                    },
                    persisted: false,
                    pending: None,
                    markers_pending: BTreeSet::new(),
                    complete_retry_at: None,
                },
            );
        }
        let Some(t) = self.txns.get(&txn_id) else {
            return out;
        };
        let cur = &t.value;
        // Kafka's isValidProducerId.
        let valid_expected = expected.is_none_or(|(pid, epoch)| {
            cur.producer_epoch == -1
                || pid == cur.producer_id
                || (pid == cur.prev_producer_id && epoch_exhausted(epoch))
        });
        if t.pending.is_some() {
            fail(&mut out, ErrorCode::ConcurrentTransactions);
            return out;
        }
        if !valid_expected {
            fail(&mut out, ErrorCode::ProducerFenced);
            return out;
        }
        let then = Then::InitPid {
            token: ctx.token,
            version: v,
        };
        match cur.state {
            TxnState::PrepareAbort | TxnState::PrepareCommit => {
                fail(&mut out, ErrorCode::ConcurrentTransactions);
            }
            TxnState::Empty | TxnState::CompleteAbort | TxnState::CompleteCommit => {
                let mut target = cur.clone();
                target.state = TxnState::Empty;
                target.timeout_ms = timeout;
                target.partitions.clear();
                target.start_ms = -1;
                target.last_update_ms = now_ms;
                // Kafka's epoch increments and id rotations are written as version 0.
                target.client_txn_version = 0;
                if epoch_exhausted(cur.producer_epoch)
                    && expected.is_none_or(|(_, e)| e == cur.producer_epoch)
                {
                    // Rotate to a new producer id (Kafka's prepareProducerIdRotation).
                    let pid = match env.next_producer_id() {
                        Ok(p) => p,
                        Err(e) => {
                            fail(&mut out, e);
                            return out;
                        }
                    };
                    target.prev_producer_id = cur.producer_id;
                    target.producer_id = pid;
                    target.producer_epoch = 0;
                    target.last_producer_epoch = if expected.is_some() {
                        cur.producer_epoch
                    } else {
                        -1
                    };
                } else {
                    // Kafka's prepareIncrementProducerEpoch.
                    match expected.map(|(_, e)| e) {
                        None => {
                            target.producer_epoch = cur.producer_epoch.saturating_add(1);
                            target.last_producer_epoch = -1;
                        }
                        Some(e) if cur.producer_epoch == -1 || e == cur.producer_epoch => {
                            target.producer_epoch = cur.producer_epoch.saturating_add(1);
                            target.last_producer_epoch = cur.producer_epoch;
                        }
                        Some(e) if e == cur.last_producer_epoch => {
                            // A retry of a bump that succeeded: same epoch again.
                        }
                        Some(_) => {
                            fail(&mut out, ErrorCode::ProducerFenced);
                            return out;
                        }
                    }
                }
                self.begin(&txn_id, target, then, &mut out);
            }
            TxnState::Ongoing => {
                // Fence the current producer: abort its transaction with a bumped epoch
                // (never returned to anyone), answer CONCURRENT_TRANSACTIONS; the client
                // retries and gets a further bump once the abort completed.
                let mut target = cur.clone();
                target.producer_epoch = cur.producer_epoch.saturating_add(fence_bump(cur));
                target.last_producer_epoch = -1;
                target.state = TxnState::PrepareAbort;
                target.last_update_ms = now_ms;
                self.begin(
                    &txn_id,
                    target,
                    Then::Prepared {
                        reply: Some((ctx.token, v, ReplyKind::InitPid)),
                    },
                    &mut out,
                );
            }
            TxnState::Dead | TxnState::PrepareEpochFence => {
                tracing::error!(transactional_id = %txn_id, state = ?cur.state, "illegal transaction state");
                fail(&mut out, ErrorCode::UnknownServerError);
            }
        }
        out
    }

    /// Kafka's checks shared by AddPartitionsToTxn, AddOffsetsToTxn and verification: the
    /// id must map to this producer id and epoch.
    fn check_producer(
        &self,
        txn_id: &str,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<&Txn, ErrorCode> {
        if txn_id.is_empty() {
            return Err(ErrorCode::InvalidRequest);
        }
        if let Some(e) = self.ownership_error(txn_id) {
            return Err(e);
        }
        let t = self
            .txns
            .get(txn_id)
            .filter(|t| t.persisted)
            .ok_or(ErrorCode::InvalidProducerIdMapping)?;
        if t.value.producer_id != producer_id {
            return Err(ErrorCode::InvalidProducerIdMapping);
        }
        if t.value.producer_epoch != producer_epoch {
            return Err(ErrorCode::ProducerFenced);
        }
        Ok(t)
    }

    /// Adds partitions to a transaction: Ok(None) when nothing needs writing (already in
    /// it), Ok(Some(target)) for the transition to write.
    fn prepare_add(
        &self,
        txn_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        add: &BTreeSet<(String, i32)>,
        now_ms: i64,
    ) -> Result<Option<TxnValue>, ErrorCode> {
        let t = self.check_producer(txn_id, producer_id, producer_epoch)?;
        if t.pending.is_some() {
            return Err(ErrorCode::ConcurrentTransactions);
        }
        let cur = &t.value;
        match cur.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                Err(ErrorCode::ConcurrentTransactions)
            }
            TxnState::Ongoing if add.is_subset(&cur.partitions) => Ok(None),
            TxnState::Empty
            | TxnState::Ongoing
            | TxnState::CompleteCommit
            | TxnState::CompleteAbort => {
                let mut target = cur.clone();
                if cur.state != TxnState::Ongoing {
                    target.start_ms = now_ms;
                }
                target.state = TxnState::Ongoing;
                target.partitions.extend(add.iter().cloned());
                target.last_update_ms = now_ms;
                Ok(Some(target))
            }
            TxnState::Dead | TxnState::PrepareEpochFence => Err(ErrorCode::UnknownServerError),
        }
    }

    /// AddPartitionsToTxn: v0-3 from clients (one transaction), v4+ batched from brokers
    /// (verify-only checks, or adds).
    pub fn add_partitions(
        &mut self,
        ctx: &RequestContext,
        req: AddPartitionsToTxnRequest,
        now_ms: i64,
        env: &mut dyn TxnEnv,
    ) -> TxnOutput {
        let mut out = TxnOutput::default();
        let v = ctx.api_version;
        if v >= 4 {
            return self.add_partitions_batch(ctx, req, now_ms, env);
        }
        let txn_id = req.v3_and_below_transactional_id.0.to_string();
        let topics: Vec<(String, Vec<i32>)> = req
            .v3_and_below_topics
            .iter()
            .map(|t| (t.name.0.to_string(), t.partitions.clone()))
            .collect();
        // Unknown partitions fail the whole request (OPERATION_NOT_ATTEMPTED for the rest).
        let missing: BTreeSet<(String, i32)> = partitions_of(&topics)
            .into_iter()
            .filter(|(t, p)| !env.partition_exists(t, *p))
            .collect();
        if !missing.is_empty() {
            let resp = add_partitions_response(&topics, |t, p| {
                if missing.contains(&(t.to_string(), p)) {
                    ErrorCode::UnknownTopicOrPartition
                } else {
                    ErrorCode::OperationNotAttempted
                }
            });
            out.responses.push((ctx.token, resp));
            return out;
        }
        let parked = Parked {
            token: ctx.token,
            version: v,
            producer_id: req.v3_and_below_producer_id.0,
            producer_epoch: req.v3_and_below_producer_epoch,
            what: ParkedAdd::Partitions(topics),
            until_ms: now_ms.saturating_add(self.config.park_max_ms),
            slot: None,
        };
        self.run_add(&txn_id, parked, now_ms, true, &mut out);
        out
    }

    /// Runs a client's AddPartitionsToTxn (v0-3, partitions known to exist) or
    /// AddOffsetsToTxn; parks it (when `may_park`) if the id is busy.
    fn run_add(
        &mut self,
        txn_id: &str,
        p: Parked,
        now_ms: i64,
        may_park: bool,
        out: &mut TxnOutput,
    ) {
        let add: BTreeSet<(String, i32)> = match &p.what {
            ParkedAdd::Partitions(topics) => partitions_of(topics),
            ParkedAdd::Offsets(group) => {
                [(OFFSETS_TOPIC.to_string(), self.offsets_partition_for(group))]
                    .into_iter()
                    .collect()
            }
        };
        let mut r = self.prepare_add(txn_id, p.producer_id, p.producer_epoch, &add, now_ms);
        if p.slot.is_some() {
            // Only transaction-version-2 brokers add on the client's behalf.
            if let Ok(Some(target)) = &mut r {
                target.client_txn_version = 2;
            }
        }
        if matches!(r, Err(ErrorCode::ConcurrentTransactions))
            && may_park
            && p.until_ms > now_ms
            && self.parked.get(txn_id).map_or(0, Vec::len) < PARKED_PER_ID_MAX
        {
            self.parked.entry(txn_id.to_string()).or_default().push(p);
            return;
        }
        let reply = match (p.slot, p.what) {
            (Some(slot), _) => AddReply::Batch {
                token: p.token,
                slot,
            },
            (None, ParkedAdd::Partitions(topics)) => AddReply::Partitions {
                token: p.token,
                version: p.version,
                topics,
            },
            (None, ParkedAdd::Offsets(_)) => AddReply::AddOffsets {
                token: p.token,
                version: p.version,
            },
        };
        match r {
            Err(e) => self.answer_add(reply, Err(e), out),
            Ok(None) => self.answer_add(reply, Ok(()), out),
            Ok(Some(target)) => self.begin(txn_id, target, Then::Added(reply), out),
        }
    }

    /// Runs the requests parked on `txn_id` again once it has settled (no write in flight,
    /// not waiting for markers), in arrival order; one that starts a write parks the rest
    /// again until that write completes.
    fn wake(&mut self, txn_id: &str, now_ms: i64, out: &mut TxnOutput) {
        let settled = self.txns.get(txn_id).is_none_or(|t| {
            t.pending.is_none()
                && !matches!(
                    t.value.state,
                    TxnState::PrepareCommit | TxnState::PrepareAbort
                )
        });
        if !settled {
            return;
        }
        let Some(list) = self.parked.remove(txn_id) else {
            return;
        };
        for p in list {
            self.run_add(txn_id, p, now_ms, true, out);
        }
    }

    fn add_partitions_batch(
        &mut self,
        ctx: &RequestContext,
        req: AddPartitionsToTxnRequest,
        now_ms: i64,
        env: &mut dyn TxnEnv,
    ) -> TxnOutput {
        let mut out = TxnOutput::default();
        let mut results = Vec::with_capacity(req.transactions.len());
        let mut waiting = 0;
        let mut deferred = Vec::new();
        for (slot, tx) in req.transactions.iter().enumerate() {
            let txn_id = tx.transactional_id.0.to_string();
            let topics: Vec<(String, Vec<i32>)> = tx
                .topics
                .iter()
                .map(|t| (t.name.0.to_string(), t.partitions.clone()))
                .collect();
            let mut r = AddPartitionsToTxnResult::default();
            r.transactional_id = tx.transactional_id.clone();
            let add = partitions_of(&topics);
            if tx.verify_only {
                let errors = self.verify(&txn_id, tx.producer_id.0, tx.producer_epoch, &add);
                r.topic_results = topic_results(&topics, |t, p| {
                    errors
                        .get(&(t.to_string(), p))
                        .copied()
                        .unwrap_or(ErrorCode::None)
                });
            } else if add.iter().any(|(t, p)| !env.partition_exists(t, *p)) {
                r.topic_results = topic_results(&topics, |t, p| {
                    if env.partition_exists(t, p) {
                        ErrorCode::OperationNotAttempted
                    } else {
                        ErrorCode::UnknownTopicOrPartition
                    }
                });
            } else {
                // Filled in when the add is answered (at once, after its write, or after
                // waiting for the id's previous transaction to complete).
                r.topic_results = topic_results(&topics, |_, _| ErrorCode::None);
                results.push(r);
                waiting += 1;
                deferred.push((
                    txn_id,
                    Parked {
                        token: ctx.token,
                        version: ctx.api_version,
                        producer_id: tx.producer_id.0,
                        producer_epoch: tx.producer_epoch,
                        what: ParkedAdd::Partitions(topics),
                        until_ms: now_ms.saturating_add(self.config.park_max_ms),
                        slot: Some(slot),
                    },
                ));
                continue;
            }
            results.push(r);
        }
        if waiting == 0 {
            out.responses.push((ctx.token, batch_response(results)));
        } else {
            self.batches
                .insert(ctx.token, BatchReply { results, waiting });
            for (txn_id, p) in deferred {
                self.run_add(&txn_id, p, now_ms, true, &mut out);
            }
        }
        out
    }

    /// KIP-890 verification: whether each partition is part of the producer's ongoing
    /// transaction. Errors for the whole transaction (unknown id, wrong producer, fenced,
    /// preparing to commit or abort) apply to every partition; a partition not in the
    /// transaction gets TRANSACTION_ABORTABLE. Only non-NONE errors are returned.
    pub fn verify(
        &self,
        txn_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &BTreeSet<(String, i32)>,
    ) -> BTreeMap<(String, i32), ErrorCode> {
        let all = |e: ErrorCode| partitions.iter().map(|tp| (tp.clone(), e)).collect();
        let t = match self.check_producer(txn_id, producer_id, producer_epoch) {
            Ok(t) => t,
            Err(e) => return all(e),
        };
        if matches!(
            t.value.state,
            TxnState::PrepareCommit | TxnState::PrepareAbort
        ) {
            return all(ErrorCode::ConcurrentTransactions);
        }
        partitions
            .iter()
            .filter(|tp| !(t.value.state == TxnState::Ongoing && t.value.partitions.contains(*tp)))
            .map(|tp| (tp.clone(), ErrorCode::TransactionAbortable))
            .collect()
    }

    /// AddOffsetsToTxn (v0-v4): adds the group's `__consumer_offsets` partition.
    pub fn add_offsets(
        &mut self,
        ctx: &RequestContext,
        req: AddOffsetsToTxnRequest,
        now_ms: i64,
    ) -> TxnOutput {
        let mut out = TxnOutput::default();
        let txn_id = req.transactional_id.0.to_string();
        let parked = Parked {
            token: ctx.token,
            version: ctx.api_version,
            producer_id: req.producer_id.0,
            producer_epoch: req.producer_epoch,
            what: ParkedAdd::Offsets(req.group_id.0.to_string()),
            until_ms: now_ms.saturating_add(self.config.park_max_ms),
            slot: None,
        };
        self.run_add(&txn_id, parked, now_ms, true, &mut out);
        out
    }

    /// EndTxn (v0-v5). v5 is transaction version 2 (KIP-890 part 2): preparing the commit or
    /// abort bumps the producer epoch, the markers carry the bumped epoch and the answer gives
    /// it to the client for its next transaction (a new producer id with epoch 0 once the
    /// epoch is exhausted). v0-4 keep the epoch across transactions. Kafka's
    /// `TransactionCoordinator.endTransaction`: a transaction-version-2 id accepts a retry
    /// with the epoch before its bump, and a version-2 abort with nothing added (the client's
    /// produce failed before the partition leader added it) aborts an empty transaction.
    pub fn end_txn(
        &mut self,
        ctx: &RequestContext,
        req: EndTxnRequest,
        now_ms: i64,
        env: &mut dyn TxnEnv,
    ) -> TxnOutput {
        let mut out = TxnOutput::default();
        let v = ctx.api_version;
        let tv2 = v >= 5;
        let txn_id = req.transactional_id.0.to_string();
        let commit = req.committed;
        let fail = |out: &mut TxnOutput, e: ErrorCode| {
            out.responses
                .push((ctx.token, end_txn_response(v, e, None)));
        };
        if txn_id.is_empty() {
            fail(&mut out, ErrorCode::InvalidRequest);
            return out;
        }
        if let Some(e) = self.ownership_error(&txn_id) {
            fail(&mut out, e);
            return out;
        }
        let Some(t) = self.txns.get(&txn_id).filter(|t| t.persisted) else {
            fail(&mut out, ErrorCode::InvalidProducerIdMapping);
            return out;
        };
        let cur = &t.value;
        let (pid, epoch) = (req.producer_id.0, req.producer_epoch);
        let cur_tv2 = cur.client_txn_version >= 2;
        // Transaction version 2: the epoch was bumped by the EndTxn being retried, or that
        // bump exhausted the epoch and the id moved to a new producer id.
        let retry_on_bump = cur_tv2 && i32::from(cur.producer_epoch) == i32::from(epoch) + 1;
        let retry_on_overflow = cur_tv2
            && cur.prev_producer_id == pid
            && epoch == i16::MAX - 1
            && cur.producer_epoch == 0;
        if cur.producer_id != pid && !retry_on_overflow {
            fail(&mut out, ErrorCode::InvalidProducerIdMapping);
            return out;
        }
        // Busy before fenced (Kafka's KAFKA-18464): while the previous transaction's markers
        // or completion are still being written, a version-2 client may already hold the
        // bumped epoch (EndTxn is answered once the commit is prepared) and end its next,
        // empty transaction with it; judged against the preparing state, that epoch would
        // fence the client itself. It retries on CONCURRENT_TRANSACTIONS and is judged once
        // the previous transaction is complete.
        if t.pending.is_some()
            || matches!(cur.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
        {
            fail(&mut out, ErrorCode::ConcurrentTransactions);
            return out;
        }
        // The epoch must be the current one, except that a version-2 id that completed its
        // transaction also takes the retry of the EndTxn that bumped it (Kafka's isValidEpoch).
        let valid_epoch = match cur.state {
            TxnState::CompleteCommit | TxnState::CompleteAbort if cur_tv2 => {
                retry_on_bump || retry_on_overflow || epoch == cur.producer_epoch
            }
            _ => epoch == cur.producer_epoch,
        };
        if !valid_epoch {
            fail(&mut out, ErrorCode::ProducerFenced);
            return out;
        }
        let is_retry = retry_on_bump || retry_on_overflow;
        let pid_epoch = Some((cur.producer_id, cur.producer_epoch));
        let reply = Then::Prepared {
            reply: Some((ctx.token, v, ReplyKind::EndTxn)),
        };
        match (cur.state, commit) {
            (TxnState::Ongoing, _) => {
                let mut target = cur.clone();
                target.state = if commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                };
                target.last_update_ms = now_ms;
                if tv2 {
                    if let Err(e) = bump_for_end(&mut target, env) {
                        fail(&mut out, e);
                        return out;
                    }
                }
                self.begin(&txn_id, target, reply, &mut out);
            }
            // A retry of an EndTxn that already completed.
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false)
                if !cur_tv2 || is_retry =>
            {
                out.responses
                    .push((ctx.token, end_txn_response(v, ErrorCode::None, pid_epoch)));
            }
            // Transaction version 2: the client aborts a transaction the coordinator never
            // heard of (its produce failed before the leader added the partition); the epoch
            // is bumped all the same, so late writes of that transaction are fenced.
            (TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort, false)
                if tv2 && !is_retry =>
            {
                let mut target = cur.clone();
                target.state = TxnState::PrepareAbort;
                target.partitions.clear();
                target.start_ms = now_ms;
                target.last_update_ms = now_ms;
                if let Err(e) = bump_for_end(&mut target, env) {
                    fail(&mut out, e);
                    return out;
                }
                self.begin(&txn_id, target, reply, &mut out);
            }
            (TxnState::Dead | TxnState::PrepareEpochFence, _) => {
                tracing::error!(transactional_id = %txn_id, state = ?cur.state, "illegal transaction state");
                fail(&mut out, ErrorCode::UnknownServerError);
            }
            _ => {
                tracing::debug!(transactional_id = %txn_id, state = ?cur.state, commit, "EndTxn in the wrong state");
                fail(&mut out, ErrorCode::InvalidTxnState);
            }
        }
        out
    }

    /// DescribeTransactions (v0).
    pub fn describe_transactions(
        &mut self,
        ctx: &RequestContext,
        req: DescribeTransactionsRequest,
    ) -> TxnOutput {
        let mut out = TxnOutput::default();
        let mut resp = DescribeTransactionsResponse::default();
        for id in &req.transactional_ids {
            let txn_id = id.0.to_string();
            // An entry with an error keeps the message's defaults (0) in its other fields, as
            // Kafka's does (checked against Kafka 4.4 by crates/conformance).
            let mut st = TransactionState::default();
            st.transactional_id = id.clone();
            let e = if txn_id.is_empty() {
                Some(ErrorCode::InvalidRequest)
            } else if let Some(e) = self.ownership_error(&txn_id) {
                Some(e)
            } else {
                match self.txns.get(&txn_id).filter(|t| t.persisted) {
                    None => Some(ErrorCode::TransactionalIdNotFound),
                    Some(t) if t.value.state == TxnState::Dead => {
                        Some(ErrorCode::TransactionalIdNotFound)
                    }
                    Some(t) => {
                        let v = &t.value;
                        st.transaction_state = s(v.state.name());
                        st.transaction_timeout_ms = v.timeout_ms;
                        st.transaction_start_time_ms = v.start_ms;
                        st.producer_id = ProducerId(v.producer_id);
                        st.producer_epoch = v.producer_epoch;
                        // While preparing, only partitions still waiting for a marker.
                        let parts = if matches!(
                            v.state,
                            TxnState::PrepareCommit | TxnState::PrepareAbort
                        ) {
                            &t.markers_pending
                        } else {
                            &v.partitions
                        };
                        let mut topics: Vec<TopicData> = Vec::new();
                        for (topic, p) in parts {
                            match topics.last_mut() {
                                Some(td) if td.topic.0.as_str() == topic => td.partitions.push(*p),
                                _ => {
                                    let mut td = TopicData::default();
                                    td.topic = TopicName(s(topic));
                                    td.partitions.push(*p);
                                    topics.push(td);
                                }
                            }
                        }
                        st.topics = topics;
                        None
                    }
                }
            };
            if let Some(e) = e {
                st.error_code = e.code();
            }
            resp.transaction_states.push(st);
        }
        out.responses
            .push((ctx.token, ResponseKind::DescribeTransactions(resp)));
        out
    }

    /// ListTransactions: state and producer id filters; v1 adds the duration filter, v2 the
    /// transactional id pattern (KIP-1152), matched against the whole id with an RE2-family
    /// engine as Kafka's RE2/J `Matcher.matches()` (an invalid one: INVALID_REGULAR_EXPRESSION).
    /// While a partition is loading the answer is COORDINATOR_LOAD_IN_PROGRESS with no
    /// transactions, as Kafka's.
    pub fn list_transactions(
        &mut self,
        ctx: &RequestContext,
        req: ListTransactionsRequest,
        now_ms: i64,
    ) -> TxnOutput {
        let mut out = TxnOutput::default();
        let v = ctx.api_version;
        let mut resp = ListTransactionsResponse::default();
        let mut states = BTreeSet::new();
        for f in &req.state_filters {
            match TxnState::from_name(f) {
                Some(st) => {
                    states.insert(st);
                }
                None => resp.unknown_state_filters.push(f.clone()),
            }
        }
        let pids: BTreeSet<i64> = req.producer_id_filters.iter().map(|p| p.0).collect();
        let duration = if v >= 1 { req.duration_filter } else { -1 };
        if !self.loading.is_empty() {
            resp.error_code = ErrorCode::CoordinatorLoadInProgress.code();
            out.responses
                .push((ctx.token, ResponseKind::ListTransactions(resp)));
            return out;
        }
        let pattern = match req.transactional_id_pattern.as_deref() {
            Some(p) if v >= 2 && !p.is_empty() => match TopicRegex::compile(p) {
                Ok(re) => Some(re),
                Err(_) => {
                    resp.error_code = ErrorCode::InvalidRegularExpression.code();
                    out.responses
                        .push((ctx.token, ResponseKind::ListTransactions(resp)));
                    return out;
                }
            },
            _ => None,
        };
        let want_states = req.state_filters.is_empty() || !states.is_empty();
        if want_states {
            for t in self.txns.values() {
                if !t.persisted || !self.owned.contains_key(&t.partition) {
                    continue;
                }
                let val = &t.value;
                if !states.is_empty() && !states.contains(&val.state) {
                    continue;
                }
                if !pids.is_empty() && !pids.contains(&val.producer_id) {
                    continue;
                }
                // Kafka compares `now - start` with the filter, also for a transaction that
                // has not started (start -1): such an id is listed, whatever the duration.
                if duration >= 0 && now_ms.saturating_sub(val.start_ms) < duration {
                    continue;
                }
                if pattern.as_ref().is_some_and(|re| !re.matches(&t.id)) {
                    continue;
                }
                let mut l = ListedTransaction::default();
                l.transactional_id = TransactionalId(s(&t.id));
                l.producer_id = ProducerId(val.producer_id);
                l.transaction_state = s(val.state.name());
                resp.transaction_states.push(l);
            }
        }
        out.responses
            .push((ctx.token, ResponseKind::ListTransactions(resp)));
        out
    }

    // ---- completions ------------------------------------------------------------------------

    /// Reports the outcome of a write: `Ok` once it is durable, or the error that made it
    /// fail (the transition is rolled back).
    pub fn write_complete(
        &mut self,
        id: WriteId,
        result: Result<(), ErrorCode>,
        now_ms: i64,
    ) -> TxnOutput {
        let Some(txn_id) = self.writes.get(&id).cloned() else {
            return TxnOutput::default();
        };
        let mut out = self.apply_write(id, result, now_ms);
        self.wake(&txn_id, now_ms, &mut out);
        out
    }

    fn apply_write(
        &mut self,
        id: WriteId,
        result: Result<(), ErrorCode>,
        now_ms: i64,
    ) -> TxnOutput {
        let mut out = TxnOutput::default();
        let Some(txn_id) = self.writes.remove(&id) else {
            return out;
        };
        let Some(t) = self.txns.get_mut(&txn_id) else {
            return out;
        };
        if t.pending.as_ref().map(|p| p.write) != Some(id) {
            return out;
        }
        let Some(pending) = t.pending.take() else {
            return out;
        };
        match result {
            Err(e) => {
                tracing::warn!(transactional_id = %txn_id, error = %e, target = ?pending.target.state,
                    "writing transaction state failed; rolling back");
                let persisted = t.persisted;
                if matches!(pending.then, Then::Completed) {
                    // The markers are written: only the completion record is missing.
                    t.complete_retry_at = Some(now_ms.saturating_add(self.config.retry_backoff_ms));
                } else if !persisted {
                    self.txns.remove(&txn_id);
                }
                self.fail_pending(pending.then, write_error(e), &mut out);
            }
            Ok(()) => {
                if matches!(pending.then, Then::Expired) {
                    self.txns.remove(&txn_id);
                    tracing::info!(transactional_id = %txn_id, "expired transactional id removed");
                    return out;
                }
                t.value = pending.target;
                t.persisted = true;
                if matches!(
                    t.value.state,
                    TxnState::PrepareCommit | TxnState::PrepareAbort
                ) {
                    t.markers_pending = t.value.partitions.clone();
                } else {
                    t.markers_pending.clear();
                }
                let value = t.value.clone();
                match pending.then {
                    Then::InitPid { token, version } => {
                        out.responses.push((
                            token,
                            init_pid_response(
                                version,
                                Ok((value.producer_id, value.producer_epoch)),
                            ),
                        ));
                    }
                    Then::Added(reply) => self.answer_add(reply, Ok(()), &mut out),
                    Then::Prepared { reply } => {
                        match reply {
                            Some((token, version, ReplyKind::EndTxn)) => out.responses.push((
                                token,
                                end_txn_response(
                                    version,
                                    ErrorCode::None,
                                    Some((value.producer_id, value.producer_epoch)),
                                ),
                            )),
                            Some((token, version, ReplyKind::InitPid)) => out.responses.push((
                                token,
                                init_pid_response(version, Err(ErrorCode::ConcurrentTransactions)),
                            )),
                            None => {}
                        }
                        let epoch = self.owned.get(&t_partition(&self.txns, &txn_id)).copied();
                        if let (Some(epoch), Some(t)) = (epoch, self.txns.get(&txn_id)) {
                            let m = marker_request(t, epoch);
                            if m.partitions.is_empty() {
                                self.complete(&txn_id, now_ms, &mut out);
                            } else {
                                out.markers.push(m);
                            }
                        }
                    }
                    Then::Completed | Then::Expired => {}
                }
            }
        }
        out
    }

    /// Reports a marker written (or its partition gone). When the last partition of a
    /// transaction has its marker, the completion is written.
    pub fn marker_written(&mut self, ack: &MarkerAck, now_ms: i64) -> TxnOutput {
        let mut out = TxnOutput::default();
        let Some(t) = self.txns.get_mut(&ack.transactional_id) else {
            return out;
        };
        let preparing = matches!(
            t.value.state,
            TxnState::PrepareCommit | TxnState::PrepareAbort
        );
        if !preparing
            || t.value.producer_id != ack.producer_id
            || t.value.producer_epoch != ack.producer_epoch
        {
            return out;
        }
        t.markers_pending
            .remove(&(ack.topic.clone(), ack.partition));
        if t.markers_pending.is_empty() && t.pending.is_none() && t.complete_retry_at.is_none() {
            let id = t.id.clone();
            self.complete(&id, now_ms, &mut out);
        }
        out
    }

    /// Writes CompleteCommit/CompleteAbort for a transaction whose markers are all written.
    fn complete(&mut self, txn_id: &str, now_ms: i64, out: &mut TxnOutput) {
        let Some(t) = self.txns.get_mut(txn_id) else {
            return;
        };
        t.complete_retry_at = None;
        let mut target = t.value.clone();
        target.state = match t.value.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            _ => return,
        };
        target.partitions.clear();
        target.last_update_ms = now_ms;
        if target.client_txn_version >= 2 && target.next_producer_id >= 0 {
            // The bump exhausted the epoch: the markers are written, the id moves to the
            // producer id allocated when the transaction ended (Kafka's prepareComplete).
            target.prev_producer_id = target.producer_id;
            target.producer_id = target.next_producer_id;
            target.next_producer_id = -1;
            target.last_producer_epoch = target.producer_epoch;
            target.producer_epoch = 0;
        }
        self.begin(txn_id, target, Then::Completed, out);
    }

    fn answer_add(&mut self, reply: AddReply, result: Result<(), ErrorCode>, out: &mut TxnOutput) {
        let e = result.err().unwrap_or(ErrorCode::None);
        match reply {
            AddReply::Partitions {
                token,
                version,
                topics,
            } => {
                let e = for_version(e, version, 2);
                out.responses
                    .push((token, add_partitions_response(&topics, |_, _| e)));
            }
            AddReply::AddOffsets { token, version } => {
                out.responses
                    .push((token, add_offsets_response(version, e)));
            }
            AddReply::Batch { token, slot } => {
                let Some(b) = self.batches.get_mut(&token) else {
                    return;
                };
                if let Some(r) = b.results.get_mut(slot) {
                    for tr in &mut r.topic_results {
                        for pr in &mut tr.results_by_partition {
                            pr.partition_error_code = e.code();
                        }
                    }
                }
                b.waiting = b.waiting.saturating_sub(1);
                if b.waiting == 0 {
                    if let Some(b) = self.batches.remove(&token) {
                        out.responses.push((token, batch_response(b.results)));
                    }
                }
            }
        }
    }

    /// Answers the request behind a pending transition that will not happen.
    fn fail_pending(&mut self, then: Then, e: ErrorCode, out: &mut TxnOutput) {
        match then {
            Then::InitPid { token, version } => {
                out.responses
                    .push((token, init_pid_response(version, Err(e))));
            }
            Then::Added(reply) => self.answer_add(reply, Err(e), out),
            Then::Prepared { reply } => match reply {
                Some((token, version, ReplyKind::EndTxn)) => {
                    out.responses
                        .push((token, end_txn_response(version, e, None)));
                }
                Some((token, version, ReplyKind::InitPid)) => {
                    out.responses
                        .push((token, init_pid_response(version, Err(e))));
                }
                None => {}
            },
            Then::Completed | Then::Expired => {}
        }
    }

    // ---- time ---------------------------------------------------------------------------------

    /// Aborts timed-out transactions (every `transaction.abort.timed.out.transaction.
    /// cleanup.interval.ms`), expires idle transactional ids (every `transaction.remove.
    /// expired.transaction.cleanup.interval.ms`) and retries failed completion writes.
    pub fn tick(&mut self, now_ms: i64) -> TxnOutput {
        let mut out = TxnOutput::default();
        let retry: Vec<String> = self
            .txns
            .values()
            .filter(|t| t.complete_retry_at.is_some_and(|at| at <= now_ms) && t.pending.is_none())
            .map(|t| t.id.clone())
            .collect();
        for id in retry {
            self.complete(&id, now_ms, &mut out);
        }
        if self.next_abort_check_ms.is_some_and(|t| t <= now_ms) {
            self.abort_timed_out(now_ms, &mut out);
            self.next_abort_check_ms =
                Some(now_ms.saturating_add(self.config.abort_timed_out_interval_ms.max(1)));
        }
        if self.next_expire_check_ms.is_some_and(|t| t <= now_ms) {
            self.expire_ids(now_ms, &mut out);
            self.next_expire_check_ms =
                Some(now_ms.saturating_add(self.config.remove_expired_interval_ms.max(1)));
        }
        // Parked requests last: one whose id was just fenced by a timeout abort sees that.
        let due: Vec<String> = self
            .parked
            .iter()
            .filter(|(_, list)| list.iter().any(|p| p.until_ms <= now_ms))
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            let list = self.parked.remove(&id).unwrap_or_default();
            for p in list {
                // Past its wait: answered now (CONCURRENT_TRANSACTIONS if still busy).
                let may_park = p.until_ms > now_ms;
                self.run_add(&id, p, now_ms, may_park, &mut out);
            }
        }
        out
    }

    /// When `tick` should run next.
    pub fn next_deadline(&self) -> Option<i64> {
        self.txns
            .values()
            .filter_map(|t| t.complete_retry_at)
            .chain(self.parked.values().flatten().map(|p| p.until_ms))
            .chain(self.next_abort_check_ms)
            .chain(self.next_expire_check_ms)
            .min()
    }

    fn abort_timed_out(&mut self, now_ms: i64, out: &mut TxnOutput) {
        let timed_out: Vec<String> = self
            .txns
            .values()
            .filter(|t| {
                self.owned.contains_key(&t.partition)
                    && t.pending.is_none()
                    && t.value.state == TxnState::Ongoing
                    && t.value
                        .start_ms
                        .saturating_add(i64::from(t.value.timeout_ms))
                        < now_ms
            })
            .map(|t| t.id.clone())
            .collect();
        for id in timed_out {
            let Some(t) = self.txns.get(&id) else {
                continue;
            };
            tracing::info!(transactional_id = %id, producer_id = t.value.producer_id,
                epoch = t.value.producer_epoch, "aborting a timed-out transaction (fencing its producer)");
            // Kafka's prepareFenceProducerEpoch, then an abort with the bumped epoch.
            let mut target = t.value.clone();
            target.producer_epoch = t.value.producer_epoch.saturating_add(fence_bump(&t.value));
            target.last_producer_epoch = -1;
            target.state = TxnState::PrepareAbort;
            target.last_update_ms = now_ms;
            self.begin(&id, target, Then::Prepared { reply: None }, out);
        }
    }

    fn expire_ids(&mut self, now_ms: i64, out: &mut TxnOutput) {
        let expiration = self.config.id_expiration_ms;
        let expired: Vec<(String, i32)> = self
            .txns
            .values()
            .filter(|t| {
                self.owned.contains_key(&t.partition)
                    && t.persisted
                    && t.pending.is_none()
                    && t.value.state.expiration_allowed()
                    && t.value.last_update_ms <= now_ms.saturating_sub(expiration)
            })
            .map(|t| (t.id.clone(), t.partition))
            .collect();
        for (id, partition) in expired {
            let wid = self.next_write;
            self.next_write += 1;
            self.writes.insert(wid, id.clone());
            if let Some(t) = self.txns.get_mut(&id) {
                let mut target = t.value.clone();
                target.state = TxnState::Dead;
                t.pending = Some(Pending {
                    write: wid,
                    target,
                    then: Then::Expired,
                });
            }
            out.writes.push(TxnWrite {
                id: wid,
                partition,
                key: log::encode_key(&id),
                value: None,
            });
        }
    }
}

fn t_partition(txns: &BTreeMap<String, Txn>, id: &str) -> i32 {
    txns.get(id).map_or(-1, |t| t.partition)
}

fn marker_request(t: &Txn, coordinator_epoch: i32) -> MarkerRequest {
    MarkerRequest {
        transactional_id: t.id.clone(),
        producer_id: t.value.producer_id,
        producer_epoch: t.value.producer_epoch,
        coordinator_epoch,
        txn_partition: t.partition,
        commit: t.value.state == TxnState::PrepareCommit,
        partitions: t.markers_pending.iter().cloned().collect(),
    }
}

fn batch_response(results: Vec<AddPartitionsToTxnResult>) -> ResponseKind {
    let mut resp = AddPartitionsToTxnResponse::default();
    resp.results_by_transaction = results;
    ResponseKind::AddPartitionsToTxn(resp)
}

impl Txn {
    fn snapshot(&self) -> TxnSnapshot {
        TxnSnapshot {
            transactional_id: self.id.clone(),
            value: self.value.clone(),
            markers_pending: self.markers_pending.clone(),
            write_in_flight: self.pending.is_some(),
        }
    }
}
