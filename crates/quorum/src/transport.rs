//! Raft messages between voters over the CONTROLLER listener: one task per peer with a bounded
//! queue, one connection (the `client` crate's, reused), batches sent as `RaftMessages`.
//!
//! Best effort by design: a full queue or a failed connection drops messages, and Raft
//! retransmits what matters. Nothing here blocks the quorum thread (`send` is a `try_send`).
//!
//! Peers refuse messages of another cluster (INCONSISTENT_CLUSTER_ID). When a majority of the
//! voters refuse this node's cluster id, this node can never be part of a quorum: `fatal`
//! says why, and the node stops (a minority that refuses a node is the minority's problem).

use crate::runtime::Transport;
use crate::wire::{decode_error, RaftMessages, RAFT_MESSAGES_API, WIRE_VERSION};
use client::{ClientConfig, NodeLink};
use model::ErrorCode;
use raft::eraftpb::Message;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

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
    fatal: watch::Receiver<Option<String>>,
}

/// Which peers refused this node's cluster id on their last answer; set `fatal` once they
/// are a majority of the voters.
struct Refusals {
    voters: usize,
    refused: Mutex<HashMap<u64, bool>>,
    fatal: watch::Sender<Option<String>>,
    cluster_id: SharedClusterId,
}

impl Refusals {
    fn answered(&self, peer: u64, refused: bool) {
        let Ok(mut map) = self.refused.lock() else {
            return;
        };
        map.insert(peer, refused);
        let mut ids: Vec<u64> = map.iter().filter(|(_, r)| **r).map(|(id, _)| *id).collect();
        if ids.len() > self.voters / 2 {
            ids.sort_unstable();
            let mine = self
                .cluster_id
                .read()
                .map(|c| c.clone())
                .unwrap_or_default();
            let why = format!(
                "cluster.id is {mine}, but controller voters {ids:?} (a majority of the quorum) belong to another cluster; this node cannot join it"
            );
            self.fatal.send_if_modified(|f| {
                let first = f.is_none();
                if first {
                    *f = Some(why);
                }
                first
            });
        }
    }
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
        let (fatal_tx, fatal) = watch::channel(None);
        let refusals = Arc::new(Refusals {
            voters: peers.len() + 1,
            refused: Mutex::new(HashMap::new()),
            fatal: fatal_tx,
            cluster_id: cluster_id.clone(),
        });
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
                refusals.clone(),
            ));
        }
        Arc::new(PeerTransport {
            peers: senders,
            fatal,
        })
    }

    /// Why this node cannot be a voter of this quorum, once a majority of it refused this
    /// node's cluster id (`None` until then).
    pub fn fatal(&self) -> watch::Receiver<Option<String>> {
        self.fatal.clone()
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
    refusals: Arc<Refusals>,
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
                Ok(0) => refusals.answered(peer, false),
                Ok(code) if code == ErrorCode::InconsistentClusterId.code() => {
                    refusals.answered(peer, true);
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
