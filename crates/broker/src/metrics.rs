//! The broker's metrics: hot-path counters (requests, errors, latency phases, connections,
//! bytes and records per topic) and what is read from the broker's state at scrape time
//! (partitions, logs, groups, consumer lag).
//!
//! *Hot path:* every counter is an atomic at a fixed place. Requests, errors and latencies
//! sit in arrays indexed by API key, version and error code (no lookup, no lock, no
//! allocation per request); per-topic counters are an `Arc<TopicStats>` each hosted
//! `Partition` holds from its creation. Names and labels are attached only when
//! `/metrics` is scraped.
//!
//! The counters are process-wide (one broker per process in production, as Kafka's own
//! default metrics registry is per JVM); brokers embedded together in one test process share
//! them. Scrape-time metrics read the given broker's state.
//!
//! The `uncounted` cargo feature compiles the hot-path counting out (requests, errors,
//! latencies and their clock reads, bytes and records per topic, delayed operations): only
//! for measuring what counting costs (`scripts/bench/metrics.py --uncounted`); such a
//! build exports zeros for those series.

use crate::state::BrokerState;
use model::ErrorCode;
use protocol::{ApiKey, ResponseKind};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use telemetry::prometheus_client::registry::Unit;
use telemetry::{Histogram, Scrape, NO_LABELS};

/// False in a build with the `uncounted` feature: the hot path counts nothing.
pub const COUNTING: bool = !cfg!(feature = "uncounted");

/// The clock of request timing: `Instant::now()`, or in an `uncounted` build a fixed
/// instant (no clock read).
pub fn now() -> Instant {
    if COUNTING {
        Instant::now()
    } else {
        static FIXED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *FIXED.get_or_init(Instant::now)
    }
}

const API_SLOTS: usize = 128;
const VERSION_SLOTS: usize = 32;
/// Error codes -1..=190 (Kafka's highest is in the 130s).
const CODE_SLOTS: usize = 192;

/// The phases of a request's time, as Kafka splits `RequestMetrics` (Kafka's request-queue
/// phase does not exist here: a request is handled by the connection task that read it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// From the request read to its response written.
    Total = 0,
    /// The handler's synchronous part (validation, append, read).
    Local = 1,
    /// Waiting behind earlier responses of the same connection.
    ResponseQueue = 2,
    /// Waiting for something else: acks=all durability, a Fetch long-poll, a rebalance.
    Remote = 3,
    /// Writing the response to the socket.
    Send = 4,
}
const PHASES: usize = 5;
const PHASE_NAMES: [&str; PHASES] = ["total", "local", "response_queue", "remote", "send"];

/// Counters of one topic on this broker. Partitions of a topic share one.
#[derive(Debug, Default)]
pub struct TopicStats {
    pub bytes_in: AtomicU64,
    pub records_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub records_out: AtomicU64,
}

impl TopicStats {
    pub fn produced(&self, bytes: usize, records: i64) {
        if !COUNTING {
            return;
        }
        self.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
        self.records_in
            .fetch_add(records.max(0) as u64, Ordering::Relaxed);
    }

    pub fn fetched(&self, bytes: usize, records: i64) {
        if !COUNTING {
            return;
        }
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
        self.records_out
            .fetch_add(records.max(0) as u64, Ordering::Relaxed);
    }
}

/// Connections of one listener.
#[derive(Debug)]
pub struct ListenerStats {
    name: String,
    accepted: AtomicU64,
    closed: AtomicU64,
    /// Microseconds the accept loop waited for a slot (`max.connections`, the listener's own
    /// limit), as Kafka's `AcceptorBlockedPercent`.
    blocked_us: AtomicU64,
    /// Microseconds the accept loop paused for `max.connection.creation.rate`, as Kafka's
    /// `connection-accept-throttle-time`.
    throttled_us: AtomicU64,
    /// Connections closed because the broker was over `max.connections` (the least recently
    /// active first, as Kafka's `closeExcessConnections`).
    closed_over_max: AtomicU64,
}

impl ListenerStats {
    /// Counts an accepted connection; the guard counts its close when dropped.
    pub fn opened(self: &Arc<Self>) -> ConnectionGuard {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard(self.clone())
    }

    /// Counts time the accept loop waited for a connection slot.
    pub fn accept_blocked(&self, d: std::time::Duration) {
        self.blocked_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Counts time the accept loop paused for the connection creation rate.
    pub fn accept_throttled(&self, d: std::time::Duration) {
        self.throttled_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Counts a connection closed because the broker was over `max.connections`.
    pub fn closed_over_max(&self) {
        self.closed_over_max.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts a connection's close when dropped.
#[derive(Debug)]
pub struct ConnectionGuard(Arc<ListenerStats>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.closed.fetch_add(1, Ordering::Relaxed);
    }
}

/// Requests parked until something happens (Kafka's purgatories).
#[derive(Clone, Copy, Debug)]
pub enum Delayed {
    /// acks=all produce waiting for its batches to be durable.
    Produce = 0,
    /// Fetch long-poll waiting for min.bytes or max.wait.ms.
    Fetch = 1,
}
const DELAYED_NAMES: [&str; 2] = ["produce", "fetch"];

/// Counts a delayed operation as waiting until dropped.
#[derive(Debug)]
pub struct DelayedGuard(Delayed);

impl Drop for DelayedGuard {
    fn drop(&mut self) {
        if COUNTING {
            METRICS.delayed[self.0 as usize].fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The process-wide broker counters (see the module docs).
pub struct BrokerMetrics {
    delayed: [std::sync::atomic::AtomicI64; 2],
    requests: [AtomicU64; API_SLOTS * VERSION_SLOTS],
    errors: [AtomicU64; API_SLOTS * CODE_SLOTS],
    latency: [[Histogram; PHASES]; API_SLOTS],
    listeners: Mutex<Vec<Arc<ListenerStats>>>,
    topics: Mutex<BTreeMap<String, Arc<TopicStats>>>,
    /// Classic rebalances, consumer-group epoch bumps, offsets committed.
    group_events: [AtomicU64; 3],
    /// Submit-to-answer time of metadata changes decided by the local active controller.
    metadata_commit: Histogram,
    /// ISR shrinks and expands of partitions this broker leads.
    isr_changes: [AtomicU64; 2],
    /// Throttled responses and their throttle time (ms) by client quota (produce, fetch,
    /// request).
    throttled: [AtomicU64; 4],
    throttle_ms: [AtomicU64; 4],
    /// Connections closed at once for being over `max.connections.per.ip`.
    connections_refused: AtomicU64,
    /// Bytes of throttled replicas replicated (KIP-73), leader side then follower side.
    replication_throttled_bytes: [AtomicU64; 2],
}

pub static METRICS: BrokerMetrics = BrokerMetrics {
    delayed: [const { std::sync::atomic::AtomicI64::new(0) }; 2],
    requests: [const { AtomicU64::new(0) }; API_SLOTS * VERSION_SLOTS],
    errors: [const { AtomicU64::new(0) }; API_SLOTS * CODE_SLOTS],
    latency: [const { [const { Histogram::new() }; PHASES] }; API_SLOTS],
    listeners: Mutex::new(Vec::new()),
    topics: Mutex::new(BTreeMap::new()),
    group_events: [const { AtomicU64::new(0) }; 3],
    metadata_commit: Histogram::new(),
    isr_changes: [const { AtomicU64::new(0) }; 2],
    throttled: [const { AtomicU64::new(0) }; 4],
    throttle_ms: [const { AtomicU64::new(0) }; 4],
    connections_refused: AtomicU64::new(0),
    replication_throttled_bytes: [const { AtomicU64::new(0) }; 2],
};

const QUOTA_NAMES: [&str; 4] = ["produce", "fetch", "request", "controller_mutation"];

fn api_slot(api: ApiKey) -> usize {
    (api as i16).clamp(0, API_SLOTS as i16 - 1) as usize
}

impl BrokerMetrics {
    /// Counts a decoded request.
    pub fn request(&self, api: ApiKey, version: i16) {
        if !COUNTING {
            return;
        }
        let v = version.clamp(0, VERSION_SLOTS as i16 - 1) as usize;
        self.requests[api_slot(api) * VERSION_SLOTS + v].fetch_add(1, Ordering::Relaxed);
    }

    pub fn observe_ns(&self, api: ApiKey, phase: Phase, ns: u64) {
        if !COUNTING {
            return;
        }
        self.latency[api_slot(api)][phase as usize].observe_ns(ns);
    }

    /// Counts one error code (other than NONE) in a response of `api`.
    pub fn error(&self, api: ApiKey, code: i16) {
        if code == 0 || !COUNTING {
            return;
        }
        let c = (code + 1).clamp(0, CODE_SLOTS as i16 - 1) as usize;
        self.errors[api_slot(api) * CODE_SLOTS + c].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `kind` as waiting until the guard is dropped.
    pub fn delayed(&self, kind: Delayed) -> DelayedGuard {
        if COUNTING {
            self.delayed[kind as usize].fetch_add(1, Ordering::Relaxed);
        }
        DelayedGuard(kind)
    }

    /// The counters of a listener (taken once, when it starts accepting).
    pub fn listener(&self, name: &str) -> Arc<ListenerStats> {
        let mut l = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = l.iter().find(|s| s.name == name) {
            return s.clone();
        }
        let s = Arc::new(ListenerStats {
            name: name.to_string(),
            accepted: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            blocked_us: AtomicU64::new(0),
            throttled_us: AtomicU64::new(0),
            closed_over_max: AtomicU64::new(0),
        });
        l.push(s.clone());
        s
    }

    /// The counters of a topic (taken once per hosted partition, when it is created).
    pub fn topic(&self, topic: &str) -> Arc<TopicStats> {
        self.topics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(topic.to_string())
            .or_default()
            .clone()
    }

    /// Counts what the group coordinator did (from each of its outputs).
    pub fn group_events(&self, stats: &coordinator::GroupStats) {
        let e = &self.group_events;
        e[0].fetch_add(stats.classic_rebalances, Ordering::Relaxed);
        e[1].fetch_add(stats.consumer_rebalances, Ordering::Relaxed);
        e[2].fetch_add(stats.offset_commits, Ordering::Relaxed);
    }

    /// Times a metadata change this node's active controller decided and committed.
    pub fn metadata_commit(&self, d: Duration) {
        self.metadata_commit.observe(d);
    }

    /// Counts one committed ISR change of a partition this broker leads.
    pub fn isr_changes(&self, shrunk: bool, expanded: bool) {
        if shrunk {
            self.isr_changes[0].fetch_add(1, Ordering::Relaxed);
        }
        if expanded {
            self.isr_changes[1].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a response throttled by a client quota, and its throttle time.
    pub fn throttled(&self, kind: auth::quota::QuotaKind, ms: i64) {
        let i = match kind {
            auth::quota::QuotaKind::Produce => 0,
            auth::quota::QuotaKind::Fetch => 1,
            auth::quota::QuotaKind::Request => 2,
        };
        self.throttled[i].fetch_add(1, Ordering::Relaxed);
        self.throttle_ms[i].fetch_add(ms.max(0) as u64, Ordering::Relaxed);
    }

    /// Counts a response throttled by the client's controller mutation quota (KIP-599), and
    /// its throttle time, on the broker that mutes the client's connection for it.
    pub fn mutation_throttled(&self, ms: i64) {
        self.throttled[3].fetch_add(1, Ordering::Relaxed);
        self.throttle_ms[3].fetch_add(ms.max(0) as u64, Ordering::Relaxed);
    }

    /// Counts bytes replicated for throttled replicas (sent as leader or fetched as follower).
    pub fn replication_throttled_bytes(&self, side: crate::quotas::ReplicationSide, bytes: usize) {
        let i = match side {
            crate::quotas::ReplicationSide::Leader => 0,
            crate::quotas::ReplicationSide::Follower => 1,
        };
        self.replication_throttled_bytes[i].fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Counts a connection closed for being over its address's limit.
    pub fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// The request counter of (api, version); for tests.
    pub fn requests_of(&self, api: ApiKey, version: i16) -> u64 {
        let v = version.clamp(0, VERSION_SLOTS as i16 - 1) as usize;
        self.requests[api_slot(api) * VERSION_SLOTS + v].load(Ordering::Relaxed)
    }
}

/// The name of the client listener, for `moldau_connections{listener}`: the first entry of
/// `listeners` (`NAME://HOST:PORT`), PLAINTEXT when it names none.
pub fn listener_name(config: &model::BrokerConfig) -> String {
    config
        .props
        .get("listeners")
        .and_then(|l| l.split(',').next())
        .and_then(|l| l.split_once("://"))
        .map_or_else(
            || "PLAINTEXT".to_string(),
            |(name, _)| name.trim().to_string(),
        )
}

/// Times one request through its phases; see [`Phase`]. Every later instant is taken as
/// nanoseconds since `received` (one `Instant` difference each; a phase is then a plain
/// subtraction); an `uncounted` build computes none.
#[derive(Debug, Clone, Copy)]
pub struct RequestTimer {
    api: ApiKey,
    received: Instant,
    /// Nanoseconds from `received` to the handler's return.
    handled_ns: u64,
}

fn nanos_since(earlier: Instant, later: Instant) -> u64 {
    u64::try_from(later.saturating_duration_since(earlier).as_nanos()).unwrap_or(u64::MAX)
}

impl RequestTimer {
    /// Counts the request and starts timing it; `received` is when its frame was read.
    pub fn start(api: ApiKey, version: i16, received: Instant) -> RequestTimer {
        METRICS.request(api, version);
        RequestTimer {
            api,
            received,
            handled_ns: 0,
        }
    }

    /// The handler's synchronous part returned.
    pub fn handled(&mut self) {
        if !COUNTING {
            return;
        }
        self.handled_ns = nanos_since(self.received, now());
        METRICS.observe_ns(self.api, Phase::Local, self.handled_ns);
    }

    /// No response is sent (acks=0): the request is done.
    pub fn done_without_response(&self) {
        METRICS.observe_ns(self.api, Phase::Total, self.handled_ns);
    }

    /// The writer took the reply (`dequeued`), had it ready (`ready`: the same instant when
    /// the reply was ready when queued), wrote it (`written`).
    pub fn responded(&self, dequeued: Instant, ready: Instant, written: Instant) {
        if !COUNTING {
            return;
        }
        let dequeued_ns = nanos_since(self.received, dequeued);
        let ready_ns = if ready == dequeued {
            dequeued_ns
        } else {
            nanos_since(self.received, ready)
        };
        let written_ns = nanos_since(self.received, written);
        let phase = |p, ns: u64| METRICS.observe_ns(self.api, p, ns);
        phase(
            Phase::ResponseQueue,
            dequeued_ns.saturating_sub(self.handled_ns),
        );
        phase(Phase::Remote, ready_ns.saturating_sub(dequeued_ns));
        phase(Phase::Send, written_ns.saturating_sub(ready_ns));
        phase(Phase::Total, written_ns);
    }
}

/// Counts the error codes of a response (other than NONE), as Kafka's `ErrorsPerSec` does
/// from `AbstractResponse.errorCounts`: one per partition / topic / group / resource that
/// carries one. APIs not walked here are counted by their top-level code only.
pub fn count_errors(api: ApiKey, body: &ResponseKind) {
    if !COUNTING {
        return;
    }
    let e = |c: i16| METRICS.error(api, c);
    match body {
        ResponseKind::Produce(r) => r
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .for_each(|p| e(p.error_code)),
        ResponseKind::Fetch(r) => count_fetch_errors(api, r),
        ResponseKind::ListOffsets(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| e(p.error_code)),
        ResponseKind::Metadata(r) => {
            for t in &r.topics {
                e(t.error_code);
                t.partitions.iter().for_each(|p| e(p.error_code));
            }
        }
        ResponseKind::OffsetCommit(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| e(p.error_code)),
        ResponseKind::OffsetFetch(r) => {
            e(r.error_code);
            for g in &r.groups {
                e(g.error_code);
                g.topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .for_each(|p| e(p.error_code));
            }
            r.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .for_each(|p| e(p.error_code));
        }
        ResponseKind::FindCoordinator(r) => {
            e(r.error_code);
            r.coordinators.iter().for_each(|c| e(c.error_code));
        }
        ResponseKind::JoinGroup(r) => e(r.error_code),
        ResponseKind::SyncGroup(r) => e(r.error_code),
        ResponseKind::Heartbeat(r) => e(r.error_code),
        ResponseKind::LeaveGroup(r) => {
            e(r.error_code);
            r.members.iter().for_each(|m| e(m.error_code));
        }
        ResponseKind::ListGroups(r) => e(r.error_code),
        ResponseKind::DescribeGroups(r) => r.groups.iter().for_each(|g| e(g.error_code)),
        ResponseKind::DeleteGroups(r) => r.results.iter().for_each(|g| e(g.error_code)),
        ResponseKind::ConsumerGroupHeartbeat(r) => e(r.error_code),
        ResponseKind::CreateTopics(r) => r.topics.iter().for_each(|t| e(t.error_code)),
        ResponseKind::DeleteTopics(r) => r.responses.iter().for_each(|t| e(t.error_code)),
        ResponseKind::CreatePartitions(r) => r.results.iter().for_each(|t| e(t.error_code)),
        ResponseKind::DeleteRecords(r) => r
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .for_each(|p| e(p.error_code)),
        ResponseKind::InitProducerId(r) => e(r.error_code),
        ResponseKind::EndTxn(r) => e(r.error_code),
        ResponseKind::AddOffsetsToTxn(r) => e(r.error_code),
        ResponseKind::DescribeConfigs(r) => r.results.iter().for_each(|x| e(x.error_code)),
        ResponseKind::AlterConfigs(r) => r.responses.iter().for_each(|x| e(x.error_code)),
        ResponseKind::IncrementalAlterConfigs(r) => {
            r.responses.iter().for_each(|x| e(x.error_code))
        }
        ResponseKind::ApiVersions(r) => e(r.error_code),
        _ => {}
    }
}

/// [`count_errors`] for a Fetch response (encoded by its own chunked path).
pub fn count_fetch_errors(api: ApiKey, r: &protocol::messages::FetchResponse) {
    if !COUNTING {
        return;
    }
    METRICS.error(api, r.error_code);
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .for_each(|p| METRICS.error(api, p.error_code));
}

/// Scrape-time settings (`metrics.*` broker configs).
#[derive(Debug, Clone, Copy)]
pub struct ScrapeOptions {
    /// Export per-partition series (log sizes and offsets, consumer lag per partition);
    /// off on brokers with many partitions, which then get per-topic series only.
    pub partition_series: bool,
}

impl ScrapeOptions {
    pub fn from_config(config: &model::BrokerConfig) -> ScrapeOptions {
        ScrapeOptions {
            partition_series: config
                .props
                .get("metrics.partition.series")
                .is_none_or(|v| !v.trim().eq_ignore_ascii_case("false")),
        }
    }
}

/// Everything `/metrics` shows: the process, the counters above, and when a broker runs
/// (`state`), its partitions, logs, groups and consumer lag.
pub struct Exposition {
    pub state: Option<Arc<BrokerState>>,
}

impl telemetry::Source for Exposition {
    fn collect(&self, out: &mut Scrape<'_>) -> fmt::Result {
        out.gauge(
            "moldau_build_info",
            "Moldau's version (always 1).",
            None,
            [([("version", env!("CARGO_PKG_VERSION"))], 1)],
        )?;
        telemetry::process::ProcessStats::read().collect(out)?;
        collect_counters(out)?;
        collect_storage(out)?;
        if let Some(state) = &self.state {
            collect_state(state, ScrapeOptions::from_config(&state.config), out)?;
        }
        Ok(())
    }
}

fn api_name(slot: usize) -> Option<String> {
    ApiKey::try_from(slot as i16).ok().map(|k| format!("{k:?}"))
}

fn collect_counters(out: &mut Scrape<'_>) -> fmt::Result {
    let m = &METRICS;
    let mut requests = Vec::new();
    let mut errors = Vec::new();
    let mut latency = Vec::new();
    for api in 0..API_SLOTS {
        let Some(name) = api_name(api) else { continue };
        for v in 0..VERSION_SLOTS {
            let n = m.requests[api * VERSION_SLOTS + v].load(Ordering::Relaxed);
            if n > 0 {
                requests.push(([("api", name.clone()), ("version", v.to_string())], n));
            }
        }
        for c in 0..CODE_SLOTS {
            let n = m.errors[api * CODE_SLOTS + c].load(Ordering::Relaxed);
            if n > 0 {
                let code = ErrorCode::from_code(c as i16 - 1).name().to_string();
                errors.push(([("api", name.clone()), ("error", code)], n));
            }
        }
        for (p, phase) in PHASE_NAMES.iter().enumerate() {
            let h = &m.latency[api][p];
            if h.count() > 0 {
                latency.push((
                    [("api", name.clone()), ("phase", phase.to_string())],
                    h.snapshot(),
                ));
            }
        }
    }
    out.counter(
        "moldau_requests",
        "Requests received, by API and version.",
        None,
        requests,
    )?;
    out.counter(
        "moldau_request_errors",
        "Error codes other than NONE in responses, by API and error (one per partition, topic, group or resource that carries it).",
        None,
        errors,
    )?;
    out.histogram(
        "moldau_request_latency",
        "Request time by API and phase: total, local (handler), response_queue (behind earlier responses of the connection), remote (acks=all, long-poll, rebalance waits), send.",
        latency,
    )?;
    out.gauge(
        "moldau_delayed_operations",
        "Requests waiting: produce (acks=all, for durability), fetch (long-poll).",
        None,
        DELAYED_NAMES
            .iter()
            .enumerate()
            .map(|(i, k)| ([("kind", *k)], m.delayed[i].load(Ordering::Relaxed))),
    )?;
    let listeners = m
        .listeners
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    out.counter(
        "moldau_connections_accepted",
        "Connections accepted, by listener.",
        None,
        listeners.iter().map(|l| {
            (
                [("listener", l.name.clone())],
                l.accepted.load(Ordering::Relaxed),
            )
        }),
    )?;
    out.counter_f64(
        "moldau_connection_accept_blocked_time",
        "Time the listener's accept loop waited for a connection slot (max.connections, listener.name.<listener>.max.connections), by listener.",
        Some(Unit::Seconds),
        listeners.iter().map(|l| {
            (
                [("listener", l.name.clone())],
                l.blocked_us.load(Ordering::Relaxed) as f64 / 1e6,
            )
        }),
    )?;
    out.counter_f64(
        "moldau_connection_accept_throttle_time",
        "Time the listener's accept loop paused because connections came faster than max.connection.creation.rate, by listener.",
        Some(Unit::Seconds),
        listeners.iter().map(|l| {
            (
                [("listener", l.name.clone())],
                l.throttled_us.load(Ordering::Relaxed) as f64 / 1e6,
            )
        }),
    )?;
    out.counter(
        "moldau_connections_closed_over_max",
        "Connections closed because the broker was over max.connections (the protected inter-broker listener passed it, or it was lowered), the least recently active first, by listener.",
        None,
        listeners.iter().map(|l| {
            (
                [("listener", l.name.clone())],
                l.closed_over_max.load(Ordering::Relaxed),
            )
        }),
    )?;
    out.gauge(
        "moldau_connections",
        "Open connections, by listener.",
        None,
        listeners.iter().map(|l| {
            let open = l
                .accepted
                .load(Ordering::Relaxed)
                .saturating_sub(l.closed.load(Ordering::Relaxed));
            ([("listener", l.name.clone())], open as i64)
        }),
    )?;
    let topics: Vec<(String, Arc<TopicStats>)> = {
        let mut t = m.topics.lock().unwrap_or_else(|e| e.into_inner());
        // A topic no hosted partition holds any more (deleted, moved away) is forgotten.
        t.retain(|_, s| Arc::strong_count(s) > 1);
        t.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    let per_topic = |f: fn(&TopicStats) -> &AtomicU64| {
        topics
            .iter()
            .map(move |(name, s)| ([("topic", name.as_str())], f(s).load(Ordering::Relaxed)))
    };
    out.counter(
        "moldau_topic_produced",
        "Record batch bytes appended by producers, by topic.",
        Some(Unit::Bytes),
        per_topic(|s| &s.bytes_in),
    )?;
    out.counter(
        "moldau_topic_produced",
        "Records appended by producers, by topic.",
        Some(Unit::Other("records".into())),
        per_topic(|s| &s.records_in),
    )?;
    out.counter(
        "moldau_topic_fetched",
        "Record batch bytes sent to fetchers, by topic.",
        Some(Unit::Bytes),
        per_topic(|s| &s.bytes_out),
    )?;
    out.counter(
        "moldau_topic_fetched",
        "Records sent to fetchers (the offsets spanned by the batches sent), by topic.",
        Some(Unit::Other("records".into())),
        per_topic(|s| &s.records_out),
    )
}

fn collect_storage(out: &mut Scrape<'_>) -> fmt::Result {
    use storage::metrics::{FLUSH_LATENCY, FSYNC_FAILURES, FSYNC_LATENCY};
    out.histogram(
        "moldau_log_fsync_latency",
        "Segment fsync (fdatasync) time.",
        [(NO_LABELS, FSYNC_LATENCY.snapshot())],
    )?;
    out.histogram(
        "moldau_log_flush_latency",
        "Log flush time: segment fsync plus directory fsync when files were added.",
        [(NO_LABELS, FLUSH_LATENCY.snapshot())],
    )?;
    out.counter(
        "moldau_log_fsync_failures",
        "Segment fsyncs that failed (each takes its log offline).",
        None,
        [(NO_LABELS, FSYNC_FAILURES.load(Ordering::Relaxed))],
    )
}

/// One hosted partition's log, read at scrape time.
struct LogRow {
    topic: Arc<str>,
    partition: i32,
    size: u64,
    start: i64,
    end: i64,
    hw: i64,
    segments: usize,
}

fn collect_state(state: &BrokerState, opts: ScrapeOptions, out: &mut Scrape<'_>) -> fmt::Result {
    let image = state.image();
    let node = state.node_id;
    let (mut leaders, mut under_replicated, mut under_min_isr) = (0i64, 0i64, 0i64);
    for t in image.topics.values() {
        let min_isr = usize::try_from(state.topic_config(t).min_insync_replicas).unwrap_or(1);
        for p in &t.partitions {
            if p.leader != node {
                continue;
            }
            leaders += 1;
            if p.isr.len() < p.replicas.len() {
                under_replicated += 1;
            }
            // Kafka's UnderMinIsrPartitionCount: below the effective minimum (capped at the
            // replica count), where acks=all is refused.
            if p.isr.len() < model::config::effective_min_isr(min_isr, p.replicas.len()) {
                under_min_isr += 1;
            }
        }
    }
    let hosted = state.replicas.all();
    let offline = state.replicas.all_offline().len() as i64;
    let one = |v: i64| [(NO_LABELS, v)];
    out.gauge(
        "moldau_partitions",
        "Partitions hosted by this broker (logs open).",
        None,
        one(hosted.len() as i64),
    )?;
    out.gauge(
        "moldau_partitions_leader",
        "Partitions this broker leads.",
        None,
        one(leaders),
    )?;
    out.gauge(
        "moldau_partitions_offline",
        "Partitions assigned to this broker whose log could not be opened or went offline.",
        None,
        one(offline),
    )?;
    out.gauge(
        "moldau_partitions_under_replicated",
        "Partitions this broker leads whose ISR is smaller than their replica set.",
        None,
        one(under_replicated),
    )?;
    out.gauge(
        "moldau_partitions_under_min_isr",
        "Partitions this broker leads whose ISR is below min.insync.replicas (at most the replica count).",
        None,
        one(under_min_isr),
    )?;
    out.counter(
        "moldau_isr_shrinks",
        "Committed ISR changes that removed replicas from partitions this broker leads (its own AlterPartition or the controller fencing a broker).",
        None,
        [(NO_LABELS, METRICS.isr_changes[0].load(Ordering::Relaxed))],
    )?;
    out.counter(
        "moldau_quota_throttled_responses",
        "Responses whose client was over a quota (produce or consumer byte rate, request percentage, controller mutation rate), by quota.",
        None,
        (0..4).map(|i| {
            (
                [("quota", QUOTA_NAMES[i])],
                METRICS.throttled[i].load(Ordering::Relaxed),
            )
        }),
    )?;
    out.counter_f64(
        "moldau_quota_throttle_time",
        "Throttle time given to clients over a quota (the connection is muted that long), by quota.",
        Some(Unit::Seconds),
        (0..4).map(|i| {
            (
                [("quota", QUOTA_NAMES[i])],
                METRICS.throttle_ms[i].load(Ordering::Relaxed) as f64 / 1000.0,
            )
        }),
    )?;
    use crate::quotas::ReplicationSide;
    let sides = [ReplicationSide::Leader, ReplicationSide::Follower];
    out.counter(
        "moldau_replication_throttled",
        "Bytes replicated for the replicas the topics' leader/follower.replication.throttled.replicas name (KIP-73): sent to their followers (side=leader) or fetched for them (side=follower).",
        Some(Unit::Bytes),
        (0..2).map(|i| {
            (
                [("side", sides[i].label())],
                METRICS.replication_throttled_bytes[i].load(Ordering::Relaxed),
            )
        }),
    )?;
    let snapshots = sides.map(|s| (s, state.replication_quotas.snapshot(s)));
    out.gauge_f64(
        "moldau_replication_throttled_byte_rate",
        "The rate of those bytes in bytes per second, as the throttle measures it (replication.quota.window.num samples of replication.quota.window.size.seconds).",
        None,
        snapshots.map(|(s, (_, rate))| ([("side", s.label())], rate)),
    )?;
    out.gauge_f64(
        "moldau_replication_throttle_byte_rate_limit",
        "The broker's leader/follower.replication.throttled.rate in bytes per second; +Inf while unlimited.",
        None,
        snapshots.map(|(s, (bound, _))| ([("side", s.label())], bound.unwrap_or(f64::INFINITY))),
    )?;
    out.counter(
        "moldau_connections_refused",
        "Connections closed unserved: at once because their address had max.connections.per.ip (or its override) open, or after their throttle time because it was over its connection_creation_rate quota.",
        None,
        [(NO_LABELS, METRICS.connections_refused.load(Ordering::Relaxed))],
    )?;
    out.counter(
        "moldau_isr_expands",
        "Committed ISR changes that added replicas to partitions this broker leads.",
        None,
        [(NO_LABELS, METRICS.isr_changes[1].load(Ordering::Relaxed))],
    )?;
    let mut rows: Vec<LogRow> = hosted
        .iter()
        .map(|p| LogRow {
            topic: p.tp.topic.clone(),
            partition: p.tp.partition,
            size: p.log.size_bytes(),
            start: p.log.log_start_offset(),
            end: p.log.log_end_offset(),
            hw: p.high_watermark(),
            segments: p.log.segment_count(),
        })
        .collect();
    rows.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let mut by_topic: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    for r in &rows {
        let e = by_topic.entry(&r.topic).or_default();
        e.0 += r.size as i64;
        e.1 += 1;
    }
    out.gauge(
        "moldau_topic_log_size",
        "Bytes on disk of the topic's logs hosted here.",
        Some(Unit::Bytes),
        by_topic.iter().map(|(t, v)| ([("topic", *t)], v.0)),
    )?;
    out.gauge(
        "moldau_topic_partitions",
        "Partitions of the topic hosted here.",
        None,
        by_topic.iter().map(|(t, v)| ([("topic", *t)], v.1)),
    )?;
    if opts.partition_series {
        let labels = |r: &LogRow| {
            [
                ("topic", r.topic.to_string()),
                ("partition", r.partition.to_string()),
            ]
        };
        out.gauge(
            "moldau_log_size",
            "Bytes on disk of the partition's log.",
            Some(Unit::Bytes),
            rows.iter().map(|r| (labels(r), r.size as i64)),
        )?;
        out.gauge(
            "moldau_log_segments",
            "Segments of the partition's log.",
            None,
            rows.iter().map(|r| (labels(r), r.segments as i64)),
        )?;
        out.gauge(
            "moldau_log_start_offset",
            "The partition's log start offset.",
            None,
            rows.iter().map(|r| (labels(r), r.start)),
        )?;
        out.gauge(
            "moldau_log_end_offset",
            "The partition's log end offset (LEO).",
            None,
            rows.iter().map(|r| (labels(r), r.end)),
        )?;
        out.gauge(
            "moldau_log_high_watermark",
            "The partition's high watermark.",
            None,
            rows.iter().map(|r| (labels(r), r.hw)),
        )?;
    }
    collect_groups(state, opts, out)?;
    collect_controller(state, out)
}

/// The metadata quorum as this node sees it, and (on the active controller) the brokers.
fn collect_controller(state: &BrokerState, out: &mut Scrape<'_>) -> fmt::Result {
    let l = state.controller.leadership();
    out.gauge(
        "moldau_controller_active",
        "1 on the active controller (the metadata quorum's leader), 0 elsewhere.",
        None,
        [(NO_LABELS, i64::from(l.active))],
    )?;
    out.gauge(
        "moldau_metadata_current_leader",
        "The active controller's node id as this node knows it (-1 when unknown).",
        None,
        [(NO_LABELS, l.leader_id.map_or(-1, |id| id as i64))],
    )?;
    out.gauge(
        "moldau_metadata_current_epoch",
        "The metadata quorum's epoch (Raft term) as this node knows it.",
        None,
        [(NO_LABELS, l.term as i64)],
    )?;
    out.gauge(
        "moldau_metadata_log_end_offset",
        "The end of the metadata log as this node knows it (a voter's last entry, an observer's last seen high watermark).",
        None,
        [(NO_LABELS, l.log_end as i64)],
    )?;
    out.gauge(
        "moldau_metadata_applied_offset",
        "The last metadata log offset this node applied to its image.",
        None,
        [(NO_LABELS, state.applied_offset())],
    )?;
    out.histogram(
        "moldau_metadata_commit_latency",
        "From submitting a metadata change on this node to its answer once committed, while this node is the active controller (changes that wrote records).",
        [(NO_LABELS, METRICS.metadata_commit.snapshot())],
    )?;
    if l.active {
        let image = state.image();
        let mut brokers: BTreeMap<&'static str, i64> =
            [("fenced", 0), ("unfenced", 0), ("shutting_down", 0)].into();
        for b in image.brokers.values() {
            let s = if b.fenced {
                "fenced"
            } else if b.in_controlled_shutdown {
                "shutting_down"
            } else {
                "unfenced"
            };
            *brokers.entry(s).or_default() += 1;
        }
        out.gauge(
            "moldau_controller_brokers",
            "Registered brokers by state (fenced, unfenced, shutting_down); exported by the active controller only, so a sum over nodes counts each once.",
            None,
            brokers.iter().map(|(s, n)| ([("state", *s)], *n)),
        )?;
    }
    Ok(())
}

/// One committed offset's lag.
struct LagRow {
    group: String,
    topic: String,
    partition: i32,
    records: i64,
    seconds: f64,
}

fn collect_groups(state: &BrokerState, opts: ScrapeOptions, out: &mut Scrape<'_>) -> fmt::Result {
    let summaries = state.groups.summaries();
    let mut by_state: BTreeMap<(&'static str, &'static str), i64> = BTreeMap::new();
    for g in &summaries {
        *by_state.entry((g.protocol, g.state)).or_default() += 1;
    }
    out.gauge(
        "moldau_groups",
        "Groups this broker coordinates, by protocol (classic, consumer) and state.",
        None,
        by_state
            .iter()
            .map(|((p, s), n)| ([("protocol", *p), ("state", *s)], *n)),
    )?;
    out.gauge(
        "moldau_group_members",
        "Members of each group this broker coordinates.",
        None,
        summaries
            .iter()
            .map(|g| ([("group", g.group_id.as_str())], g.members as i64)),
    )?;
    let e = &METRICS.group_events;
    out.counter(
        "moldau_group_rebalances",
        "Rebalances completed by the groups coordinated here: classic groups' new generations, consumer groups' new group epochs.",
        None,
        [
            ([("protocol", "classic")], e[0].load(Ordering::Relaxed)),
            ([("protocol", "consumer")], e[1].load(Ordering::Relaxed)),
        ],
    )?;
    out.counter(
        "moldau_group_offset_commits",
        "Offsets committed by OffsetCommit requests (one per partition).",
        None,
        [(NO_LABELS, e[2].load(Ordering::Relaxed))],
    )?;
    let groups = state.groups.snapshot();
    let now_ms = state.clock.now_ms();
    let mut lag = Vec::new();
    for g in &groups {
        for o in &g.offsets {
            let Some(p) = state.replicas.get(&o.topic, o.partition) else {
                continue;
            };
            let hw = p.high_watermark();
            let records = (hw - o.offset).max(0);
            // How long ago the first unconsumed record was appended: its batch's timestamp,
            // found through the offset index (one header read; no log scan).
            let seconds = if records == 0 {
                0.0
            } else {
                let first = o.offset.max(p.log.log_start_offset());
                p.log
                    .batch_timestamp(first)
                    .map_or(0.0, |ts| (now_ms - ts).max(0) as f64 / 1000.0)
            };
            lag.push(LagRow {
                group: g.group_id.clone(),
                topic: o.topic.clone(),
                partition: o.partition,
                records,
                seconds,
            });
        }
    }
    if opts.partition_series {
        let labels = |r: &LagRow| {
            [
                ("group", r.group.clone()),
                ("topic", r.topic.clone()),
                ("partition", r.partition.to_string()),
            ]
        };
        out.gauge(
            "moldau_consumer_group_lag",
            "Records between a group's committed offset and the high watermark, by group, topic and partition.",
            Some(Unit::Other("records".into())),
            lag.iter().map(|r| (labels(r), r.records)),
        )?;
        out.gauge_f64(
            "moldau_consumer_group_lag",
            "How long ago the first record a group has not committed was appended (0 when caught up), by group, topic and partition.",
            Some(Unit::Seconds),
            lag.iter().map(|r| (labels(r), r.seconds)),
        )?;
    }
    let mut per_topic: BTreeMap<(&str, &str), (i64, f64)> = BTreeMap::new();
    for r in &lag {
        let e = per_topic.entry((&r.group, &r.topic)).or_default();
        e.0 += r.records;
        e.1 = e.1.max(r.seconds);
    }
    out.gauge(
        "moldau_consumer_group_topic_lag",
        "Records a group has not committed, summed over the topic's partitions.",
        Some(Unit::Other("records".into())),
        per_topic
            .iter()
            .map(|((g, t), v)| ([("group", *g), ("topic", *t)], v.0)),
    )?;
    out.gauge_f64(
        "moldau_consumer_group_topic_lag",
        "The largest lag in seconds over the topic's partitions, by group and topic.",
        Some(Unit::Seconds),
        per_topic
            .iter()
            .map(|((g, t), v)| ([("group", *g), ("topic", *t)], v.1)),
    )
}

/// Whether the broker serves clients: not once its shutdown began.
pub fn ready(state: &BrokerState) -> Result<(), String> {
    if state.cancel.is_cancelled() {
        return Err("shutting down".into());
    }
    Ok(())
}

/// Renders `/metrics` for `state` (or only the process-wide part before the broker runs).
pub fn render(state: Option<Arc<BrokerState>>, format: telemetry::Format) -> String {
    telemetry::render(format, Exposition { state }).unwrap_or_else(|_| {
        tracing::error!("encoding /metrics failed");
        String::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each phase of a request lands in its latency bucket, computed from the instants the
    /// connection took (an API no other test of this process sends: the counters are global).
    #[test]
    fn request_phases() {
        let api = ApiKey::DescribeDelegationToken;
        let phases = [
            Phase::Total,
            Phase::Local,
            Phase::ResponseQueue,
            Phase::Remote,
            Phase::Send,
        ];
        let snap = || phases.map(|p| METRICS.latency[api_slot(api)][p as usize].snapshot());
        let before = snap();
        let ms = Duration::from_millis;
        let r = Instant::now();
        let mut t = RequestTimer::start(api, 3, r);
        // The handler took 1 ms, the reply waited 1 ms in the queue, was ready when taken
        // (the same instant twice) and took 2 ms to write.
        t.handled_ns = 1_000_000;
        t.responded(r + ms(2), r + ms(2), r + ms(4));
        // A delayed reply: ready 3 ms after it was taken, written 1 ms later.
        t.responded(r + ms(2), r + ms(5), r + ms(6));
        let after = snap();
        // Bucket indexes by upper bound: 0 <- 50 µs, 4 <- 1 ms, 5 <- 2.5 ms, 6 <- 5 ms, 7 <- 10 ms.
        let expected: [&[usize]; 5] = [&[6, 7], &[], &[4, 4], &[0, 6], &[4, 5]];
        for (i, p) in phases.iter().enumerate() {
            let mut got = Vec::new();
            for (b, (x, y)) in before[i].buckets.iter().zip(&after[i].buckets).enumerate() {
                got.extend(std::iter::repeat_n(b, (y.1 - x.1) as usize));
            }
            assert_eq!(got, expected[i], "{p:?}");
        }
        assert_eq!(METRICS.requests_of(api, 3), 1);
    }
}
