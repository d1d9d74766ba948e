//! The consumer: `assign` + `seek`, or `subscribe` with a group (see `group`), and `poll` for
//! records, with fetches pipelined ahead of the application.
//!
//! Ownership and concurrency: a `Consumer` is used from one task (`&mut self`). Each broker
//! leading assigned partitions has at most one Fetch in flight, run by a spawned task that
//! also decodes (and decompresses) the records, so decoding overlaps the application's work
//! on the previous records. Results come back over a channel; a result is applied only if its
//! partition's fetch offset and seek epoch are unchanged since the fetch was issued, so seeks
//! and reassignments simply discard stale data. Fetching continues while fewer than
//! `fetch_buffer_bytes_max` bytes are buffered. Fetch tasks end when their response arrives
//! or times out; dropping the consumer drops the channel and their results.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use protocol::messages::BrokerId;
use protocol::messages::{FetchRequest, ListOffsetsRequest};
use record::BatchSplitter;
use tokio::sync::mpsc;

use crate::cluster::{topic_name, Client, ClientConfig};
use crate::error::{Error, Result};
use crate::group::{Assignor, GroupMember, RebalanceListener};
use crate::group_consumer::GroupProtocol;
use model::ErrorCode;

/// What to do when there is no valid position (Kafka: `auto.offset.reset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OffsetReset {
    Earliest,
    #[default]
    Latest,
    /// Fail with OFFSET_OUT_OF_RANGE instead.
    None,
}

/// Consumer settings with the Java client's names and defaults.
#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    pub client: ClientConfig,
    /// Required for `subscribe` and commits (`group.id`).
    pub group_id: Option<String>,
    /// Static membership (`group.instance.id`).
    pub group_instance_id: Option<String>,
    pub auto_offset_reset: OffsetReset,
    pub fetch_min_bytes: i32,
    pub fetch_max_bytes: i32,
    pub fetch_max_wait_ms: i32,
    pub max_partition_fetch_bytes: i32,
    pub max_poll_records: usize,
    /// Bytes of decoded-but-unreturned records after which fetching pauses.
    pub fetch_buffer_bytes_max: usize,
    /// Largest decompressed size of one record batch; a batch inflating beyond it (a
    /// "zip bomb") fails the fetch instead of exhausting memory.
    pub batch_decompressed_bytes_max: usize,
    /// 0 = read_uncommitted, 1 = read_committed (`isolation.level`).
    pub isolation_level: i8,
    pub enable_auto_commit: bool,
    pub auto_commit_interval_ms: u64,
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: u64,
    /// Also the rebalance timeout sent in JoinGroup (`max.poll.interval.ms`).
    pub max_poll_interval_ms: i32,
    /// Preferred first (`partition.assignment.strategy`; classic protocol only).
    pub assignors: Vec<Assignor>,
    /// `group.protocol`: classic (JoinGroup/SyncGroup) or consumer (KIP-848).
    pub group_protocol: GroupProtocol,
    /// `group.remote.assignor`: the server-side assignor to ask for (consumer protocol).
    pub group_remote_assignor: Option<String>,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            client: ClientConfig::default(),
            group_id: None,
            group_instance_id: None,
            auto_offset_reset: OffsetReset::Latest,
            fetch_min_bytes: 1,
            fetch_max_bytes: 50 * 1024 * 1024,
            fetch_max_wait_ms: 500,
            max_partition_fetch_bytes: 1024 * 1024,
            max_poll_records: 500,
            fetch_buffer_bytes_max: 64 * 1024 * 1024,
            batch_decompressed_bytes_max: 256 * 1024 * 1024,
            isolation_level: 0,
            enable_auto_commit: true,
            auto_commit_interval_ms: 5_000,
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 3_000,
            max_poll_interval_ms: 300_000,
            assignors: vec![Assignor::Range, Assignor::CooperativeSticky],
            group_protocol: GroupProtocol::Classic,
            group_remote_assignor: None,
        }
    }
}

/// A record read from a partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    /// Whether `timestamp` is the broker's LogAppendTime.
    pub log_append_time: bool,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// A topic-partition as the consumer API names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: Arc<str>,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: Arc::from(topic),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Where to move a partition's position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeekTo {
    Offset(i64),
    Beginning,
    End,
    /// The first offset whose timestamp is >= this (ms); the end if there is none.
    Timestamp(i64),
}

#[derive(Debug)]
struct PartState {
    /// Next offset handed to the application; `None` until resolved.
    position: Option<i64>,
    /// Next offset to fetch (ahead of `position` by what is buffered or in flight).
    fetch_offset: i64,
    /// Pending position reset.
    reset: Option<SeekTo>,
    /// Bumped on every seek; fetch results carrying an older epoch are dropped.
    epoch: u64,
    paused: bool,
    in_flight: bool,
    high_watermark: i64,
}

struct FetchedPartition {
    tp: TopicPartition,
    fetch_offset: i64,
    epoch: u64,
    result: Result<Fetched>,
}

struct Fetched {
    records: Vec<ConsumerRecord>,
    next_offset: i64,
    high_watermark: i64,
    bytes: usize,
}

struct FetchDone {
    node: i32,
    partitions: Vec<FetchedPartition>,
    /// A request-level failure (connection, timeout): the partitions were not fetched.
    error: Option<Error>,
}

/// An async Kafka consumer.
///
/// ```no_run
/// # async fn f() -> Result<(), client::Error> {
/// use client::{Consumer, ConsumerConfig, ClientConfig, SeekTo, TopicPartition};
/// let mut consumer = Consumer::new(ConsumerConfig {
///     client: ClientConfig::new("127.0.0.1:9092"),
///     ..ConsumerConfig::default()
/// }).await?;
/// let tp = TopicPartition::new("greetings", 0);
/// consumer.assign(vec![tp.clone()]);
/// consumer.seek(&tp, SeekTo::Beginning);
/// for r in consumer.poll(std::time::Duration::from_secs(1)).await? {
///     println!("{}:{} {:?}", r.partition, r.offset, r.value);
/// }
/// # Ok(()) }
/// ```
pub struct Consumer {
    pub(crate) client: Client,
    pub(crate) config: ConsumerConfig,
    parts: BTreeMap<TopicPartition, PartState>,
    /// Fetched records not yet returned: (partition, its epoch, records, the offset after
    /// the fetched data, control batches and skipped aborted records included). Once a
    /// fetch's records are all returned, the position moves to that offset, as the Java
    /// consumer does, so it passes transaction markers.
    buffer: VecDeque<(TopicPartition, u64, VecDeque<ConsumerRecord>, i64)>,
    buffered_bytes: usize,
    in_flight_nodes: HashSet<i32>,
    tx: mpsc::UnboundedSender<FetchDone>,
    rx: mpsc::UnboundedReceiver<FetchDone>,
    pub(crate) group: Option<GroupMember>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("assignment", &self.parts.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Consumer {
    pub async fn new(config: ConsumerConfig) -> Result<Consumer> {
        let client = Client::connect(config.client.clone()).await?;
        Ok(Consumer::with_client(client, config))
    }

    pub fn with_client(client: Client, config: ConsumerConfig) -> Consumer {
        let (tx, rx) = mpsc::unbounded_channel();
        Consumer {
            client,
            config,
            parts: BTreeMap::new(),
            buffer: VecDeque::new(),
            buffered_bytes: 0,
            in_flight_nodes: HashSet::new(),
            tx,
            rx,
            group: None,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Replaces the assignment with `partitions` (manual assignment, no group). Partitions
    /// kept keep their position; new ones start per `auto_offset_reset` unless sought.
    pub fn assign(&mut self, partitions: Vec<TopicPartition>) {
        let keep: HashSet<TopicPartition> = partitions.iter().cloned().collect();
        self.parts.retain(|tp, _| keep.contains(tp));
        self.buffer.retain(|(tp, _, _, _)| keep.contains(tp));
        self.recount_buffer();
        for tp in partitions {
            self.parts.entry(tp).or_insert(PartState {
                position: None,
                fetch_offset: -1,
                reset: None,
                epoch: 0,
                paused: false,
                in_flight: false,
                high_watermark: -1,
            });
        }
    }

    /// The assigned partitions.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.parts.keys().cloned().collect()
    }

    fn recount_buffer(&mut self) {
        self.buffered_bytes = self
            .buffer
            .iter()
            .flat_map(|(_, _, rs, _)| rs.iter())
            .map(record_bytes)
            .sum();
    }

    /// Moves a partition's position; takes effect on the next `poll`.
    pub fn seek(&mut self, tp: &TopicPartition, to: SeekTo) {
        if let Some(p) = self.parts.get_mut(tp) {
            p.epoch += 1;
            p.in_flight = false;
            match to {
                SeekTo::Offset(o) if o >= 0 => {
                    p.position = Some(o);
                    p.fetch_offset = o;
                    p.reset = None;
                }
                other => {
                    p.position = None;
                    p.reset = Some(other);
                }
            }
            self.buffer.retain(|(t, _, _, _)| t != tp);
            self.recount_buffer();
        }
    }

    /// Stops returning records of these partitions until `resume`.
    pub fn pause(&mut self, tps: &[TopicPartition]) {
        for tp in tps {
            if let Some(p) = self.parts.get_mut(tp) {
                p.paused = true;
            }
        }
    }

    pub fn resume(&mut self, tps: &[TopicPartition]) {
        for tp in tps {
            if let Some(p) = self.parts.get_mut(tp) {
                p.paused = false;
            }
        }
    }

    pub fn paused(&self) -> Vec<TopicPartition> {
        self.parts
            .iter()
            .filter(|(_, p)| p.paused)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    /// The next offset `poll` returns for `tp`, if known.
    pub fn position(&self, tp: &TopicPartition) -> Option<i64> {
        self.parts.get(tp).and_then(|p| p.position)
    }

    /// Positions of all assigned partitions that have one.
    pub fn positions(&self) -> BTreeMap<TopicPartition, i64> {
        self.parts
            .iter()
            .filter_map(|(tp, p)| p.position.map(|o| (tp.clone(), o)))
            .collect()
    }

    /// The consumer's group membership, for
    /// [`Producer::send_offsets_to_transaction`](crate::Producer::send_offsets_to_transaction):
    /// the group id with the current generation (or member epoch) and member id when
    /// subscribed, or just the group id (generation -1) when assigning by hand.
    pub fn consumer_group_metadata(&self) -> Option<crate::ConsumerGroupMetadata> {
        let group_id = self.config.group_id.clone()?;
        Some(match &self.group {
            Some(g) => crate::ConsumerGroupMetadata {
                group_id,
                generation_id: g.generation,
                member_id: g.member_id.clone(),
                group_instance_id: self.config.group_instance_id.clone(),
            },
            None => crate::ConsumerGroupMetadata::for_group(group_id),
        })
    }

    /// The last high watermark a fetch reported for `tp`.
    pub fn high_watermark(&self, tp: &TopicPartition) -> Option<i64> {
        self.parts
            .get(tp)
            .map(|p| p.high_watermark)
            .filter(|&h| h >= 0)
    }

    /// Waits up to `timeout` for records and returns at most `max_poll_records` of them
    /// (an empty vector when none arrived in time).
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.group.is_some() {
                crate::group::drive(self).await?;
            }
            self.resolve_positions().await?;
            while let Ok(done) = self.rx.try_recv() {
                self.apply(done)?;
            }
            self.issue_fetches().await;
            if let Some(records) = self.take_buffered() {
                self.issue_fetches().await;
                return Ok(records);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let mut wait = deadline - now;
            if self.group.is_some() {
                wait = wait.min(Duration::from_millis(
                    self.config.heartbeat_interval_ms.max(10),
                ));
            }
            if self.in_flight_nodes.is_empty() {
                // Nothing to wait for (no assignment, or no leaders yet): back off briefly.
                wait = wait.min(Duration::from_millis(self.client.config().retry_backoff_ms));
                tokio::time::sleep(wait).await;
                continue;
            }
            // Receiving from a channel is cancel-safe.
            if let Ok(Some(done)) = tokio::time::timeout(wait, self.rx.recv()).await {
                self.apply(done)?;
            }
        }
    }

    fn take_buffered(&mut self) -> Option<Vec<ConsumerRecord>> {
        let max = self.config.max_poll_records.max(1);
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.buffer.len() && out.len() < max {
            let (tp, epoch, _, _) = &self.buffer[i];
            let state = self.parts.get(tp);
            let valid = state.is_some_and(|p| p.epoch == *epoch);
            if !valid {
                if let Some((_, _, rs, _)) = self.buffer.remove(i) {
                    self.buffered_bytes -= rs.iter().map(record_bytes).sum::<usize>();
                }
                continue;
            }
            if state.is_some_and(|p| p.paused) {
                i += 1;
                continue;
            }
            let tp = tp.clone();
            let (_, _, rs, next_offset) = &mut self.buffer[i];
            let next_offset = *next_offset;
            let n = (max - out.len()).min(rs.len());
            let mut last = None;
            for r in rs.drain(..n) {
                self.buffered_bytes -= record_bytes(&r);
                last = Some(r.offset + 1);
                out.push(r);
            }
            if rs.is_empty() {
                self.buffer.remove(i);
                last = Some(last.map_or(next_offset, |o| o.max(next_offset)));
            }
            if let (Some(o), Some(p)) = (last, self.parts.get_mut(&tp)) {
                if p.position.is_none_or(|cur| o > cur) {
                    p.position = Some(o);
                }
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// Resolves pending resets (and, with a group, committed offsets) to positions.
    async fn resolve_positions(&mut self) -> Result<()> {
        let mut need_committed = Vec::new();
        for (tp, p) in &mut self.parts {
            if p.position.is_none() && p.reset.is_none() {
                if self.group.is_some() || self.config.group_id.is_some() {
                    need_committed.push(tp.clone());
                } else {
                    p.reset = Some(match self.config.auto_offset_reset {
                        OffsetReset::Earliest => SeekTo::Beginning,
                        _ => SeekTo::End,
                    });
                }
            }
        }
        if !need_committed.is_empty() {
            let committed = crate::group::fetch_committed(self, &need_committed).await?;
            for tp in need_committed {
                let Some(p) = self.parts.get_mut(&tp) else {
                    continue;
                };
                match committed.get(&tp) {
                    Some(&o) if o >= 0 => {
                        p.position = Some(o);
                        p.fetch_offset = o;
                    }
                    _ => {
                        p.reset = Some(match self.config.auto_offset_reset {
                            OffsetReset::Earliest => SeekTo::Beginning,
                            OffsetReset::Latest => SeekTo::End,
                            OffsetReset::None => {
                                return Err(Error::broker(
                                    ErrorCode::OffsetOutOfRange,
                                    Some(format!("no committed offset for {tp}")),
                                ))
                            }
                        })
                    }
                }
            }
        }
        let resets: Vec<(TopicPartition, SeekTo)> = self
            .parts
            .iter()
            .filter_map(|(tp, p)| p.reset.map(|r| (tp.clone(), r)))
            .collect();
        if resets.is_empty() {
            return Ok(());
        }
        let queries: Vec<(TopicPartition, i64)> = resets
            .iter()
            .map(|(tp, r)| {
                let ts = match r {
                    SeekTo::Beginning => -2,
                    SeekTo::End => -1,
                    SeekTo::Timestamp(t) => *t,
                    SeekTo::Offset(_) => -2,
                };
                (tp.clone(), ts)
            })
            .collect();
        let found = list_offsets(&self.client, &queries, self.config.isolation_level).await?;
        for (tp, r) in resets {
            let Some(p) = self.parts.get_mut(&tp) else {
                continue;
            };
            match found.get(&tp) {
                Some(Ok(o)) => {
                    let o = if *o < 0 && matches!(r, SeekTo::Timestamp(_)) {
                        // No record at or after the timestamp: go to the end.
                        match list_offsets(
                            &self.client,
                            &[(tp.clone(), -1)],
                            self.config.isolation_level,
                        )
                        .await?
                        .remove(&tp)
                        {
                            Some(Ok(end)) => end,
                            _ => continue,
                        }
                    } else {
                        *o
                    };
                    p.position = Some(o);
                    p.fetch_offset = o;
                    p.reset = None;
                    p.epoch += 1;
                }
                Some(Err(e)) if !e.is_retriable() => {
                    return Err(Error::broker(
                        e.code().unwrap_or(ErrorCode::UnknownServerError),
                        Some(format!("list offsets of {tp}: {e}")),
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Issues one Fetch to every leader that has fetchable partitions and none in flight.
    async fn issue_fetches(&mut self) {
        if self.buffered_bytes >= self.config.fetch_buffer_bytes_max {
            return;
        }
        let mut by_node: HashMap<i32, Vec<(TopicPartition, i64, u64)>> = HashMap::new();
        let candidates: Vec<(TopicPartition, i64, u64)> = self
            .parts
            .iter()
            .filter(|(_, p)| p.position.is_some() && p.reset.is_none() && !p.in_flight && !p.paused)
            .map(|(tp, p)| (tp.clone(), p.fetch_offset, p.epoch))
            .collect();
        for (tp, offset, epoch) in candidates {
            match self.client.leader_for(&tp.topic, tp.partition).await {
                Ok(node) if !self.in_flight_nodes.contains(&node) => {
                    by_node.entry(node).or_default().push((tp, offset, epoch))
                }
                Ok(_) => {}
                Err(_) => self.client.invalidate_topic(&tp.topic),
            }
        }
        for (node, parts) in by_node {
            let conn = match self.client.conn_node(node).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(node, error = %e, "fetch: no connection");
                    for (tp, _, _) in &parts {
                        self.client.invalidate_topic(&tp.topic);
                    }
                    continue;
                }
            };
            let mut topics: Vec<FetchTopic> = Vec::new();
            for (tp, offset, _) in &parts {
                let fp = FetchPartition::default()
                    .with_partition(tp.partition)
                    .with_fetch_offset(*offset)
                    .with_partition_max_bytes(self.config.max_partition_fetch_bytes);
                match topics.iter_mut().find(|t| t.topic.0.as_str() == &*tp.topic) {
                    Some(t) => t.partitions.push(fp),
                    None => topics.push(
                        FetchTopic::default()
                            .with_topic(topic_name(&tp.topic))
                            .with_partitions(vec![fp]),
                    ),
                }
            }
            let req = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(self.config.fetch_max_wait_ms)
                .with_min_bytes(self.config.fetch_min_bytes)
                .with_max_bytes(self.config.fetch_max_bytes)
                .with_isolation_level(self.config.isolation_level)
                .with_session_id(0)
                .with_session_epoch(-1)
                .with_topics(topics);
            let pending = match conn.start(&req).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!(node, error = %e, "fetch: send failed");
                    continue;
                }
            };
            for (tp, _, _) in &parts {
                if let Some(p) = self.parts.get_mut(tp) {
                    p.in_flight = true;
                }
            }
            self.in_flight_nodes.insert(node);
            let tx = self.tx.clone();
            let decompressed_max = self.config.batch_decompressed_bytes_max;
            let read_committed = self.config.isolation_level == 1;
            tokio::spawn(async move {
                let failed = |parts: Vec<(TopicPartition, i64, u64)>, e: Error| FetchDone {
                    node,
                    partitions: parts
                        .into_iter()
                        .map(|(tp, fetch_offset, epoch)| FetchedPartition {
                            tp,
                            fetch_offset,
                            epoch,
                            result: Err(Error::Closed),
                        })
                        .collect(),
                    error: Some(e),
                };
                let done = match pending.wait().await {
                    // Decoding and decompressing records is CPU work: off the async workers.
                    Ok(resp) => {
                        let keep = parts.clone();
                        match tokio::task::spawn_blocking(move || {
                            decode_fetch(resp, &parts, decompressed_max, read_committed)
                        })
                        .await
                        {
                            Ok(partitions) => FetchDone {
                                node,
                                partitions,
                                error: None,
                            },
                            Err(e) => failed(keep, Error::Protocol(format!("decode task: {e}"))),
                        }
                    }
                    Err(e) => failed(parts, e),
                };
                let _ = tx.send(done);
            });
        }
    }

    fn apply(&mut self, done: FetchDone) -> Result<()> {
        self.in_flight_nodes.remove(&done.node);
        if let Some(e) = &done.error {
            tracing::debug!(node = done.node, error = %e, "fetch failed");
        }
        for fp in done.partitions {
            let Some(p) = self.parts.get_mut(&fp.tp) else {
                continue;
            };
            if p.epoch != fp.epoch || p.fetch_offset != fp.fetch_offset {
                if p.epoch == fp.epoch {
                    p.in_flight = false;
                }
                continue;
            }
            p.in_flight = false;
            match fp.result {
                Ok(f) => {
                    p.high_watermark = f.high_watermark;
                    let advanced = f.next_offset > p.fetch_offset;
                    if advanced {
                        p.fetch_offset = f.next_offset;
                    }
                    // Records, or only markers / aborted records to step over.
                    if !f.records.is_empty() || advanced {
                        self.buffered_bytes += f.bytes;
                        self.buffer.push_back((
                            fp.tp,
                            fp.epoch,
                            VecDeque::from(f.records),
                            f.next_offset,
                        ));
                    }
                }
                Err(e) => match e.code() {
                    Some(ErrorCode::OffsetOutOfRange) => {
                        match self.config.auto_offset_reset {
                            OffsetReset::Earliest => p.reset = Some(SeekTo::Beginning),
                            OffsetReset::Latest => p.reset = Some(SeekTo::End),
                            OffsetReset::None => {
                                return Err(Error::broker(
                                    ErrorCode::OffsetOutOfRange,
                                    Some(format!("{} at offset {}", fp.tp, fp.fetch_offset)),
                                ))
                            }
                        }
                        p.position = None;
                        p.epoch += 1;
                    }
                    _ if e.is_retriable() || matches!(e, Error::Closed) => {
                        if e.needs_metadata_refresh() || done.error.is_some() {
                            self.client.invalidate_topic(&fp.tp.topic);
                        }
                    }
                    _ => return Err(e),
                },
            }
        }
        Ok(())
    }

    /// Starts group membership over `topics` (requires `group_id`). Partitions are assigned by
    /// the group's leader; `poll` drives joins, syncs and heartbeats.
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<()> {
        self.subscribe_with(topics, None)
    }

    /// Like `subscribe`, with callbacks for revoked and assigned partitions.
    pub fn subscribe_with(
        &mut self,
        topics: &[&str],
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Result<()> {
        let group_id = self
            .config
            .group_id
            .clone()
            .ok_or_else(|| Error::Config("subscribe needs group_id".into()))?;
        self.group = Some(GroupMember::new(
            group_id,
            topics.iter().map(|t| (*t).to_owned()).collect(),
            listener,
        ));
        Ok(())
    }

    /// Turns the consumer into a `Stream` of records. A task owned by the stream polls the
    /// consumer and keeps a bounded queue of records ready; dropping the stream stops it.
    pub fn into_stream(self) -> RecordStream {
        let (tx, rx) = mpsc::channel(1024);
        let task = tokio::spawn(async move {
            let mut c = self;
            loop {
                match c.poll(Duration::from_millis(500)).await {
                    Ok(rs) => {
                        for r in rs {
                            if tx.send(Ok(r)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
                if tx.is_closed() {
                    return;
                }
            }
        });
        RecordStream { rx, task }
    }
}

/// A `Stream` of records from a consumer (see [`Consumer::into_stream`]).
pub struct RecordStream {
    rx: mpsc::Receiver<Result<ConsumerRecord>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for RecordStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordStream").finish_non_exhaustive()
    }
}

impl Drop for RecordStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl futures_core::Stream for RecordStream {
    type Item = Result<ConsumerRecord>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl RecordStream {
    /// The next record, or `None` once the consumer stopped.
    pub async fn next(&mut self) -> Option<Result<ConsumerRecord>> {
        self.rx.recv().await
    }
}

fn record_bytes(r: &ConsumerRecord) -> usize {
    r.key.as_ref().map_or(0, Bytes::len) + r.value.as_ref().map_or(0, Bytes::len) + 64
}

fn decode_fetch(
    resp: protocol::messages::FetchResponse,
    parts: &[(TopicPartition, i64, u64)],
    decompressed_max: usize,
    read_committed: bool,
) -> Vec<FetchedPartition> {
    let top = Error::check(resp.error_code);
    let mut out = Vec::with_capacity(parts.len());
    for (tp, fetch_offset, epoch) in parts {
        let data = resp
            .responses
            .iter()
            .filter(|t| t.topic.0.as_str() == &*tp.topic)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == tp.partition);
        let result = match (&top, data) {
            (Err(e), _) => Err(Error::broker(
                e.code().unwrap_or(ErrorCode::UnknownServerError),
                None,
            )),
            (Ok(()), None) => Ok(Fetched {
                records: Vec::new(),
                next_offset: *fetch_offset,
                high_watermark: -1,
                bytes: 0,
            }),
            (Ok(()), Some(p)) => Error::check(p.error_code).and_then(|()| {
                let aborted: Vec<(i64, i64)> = if read_committed {
                    p.aborted_transactions
                        .iter()
                        .flatten()
                        .map(|a| (a.producer_id.0, a.first_offset))
                        .collect()
                } else {
                    Vec::new()
                };
                let read = PartitionRead {
                    tp,
                    fetch_offset: *fetch_offset,
                    decompressed_max,
                    read_committed,
                    aborted,
                };
                decode_partition(&read, p.records.as_ref()).map(|(records, next_offset, bytes)| {
                    Fetched {
                        records,
                        next_offset,
                        high_watermark: p.high_watermark,
                        bytes,
                    }
                })
            }),
        };
        out.push(FetchedPartition {
            tp: tp.clone(),
            fetch_offset: *fetch_offset,
            epoch: *epoch,
            result,
        });
    }
    out
}

/// What `decode_partition` needs besides the bytes.
struct PartitionRead<'a> {
    tp: &'a TopicPartition,
    fetch_offset: i64,
    decompressed_max: usize,
    /// Skip records of aborted transactions (isolation.level=read_committed).
    read_committed: bool,
    /// (producer id, first offset) of aborted transactions, from the Fetch response.
    aborted: Vec<(i64, i64)>,
}

/// Decodes the whole batches in `data`, returning records at or after the fetch offset, the
/// next offset to fetch, and their approximate size. A truncated last batch (normal at the
/// fetch size limit) is ignored. Control batches are never returned; with read_committed,
/// transactional batches of a producer are skipped from the first offset of an aborted
/// transaction until its ABORT marker (as the Java consumer does).
fn decode_partition(
    read: &PartitionRead<'_>,
    data: Option<&Bytes>,
) -> Result<(Vec<ConsumerRecord>, i64, usize)> {
    let (tp, fetch_offset, decompressed_max) = (read.tp, read.fetch_offset, read.decompressed_max);
    let mut records = Vec::new();
    let mut next = fetch_offset;
    let mut bytes = 0;
    let Some(data) = data else {
        return Ok((records, next, bytes));
    };
    let mut aborted = read.aborted.clone();
    aborted.sort_by_key(|&(_, first)| first);
    let mut pending_aborts = aborted.into_iter().peekable();
    let mut aborting: HashSet<i64> = HashSet::new();
    for item in BatchSplitter::new(data) {
        let Ok((at, b)) = item else {
            break;
        };
        let batch = data.slice(at..at + b.len());
        let (header, iter) = record::decode_records(&batch, decompressed_max)?;
        if header.next_offset() <= fetch_offset {
            continue;
        }
        next = next.max(header.next_offset());
        if read.read_committed {
            while let Some(&(pid, _)) = pending_aborts
                .peek()
                .filter(|&&(_, first)| first <= header.last_offset())
            {
                aborting.insert(pid);
                pending_aborts.next();
            }
        }
        if header.is_control() {
            // A control record's key is (version: i16, type: i16); type 0 is ABORT.
            if read.read_committed && header.is_transactional() {
                let is_abort = iter
                    .clone()
                    .next()
                    .and_then(|r| r.ok())
                    .and_then(|r| r.key)
                    .is_some_and(|k| k.len() >= 4 && k[2..4] == [0, 0]);
                if is_abort {
                    aborting.remove(&header.producer_id);
                }
            }
            continue;
        }
        if read.read_committed
            && header.is_transactional()
            && aborting.contains(&header.producer_id)
        {
            continue;
        }
        let log_append = header.timestamp_type() == record::TimestampKind::LogAppendTime;
        for r in iter {
            let r = r?;
            if r.offset < fetch_offset {
                continue;
            }
            let cr = ConsumerRecord {
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset: r.offset,
                timestamp: r.timestamp,
                log_append_time: log_append,
                key: r.key,
                value: r.value,
                headers: r
                    .headers
                    .into_iter()
                    .map(|h| (String::from_utf8_lossy(&h.key).into_owned(), h.value))
                    .collect(),
            };
            bytes += record_bytes(&cr);
            records.push(cr);
        }
    }
    Ok((records, next, bytes))
}

/// Offsets of partitions by timestamp (-2 earliest, -1 latest). Per-partition errors are
/// reported per partition.
pub(crate) async fn list_offsets(
    client: &Client,
    queries: &[(TopicPartition, i64)],
    isolation_level: i8,
) -> Result<HashMap<TopicPartition, Result<i64>>> {
    let mut by_node: HashMap<i32, Vec<(TopicPartition, i64)>> = HashMap::new();
    let mut out = HashMap::new();
    for (tp, ts) in queries {
        match client.leader_for(&tp.topic, tp.partition).await {
            Ok(n) => by_node.entry(n).or_default().push((tp.clone(), *ts)),
            Err(e) => {
                client.invalidate_topic(&tp.topic);
                out.insert(tp.clone(), Err(e));
            }
        }
    }
    for (node, qs) in by_node {
        let mut topics: Vec<ListOffsetsTopic> = Vec::new();
        for (tp, ts) in &qs {
            let p = ListOffsetsPartition::default()
                .with_partition_index(tp.partition)
                .with_timestamp(*ts);
            match topics.iter_mut().find(|t| t.name.0.as_str() == &*tp.topic) {
                Some(t) => t.partitions.push(p),
                None => topics.push(
                    ListOffsetsTopic::default()
                        .with_name(topic_name(&tp.topic))
                        .with_partitions(vec![p]),
                ),
            }
        }
        let conn = client.conn_node(node).await?;
        let mut req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(topics);
        if conn.version::<ListOffsetsRequest>()? >= 2 {
            req.isolation_level = isolation_level;
        }
        let resp = conn.send(&req).await?;
        for (tp, _) in qs {
            let r = resp
                .topics
                .iter()
                .filter(|t| t.name.0.as_str() == &*tp.topic)
                .flat_map(|t| t.partitions.iter())
                .find(|p| p.partition_index == tp.partition)
                .ok_or_else(|| Error::Protocol("list offsets response lacks a partition".into()))
                .and_then(|p| Error::check(p.error_code).map(|()| p.offset));
            if let Err(e) = &r {
                if e.needs_metadata_refresh() {
                    client.invalidate_topic(&tp.topic);
                }
            }
            out.insert(tp, r);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use record::{BatchBuilder, Compression, NewRecord};

    fn batch(base: i64, pid: i64, txn: bool, control: Option<i16>, n: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(Compression::None)
            .base_offset(base)
            .producer(pid, 0, 0)
            .transactional(txn)
            .control(control.is_some());
        for i in 0..n {
            match control {
                Some(kind) => {
                    let mut key = vec![0, 0];
                    key.extend_from_slice(&kind.to_be_bytes());
                    b.push(NewRecord::new(
                        Some(key.into()),
                        Some(vec![0, 0, 0, 0, 0, 0].into()),
                        0,
                    ));
                }
                None => b.push(NewRecord::value(format!("{pid}-{i}"))),
            }
        }
        b.build().unwrap().to_vec()
    }

    fn values(read_committed: bool, aborted: Vec<(i64, i64)>) -> (Vec<String>, i64) {
        let mut data = Vec::new();
        data.extend(batch(0, 7, true, None, 2)); // 0-1: aborted transaction of producer 7
        data.extend(batch(2, 8, true, None, 1)); // 2: committed transaction of producer 8
        data.extend(batch(3, 7, true, Some(0), 1)); // 3: ABORT marker for 7
        data.extend(batch(4, 8, true, Some(1), 1)); // 4: COMMIT marker for 8
        data.extend(batch(5, 7, true, None, 1)); // 5: a new transaction of 7
        data.extend(batch(6, 9, false, None, 1)); // 6: not transactional
        data.extend_from_slice(&[0, 0, 0]); // a truncated tail, as at the fetch size limit
        let tp = TopicPartition::new("t", 0);
        let read = PartitionRead {
            tp: &tp,
            fetch_offset: 1,
            decompressed_max: 1 << 20,
            read_committed,
            aborted,
        };
        let (records, next, _) = decode_partition(&read, Some(&Bytes::from(data))).unwrap();
        let vals = records
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
            .collect();
        (vals, next)
    }

    #[test]
    fn read_committed_skips_aborted_transactions_and_control_batches() {
        let (all, next) = values(false, vec![(7, 0)]);
        // From fetch offset 1: the rest of 7's aborted batch, then everything else; never markers.
        assert_eq!(all, vec!["7-1", "8-0", "7-0", "9-0"]);
        assert_eq!(next, 7);
        let (committed, next) = values(true, vec![(7, 0)]);
        assert_eq!(committed, vec!["8-0", "7-0", "9-0"]);
        assert_eq!(next, 7);
    }
}
