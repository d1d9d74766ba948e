//! The producer: records are appended to a batch per partition and sent by one background
//! sender task, several requests in flight per broker.
//!
//! Ownership and lifecycle: a `Producer` owns its sender task. `send`/`enqueue` append to the
//! accumulator (waiting only when `buffer_memory` bytes are already queued); the sender closes
//! a partition's open batch when it is full (`batch_size`), older than `linger_ms`, or a flush
//! is underway, groups ready batches by leader and sends one Produce request per broker with at
//! most one batch per partition. Responses complete each record's delivery future; retriable
//! errors put the batch back at the head of its partition's queue after `retry_backoff_ms`
//! (and refresh metadata on leadership errors) until `retries` or `delivery_timeout_ms` run
//! out. With idempotence (the default with acks=all, as in the Java client) each batch carries
//! the producer id and a per-partition sequence number, retried batches go back in sequence
//! order, and the broker drops duplicates, so retries neither duplicate nor reorder. Without
//! it a retried batch may land after a later batch of the same partition, as with the Java
//! client at `max.in.flight.requests.per.connection` > 1.
//! `close` flushes and stops the sender; dropping the producer stops it after it drains.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use protocol::messages::{InitProducerIdRequest, ProduceRequest, ProduceResponse};
use record::{BatchBuilder, Compression, NewRecord, RecordHeader};
use tokio::sync::{oneshot, Notify, Semaphore};
use tokio::task::JoinHandle;

use crate::cluster::{topic_name, Client, ClientConfig};
use crate::conn::PendingResponse;
use crate::error::{Error, Result};
use crate::partitioner::{partition_for_key, Partitioner, Rng, Sticky};
use crate::transaction::{ConsumerGroupMetadata, TxnManager};
use model::ErrorCode;

/// How many replicas must have a record before the broker acknowledges it (Kafka: `acks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Acks {
    /// acks=0: no response; delivery futures complete once sent, with offset -1.
    None,
    /// acks=1: the leader wrote it.
    Leader,
    /// acks=all (-1): every in-sync replica has it.
    #[default]
    All,
}

impl Acks {
    pub fn as_i16(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }

    /// Parses `0`, `1`, `all` or `-1`.
    pub fn parse(s: &str) -> Option<Acks> {
        match s {
            "0" => Some(Acks::None),
            "1" => Some(Acks::Leader),
            "all" | "-1" => Some(Acks::All),
            _ => None,
        }
    }
}

/// Producer settings, with the Java client's names and defaults.
#[derive(Clone, Debug)]
pub struct ProducerConfig {
    pub client: ClientConfig,
    pub acks: Acks,
    /// How long a batch waits for more records before it is sent (`linger.ms`).
    pub linger_ms: u64,
    /// Uncompressed bytes after which a partition's batch is closed (`batch.size`).
    pub batch_size: usize,
    /// Codec for batches (`compression.type`).
    pub compression: Compression,
    /// Attempts after the first for a failed batch (`retries`); by default unbounded, so
    /// `delivery_timeout_ms` decides, as in the Java client.
    pub retries: u32,
    /// Retry backoff doubles per attempt up to this (`retry.backoff.max.ms`).
    pub retry_backoff_max_ms: u64,
    /// Upper bound from `send` to success or failure (`delivery.timeout.ms`).
    pub delivery_timeout_ms: u64,
    /// Bytes of records queued before `send` waits (`buffer.memory`).
    pub buffer_memory: usize,
    /// Largest record accepted, in bytes (`max.request.size`).
    pub max_request_size: usize,
    pub partitioner: Partitioner,
    /// Whether metadata lookups may create missing topics (`allow.auto.create.topics`).
    pub allow_auto_create_topics: bool,
    /// Idempotent delivery (`enable.idempotence`): a producer id from InitProducerId and a
    /// sequence number per partition, so retries neither duplicate nor reorder records.
    /// Effective with `acks = All` only (as Kafka requires), and only if the broker serves
    /// InitProducerId; keep `in_flight_max` <= 5.
    pub enable_idempotence: bool,
    /// Makes this a transactional producer (`transactional.id`): call
    /// [`Producer::init_transactions`] once, then send inside
    /// `begin_transaction` .. `commit_transaction` / `abort_transaction`. Implies idempotence
    /// and acks=all.
    pub transactional_id: Option<String>,
    /// How long the coordinator lets a transaction stay open before aborting it
    /// (`transaction.timeout.ms`).
    pub transaction_timeout_ms: u64,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            client: ClientConfig::default(),
            acks: Acks::All,
            linger_ms: 5,
            batch_size: 16 * 1024,
            compression: Compression::None,
            retries: u32::MAX,
            retry_backoff_max_ms: 1_000,
            delivery_timeout_ms: 120_000,
            buffer_memory: 32 * 1024 * 1024,
            max_request_size: 1024 * 1024,
            partitioner: Partitioner::Default,
            allow_auto_create_topics: true,
            enable_idempotence: true,
            transactional_id: None,
            transaction_timeout_ms: 60_000,
        }
    }
}

/// A record to send.
///
/// ```
/// let r = client::ProducerRecord::new("orders", "payload").key("customer-7").header("trace", "x1");
/// assert_eq!(r.topic, "orders");
/// ```
#[derive(Clone, Debug, Default)]
pub struct ProducerRecord {
    pub topic: String,
    /// `None`: chosen by the partitioner.
    pub partition: Option<i32>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// CreateTime in ms since the epoch; `None`: now.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    pub fn new(topic: impl Into<String>, value: impl Into<Bytes>) -> ProducerRecord {
        ProducerRecord {
            topic: topic.into(),
            value: Some(value.into()),
            ..ProducerRecord::default()
        }
    }

    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    pub fn partition(mut self, p: i32) -> Self {
        self.partition = Some(p);
        self
    }

    pub fn header(mut self, k: impl Into<String>, v: impl Into<Bytes>) -> Self {
        self.headers.push((k.into(), Some(v.into())));
        self
    }

    pub fn timestamp(mut self, ts: i64) -> Self {
        self.timestamp = Some(ts);
        self
    }

    fn size(&self) -> usize {
        let h: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Bytes::len) + 4)
            .sum();
        self.key.as_ref().map_or(0, Bytes::len) + self.value.as_ref().map_or(0, Bytes::len) + h + 24
    }
}

/// Where a record was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordMetadata {
    pub topic: Arc<str>,
    pub partition: i32,
    /// -1 with acks=0.
    pub offset: i64,
    /// The record's timestamp (the broker's when the topic uses LogAppendTime).
    pub timestamp: i64,
}

/// Resolves when the broker acknowledged (or finally refused) one record.
#[derive(Debug)]
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<RecordMetadata>>,
}

impl std::future::Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::Closed)))
    }
}

/// A delivery callback, run on the producer's response task: keep it short.
pub type DeliveryCallback = Box<dyn FnOnce(Result<RecordMetadata>) + Send>;

enum Notice {
    Future(oneshot::Sender<Result<RecordMetadata>>),
    Callback(DeliveryCallback),
}

impl Notice {
    fn send(self, r: Result<RecordMetadata>) {
        match self {
            Notice::Future(tx) => {
                let _ = tx.send(r);
            }
            Notice::Callback(cb) => cb(r),
        }
    }
}

struct Waiter {
    tx: Notice,
    timestamp: i64,
}

struct OpenBatch {
    builder: BatchBuilder,
    waiters: Vec<Waiter>,
    created: Instant,
    bytes: usize,
}

enum Payload {
    Open(BatchBuilder),
    Built(Bytes),
}

struct ReadyBatch {
    topic: Arc<str>,
    partition: i32,
    payload: Payload,
    waiters: Vec<Waiter>,
    bytes: usize,
    attempts: u32,
    created: Instant,
    not_before: Option<Instant>,
    /// Set when built by an idempotent producer.
    base_sequence: Option<i32>,
    /// The producer id it was built with (idempotent producer).
    producer_id: Option<i64>,
}

#[derive(Default)]
struct PartQueue {
    open: Option<OpenBatch>,
    ready: VecDeque<ReadyBatch>,
}

struct Accumulator {
    parts: HashMap<(Arc<str>, i32), PartQueue>,
    sticky: HashMap<Arc<str>, Sticky>,
    rng: Rng,
    /// Next sequence number per partition (idempotent producer).
    next_sequence: HashMap<(Arc<str>, i32), i32>,
}

struct Shared {
    client: Client,
    config: ProducerConfig,
    acc: Mutex<Accumulator>,
    wake: Notify,
    memory: Semaphore,
    /// Records appended and not yet completed.
    outstanding: AtomicUsize,
    idle: Notify,
    flushing: AtomicUsize,
    closed: AtomicBool,
    /// Set when the producer id must be replaced (see `finish`).
    new_producer_id: AtomicBool,
    /// The producer id batches are currently built with (-1: none).
    current_producer_id: std::sync::atomic::AtomicI64,
    /// The epoch that goes with `current_producer_id`.
    current_epoch: std::sync::atomic::AtomicI32,
    /// Transaction state, for a transactional producer.
    txn: Option<TxnManager>,
}

/// An async Kafka producer.
///
/// ```no_run
/// # async fn f() -> Result<(), client::Error> {
/// use client::{Producer, ProducerConfig, ProducerRecord, ClientConfig};
/// let producer = Producer::new(ProducerConfig {
///     client: ClientConfig::new("127.0.0.1:9092"),
///     ..ProducerConfig::default()
/// }).await?;
/// let md = producer.send(ProducerRecord::new("greetings", "hello").key("k")).await?;
/// println!("written to partition {} at offset {}", md.partition, md.offset);
/// producer.close().await?;
/// # Ok(()) }
/// ```
pub struct Producer {
    shared: Arc<Shared>,
    sender: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer").finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Producer {
    /// Connects and starts the sender task.
    pub async fn new(config: ProducerConfig) -> Result<Producer> {
        let client = Client::connect(config.client.clone()).await?;
        Producer::with_client(client, config)
    }

    /// A producer over an existing client (sharing its connections and metadata).
    pub fn with_client(client: Client, config: ProducerConfig) -> Result<Producer> {
        if config.batch_size == 0 || config.buffer_memory < config.max_request_size {
            return Err(Error::Config(
                "batch.size must be > 0 and buffer.memory >= max.request.size".into(),
            ));
        }
        let mut config = config;
        let txn = config.transactional_id.clone().map(|id| {
            // Transactions need idempotent, fully acknowledged writes (as in Kafka).
            config.acks = Acks::All;
            config.enable_idempotence = true;
            TxnManager::new(id, config.transaction_timeout_ms)
        });
        let shared = Arc::new(Shared {
            memory: Semaphore::new(config.buffer_memory),
            client,
            config,
            acc: Mutex::new(Accumulator {
                parts: HashMap::new(),
                sticky: HashMap::new(),
                rng: Rng::seeded(),
                next_sequence: HashMap::new(),
            }),
            wake: Notify::new(),
            outstanding: AtomicUsize::new(0),
            idle: Notify::new(),
            flushing: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            new_producer_id: AtomicBool::new(false),
            current_producer_id: std::sync::atomic::AtomicI64::new(-1),
            current_epoch: std::sync::atomic::AtomicI32::new(-1),
            txn,
        });
        let sender = tokio::spawn(sender_loop(shared.clone()));
        Ok(Producer {
            shared,
            sender: Some(sender),
        })
    }

    pub fn client(&self) -> &Client {
        &self.shared.client
    }

    /// Sends one record and waits for its acknowledgement.
    pub async fn send(&self, record: ProducerRecord) -> Result<RecordMetadata> {
        self.enqueue(record).await?.await
    }

    /// Appends one record to its partition's batch and returns a future for its delivery.
    /// Records enqueued one after another from one task keep their order per partition.
    pub async fn enqueue(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let (tx, rx) = oneshot::channel();
        self.append(record, Notice::Future(tx)).await?;
        Ok(DeliveryFuture { rx })
    }

    /// Appends one record; `callback` runs with its delivery result (on the producer's
    /// response task, so keep it short). Cheaper than a future per record at high rates.
    pub async fn send_with_callback(
        &self,
        record: ProducerRecord,
        callback: impl FnOnce(Result<RecordMetadata>) + Send + 'static,
    ) -> Result<()> {
        self.append(record, Notice::Callback(Box::new(callback)))
            .await
    }

    async fn append(&self, record: ProducerRecord, tx: Notice) -> Result<()> {
        let s = &self.shared;
        if s.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        let size = record.size();
        if size > s.config.max_request_size {
            return Err(Error::broker(
                ErrorCode::MessageTooLarge,
                Some(format!(
                    "record of {size} bytes exceeds max.request.size {}",
                    s.config.max_request_size
                )),
            ));
        }
        if let Some(txn) = &s.txn {
            txn.check_in_transaction()?;
        }
        let topic = s
            .client
            .topic(&record.topic, s.config.allow_auto_create_topics)
            .await?;
        let partitions = topic.partitions.len() as i32;
        if partitions == 0 {
            return Err(Error::broker(ErrorCode::UnknownTopicOrPartition, None));
        }
        // A transactional producer picks the partition first and adds it to the transaction
        // before any record of it can be sent.
        let record = match &s.txn {
            None => record,
            Some(txn) => {
                let mut record = record;
                let p = self.choose_partition(&record, partitions, size)?;
                record.partition = Some(p);
                let topic_key: Arc<str> = Arc::from(record.topic.as_str());
                let timeout = Duration::from_millis(s.config.delivery_timeout_ms);
                txn.add_partition(&s.client, &topic_key, p, timeout).await?;
                record
            }
        };
        // Memory is returned when the record's batch completes.
        s.memory
            .acquire_many(size as u32)
            .await
            .map_err(|_| Error::Closed)?
            .forget();
        let timestamp = record.timestamp.unwrap_or_else(now_ms);
        let wake;
        {
            let mut acc = s
                .acc
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let acc = &mut *acc;
            let topic_key: Arc<str> = Arc::from(record.topic.as_str());
            let partition = match choose_partition(s, acc, &record, partitions, size) {
                Ok(p) => p,
                Err(e) => {
                    s.memory.add_permits(size);
                    return Err(e);
                }
            };
            let q = acc.parts.entry((topic_key.clone(), partition)).or_default();
            let mut nr = NewRecord::new(record.key, record.value, timestamp);
            nr.headers = record
                .headers
                .into_iter()
                .map(|(k, v)| RecordHeader {
                    key: Bytes::from(k),
                    value: v,
                })
                .collect();
            let full = q
                .open
                .as_ref()
                .is_some_and(|b| b.bytes + size > s.config.batch_size && !b.waiters.is_empty());
            if full {
                if let Some(b) = q.open.take() {
                    q.ready
                        .push_back(close_batch(topic_key.clone(), partition, b));
                }
            }
            wake = full || q.open.is_none();
            let b = q.open.get_or_insert_with(|| OpenBatch {
                builder: BatchBuilder::new(s.config.compression),
                waiters: Vec::new(),
                created: Instant::now(),
                bytes: 0,
            });
            b.builder.push(nr);
            b.bytes += size;
            b.waiters.push(Waiter { tx, timestamp });
        }
        s.outstanding.fetch_add(1, Ordering::AcqRel);
        if wake {
            s.wake.notify_one();
        }
        Ok(())
    }

    /// The partition a record goes to (the partitioner's choice unless it names one).
    fn choose_partition(
        &self,
        record: &ProducerRecord,
        partitions: i32,
        size: usize,
    ) -> Result<i32> {
        let s = &self.shared;
        let mut acc = s.acc();
        choose_partition(s, &mut acc, record, partitions, size)
    }

    /// Sends everything queued at once (ignoring `linger_ms`) and waits until no record is
    /// outstanding: every record enqueued before the call has completed (records other tasks
    /// keep enqueuing meanwhile are waited for too).
    pub async fn flush(&self) -> Result<()> {
        let s = &self.shared;
        s.flushing.fetch_add(1, Ordering::AcqRel);
        s.wake.notify_one();
        loop {
            let idle = s.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if s.outstanding.load(Ordering::Acquire) == 0 {
                break;
            }
            idle.await;
        }
        s.flushing.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    }

    /// Transactional producer: gets the producer id and epoch for `transactional_id` from the
    /// transaction coordinator, fencing any earlier producer with the same id (its open
    /// transaction is aborted). Call once, before the first transaction.
    pub async fn init_transactions(&self) -> Result<()> {
        let txn = self.txn()?;
        txn.init(&self.shared.client, self.txn_timeout()).await
    }

    /// Starts a transaction (locally; the coordinator learns of it with its first partition).
    pub fn begin_transaction(&self) -> Result<()> {
        self.txn()?.begin()
    }

    /// Commits `offsets` (topic, partition -> next offset to read) for the consumer group
    /// inside the current transaction: they count only if it commits (consume-transform-
    /// produce exactly once).
    pub async fn send_offsets_to_transaction(
        &self,
        offsets: &BTreeMap<(String, i32), i64>,
        group: &ConsumerGroupMetadata,
    ) -> Result<()> {
        let txn = self.txn()?;
        txn.send_offsets(&self.shared.client, offsets, group, self.txn_timeout())
            .await
    }

    /// Flushes the transaction's records and commits it. If any of them failed, the commit
    /// is refused (TRANSACTION_ABORTABLE) and the transaction must be aborted.
    pub async fn commit_transaction(&self) -> Result<()> {
        let txn = self.txn()?;
        txn.check_in_transaction()?;
        self.flush().await?;
        txn.end(&self.shared.client, true, self.txn_timeout()).await
    }

    /// Aborts the current transaction: its records are never seen by read_committed
    /// consumers, its offsets never committed.
    pub async fn abort_transaction(&self) -> Result<()> {
        let txn = self.txn()?;
        txn.check_in_transaction()?;
        self.flush().await?;
        let r = txn
            .end(&self.shared.client, false, self.txn_timeout())
            .await;
        if r.is_ok() && txn.producer_id() != self.shared.producer_id_in_use() {
            // The epoch was bumped: the sender starts its sequences over.
            self.shared.wake.notify_one();
        }
        r
    }

    fn txn(&self) -> Result<&TxnManager> {
        self.shared.txn.as_ref().ok_or_else(|| {
            Error::Config("not a transactional producer (no transactional_id)".into())
        })
    }

    fn txn_timeout(&self) -> Duration {
        Duration::from_millis(self.shared.config.delivery_timeout_ms)
    }

    /// Flushes, then stops the sender task.
    pub async fn close(mut self) -> Result<()> {
        self.flush().await?;
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
        if let Some(h) = self.sender.take() {
            let _ = h.await;
        }
        Ok(())
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // The sender drains what is queued, then exits on its own.
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
    }
}

/// The partitioner: the record's own partition, the Java client's murmur2 of the key, or
/// sticky / round-robin for keyless records.
fn choose_partition(
    s: &Shared,
    acc: &mut Accumulator,
    record: &ProducerRecord,
    partitions: i32,
    size: usize,
) -> Result<i32> {
    let topic_key: Arc<str> = Arc::from(record.topic.as_str());
    Ok(match (record.partition, &record.key) {
        (Some(p), _) => {
            if p < 0 || p >= partitions {
                return Err(Error::broker(
                    ErrorCode::UnknownTopicOrPartition,
                    Some(format!("{}-{p}", record.topic)),
                ));
            }
            p
        }
        (None, Some(k)) if s.config.partitioner == Partitioner::Default => {
            partition_for_key(k, partitions)
        }
        (None, _) => {
            let st = acc.sticky.entry(topic_key).or_default();
            if s.config.partitioner == Partitioner::RoundRobin {
                st.round_robin = st.round_robin.wrapping_add(1);
                (st.round_robin % partitions as u32) as i32
            } else {
                if !st.chosen || st.bytes >= s.config.batch_size {
                    let prev = st.partition;
                    let mut p = (acc.rng.next_u32() % partitions as u32) as i32;
                    if partitions > 1 && st.chosen && p == prev {
                        p = (p + 1) % partitions;
                    }
                    st.partition = p;
                    st.bytes = 0;
                    st.chosen = true;
                }
                st.bytes += size;
                st.partition
            }
        }
    })
}

fn close_batch(topic: Arc<str>, partition: i32, b: OpenBatch) -> ReadyBatch {
    ReadyBatch {
        topic,
        partition,
        payload: Payload::Open(b.builder),
        waiters: b.waiters,
        bytes: b.bytes,
        attempts: 0,
        created: b.created,
        not_before: None,
        base_sequence: None,
        producer_id: None,
    }
}

impl Shared {
    /// The producer id and epoch of the last batch built (transactional producer).
    fn producer_id_in_use(&self) -> Option<(i64, i16)> {
        let pid = self.current_producer_id.load(Ordering::Acquire);
        (pid >= 0).then(|| (pid, self.current_epoch.load(Ordering::Acquire) as i16))
    }

    fn acc(&self) -> std::sync::MutexGuard<'_, Accumulator> {
        self.acc
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Completes a batch's records: returns their memory and wakes flushers when idle.
    fn finish(&self, batch: ReadyBatch, result: std::result::Result<(i64, i64), Error>) {
        let n = batch.waiters.len();
        match result {
            Ok((base_offset, log_append_time)) => {
                for (i, w) in batch.waiters.into_iter().enumerate() {
                    w.tx.send(Ok(RecordMetadata {
                        topic: batch.topic.clone(),
                        partition: batch.partition,
                        offset: if base_offset < 0 {
                            -1
                        } else {
                            base_offset + i as i64
                        },
                        timestamp: if log_append_time >= 0 {
                            log_append_time
                        } else {
                            w.timestamp
                        },
                    }));
                }
            }
            Err(e) => {
                if let Some(txn) = &self.txn {
                    // The transaction can't commit now; aborting it bumps the epoch.
                    txn.record_failed(n);
                } else if batch.base_sequence.is_some() && !e.is_retriable() {
                    // A sequenced batch that will never be written leaves a gap the broker
                    // won't accept later sequences across: start over with a new producer id
                    // (the Java client bumps the epoch instead).
                    self.new_producer_id.store(true, Ordering::Release);
                }
                let msg = e.to_string();
                let retriable = e.is_retriable();
                for w in batch.waiters {
                    let err = match &e {
                        Error::Broker { code, message } => Error::broker(*code, message.clone()),
                        _ if retriable => Error::Timeout(self.config.delivery_timeout_ms),
                        _ => Error::Protocol(msg.clone()),
                    };
                    w.tx.send(Err(err));
                }
            }
        }
        self.memory.add_permits(batch.bytes);
        if self.outstanding.fetch_sub(n, Ordering::AcqRel) == n {
            self.idle.notify_waiters();
        }
    }

    /// Takes at most one sendable batch per partition. Returns them and when to look again.
    fn drain(&self, now: Instant) -> (Vec<ReadyBatch>, Option<Instant>) {
        let linger = Duration::from_millis(self.config.linger_ms);
        let flushing =
            self.flushing.load(Ordering::Acquire) > 0 || self.closed.load(Ordering::Acquire);
        let mut out = Vec::new();
        let mut next: Option<Instant> = None;
        let mut acc = self.acc();
        for ((topic, partition), q) in acc.parts.iter_mut() {
            if q.ready.is_empty() {
                if let Some(b) = &q.open {
                    let due = b.created + linger;
                    if flushing || due <= now {
                        if let Some(b) = q.open.take() {
                            q.ready.push_back(close_batch(topic.clone(), *partition, b));
                        }
                    } else {
                        next = Some(next.map_or(due, |n| n.min(due)));
                    }
                }
            }
            if let Some(front) = q.ready.front() {
                match front.not_before {
                    Some(t) if t > now => next = Some(next.map_or(t, |n| n.min(t))),
                    _ => {
                        if let Some(b) = q.ready.pop_front() {
                            out.push(b);
                        }
                    }
                }
            }
        }
        acc.parts
            .retain(|_, q| q.open.is_some() || !q.ready.is_empty());
        (out, next)
    }

    /// Puts a batch back at the head of its partition's queue for a later attempt.
    fn requeue(&self, mut batch: ReadyBatch, err: Error) {
        let expired =
            batch.created.elapsed() >= Duration::from_millis(self.config.delivery_timeout_ms);
        // With idempotence, OUT_OF_ORDER_SEQUENCE_NUMBER means an earlier batch of the
        // partition failed and is being retried: retry this one after it.
        let current_pid = self.current_producer_id.load(Ordering::Acquire);
        let retriable = err.is_retriable()
            || (batch.base_sequence.is_some()
                && batch.producer_id == Some(current_pid)
                && !self.new_producer_id.load(Ordering::Acquire)
                && err.code() == Some(ErrorCode::OutOfOrderSequenceNumber));
        if !retriable || batch.attempts >= self.config.retries || expired {
            self.finish(batch, Err(err));
            return;
        }
        if err.needs_metadata_refresh() {
            self.client.invalidate_topic(&batch.topic);
        }
        batch.attempts += 1;
        // Exponential backoff: retry.backoff.ms doubling per attempt, capped.
        let backoff = self
            .client
            .config()
            .retry_backoff_ms
            .saturating_mul(1u64 << batch.attempts.min(16))
            .min(self.config.retry_backoff_max_ms.max(1));
        batch.not_before = Some(Instant::now() + Duration::from_millis(backoff));
        tracing::debug!(topic = %batch.topic, partition = batch.partition, attempt = batch.attempts, error = %err, "retrying batch");
        self.insert_ready(batch);
        self.wake.notify_one();
    }

    /// Puts a batch back into its partition's ready queue: sequenced batches in sequence
    /// order, others at the head (they were the head when drained).
    fn insert_ready(&self, batch: ReadyBatch) {
        let mut acc = self.acc();
        let ready = &mut acc
            .parts
            .entry((batch.topic.clone(), batch.partition))
            .or_default()
            .ready;
        // Keep sequenced batches in sequence order: retries go back before later batches.
        let at = match batch.base_sequence {
            Some(seq) => ready
                .iter()
                .position(|b| b.base_sequence.is_none_or(|other| other > seq))
                .unwrap_or(ready.len()),
            None => 0,
        };
        ready.insert(at, batch);
        drop(acc);
    }
}

/// Gets a producer id for idempotent delivery; `None` when idempotence is off or the broker
/// does not offer it.
async fn init_producer_id(s: &Shared) -> Option<(i64, i16)> {
    if !(s.config.enable_idempotence && s.config.acks == Acks::All) {
        return None;
    }
    let deadline = Instant::now() + Duration::from_millis(s.config.delivery_timeout_ms);
    let mut backoff = s.client.config().retry_backoff_ms.max(1);
    loop {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000);
        let r = match s.client.conn_any().await {
            Ok(conn) => conn.send(&req).await,
            Err(e) => Err(e),
        };
        match r.and_then(|resp| {
            Error::check(resp.error_code).map(|()| (resp.producer_id.0, resp.producer_epoch))
        }) {
            Ok(id) => return Some(id),
            Err(Error::UnsupportedVersion(api)) => {
                tracing::warn!(%api, "broker offers no InitProducerId: producing without idempotence");
                return None;
            }
            Err(e) if e.is_retriable() && Instant::now() < deadline => {
                tracing::debug!(error = %e, "InitProducerId failed; retrying");
                tokio::time::sleep(Duration::from_millis(backoff)).await;
                backoff = (backoff * 2).min(s.config.retry_backoff_max_ms.max(1));
            }
            Err(e) => {
                tracing::warn!(error = %e, "InitProducerId failed: producing without idempotence");
                return None;
            }
        }
    }
}

async fn sender_loop(s: Arc<Shared>) {
    let mut producer_id: Option<(i64, i16)> = None;
    let mut initialized = false;
    loop {
        let now = Instant::now();
        let (batches, next) = s.drain(now);
        if batches.is_empty() {
            if s.closed.load(Ordering::Acquire) && s.outstanding.load(Ordering::Acquire) == 0 {
                return;
            }
            let wait = next
                .map(|t| t.saturating_duration_since(now))
                .unwrap_or(Duration::from_millis(100));
            // Notified is cancel-safe: a notification that arrives meanwhile is kept as a permit.
            let _ = tokio::time::timeout(wait, s.wake.notified()).await;
            continue;
        }
        if let Some(txn) = &s.txn {
            // The transaction manager owns the producer id; a new epoch restarts sequences.
            let current = txn.producer_id();
            if current != producer_id || !initialized {
                producer_id = current;
                s.current_producer_id
                    .store(producer_id.map_or(-1, |(pid, _)| pid), Ordering::Release);
                s.current_epoch.store(
                    producer_id.map_or(-1, |(_, e)| i32::from(e)),
                    Ordering::Release,
                );
                s.acc().next_sequence.clear();
                initialized = true;
            }
        } else if !initialized || s.new_producer_id.swap(false, Ordering::AcqRel) {
            producer_id = init_producer_id(&s).await;
            s.current_producer_id
                .store(producer_id.map_or(-1, |(pid, _)| pid), Ordering::Release);
            s.acc().next_sequence.clear();
            initialized = true;
        }
        let mut live = Vec::with_capacity(batches.len());
        for mut b in batches {
            if b.created.elapsed() >= Duration::from_millis(s.config.delivery_timeout_ms) {
                s.finish(b, Err(Error::Timeout(s.config.delivery_timeout_ms)));
                continue;
            }
            if let (Payload::Open(builder), Some((pid, epoch))) = (&mut b.payload, producer_id) {
                let mut acc = s.acc();
                let next = acc
                    .next_sequence
                    .entry((b.topic.clone(), b.partition))
                    .or_insert(0);
                let seq = *next;
                // Sequences wrap at i32::MAX, as in Kafka.
                *next =
                    ((i64::from(seq) + b.waiters.len() as i64) % (i64::from(i32::MAX) + 1)) as i32;
                drop(acc);
                let open = std::mem::replace(builder, BatchBuilder::new(Compression::None));
                *builder = open
                    .producer(pid, epoch, seq)
                    .transactional(s.txn.is_some());
                b.base_sequence = Some(seq);
                b.producer_id = Some(pid);
            }
            live.push(b);
        }
        // Compressing is CPU work: keep it off the async workers.
        let built = if s.config.compression == Compression::None {
            build_all(live)
        } else {
            match tokio::task::spawn_blocking(move || build_all(live)).await {
                Ok(built) => built,
                Err(e) => {
                    tracing::error!(error = %e, "batch compression task failed");
                    continue;
                }
            }
        };
        let mut by_node: HashMap<i32, Vec<ReadyBatch>> = HashMap::new();
        for (b, err) in built {
            if let Some(e) = err {
                s.finish(b, Err(Error::Record(e)));
                continue;
            }
            match s
                .client
                .leader_for_auto_create(&b.topic, b.partition, s.config.allow_auto_create_topics)
                .await
            {
                Ok(node) => by_node.entry(node).or_default().push(b),
                Err(e) => {
                    s.client.invalidate_topic(&b.topic);
                    s.requeue(b, e);
                }
            }
        }
        let mut sent_any = false;
        let mut waiting = false;
        for (node, batches) in by_node {
            match send_to_node(&s, node, batches).await {
                None => sent_any = true,
                Some(back) => {
                    waiting = true;
                    for b in back {
                        s.insert_ready(b);
                    }
                }
            }
        }
        if waiting && !sent_any {
            // Every target broker is at its in-flight limit: wait for a response (which
            // wakes us) instead of spinning; the timeout is a safety net.
            let _ = tokio::time::timeout(Duration::from_millis(50), s.wake.notified()).await;
        }
    }
}

/// Encodes (and compresses) every batch still open; a failure is returned with its batch.
fn build_all(batches: Vec<ReadyBatch>) -> Vec<(ReadyBatch, Option<record::RecordError>)> {
    batches
        .into_iter()
        .map(|mut b| {
            let err = match &b.payload {
                Payload::Open(builder) => match builder.build() {
                    Ok(data) => {
                        b.payload = Payload::Built(data);
                        None
                    }
                    Err(e) => Some(e),
                },
                Payload::Built(_) => None,
            };
            (b, err)
        })
        .collect()
}

fn produce_request(config: &ProducerConfig, batches: &[ReadyBatch]) -> ProduceRequest {
    let mut topics: Vec<TopicProduceData> = Vec::new();
    for b in batches {
        let data = match &b.payload {
            Payload::Built(d) => d.clone(),
            Payload::Open(_) => continue,
        };
        let part = PartitionProduceData::default()
            .with_index(b.partition)
            .with_records(Some(data));
        match topics.iter_mut().find(|t| t.name.0.as_str() == &*b.topic) {
            Some(t) => t.partition_data.push(part),
            None => topics.push(
                TopicProduceData::default()
                    .with_name(topic_name(&b.topic))
                    .with_partition_data(vec![part]),
            ),
        }
    }
    ProduceRequest::default()
        .with_transactional_id(config.transactional_id.as_deref().map(|t| {
            protocol::messages::TransactionalId(protocol::StrBytes::from_string(t.to_owned()))
        }))
        .with_acks(config.acks.as_i16())
        .with_timeout_ms(crate::cluster::broker_timeout_ms(
            config.client.request_timeout_ms,
        ))
        .with_topic_data(topics)
}

/// Sends one Produce request to `node`. Returns the batches untouched when the broker's
/// in-flight slots are all taken, so a slow broker never holds up the others (the caller puts
/// them back and waits for a response to free a slot).
async fn send_to_node(
    s: &Arc<Shared>,
    node: i32,
    batches: Vec<ReadyBatch>,
) -> Option<Vec<ReadyBatch>> {
    let conn = match s.client.conn_node(node).await {
        Ok(c) => c,
        Err(e) => {
            for b in batches {
                s.client.invalidate_topic(&b.topic);
                s.requeue(
                    b,
                    Error::Disconnected {
                        addr: format!("broker {node}"),
                        reason: e.to_string(),
                    },
                );
            }
            return None;
        }
    };
    let req = produce_request(&s.config, &batches);
    if s.config.acks == Acks::None {
        // Done once the request is on the socket: a flush or close that returns before that
        // (and drops the connection) would lose the records.
        match conn.send_oneway(&req) {
            Ok(written) => {
                let s = s.clone();
                let addr = conn.addr().to_owned();
                tokio::spawn(async move {
                    let sent = written.await.is_ok();
                    for b in batches {
                        if sent {
                            s.finish(b, Ok((-1, -1)));
                        } else {
                            s.requeue(
                                b,
                                Error::Disconnected {
                                    addr: addr.clone(),
                                    reason: "connection closed before the request was sent".into(),
                                },
                            );
                        }
                    }
                    s.wake.notify_one();
                });
            }
            Err(e) => {
                for b in batches {
                    s.requeue(
                        b,
                        Error::Disconnected {
                            addr: conn.addr().to_owned(),
                            reason: e.to_string(),
                        },
                    );
                }
            }
        }
        return None;
    }
    // Requests to one broker leave in the order they are started here.
    match conn.try_start(&req) {
        Ok(None) => Some(batches),
        Ok(Some(pending)) => {
            let s = s.clone();
            tokio::spawn(async move {
                complete(&s, pending, batches).await;
                // A slot is free again: let the sender look at waiting batches.
                s.wake.notify_one();
            });
            None
        }
        Err(e) => {
            let reason = e.to_string();
            for b in batches {
                let err = if e.is_retriable() {
                    Error::Disconnected {
                        addr: conn.addr().to_owned(),
                        reason: reason.clone(),
                    }
                } else {
                    Error::Protocol(reason.clone())
                };
                s.requeue(b, err);
            }
            None
        }
    }
}

async fn complete(s: &Shared, pending: PendingResponse<ProduceRequest>, batches: Vec<ReadyBatch>) {
    let resp: ProduceResponse = match pending.wait().await {
        Ok(r) => r,
        Err(e) => {
            let reason = e.to_string();
            for b in batches {
                let err = match &e {
                    Error::Timeout(ms) => Error::Timeout(*ms),
                    Error::Disconnected { addr, .. } => Error::Disconnected {
                        addr: addr.clone(),
                        reason: reason.clone(),
                    },
                    _ => Error::Protocol(reason.clone()),
                };
                s.requeue(b, err);
            }
            return;
        }
    };
    for b in batches {
        let part = resp
            .responses
            .iter()
            .find(|t| t.name.0.as_str() == &*b.topic)
            .and_then(|t| {
                t.partition_responses
                    .iter()
                    .find(|p| p.index == b.partition)
            });
        match part {
            None => s.requeue(
                b,
                Error::Protocol("produce response lacks a partition".into()),
            ),
            // DUPLICATE_SEQUENCE_NUMBER: the broker already has this batch from an earlier try.
            Some(p) if p.error_code == ErrorCode::DuplicateSequenceNumber.code() => {
                s.finish(b, Ok((p.base_offset, p.log_append_time_ms)))
            }
            Some(p) => match Error::check_msg(p.error_code, p.error_message.as_deref()) {
                Ok(()) => s.finish(b, Ok((p.base_offset, p.log_append_time_ms))),
                Err(e) => s.requeue(b, e),
            },
        }
    }
}
