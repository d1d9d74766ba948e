//! `Client`: bootstrap, connections per broker, and the cached cluster metadata (brokers,
//! topics, partition leaders) that producer, consumer and admin share.
//!
//! The client is a cheap `Arc` handle. Connections are opened lazily, one per broker address,
//! and replaced when they fail. Metadata is refreshed on demand (unknown topic, a leadership
//! error) and never more often than `metadata_refresh_min_ms` per topic set.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use protocol::messages::metadata_request::MetadataRequestTopic;
use protocol::messages::{MetadataRequest, TopicName};
use protocol::StrBytes;

use crate::conn::{ConnConfig, Connection};
use crate::error::{Error, Result};
use crate::rpc::Rpc;

/// Settings shared by producer, consumer and admin.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// `host:port` addresses to bootstrap from (Kafka: `bootstrap.servers`).
    pub bootstrap_servers: Vec<String>,
    /// Sent in every request header (Kafka: `client.id`).
    pub client_id: String,
    /// How long to wait for any one response (Kafka: `request.timeout.ms`).
    pub request_timeout_ms: u64,
    /// How long to wait for a TCP connection (Kafka: `socket.connection.setup.timeout.ms`).
    pub connect_timeout_ms: u64,
    /// Requests in flight per connection (Kafka: `max.in.flight.requests.per.connection`).
    pub in_flight_max: usize,
    /// Largest response accepted, in bytes; protects against a broker claiming huge frames.
    pub response_bytes_max: usize,
    /// Backoff between retries of metadata and other retriable calls (`retry.backoff.ms`).
    pub retry_backoff_ms: u64,
    /// Cached topic metadata is refetched after this long (`metadata.max.age.ms`), so new
    /// partitions are noticed.
    pub metadata_max_age_ms: u64,
    /// TLS and SASL for every connection (Kafka's `security.protocol` and the `ssl.*` /
    /// `sasl.*` keys; `Security::from_properties` reads them). Default: PLAINTEXT.
    pub security: crate::security::Security,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            bootstrap_servers: vec!["127.0.0.1:9092".into()],
            client_id: "moldau-client".into(),
            request_timeout_ms: 30_000,
            connect_timeout_ms: 10_000,
            in_flight_max: 5,
            response_bytes_max: 256 * 1024 * 1024,
            retry_backoff_ms: 100,
            metadata_max_age_ms: 300_000,
            security: crate::security::Security::default(),
        }
    }
}

impl ClientConfig {
    /// A config bootstrapping from a comma-separated broker list.
    pub fn new(brokers: &str) -> ClientConfig {
        ClientConfig {
            bootstrap_servers: brokers
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
            ..ClientConfig::default()
        }
    }
}

/// One broker as metadata describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

impl BrokerInfo {
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// One partition of a topic as metadata describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionInfo {
    pub partition: i32,
    /// -1 when the partition has no leader.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub error: model::ErrorCode,
}

/// One topic as metadata describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub topic_id: String,
    pub internal: bool,
    pub partitions: Vec<PartitionInfo>,
}

/// A snapshot of cluster metadata.
#[derive(Clone, Debug, Default)]
pub struct ClusterInfo {
    pub cluster_id: Option<String>,
    pub controller_id: i32,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    pub topics: BTreeMap<String, TopicInfo>,
    /// Topics the broker answered with an error for (e.g. UNKNOWN_TOPIC_OR_PARTITION, or
    /// LEADER_NOT_AVAILABLE while a topic is being created).
    pub topic_errors: BTreeMap<String, model::ErrorCode>,
}

#[derive(Default)]
struct State {
    brokers: BTreeMap<i32, BrokerInfo>,
    controller_id: i32,
    cluster_id: Option<String>,
    topics: HashMap<String, (Arc<TopicInfo>, Instant)>,
    conns: HashMap<String, Arc<Connection>>,
}

struct Inner {
    config: ClientConfig,
    conn_config: ConnConfig,
    state: Mutex<State>,
    /// Serialises connection setup so concurrent callers share one connection per broker.
    connecting: tokio::sync::Mutex<()>,
}

/// A handle on the cluster: connections and cached metadata. Clone freely.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("bootstrap_servers", &self.inner.config.bootstrap_servers)
            .finish()
    }
}

fn str_of(s: &StrBytes) -> String {
    s.as_str().to_owned()
}

pub(crate) fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

pub(crate) fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

impl Client {
    /// Connects to the first reachable bootstrap server and loads broker metadata.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), client::Error> {
    /// let client = client::Client::connect(client::ClientConfig::new("127.0.0.1:9092")).await?;
    /// let cluster = client.describe_cluster().await?;
    /// println!("{} brokers", cluster.brokers.len());
    /// # Ok(()) }
    /// ```
    pub async fn connect(config: ClientConfig) -> Result<Client> {
        if config.bootstrap_servers.is_empty() {
            return Err(Error::Config("no bootstrap servers".into()));
        }
        let conn_config = ConnConfig::from_client(&config);
        let client = Client {
            inner: Arc::new(Inner {
                config,
                conn_config,
                state: Mutex::new(State {
                    controller_id: -1,
                    ..State::default()
                }),
                connecting: tokio::sync::Mutex::new(()),
            }),
        };
        client.refresh_metadata(Some(&[]), false).await?;
        Ok(client)
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock would be a bug in this crate; keep serving.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The connection to `addr`, opening it if needed.
    pub(crate) async fn conn_addr(&self, addr: &str) -> Result<Arc<Connection>> {
        self.conn_keyed(addr, addr).await
    }

    /// The connection cached under `key` to `addr`. Brokers answer one connection's requests
    /// in order, so group traffic (a JoinGroup may block for a whole rebalance) gets its own
    /// connection, as in the Java client, and never waits behind a fetch long-poll.
    async fn conn_keyed(&self, key: &str, addr: &str) -> Result<Arc<Connection>> {
        if let Some(c) = self.state().conns.get(key) {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        let _guard = self.inner.connecting.lock().await;
        if let Some(c) = self.state().conns.get(key) {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        let conn = Arc::new(Connection::open(addr, self.inner.conn_config.clone()).await?);
        self.state().conns.insert(key.to_owned(), conn.clone());
        Ok(conn)
    }

    /// The dedicated connection to group coordinator `node_id`.
    pub(crate) async fn conn_coordinator(&self, node_id: i32) -> Result<Arc<Connection>> {
        let addr = self.conn_node_addr(node_id).await?;
        self.conn_keyed(&format!("coordinator/{addr}"), &addr).await
    }

    /// Sends `req` on the dedicated connection to group coordinator `node_id`.
    pub(crate) async fn send_coordinator<R: Rpc>(
        &self,
        node_id: i32,
        req: &R,
    ) -> Result<R::Response> {
        self.conn_coordinator(node_id).await?.send(req).await
    }

    async fn conn_node_addr(&self, node_id: i32) -> Result<String> {
        if let Some(a) = self.state().brokers.get(&node_id).map(BrokerInfo::addr) {
            return Ok(a);
        }
        self.refresh_metadata(Some(&[]), false).await?;
        self.state()
            .brokers
            .get(&node_id)
            .map(BrokerInfo::addr)
            .ok_or_else(|| {
                Error::broker(
                    model::ErrorCode::BrokerNotAvailable,
                    Some(format!("broker {node_id} not in metadata")),
                )
            })
    }

    /// The connection to broker `node_id`.
    pub(crate) async fn conn_node(&self, node_id: i32) -> Result<Arc<Connection>> {
        let addr = self.conn_node_addr(node_id).await?;
        self.conn_addr(&addr).await
    }

    /// A connection to any broker: a known one first, else a bootstrap server.
    pub(crate) async fn conn_any(&self) -> Result<Arc<Connection>> {
        let mut candidates: Vec<String> = {
            let s = self.state();
            let open: Vec<String> = s
                .conns
                .iter()
                .filter(|(k, c)| !c.is_closed() && !k.starts_with("coordinator/"))
                .map(|(a, _)| a.clone())
                .collect();
            open.into_iter()
                .chain(s.brokers.values().map(BrokerInfo::addr))
                .collect()
        };
        candidates.extend(self.inner.config.bootstrap_servers.iter().cloned());
        let mut last = None;
        for addr in candidates {
            match self.conn_addr(&addr).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Config("no brokers".into())))
    }

    /// Sends `req` to any broker.
    pub(crate) async fn send_any<R: Rpc>(&self, req: &R) -> Result<R::Response> {
        self.conn_any().await?.send(req).await
    }

    /// Sends `req` to broker `node_id`.
    pub(crate) async fn send_to<R: Rpc>(&self, node_id: i32, req: &R) -> Result<R::Response> {
        self.conn_node(node_id).await?.send(req).await
    }

    /// Sends `req` to the controller if metadata names one, else to any broker (Kafka
    /// brokers forward admin requests to the controller).
    pub(crate) async fn send_controller<R: Rpc>(&self, req: &R) -> Result<R::Response> {
        let controller = self.state().controller_id;
        if controller >= 0 {
            if let Ok(c) = self.conn_node(controller).await {
                return c.send(req).await;
            }
        }
        self.send_any(req).await
    }

    /// Fetches metadata for `topics` (`None`: all topics; `Some(&[])`: brokers only) and
    /// updates the cache. `auto_create` asks the broker to create missing topics.
    pub async fn refresh_metadata(
        &self,
        topics: Option<&[String]>,
        auto_create: bool,
    ) -> Result<ClusterInfo> {
        let mut last_err = None;
        for attempt in 0..3 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(self.inner.config.retry_backoff_ms)).await;
            }
            let conn = match self.conn_any().await {
                Ok(c) => c,
                Err(e) => {
                    last_err = Some(e);
                    continue;
                }
            };
            let version = conn.version::<MetadataRequest>()?;
            let mut req = MetadataRequest::default().with_topics(topics.map(|ts| {
                ts.iter()
                    .map(|t| MetadataRequestTopic::default().with_name(Some(topic_name(t))))
                    .collect()
            }));
            if version >= 4 {
                req.allow_auto_topic_creation = auto_create;
            }
            match conn.send(&req).await {
                Ok(resp) => return Ok(self.apply_metadata(resp, topics.is_none())),
                Err(e) if e.is_retriable() => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or(Error::Closed))
    }

    fn apply_metadata(
        &self,
        resp: protocol::messages::MetadataResponse,
        all_topics: bool,
    ) -> ClusterInfo {
        let brokers: BTreeMap<i32, BrokerInfo> = resp
            .brokers
            .iter()
            .map(|b| {
                (
                    b.node_id.0,
                    BrokerInfo {
                        node_id: b.node_id.0,
                        host: str_of(&b.host),
                        port: b.port,
                        rack: b.rack.as_ref().map(str_of),
                    },
                )
            })
            .collect();
        let mut topics = BTreeMap::new();
        let mut topic_errors = BTreeMap::new();
        for t in &resp.topics {
            let Some(name) = t.name.as_ref().map(|n| str_of(&n.0)) else {
                continue;
            };
            let code = model::ErrorCode::from_code(t.error_code);
            if !code.is_ok() {
                // Keep no entry: callers see the topic as missing and may retry.
                topic_errors.insert(name, code);
                continue;
            }
            let mut partitions: Vec<PartitionInfo> = t
                .partitions
                .iter()
                .map(|p| PartitionInfo {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                    isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                    error: model::ErrorCode::from_code(p.error_code),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            topics.insert(
                name.clone(),
                TopicInfo {
                    name,
                    topic_id: format_uuid(t.topic_id.as_bytes()),
                    internal: t.is_internal,
                    partitions,
                },
            );
        }
        let mut s = self.state();
        if !brokers.is_empty() {
            s.brokers = brokers.clone();
        }
        s.controller_id = resp.controller_id.0;
        s.cluster_id = resp.cluster_id.as_ref().map(str_of);
        if all_topics {
            s.topics.clear();
        }
        let now = Instant::now();
        for (name, t) in &topics {
            s.topics.insert(name.clone(), (Arc::new(t.clone()), now));
        }
        ClusterInfo {
            cluster_id: s.cluster_id.clone(),
            controller_id: s.controller_id,
            brokers,
            topics,
            topic_errors,
        }
    }

    /// Cached metadata of `topic`, fetched if not cached. Fails with UNKNOWN_TOPIC_OR_PARTITION
    /// when the broker does not know the topic (and did not create it).
    pub async fn topic(&self, topic: &str, auto_create: bool) -> Result<Arc<TopicInfo>> {
        let max_age = Duration::from_millis(self.inner.config.metadata_max_age_ms);
        if let Some((t, at)) = self.state().topics.get(topic) {
            if at.elapsed() < max_age {
                return Ok(t.clone());
            }
        }
        self.topic_fresh(topic, auto_create).await
    }

    /// Metadata of `topic` fetched now, retrying briefly while a new topic gets leaders.
    pub async fn topic_fresh(&self, topic: &str, auto_create: bool) -> Result<Arc<TopicInfo>> {
        let deadline = Instant::now() + Duration::from_millis(self.inner.config.request_timeout_ms);
        let names = [topic.to_owned()];
        loop {
            let info = self.refresh_metadata(Some(&names), auto_create).await?;
            let found = self.state().topics.get(topic).map(|(t, _)| t.clone());
            let error = info.topic_errors.get(topic).copied();
            match found {
                Some(t) if t.partitions.iter().all(|p| p.leader >= 0) => return Ok(t),
                Some(t) if Instant::now() >= deadline => return Ok(t),
                None => {
                    let code = error.unwrap_or(model::ErrorCode::UnknownTopicOrPartition);
                    // Only a topic being created (LEADER_NOT_AVAILABLE and the like) is worth
                    // waiting for; UNKNOWN_TOPIC_OR_PARTITION although creation was asked for
                    // means the broker won't create it.
                    let wait = auto_create
                        && code.is_retriable()
                        && code != model::ErrorCode::UnknownTopicOrPartition;
                    if !wait || Instant::now() >= deadline {
                        return Err(Error::broker(code, Some(format!("topic {topic}"))));
                    }
                }
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(self.inner.config.retry_backoff_ms)).await;
        }
    }

    /// Forgets cached metadata of `topic` so the next lookup refetches it.
    pub fn invalidate_topic(&self, topic: &str) {
        self.state().topics.remove(topic);
    }

    /// The leader of a partition from cached metadata (fetching the topic if needed).
    pub async fn leader_for(&self, topic: &str, partition: i32) -> Result<i32> {
        self.leader_for_auto_create(topic, partition, false).await
    }

    /// Like `leader_for`; a metadata fetch may create the topic (for producers).
    pub(crate) async fn leader_for_auto_create(
        &self,
        topic: &str,
        partition: i32,
        auto_create: bool,
    ) -> Result<i32> {
        let t = self.topic(topic, auto_create).await?;
        let p = t
            .partitions
            .iter()
            .find(|p| p.partition == partition)
            .ok_or_else(|| {
                Error::broker(
                    model::ErrorCode::UnknownTopicOrPartition,
                    Some(format!("{topic}-{partition}")),
                )
            })?;
        if p.leader < 0 {
            return Err(Error::broker(model::ErrorCode::LeaderNotAvailable, None));
        }
        Ok(p.leader)
    }

    /// Brokers, controller, cluster id and all topics, fetched now.
    pub async fn describe_cluster(&self) -> Result<ClusterInfo> {
        self.refresh_metadata(None, false).await
    }

    /// Known brokers from the last metadata.
    pub fn brokers(&self) -> BTreeMap<i32, BrokerInfo> {
        self.state().brokers.clone()
    }
}

/// The timeout a request asks the broker to observe (acks=all waits, admin operations):
/// 80% of the client's, so the broker answers before the client closes the connection.
pub(crate) fn broker_timeout_ms(request_timeout_ms: u64) -> i32 {
    (request_timeout_ms.saturating_mul(4) / 5).min(i32::MAX as u64) as i32
}

/// Formats a 16-byte UUID the way Kafka prints topic ids (URL-safe base64, no padding).
/// The bytes of a UUID in Kafka's text form (22 base64url characters, no padding).
pub(crate) fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    if s.len() != 22 {
        return None;
    }
    let mut bits: u32 = 0;
    let mut nbits = 0;
    let mut out = [0u8; 16];
    let mut i = 0;
    for c in s.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        bits = (bits << 6) | v;
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            if i < 16 {
                out[i] = (bits >> nbits) as u8;
                i += 1;
            }
            bits &= (1 << nbits) - 1;
        }
    }
    (i == 16).then_some(out)
}

pub(crate) fn format_uuid(b: &[u8; 16]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &x)| acc | (u32::from(x) << (16 - 8 * i)));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}
