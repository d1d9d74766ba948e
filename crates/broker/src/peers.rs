//! Links from this broker to other brokers' inter-broker listeners: the one way a broker opens
//! an authenticated connection to another broker (`connect`: the listener's protocol, TLS
//! stores and SASL user, see `model::security::PeerClientConfig`), used by the replica
//! fetchers (a connection per leader, for its long-polls) and by `PeerLinks` (transaction
//! markers for partitions other brokers lead, verification of a transactional append with a
//! transaction coordinator they host): one shared connection per peer, opened on first use
//! from the committed image's endpoints and opened again after it fails.

use crate::state::BrokerState;
use client::NodeLink;
use model::security::PeerClientConfig;
use std::collections::HashMap;
use std::sync::Arc;

/// How long connecting to a peer may take (TCP, TLS and SASL).
const CONNECT_TIMEOUT_MS: u64 = 2_000;
/// How long a request to a peer may take (a WriteTxnMarkers waits for fsyncs).
const REQUEST_TIMEOUT_MS: u64 = 30_000;

/// See the module docs.
#[derive(Debug, Default)]
pub struct PeerLinks {
    links: tokio::sync::Mutex<HashMap<i32, Arc<NodeLink>>>,
}

/// The client security of a connection to `peer`'s listener: its TLS stores loaded now (a file
/// that cannot be used is an error naming its key) and the SASL user. A listener whose
/// settings cannot authenticate this node (no JAAS user, no truststore) is logged, and its
/// connections are refused by the peer rather than downgraded.
pub fn client_security(peer: &PeerClientConfig) -> Result<client::Security, String> {
    let mut security = client::Security::default();
    if let Some(tls) = &peer.tls {
        match &tls.truststore_location {
            None => tracing::warn!(
                listener = %peer.listener,
                "listener {} is dialled by other nodes over TLS but has no ssl.truststore.location: this node cannot check their certificates, so it cannot reach them",
                peer.listener
            ),
            Some(truststore) => {
                let settings = client::TlsSettings {
                    truststore_location: truststore.clone(),
                    keystore_location: Some(tls.keystore_location.clone()),
                    key_location: None,
                    verify_hostname: tls.verify_hostname,
                };
                security.tls = Some(
                    settings
                        .build()
                        .map_err(|e| format!("listener {}: {e}", peer.listener))?,
                );
            }
        }
    }
    if let Some(sasl) = &peer.sasl {
        if sasl.username.is_none() {
            tracing::warn!(
                listener = %peer.listener,
                key = %sasl.jaas_key,
                "listener {} authenticates other nodes with SASL/{} but {} has no username and password: this node cannot authenticate to its peers",
                peer.listener, sasl.mechanism, sasl.jaas_key
            );
        }
        security.sasl = Some(client::SaslCredentials {
            mechanism: sasl.mechanism.clone(),
            username: sasl.username.clone().unwrap_or_default(),
            password: sasl.password.clone(),
        });
    }
    Ok(security)
}

/// `host:port` of `node`'s inter-broker listener in the committed image (its first listener
/// when it has none of that name), if the node is registered.
pub fn peer_address(state: &BrokerState, node: i32) -> Option<String> {
    let image = state.image();
    let broker = image.brokers.get(&node)?;
    let endpoint = broker
        .endpoint(&state.config.inter_broker_listener_name)
        .or_else(|| broker.endpoints.first())?;
    Some(if endpoint.host.contains(':') {
        format!("[{}]:{}", endpoint.host, endpoint.port)
    } else {
        format!("{}:{}", endpoint.host, endpoint.port)
    })
}

/// Opens a new authenticated connection to `node`'s inter-broker listener; requests on it may
/// take `request_timeout_ms`. `None` when the node is unknown or cannot be reached now
/// (logged: a refused authentication as a warning, since it will not heal by itself).
pub async fn connect(state: &BrokerState, node: i32, request_timeout_ms: u64) -> Option<NodeLink> {
    let addr = peer_address(state, node)?;
    let mut config = client::ClientConfig::new(&addr);
    // The fault harness (tests/faults) tells nodes from clients by this prefix.
    config.client_id = format!("moldau-node-{}", state.node_id);
    config.connect_timeout_ms = CONNECT_TIMEOUT_MS;
    config.request_timeout_ms = request_timeout_ms;
    config.security = state.inter_broker_security.clone();
    match NodeLink::connect(&addr, &config).await {
        Ok(l) => Some(l),
        Err(e @ client::Error::Broker { .. }) => {
            tracing::warn!(node, %addr, error = %e, "a peer broker refused this broker's inter-broker authentication");
            None
        }
        Err(e) => {
            tracing::debug!(node, %addr, error = %e, "cannot reach a peer broker");
            None
        }
    }
}

impl PeerLinks {
    /// The open link to `node`, connecting when there is none (or it failed, or the node's
    /// address changed). `None` when the node is unknown or unreachable now (logged).
    pub async fn link(&self, state: &BrokerState, node: i32) -> Option<Arc<NodeLink>> {
        let addr = peer_address(state, node)?;
        let mut links = self.links.lock().await;
        if let Some(l) = links.get(&node) {
            if !l.is_closed() && l.addr() == addr {
                return Some(l.clone());
            }
        }
        links.remove(&node);
        let l = Arc::new(connect(state, node, REQUEST_TIMEOUT_MS).await?);
        links.insert(node, l.clone());
        Some(l)
    }

    /// Forgets `link` to `node` after a failed call (the next call connects again).
    pub async fn failed(&self, node: i32, link: &Arc<NodeLink>) {
        let mut links = self.links.lock().await;
        if links.get(&node).is_some_and(|l| Arc::ptr_eq(l, link)) {
            links.remove(&node);
        }
    }
}
