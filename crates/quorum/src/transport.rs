//! Raft messages between voters over the CONTROLLER listener: one task per peer with a bounded
//! queue, one connection (the `client` crate's, reused), batches sent as `RaftMessages`.
//!
//! Best effort by design: a full queue or a failed connection drops messages, and Raft
//! retransmits what matters. Nothing here blocks the quorum thread (`send` is a `try_send`).

use crate::runtime::Transport;
use crate::wire::{decode_error, RaftMessages, RAFT_MESSAGES_API, WIRE_VERSION};
use client::{ClientConfig, NodeLink};
use model::ErrorCode;
use raft::eraftpb::Message;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::mpsc;

/// Messages queued per peer before new ones are dropped.
const QUEUE_MESSAGES_MAX: usize = 4096;
/// Messages sent in one request at most.
const BATCH_MESSAGES_MAX: usize = 256;
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// The cluster id this node sends with its messages (empty until it knows one).
pub type SharedClusterId = Arc<RwLock<String>>;

/// See the module docs.
pub struct PeerTransport {
    peers: HashMap<u64, mpsc::Sender<Message>>,
}

impl std::fmt::Debug for PeerTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerTransport")
            .field("peers", &self.peers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl PeerTransport {
    /// Starts one sender task per peer (`(id, controller listener address)`), on the current
    /// tokio runtime. The tasks end when the transport is dropped.
    pub fn start(
        peers: &[(u64, String)],
        client: ClientConfig,
        cluster_id: SharedClusterId,
    ) -> Arc<PeerTransport> {
        let mut senders = HashMap::new();
        for (id, addr) in peers {
            let (tx, rx) = mpsc::channel(QUEUE_MESSAGES_MAX);
            senders.insert(*id, tx);
            tokio::spawn(peer_loop(
                *id,
                addr.clone(),
                rx,
                client.clone(),
                cluster_id.clone(),
            ));
        }
        Arc::new(PeerTransport { peers: senders })
    }
}

impl Transport for PeerTransport {
    fn send(&self, msg: Message) {
        if let Some(tx) = self.peers.get(&msg.to) {
            // Full: drop it (Raft resends); closed: the task is gone (shutting down).
            let _ = tx.try_send(msg);
        }
    }
}

async fn peer_loop(
    peer: u64,
    addr: String,
    mut rx: mpsc::Receiver<Message>,
    client: ClientConfig,
    cluster_id: SharedClusterId,
) {
    let mut link: Option<NodeLink> = None;
    let mut backoff = Duration::from_millis(50);
    let mut logged_failure = false;
    while let Some(first) = rx.recv().await {
        let mut messages = vec![first];
        while messages.len() < BATCH_MESSAGES_MAX {
            match rx.try_recv() {
                Ok(m) => messages.push(m),
                Err(_) => break,
            }
        }
        if link.as_ref().is_none_or(NodeLink::is_closed) {
            match NodeLink::connect(&addr, &client).await {
                Ok(l) => {
                    link = Some(l);
                    backoff = Duration::from_millis(50);
                    if logged_failure {
                        tracing::info!(peer, %addr, "connected to controller voter");
                        logged_failure = false;
                    }
                }
                Err(e) => {
                    if !logged_failure {
                        tracing::warn!(peer, %addr, error = %e, "cannot reach controller voter; retrying");
                        logged_failure = true;
                    }
                    // Drop what was queued meanwhile: it is stale by the time we reconnect.
                    tokio::time::sleep(backoff).await;
                    while rx.try_recv().is_ok() {}
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    continue;
                }
            }
        }
        let Some(l) = link.as_ref() else { continue };
        let body = RaftMessages {
            cluster_id: cluster_id.read().map(|c| c.clone()).unwrap_or_default(),
            messages,
        }
        .encode();
        match l
            .call_encoded(RAFT_MESSAGES_API, WIRE_VERSION, body, SEND_TIMEOUT)
            .await
        {
            Ok(resp) => match decode_error(resp) {
                Ok(0) => {}
                Ok(code) if code == ErrorCode::InconsistentClusterId.code() => {
                    tracing::error!(peer, %addr, "controller voter belongs to another cluster (different cluster.id); not talking to it");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Ok(code) => tracing::debug!(peer, code, "raft messages refused"),
                Err(e) => {
                    tracing::warn!(peer, error = %e, "bad RaftMessages response; reconnecting");
                    link = None;
                }
            },
            Err(e) => {
                tracing::debug!(peer, error = %e, "sending raft messages failed; reconnecting");
                link = None;
            }
        }
    }
}
