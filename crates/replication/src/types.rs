//! The inputs and outputs of the replication core: committed partition metadata, what it
//! reads of the local log, fetch requests and answers, AlterPartition, and `Action`s.

pub use model::{EpochEndOffset, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET};
use model::{ErrorCode, LeaderEpoch, NodeId, Offset};

/// The epoch of a partition's state (leader, ISR, replicas) in the metadata log; bumped by
/// the controller on every change (KIP-497), so a stale AlterPartition is refused.
pub type PartitionEpoch = i32;

/// A partition's committed state in the metadata image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionState {
    /// None when the partition has no leader (offline).
    pub leader: Option<NodeId>,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    pub replicas: Vec<NodeId>,
    pub isr: Vec<NodeId>,
}

/// Per-replica settings (Kafka's names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// This broker's id.
    pub node_id: NodeId,
    /// `replica.lag.time.max.ms`: a follower that has not caught up for this long leaves
    /// the ISR.
    pub replica_lag_time_max_ms: i64,
    /// `min.insync.replicas` (topic, else broker).
    pub min_insync_replicas: usize,
    /// An AlterPartition without an answer is sent again after this long.
    pub alter_partition_retry_ms: i64,
    /// A follower's fetch without an answer is abandoned (and a new one sent) after this
    /// long (the fetcher's request timeout).
    pub fetch_timeout_ms: i64,
    /// `replica.fetch.backoff.ms`: pause after an error answer.
    pub fetch_backoff_ms: i64,
    /// Test seam: breaks one rule on purpose so the simulation can show it catches it.
    /// Always `Mutation::None` outside tests.
    #[doc(hidden)]
    pub mutation: Mutation,
}

impl ReplicaConfig {
    pub fn new(node_id: NodeId) -> ReplicaConfig {
        ReplicaConfig {
            node_id,
            replica_lag_time_max_ms: 30_000,
            min_insync_replicas: 1,
            alter_partition_retry_ms: 5_000,
            fetch_timeout_ms: 30_000,
            fetch_backoff_ms: 1_000,
            mutation: Mutation::None,
        }
    }
}

/// Deliberately broken rules, for proving the simulation test can fail.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mutation {
    #[default]
    None,
    /// The leader takes its own LEO as the HW (ignores the followers and durability).
    HwFromLeaderLeo,
    /// A new follower truncates to its HW and fetches without its last epoch (pre-KIP-101).
    TruncateToHw,
    /// The leader ignores `current_leader_epoch` and `last_fetched_epoch` (pre-KIP-320).
    NoEpochChecks,
}

/// What the core reads of the local log: in-memory values the log keeps, no I/O.
pub trait LogView {
    fn log_start_offset(&self) -> Offset;
    fn log_end_offset(&self) -> Offset;
    /// Every offset below this one is on disk (fsynced).
    fn durable_offset(&self) -> Offset;
    /// The latest epoch in the leader-epoch cache.
    fn latest_epoch(&self) -> Option<LeaderEpoch>;
    /// OffsetForLeaderEpoch on the local epoch cache (Kafka's semantics).
    fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> EpochEndOffset;
}

/// One partition of a Fetch request, from a follower (`replica_id`) or a consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchRequest {
    /// Some(broker id) for a follower's fetch (ReplicaState), None for a consumer.
    pub replica_id: Option<NodeId>,
    pub fetch_offset: Offset,
    /// KIP-320: the leader epoch the sender believes current; None = not checked.
    pub current_leader_epoch: Option<LeaderEpoch>,
    /// The epoch of the last batch the sender has (Fetch v12+); None = not checked.
    pub last_fetched_epoch: Option<LeaderEpoch>,
    /// A follower's fetch, on the leader: whether the follower's broker may join the ISR
    /// now, per the leader's metadata image (Kafka's `isReplicaIsrEligible`, KIP-841:
    /// registered, not fenced, not in controlled shutdown). Its progress is recorded either
    /// way, but an ineligible follower is not proposed for the ISR: the controller would
    /// refuse it, and a refused member keeps counting for the HW.
    pub isr_eligible: bool,
}

/// The leader's answer to one partition of a Fetch. When `read` is Some, the runtime reads
/// whole batches from `read.from` below `read.upper_bound` and sends them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchAnswer {
    pub error: ErrorCode,
    pub high_watermark: Offset,
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
    /// KIP-951 hint on NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH: who leads, in which epoch.
    pub current_leader: Option<(NodeId, LeaderEpoch)>,
    /// Set when the sender's log diverges from this one: truncate by it, then fetch again.
    pub diverging_epoch: Option<EpochEndOffset>,
    pub read: Option<ReadRange>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadRange {
    pub from: Offset,
    /// Exclusive: the HW for consumers, the LEO for followers.
    pub upper_bound: Offset,
}

/// A fetch the follower wants sent to its leader (one partition of a Fetch request with
/// `replica_id` = this broker). `fetch_id` pairs the answer with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchPlan {
    pub fetch_id: u64,
    pub leader: NodeId,
    pub request: FetchRequest,
}

/// A follower's view of the leader's answer to its fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchResponse {
    pub error: ErrorCode,
    pub high_watermark: Offset,
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
    pub diverging_epoch: Option<EpochEndOffset>,
    /// Whether the answer carries record batches (to append with the leader's offsets).
    pub has_records: bool,
}

/// An ISR change proposed by the leader (KIP-497).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterPartitionRequest {
    pub broker_id: NodeId,
    pub leader_epoch: LeaderEpoch,
    /// The partition epoch the proposal is based on; the controller refuses any other.
    pub partition_epoch: PartitionEpoch,
    pub new_isr: Vec<NodeId>,
}

/// The controller's answer: the committed state, or Kafka's error
/// (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, INELIGIBLE_REPLICA, NOT_CONTROLLER...).
pub type AlterPartitionResult = Result<PartitionState, ErrorCode>;

/// The runtime's handle for one acks=all produce waiting for the HW.
pub type AckId = u64;

/// What the runtime must do after an input, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The high watermark moved (forward, or set by a new role): publish it to readers.
    HighWatermark(Offset),
    /// An acks=all produce is done: answer it with `error` (NONE = success).
    AckDone { id: AckId, error: ErrorCode },
    /// Send this to the controller.
    AlterPartition(AlterPartitionRequest),
    /// This replica leads `epoch` from `start_offset` on: record it in the log's epoch cache
    /// (before serving fetches in the epoch).
    AssignLeaderEpoch {
        epoch: LeaderEpoch,
        start_offset: Offset,
    },
    /// The next truncation cuts below this replica's high watermark (`high_watermark`, now
    /// lowered to `offset`): records it counted as committed are not on the leader the
    /// controller chose. Only an unclean election (or a broken peer) does that; Kafka's
    /// fetcher truncates anyway with a warning, and so does Moldau. The runtime logs it.
    TruncatingBelowHighWatermark {
        offset: Offset,
        high_watermark: Offset,
    },
    /// Truncate the log to `offset` (exclusive; at most the LEO), then call
    /// `on_log_changed`. At the LEO it still drops epoch-cache entries starting there.
    Truncate { offset: Offset },
    /// Empty the log and restart it at `offset` (the leader's log start is past ours),
    /// then call `on_log_changed`.
    TruncateFullyAndStartAt { offset: Offset },
    /// Append the records of the fetch answer just handled (`append_replicated`), then
    /// call `on_log_changed`.
    AppendFetched,
    /// Make the log durable up to `offset` (group commit), then call `on_log_changed`.
    Flush { offset: Offset },
    /// Send this fetch to the leader.
    Fetch(FetchPlan),
}
