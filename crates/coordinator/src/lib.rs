//! The group coordinator as a sans-IO state machine: classic groups
//! (JoinGroup/SyncGroup/Heartbeat/LeaveGroup), consumer-protocol groups of KIP-848
//! (ConsumerGroupHeartbeat/ConsumerGroupDescribe, [`consumer`]), offsets and group admin;
//! requests and the current time in, responses and `__consumer_offsets` records out.
//!
//! # Driving it (the broker runtime's side)
//! - One [`GroupCoordinator`] per broker, single-threaded (`&mut self`); wrap it in a Mutex.
//! - Give every request a [`RequestToken`] (unique per in-flight request) in its
//!   [`RequestContext`]. Every call returns an [`Output`]: `responses` may answer the request
//!   itself *and* earlier delayed requests (a JoinGroup is answered when the rebalance
//!   completes, a follower's SyncGroup when the leader's assignment arrives). Route each
//!   response to the connection that sent the token; a token that is not in `responses` yet
//!   is pending. Every token is answered exactly once (also on unload: NOT_COORDINATOR).
//! - Append `Output::records` to their `__consumer_offsets` partitions and make them durable
//!   *before* sending any response of the same `Output`. If that fails, unload the partition
//!   (and reload by replay) rather than sending the responses.
//! - Call [`GroupCoordinator::tick`] at [`GroupCoordinator::next_deadline`] (or earlier; it is
//!   idempotent) to expire sessions, finish rebalances and expire offsets.
//! - On start (or when this broker becomes leader of a `__consumer_offsets` partition): call
//!   [`GroupCoordinator::begin_loading`] (optional: clients then see
//!   COORDINATOR_LOAD_IN_PROGRESS and retry), feed every record of the partition to
//!   [`GroupCoordinator::replay`] in log order, then call [`GroupCoordinator::load_partition`].
//!   Groups on partitions that are not loaded get NOT_COORDINATOR. When leadership moves
//!   away, [`GroupCoordinator::unload_partition`] answers parked requests with NOT_COORDINATOR.
//! - [`GroupCoordinator::handle`] takes any decoded request and runs the group APIs
//!   (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, OffsetDelete,
//!   ListGroups, DescribeGroups, DeleteGroups, ConsumerGroupHeartbeat, ConsumerGroupDescribe),
//!   handing other requests back.
//! - Consumer groups assign partitions by topic id: call [`GroupCoordinator::set_topics`] with
//!   the cluster's topics whenever the metadata changes (cheap when nothing changed).
//!   FindCoordinator is the free function [`find_coordinator`]: it needs the runtime's view of
//!   which broker leads which `__consumer_offsets` partition ([`partition_for`]).
//!
//! ```text
//! let out = coordinator.lock().handle(&ctx, request, now_ms)?;   // or join_group(...) etc.
//! storage.append_and_sync(out.records)?;                         // durable first,
//! for (token, response) in out.responses { route(token, response) } // then answer
//! // a timer task: sleep until coordinator.next_deadline(), then handle coordinator.tick(now)
//! ```

mod config;
pub mod consumer;
mod coordinator;
mod group;
pub mod records;
pub mod txn;

use bytes::Bytes;
use protocol::ResponseKind;

pub use config::CoordinatorConfig;
pub use consumer::{ConsumerGroupState, TopicInfo, TopicsImage};
pub use coordinator::{
    find_coordinator, partition_for, CoordinatorNode, GroupCoordinator, GroupSummary,
};
pub use group::{GroupSnapshot, GroupState, MemberSnapshot, OffsetSnapshot};
pub use txn::{
    MarkerAck, MarkerRequest, TransactionCoordinator, TxnConfig, TxnEnv, TxnOutput, TxnSnapshot,
    TxnState, TxnWrite, WriteId,
};

/// Names one in-flight request so a delayed response can be routed back to its connection.
pub type RequestToken = u64;

/// Who sent a request and how: the parts of the request header and connection the
/// coordinator needs.
#[derive(Clone, Copy, Debug)]
pub struct RequestContext<'a> {
    pub token: RequestToken,
    /// The API version of the request; the response is built for this version.
    pub api_version: i16,
    pub client_id: &'a str,
    /// The client's address as Kafka shows it (`/127.0.0.1`).
    pub client_host: &'a str,
    /// The topics the requester may see, for the subscription regexes this request resolves.
    pub visible_topics: TopicVisibility<'a>,
}

/// Which topics a request's principal may see: DESCRIBE on the topic, as the runtime's
/// authorizer decides. Kafka keeps only such topics in what the subscription regexes of a
/// consumer group resolve to (`TopicRegexResolver.filterTopicDescribeAuthorizedTopics`, with
/// the principal of the heartbeat that triggers the resolution); the coordinator is handed
/// this filter rather than calling an authorizer itself. `ALL` without an authorizer.
#[derive(Clone, Copy)]
pub struct TopicVisibility<'a>(Option<&'a dyn Fn(&str) -> bool>);

impl<'a> TopicVisibility<'a> {
    /// Every topic (no authorizer configured).
    pub const ALL: TopicVisibility<'static> = TopicVisibility(None);

    /// The topics for which `may_describe` answers true.
    pub fn only(may_describe: &'a dyn Fn(&str) -> bool) -> TopicVisibility<'a> {
        TopicVisibility(Some(may_describe))
    }

    /// Whether the requester may see `topic`.
    pub fn sees(&self, topic: &str) -> bool {
        self.0.is_none_or(|may_describe| may_describe(topic))
    }
}

impl std::fmt::Debug for TopicVisibility<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Authorized"
        } else {
            "All"
        })
    }
}

/// A record to append to `__consumer_offsets`; `value: None` is a tombstone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub partition: i32,
    pub key: Bytes,
    pub value: Option<Bytes>,
}

/// Records written inside a producer's transaction (TxnOffsetCommit): the runtime appends
/// them as a transactional batch of that producer id and epoch; they count only once the
/// transaction's COMMIT marker is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnRecords {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub partition: i32,
    pub records: Vec<Record>,
}

/// What a call produced. Persist `records` (and `txn_records`) before sending `responses`.
#[derive(Debug, Default)]
pub struct Output {
    pub responses: Vec<(RequestToken, ResponseKind)>,
    pub records: Vec<Record>,
    pub txn_records: Vec<TxnRecords>,
    /// What happened, for the runtime's metrics (counted by live transitions, never by replay).
    pub stats: GroupStats,
}

/// Counts of group events in one [`Output`] (Kafka's group coordinator metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Classic groups that completed a join phase with members (a new generation).
    pub classic_rebalances: u64,
    /// Consumer-protocol (KIP-848) groups that moved to a new group epoch.
    pub consumer_rebalances: u64,
    /// Offsets accepted by OffsetCommit (one per partition; persisted before the answer).
    pub offset_commits: u64,
}

impl GroupStats {
    pub fn add(&mut self, other: GroupStats) {
        self.classic_rebalances += other.classic_rebalances;
        self.consumer_rebalances += other.consumer_rebalances;
        self.offset_commits += other.offset_commits;
    }
}

impl Output {
    /// The response for `token`, if this output has one.
    pub fn response(&self, token: RequestToken) -> Option<&ResponseKind> {
        self.responses
            .iter()
            .find(|(t, _)| *t == token)
            .map(|(_, r)| r)
    }

    /// Appends another output (records first keep their order).
    pub fn extend(&mut self, other: Output) {
        self.responses.extend(other.responses);
        self.records.extend(other.records);
        self.txn_records.extend(other.txn_records);
        self.stats.add(other.stats);
    }
}

/// Errors of this crate: only replay can fail (a corrupt or unknown record).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("corrupt __consumer_offsets record: {0}")]
    Corrupt(&'static str),
    #[error("unsupported {what} version {version}")]
    UnsupportedVersion { what: &'static str, version: i16 },
}
