//! Links from this broker to other brokers' inter-broker listeners (transaction markers for
//! partitions they lead, verification of a transactional append with a transaction
//! coordinator they host): one connection per peer, opened on first use from the committed
//! image's endpoints and opened again after it fails.

use crate::state::BrokerState;
use client::NodeLink;
use std::collections::HashMap;
use std::sync::Arc;

/// How long connecting to a peer may take.
const CONNECT_TIMEOUT_MS: u64 = 2_000;
/// How long a request to a peer may take (a WriteTxnMarkers waits for fsyncs).
const REQUEST_TIMEOUT_MS: u64 = 30_000;

/// See the module docs.
#[derive(Debug, Default)]
pub struct PeerLinks {
    links: tokio::sync::Mutex<HashMap<i32, Arc<NodeLink>>>,
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
        let mut config = client::ClientConfig::new(&addr);
        // The fault harness (tests/faults) tells nodes from clients by this prefix.
        config.client_id = format!("moldau-node-{}", state.node_id);
        config.connect_timeout_ms = CONNECT_TIMEOUT_MS;
        config.request_timeout_ms = REQUEST_TIMEOUT_MS;
        match NodeLink::connect(&addr, &config).await {
            Ok(l) => {
                let l = Arc::new(l);
                links.insert(node, l.clone());
                Some(l)
            }
            Err(e) => {
                tracing::debug!(node, %addr, error = %e, "cannot reach a peer broker");
                None
            }
        }
    }

    /// Forgets `link` to `node` after a failed call (the next call connects again).
    pub async fn failed(&self, node: i32, link: &Arc<NodeLink>) {
        let mut links = self.links.lock().await;
        if links.get(&node).is_some_and(|l| Arc::ptr_eq(l, link)) {
            links.remove(&node);
        }
    }
}
