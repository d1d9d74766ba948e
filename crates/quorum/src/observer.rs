//! A broker-only node follows the metadata log as an *observer*, as KRaft brokers do: it pulls
//! committed entries (or a snapshot) from a voter with `MetadataFetch` long polls, applies them
//! in order to its own image and publishes `(image, delta)` exactly as a voter does. It never
//! votes and never sees an uncommitted entry, so it can never have to undo anything.
//!
//! [`ObserverState`] is the sans-IO part (apply a fetch result); [`start`] runs the fetch
//! loop.

use crate::node::{CommittedRead, Publication};
use crate::runtime::Leadership;
use crate::transport::SharedClusterId;
use crate::wire::{decode_fetch_response, MetadataFetch, METADATA_FETCH_API, WIRE_VERSION};
use client::{ClientConfig, NodeLink};
use metadata::{decode_batch, MetadataDelta, MetadataImage};
use model::ErrorCode;
use raft::eraftpb::EntryType;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// How long a fetch waits at the voter for new entries.
const LONG_POLL_MS: u32 = 500;
const FETCH_BYTES_MAX: u32 = 8 << 20;

/// What an observer has applied.
#[derive(Debug, Clone)]
pub struct ObserverState {
    image: Arc<MetadataImage>,
    applied: u64,
}

impl Default for ObserverState {
    fn default() -> Self {
        ObserverState {
            image: Arc::new(MetadataImage::empty()),
            applied: 0,
        }
    }
}

impl ObserverState {
    /// The offset to fetch from.
    pub fn next_offset(&self) -> u64 {
        self.applied + 1
    }

    pub fn applied(&self) -> u64 {
        self.applied
    }

    pub fn image(&self) -> &Arc<MetadataImage> {
        &self.image
    }

    /// Applies a fetch result; returns the new image and delta when anything changed.
    /// Entries that do not continue the applied log are ignored (a stale response).
    pub fn apply(&mut self, read: CommittedRead) -> Result<Option<Publication>, String> {
        // The first image an observer publishes is all it knows: publishers reconcile fully.
        let mut delta = MetadataDelta {
            full: self.applied == 0,
            ..MetadataDelta::default()
        };
        let mut image: Option<MetadataImage> = None;
        if let Some(snap) = read.snapshot {
            let index = snap.get_metadata().index;
            if index > self.applied {
                let records = decode_batch(&snap.data)
                    .map_err(|e| format!("metadata snapshot at {index}: {e}"))?;
                image = Some(MetadataImage::from_snapshot(index as i64, &records));
                self.applied = index;
                delta.full = true;
            }
        }
        for e in read.entries {
            if e.index != self.applied + 1 {
                continue;
            }
            let img = image.get_or_insert_with(|| (*self.image).clone());
            if e.entry_type == EntryType::EntryNormal {
                let records = decode_batch(&e.data)
                    .map_err(|err| format!("committed metadata entry {}: {err}", e.index))?;
                img.apply_batch(e.index as i64, &records, &mut delta);
            }
            img.offset = e.index as i64;
            self.applied = e.index;
        }
        Ok(image.map(|img| {
            self.image = Arc::new(img);
            Publication {
                image: self.image.clone(),
                delta,
            }
        }))
    }
}

/// How an observer reaches the quorum.
#[derive(Clone, Debug)]
pub struct ObserverConfig {
    pub node_id: i32,
    /// `(id, controller listener address)` of every voter.
    pub voters: Vec<(u64, String)>,
    pub client: ClientConfig,
    pub cluster_id: SharedClusterId,
}

/// A running observer: who leads (as the voters say), and why it stopped, if it did.
#[derive(Debug, Clone)]
pub struct ObserverHandle {
    pub leadership: watch::Receiver<Leadership>,
    /// Set when the observer gave up for good (the quorum belongs to another cluster).
    pub fatal: watch::Receiver<Option<String>>,
}

/// Starts the fetch loop on the current tokio runtime; publications go to `publications`.
pub fn start(
    config: ObserverConfig,
    publications: mpsc::UnboundedSender<Publication>,
    cancel: CancellationToken,
) -> ObserverHandle {
    let (leadership_tx, leadership) = watch::channel(Leadership::default());
    let (fatal_tx, fatal) = watch::channel(None);
    tokio::spawn(async move {
        let mut state = ObserverState::default();
        let mut link: Option<(u64, NodeLink)> = None;
        let mut target = 0usize;
        let mut backoff = Duration::from_millis(20);
        loop {
            if cancel.is_cancelled() {
                return;
            }
            // Prefer the leader; else walk the voters.
            let leader = leadership_tx.borrow().leader_id;
            let want = leader
                .and_then(|l| config.voters.iter().position(|(id, _)| *id == l))
                .unwrap_or(target % config.voters.len().max(1));
            let Some((voter_id, addr)) = config.voters.get(want).cloned() else {
                return;
            };
            if link
                .as_ref()
                .is_none_or(|(id, l)| *id != voter_id || l.is_closed())
            {
                link = match NodeLink::connect(&addr, &config.client).await {
                    Ok(l) => Some((voter_id, l)),
                    Err(e) => {
                        tracing::debug!(voter = voter_id, %addr, error = %e, "cannot reach controller voter");
                        target += 1;
                        leadership_tx.send_modify(|l| l.leader_id = None);
                        tokio::select! {
                            _ = cancel.cancelled() => return,
                            _ = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                        continue;
                    }
                };
            }
            let Some((_, l)) = link.as_ref() else {
                continue;
            };
            let request = MetadataFetch {
                cluster_id: config
                    .cluster_id
                    .read()
                    .map(|c| c.clone())
                    .unwrap_or_default(),
                node_id: config.node_id,
                from: state.next_offset(),
                max_bytes: FETCH_BYTES_MAX,
                max_wait_ms: LONG_POLL_MS,
            };
            let timeout = Duration::from_millis(u64::from(LONG_POLL_MS) + 10_000);
            let response = tokio::select! {
                _ = cancel.cancelled() => return,
                r = l.call_encoded(METADATA_FETCH_API, WIRE_VERSION, request.encode(), timeout) => r,
            };
            let (code, read) = match response
                .map_err(|e| e.to_string())
                .and_then(|b| decode_fetch_response(b).map_err(|e| e.to_string()))
            {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(voter = voter_id, error = %e, "metadata fetch failed");
                    link = None;
                    target += 1;
                    continue;
                }
            };
            if code == ErrorCode::InconsistentClusterId.code() {
                let msg = format!(
                    "the controller quorum at {addr} belongs to another cluster (cluster.id differs)"
                );
                tracing::error!("{msg}");
                let _ = fatal_tx.send(Some(msg));
                return;
            }
            if code != 0 {
                target += 1;
                link = None;
                continue;
            }
            backoff = Duration::from_millis(20);
            let leader_id = Some(read.leader_id).filter(|l| *l != 0);
            let term = read.term;
            let high_watermark = read.high_watermark;
            match state.apply(read) {
                Ok(Some(p)) => {
                    if let Ok(mut c) = config.cluster_id.write() {
                        if c.is_empty() && !p.image.cluster_id.is_empty() {
                            *c = p.image.cluster_id.clone();
                        }
                    }
                    let _ = publications.send(p);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(error = %e, "undecodable committed metadata; stopping the observer");
                    let _ = fatal_tx.send(Some(e));
                    return;
                }
            }
            let applied = state.applied();
            leadership_tx.send_if_modified(|l| {
                let next = Leadership {
                    leader_id: leader_id.or(l.leader_id),
                    term,
                    active: false,
                    applied,
                    log_end: high_watermark.max(applied),
                };
                let changed = *l != next;
                *l = next;
                changed
            });
            if applied < high_watermark {
                continue;
            }
        }
    });
    ObserverHandle { leadership, fatal }
}
