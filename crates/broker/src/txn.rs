//! The transaction coordinator's runtime: routes transaction requests into the sans-IO
//! `TransactionCoordinator`, appends the `__transaction_state` records it asks for, reports
//! them back once durable (or failed), hands transaction markers to the [`MarkerChannel`],
//! delivers responses, and drives the coordinator's timers.
//!
//! `__transaction_state` is created through the controller on the first FindCoordinator for a
//! transactional id (as Kafka does) with `transaction.state.log.num.partitions` partitions,
//! compacted. The coordinator follows partition leadership as the committed metadata
//! publishes it ([`Transactions::on_metadata`]): it serves the partitions this broker leads, at
//! their leader epoch as coordinator epoch, replaying each when it comes to lead it.

use crate::handlers::{Ctx, Reply};
use crate::internal_replay::{replay_partition, Replayed};
use crate::peers::PeerLinks;
use crate::state::BrokerState;
use crate::txn_markers::MarkerChannel;
use coordinator::{
    CoordinatorNode, MarkerAck, RequestContext, TransactionCoordinator, TxnConfig, TxnEnv,
    TxnOutput,
};
use metadata::{MetadataDelta, MetadataImage};
use model::ErrorCode;
use protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ProducerId, TopicName, TransactionalId,
};
use protocol::{RequestKind, ResponseKind, StrBytes};
use record::{BatchBuilder, Compression, NewRecord};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};

pub const TXN_TOPIC: &str = "__transaction_state";

/// How long a `__transaction_state` write waits for the high watermark before it counts as
/// failed (Kafka appends them with acks=-1 and `request.timeout.ms`).
const WRITE_TIMEOUT_MS: i64 = 30_000;

/// The AddPartitionsToTxn version a partition leader uses with a coordinator (batched,
/// TRANSACTION_ABORTABLE known).
const ADD_PARTITIONS_BROKER_VERSION: i16 = 5;

/// A broker's AddPartitionsToTxn for one producer's partitions.
fn add_request(
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    partitions: &BTreeSet<(String, i32)>,
    verify_only: bool,
) -> AddPartitionsToTxnRequest {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in partitions {
        topics.entry(t.as_str()).or_default().push(*p);
    }
    AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(
                transactional_id.to_string(),
            )))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch)
            .with_verify_only(verify_only)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        AddPartitionsToTxnTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_string())))
                            .with_partitions(ps)
                    })
                    .collect(),
            ),
    ])
}

/// The leader of `transactional_id`'s `__transaction_state` partition in `image`.
fn coordinator_leader(image: &MetadataImage, transactional_id: &str) -> Result<i32, ErrorCode> {
    let topic = image
        .topic(TXN_TOPIC)
        .ok_or(ErrorCode::CoordinatorNotAvailable)?;
    let p = coordinator::partition_for(transactional_id, topic.partitions.len() as i32);
    topic
        .partitions
        .get(p as usize)
        .map(|pi| pi.leader)
        .ok_or(ErrorCode::CoordinatorNotAvailable)
}

/// The config overrides `__transaction_state` always has (Kafka's): compacted, uncompressed,
/// `transaction.state.log.segment.bytes` segments.
fn txn_topic_configs(state: &BrokerState) -> BTreeMap<String, String> {
    let mut configs = BTreeMap::new();
    configs.insert("cleanup.policy".to_string(), "compact".to_string());
    configs.insert("compression.type".to_string(), "uncompressed".to_string());
    configs.insert(
        "segment.bytes".to_string(),
        state
            .config
            .transactions
            .state_log_segment_bytes
            .to_string(),
    );
    configs
}

/// What the coordinator asks of the broker: producer ids from the controller's blocks, and
/// which partitions exist.
struct Env<'a> {
    state: &'a BrokerState,
}

impl TxnEnv for Env<'_> {
    fn next_producer_id(&mut self) -> Result<i64, ErrorCode> {
        self.state.next_producer_id_now()
    }

    fn partition_exists(&self, topic: &str, partition: i32) -> bool {
        self.state
            .image()
            .topic(topic)
            .is_some_and(|t| partition >= 0 && (partition as usize) < t.partitions.len())
    }
}

/// Owns the transaction coordinator, the routes of its pending responses and the marker
/// channel.
pub struct Transactions {
    coordinator: Mutex<TransactionCoordinator>,
    pending: Mutex<HashMap<u64, oneshot::Sender<ResponseKind>>>,
    next_token: AtomicU64,
    wake: Notify,
    /// `__transaction_state` partitions loaded (the ones this broker leads), each with the
    /// leader epoch it was loaded at (its coordinator epoch).
    loaded: Mutex<BTreeMap<i32, i32>>,
    pub markers: Arc<MarkerChannel>,
    /// Links to the other brokers: markers for partitions they lead, verification with a
    /// coordinator they host.
    pub peers: PeerLinks,
}

impl std::fmt::Debug for Transactions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transactions").finish()
    }
}

impl Transactions {
    pub fn new(config: &model::BrokerConfig) -> Transactions {
        Transactions {
            coordinator: Mutex::new(TransactionCoordinator::new(TxnConfig::from_broker(config))),
            pending: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(1),
            wake: Notify::new(),
            loaded: Mutex::new(BTreeMap::new()),
            markers: Arc::new(MarkerChannel::default()),
            peers: PeerLinks::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TransactionCoordinator> {
        self.coordinator.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Uses the actual partition count of `__consumer_offsets` for AddOffsetsToTxn.
    pub fn set_offsets_topic_partitions(&self, partitions: i32) {
        self.lock().set_offsets_topic_partitions(partitions);
    }

    /// Follows a committed image: loads the `__transaction_state` partitions this broker now
    /// leads, each at its current leader epoch, and unloads the ones it no longer leads at the
    /// epoch it loaded them (a new epoch is a new load: another coordinator may have written
    /// the partition meanwhile). Runs on the metadata loader.
    pub fn on_metadata(
        self: &Arc<Self>,
        state: &Arc<BrokerState>,
        image: &MetadataImage,
        _delta: &MetadataDelta,
    ) {
        let leading: BTreeMap<i32, i32> = match image.topic(TXN_TOPIC) {
            Some(t) => {
                self.lock()
                    .set_state_log_partitions(t.partitions.len() as i32);
                t.partitions
                    .iter()
                    .enumerate()
                    .filter(|(i, p)| {
                        p.leader == state.node_id
                            && state.replicas.get(TXN_TOPIC, *i as i32).is_some_and(|r| {
                                r.is_leader() && r.leader_epoch() == p.leader_epoch
                            })
                    })
                    .map(|(i, p)| (i as i32, p.leader_epoch))
                    .collect()
            }
            None => BTreeMap::new(),
        };
        let loaded: BTreeMap<i32, i32> = self
            .loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (p, epoch) in &loaded {
            if leading.get(p) == Some(epoch) {
                continue;
            }
            self.unload_partition(state, *p);
            self.loaded
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(p);
            tracing::info!(partition = p, epoch, "unloaded {TXN_TOPIC} partition");
        }
        for (p, epoch) in &leading {
            if loaded.get(p) == Some(epoch) {
                continue;
            }
            match self.load_partition(state, *p, *epoch) {
                Ok(()) => {
                    self.loaded
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(*p, *epoch);
                    tracing::info!(partition = p, epoch, "loaded {TXN_TOPIC} partition");
                }
                Err(e) => {
                    tracing::error!(partition = p, error = ?e, "loading {TXN_TOPIC} partition failed")
                }
            }
        }
    }

    /// Creates `__transaction_state` through the controller, if it does not exist yet. Its
    /// replication factor follows the internal-topic rule (see `BrokerConfig`).
    pub async fn create_state_topic(&self, state: &Arc<BrokerState>) -> Result<(), ErrorCode> {
        if state.image().topic(TXN_TOPIC).is_some() {
            return Ok(());
        }
        let settings = &state.config.transactions;
        let rf = state.config.internal_topic_replication_factor(
            settings.state_log_replication_factor,
            state
                .config
                .props
                .contains_key("transaction.state.log.replication.factor"),
        );
        let request = controller::Request::CreateTopics {
            topics: vec![controller::TopicSpec {
                name: TXN_TOPIC.to_string(),
                partitions: settings.state_log_num_partitions,
                replication_factor: rf,
                assignment: Vec::new(),
                configs: txn_topic_configs(state),
            }],
            validate_only: false,
            origin: controller::Origin::Broker,
            quota: None,
        };
        let result = match state.controller_call(request).await {
            Ok(controller::Reply::CreateTopics(mut r)) if !r.is_empty() => r.remove(0).map(|_| ()),
            Ok(_) => return Err(ErrorCode::CoordinatorNotAvailable),
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => {
                tracing::info!(replication_factor = rf, "created {TXN_TOPIC}");
                Ok(())
            }
            Err(e) if e.code == ErrorCode::TopicAlreadyExists => Ok(()),
            Err(e) => {
                tracing::warn!(error = %e, "creating {TXN_TOPIC} failed");
                Err(ErrorCode::CoordinatorNotAvailable)
            }
        }
    }

    /// Starts coordinating the transactional ids of `__transaction_state` partition `p`
    /// (this broker became its leader at `epoch`): replays it, then serves it at that leader
    /// epoch as coordinator epoch. Markers of transactions that were preparing go out again.
    pub fn load_partition(
        self: &Arc<Self>,
        state: &Arc<BrokerState>,
        p: i32,
        epoch: i32,
    ) -> Result<(), ErrorCode> {
        let Some(partition) = state.replicas.get(TXN_TOPIC, p) else {
            tracing::error!(partition = p, "{TXN_TOPIC} partition is not hosted");
            return Err(ErrorCode::CoordinatorNotAvailable);
        };
        let mut c = self.lock();
        c.begin_loading(p);
        replay_partition(&partition, TXN_TOPIC, p, |entry| {
            // The transaction log is never written transactionally: markers carry nothing.
            if let Replayed::Record {
                offset, key, value, ..
            } = entry
            {
                if let Err(e) = c.replay(&key, value.as_deref()) {
                    tracing::warn!(partition = p, offset, error = %e, "skipping unreadable {TXN_TOPIC} record");
                }
            }
        })?;
        let now = state.clock.now_ms();
        let out = c.load_partition(p, epoch, now);
        self.process(state, &mut c, out);
        drop(c);
        self.wake.notify_one();
        Ok(())
    }

    /// Stops coordinating partition `p` (leadership moved away): waiting requests get
    /// NOT_COORDINATOR, queued markers of its transactions are dropped (the new coordinator
    /// sends them again).
    pub fn unload_partition(self: &Arc<Self>, state: &Arc<BrokerState>, p: i32) {
        let mut c = self.lock();
        let out = c.unload_partition(p);
        self.process(state, &mut c, out);
        self.markers.drop_txn_partition(p);
    }

    /// FindCoordinator for a transactional id: the leader of its `__transaction_state`
    /// partition in the committed image, with its endpoint on `listener`. The empty id is located
    /// like any other, as Kafka does (checked against Kafka 4.4 by crates/conformance).
    pub fn locate(
        self: &Arc<Self>,
        state: &Arc<BrokerState>,
        listener: &str,
        key: &str,
    ) -> Result<CoordinatorNode, ErrorCode> {
        let image = state.image();
        let leader = coordinator_leader(&image, key)?;
        let endpoint = image
            .brokers
            .get(&leader)
            .filter(|b| !b.fenced)
            .and_then(|b| b.endpoint(listener))
            .ok_or(ErrorCode::CoordinatorNotAvailable)?;
        Ok(CoordinatorNode {
            node_id: leader,
            host: endpoint.host.clone(),
            port: endpoint.port,
        })
    }

    /// The broker whose coordinator answers for `transactional_id` when it is another one
    /// (`None`: this broker, or no leader is known yet, so the local coordinator answers,
    /// NOT_COORDINATOR if it does not own the id).
    pub fn remote_coordinator(&self, state: &BrokerState, transactional_id: &str) -> Option<i32> {
        coordinator_leader(&state.image(), transactional_id)
            .ok()
            .filter(|&leader| leader >= 0 && leader != state.node_id)
    }

    /// What a partition leader asks the transaction coordinator about a producer's partitions
    /// (AddPartitionsToTxn v5 from a broker): `verify_only` checks that they are in its
    /// ongoing transaction (KIP-890 part 1, transaction version 1); otherwise they are added
    /// to it (transaction version 2: Produce v12 and TxnOffsetCommit v5 add implicitly). The
    /// coordinator is this broker's (`node` None) or broker `node`'s. The error for every
    /// partition asked about (COORDINATOR_NOT_AVAILABLE for all of them when the coordinator
    /// cannot be reached).
    #[allow(clippy::too_many_arguments)]
    pub async fn ask(
        self: &Arc<Self>,
        state: &Arc<BrokerState>,
        node: Option<i32>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &BTreeSet<(String, i32)>,
        verify_only: bool,
    ) -> HashMap<(String, i32), ErrorCode> {
        let all = |e: ErrorCode| partitions.iter().map(|tp| (tp.clone(), e)).collect();
        let request = add_request(
            transactional_id,
            producer_id,
            producer_epoch,
            partitions,
            verify_only,
        );
        let response = match node {
            None => {
                let rx = self.submit(
                    state,
                    ADD_PARTITIONS_BROKER_VERSION,
                    "",
                    "",
                    RequestKind::AddPartitionsToTxn(request),
                );
                match rx.await {
                    Ok(ResponseKind::AddPartitionsToTxn(r)) => r,
                    _ => return all(ErrorCode::NotCoordinator),
                }
            }
            Some(node) => match self.ask_remote(state, node, request).await {
                Ok(r) => r,
                Err(e) => return all(e),
            },
        };
        if response.error_code != 0 {
            return all(ErrorCode::from_code(response.error_code));
        }
        let mut out: HashMap<(String, i32), ErrorCode> = HashMap::new();
        for r in &response.results_by_transaction {
            for t in &r.topic_results {
                for p in &t.results_by_partition {
                    out.insert(
                        (t.name.0.to_string(), p.partition_index),
                        ErrorCode::from_code(p.partition_error_code),
                    );
                }
            }
        }
        // A partition the answer leaves out was not verified.
        for tp in partitions {
            out.entry(tp.clone()).or_insert(ErrorCode::InvalidTxnState);
        }
        out
    }

    /// Sends a broker's AddPartitionsToTxn to the coordinator on broker `node`.
    async fn ask_remote(
        &self,
        state: &BrokerState,
        node: i32,
        request: AddPartitionsToTxnRequest,
    ) -> Result<AddPartitionsToTxnResponse, ErrorCode> {
        let Some(link) = self.peers.link(state, node).await else {
            return Err(ErrorCode::CoordinatorNotAvailable);
        };
        let api = protocol::ApiKey::AddPartitionsToTxn as i16;
        let Some(version) = link
            .versions(api)
            .map(|(_, max)| max.min(5))
            .filter(|&v| v >= 4)
        else {
            tracing::warn!(node, "the coordinator's broker cannot verify transactional writes (no AddPartitionsToTxn v4)");
            return Err(ErrorCode::CoordinatorNotAvailable);
        };
        let Some(body) = crate::controller_api::encode_body(&request, version) else {
            return Err(ErrorCode::UnknownServerError);
        };
        let mut answer = match link
            .call_encoded(api, version, body, Duration::from_secs(30))
            .await
        {
            Ok(b) => b,
            Err(e) => {
                self.peers.failed(node, &link).await;
                tracing::debug!(node, error = %e, "asking a remote transaction coordinator failed");
                return Err(ErrorCode::CoordinatorNotAvailable);
            }
        };
        <AddPartitionsToTxnResponse as protocol::Decode>::decode(&mut answer, version).map_err(
            |e| {
                tracing::warn!(node, error = %e, "undecodable AddPartitionsToTxn answer");
                ErrorCode::CoordinatorNotAvailable
            },
        )
    }

    /// KIP-890 verification for a local transactional write: Ok when every partition is
    /// part of the producer's ongoing transaction.
    pub fn verify(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &BTreeSet<(String, i32)>,
    ) -> Result<(), ErrorCode> {
        let errors = self
            .lock()
            .verify(transactional_id, producer_id, producer_epoch, partitions);
        match errors.into_values().next() {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// Handles one transaction API request (InitProducerId with a transactional id,
    /// AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions).
    pub fn handle(
        self: &Arc<Self>,
        state: &Arc<BrokerState>,
        ctx: Ctx,
        client_id: &str,
        client_host: &str,
        body: RequestKind,
    ) -> Reply {
        let rx = self.submit(state, ctx.version, client_id, client_host, body);
        let cancel = state.cancel.clone();
        Reply::Later(Box::pin(async move {
            let resp = tokio::select! {
                r = rx => r,
                _ = cancel.cancelled() => return None,
            };
            match resp {
                Ok(resp) => ctx.encode(resp),
                Err(_) => None,
            }
        }))
    }

    /// Runs one transaction request (at `version`) through the coordinator; its answer
    /// arrives on the returned channel.
    fn submit(
        self: &Arc<Self>,
        state: &Arc<BrokerState>,
        version: i16,
        client_id: &str,
        client_host: &str,
        body: RequestKind,
    ) -> oneshot::Receiver<ResponseKind> {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token, tx);
        let rctx = RequestContext {
            token,
            api_version: version,
            client_id,
            client_host,
            visible_topics: coordinator::TopicVisibility::ALL,
        };
        let now = state.clock.now_ms();
        {
            let mut c = self.lock();
            let mut env = Env { state };
            let out = match c.handle(&rctx, body, now, &mut env) {
                Ok(out) => out,
                Err(other) => {
                    tracing::error!("not a transaction request: {other:?}");
                    TxnOutput::default()
                }
            };
            self.process(state, &mut c, out);
        }
        self.wake.notify_one();
        rx
    }

    /// Carries out an output with the coordinator lock held (so writes reach the log in the
    /// order they were emitted): routes responses, appends writes (a failed append is
    /// reported back at once, a successful one once durable), queues markers.
    fn process(
        self: &Arc<Self>,
        state: &Arc<BrokerState>,
        c: &mut TransactionCoordinator,
        out: TxnOutput,
    ) {
        let mut queue = VecDeque::from([out]);
        let mut waits = Vec::new();
        let mut markers = Vec::new();
        while let Some(out) = queue.pop_front() {
            self.route(out.responses);
            markers.extend(out.markers);
            for w in out.writes {
                let now = state.clock.now_ms();
                let target = state
                    .replicas
                    .get(TXN_TOPIC, w.partition)
                    .zip(c.coordinator_epoch(w.partition));
                let appended = match target {
                    None => Err(ErrorCode::NotLeaderOrFollower),
                    Some((partition, epoch)) => {
                        let mut b = BatchBuilder::new(Compression::None);
                        b.push(NewRecord::new(Some(w.key.clone()), w.value.clone(), now));
                        match b.build() {
                            Err(e) => {
                                tracing::error!(error = %e, "building a {TXN_TOPIC} batch failed");
                                Err(ErrorCode::UnknownServerError)
                            }
                            Ok(batch) => match partition.append_as_coordinator(batch, epoch) {
                                Ok(info) => Ok((partition, info.last_offset)),
                                Err(e) => {
                                    tracing::error!(partition = w.partition, error = %e.name(), "writing {TXN_TOPIC} failed");
                                    Err(e)
                                }
                            },
                        }
                    }
                };
                match appended {
                    Ok((partition, offset)) => waits.push((w.id, partition, offset)),
                    Err(e) => queue.push_back(c.write_complete(w.id, Err(e), now)),
                }
            }
        }
        if !waits.is_empty() {
            state.notify_data();
            let this = self.clone();
            let st = state.clone();
            state.tasks.spawn(async move {
                // Committed at the HW (acks=-1: on disk on every ISR member) before the
                // transition counts, as Kafka's TransactionStateManager appends.
                let acks: Vec<_> = waits
                    .into_iter()
                    .map(|(id, partition, offset)| {
                        let rx = partition.wait_for_ack(offset + 1, WRITE_TIMEOUT_MS);
                        (id, partition, rx)
                    })
                    .collect();
                let mut results = Vec::with_capacity(acks.len());
                for (id, partition, rx) in acks {
                    let r = match rx.await.unwrap_or(ErrorCode::NotLeaderOrFollower) {
                        ErrorCode::None => Ok(()),
                        e => {
                            tracing::warn!(partition = %partition.tp, error = %e.name(), "{TXN_TOPIC} write not committed");
                            Err(e)
                        }
                    };
                    results.push((id, r));
                }
                let mut c = this.lock();
                for (id, r) in results {
                    let now = st.clock.now_ms();
                    let out = c.write_complete(id, r, now);
                    this.process(&st, &mut c, out);
                }
                drop(c);
                this.wake.notify_one();
            });
        }
        if !markers.is_empty() {
            self.markers.enqueue(markers);
        }
    }

    fn route(&self, responses: Vec<(u64, ResponseKind)>) {
        if responses.is_empty() {
            return;
        }
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        for (token, resp) in responses {
            if let Some(tx) = pending.remove(&token) {
                let _ = tx.send(resp);
            }
        }
    }

    /// A marker is written (or its partition is gone): the coordinator may complete the
    /// transaction.
    pub fn marker_written(self: &Arc<Self>, state: &Arc<BrokerState>, acks: &[MarkerAck]) {
        let mut c = self.lock();
        let now = state.clock.now_ms();
        for ack in acks {
            let out = c.marker_written(ack, now);
            self.process(state, &mut c, out);
        }
    }

    /// Whether this broker still coordinates `__transaction_state` partition `p` at
    /// `coordinator_epoch` (markers of an older epoch are dropped).
    pub fn coordinates(&self, p: i32, coordinator_epoch: i32) -> bool {
        self.lock().coordinator_epoch(p) == Some(coordinator_epoch)
    }

    /// Drives the coordinator's timers (timeouts, expiration, retries) until the broker stops.
    pub async fn run_timers(self: Arc<Self>, state: Arc<BrokerState>) {
        loop {
            let now = state.clock.now_ms();
            let next = self.lock().next_deadline();
            let wait_ms = next.map_or(1000, |d| (d - now).clamp(0, 1000));
            tokio::select! {
                _ = state.cancel.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(wait_ms as u64)) => {}
            }
            let now = state.clock.now_ms();
            let mut c = self.lock();
            if c.next_deadline().is_some_and(|d| d <= now) {
                let out = c.tick(now);
                self.process(&state, &mut c, out);
            }
        }
    }
}
