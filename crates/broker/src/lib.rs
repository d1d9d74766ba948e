//! The Moldau node runtime: it composes the metadata quorum, storage and the protocol into a
//! server.
//!
//! [`Broker::start`] checks the data dir, starts this node's member of the metadata quorum
//! (a one-voter quorum unless `controller.quorum.voters` says otherwise), applies the committed
//! metadata (opening the partitions this broker hosts), registers the broker with the active
//! controller, waits until it is unfenced, and only then serves clients. It serves until
//! [`BrokerHandle::shutdown`] (or drop) stops it: controlled shutdown (leadership moves away),
//! stop accepting, finish in-flight requests, flush, write clean-shutdown markers.

mod authz;
mod bootstrap;
mod conn_limits;
mod connection;
mod controller_api;
mod controller_link;
mod groups;
mod handlers;
mod internal_replay;
mod lifecycle;
mod log_dirs;
pub mod loggers;
mod memory;
pub mod metrics;
mod peers;
mod quotas;
mod replica;
mod replicator;
mod sasl;
mod state;
mod tls;
mod txn;
mod txn_markers;
mod txn_partition;

use model::BrokerConfig;
use quorum::{NodeConfig, QuorumRuntime, RuntimeConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use bootstrap::METADATA_DIR;
pub use state::BrokerState;

/// How long a controlled shutdown may take before the process stops anyway.
const CONTROLLED_SHUTDOWN_MS: u64 = 5000;

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("bind {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("data dir {path}: {source}")]
    DataDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("metadata: {0}")]
    Metadata(#[from] metadata::MetadataError),
    #[error("metadata quorum: {0}")]
    Quorum(String),
    /// The data dir, the configured ids and the cluster disagree about who this node is.
    #[error("{0}")]
    Identity(String),
    #[error("stopped before it was ready")]
    Stopped,
    /// A TLS listener's certificates, key or rules cannot be used (names the key).
    #[error("{0}")]
    Tls(String),
}

/// The reason `rx` eventually gives; pending forever without one (no receiver, or its
/// sender gone without a verdict).
async fn verdict(rx: &mut Option<tokio::sync::watch::Receiver<Option<String>>>) -> String {
    if let Some(r) = rx {
        if let Ok(why) = r.wait_for(Option::is_some).await {
            return why.clone().unwrap_or_default();
        }
    }
    std::future::pending().await
}

impl From<quorum::NodeError> for BrokerError {
    fn from(e: quorum::NodeError) -> Self {
        BrokerError::Quorum(e.to_string())
    }
}

/// A running broker.
pub struct Broker;

/// Owns a running broker: its address, and the means to stop it. Dropping the handle
/// cancels the broker without waiting; call [`BrokerHandle::shutdown`] to wait for a clean stop.
pub struct BrokerHandle {
    addr: SocketAddr,
    data_dir: PathBuf,
    state: Arc<BrokerState>,
    cancel: CancellationToken,
    tasks: TaskTracker,
    quorum: Option<QuorumRuntime>,
    /// Says why this node's quorum member stopped working, once it has.
    quorum_failure: Option<tokio::sync::watch::Receiver<Option<String>>>,
    loader: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for BrokerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerHandle")
            .field("addr", &self.addr)
            .finish()
    }
}

/// Binds a listener. A port nobody listens on but still held by connections of a killed
/// predecessor (TIME_WAIT on loopback can refuse even with SO_REUSEADDR) is retried for up to
/// a minute, which is how long the kernel keeps them; a port another server listens on fails
/// at once.
async fn bind(addr: &str) -> Result<(TcpListener, SocketAddr), BrokerError> {
    let err = |source| BrokerError::Bind {
        addr: addr.to_string(),
        source,
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut warned = false;
    let listener = loop {
        match TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && std::time::Instant::now() < deadline
                    && tokio::net::TcpStream::connect(addr).await.is_err() =>
            {
                if !warned {
                    tracing::warn!(%addr, "address in use; retrying while old connections expire");
                    warned = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(err(e)),
        }
    };
    let local = listener.local_addr().map_err(err)?;
    Ok((listener, local))
}

/// Raft ticks per election timeout; heartbeats every two ticks.
const ELECTION_TICKS: usize = 10;

impl Broker {
    /// Starts a node on the current tokio runtime and returns once it serves clients.
    pub async fn start(config: BrokerConfig) -> Result<BrokerHandle, BrokerError> {
        let data_dir = PathBuf::from(&config.data_dir);
        std::fs::create_dir_all(&data_dir).map_err(|source| BrokerError::DataDir {
            path: data_dir.display().to_string(),
            source,
        })?;
        let meta =
            bootstrap::check_identity(&data_dir, config.node_id, config.cluster_id.as_deref())?;
        // Certificates and keys before anything binds: a TLS listener that cannot be served is
        // a startup error, never a plaintext listener.
        let tls = tls::load_all(&config.security).map_err(|e| BrokerError::Tls(e.to_string()))?;
        let inter_broker_security = match &config.security.inter_broker {
            Some(peer) => peers::client_security(peer).map_err(BrokerError::Tls)?,
            None => client::Security::default(),
        };
        // Bind everything first: a port of 0 must be known before it is advertised.
        let mut broker_listeners = Vec::new();
        for l in config.broker_listeners() {
            let (listener, local) = bind(&l.address()).await?;
            broker_listeners.push((l.clone(), listener, local));
        }
        let mut controller_listeners = Vec::new();
        if config.roles.controller {
            for l in config.controller_listeners() {
                let (listener, _) = bind(&l.address()).await?;
                controller_listeners.push((l.clone(), listener));
            }
        }
        let endpoints: Vec<metadata::Endpoint> = broker_listeners
            .iter()
            .map(|(l, _, local)| {
                let advertised = config
                    .advertised_listeners
                    .iter()
                    .find(|a| a.name == l.name);
                metadata::Endpoint {
                    name: l.name.clone(),
                    host: advertised.map_or_else(|| local.ip().to_string(), |a| a.host.clone()),
                    port: advertised.map_or(i32::from(local.port()), |a| i32::from(a.port)),
                    security_protocol: l.security_protocol.name().to_string(),
                }
            })
            .collect();
        let (host, port) = endpoints
            .first()
            .map(|e| (e.host.clone(), e.port))
            .unwrap_or_default();
        let addr = broker_listeners
            .first()
            .map(|(_, _, a)| *a)
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));

        // The metadata quorum: this node's voter (whose first publication, the whole committed
        // image, is waiting in the channel when it starts), or an observer of the voters.
        let (pub_tx, mut pub_rx) = tokio::sync::mpsc::unbounded_channel();
        let metadata_dir = data_dir.join(bootstrap::METADATA_DIR);
        let cluster_id: quorum::transport::SharedClusterId = Arc::new(std::sync::RwLock::new(
            config
                .cluster_id
                .clone()
                .or(meta.cluster_id.clone())
                .unwrap_or_default(),
        ));
        let voter_addrs: Vec<(u64, String)> = config
            .voters
            .iter()
            .map(|v| (v.id as u64, v.address()))
            .collect();
        let mut link_config = client::ClientConfig::new(
            voter_addrs
                .first()
                .map_or("127.0.0.1:0", |(_, a)| a.as_str()),
        );
        link_config.client_id = format!("moldau-node-{}", config.node_id);
        link_config.request_timeout_ms = 30_000;
        link_config.connect_timeout_ms = 2_000;
        // Brokers reaching the active controller and voters reaching each other authenticate
        // on the controller listener as its protocol says.
        if let Some(c) = &config.security.controller {
            link_config.security = peers::client_security(c).map_err(BrokerError::Tls)?;
        }
        let cancel = CancellationToken::new();
        let mut quorum_fatal = None;
        let (quorum, leadership) = if config.roles.controller {
            let partition_cap = log_dirs::partition_cap(&config);
            if let Some(note) = &partition_cap.1 {
                tracing::warn!(max_broker_partitions = partition_cap.0, reason = %note, "partition cap lowered");
            }
            let node_id = config.node_id as u64;
            let voters: Vec<u64> = if config.voters.is_empty() {
                vec![node_id]
            } else {
                config.voters.iter().map(|v| v.id as u64).collect()
            };
            bootstrap::import_legacy(&metadata_dir, node_id, &voters)?;
            let tick_ms = (config.election_timeout_ms.max(10) as u64) / ELECTION_TICKS as u64;
            let runtime_config = RuntimeConfig {
                node: NodeConfig {
                    node_id,
                    voters,
                    election_tick: ELECTION_TICKS,
                    // Timeouts drawn from [1, 1.5) election timeouts: staggered, and a failover
                    // well under two timeouts.
                    max_election_tick: ELECTION_TICKS * 3 / 2,
                    heartbeat_tick: 2,
                    snapshot_after_bytes: config.metadata_snapshot_bytes.max(1) as u64,
                    controller: controller::ControllerConfig {
                        node_id: config.node_id,
                        cluster_id: config.cluster_id.clone().or(meta.cluster_id.clone()),
                        num_partitions: config.num_partitions,
                        default_replication_factor: config.default_replication_factor,
                        broker_session_timeout_ms: config.broker_session_timeout_ms,
                        broker_props: config.props.clone(),
                        producer_id_block_size: 1000,
                        max_broker_partitions: partition_cap.0,
                        max_broker_partitions_note: partition_cap.1.clone(),
                        auto_leader_rebalance: config.auto_leader_rebalance_enable,
                        leader_imbalance_check_interval_ms: config
                            .leader_imbalance_check_interval_seconds
                            .saturating_mul(1000),
                    },
                    seed: uuid::Uuid::new_v4().as_u64_pair().0,
                },
                tick_ms,
            };
            let peers: Vec<(u64, String)> = voter_addrs
                .iter()
                .filter(|(id, _)| *id != node_id)
                .cloned()
                .collect();
            let transport: Arc<dyn quorum::Transport> = if peers.is_empty() {
                Arc::new(quorum::NoPeers)
            } else {
                let t = quorum::transport::PeerTransport::start(
                    &peers,
                    link_config.clone(),
                    cluster_id.clone(),
                );
                // A majority of voters refusing this node's cluster id stops it, as an
                // observer's refusal does.
                quorum_fatal = Some(t.fatal());
                t
            };
            let runtime = QuorumRuntime::start(
                runtime_config,
                quorum::FileDisk::new(&metadata_dir),
                transport,
                pub_tx,
            )?;
            let leadership = runtime.handle.leadership();
            (Some(runtime), leadership)
        } else {
            let observer = quorum::observer::start(
                quorum::observer::ObserverConfig {
                    node_id: config.node_id,
                    voters: voter_addrs.clone(),
                    client: link_config.clone(),
                    cluster_id: cluster_id.clone(),
                },
                pub_tx,
                cancel.clone(),
            );
            quorum_fatal = Some(observer.fatal.clone());
            (None, observer.leadership)
        };
        let quorum_handle = quorum.as_ref().map(|q| q.handle.clone());

        let tasks = TaskTracker::new();
        let state = BrokerState::new(
            config,
            state::StateParts {
                host,
                port,
                endpoints,
                controller: controller_link::ControllerLink::new(
                    quorum_handle.clone(),
                    leadership,
                    voter_addrs,
                    link_config,
                ),
                inter_broker_security,
                tls: tls.clone(),
                quorum: quorum_handle,
                cluster_id: cluster_id.clone(),
                cancel: cancel.clone(),
                tasks: tasks.clone(),
            },
        )?;

        // The metadata loader: applies each publication in order (blocking work: opening
        // logs, replaying coordinator state), on its own thread.
        let first = pub_rx.try_recv().ok();
        if let Some(p) = first {
            state.apply_publication(p);
        }
        let loader_state = state.clone();
        let runtime = tokio::runtime::Handle::current();
        let loader = std::thread::Builder::new()
            .name("metadata-loader".into())
            .spawn(move || {
                // Publishers spawn tasks (the group coordinator's durable waits).
                let _runtime = runtime.enter();
                while let Some(p) = pub_rx.blocking_recv() {
                    loader_state.apply_publication(p);
                }
            })
            .map_err(|e| BrokerError::Quorum(format!("start the metadata loader: {e}")))?;

        // Voters and observers reach this node's controller listeners from now on.
        for (l, listener) in controller_listeners {
            let listener_tls = tls.get(&l.name).cloned();
            let accept_state = state.clone();
            let accept_cancel = cancel.clone();
            let accept_tasks = tasks.clone();
            let name: Arc<str> = l.name.as_str().into();
            tasks.spawn(async move {
                connection::accept_loop(
                    listener,
                    name,
                    connection::ListenerKind::Controller,
                    listener_tls,
                    accept_state,
                    accept_cancel,
                    accept_tasks,
                )
                .await;
            });
        }

        let incarnation = uuid::Uuid::new_v4().simple().to_string();
        if state.config.roles.broker {
            // Registration waits for the quorum; these say when it never will: the quorum
            // refused this node's cluster id, or this node's own member failed.
            let mut quorum_failure = quorum.as_ref().map(|q| q.handle.failure());
            let registered = async {
                tokio::select! {
                    r = lifecycle::register(&state, &incarnation) => r,
                    why = verdict(&mut quorum_fatal) => Err(BrokerError::Identity(why)),
                    why = verdict(&mut quorum_failure) => Err(BrokerError::Quorum(why)),
                }
            };
            if let Err(e) = registered.await {
                cancel.cancel();
                return Err(e);
            }
            // Registered and unfenced: this node's image has caught up with the quorum.
            state.set_aside_stray_dirs();
            tasks.spawn(lifecycle::heartbeat_loop(state.clone(), incarnation));
        }
        // The cluster id is known now: remember it (and refuse a data dir of another cluster).
        let image = state.image();
        if !image.cluster_id.is_empty() {
            if let Some(stored) = &meta.cluster_id {
                if *stored != image.cluster_id {
                    cancel.cancel();
                    return Err(BrokerError::Identity(format!(
                        "the data dir {} belongs to cluster {stored}, but the metadata quorum is cluster {}",
                        data_dir.display(),
                        image.cluster_id
                    )));
                }
            }
            bootstrap::write_meta(&data_dir, state.node_id, &image.cluster_id)?;
        }
        state
            .serving
            .store(true, std::sync::atomic::Ordering::Release);
        state.start_background();
        for (l, listener, _) in broker_listeners {
            let listener_tls = tls.get(&l.name).cloned();
            let accept_state = state.clone();
            let accept_cancel = cancel.clone();
            let accept_tasks = tasks.clone();
            let name: Arc<str> = l.name.as_str().into();
            tasks.spawn(async move {
                connection::accept_loop(
                    listener,
                    name,
                    connection::ListenerKind::Broker,
                    listener_tls,
                    accept_state,
                    accept_cancel,
                    accept_tasks,
                )
                .await;
            });
        }
        let quorum_failure = quorum.as_ref().map(|q| q.handle.failure());
        Ok(BrokerHandle {
            addr,
            data_dir,
            state,
            cancel,
            tasks,
            quorum,
            quorum_failure,
            loader: Some(loader),
        })
    }
}

impl BrokerHandle {
    /// The address the client listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn data_dir(&self) -> &std::path::Path {
        &self.data_dir
    }

    /// The shared broker state (for embedding and tests).
    pub fn state(&self) -> &Arc<BrokerState> {
        &self.state
    }

    /// Resolves with the reason once this node's metadata quorum member has stopped working
    /// (a failed write or fsync of the metadata log, an undecodable committed entry). The node
    /// can then neither vote nor follow the committed metadata, so its owner must stop it, as
    /// Kafka halts the process; the other voters and brokers carry on and fence it. Never
    /// resolves on a node without a quorum member (a broker-only node).
    pub async fn quorum_failed(&self) -> String {
        let mut failure = self.quorum_failure.clone();
        verdict(&mut failure).await
    }

    /// Moves leadership away (controlled shutdown; skipped when the quorum member failed, as
    /// the controller can no longer be reached through it), stops accepting, lets in-flight
    /// requests finish, flushes every log and writes the clean-shutdown markers, stops the
    /// quorum member.
    pub async fn shutdown(mut self) {
        let quorum_failed = self
            .quorum_failure
            .as_ref()
            .is_some_and(|f| f.borrow().is_some());
        if self.state.config.roles.broker && !quorum_failed {
            lifecycle::controlled_shutdown(
                &self.state,
                Duration::from_millis(CONTROLLED_SHUTDOWN_MS),
            )
            .await;
        }
        self.cancel.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        // Off the async threads: closing thousands of logs is seconds of fsyncs on a loaded
        // machine, and the caller's deadline (the server's 10 s) must be able to fire meanwhile.
        let state = self.state.clone();
        if tokio::task::spawn_blocking(move || state.close_logs())
            .await
            .is_err()
        {
            tracing::error!("closing the logs panicked");
        }
        if let Some(q) = self.quorum.take() {
            let _ = tokio::task::spawn_blocking(move || q.stop()).await;
        }
        if let Some(l) = self.loader.take() {
            let _ = tokio::task::spawn_blocking(move || l.join()).await;
        }
    }
}

impl Drop for BrokerHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
